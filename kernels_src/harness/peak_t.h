/* One dtype's peak loop, written once for the peak_<isa>.c files that measure
 * independent FMA chains with intrinsics: avx2, avx512, neon.  Not peak_sme2.c,
 * whose FMOPAs run in streaming mode from inline assembly, nor peak_generic.c,
 * which measures what the compiler makes of a plain C loop over an array (see
 * there why it cannot take this shape without changing what it measures).
 *
 * A file defines, once,
 *
 *   AT_NCHAINS       the number of chains
 *   AT_CHAINS(X)     X(0) X(1) ... X(AT_NCHAINS - 1)
 *
 * then includes this file twice, once for f32 and once for f64, after defining
 *
 *   AT_RUN           the function to define: run_f32 or run_f64
 *   AT_T             the element type: float or double
 *   AT_V             the vector type
 *   AT_SET1(x)       x in every lane
 *   AT_FMA(a, m, c)  a * m + c in every lane
 *   AT_ADD(a, b)     a + b in every lane
 *   AT_HSUM(v)       the sum of v's lanes, as a double
 *   AT_OPAQUE(m, c)  optional: hides what m and c hold from the compiler (peak_neon.c)
 *
 * It #undefs those, so the next inclusion starts clean.  No include guard: it
 * is meant to be included more than once.
 *
 * Each chain is a variable of its own, a0, a1, ..., listed one by one: every chain
 * keeps its own register whatever the compiler's unrolling limits.  (An array,
 * even indexed by constants, changes clang's register allocation of the NEON loop.) */

/* Where both runs leave their result, so that the loops are not dead code. */
#ifndef AT_PEAK_SINK_DEFINED
#define AT_PEAK_SINK_DEFINED
static volatile double peak_sink;
#endif

static void AT_RUN(long long iters)
{
    /* The multiplier and addend come through volatiles: with literal constants
     * compilers are free to (and do: clang folded the f32 loop away) evaluate part
     * of the loop at compile time. */
    static volatile AT_T multiplier = (AT_T)0.9999999, addend = (AT_T)1e-7;
    /* a = a * m + c converges to c / (1 - m), about 1: no overflow, no denormals. */
    AT_V m = AT_SET1(multiplier), c = AT_SET1(addend);
#ifdef AT_OPAQUE
    AT_OPAQUE(m, c);
#endif
#define AT_DECL(i) AT_V a##i = AT_SET1((AT_T)1 + (AT_T)(i) * (AT_T)1e-3);
#define AT_STEP(i) a##i = AT_FMA(a##i, m, c);
#define AT_SUM(i) s = AT_ADD(s, a##i);
    AT_CHAINS(AT_DECL)
    for (long long it = 0; it < iters; ++it) {
        AT_CHAINS(AT_STEP)
    }
    AT_V s = AT_SET1((AT_T)0);
    AT_CHAINS(AT_SUM)
    peak_sink = AT_HSUM(s);
#if defined(__AVX__)
    /* The harness around this is SSE code, slow on Intel after dirty upper halves;
     * GCC's own vzeroupper pass is off under toolchain.GCC_VECTOR_FLAGS. */
    _mm256_zeroupper();
#endif
#undef AT_DECL
#undef AT_STEP
#undef AT_SUM
}

#undef AT_RUN
#undef AT_T
#undef AT_V
#undef AT_SET1
#undef AT_FMA
#undef AT_ADD
#undef AT_HSUM
#undef AT_OPAQUE
