/* Peak FMA throughput of one core with 256-bit AVX2 + FMA vectors.
 *
 * 12 independent chains cover an FMA latency of 4-5 cycles on two pipes, and
 * 12 + 2 constants fit the 16 ymm registers without spilling. */
#if !defined(__AVX2__) || !defined(__FMA__)
#error "peak_avx2.c needs AVX2 and FMA: compile it with the avx2 target's flags"
#endif

#include <immintrin.h>

#include "peak_common.h"

#define AT_NCHAINS 12
#define AT_CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

static double hsum256_pd(__m256d v)
{
    __m128d lo = _mm256_castpd256_pd128(v), hi = _mm256_extractf128_pd(v, 1);
    lo = _mm_add_pd(lo, hi);
    return _mm_cvtsd_f64(_mm_add_sd(lo, _mm_unpackhi_pd(lo, lo)));
}

/* Summed in double: the f32 lanes widen to two __m256d. */
static double hsum256_ps(__m256 v)
{
    return hsum256_pd(_mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)),
                                    _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))));
}

/* The pace loop (pace_t.h), in f32. */
#define AT_T float
#define AT_V __m256
#define AT_LOADU _mm256_loadu_ps
#define AT_SET1 _mm256_set1_ps
#define AT_MADD(acc, x, y) _mm256_fmadd_ps(x, y, acc)
#define AT_ADD _mm256_add_ps
#define AT_HSUM hsum256_ps
#include "pace_t.h"

/* See peak_t.h for what each definition means. */
#define AT_RUN run_f32
#define AT_T float
#define AT_V __m256
#define AT_SET1 _mm256_set1_ps
#define AT_FMA _mm256_fmadd_ps
#define AT_ADD _mm256_add_ps
#define AT_HSUM hsum256_ps
#include "peak_t.h"

#define AT_RUN run_f64
#define AT_T double
#define AT_V __m256d
#define AT_SET1 _mm256_set1_pd
#define AT_FMA _mm256_fmadd_pd
#define AT_ADD _mm256_add_pd
#define AT_HSUM hsum256_pd
#include "peak_t.h"

/* at_peak: 8 f32 or 4 f64 lanes a vector. */
AT_PEAK_OF_CHAINS(8, 4)
AT_PACE_OF_LOOP
