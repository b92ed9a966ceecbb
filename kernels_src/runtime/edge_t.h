/* edge_t.h: portable code for the blocks no kernel covers, with the kernel ABI's
 * semantics (sequential sum over p; beta == 0 never reads C).  Included by the
 * executors with AT_T, AT_EDGE_FN (the function's name) and AT_EDGE_ATTR (empty,
 * or __arm_streaming in the SME2 executor, whose steps run in streaming mode:
 * plain loops, which the compiler keeps streaming-legal).
 *
 * Each element is one chain of dependent multiply-adds over p, so a loop over
 * one element at a time runs at the adder's latency, not its throughput: 1.8
 * GFLOPS for a 15 x 15 x 64 block on a Xeon VM.  Blocks of 4 rows x 2 columns
 * keep eight chains in flight and load each element of A and B once for them
 * (3.7x faster there); an odd last column goes 4 rows at a time, the rows under
 * the blocks one row by 4 columns, then one element at a time.  Every element's
 * sum keeps its order over p, so the bits do not depend on the blocking.  The
 * transpositions are strides (ai between rows of op(A), ap between its columns;
 * bp, bj for op(B)), not branches in the inner loops. */
#ifndef AT_EDGE_STORE
#define AT_EDGE_STORE
#define AT_EDGE_PUT(c, s) ((c) = beta == (AT_T)0 ? alpha * (s) : alpha * (s) + beta * (c))
#endif

static void AT_EDGE_FN(int64_t K, const AT_T *A, int64_t lda, int ta, const AT_T *B, int64_t ldb,
                       int tb, AT_T *C, int64_t ldc, int mb, int nb, AT_T alpha,
                       AT_T beta) AT_EDGE_ATTR
{
    const int64_t ai = ta ? lda : 1, ap = ta ? 1 : lda, bj = tb ? 1 : ldb, bp = tb ? ldb : 1;
    const int rows4 = mb / 4 * 4, cols2 = nb / 2 * 2;
    for (int j = 0; j < cols2; j += 2) {
        const AT_T *b0 = B + j * bj, *b1 = b0 + bj;
        AT_T *c0 = C + j * ldc, *c1 = c0 + ldc;
        for (int i = 0; i < rows4; i += 4) {
            const AT_T *a = A + i * ai;
            AT_T s00 = 0, s10 = 0, s20 = 0, s30 = 0, s01 = 0, s11 = 0, s21 = 0, s31 = 0;
            for (int64_t p = 0; p < K; p++) {
                const AT_T *x = a + p * ap;
                AT_T a0 = x[0], a1 = x[ai], a2 = x[2 * ai], a3 = x[3 * ai];
                AT_T u = b0[p * bp], v = b1[p * bp];
                s00 += a0 * u;
                s10 += a1 * u;
                s20 += a2 * u;
                s30 += a3 * u;
                s01 += a0 * v;
                s11 += a1 * v;
                s21 += a2 * v;
                s31 += a3 * v;
            }
            AT_EDGE_PUT(c0[i], s00);
            AT_EDGE_PUT(c0[i + 1], s10);
            AT_EDGE_PUT(c0[i + 2], s20);
            AT_EDGE_PUT(c0[i + 3], s30);
            AT_EDGE_PUT(c1[i], s01);
            AT_EDGE_PUT(c1[i + 1], s11);
            AT_EDGE_PUT(c1[i + 2], s21);
            AT_EDGE_PUT(c1[i + 3], s31);
        }
    }
    /* The last column when nb is odd, 4 rows at a time beside the blocks. */
    if (cols2 < nb) {
        const AT_T *b = B + cols2 * bj;
        AT_T *c = C + cols2 * ldc;
        for (int i = 0; i < rows4; i += 4) {
            const AT_T *a = A + i * ai;
            AT_T s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (int64_t p = 0; p < K; p++) {
                const AT_T *x = a + p * ap;
                AT_T u = b[p * bp];
                s0 += x[0] * u;
                s1 += x[ai] * u;
                s2 += x[2 * ai] * u;
                s3 += x[3 * ai] * u;
            }
            AT_EDGE_PUT(c[i], s0);
            AT_EDGE_PUT(c[i + 1], s1);
            AT_EDGE_PUT(c[i + 2], s2);
            AT_EDGE_PUT(c[i + 3], s3);
        }
    }
    /* The rows under the blocks, one row by 4 columns at a time, then element by element. */
    for (int i = rows4; i < mb; i++) {
        const AT_T *a = A + i * ai;
        int j = 0;
        for (; j + 4 <= nb; j += 4) {
            const AT_T *b = B + j * bj;
            AT_T s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (int64_t p = 0; p < K; p++) {
                AT_T x = a[p * ap];
                const AT_T *y = b + p * bp;
                s0 += x * y[0];
                s1 += x * y[bj];
                s2 += x * y[2 * bj];
                s3 += x * y[3 * bj];
            }
            AT_EDGE_PUT(C[i + j * ldc], s0);
            AT_EDGE_PUT(C[i + (j + 1) * ldc], s1);
            AT_EDGE_PUT(C[i + (j + 2) * ldc], s2);
            AT_EDGE_PUT(C[i + (j + 3) * ldc], s3);
        }
        for (; j < nb; j++) {
            const AT_T *b = B + j * bj;
            AT_T s = 0;
            for (int64_t p = 0; p < K; p++) s += a[p * ap] * b[p * bp];
            AT_EDGE_PUT(C[i + j * ldc], s);
        }
    }
}
