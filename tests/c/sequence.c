/* sequence.c: a long run of varied BLAS calls in one process, every one checked,
 * on whatever CPU runs the program (tests/test_cpu_models.py runs it under QEMU's
 * CPU models, aarch64 and x86-64, linked with the library of that architecture).
 *
 *   sequence [--seed N] [--calls N] [--set-svl BYTES]
 *
 * What one call leaves behind (a cached plan, the thread's front cache, a packed
 * panel, streaming or ZA state) must never change the next call's answer, and a
 * CPU without some of the library's instruction sets must get right answers from
 * the kernels it can run.  So the calls go through every entry a program uses
 * (cblas_sgemm/dgemm, sgemm_/dgemm_, at_sgemm/dgemm, at_gemm, the strided CBLAS
 * batch) in a random order, with shapes 0, 1, primes and around every kernel and
 * ZA tile, K from 0, both layouts, every transposition, leading dimensions up to
 * 1000 above the operand, operands one element off their allocation's alignment,
 * A and B in one buffer (both read-only: BLAS allows it), alpha 0 (A and B full of
 * NaN: never read), beta 0 (C full of NaN or Inf: never read), -0.0 as either,
 * a NaN alpha or beta, an infinite beta, a NaN in A (must reach exactly its
 * row).  A quarter of the calls repeat an earlier product with other leading
 * dimensions, scalars and entry; an eighth repeat the previous call
 * exactly (the front cache's one-kernel shortcut); the thread count changes every
 * few dozen calls, and the middle third runs with the packed path forced.  Now
 * and then a call with a bad argument must reach xerbla_ / cblas_xerbla (this
 * program's own, which override the library's weak ones) and leave C as it was.
 *
 * Bound: |c - ref| <= 2 (K + 2) eps (|alpha| sum |a b| + |beta c|) against a
 * double-precision loop; C's padding and a guard after it bit for bit unchanged.
 *
 * --set-svl (aarch64 Linux with SME): after the first third of the calls the
 * program gives itself another streaming vector length (prctl(PR_SME_SET_VL)),
 * as one may; the library chose its SME2 kernels for the first one.
 *
 * Last, it plans representative shapes and reports which kernel families the
 * plans use and whether any uses a kernel at_kernel_usable() refuses.  One JSON
 * object per line on stdout: "fail" events (the first 20), then "summary".
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune.h"

#if defined(__aarch64__) && defined(__linux__)
#include <sys/prctl.h>
#ifndef PR_SME_SET_VL
#define PR_SME_SET_VL 63
#define PR_SME_GET_VL 64
#endif
#endif

#include "test_gemm.h"
static int below(int n) { return (int)(next() % (uint64_t)n); }
#define PICK(v) (v)[below((int)(sizeof(v) / sizeof(v)[0]))]

/* Around the kernels' blocks (NEON 8x12, AVX2 6x16/8x8, SME2 tiles of 16..64 rows). */
static const int sides[] = {0,  1,  1,  2,  3,  4,  5,  7,  8,  9,  12, 13, 15,
                            16, 17, 24, 31, 32, 33, 47, 48, 63, 64, 65, 97, 130};
static const int depths[] = {0, 1, 1, 2, 3, 4, 7, 8, 16, 17, 31, 64, 65, 129};
static const int pads[] = {0, 0, 0, 1, 3, 17, 1000};
/* -0.0 is zero to BLAS (A, B or C not read); a NaN alpha or beta gives NaN
 * wherever its term is present (alpha's only when K > 0); an infinite beta
 * gives infinities of C's signs. */
static const double alphas[] = {1.0, 1.0, -1.5, 0.5, 0.0, 2.0, 1.0, -0.0, NAN};
static const double betas[] = {0.0, 0.0, 1.0, -2.0, 0.5, 1.0, -0.0, NAN, INFINITY};

enum { E_CBLAS, E_FORTRAN, E_AT_TYPED, E_AT_GEMM, E_BATCH, ENTRIES };
static const char *const entry_names[ENTRIES] = {"cblas", "fortran", "at_typed", "at_gemm", "batch_strided"};

typedef struct {
    int dt, row, ta, tb, entry, batch, alias, nan_row;
    int M, N, K, lda, ldb, ldc;
    int off_a, off_b, off_c; /* elements the operands start past their allocation */
    double alpha, beta;
    int c_fill; /* beta == 0: C holds NaN (0) or Inf (1) */
} call;

