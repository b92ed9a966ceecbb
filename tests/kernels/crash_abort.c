/* Gives up with abort(), as a kernel tripping an assert would: SIGABRT.
 * Parameters as in naive.c. */
#include <stdint.h>
#include <stdlib.h>

void AT_NAME(int64_t K, const AT_T *A, int64_t lda, const AT_T *B, int64_t ldb,
             AT_T *C, int64_t ldc, AT_T alpha, AT_T beta)
{
    (void)K, (void)A, (void)lda, (void)B, (void)ldb, (void)C, (void)ldc, (void)alpha, (void)beta;
    abort();
}
