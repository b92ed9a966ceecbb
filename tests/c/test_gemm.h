/* What the tests' C drivers share (tests/c/sequence.c, tests/arm_runtime/driver.c):
 * random operands, element access to float or double operands in any layout and
 * transposition, and the double-precision reference entry of op(A) op(B). */
#ifndef AT_TEST_GEMM_H
#define AT_TEST_GEMM_H
#include <math.h>
#include <stdint.h>

#include "autotune.h"

/* xorshift64*, seeded the same in every run so a failing case is found again by
 * running the driver again. */
static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static inline uint64_t next(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 2685821657736338717ULL;
}
/* Uniform in [-1, 1): the top 53 bits as a double. */
static inline double urand(void) { return (double)(next() >> 11) * (2.0 / 9007199254740992.0) - 1.0; }

/* Element i of a float (dt 0) or double (dt 1) array, as a double. */
static inline double get(const void *p, int dt, int64_t i)
{
    return dt ? ((const double *)p)[i] : ((const float *)p)[i];
}
static inline void set(void *p, int dt, int64_t i, double v)
{
    if (dt)
        ((double *)p)[i] = v;
    else
        ((float *)p)[i] = (float)v;
}

/* Offset of element (r, c) of an operand stored (row-major or not, transposed or not)
 * with leading dim ld. */
static inline int64_t at(int row, int trans, int64_t r, int64_t c, int64_t ld)
{
    int64_t a = trans ? c : r, b = trans ? r : c; /* (a, b) as stored */
    return row ? a * ld + b : a + b * ld;
}
/* Elements an r x c operand spans: ld times its outer extent (at least one). */
static inline int64_t extent(int row, int trans, int64_t r, int64_t c, int64_t ld)
{
    int64_t outer = row ? (trans ? c : r) : (trans ? r : c);
    return ld * (outer > 0 ? outer : 1);
}

/* Entry (i, j) of op(A) op(B) summed in double; *magnitude gets the sum of |terms|,
 * from which the caller's tolerance follows (K and the dtype's epsilon times it). */
static inline double ref_entry(int dt, int row, int ta, int tb, const void *A, int64_t lda, const void *B,
                               int64_t ldb, int64_t K, int64_t i, int64_t j, double *magnitude)
{
    double s = 0, m = 0;
    for (int64_t p = 0; p < K; p++) {
        double x = get(A, dt, at(row, ta, i, p, lda)), y = get(B, dt, at(row, tb, p, j, ldb));
        s += x * y;
        m += fabs(x * y);
    }
    *magnitude = m;
    return s;
}

/* Planner parameters that send every problem down the packed path in small blocks
 * (several blocks and K slices even for small shapes) and split every one over the
 * threads: the paths a tuned table may choose only for large shapes, on small ones. */
static inline at_tune_params packed_everywhere(at_tune_params p)
{
    for (int d = 0; d < 2; d++) {
        p.pack_flops[d] = 0;
        p.blk_m[d] = 40;
        p.blk_n[d] = 36;
        p.blk_k[d] = 29;
    }
    p.thread_flops = 0;
    return p;
}
#endif