static long calls_done, failures, checks[ENTRIES], bad_calls, xerbla_seen, threads_set[5];
static int last_xerbla = -1;

/* This program's handlers replace the library's weak ones: a valid call must not
 * reach them, a bad one must, with the reference's parameter number. */
void xerbla_(const char *srname, const int *info, size_t len)
{
    (void)srname;
    (void)len;
    xerbla_seen++;
    last_xerbla = *info;
}
void cblas_xerbla(int p, const char *rout, const char *form, ...)
{
    (void)rout;
    (void)form;
    xerbla_seen++;
    last_xerbla = p;
}

static void report(const call *c, long index, const char *what, double detail)
{
    failures++;
    if (failures > 20) return;
    printf("{\"event\":\"fail\",\"call\":%ld,\"what\":\"%s\",\"detail\":%g,\"entry\":\"%s\",\"dtype\":\"%s\","
           "\"layout\":\"%s\",\"trans\":\"%c%c\",\"M\":%d,\"N\":%d,\"K\":%d,\"lda\":%d,\"ldb\":%d,\"ldc\":%d,"
           "\"offsets\":[%d,%d,%d],\"alias\":%d,\"batch\":%d,\"alpha\":%g,\"beta\":%g}\n",
           index, what, isfinite(detail) ? detail : -1.0, entry_names[c->entry], c->dt ? "f64" : "f32",
           c->row ? "row" : "col", c->ta ? 't' : 'n', c->tb ? 't' : 'n', c->M, c->N, c->K, c->lda, c->ldb,
           c->ldc, c->off_a, c->off_b, c->off_c, c->alias, c->batch, c->alpha, c->beta);
    fflush(stdout);
}


static int inner(int row, int trans, int r, int c) { return row ? (trans ? r : c) : (trans ? c : r); }

/* Fills in everything but the product (dtype, layout, shape, transpositions). */
static void dress(call *c)
{
    c->entry = below(ENTRIES);
    if (c->entry == E_FORTRAN) c->row = 0; /* Fortran BLAS is column-major */
    int ia = inner(c->row, c->ta, c->M, c->K), ib = inner(c->row, c->tb, c->K, c->N), ic = c->row ? c->N : c->M;
    c->lda = (ia > 1 ? ia : 1) + PICK(pads);
    c->ldb = (ib > 1 ? ib : 1) + PICK(pads);
    c->ldc = (ic > 1 ? ic : 1) + PICK(pads);
    c->off_a = below(4) == 0;
    c->off_b = below(4) == 0;
    c->off_c = below(4) == 0;
    c->alias = below(6) == 0;
    c->batch = c->entry == E_BATCH ? 1 + below(3) : 1;
    c->alpha = PICK(alphas);
    c->beta = PICK(betas);
    c->c_fill = below(2);
    c->nan_row = c->alpha != 0 && c->M > 0 && c->K > 0 && below(10) == 0 ? below(c->M) : -1;
}

static void fresh(call *c)
{
    c->dt = below(2);
    c->row = below(2);
    c->ta = below(2);
    c->tb = below(2);
    c->M = PICK(sides);
    c->N = PICK(sides);
    c->K = PICK(depths);
}

