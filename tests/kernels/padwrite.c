/* Computes the right block but first zeroes the row just below it in every
 * column but the last: harmless when ldc == mr (those elements are the next
 * column's, overwritten later), a corruption of the caller's data when ldc > mr.
 * Parameters as in naive.c (nn only). */
#include <stdint.h>

void AT_NAME(int64_t K, const AT_T *A, int64_t lda, const AT_T *B, int64_t ldb,
             AT_T *C, int64_t ldc, AT_T alpha, AT_T beta)
{
    AT_T saved[AT_NR];
    for (int64_t j = 0; j + 1 < AT_NR; ++j) {
        saved[j] = C[AT_MR + j * ldc];
        C[AT_MR + j * ldc] = 0;
    }
    for (int64_t j = 0; j < AT_NR; ++j) {
        for (int64_t i = 0; i < AT_MR; ++i) {
            AT_T acc = 0;
            for (int64_t p = 0; p < K; ++p)
                acc += A[i + p * lda] * B[p + j * ldb];
            /* With ldc == mr the zeroed element is C[0, j+1]: give it back its
             * input before it is read, so only the padded case misbehaves. */
            AT_T c = C[i + j * ldc];
            if (ldc == AT_MR && i == 0 && j > 0)
                c = saved[j - 1];
            C[i + j * ldc] = beta == 0 ? alpha * acc : alpha * acc + beta * c;
        }
    }
}
