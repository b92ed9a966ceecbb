/* Peak multiply-add throughput of plain C, compiled with the generic flags.
 *
 * No intrinsics: this is the ceiling the portable kernels can reach with
 * whatever the compiler makes of independent multiply-adds (SSE2 mul + add on
 * baseline x86-64, contracted FMAs on aarch64).  32 independent chains leave the
 * compiler room to vectorise and to hide the latency. */
#include "peak_common.h"

#define AT_GENERIC_CHAINS 32

static volatile double peak_sink;
/* The multiplier and addend come through volatiles: with literal constants
 * compilers are free to (and do) evaluate part of the loop at compile time. */
static volatile float peak_m32 = 0.9999999f, peak_c32 = 1e-7f;
static volatile double peak_m64 = 0.9999999, peak_c64 = 1e-7;

static void run_f32(long long iters)
{
    float acc[AT_GENERIC_CHAINS];
    for (int i = 0; i < AT_GENERIC_CHAINS; ++i)
        acc[i] = 1.0f + (float)i * 1e-3f;
    /* acc = acc * m + c converges to about 1: no overflow, no denormals. */
    const float m = peak_m32, c = peak_c32;
    for (long long it = 0; it < iters; ++it)
        for (int i = 0; i < AT_GENERIC_CHAINS; ++i)
            acc[i] = acc[i] * m + c;
    double s = 0.0;
    for (int i = 0; i < AT_GENERIC_CHAINS; ++i)
        s += acc[i];
    peak_sink = s;
}

static void run_f64(long long iters)
{
    double acc[AT_GENERIC_CHAINS];
    for (int i = 0; i < AT_GENERIC_CHAINS; ++i)
        acc[i] = 1.0 + (double)i * 1e-3;
    const double m = peak_m64, c = peak_c64;
    for (long long it = 0; it < iters; ++it)
        for (int i = 0; i < AT_GENERIC_CHAINS; ++i)
            acc[i] = acc[i] * m + c;
    double s = 0.0;
    for (int i = 0; i < AT_GENERIC_CHAINS; ++i)
        s += acc[i];
    peak_sink = s;
}

void at_peak(double *gflops_f32, double *gflops_f64)
{
    if (gflops_f32)
        *gflops_f32 = at_peak_measure(run_f32, AT_GENERIC_CHAINS * 2.0);
    if (gflops_f64)
        *gflops_f64 = at_peak_measure(run_f64, AT_GENERIC_CHAINS * 2.0);
}
