/* Never returns: the caller's per-kernel timeout must reject it.
 * Parameters as in naive.c. */
#include <stdint.h>

void AT_NAME(int64_t K, const AT_T *A, int64_t lda, const AT_T *B, int64_t ldb,
             AT_T *C, int64_t ldc, AT_T alpha, AT_T beta)
{
    volatile int64_t spin = 0;
    (void)K, (void)A, (void)lda, (void)B, (void)ldb, (void)C, (void)ldc, (void)alpha, (void)beta;
    for (;;)
        spin = spin + 1;
}
