/* Semantics suite for an aarch64 libautotune, cross-built and run under QEMU by
 * tests/test_arm_runtime.py (linked statically with libautotune.a).
 *
 *   driver suite [--seed N] [--cases N]   randomised GEMMs against a double reference
 *   driver abi                            callee-saved registers and SME state
 *   driver one                            one plan: its status and error text
 *
 * suite: fp32 and fp64, NN/NT/TN/TT, column- and row-major, odd shapes (0, 1,
 * primes, around the SME2 vector lengths), padded leading dimensions, (alpha,
 * beta) with alpha = 0 (A and B full of NaN: never read), beta = 0 (C full of
 * NaN: never read), NaN injected into A (must reach exactly its row of C).
 * Each case runs through plans of 1, 2 and 4 threads (bitwise identical) and
 * through at_gemm; C's padding between rows and ldc must stay untouched.  The
 * suite runs twice: with the library's parameters, then with at_params_set
 * forcing the packed (Goto) path with small blocks and the thread split.
 * Bound: |c - ref| <= 2 (K + 2) eps (|alpha| sum |a||b| + |beta||c|).
 *
 * abi: at_plan_execute (both paths, both dtypes) and, in an SME2 build, every
 * kernel's streaming entry `<name>_s` inside a streaming region, called through
 * rt_abi.S with canaries in x19-x28 and d8-d15; SVCR must be 0 after a library
 * call (streaming mode and ZA off) and 3 after a `_s` kernel (both left on).
 * Last, at_plan_execute under a caller's pending lazy ZA save (TPIDR2_EL0 set,
 * ZA live): the library must store every row to the caller's buffer and clear
 * TPIDR2_EL0 before using ZA (the AAPCS64 SME rules).
 *
 * One JSON object per line on stdout. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune.h"
#ifdef RT_SME
#include "at_sme2.h"
#endif

uint64_t rt_abi_call(void (*fn)(void), const uint64_t x[8], double d0, double d1, int64_t mode);
#ifdef RT_SME
uint64_t rt_lazy_za_call(void (*fn)(void), const uint64_t x[8], double d0, double d1, void *buffer,
                         uint64_t slices);
#endif

#include "../c/test_gemm.h"
static int64_t pick(const int64_t *v, int n) { return v[next() % (uint64_t)n]; }

static const int64_t dims[] = {0, 1, 2, 3, 5, 7, 8, 13, 16, 17, 19, 31, 32, 33, 47, 48, 64, 65, 97, 130};
static const double alphas[] = {1.0, -0.75, 0.5, 0.0, 2.0};
static const double betas[] = {0.0, 1.0, 2.5, -1.0};


typedef struct {
    int dt, row, ta, tb;
    int64_t M, N, K, lda, ldb, ldc;
    double alpha, beta;
    int nan_row; /* -1, or the row of op(A) holding a NaN */
} gcase;



static long checks, failures, kernel_steps, edge_steps, split_plans, packed_plans;
/* Steps by SME2 operand format (from the kernel's name): A panel, B panel, hybrid;
 * variable blocks run on a block smaller than their own (the extent in x7). */
static long pa_steps, pb_steps, hybrid_steps, sme2_steps, partial_steps;

/* How much of the plan the kernels cover (the rest is portable edge code). */
static void count_steps(const at_plan *plan)
{
    int64_t n = at_plan_steps(plan, NULL, 0);
    if (n <= 0) return;
    at_step *st = malloc(sizeof *st * (size_t)n);
    if (!st) return;
    at_plan_steps(plan, st, n);
    for (int64_t i = 0; i < n; i++) {
        if (st[i].kernel < 0) {
            edge_steps++;
            continue;
        }
        kernel_steps++;
        at_kernel_info k;
        if (at_kernel_get(st[i].kernel, &k) != AT_OK || !strstr(k.name, "_sme2_")) continue;
        sme2_steps++;
        const char *variant = strrchr(k.name, 'x'); /* "..._<mr>x<nr>[_<variant>]_u2" */
        if (variant && strstr(variant, "pa")) pa_steps++;
        if (variant && strstr(variant, "pb")) pb_steps++;
        if (variant && strstr(variant, "h_u")) hybrid_steps++;
        if (variant && strstr(variant, "v_u") && (st[i].mb < k.mr || st[i].nb < k.nr)) partial_steps++;
    }
    free(st);
}

