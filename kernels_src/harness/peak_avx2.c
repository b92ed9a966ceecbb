/* Peak FMA throughput of one core with 256-bit AVX2 + FMA vectors.
 *
 * 12 independent chains cover an FMA latency of 4-5 cycles on two pipes, and
 * 12 + 2 constants fit the 16 ymm registers without spilling. */
#if !defined(__AVX2__) || !defined(__FMA__)
#error "peak_avx2.c needs AVX2 and FMA: compile it with the avx2 target's flags"
#endif

#include <immintrin.h>

#include "peak_common.h"

static volatile double peak_sink;
/* The multiplier and addend come through volatiles: with literal constants
 * compilers are free to (and do) evaluate part of the loop at compile time. */
static volatile float peak_m32 = 0.9999999f, peak_c32 = 1e-7f;
static volatile double peak_m64 = 0.9999999, peak_c64 = 1e-7;

#define AT_CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

static double hsum256(__m256d v)
{
    __m128d lo = _mm256_castpd256_pd128(v), hi = _mm256_extractf128_pd(v, 1);
    lo = _mm_add_pd(lo, hi);
    return _mm_cvtsd_f64(_mm_add_sd(lo, _mm_unpackhi_pd(lo, lo)));
}

static void run_f32(long long iters)
{
    /* acc = acc * m + c converges to about 1: no overflow, no denormals. */
    const __m256 m = _mm256_set1_ps(peak_m32), c = _mm256_set1_ps(peak_c32);
#define DECL(i) __m256 a##i = _mm256_set1_ps(1.0f + (float)(i) * 1e-3f);
#define STEP(i) a##i = _mm256_fmadd_ps(a##i, m, c);
#define SUM(i) s = _mm256_add_ps(s, a##i);
    AT_CHAINS(DECL)
    for (long long it = 0; it < iters; ++it) {
        AT_CHAINS(STEP)
    }
    __m256 s = _mm256_setzero_ps();
    AT_CHAINS(SUM)
    peak_sink = hsum256(_mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(s)),
                                      _mm256_cvtps_pd(_mm256_extractf128_ps(s, 1))));
#undef DECL
#undef STEP
#undef SUM
}

static void run_f64(long long iters)
{
    const __m256d m = _mm256_set1_pd(peak_m64), c = _mm256_set1_pd(peak_c64);
#define DECL(i) __m256d a##i = _mm256_set1_pd(1.0 + (double)(i) * 1e-3);
#define STEP(i) a##i = _mm256_fmadd_pd(a##i, m, c);
#define SUM(i) s = _mm256_add_pd(s, a##i);
    AT_CHAINS(DECL)
    for (long long it = 0; it < iters; ++it) {
        AT_CHAINS(STEP)
    }
    __m256d s = _mm256_setzero_pd();
    AT_CHAINS(SUM)
    peak_sink = hsum256(s);
#undef DECL
#undef STEP
#undef SUM
}

void at_peak(double *gflops_f32, double *gflops_f64)
{
    /* 12 chains x lanes x 2 flops per FMA. */
    if (gflops_f32)
        *gflops_f32 = at_peak_measure(run_f32, 12.0 * 8.0 * 2.0);
    if (gflops_f64)
        *gflops_f64 = at_peak_measure(run_f64, 12.0 * 4.0 * 2.0);
}