/* One call through its entry; the status at_* returned (BLAS entries: 0). */
static int invoke(const call *c, const void *A, const void *B, void *C, int64_t sa, int64_t sb, int64_t sc)
{
    int order = c->row ? CblasRowMajor : CblasColMajor;
    int ta = c->ta ? CblasTrans : CblasNoTrans, tb = c->tb ? CblasTrans : CblasNoTrans;
    float fa = (float)c->alpha, fb = (float)c->beta;
    switch (c->entry) {
    case E_CBLAS:
        if (c->dt)
            cblas_dgemm(order, ta, tb, c->M, c->N, c->K, c->alpha, A, c->lda, B, c->ldb, c->beta, C, c->ldc);
        else
            cblas_sgemm(order, ta, tb, c->M, c->N, c->K, fa, A, c->lda, B, c->ldb, fb, C, c->ldc);
        return 0;
    case E_FORTRAN: {
        const char *t = "NT";
        if (c->dt)
            dgemm_(t + c->ta, t + c->tb, &c->M, &c->N, &c->K, &c->alpha, A, &c->lda, B, &c->ldb, &c->beta, C, &c->ldc);
        else
            sgemm_(t + c->ta, t + c->tb, &c->M, &c->N, &c->K, &fa, A, &c->lda, B, &c->ldb, &fb, C, &c->ldc);
        return 0;
    }
    case E_AT_TYPED:
        return c->dt ? at_dgemm(c->row, c->ta, c->tb, c->M, c->N, c->K, c->alpha, A, c->lda, B, c->ldb, c->beta,
                                C, c->ldc)
                     : at_sgemm(c->row, c->ta, c->tb, c->M, c->N, c->K, fa, A, c->lda, B, c->ldb, fb, C, c->ldc);
    case E_AT_GEMM:
        return at_gemm(c->dt, c->row, c->ta, c->tb, c->M, c->N, c->K, c->alpha, A, c->lda, B, c->ldb, c->beta,
                       C, c->ldc);
    default:
        if (c->dt)
            cblas_dgemm_batch_strided(order, ta, tb, c->M, c->N, c->K, c->alpha, A, c->lda, (int)sa, B, c->ldb,
                                      (int)sb, c->beta, C, c->ldc, (int)sc, c->batch);
        else
            cblas_sgemm_batch_strided(order, ta, tb, c->M, c->N, c->K, fa, A, c->lda, (int)sa, B, c->ldb, (int)sb,
                                      fb, C, c->ldc, (int)sc, c->batch);
        return 0;
    }
}

enum { GUARD = 16 };