static void fail(const gcase *c, const char *what, double detail)
{
    failures++;
    printf("{\"event\":\"fail\",\"what\":\"%s\",\"detail\":%g,\"dtype\":\"%s\",\"layout\":\"%s\","
           "\"trans\":\"%c%c\",\"M\":%lld,\"N\":%lld,\"K\":%lld,\"lda\":%lld,\"ldb\":%lld,\"ldc\":%lld,"
           "\"alpha\":%g,\"beta\":%g}\n",
           what, isfinite(detail) ? detail : -1.0, c->dt ? "f64" : "f32", c->row ? "row" : "col",
           c->ta ? 't' : 'n', c->tb ? 't' : 'n', (long long)c->M, (long long)c->N, (long long)c->K,
           (long long)c->lda, (long long)c->ldb, (long long)c->ldc, c->alpha, c->beta);
    fflush(stdout);
}

static void run_case(const gcase *c)
{
    size_t es = c->dt ? sizeof(double) : sizeof(float);
    int64_t na = extent(c->row, c->ta, c->M, c->K, c->lda), nb = extent(c->row, c->tb, c->K, c->N, c->ldb);
    int64_t nc = extent(c->row, 0, c->M, c->N, c->ldc);
    void *A = malloc(es * (size_t)na), *B = malloc(es * (size_t)nb), *C0 = malloc(es * (size_t)nc);
    void *C[4];
    for (int t = 0; t < 4; t++) C[t] = malloc(es * (size_t)nc);
    double *ref = malloc(sizeof(double) * (size_t)nc), *mag = malloc(sizeof(double) * (size_t)nc);
    for (int64_t i = 0; i < na; i++) set(A, c->dt, i, c->alpha == 0 ? NAN : urand());
    for (int64_t i = 0; i < nb; i++) set(B, c->dt, i, c->alpha == 0 ? NAN : urand());
    /* Padding of C holds a sentinel; beta == 0 gets a C full of NaN. */
    for (int64_t i = 0; i < nc; i++) set(C0, c->dt, i, c->beta == 0 ? NAN : urand());
    if (c->nan_row >= 0 && c->K > 0) set(A, c->dt, at(c->row, c->ta, c->nan_row, c->K / 2, c->lda), NAN);
    for (int64_t i = 0; i < nc; i++) ref[i] = get(C0, c->dt, i), mag[i] = 0;
    for (int64_t i = 0; i < c->M; i++)
        for (int64_t j = 0; j < c->N; j++) {
            double m = 0;
            double s = c->alpha != 0 ? ref_entry(c->dt, c->row, c->ta, c->tb, A, c->lda, B, c->ldb, c->K, i, j, &m) : 0;
            int64_t o = at(c->row, 0, i, j, c->ldc);
            double old = ref[o];
            ref[o] = c->alpha * s + (c->beta == 0 ? 0 : c->beta * old);
            mag[o] = fabs(c->alpha) * m + (c->beta == 0 ? 0 : fabs(c->beta * old));
        }
    static const int threads[3] = {1, 2, 4};
    for (int t = 0; t < 3; t++) {
        memcpy(C[t], C0, es * (size_t)nc);
        at_plan *plan = at_plan_create_ex(c->dt, c->row, c->ta, c->tb, c->M, c->N, c->K, c->lda, c->ldb,
                                          c->ldc, threads[t]);
        if (!plan) {
            fail(c, "plan_create", 0);
            goto done;
        }
        if (at_plan_execute(plan, c->alpha, A, B, c->beta, C[t]) != AT_OK) fail(c, "execute", threads[t]);
        at_plan_info info;
        at_plan_get_info(plan, &info);
        if (t == 0) count_steps(plan);
        if (t == 0 && info.path == 1) packed_plans++;
        if (t == 2 && info.threads > 1) split_plans++; /* the 4-thread plan really split */
        at_plan_destroy(plan);
    }
    memcpy(C[3], C0, es * (size_t)nc);
    if (at_gemm(c->dt, c->row, c->ta, c->tb, c->M, c->N, c->K, c->alpha, A, c->lda, B, c->ldb, c->beta,
                C[3], c->ldc) != AT_OK)
        fail(c, "at_gemm", 0);
    double eps = c->dt ? 2.220446049250313e-16 : 1.1920928955078125e-07;
    double worst = 0;
    int bad_nan = 0;
    int64_t rows = c->row ? c->M : c->N, inner = c->row ? c->N : c->M;
    for (int64_t o = 0; o < nc; o++) {
        int64_t x = o % c->ldc, y = o / c->ldc;
        double g = get(C[0], c->dt, o);
        if (y >= rows || x >= inner) { /* padding: bit for bit what was there */
            if (memcmp((char *)C[0] + o * (int64_t)es, (char *)C0 + o * (int64_t)es, es)) bad_nan = 1;
            continue;
        }
        if (isnan(ref[o]) || isnan(g)) {
            if (isnan(ref[o]) != isnan(g)) bad_nan = 1;
            continue;
        }
        double err = fabs(g - ref[o]), bound = 2.0 * (double)(c->K + 2) * eps * mag[o] + 1e-300;
        if (err > bound && err / bound > worst) worst = err / bound;
    }
    checks++;
    if (worst > 0) fail(c, "error_bound", worst);
    if (bad_nan) fail(c, "nan_or_padding", 0);
    for (int t = 1; t < 4; t++)
        if (memcmp(C[t], C[0], es * (size_t)nc)) fail(c, t == 3 ? "at_gemm_bitwise" : "threads_bitwise", t);
done:
    free(A);
    free(B);
    free(C0);
    for (int t = 0; t < 4; t++) free(C[t]);
    free(ref);
    free(mag);
}

