/* Peak FMA throughput of one core with 512-bit vectors.
 *
 * 16 independent accumulator chains: enough to cover an FMA latency of 4 cycles
 * on two FMA pipes (8 in flight) with room to spare, while 16 + 2 constants stay
 * well inside the 32 zmm registers so nothing spills. */
#ifndef __AVX512F__
#error "peak_avx512.c needs AVX-512F: compile it with the avx512 target's flags"
#endif

#include <immintrin.h>

#include "peak_common.h"

static volatile double peak_sink;
/* The multiplier and addend come through volatiles: with literal constants
 * compilers are free to (and do) evaluate part of the loop at compile time. */
static volatile float peak_m32 = 0.9999999f, peak_c32 = 1e-7f;
static volatile double peak_m64 = 0.9999999, peak_c64 = 1e-7;

#define AT_CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) \
                     X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)

static void run_f32(long long iters)
{
    /* acc = acc * m + c converges to c / (1 - m), about 1: no overflow, no denormals. */
    const __m512 m = _mm512_set1_ps(peak_m32), c = _mm512_set1_ps(peak_c32);
#define DECL(i) __m512 a##i = _mm512_set1_ps(1.0f + (float)(i) * 1e-3f);
#define STEP(i) a##i = _mm512_fmadd_ps(a##i, m, c);
#define SUM(i) s = _mm512_add_ps(s, a##i);
    AT_CHAINS(DECL)
    for (long long it = 0; it < iters; ++it) {
        AT_CHAINS(STEP)
    }
    __m512 s = _mm512_setzero_ps();
    AT_CHAINS(SUM)
    peak_sink = _mm512_reduce_add_ps(s);
#undef DECL
#undef STEP
#undef SUM
}

static void run_f64(long long iters)
{
    const __m512d m = _mm512_set1_pd(peak_m64), c = _mm512_set1_pd(peak_c64);
#define DECL(i) __m512d a##i = _mm512_set1_pd(1.0 + (double)(i) * 1e-3);
#define STEP(i) a##i = _mm512_fmadd_pd(a##i, m, c);
#define SUM(i) s = _mm512_add_pd(s, a##i);
    AT_CHAINS(DECL)
    for (long long it = 0; it < iters; ++it) {
        AT_CHAINS(STEP)
    }
    __m512d s = _mm512_setzero_pd();
    AT_CHAINS(SUM)
    peak_sink = _mm512_reduce_add_pd(s);
#undef DECL
#undef STEP
#undef SUM
}

void at_peak(double *gflops_f32, double *gflops_f64)
{
    /* 16 chains x lanes x 2 flops per FMA. */
    if (gflops_f32)
        *gflops_f32 = at_peak_measure(run_f32, 16.0 * 16.0 * 2.0);
    if (gflops_f64)
        *gflops_f64 = at_peak_measure(run_f64, 16.0 * 8.0 * 2.0);
}
