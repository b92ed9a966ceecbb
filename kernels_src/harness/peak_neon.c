/* Peak FMA throughput of one core with 128-bit AArch64 Advanced SIMD (NEON).
 *
 * 24 independent chains cover an FMA latency of 4 cycles on up to 4 pipes (Neoverse V2
 * has four 128-bit FMA pipes), and 24 + 2 constants fit the 32 vector registers.
 * Under emulation the number measures QEMU, not a CPU: the tuner then ignores it. */
#if !defined(__ARM_NEON) || !defined(__aarch64__)
#error "peak_neon.c needs AArch64 Advanced SIMD: compile it with the neon target's flags"
#endif

#include <arm_neon.h>

#include "peak_common.h"

#define AT_NCHAINS 24
#define AT_CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) \
    X(12) X(13) X(14) X(15) X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23)

/* m and c are opaque vectors, not broadcasts of a scalar the compiler knows: for a
 * broadcast clang multiplies by lane 0 (fmla by element) and allocates the loop's
 * registers differently, and this file's loop has always had m and c opaque. */
#define AT_NEON_OPAQUE(m, c) __asm__("" : "+w"(m), "+w"(c))

/* The pace loop (pace_t.h), in f32. */
#define AT_T float
#define AT_V float32x4_t
#define AT_LOADU vld1q_f32
#define AT_SET1 vdupq_n_f32
#define AT_MADD(acc, x, y) vfmaq_f32(acc, x, y)
#define AT_ADD vaddq_f32
#define AT_HSUM vaddvq_f32
#include "pace_t.h"

/* See peak_t.h for what each definition means, except AT_FMA: fmla accumulates into
 * its destination, so the chain must be vfmaq's first operand.  As c + a * m (the
 * template's a * m + c) every chain was copied from c before each FMA: some 50 movs
 * and 19 stack accesses around the 24 fmla of an iteration.  a + m * c grows by
 * 1e-7 a step instead of converging: no run is long enough to overflow. */
#define AT_RUN run_f32
#define AT_T float
#define AT_V float32x4_t
#define AT_SET1 vdupq_n_f32
#define AT_FMA(a, m, c) vfmaq_f32(a, m, c)
#define AT_ADD vaddq_f32
#define AT_HSUM vaddvq_f32
#define AT_OPAQUE AT_NEON_OPAQUE
#include "peak_t.h"

#define AT_RUN run_f64
#define AT_T double
#define AT_V float64x2_t
#define AT_SET1 vdupq_n_f64
#define AT_FMA(a, m, c) vfmaq_f64(a, m, c)
#define AT_ADD vaddq_f64
#define AT_HSUM vaddvq_f64
#define AT_OPAQUE AT_NEON_OPAQUE
#include "peak_t.h"

/* at_peak: 4 f32 or 2 f64 lanes a vector. */
AT_PEAK_OF_CHAINS(4, 2)
AT_PACE_OF_LOOP
