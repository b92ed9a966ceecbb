/* Peak outer-product throughput of one core's SME unit: FMOPA into every ZA tile.
 *
 * Each iteration issues two FMOPAs per tile (4 fp32 tiles, 8 fp64 tiles), so
 * consecutive FMOPAs never wait on the same tile.  Streaming mode is entered once
 * per run, around the whole loop, like the kernels.  The operands are constant
 * vectors (1.0 times 1e-9 keeps the accumulators far from overflow).
 * Under emulation the number measures QEMU, not a CPU: the tuner then ignores it. */
#if !defined(__aarch64__) || !defined(__ARM_FEATURE_SME)
#error "peak_sme2.c needs AArch64 with SME: compile it with the sme2 target's flags"
#endif

#include <stdint.h>

#include "peak_common.h"

/* smstart/smstop zero every vector register: the compiler must keep nothing there. */
#define AT_SME_CLOBBERS                                                                     \
    "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11", "v12", "v13", \
        "v14", "v15", "v16", "v17", "v18", "v19", "v20", "v21", "v22", "v23", "v24", "v25", \
        "v26", "v27", "v28", "v29", "v30", "v31", "x8", "memory", "cc"

static int64_t svl_bytes(void)
{
    int64_t v;
    __asm__ volatile("rdsvl %0, #1" : "=r"(v));
    return v;
}

static void run_f32(long long iters)
{
    long n = iters;
    __asm__ volatile(
        "smstart\n"
        "zero {za}\n"
        "ptrue p0.s\n"
        "fmov z0.s, #1.0\n"
        "mov w8, #0x30800000\n" /* about 1e-9f */
        "dup z1.s, w8\n"
        "1:\n"
        "fmopa za0.s, p0/m, p0/m, z0.s, z1.s\n"
        "fmopa za1.s, p0/m, p0/m, z0.s, z1.s\n"
        "fmopa za2.s, p0/m, p0/m, z0.s, z1.s\n"
        "fmopa za3.s, p0/m, p0/m, z0.s, z1.s\n"
        "fmopa za0.s, p0/m, p0/m, z1.s, z0.s\n"
        "fmopa za1.s, p0/m, p0/m, z1.s, z0.s\n"
        "fmopa za2.s, p0/m, p0/m, z1.s, z0.s\n"
        "fmopa za3.s, p0/m, p0/m, z1.s, z0.s\n"
        "subs %[n], %[n], #1\n"
        "b.gt 1b\n"
        "smstop\n"
        : [n] "+r"(n)
        :
        : AT_SME_CLOBBERS);
}

static void run_f64(long long iters)
{
    long n = iters;
    __asm__ volatile(
        "smstart\n"
        "zero {za}\n"
        "ptrue p0.d\n"
        "fmov z0.d, #1.0\n"
        "mov x8, #0x3e11000000000000\n" /* about 1e-9 */
        "dup z1.d, x8\n"
        "1:\n"
        "fmopa za0.d, p0/m, p0/m, z0.d, z1.d\n"
        "fmopa za1.d, p0/m, p0/m, z0.d, z1.d\n"
        "fmopa za2.d, p0/m, p0/m, z0.d, z1.d\n"
        "fmopa za3.d, p0/m, p0/m, z0.d, z1.d\n"
        "fmopa za4.d, p0/m, p0/m, z0.d, z1.d\n"
        "fmopa za5.d, p0/m, p0/m, z0.d, z1.d\n"
        "fmopa za6.d, p0/m, p0/m, z0.d, z1.d\n"
        "fmopa za7.d, p0/m, p0/m, z0.d, z1.d\n"
        "subs %[n], %[n], #1\n"
        "b.gt 1b\n"
        "smstop\n"
        : [n] "+r"(n)
        :
        : AT_SME_CLOBBERS);
}

void at_peak(double *gflops_f32, double *gflops_f64)
{
    /* One FMOPA: VL x VL multiply-adds, 2 flops each. */
    const double vl32 = (double)svl_bytes() / 4.0, vl64 = (double)svl_bytes() / 8.0;
    if (gflops_f32)
        *gflops_f32 = at_peak_measure(run_f32, 8.0 * 2.0 * vl32 * vl32);
    if (gflops_f64)
        *gflops_f64 = at_peak_measure(run_f64, 8.0 * 2.0 * vl64 * vl64);
}

/* The pace is the fp32 FMOPA loop's: an SME2 kernel's time goes to the SME
 * unit, shared between cores, which is what a slow moment there would show. */
double at_pace(void)
{
    const double vl32 = (double)svl_bytes() / 4.0;
    return at_pace_measure(run_f32, 8.0 * 2.0 * vl32 * vl32);
}

double at_pace_peak(void)
{
    const double vl32 = (double)svl_bytes() / 4.0;
    return at_peak_measure(run_f32, 8.0 * 2.0 * vl32 * vl32);
}
