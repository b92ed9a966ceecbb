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

#define AT_NCHAINS 16
#define AT_CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) \
                     X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)

/* The pace loop (pace_t.h), in f32. */
#define AT_T float
#define AT_V __m512
#define AT_LOADU _mm512_loadu_ps
#define AT_SET1 _mm512_set1_ps
#define AT_MADD(acc, x, y) _mm512_fmadd_ps(x, y, acc)
#define AT_ADD _mm512_add_ps
#define AT_HSUM _mm512_reduce_add_ps
#include "pace_t.h"

/* See peak_t.h for what each definition means. */
#define AT_RUN run_f32
#define AT_T float
#define AT_V __m512
#define AT_SET1 _mm512_set1_ps
#define AT_FMA _mm512_fmadd_ps
#define AT_ADD _mm512_add_ps
#define AT_HSUM _mm512_reduce_add_ps
#include "peak_t.h"

#define AT_RUN run_f64
#define AT_T double
#define AT_V __m512d
#define AT_SET1 _mm512_set1_pd
#define AT_FMA _mm512_fmadd_pd
#define AT_ADD _mm512_add_pd
#define AT_HSUM _mm512_reduce_add_pd
#include "peak_t.h"

/* at_peak: 16 f32 or 8 f64 lanes a vector. */
AT_PEAK_OF_CHAINS(16, 8)
AT_PACE_OF_LOOP