static void run(const call *c, long index)
{
    size_t es = c->dt ? sizeof(double) : sizeof(float);
    int64_t na = extent(c->row, c->ta, c->M, c->K, c->lda), nb = extent(c->row, c->tb, c->K, c->N, c->ldb);
    int64_t nc = extent(c->row, 0, c->M, c->N, c->ldc);
    /* Batch items: A shared (stride 0) every other call, B and C one after another. */
    int64_t sa = c->batch > 1 && index % 2 ? 0 : na, sb = nb, sc = nc;
    int64_t total_a = sa * (c->batch - 1) + na, total_b = sb * (c->batch - 1) + nb;
    int64_t total_c = sc * (c->batch - 1) + nc;
    /* A and B in one buffer: B starts inside A's elements (both only read). */
    int64_t b_in_a = c->alias ? (int64_t)(next() % (uint64_t)total_a) : 0;
    int64_t size_ab = c->alias ? (b_in_a + total_b > total_a ? b_in_a + total_b : total_a) + 1 : total_a + 1;
    char *bufa = malloc(es * (size_t)size_ab), *bufb = c->alias ? NULL : malloc(es * (size_t)(total_b + 1));
    char *bufc = malloc(es * (size_t)(total_c + 1 + GUARD)), *before = malloc(es * (size_t)(total_c + 1 + GUARD));
    double *ref = malloc(sizeof(double) * (size_t)total_c), *mag = malloc(sizeof(double) * (size_t)total_c);
    if (!bufa || (!c->alias && !bufb) || !bufc || !before || !ref || !mag) {
        report(c, index, "test_out_of_memory", 0);
        goto done;
    }
    char *A = bufa + es * (size_t)c->off_a;
    char *B = c->alias ? A + es * (size_t)b_in_a : bufb + es * (size_t)c->off_b;
    char *C = bufc + es * (size_t)c->off_c;
    for (int64_t i = 0; i < size_ab - c->off_a; i++) set(A, c->dt, i, c->alpha == 0 ? NAN : urand());
    if (!c->alias)
        for (int64_t i = 0; i < total_b; i++) set(B, c->dt, i, c->alpha == 0 ? NAN : urand());
    for (int64_t i = 0; i < total_c + GUARD + 1 - c->off_c; i++)
        set(C, c->dt, i, c->beta == 0 ? (c->c_fill ? INFINITY : NAN) : urand());
    if (c->nan_row >= 0) {
        /* One NaN in op(A)'s row nan_row of every item (with stride 0, the shared one). */
        for (int b = 0; b < c->batch; b++)
            set(A + es * (size_t)(sa * b), c->dt, at(c->row, c->ta, c->nan_row, c->K / 2, c->lda), NAN);
    }
    memcpy(before, bufc, es * (size_t)(total_c + 1 + GUARD));

    for (int b = 0; b < c->batch; b++) {
        const char *a = A + es * (size_t)(sa * b), *bb = B + es * (size_t)(sb * b);
        int64_t o0 = sc * b;
        for (int64_t i = 0; i < c->M; i++)
            for (int64_t j = 0; j < c->N; j++) {
                double m = 0;
                double s = c->alpha != 0 ? ref_entry(c->dt, c->row, c->ta, c->tb, a, c->lda, bb, c->ldb, c->K, i, j, &m)
                                         : 0;
                int64_t o = o0 + at(c->row, 0, i, j, c->ldc);
                double old = get(C, c->dt, o);
                /* The reference BLAS: no product term for alpha == 0 or K == 0, no C term for beta == 0. */
                int product = c->alpha != 0 && c->K > 0;
                ref[o] = (product ? c->alpha * s : 0) + (c->beta == 0 ? 0 : c->beta * old);
                mag[o] = (product ? fabs(c->alpha) * m : 0) + (c->beta == 0 ? 0 : fabs(c->beta * old));
            }
    }
    long xerbla_before = xerbla_seen;
    int rc = invoke(c, A, B, C, sa, sb, sc);
    checks[c->entry]++;
    if (rc != AT_OK) report(c, index, "status", rc);
    if (xerbla_seen != xerbla_before) report(c, index, "xerbla_on_valid_call", last_xerbla);

    double eps = c->dt ? 2.220446049250313e-16 : 1.1920928955078125e-07;
    double worst = 0;
    int untouched_wrong = 0, nan_wrong = 0;
    int64_t rows = c->row ? c->M : c->N, in = c->row ? c->N : c->M;
    for (int64_t o = 0; o < total_c + GUARD + 1 - c->off_c; o++) {
        int64_t item = sc ? o / sc : 0, w = o - item * sc;
        int inside = o < total_c && item < c->batch && w / c->ldc < rows && w % c->ldc < in;
        if (!inside) { /* padding, the gap between items, the guard: bit for bit */
            if (memcmp(C + o * (int64_t)es, before + (c->off_c + o) * (int64_t)es, es)) untouched_wrong = 1;
            continue;
        }
        double g = get(C, c->dt, o);
        if (isnan(ref[o]) || isnan(g)) {
            nan_wrong |= isnan(ref[o]) != isnan(g);
            continue;
        }
        if (isinf(ref[o]) || isinf(g)) { /* an infinite beta: exactly C's infinity */
            nan_wrong |= g != ref[o];
            continue;
        }
        double err = fabs(g - ref[o]), bound = 2.0 * (double)(c->K + 2) * eps * mag[o] + 1e-300;
        if (!(err <= bound) && !(err / bound <= worst)) worst = isfinite(err) ? err / bound : INFINITY;
    }
    if (worst > 0) report(c, index, "error_bound", worst);
    if (nan_wrong) report(c, index, "nan_mismatch", 0);
    if (untouched_wrong) report(c, index, "wrote_outside_c", 0);
done:
    free(bufa);
    free(bufb);
    free(bufc);
    free(before);
    free(ref);
    free(mag);
}

/* A call with one bad argument (K < 0, lda or ldc below its operand): xerbla
 * must hear of it, numbered as the reference does, and C must stay as it was. */
static void bad_call(long index)
{
    call c = {0};
    fresh(&c);
    c.M = 2 + below(3);
    c.N = 2 + below(3);
    c.K = 2 + below(3);
    dress(&c);
    if (c.entry != E_FORTRAN) c.entry = E_CBLAS;
    int fortran = c.entry == E_FORTRAN;
    c.lda = inner(c.row, c.ta, c.M, c.K) + 1;
    c.ldb = inner(c.row, c.tb, c.K, c.N) + 1;
    c.ldc = (c.row ? c.N : c.M) + 1;
    int kind = below(3), expect;
    if (kind == 0) {
        c.K = -1;
        expect = fortran ? 5 : 6;
    } else if (kind == 1) {
        c.lda = inner(c.row, c.ta, c.M, c.K) - 1;
        expect = fortran ? 8 : c.row ? 11 : 9; /* reference CBLAS numbers a row-major lda as ldb */
    } else {
        c.ldc = (c.row ? c.N : c.M) - 1;
        expect = fortran ? 13 : 14;
    }
    size_t es = c.dt ? sizeof(double) : sizeof(float);
    double operands[64] = {0};
    char C[64 * sizeof(double)], was[sizeof C];
    for (int i = 0; i < 64; i++) set(C, c.dt, i, urand());
    memcpy(was, C, sizeof C);
    long seen = xerbla_seen;
    last_xerbla = -1;
    invoke(&c, operands, operands, C, 0, 0, 0);
    bad_calls++;
    if (xerbla_seen != seen + 1 || last_xerbla != expect) report(&c, index, "xerbla_not_called", last_xerbla);
    if (memcmp(C, was, es * 64)) report(&c, index, "bad_call_wrote_c", 0);
}

