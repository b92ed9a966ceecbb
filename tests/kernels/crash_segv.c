/* Stores through an address the compiler cannot see (it comes from a
 * volatile), so the process dies of a genuine SIGSEGV at page zero rather than
 * a trap instruction the compiler would substitute for a visible null store.
 * Parameters as in naive.c. */
#include <stdint.h>

void AT_NAME(int64_t K, const AT_T *A, int64_t lda, const AT_T *B, int64_t ldb,
             AT_T *C, int64_t ldc, AT_T alpha, AT_T beta)
{
    volatile uintptr_t address = 16;
    (void)K, (void)A, (void)lda, (void)B, (void)ldb, (void)ldc, (void)alpha, (void)beta;
    *(volatile AT_T *)address = C[0];
}
