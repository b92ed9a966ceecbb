/* Validation driver for generated Arm kernels, run under QEMU by tests/test_arm_kernels.py.
 *
 *   driver [--seed N] [--max-depth K] kernels
 *                               check every kernel of the linked registry (at depths up to K)
 *   driver [--seed N] pack      check the SME2 transposing packs at the running SVL
 *
 * One JSON object per line on stdout.  Each kernel is compared with a double
 * reference under the harness's bound
 *     |c - ref| <= 2 (K + 2) eps (|alpha| sum_p |a_ip||b_pj| + |beta||c_ij|)
 * over several depths (tails of every K loop), padded leading dimensions and
 * (alpha, beta) pairs, beta == 0 with a C full of NaN.  Every operand ends at a
 * PROT_NONE page, so a read past its footprint kills the driver (the test sees a
 * "start" without its result).  Every call goes through tests/arm_runtime/rt_abi.S, which checks
 * that the kernel preserved the callee-saved registers.  Packed kernels (variant pa / pb / papb) get their
 * panels from the packing routines, as a plan would call them. */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "driver_registry.h"

#ifdef DRV_SME
#include "at_sme2_pack.h"
#endif

static uint64_t rng_state;

static double urand(void) /* uniform in [-1, 1), xorshift64* */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 2685821657736338717ULL;
    return (double)(r >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

/* An array of `bytes` whose last byte is followed by an inaccessible page. */
typedef struct {
    void *map;
    size_t map_len;
    void *ptr;
} guarded;

static guarded guarded_alloc(size_t bytes)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t body = (bytes + (size_t)page - 1) / (size_t)page * (size_t)page;
    guarded g;
    g.map_len = body + (size_t)page;
    g.map = mmap(NULL, g.map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g.map == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    if (mprotect((char *)g.map + body, (size_t)page, PROT_NONE) != 0) {
        perror("mprotect");
        exit(2);
    }
    g.ptr = (char *)g.map + body - bytes;
    return g;
}

static void guarded_free(guarded g) { munmap(g.map, g.map_len); }

/* Elements an operand of `rows` x `cols` (column-major, leading dimension ld) spans. */
static size_t footprint(int64_t rows, int64_t cols, int64_t ld)
{
    return rows <= 0 || cols <= 0 ? 0 : (size_t)((cols - 1) * ld + rows);
}

/* tests/arm_runtime/rt_abi.S: calls the kernel with canaries in the callee-saved
 * registers; returns a bit per register the kernel broke (x19-x28: bits 0-9, d8-d15:
 * 10-17, sp: 20) and, in SME2 builds, bit 21 when it left streaming mode or ZA on.
 * Mode bit 0 narrows alpha and beta to fp32. */
uint64_t rt_abi_call(void (*fn)(void), const uint64_t x[8], double d0, double d1, int64_t mode);
static uint64_t abi_broken;

/* Ascending: --max-depth stops at the first one past it. */
static const int depths[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 64, 257};
static const double ab[][2] = {{1.0, 0.0}, {1.0, 1.0}, {-0.75, 2.5}, {0.5, -1.0}};

/* Run one case; returns the worst |c - ref| / bound (<= 1 passes), or +inf. */
static double run_case(const at_kernel *k, int64_t K, int pad, double alpha, double beta)
{
    const int f64 = k->dtype == 1;
    const size_t es = f64 ? 8 : 4;
    const int64_t mr = k->mr, nr = k->nr;
    /* op(A) is mr x K: stored mr x K ("n") or K x mr ("t"), likewise op(B). */
    const int64_t a_rows = k->trans_a ? K : mr, a_cols = k->trans_a ? mr : K;
    const int64_t b_rows = k->trans_b ? nr : K, b_cols = k->trans_b ? K : nr;
    const int64_t lda = (a_rows > 0 ? a_rows : 1) + pad, ldb = (b_rows > 0 ? b_rows : 1) + pad;
    const int64_t ldc = mr + pad;
    const size_t na = footprint(a_rows, a_cols, lda), nb = footprint(b_rows, b_cols, ldb);
    const size_t nc = footprint(mr, nr, ldc);
    guarded ga = guarded_alloc(na * es), gb = guarded_alloc(nb * es), gc = guarded_alloc(nc * es);
    double *a = malloc((na + 1) * sizeof(double)), *b = malloc((nb + 1) * sizeof(double));
    double *c0 = malloc((nc + 1) * sizeof(double));
    for (size_t i = 0; i < na; ++i) a[i] = urand();
    for (size_t i = 0; i < nb; ++i) b[i] = urand();
    for (size_t i = 0; i < nc; ++i) c0[i] = beta == 0.0 ? NAN : urand();
    for (size_t i = 0; i < na; ++i) f64 ? (((double *)ga.ptr)[i] = a[i]) : (((float *)ga.ptr)[i] = (float)a[i]);
    for (size_t i = 0; i < nb; ++i) f64 ? (((double *)gb.ptr)[i] = b[i]) : (((float *)gb.ptr)[i] = (float)b[i]);
    for (size_t i = 0; i < nc; ++i) f64 ? (((double *)gc.ptr)[i] = c0[i]) : (((float *)gc.ptr)[i] = (float)c0[i]);
    /* The reference sees exactly the rounded inputs the kernel sees. */
    if (!f64) {
        for (size_t i = 0; i < na; ++i) a[i] = (float)a[i];
        for (size_t i = 0; i < nb; ++i) b[i] = (float)b[i];
        for (size_t i = 0; i < nc; ++i) c0[i] = (float)c0[i];
    }

    const void *A = ga.ptr, *B = gb.ptr;
    int64_t kl = lda, kb = ldb;
    guarded pa = {0}, pb = {0};
#ifdef DRV_SME
    if (k->pack_a_ld) { /* panel: op(A)[i, p] at i + p*pa_ld */
        pa = guarded_alloc((size_t)K * (size_t)k->pack_a_ld * es);
        f64 ? at_sme2_pack_t_f64(K, mr, ga.ptr, lda, pa.ptr, k->pack_a_ld)
            : at_sme2_pack_t_f32(K, mr, ga.ptr, lda, pa.ptr, k->pack_a_ld);
        A = pa.ptr;
        kl = k->pack_a_ld;
    }
    if (k->pack_b_ld) { /* panel: op(B)[p, j] at j + p*pb_ld */
        pb = guarded_alloc((size_t)K * (size_t)k->pack_b_ld * es);
        f64 ? at_sme2_pack_t_f64(K, nr, gb.ptr, ldb, pb.ptr, k->pack_b_ld)
            : at_sme2_pack_t_f32(K, nr, gb.ptr, ldb, pb.ptr, k->pack_b_ld);
        B = pb.ptr;
        kb = k->pack_b_ld;
    }
#endif
    const uint64_t args[8] = {(uint64_t)K, (uint64_t)(uintptr_t)A, (uint64_t)kl,
                              (uint64_t)(uintptr_t)B, (uint64_t)kb, (uint64_t)(uintptr_t)gc.ptr,
                              (uint64_t)ldc, 0};
    abi_broken |= rt_abi_call(k->fn, args, alpha, beta, !f64);

    const double eps = f64 ? 0x1p-53 : 0x1p-24;
    double worst = 0.0;
    for (int64_t j = 0; j < nr; ++j)
        for (int64_t i = 0; i < mr; ++i) {
            double ref = 0.0, mag = 0.0;
            for (int64_t p = 0; p < K; ++p) {
                double x = k->trans_a ? a[p + i * lda] : a[i + p * lda];
                double y = k->trans_b ? b[j + p * ldb] : b[p + j * ldb];
                ref += x * y;
                mag += fabs(x * y);
            }
            double cij = c0[i + j * ldc];
            ref = alpha * ref + (beta == 0.0 ? 0.0 : beta * cij);
            mag = fabs(alpha) * mag + (beta == 0.0 ? 0.0 : fabs(beta) * fabs(cij));
            double got = f64 ? ((double *)gc.ptr)[i + j * ldc] : ((float *)gc.ptr)[i + j * ldc];
            double bound = 2.0 * (double)(K + 2) * eps * mag;
            double err = fabs(got - ref);
            double ratio = err == 0.0 ? 0.0 : (bound > 0.0 ? err / bound : INFINITY);
            if (!(ratio <= worst)) worst = isnan(ratio) ? INFINITY : ratio;
        }
    free(a);
    free(b);
    free(c0);
    guarded_free(ga);
    guarded_free(gb);
    guarded_free(gc);
    if (pa.map) guarded_free(pa);
    if (pb.map) guarded_free(pb);
    return worst;
}

static int check_kernels(int max_depth)
{
    int failures = 0;
    for (int n = 0; n < drv_kernels_count; ++n) {
        const at_kernel *k = &drv_kernels[n];
        printf("{\"event\":\"start\",\"kernel\":\"%s\"}\n", k->name);
        fflush(stdout);
        int cases = 0, ok = 1;
        double worst = 0.0;
        char bad[160] = "";
        for (size_t d = 0; d < sizeof depths / sizeof *depths && depths[d] <= max_depth && ok; ++d)
            for (int pad = 0; pad <= 3 && ok; pad += 3)
                for (size_t s = 0; s < sizeof ab / sizeof *ab && ok; ++s) {
                    abi_broken = 0;
                    double r = run_case(k, depths[d], pad, ab[s][0], ab[s][1]);
                    ++cases;
                    if (abi_broken) {
                        ok = 0;
                        snprintf(bad, sizeof bad, "K=%d: callee-saved registers broken (mask 0x%llx)",
                                 depths[d], (unsigned long long)abi_broken);
                        break;
                    }
                    worst = r > worst ? r : worst;
                    if (!(r <= 1.0)) {
                        ok = 0;
                        snprintf(bad, sizeof bad, "K=%d pad=%d alpha=%g beta=%g ratio=%g",
                                 depths[d], pad, ab[s][0], ab[s][1], r);
                    }
                }
        printf("{\"event\":\"validate\",\"kernel\":\"%s\",\"ok\":%s,\"cases\":%d,\"max_ratio\":%.6g%s%s%s}\n",
               k->name, ok ? "true" : "false", cases, isfinite(worst) ? worst : 1e300,
               ok ? "" : ",\"case\":\"", ok ? "" : bad, ok ? "" : "\"");
        fflush(stdout);
        failures += !ok;
    }
    return failures ? 1 : 0;
}

#ifdef DRV_SME
static int64_t svl_bytes(void)
{
    int64_t v;
    __asm__ volatile("rdsvl %0, #1" : "=r"(v));
    return v;
}

/* The transposing pack against its definition, including the zero padding. */
static int check_pack(void)
{
    int failures = 0;
    for (int f64 = 0; f64 <= 1; ++f64) {
        const int64_t es = f64 ? 8 : 4, vl = svl_bytes() / es;
        const int64_t ns[] = {1, 5, vl, vl + 3, 2 * vl + 1};
        const int64_t ks[] = {0, 1, 3, vl, vl + 5, 2 * vl + 7};
        int cases = 0, ok = 1;
        for (size_t a = 0; a < 5; ++a)
            for (size_t b = 0; b < 6; ++b)
                for (int extra = 0; extra <= 1; ++extra) {
                    const int64_t n = ns[a], K = ks[b], ld = K + 2 * extra + 1;
                    const int64_t ldd = ((n + vl - 1) / vl + extra) * vl;
                    const size_t nsrc = footprint(K, n, ld), ndst = (size_t)(K * ldd);
                    guarded gs = guarded_alloc(nsrc * (size_t)es), gd = guarded_alloc(ndst * (size_t)es);
                    for (size_t i = 0; i < nsrc; ++i)
                        f64 ? (((double *)gs.ptr)[i] = urand()) : (((float *)gs.ptr)[i] = (float)urand());
                    for (size_t i = 0; i < ndst; ++i) /* poison: the pack must write every element */
                        f64 ? (((double *)gd.ptr)[i] = NAN) : (((float *)gd.ptr)[i] = NAN);
                    f64 ? at_sme2_pack_t_f64(K, n, gs.ptr, ld, gd.ptr, ldd)
                        : at_sme2_pack_t_f32(K, n, gs.ptr, ld, gd.ptr, ldd);
                    for (int64_t p = 0; p < K; ++p)
                        for (int64_t x = 0; x < ldd; ++x) {
                            double want = x < n ? (f64 ? ((double *)gs.ptr)[p + x * ld] : ((float *)gs.ptr)[p + x * ld]) : 0.0;
                            double got = f64 ? ((double *)gd.ptr)[x + p * ldd] : ((float *)gd.ptr)[x + p * ldd];
                            if (got != want) ok = 0;
                        }
                    ++cases;
                    guarded_free(gs);
                    guarded_free(gd);
                }
        printf("{\"event\":\"pack\",\"dtype\":\"%s\",\"svl_bits\":%lld,\"ok\":%s,\"cases\":%d}\n",
               f64 ? "f64" : "f32", (long long)(svl_bytes() * 8), ok ? "true" : "false", cases);
        failures += !ok;
    }
    return failures ? 1 : 0;
}
#endif

int main(int argc, char **argv)
{
    uint64_t seed = 12345;
    const char *cmd = "kernels";
    int max_depth = 1 << 30;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--max-depth") && i + 1 < argc)
            max_depth = atoi(argv[++i]);
        else
            cmd = argv[i];
    }
    rng_state = seed * 0x9E3779B97F4A7C15ULL + 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(cmd, "kernels"))
        return check_kernels(max_depth);
#ifdef DRV_SME
    if (!strcmp(cmd, "pack"))
        return check_pack();
#endif
    fprintf(stderr, "unknown command %s\n", cmd);
    return 2;
}
