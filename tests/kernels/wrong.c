/* A kernel with a classic bug: its K loop stops one iteration early, so every
 * K >= 1 case is wrong.  Parameters as in naive.c (nn only). */
#include <stdint.h>

void AT_NAME(int64_t K, const AT_T *A, int64_t lda, const AT_T *B, int64_t ldb,
             AT_T *C, int64_t ldc, AT_T alpha, AT_T beta)
{
    for (int64_t j = 0; j < AT_NR; ++j) {
        for (int64_t i = 0; i < AT_MR; ++i) {
            AT_T acc = 0;
            for (int64_t p = 0; p + 1 < K; ++p)
                acc += A[i + p * lda] * B[p + j * ldb];
            C[i + j * ldc] = beta == 0 ? alpha * acc : alpha * acc + beta * C[i + j * ldc];
        }
    }
}
