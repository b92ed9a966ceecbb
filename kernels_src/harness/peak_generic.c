/* Peak multiply-add throughput of plain C, compiled with the generic flags.
 *
 * No intrinsics: this is the ceiling the portable kernels can reach with
 * whatever the compiler makes of independent multiply-adds (SSE2 mul + add on
 * baseline x86-64, contracted FMAs on aarch64).  32 independent chains leave the
 * compiler room to vectorise and to hide the latency. */
#include "peak_common.h"

#define AT_NCHAINS 32

static volatile double peak_sink;
/* The multiplier and addend come through volatiles: with literal constants
 * compilers are free to (and do) evaluate part of the loop at compile time. */
static volatile float peak_m32 = 0.9999999f, peak_c32 = 1e-7f;
static volatile double peak_m64 = 0.9999999, peak_c64 = 1e-7;

/* run_f32 and run_f64: the same plain loop over an array of either type.  Not
 * peak_t.h: its chains are variables of their own, listed one by one, and gcc
 * does not vectorise 32 such scalars.  Nor an array in peak_t.h's order: what gcc
 * makes of this loop changes with details such as whether the volatiles are read
 * before acc is set (then gcc 12 -O3 on x86-64 keeps the f32 chains in registers
 * in the timed runs, where this order stores and reloads them every iteration).
 * This is the loop it has always measured. */
#define AT_GENERIC_RUN(name, T, m_in, c_in)                                    \
    static void name(long long iters)                                          \
    {                                                                          \
        T acc[AT_NCHAINS];                                                     \
        for (int i = 0; i < AT_NCHAINS; ++i)                                   \
            acc[i] = (T)1 + (T)i * (T)1e-3;                                    \
        /* acc = acc * m + c converges to about 1: no overflow or denormals. */ \
        const T m = m_in, c = c_in;                                            \
        for (long long it = 0; it < iters; ++it)                               \
            for (int i = 0; i < AT_NCHAINS; ++i)                               \
                acc[i] = acc[i] * m + c;                                       \
        double s = 0.0;                                                        \
        for (int i = 0; i < AT_NCHAINS; ++i)                                   \
            s += acc[i];                                                       \
        peak_sink = s;                                                         \
    }

AT_GENERIC_RUN(run_f32, float, peak_m32, peak_c32)
AT_GENERIC_RUN(run_f64, double, peak_m64, peak_c64)

/* The pace loop of pace_t.h in plain C: per step a run of four elements (a
 * column of A) and two scalars (of B) into eight sums, from a 16 KiB buffer
 * swept in order, each sum a variable of its own (an array of sums, kept in
 * memory, ran at 5-11 GFLOPS from one call to the next on an idle core).  Loads
 * as a portable kernel does; see pace_t.h for why. */
#define AT_PACE_STEPS (4096 / 6)
static float pace_buffer[4096];
static const double pace_flops = AT_PACE_STEPS * 8.0 * 2.0;

static void run_pace(long long iters)
{
    if (pace_buffer[0] == 0.0f)
        for (int i = 0; i < 4096; ++i) pace_buffer[i] = 1e-3f * (float)(1 + i % 7);
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    for (long long it = 0; it < iters; ++it) {
        const float *p = pace_buffer;
        for (int s = 0; s < AT_PACE_STEPS; ++s, p += 6) {
            s0 += p[0] * p[4];
            s1 += p[1] * p[4];
            s2 += p[2] * p[4];
            s3 += p[3] * p[4];
            s4 += p[0] * p[5];
            s5 += p[1] * p[5];
            s6 += p[2] * p[5];
            s7 += p[3] * p[5];
        }
    }
    peak_sink = (double)s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
}

/* at_peak: one lane a chain. */
AT_PEAK_OF_CHAINS(1, 1)
AT_PACE_OF_LOOP
