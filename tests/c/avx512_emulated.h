/* avx512_emulated.h: the AVX-512 intrinsics of qgemm.c's quantize_block_avx512 in plain C,
 * so tests/c/quantise_check.c (built with AT_EMULATE_AVX512) runs that function's own
 * source on a CPU without AVX-512.  Each is written from Intel's definition of its
 * instruction, lane by lane: a test of the function's data flow (halves, lane order,
 * masks, clipping, narrowing, reductions), not of the compiler's encoding, which
 * tests/test_quant_zmm.py reads with objdump.
 *
 * Included after <immintrin.h>, whose definitions stay as they are, and before qgemm.c,
 * whose uses of the names below the macros send here. */
#ifndef AVX512_EMULATED_H
#define AVX512_EMULATED_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__)
/* 512-bit values passed between these functions without AVX512F: GCC notes that the ABI
 * of such calls differs, which does not matter to static functions of one file. */
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

/* The registers' lanes as arrays: a value goes in and out by memcpy, whatever its vector type. */
typedef struct { float f[16]; } emu_ps;
typedef struct { double d[8]; } emu_pd;
typedef struct { int32_t i[16]; } emu_si;

#define EMU_IN(type, value) \
    ({ type lanes_; __typeof__(value) v_ = (value); memcpy(&lanes_, &v_, sizeof lanes_); lanes_; })
/* A narrower value fills the low lanes, the rest zero (a cast's upper lanes are undefined). */
#define EMU_OUT(vtype, lanes) \
    ({ vtype v_; memset(&v_, 0, sizeof v_); \
       memcpy(&v_, &(lanes), sizeof v_ < sizeof(lanes) ? sizeof v_ : sizeof(lanes)); v_; })

static inline __m512 emu_set1_ps(float x)
{
    emu_ps r;
    for (int j = 0; j < 16; ++j) r.f[j] = x;
    return EMU_OUT(__m512, r);
}
static inline __m512 emu_setzero_ps(void) { return emu_set1_ps(0.0f); }
static inline __m512d emu_set1_pd(double x)
{
    emu_pd r;
    for (int j = 0; j < 8; ++j) r.d[j] = x;
    return EMU_OUT(__m512d, r);
}
static inline __m512i emu_setzero_si512(void) { emu_si r = {{0}}; return EMU_OUT(__m512i, r); }
static inline __m512 emu_loadu_ps(const float *p) { emu_ps r; memcpy(&r, p, sizeof r); return EMU_OUT(__m512, r); }

/* vandps with 0x7FFFFFFF: the sign bit cleared, NaN stays NaN. */
static inline __m512 emu_abs_ps(__m512 x)
{
    emu_si r = EMU_IN(emu_si, x);
    for (int j = 0; j < 16; ++j) r.i[j] &= 0x7FFFFFFF;
    return EMU_OUT(__m512, r);
}

/* vcmpps into a mask; only the predicate qgemm.c uses: less or equal, ordered (NaN: 0). */
static inline __mmask16 emu_cmp_ps_mask(__m512 a, __m512 b, int predicate)
{
    if (predicate != _CMP_LE_OQ) abort();
    emu_ps x = EMU_IN(emu_ps, a), y = EMU_IN(emu_ps, b);
    __mmask16 m = 0;
    for (int j = 0; j < 16; ++j) m |= (__mmask16)((x.f[j] <= y.f[j]) << j);
    return m;
}

/* vmaxps / vmaxpd / vminpd: the first operand where the comparison holds, else the second. */
static inline __m512 emu_max_ps(__m512 a, __m512 b)
{
    emu_ps x = EMU_IN(emu_ps, a), y = EMU_IN(emu_ps, b);
    for (int j = 0; j < 16; ++j) x.f[j] = x.f[j] > y.f[j] ? x.f[j] : y.f[j];
    return EMU_OUT(__m512, x);
}
static inline __m512d emu_max_pd(__m512d a, __m512d b)
{
    emu_pd x = EMU_IN(emu_pd, a), y = EMU_IN(emu_pd, b);
    for (int j = 0; j < 8; ++j) x.d[j] = x.d[j] > y.d[j] ? x.d[j] : y.d[j];
    return EMU_OUT(__m512d, x);
}
static inline __m512d emu_min_pd(__m512d a, __m512d b)
{
    emu_pd x = EMU_IN(emu_pd, a), y = EMU_IN(emu_pd, b);
    for (int j = 0; j < 8; ++j) x.d[j] = x.d[j] < y.d[j] ? x.d[j] : y.d[j];
    return EMU_OUT(__m512d, x);
}
static inline float emu_reduce_max_ps(__m512 a)
{
    emu_ps x = EMU_IN(emu_ps, a);
    float m = x.f[0];
    for (int j = 1; j < 16; ++j) m = x.f[j] > m ? x.f[j] : m;
    return m;
}

static inline __m512d emu_div_pd(__m512d a, __m512d b)
{
    emu_pd x = EMU_IN(emu_pd, a), y = EMU_IN(emu_pd, b);
    for (int j = 0; j < 8; ++j) x.d[j] /= y.d[j];
    return EMU_OUT(__m512d, x);
}

