/* Does this x86 CPU charge SSE code for running after 256-bit instructions that
 * left the upper halves of the vector registers dirty?  (toolchain.upper_halves)
 *
 * Intel's cores do: a transition of some 70 cycles each way before Skylake, and
 * since then a merge into the dirty halves on every SSE instruction, which chains
 * otherwise independent work (a Sapphire Rapids-class Xeon ran 48x8 fp32 calls at
 * K = 4 six times slower from such a caller).  So every generated kernel clears
 * them before it returns, unless this program finds that a call which leaves them
 * dirty, followed by SSE work, is clearly faster than one that clears them: then
 * the clearing costs more than it saves (Zen 1: 1.5-2 ns of a 2x2x2 fp64 call).
 *
 * Built with -mno-avx, so that the caller's arithmetic is legacy SSE whatever the
 * compiler's default.  Prints the best time of each call and its SSE work, in
 * nanoseconds: "dirty clean". */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <time.h>

/* Two leaf calls like a kernel's: 256-bit loads, arithmetic and stores, the one
 * returning with ymm0-1's upper halves dirty, the other cleared. */
__attribute__((noinline)) static void leave_dirty(double *x)
{
    __asm__ volatile("vmovupd (%0), %%ymm0\n\t"
                     "vaddpd %%ymm0, %%ymm0, %%ymm1\n\t"
                     "vmovupd %%ymm1, 32(%0)"
                     : : "r"(x) : "xmm0", "xmm1", "memory");
}

__attribute__((noinline)) static void leave_clean(double *x)
{
    __asm__ volatile("vmovupd (%0), %%ymm0\n\t"
                     "vaddpd %%ymm0, %%ymm0, %%ymm1\n\t"
                     "vmovupd %%ymm1, 32(%0)\n\t"
                     "vzeroupper"
                     : : "r"(x) : "xmm0", "xmm1", "memory");
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* SSE work after each call that is independent from one iteration to the next,
 * as a caller's usually is: merged into dirty halves, each waits for the last. */
static double seconds_per_call(void (*volatile call)(double *), double *x, double *y, long n)
{
    void (*f)(double *) = call;
    double t0 = now();
    for (long i = 0; i < n; i++) {
        f(x);
        y[i & 15] = x[4] * 0.5 + x[5];
        y[(i + 8) & 15] = x[6] * 0.25 - x[7];
    }
    return (now() - t0) / (double)n;
}

int main(void)
{
    static double x[8] = {0.5, 0.25, 0.125, 1.0}, y[16];
    double dirty = 1e9, clean = 1e9;
    /* Interleaved rounds, the best of each: a busy or drifting core slows both. */
    for (int round = 0; round < 9; round++) {
        double d = seconds_per_call(leave_dirty, x, y, 100000);
        double c = seconds_per_call(leave_clean, x, y, 100000);
        if (d < dirty) dirty = d;
        if (c < clean) clean = c;
    }
    if (y[3] != y[3]) return 1; /* (keeps the stores) */
    printf("%.3f %.3f\n", 1e9 * dirty, 1e9 * clean);
    return 0;
}