static gcase random_case(void)
{
    gcase c;
    c.dt = (int)(next() & 1);
    c.row = (int)(next() >> 7 & 1);
    c.ta = (int)(next() >> 9 & 1);
    c.tb = (int)(next() >> 11 & 1);
    c.M = pick(dims, 20);
    c.N = pick(dims, 20);
    c.K = pick(dims, 20);
    c.alpha = alphas[next() % 5];
    c.beta = betas[next() % 4];
    c.nan_row = (c.alpha != 0 && c.M > 0 && next() % 8 == 0) ? (int)(next() % (uint64_t)c.M) : -1;
    /* Leading dims: the stored inner extent plus 0..3 (odd pads misalign columns). */
    int64_t ia = c.row ? (c.ta ? c.M : c.K) : (c.ta ? c.K : c.M);
    int64_t ib = c.row ? (c.tb ? c.K : c.N) : (c.tb ? c.N : c.K);
    int64_t ic = c.row ? c.N : c.M;
    c.lda = (ia > 0 ? ia : 1) + (int64_t)(next() % 4);
    c.ldb = (ib > 0 ? ib : 1) + (int64_t)(next() % 4);
    c.ldc = (ic > 0 ? ic : 1) + (int64_t)(next() % 4);
    return c;
}

static int suite(int cases)
{
    at_tune_params saved;
    at_params_get(&saved);
    for (int phase = 0; phase < 2; phase++) {
        if (phase == 1) {
            at_tune_params p = packed_everywhere(saved);
            at_params_set(&p);
        }
        long before = failures;
        for (int i = 0; i < cases; i++) {
            gcase c = random_case();
            run_case(&c);
        }
        printf("{\"event\":\"phase\",\"phase\":\"%s\",\"cases\":%d,\"failures\":%ld}\n",
               phase ? "packed" : "default", cases, failures - before);
        fflush(stdout);
    }
    at_params_set(NULL);
    printf("{\"event\":\"suite\",\"cases\":%ld,\"failures\":%ld,\"kernels\":%d,"
           "\"kernel_steps\":%ld,\"edge_steps\":%ld,\"packed_plans\":%ld,\"split_plans\":%ld,"
           "\"sme2_steps\":%ld,\"pa_steps\":%ld,\"pb_steps\":%ld,\"hybrid_steps\":%ld,"
           "\"partial_steps\":%ld}\n",
           checks, failures, at_kernel_count(), kernel_steps, edge_steps, packed_plans, split_plans,
           sme2_steps, pa_steps, pb_steps, hybrid_steps, partial_steps);
    return failures != 0;
}

/* ---- abi --------------------------------------------------------------------- */

