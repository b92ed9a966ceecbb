/* Timing shared by the peak_<isa>.c files: each supplies run(iters), a loop of
 * independent multiply-add chains, and the flops one iteration performs. */
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

#endif
