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

static volatile double peak_sink;

#define AT_CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) \
    X(12) X(13) X(14) X(15) X(16) X(17) X(18) X(19) X(20) X(21) X(22) X(23)
#define AT_NCHAINS 24

static void run_f32(long long iters)
{
    /* acc = acc * m + c converges to about 1: no overflow, no denormals. */
    float32x4_t m = vdupq_n_f32(0.9999999f), c = vdupq_n_f32(1e-7f);
    /* Opaque constants: clang would otherwise fold the whole chain away. */
    __asm__("" : "+w"(m), "+w"(c));
#define DECL(i) float32x4_t a##i = vdupq_n_f32(1.0f + (float)(i) * 1e-3f);
#define STEP(i) a##i = vfmaq_f32(c, a##i, m);
#define SUM(i) s = vaddq_f32(s, a##i);
    AT_CHAINS(DECL)
    for (long long it = 0; it < iters; ++it) {
        AT_CHAINS(STEP)
    }
    float32x4_t s = vdupq_n_f32(0.0f);
    AT_CHAINS(SUM)
    peak_sink = vaddvq_f32(s);
#undef DECL
#undef STEP
#undef SUM
}

static void run_f64(long long iters)
{
    float64x2_t m = vdupq_n_f64(0.9999999), c = vdupq_n_f64(1e-7);
    __asm__("" : "+w"(m), "+w"(c));
#define DECL(i) float64x2_t a##i = vdupq_n_f64(1.0 + (double)(i) * 1e-3);
#define STEP(i) a##i = vfmaq_f64(c, a##i, m);
#define SUM(i) s = vaddq_f64(s, a##i);
    AT_CHAINS(DECL)
    for (long long it = 0; it < iters; ++it) {
        AT_CHAINS(STEP)
    }
    float64x2_t s = vdupq_n_f64(0.0);
    AT_CHAINS(SUM)
    peak_sink = vaddvq_f64(s);
#undef DECL
#undef STEP
#undef SUM
}

void at_peak(double *gflops_f32, double *gflops_f64)
{
    /* chains x lanes x 2 flops per FMA. */
    if (gflops_f32)
        *gflops_f32 = at_peak_measure(run_f32, AT_NCHAINS * 4.0 * 2.0);
    if (gflops_f64)
        *gflops_f64 = at_peak_measure(run_f64, AT_NCHAINS * 2.0 * 2.0);
}
