/* A correct, naive micro-kernel with the autotune ABI, for the harness tests.
 *
 * The test prepends the parameters as macros: AT_NAME, AT_T (float or double),
 * AT_MR, AT_NR, AT_TA and AT_TB (0 or 1), so one readable body yields a kernel
 * for every dtype and transposition. */
#include <stdint.h>

#if !defined(AT_NAME) || !defined(AT_T) || !defined(AT_MR) || !defined(AT_NR) || \
    !defined(AT_TA) || !defined(AT_TB)
#error "define AT_NAME, AT_T, AT_MR, AT_NR, AT_TA and AT_TB before this body"
#endif

void AT_NAME(int64_t K, const AT_T *A, int64_t lda, const AT_T *B, int64_t ldb,
             AT_T *C, int64_t ldc, AT_T alpha, AT_T beta)
{
    for (int64_t j = 0; j < AT_NR; ++j) {
        for (int64_t i = 0; i < AT_MR; ++i) {
            AT_T acc = 0;
            for (int64_t p = 0; p < K; ++p) {
                AT_T a = AT_TA ? A[p + i * lda] : A[i + p * lda];
                AT_T b = AT_TB ? B[j + p * ldb] : B[p + j * ldb];
                acc += a * b;
            }
            /* beta == 0 must not read C, which may hold NaN. */
            C[i + j * ldc] = beta == 0 ? alpha * acc : alpha * acc + beta * C[i + j * ldc];
        }
    }
}