static int abi_failures;

static void abi_report(const char *name, uint64_t bits)
{
    if (bits) abi_failures++;
    printf("{\"event\":\"abi\",\"call\":\"%s\",\"ok\":%s,\"bits\":%llu}\n", name, bits ? "false" : "true",
           (unsigned long long)bits);
}

static int abi(void)
{
    static double buf[3][128 * 128];
    for (int i = 0; i < 128 * 128; i++) buf[0][i] = buf[1][i] = buf[2][i] = 0.25;
    int calls = 0;
    at_tune_params saved;
    at_params_get(&saved);
    for (int packed = 0; packed < 2; packed++) {
        if (packed) {
            at_tune_params p = saved;
            p.pack_flops[0] = p.pack_flops[1] = 0;
            p.thread_flops = 0;
            at_params_set(&p);
        }
        for (int dt = 0; dt < 2; dt++) {
            at_plan *plan = at_plan_create_ex(dt, AT_COL_MAJOR, 1, 0, 70, 53, 41, 100, 100, 100, packed ? 2 : 1);
            uint64_t x[8] = {(uint64_t)(uintptr_t)plan, (uint64_t)(uintptr_t)buf[0],
                             (uint64_t)(uintptr_t)buf[1], (uint64_t)(uintptr_t)buf[2], 0, 0, 0, 0};
            char name[64];
            snprintf(name, sizeof name, "at_plan_execute/%s/%s", dt ? "f64" : "f32", packed ? "packed" : "small");
            abi_report(name, rt_abi_call((void (*)(void))at_plan_execute, x, 1.5, 0.5, 0));
            calls++;
            at_plan_destroy(plan);
        }
    }
    at_params_set(NULL);
#ifdef RT_SME
    for (int k = 0; k < at_kernel_count(); k++) {
        at_kernel_info info;
        at_kernel_get(k, &info);
        if (!at_kernel_table[k].kernel.fn_s) continue;
        int64_t ld = 128;
        int64_t lda = at_kernel_table[k].kernel.pack_a_ld ? at_kernel_table[k].kernel.pack_a_ld : ld;
        int64_t ldb = at_kernel_table[k].kernel.pack_b_ld ? at_kernel_table[k].kernel.pack_b_ld : ld;
        /* x7: the extent a streaming entry is called with (a variable block's). */
        uint64_t x[8] = {17, (uint64_t)(uintptr_t)buf[0], (uint64_t)lda, (uint64_t)(uintptr_t)buf[1],
                         (uint64_t)ldb, (uint64_t)(uintptr_t)buf[2], (uint64_t)ld,
                         (uint64_t)info.mr | (uint64_t)info.nr << 32};
        char name[128];
        snprintf(name, sizeof name, "%s_s", info.name);
        abi_report(name, rt_abi_call((void (*)(void))at_kernel_table[k].kernel.fn_s, x, 1.0, 1.0,
                                     (info.dtype == 0) | 2));
        calls++;
    }
    /* A caller's dormant ZA (pending lazy save): the library commits the save
     * (every row, TPIDR2_EL0 cleared) before its streaming region uses ZA. */
    {
        static unsigned char za[256 * 256];
        memset(za, 0xee, sizeof za);
        at_plan *plan = at_plan_create_ex(AT_F32, AT_COL_MAJOR, 0, 0, 70, 53, 41, 100, 100, 100, 1);
        uint64_t x[8] = {(uint64_t)(uintptr_t)plan, (uint64_t)(uintptr_t)buf[0],
                         (uint64_t)(uintptr_t)buf[1], (uint64_t)(uintptr_t)buf[2], 0, 0, 0, 0};
        uint64_t svl = (uint64_t)at__svl_bytes();
        uint64_t state = rt_lazy_za_call((void (*)(void))at_plan_execute, x, 1.0, 0.0, za, svl);
        uint64_t bits = state ? 1u << 22 : 0;
        for (uint64_t r = 0; r < svl; r++)
            for (uint64_t b = 0; b < svl; b++)
                if (za[r * svl + b] != (unsigned char)r) bits |= 1u << 23;
        if (za[svl * svl] != 0xee) bits |= 1u << 24; /* no row past the slices asked for */
        abi_report("lazy_za_save/at_plan_execute", bits);
        calls++;
        at_plan_destroy(plan);
    }
#endif
    printf("{\"event\":\"abi_done\",\"calls\":%d,\"failures\":%d}\n", calls, abi_failures);
    return abi_failures != 0;
}

