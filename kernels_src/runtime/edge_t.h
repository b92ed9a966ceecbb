/* edge_t.h: portable code for the blocks no kernel covers, with the kernel ABI's
 * semantics (sequential sum over p; beta == 0 never reads C).  Included by the
 * executors with AT_T, AT_EDGE_FN (the function's name) and AT_EDGE_ATTR (empty,
 * or __arm_streaming in the SME2 executor, whose steps run in streaming mode:
 * plain loops, which the compiler keeps streaming-legal). */
static void AT_EDGE_FN(int64_t K, const AT_T *A, int64_t lda, int ta, const AT_T *B, int64_t ldb,
                       int tb, AT_T *C, int64_t ldc, int mb, int nb, AT_T alpha,
                       AT_T beta) AT_EDGE_ATTR
{
    for (int j = 0; j < nb; j++)
        for (int i = 0; i < mb; i++) {
            AT_T s = 0;
            for (int64_t p = 0; p < K; p++) {
                AT_T a = ta ? A[p + i * lda] : A[i + p * lda];
                AT_T b = tb ? B[j + p * ldb] : B[p + j * ldb];
                s += a * b;
            }
            AT_T *c = &C[i + j * ldc];
            *c = beta == (AT_T)0 ? alpha * s : alpha * s + beta * *c;
        }
}