/* Reinterpretations and halves: the low 256 bits are lanes 0..7 of a float vector. */
static inline __m512d emu_castps_pd(__m512 x) { return EMU_OUT(__m512d, x); }
static inline __m256 emu_castps512_ps256(__m512 x) { return EMU_OUT(__m256, x); }
static inline __m512i emu_castsi256_si512(__m256i x) { return EMU_OUT(__m512i, x); }
static inline __m256d emu_extractf64x4_pd(__m512d x, int upper)
{
    emu_pd r = EMU_IN(emu_pd, x);
    double half[4];
    memcpy(half, r.d + (upper ? 4 : 0), sizeof half);
    return EMU_OUT(__m256d, half);
}
static inline __m512i emu_inserti64x4(__m512i a, __m256i b, int upper)
{
    emu_si r = EMU_IN(emu_si, a);
    memcpy(r.i + (upper ? 8 : 0), &b, sizeof b);
    return EMU_OUT(__m512i, r);
}

/* vcvtps2pd: 8 floats to doubles (exact). */
static inline __m512d emu_cvtps_pd(__m256 x)
{
    float f[8];
    memcpy(f, &x, sizeof f);
    emu_pd r;
    for (int j = 0; j < 8; ++j) r.d[j] = f[j];
    return EMU_OUT(__m512d, r);
}

/* vcvtpd2dq: rounded by MXCSR (nearest, ties to even, as the runtime leaves it); out of
 * range or NaN: the integer indefinite, 0x80000000. */
static inline __m256i emu_cvtpd_epi32(__m512d x)
{
    emu_pd d = EMU_IN(emu_pd, x);
    int32_t r[8];
    for (int j = 0; j < 8; ++j) {
        const double v = nearbyint(d.d[j]);
        r[j] = v >= -2147483648.0 && v <= 2147483647.0 ? (int32_t)v : INT32_MIN;
    }
    return EMU_OUT(__m256i, r);
}

static inline __m512i emu_add_epi32(__m512i a, __m512i b)
{
    emu_si x = EMU_IN(emu_si, a), y = EMU_IN(emu_si, b);
    for (int j = 0; j < 16; ++j) x.i[j] = (int32_t)((uint32_t)x.i[j] + (uint32_t)y.i[j]);
    return EMU_OUT(__m512i, x);
}

/* vpmovsdb: 16 int32 to int8 with signed saturation. */
static inline __m128i emu_cvtsepi32_epi8(__m512i a)
{
    emu_si x = EMU_IN(emu_si, a);
    int8_t r[16];
    for (int j = 0; j < 16; ++j) r[j] = (int8_t)(x.i[j] > 127 ? 127 : x.i[j] < -128 ? -128 : x.i[j]);
    return EMU_OUT(__m128i, r);
}

static inline int32_t emu_reduce_add_epi32(__m512i a)
{
    emu_si x = EMU_IN(emu_si, a);
    uint32_t s = 0;
    for (int j = 0; j < 16; ++j) s += (uint32_t)x.i[j];
    return (int32_t)s;
}

/* GCC spells some of these as macros when not optimising: replace whichever form it has. */
#undef _mm512_set1_ps
#define _mm512_set1_ps emu_set1_ps
#undef _mm512_setzero_ps
#define _mm512_setzero_ps emu_setzero_ps
#undef _mm512_set1_pd
#define _mm512_set1_pd emu_set1_pd
#undef _mm512_setzero_si512
#define _mm512_setzero_si512 emu_setzero_si512
#undef _mm512_loadu_ps
#define _mm512_loadu_ps emu_loadu_ps
#undef _mm512_abs_ps
#define _mm512_abs_ps emu_abs_ps
#undef _mm512_cmp_ps_mask
#define _mm512_cmp_ps_mask emu_cmp_ps_mask
#undef _mm512_max_ps
#define _mm512_max_ps emu_max_ps
#undef _mm512_max_pd
#define _mm512_max_pd emu_max_pd
#undef _mm512_min_pd
#define _mm512_min_pd emu_min_pd
#undef _mm512_reduce_max_ps
#define _mm512_reduce_max_ps emu_reduce_max_ps
#undef _mm512_div_pd
#define _mm512_div_pd emu_div_pd
#undef _mm512_castps_pd
#define _mm512_castps_pd emu_castps_pd
#undef _mm512_castps512_ps256
#define _mm512_castps512_ps256 emu_castps512_ps256
#undef _mm512_castsi256_si512
#define _mm512_castsi256_si512 emu_castsi256_si512
#undef _mm512_extractf64x4_pd
#define _mm512_extractf64x4_pd emu_extractf64x4_pd
#undef _mm512_inserti64x4
#define _mm512_inserti64x4 emu_inserti64x4
#undef _mm512_cvtps_pd
#define _mm512_cvtps_pd emu_cvtps_pd
#undef _mm512_cvtpd_epi32
#define _mm512_cvtpd_epi32 emu_cvtpd_epi32
#undef _mm512_add_epi32
#define _mm512_add_epi32 emu_add_epi32
#undef _mm512_cvtsepi32_epi8
#define _mm512_cvtsepi32_epi8 emu_cvtsepi32_epi8
#undef _mm512_reduce_add_epi32
#define _mm512_reduce_add_epi32 emu_reduce_add_epi32

#endif