/* One product on whatever CPU QEMU emulates: right whatever kernels this CPU
 * can run (an SME2 library on a CPU without SME2, or of another SVL, plans
 * with the rest), with at_cpu_check's verdict on the kernels it leaves out. */
static int one(void)
{
    enum { n = 67 };
    static float a[n * n], b[n * n], c[n * n];
    for (int i = 0; i < n * n; i++) {
        a[i] = (float)(i % 7) - 3;
        b[i] = (float)(i % 5) - 2;
        c[i] = 9;
    }
    at_plan *plan = at_plan_create_ex(AT_F32, AT_COL_MAJOR, 0, 1, n, n, n, n, n, n, 1);
    int rc = plan ? at_plan_execute(plan, 1.0, a, b, 0.0, c) : -1;
    int wrong = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double ref = 0;
            for (int p = 0; p < n; p++) ref += (double)a[i + p * n] * b[j + p * n];
            wrong += c[i + j * n] != (float)ref; /* small integers: exact */
        }
    int usable = 0, total = at_kernel_count();
    for (int k = 0; k < total; k++) usable += at_kernel_usable(k);
    int check = at_cpu_check();
    /* Which SME2 set the plan ran (the SVL its kernels' names end in; -1 for a
     * mix) and how much of C it computed. */
    int64_t *calls = calloc((size_t)total + 1, sizeof *calls), *elements = calloc((size_t)total + 1, sizeof *elements);
    int64_t streamed = 0;
    int svl_used = 0;
    if (plan && calls && elements && at_plan_usage(plan, calls, elements) == 0)
        for (int k = 0; k < total; k++) {
            at_kernel_info ki;
            const char *vl = elements[k] && at_kernel_get(k, &ki) == 0 ? strstr(ki.name, "_vl") : NULL;
            if (!vl) continue;
            streamed += elements[k];
            int bits = atoi(vl + 3);
            svl_used = svl_used == 0 || svl_used == bits ? bits : -1;
        }
    free(calls);
    free(elements);
    /* The path of 2048 x 16 x 2048 where every product past nothing packs and every A
     * counts as coming from memory: read in place, unless SME2 kernels may run it
     * (plan.c, takes_packed_path). */
    int wide_path = -1;
    at_tune_params params;
    if (at_params_get(&params) == AT_OK) {
        params.pack_flops[AT_F32] = 0;
        params.place_stream_bytes[AT_F32] = 0;
        at_plan *wide = at_params_set(&params) == AT_OK ?
            at_plan_create_ex(AT_F32, AT_COL_MAJOR, 0, 0, 2048, 16, 2048, 2048, 2048, 2048, 1) : NULL;
        at_plan_info wide_info;
        if (wide && at_plan_get_info(wide, &wide_info) == AT_OK) wide_path = wide_info.path;
        at_plan_destroy(wide);
        at_params_set(NULL);
    }
    printf("{\"event\":\"one\",\"rc\":%d,\"wrong\":%d,\"usable\":%d,\"kernels\":%d,"
           "\"cpu_check\":%d,\"streamed\":%lld,\"svl_used\":%d,\"wide_path\":%d,\"error\":\"%s\"}\n",
           rc, wrong, usable, total, check, (long long)streamed, svl_used, wide_path,
           check ? at_last_error() : "");
    at_plan_destroy(plan);
    return 0;
}

int main(int argc, char **argv)
{
    int cases = 150;
    const char *cmd = argc > 1 ? argv[1] : "suite";
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--seed")) rng ^= strtoull(argv[i + 1], NULL, 10) * 0x9e3779b97f4a7c15ULL;
        if (!strcmp(argv[i], "--cases")) cases = atoi(argv[i + 1]);
    }
    if (!rng) rng = 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(cmd, "suite")) return suite(cases);
    if (!strcmp(cmd, "abi")) return abi();
    if (!strcmp(cmd, "one")) return one();
    fprintf(stderr, "usage: driver suite [--seed N] [--cases N] | driver abi | driver one\n");
    return 2;
}