/* Which families (the ISA field of a kernel's name, at_<x>gemm_<isa>_...) the
 * plans of representative shapes use, and whether one uses a refused kernel. */
static void families(long *refused_steps, char *out, size_t size)
{
    int total = at_kernel_count();
    int64_t *calls = calloc((size_t)total + 1, sizeof *calls), *elements = calloc((size_t)total + 1, sizeof *elements);
    int64_t *sum = calloc((size_t)total + 1, sizeof *sum);
    static const int shapes[][3] = {{8, 128, 128}, {67, 67, 67}, {130, 97, 65}, {1, 64, 300}, {200, 3, 40}};
    *refused_steps = 0;
    if (!calls || !elements || !sum) goto done;
    for (int dt = 0; dt < 2; dt++)
        for (int t = 0; t < 4; t++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
                const int *sh = shapes[s];
                at_plan *p = at_plan_create_ex(dt, AT_COL_MAJOR, t >> 1, t & 1, sh[0], sh[1], sh[2],
                                               t >> 1 ? sh[2] : sh[0], t & 1 ? sh[1] : sh[2], sh[0], 1);
                if (!p) continue;
                if (at_plan_usage(p, calls, elements) == AT_OK)
                    for (int k = 0; k <= total; k++) {
                        sum[k] += elements[k];
                        if (k < total && elements[k] && !at_kernel_usable(k)) *refused_steps += calls[k];
                    }
                at_plan_destroy(p);
            }
    /* "isa": elements, the portable edge code as "edge". */
    size_t used = 0;
    out[0] = 0;
    char seen[16][24];
    int64_t per[16] = {0};
    int nseen = 0;
    for (int k = 0; k <= total; k++) {
        if (!sum[k]) continue;
        char isa[24] = "edge";
        at_kernel_info info;
        if (k < total && at_kernel_get(k, &info) == AT_OK) {
            const char *p = strchr(info.name + 3, '_'); /* after "at_sgemm" */
            const char *q = p ? strchr(p + 1, '_') : NULL;
            if (p && q && (size_t)(q - p - 1) < sizeof isa) {
                memcpy(isa, p + 1, (size_t)(q - p - 1));
                isa[q - p - 1] = 0;
            }
        }
        int f = 0;
        while (f < nseen && strcmp(seen[f], isa)) f++;
        if (f == nseen && nseen < 16) memcpy(seen[nseen++], isa, sizeof isa);
        if (f < 16) per[f] += sum[k];
    }
    for (int f = 0; f < nseen; f++) {
        used += (size_t)snprintf(out + used, used < size ? size - used : 0, "%s\"%s\":%lld", f ? "," : "", seen[f],
                                 (long long)per[f]);
    }
done:
    free(calls);
    free(elements);
    free(sum);
}

/* The instruction sets this CPU reports, by the names the library's kernel
 * records use (x86; empty elsewhere: the library's own check says the rest). */
static void cpu_features(char *out, size_t size)
{
    out[0] = 0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    static const char *const names[] = {"avx", "avx2", "fma", "avx512f", "avx512vl", "avx512bw", "avx512dq"};
    int has[7];
    __builtin_cpu_init();
    has[0] = __builtin_cpu_supports("avx");
    has[1] = __builtin_cpu_supports("avx2");
    has[2] = __builtin_cpu_supports("fma");
    has[3] = __builtin_cpu_supports("avx512f");
    has[4] = __builtin_cpu_supports("avx512vl");
    has[5] = __builtin_cpu_supports("avx512bw");
    has[6] = __builtin_cpu_supports("avx512dq");
    size_t used = 0;
    for (int i = 0; i < 7; i++)
        if (has[i] && used < size)
            used += (size_t)snprintf(out + used, size - used, "%s%s", used ? " " : "", names[i]);
#else
    (void)size;
#endif
}

