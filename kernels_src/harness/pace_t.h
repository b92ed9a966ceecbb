/* The pace loop, written once for the peak_<isa>.c files with intrinsics (avx2,
 * avx512, neon): what a kernel's inner loop does, on operands in L1.
 *
 * The pace tells the install whether a timing was taken on a core left alone.  The
 * peak loop (peak_t.h) only multiplies and adds in registers, and a core whose SMT
 * sibling runs another guest's memory traffic keeps most of its FMA throughput
 * while its loads and its L1 are shared: on a 2-vCPU Xeon VM (family 6 model 207)
 * kernels ran at 0.6-0.7x their usual speed for seconds at a time with the peak
 * loop at 90-95 % of its own.  Of 224 samples of a 16x8 fp64 kernel slowed by 15 %
 * or more in one such stretch, the peak loop beside them flagged 48, a loop of two
 * vector loads and eight broadcasts a step 215.  So each step loads like a
 * kernel: two vectors of a column of A and four broadcasts of B, into eight
 * accumulators, from a 16 KiB buffer swept in order.
 *
 * A file defines, before including this once:
 *
 *   AT_T, AT_V              the element and vector type (f32)
 *   AT_LOADU(p)             the vector at p (unaligned)
 *   AT_SET1(x)              x in every lane
 *   AT_MADD(acc, x, y)      acc + x * y in every lane
 *   AT_ADD(a, b), AT_HSUM(v)  as in peak_t.h
 *
 * and gets run_pace(iters) (iters sweeps of the buffer) and pace_flops, the flops
 * of one sweep, for AT_PACE_OF_LOOP (peak_common.h).  It #undefs those macros, so
 * that peak_t.h's inclusions start clean. */

#define AT_PACE_LANES ((int)(sizeof(AT_V) / sizeof(AT_T)))
/* One step reads two vectors and four scalars. */
#define AT_PACE_STRIDE (2 * AT_PACE_LANES + 4)
#define AT_PACE_ELEMS (16384 / (int)sizeof(AT_T))
#define AT_PACE_STEPS (AT_PACE_ELEMS / AT_PACE_STRIDE)
/* Eight multiply-adds of a vector each, 2 flops a lane. */
#define AT_PACE_FLOPS ((double)AT_PACE_STEPS * 8.0 * 2.0 * AT_PACE_LANES)

static AT_T pace_buffer[AT_PACE_ELEMS] __attribute__((aligned(64)));
static const double pace_flops = AT_PACE_FLOPS;
static volatile double pace_sink;

static void run_pace(long long iters)
{
    /* Values near 1e-3: sums of their products grow by about 1e-4 a sweep, far
     * from overflow, and never denormal. */
    if (pace_buffer[0] == (AT_T)0)
        for (int i = 0; i < AT_PACE_ELEMS; ++i) pace_buffer[i] = (AT_T)1e-3 * (AT_T)(1 + i % 7);
    AT_V a0 = AT_SET1((AT_T)0), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (long long it = 0; it < iters; ++it) {
        const AT_T *p = pace_buffer;
        for (int s = 0; s < AT_PACE_STEPS; ++s, p += AT_PACE_STRIDE) {
            AT_V x0 = AT_LOADU(p), x1 = AT_LOADU(p + AT_PACE_LANES);
            AT_V b0 = AT_SET1(p[2 * AT_PACE_LANES]), b1 = AT_SET1(p[2 * AT_PACE_LANES + 1]);
            AT_V b2 = AT_SET1(p[2 * AT_PACE_LANES + 2]), b3 = AT_SET1(p[2 * AT_PACE_LANES + 3]);
            a0 = AT_MADD(a0, x0, b0);
            a1 = AT_MADD(a1, x1, b0);
            a2 = AT_MADD(a2, x0, b1);
            a3 = AT_MADD(a3, x1, b1);
            a4 = AT_MADD(a4, x0, b2);
            a5 = AT_MADD(a5, x1, b2);
            a6 = AT_MADD(a6, x0, b3);
            a7 = AT_MADD(a7, x1, b3);
        }
    }
    pace_sink = AT_HSUM(AT_ADD(AT_ADD(AT_ADD(a0, a1), AT_ADD(a2, a3)), AT_ADD(AT_ADD(a4, a5), AT_ADD(a6, a7))));
#if defined(__AVX__)
    _mm256_zeroupper(); /* as peak_t.h's loops */
#endif
}

#undef AT_T
#undef AT_V
#undef AT_LOADU
#undef AT_SET1
#undef AT_MADD
#undef AT_ADD
#undef AT_HSUM
#undef AT_PACE_LANES
#undef AT_PACE_STRIDE
#undef AT_PACE_ELEMS
#undef AT_PACE_STEPS
#undef AT_PACE_FLOPS
