/* Timing shared by the peak_<isa>.c files: each supplies run(iters), a loop of
 * independent multiply-add chains (written once in peak_t.h for the intrinsic
 * files), and the flops one iteration performs. */
#ifndef AT_PEAK_COMMON_H
#define AT_PEAK_COMMON_H

#include "at_registry.h"

/* Best of many short runs (>= 5 ms each, after a warm-up that brings the clock
 * to the frequency the vector units sustain): on a core shared with other work
 * the best run is the one nothing preempted, and short runs make such a run
 * likely. */
static double at_peak_measure(void (*run)(long long iters), double flops_per_iter)
{
    long long iters = 256;
    double elapsed;
    for (;;) {
        double t0 = at_now_ns();
        run(iters);
        elapsed = at_now_ns() - t0;
        if (elapsed >= 5e6 || iters >= (1LL << 40))
            break;
        iters *= 2;
    }
    double best = elapsed;
    for (int r = 0; r < 15; ++r) {
        double t0 = at_now_ns();
        run(iters);
        double t = at_now_ns() - t0;
        best = t < best ? t : best;
    }
    return flops_per_iter * (double)iters / best;
}

/* Best of three runs of about 20 us each, the count found once per process: short
 * enough to take beside every bench point, long enough that the clock's
 * granularity does not matter. */
static double at_pace_measure(void (*run)(long long iters), double flops_per_iter)
{
    static long long iters = 0;
    if (!iters) {
        iters = 64;
        for (;;) {
            double t0 = at_now_ns();
            run(iters);
            if (at_now_ns() - t0 >= 2e4 || iters >= (1LL << 30))
                break;
            iters *= 2;
        }
    }
    double best = 0;
    for (int r = 0; r < 3; ++r) {
        double t0 = at_now_ns();
        run(iters);
        double t = at_now_ns() - t0;
        best = r == 0 || t < best ? t : best;
    }
    return flops_per_iter * (double)iters / (best > 0 ? best : 1);
}

/* The at_peak of a file with run_f32 and run_f64 whose iteration is AT_NCHAINS
 * multiply-adds on vectors of lanes_f32 or lanes_f64 lanes, 2 flops a lane (all
 * but peak_sme2.c).  A NULL pointer skips that dtype. */
#define AT_PEAK_OF_CHAINS(lanes_f32, lanes_f64)                                          \
    void at_peak(double *gflops_f32, double *gflops_f64)                               \
    {                                                                                  \
        if (gflops_f32)                                                                \
            *gflops_f32 = at_peak_measure(run_f32, AT_NCHAINS * (lanes_f32) * 2.0);    \
        if (gflops_f64)                                                                \
            *gflops_f64 = at_peak_measure(run_f64, AT_NCHAINS * (lanes_f64) * 2.0);    \
    }

/* The at_pace and at_pace_peak of a file with run_pace, pace_flops flops a run
 * (pace_t.h, or a loop of the file's own): the same loop, briefly beside each
 * timing and at length once. */
#define AT_PACE_OF_LOOP                                                                  \
    double at_pace(void) { return at_pace_measure(run_pace, pace_flops); }             \
    double at_pace_peak(void) { return at_peak_measure(run_pace, pace_flops); }

#endif
