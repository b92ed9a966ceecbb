/* Computes the right answer but loads whole 8-element columns of A although
 * only AT_MR (< 8) rows belong to it: the "full vector and hope" tail the ABI
 * forbids.  The last column's load crosses the end of A's footprint, which
 * the harness's guard page turns into a fault.  Parameters as in naive.c (nn). */
#include <stdint.h>

#define AT_VLEN 8

void AT_NAME(int64_t K, const AT_T *A, int64_t lda, const AT_T *B, int64_t ldb,
             AT_T *C, int64_t ldc, AT_T alpha, AT_T beta)
{
    /* volatile so the unused lanes are really loaded, as a vector load would. */
    const volatile AT_T *va = A;
    AT_T acc[AT_VLEN * AT_NR] = {0};
    for (int64_t p = 0; p < K; ++p) {
        AT_T col[AT_VLEN];
        for (int64_t i = 0; i < AT_VLEN; ++i)
            col[i] = va[i + p * lda];
        for (int64_t j = 0; j < AT_NR; ++j)
            for (int64_t i = 0; i < AT_MR; ++i)
                acc[i + j * AT_VLEN] += col[i] * B[p + j * ldb];
    }
    for (int64_t j = 0; j < AT_NR; ++j)
        for (int64_t i = 0; i < AT_MR; ++i)
            C[i + j * ldc] = beta == 0 ? alpha * acc[i + j * AT_VLEN]
                                       : alpha * acc[i + j * AT_VLEN] + beta * C[i + j * ldc];
}