int main(int argc, char **argv)
{
    long n = 600;
    int set_svl = 0, svl_after = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--seed")) rng ^= strtoull(argv[i + 1], NULL, 10) * 0x9e3779b97f4a7c15ULL;
        if (!strcmp(argv[i], "--calls")) n = atol(argv[i + 1]);
        if (!strcmp(argv[i], "--set-svl")) set_svl = atoi(argv[i + 1]);
    }
    if (!rng) rng = 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* Asked first, as a program checking its library would: the rest must not depend on it. */
    int cpu = at_cpu_check();
    char cpu_error[300];
    snprintf(cpu_error, sizeof cpu_error, "%s", cpu ? at_last_error() : "");
    for (char *p = cpu_error; *p; p++)
        if (*p == '"' || *p == '\\') *p = '\'';

    at_tune_params saved, packed;
    at_params_get(&saved);
    packed = packed_everywhere(saved);

    enum { REMEMBER = 64 };
    call seen[REMEMBER], last = {0};
    int nseen = 0;
    for (long i = 0; i < n; i++) {
        if (i == n / 3) at_params_set(&packed);
#ifdef PR_SME_SET_VL
        if (i == n / 3 && set_svl) svl_after = prctl(PR_SME_SET_VL, set_svl, 0, 0, 0) & 0xffff;
#else
        (void)set_svl; /* no SME here: nothing to set */
#endif
        if (i == 2 * n / 3) at_params_set(NULL);
        if (i % 37 == 0) {
            int t = 1 + below(4);
            at_set_num_threads(t);
            threads_set[t]++;
        }
        if (i % 41 == 40) {
            bad_call(i);
            continue;
        }
        call c = {0};
        int how = below(8);
        if (i > 0 && how == 0) {
            c = last; /* the previous call again: same plan, other numbers */
            c.alpha = PICK(alphas);
            c.beta = PICK(betas);
            c.c_fill = below(2);
            c.nan_row = c.alpha != 0 && c.M > 0 && c.K > 0 && below(10) == 0 ? below(c.M) : -1;
        } else if (nseen && how <= 2) {
            c = seen[below(nseen < REMEMBER ? nseen : REMEMBER)]; /* an earlier product, dressed anew */
            dress(&c);
        } else {
            fresh(&c);
            dress(&c);
            seen[nseen++ % REMEMBER] = c;
        }
        run(&c, i);
        last = c;
        calls_done++;
    }
    at_params_set(NULL);
    int cpu_after = at_cpu_check();
    char after_error[300];
    snprintf(after_error, sizeof after_error, "%s", cpu_after ? at_last_error() : "");
    for (char *p = after_error; *p; p++)
        if (*p == '"' || *p == '\\') *p = '\'';

    char features[128];
    cpu_features(features, sizeof features);
    long refused = 0;
    char fam[400];
    families(&refused, fam, sizeof fam);
    int usable = 0, total = at_kernel_count();
    for (int k = 0; k < total; k++) usable += at_kernel_usable(k);
    printf("{\"event\":\"summary\",\"calls\":%ld,\"failures\":%ld,\"cblas\":%ld,\"fortran\":%ld,\"at_typed\":%ld,"
           "\"at_gemm\":%ld,\"batch_strided\":%ld,\"bad_calls\":%ld,\"kernels\":%d,\"usable\":%d,"
           "\"refused_steps\":%ld,\"cpu_check\":%d,\"cpu_error\":\"%s\",\"svl_after\":%d,\"cpu_check_after\":%d,"
           "\"cpu_error_after\":\"%s\",\"features\":\"%s\",\"families\":{%s}}\n",
           calls_done, failures, checks[E_CBLAS], checks[E_FORTRAN], checks[E_AT_TYPED], checks[E_AT_GEMM],
           checks[E_BATCH], bad_calls, total, usable, refused, cpu, cpu_error, svl_after * 8, cpu_after,
           after_error, features, fam);
    return failures != 0;
}
