/* bench_gemm.c: one timing loop for every library's GEMM.
 *
 * One process measures one library through one interface, so BLAS libraries that
 * export the same cblas_sgemm never meet: the library is dlopen()ed with
 * RTLD_LOCAL and its entry points fetched with dlsym().  Interfaces:
 *
 *   cblas    cblas_sgemm / cblas_dgemm, column-major
 *   plan     libautotune's at_plan_create_ex once, at_plan_execute per call
 *   xsmm     LIBXSMM 1.17: libxsmm_smmdispatch / libxsmm_dmmdispatch once, the kernel per call
 *   mkljit   MKL: mkl_jit_create_sgemm / _dgemm (mkl_cblas_jit_create_*) once, the JIT kernel per call
 *
 * Usage:
 *   bench_gemm --lib PATH --api cblas|plan|xsmm|mkljit --dtype f32|f64
 *              [--threads T] [--align 64|16] [--min-time S] [--repeats R]
 *              [--cold N] [--flush-mb MB] SHAPE...
 * SHAPE is M,N,K or M,N,K,BATCH (BATCH independent products, one after another
 * in memory; the plan interface runs them with at_plan_execute_batch, the others
 * call their kernel BATCH times), optionally followed by :nt, :tn or :tt, op(A)
 * op(B) as BLAS names them (column-major; A stored K x M where transposed, B N x K).
 *
 * For every shape one JSON object is printed on its own line:
 *   {"shape":..., "status":"ok"|"unsupported"|..., "err":..., "best_s":..., ...}
 * times are seconds per call (per batch for batched shapes).  "core_gflops" is
 * one core's multiply-add peak in the dtype, measured in this process just before,
 * between and just after the shape's timed repeats (the highest; -1 where this file
 * has no loop for the CPU): a virtual machine's clock drifts by a fifth over
 * minutes, so a fraction of peak means something only against the peak beside it.  "err" is the largest
 * |C - ref| / sum_k |a_ik b_kj| over the checked items, ref computed in double;
 * "check" is whether it is below (K + 4) * epsilon of the dtype (products above 8e6
 * multiply-adds are checked on every 7th row and column).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { API_CBLAS, API_PLAN, API_XSMM, API_MKLJIT };
enum { COL_MAJOR = 102, NO_TRANS = 111, TRANS = 112 };

typedef void (*cblas_s_fn)(int, int, int, int, int, int, float, const float *, int,
                           const float *, int, float, float *, int);
typedef void (*cblas_d_fn)(int, int, int, int, int, int, double, const double *, int,
                           const double *, int, double, double *, int);
typedef void *(*at_create_fn)(int, int, int, int, int64_t, int64_t, int64_t, int64_t, int64_t,
                              int64_t, int);
typedef int (*at_exec_fn)(const void *, double, const void *, const void *, double, void *);
typedef int (*at_exec_batch_fn)(const void *, int64_t, double, const void *, int64_t,
                                const void *, int64_t, double, void *, int64_t);
typedef void (*at_destroy_fn)(void *);
typedef const char *(*at_error_fn)(void);
typedef void *(*xsmm_s_dispatch_fn)(int, int, int, const int *, const int *, const int *,
                                    const float *, const float *, const int *, const int *);
typedef void *(*xsmm_d_dispatch_fn)(int, int, int, const int *, const int *, const int *,
                                    const double *, const double *, const int *, const int *);
typedef void (*xsmm_s_kernel)(const float *, const float *, float *);
typedef void (*xsmm_d_kernel)(const double *, const double *, double *);
typedef int (*mkl_jit_s_create_fn)(void **, int, int, int, int, int, int, float, int, int, float, int);
typedef int (*mkl_jit_d_create_fn)(void **, int, int, int, int, int, int, double, int, int, double, int);
typedef void *(*mkl_jit_get_fn)(const void *);
typedef int (*mkl_jit_destroy_fn)(void *);
typedef void (*mkl_s_kernel)(void *, float *, float *, float *);
typedef void (*mkl_d_kernel)(void *, double *, double *, double *);
typedef void (*set_threads_fn)(int);

typedef struct {
    int api, f64, M, N, K, batch;
    int ta, tb, lda, ldb;     /* op(A) = A^T where ta; A is lda x (ta ? M : K) */
    size_t esize, sa, sb, sc; /* elements per item */
    char *A, *B, *C;          /* item 0; item b at + b * s * esize */
    void *fn;                 /* cblas entry, xsmm kernel, mkl kernel or at_plan_execute */
    void *handle;             /* plan or mkl jitter */
    void *fn_batch;           /* at_plan_execute_batch */
} problem;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- the core's peak, beside every shape ---------------------------------------
 * Twelve independent multiply-add chains in the widest vectors the CPU runs: enough
 * to cover a 4-5 cycle latency on two pipes, few enough to stay in registers.  The
 * multiplier and addend come through volatiles, so the compiler cannot fold the loop;
 * a = a * m + c converges to about 1, so nothing overflows or goes denormal. */
#define CHAINS(X, ...)                                                                  \
    X(0, __VA_ARGS__) X(1, __VA_ARGS__) X(2, __VA_ARGS__) X(3, __VA_ARGS__) X(4, __VA_ARGS__) \
    X(5, __VA_ARGS__) X(6, __VA_ARGS__) X(7, __VA_ARGS__) X(8, __VA_ARGS__) X(9, __VA_ARGS__) \
    X(10, __VA_ARGS__) X(11, __VA_ARGS__)
#define NCHAINS 12
static volatile double fma_sink;
static volatile float fma_m32 = 0.9999999f, fma_c32 = 1e-7f;
static volatile double fma_m64 = 0.9999999, fma_c64 = 1e-7;

/* FMA_LOOP defines NAME(iters, f64) over vectors of type V: SET1 broadcasts,
 * FMA(a, m, c) is a * m + c, LANE0 reads lane 0; M and C are the volatiles. */
#define FMA_DECL(i, V, SET1, C) V a##i = SET1(C * (i + 1));
#define FMA_STEP(i, FMA) a##i = FMA(a##i, m, c);
#define FMA_SUM(i, LANE0) sum += (double)LANE0(a##i); /* every chain live */
#define FMA_LOOP(NAME, ATTR, V, SET1, FMA, LANE0, M, C)                                \
    ATTR static void NAME(long iters, int f64) {                                       \
        (void)f64;                                                                     \
        V m = SET1(M), c = SET1(C);                                                    \
        CHAINS(FMA_DECL, V, SET1, C)                                                   \
        for (long i = 0; i < iters; ++i) { CHAINS(FMA_STEP, FMA) }                     \
        double sum = 0.0;                                                              \
        CHAINS(FMA_SUM, LANE0)                                                         \
        fma_sink = sum;                                                                \
    }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define TARGET_AVX512 __attribute__((target("avx512f")))
#define TARGET_AVX2 __attribute__((target("avx2,fma")))
FMA_LOOP(fma_avx512_f32, TARGET_AVX512, __m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_cvtss_f32, fma_m32, fma_c32)
FMA_LOOP(fma_avx2_f32, TARGET_AVX2, __m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_cvtss_f32, fma_m32, fma_c32)
FMA_LOOP(fma_avx512_f64, TARGET_AVX512, __m512d, _mm512_set1_pd, _mm512_fmadd_pd, _mm512_cvtsd_f64, fma_m64, fma_c64)
FMA_LOOP(fma_avx2_f64, TARGET_AVX2, __m256d, _mm256_set1_pd, _mm256_fmadd_pd, _mm256_cvtsd_f64, fma_m64, fma_c64)
/* The widest loop the CPU runs, and its flops per iteration in each dtype. */
static void (*fma_loop(int f64, double *flops))(long, int) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) {
        *flops = NCHAINS * (f64 ? 8 : 16) * 2.0;
        return f64 ? fma_avx512_f64 : fma_avx512_f32;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        *flops = NCHAINS * (f64 ? 4 : 8) * 2.0;
        return f64 ? fma_avx2_f64 : fma_avx2_f32;
    }
    return NULL;
}
#elif defined(__aarch64__)
#include <arm_neon.h>
/* NEON's vfmaq is c + a * m: the arguments in the x86 order. */
#define NEON_FMA32(a, m, c) vfmaq_f32(c, a, m)
#define NEON_FMA64(a, m, c) vfmaq_f64(c, a, m)
#define NEON_LANE0_32(v) vgetq_lane_f32(v, 0)
#define NEON_LANE0_64(v) vgetq_lane_f64(v, 0)
FMA_LOOP(fma_neon_f32, , float32x4_t, vdupq_n_f32, NEON_FMA32, NEON_LANE0_32, fma_m32, fma_c32)
FMA_LOOP(fma_neon_f64, , float64x2_t, vdupq_n_f64, NEON_FMA64, NEON_LANE0_64, fma_m64, fma_c64)
static void (*fma_loop(int f64, double *flops))(long, int) {
    *flops = NCHAINS * (f64 ? 2 : 4) * 2.0;
    return f64 ? fma_neon_f64 : fma_neon_f32;
}
#else
static void (*fma_loop(int f64, double *flops))(long, int) {
    (void)f64; (void)flops;
    return NULL;
}
#endif

/* One run of about 100 us of the peak loop (the count found once): GFLOPS, -1 where
 * this file has no loop for the CPU. */
static double core_once(int f64) {
    static long iters[2];
    double flops = 0.0;
    void (*run)(long, int) = fma_loop(f64, &flops);
    if (!run) return -1.0;
    if (!iters[f64]) {
        iters[f64] = 256;
        for (;;) {
            double t0 = now();
            run(iters[f64], f64);
            if (now() - t0 >= 1e-4 || iters[f64] >= (1L << 30)) break;
            iters[f64] *= 2;
        }
    }
    double t0 = now();
    run(iters[f64], f64);
    double t = now() - t0;
    return t > 0 ? flops * (double)iters[f64] / t * 1e-9 : -1.0;
}

/* One core's peak: the best of 5 runs. */
static double core_gflops(int f64) {
    double best = -1.0;
    for (int r = 0; r < 5; ++r) {
        double g = core_once(f64);
        if (g > best) best = g;
    }
    return best;
}

/* One call of the measured operation: the whole batch for batched shapes. */
static void run_once(const problem *p) {
    const int M = p->M, N = p->N, K = p->K;
    if (p->api == API_PLAN && p->batch > 1) {
        ((at_exec_batch_fn)p->fn_batch)(p->handle, p->batch, 1.0, p->A, (int64_t)p->sa, p->B,
                                        (int64_t)p->sb, 0.0, p->C, (int64_t)p->sc);
        return;
    }
    for (int b = 0; b < p->batch; ++b) {
        char *a = p->A + (size_t)b * p->sa * p->esize;
        char *bb = p->B + (size_t)b * p->sb * p->esize;
        char *c = p->C + (size_t)b * p->sc * p->esize;
        switch (p->api) {
        case API_CBLAS: {
            int ta = p->ta ? TRANS : NO_TRANS, tb = p->tb ? TRANS : NO_TRANS;
            if (p->f64)
                ((cblas_d_fn)p->fn)(COL_MAJOR, ta, tb, M, N, K, 1.0, (double *)a, p->lda,
                                    (double *)bb, p->ldb, 0.0, (double *)c, M);
            else
                ((cblas_s_fn)p->fn)(COL_MAJOR, ta, tb, M, N, K, 1.0f, (float *)a, p->lda,
                                    (float *)bb, p->ldb, 0.0f, (float *)c, M);
            break;
        }
        case API_PLAN:
            ((at_exec_fn)p->fn)(p->handle, 1.0, a, bb, 0.0, c);
            break;
        case API_XSMM:
            if (p->f64) ((xsmm_d_kernel)p->fn)((double *)a, (double *)bb, (double *)c);
            else ((xsmm_s_kernel)p->fn)((float *)a, (float *)bb, (float *)c);
            break;
        case API_MKLJIT:
            if (p->f64) ((mkl_d_kernel)p->fn)(p->handle, (double *)a, (double *)bb, (double *)c);
            else ((mkl_s_kernel)p->fn)(p->handle, (float *)a, (float *)bb, (float *)c);
            break;
        }
    }
}

/* The buffer walk that evicts A, B and C from every cache level between cold calls. */
static volatile double flush_sink;
static void flush_caches(double *buf, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i += 8) { /* one touch per 64-byte line, written back dirty */
        s += buf[i];
        buf[i] = s * 1e-300;
    }
    flush_sink = s;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Deterministic inputs of magnitude <= 1 with varied signs. */
static void fill(char *buf, size_t n, int f64, unsigned seed) {
    uint64_t s = 0x9E3779B97F4A7C15ull * (seed + 1);
    for (size_t i = 0; i < n; ++i) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        double v = (double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0;
        if (f64) ((double *)buf)[i] = v;
        else ((float *)buf)[i] = (float)v;
    }
}

static double at(const problem *p, const char *base, size_t i) {
    return p->f64 ? ((const double *)base)[i] : (double)((const float *)base)[i];
}

static double check(const problem *p) {
    double worst = 0.0;
    int items[2] = {0, p->batch - 1};
    for (int t = 0; t < (p->batch > 1 ? 2 : 1); ++t) {
        size_t b = (size_t)items[t];
        const char *a = p->A + b * p->sa * p->esize, *bb = p->B + b * p->sb * p->esize;
        const char *c = p->C + b * p->sc * p->esize;
        /* Large products are checked on a lattice of rows and columns, which keeps the
         * double-precision reference from costing more than the measurement. */
        int step = (double)p->M * p->N * p->K > 8e6 ? 7 : 1;
        for (int j = 0; j < p->N; j += step)
            for (int i = 0; i < p->M; i += step) {
                double ref = 0.0, mag = 0.0;
                for (int k = 0; k < p->K; ++k) {
                    double x = at(p, a, p->ta ? (size_t)i * p->lda + k : (size_t)k * p->lda + i);
                    double y = at(p, bb, p->tb ? (size_t)k * p->ldb + j : (size_t)j * p->ldb + k);
                    ref += x * y;
                    mag += fabs(x * y);
                }
                double got = at(p, c, (size_t)j * p->M + i);
                double e = fabs(got - ref) / (mag > 0 ? mag : 1.0);
                if (!(e == e)) e = INFINITY; /* NaN counts as wrong */
                if (e > worst) worst = e;
            }
    }
    return worst;
}

static void *need(void *lib, const char *name) {
    void *s = dlsym(lib, name);
    if (!s) fprintf(stderr, "bench_gemm: %s not found in the library\n", name);
    return s;
}

static void usage(void) {
    fprintf(stderr, "usage: bench_gemm --lib PATH --api cblas|plan|xsmm|mkljit --dtype f32|f64 "
                    "[--threads T] [--align 64|16] [--min-time S] [--repeats R] [--cold N] "
                    "[--flush-mb MB] M,N,K[,BATCH][:nt|:tn|:tt]...\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *libpath = NULL, *apiname = "cblas", *dtype = "f32";
    int threads = 1, align = 64, repeats = 7, cold = 0, flush_mb = 64;
    double min_time = 0.002;
    int first_shape = argc;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--lib") && v) libpath = argv[++i];
        else if (!strcmp(a, "--api") && v) apiname = argv[++i];
        else if (!strcmp(a, "--dtype") && v) dtype = argv[++i];
        else if (!strcmp(a, "--threads") && v) threads = atoi(argv[++i]);
        else if (!strcmp(a, "--align") && v) align = atoi(argv[++i]);
        else if (!strcmp(a, "--min-time") && v) min_time = atof(argv[++i]);
        else if (!strcmp(a, "--repeats") && v) repeats = atoi(argv[++i]);
        else if (!strcmp(a, "--cold") && v) cold = atoi(argv[++i]);
        else if (!strcmp(a, "--flush-mb") && v) flush_mb = atoi(argv[++i]);
        else if (a[0] >= '0' && a[0] <= '9') { first_shape = i; break; }
        else usage();
    }
    if (!libpath || repeats < 1 || (align != 64 && align != 16)) usage();
    int api = !strcmp(apiname, "cblas") ? API_CBLAS : !strcmp(apiname, "plan") ? API_PLAN
            : !strcmp(apiname, "xsmm") ? API_XSMM : !strcmp(apiname, "mkljit") ? API_MKLJIT : -1;
    if (api < 0) usage();
    int f64 = !strcmp(dtype, "f64");

    void *lib = dlopen(libpath, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        printf("{\"fatal\":\"dlopen\",\"detail\":\"%s\"}\n", dlerror());
        return 1;
    }
    /* Thread counts are also set through each library's environment variable by the
     * runner; the setters make the count hold even where the variable is read late. */
    const char *setters[] = {"openblas_set_num_threads", "MKL_Set_Num_Threads", "at_set_num_threads"};
    for (size_t s = 0; s < sizeof setters / sizeof *setters; ++s) {
        set_threads_fn f = (set_threads_fn)dlsym(lib, setters[s]);
        if (f) f(threads);
    }
    void (*blis_threads)(int64_t) = (void (*)(int64_t))dlsym(lib, "bli_thread_set_num_threads");
    if (blis_threads) blis_threads(threads); /* takes BLIS's dim_t, 64 bits */

    void *entry = NULL, *entry_batch = NULL, *create = NULL, *destroy = NULL, *get = NULL;
    at_error_fn at_error = NULL;
    switch (api) {
    case API_CBLAS: entry = need(lib, f64 ? "cblas_dgemm" : "cblas_sgemm"); break;
    case API_PLAN:
        create = need(lib, "at_plan_create_ex");
        entry = need(lib, "at_plan_execute");
        entry_batch = need(lib, "at_plan_execute_batch");
        destroy = need(lib, "at_plan_destroy");
        at_error = (at_error_fn)dlsym(lib, "at_last_error");
        break;
    case API_XSMM: {
        void (*init)(void) = (void (*)(void))dlsym(lib, "libxsmm_init");
        if (init) init();
        create = need(lib, f64 ? "libxsmm_dmmdispatch" : "libxsmm_smmdispatch");
        entry = create;
        break;
    }
    case API_MKLJIT:
        /* mkl_cblas.h maps mkl_jit_create_?gemm to these by macro; the exported
         * symbols of the bare name take another argument list. */
        create = need(lib, f64 ? "mkl_cblas_jit_create_dgemm" : "mkl_cblas_jit_create_sgemm");
        get = need(lib, f64 ? "mkl_jit_get_dgemm_ptr" : "mkl_jit_get_sgemm_ptr");
        destroy = need(lib, "mkl_jit_destroy");
        entry = get;
        break;
    }
    if (!entry || (api == API_PLAN && (!create || !entry_batch || !destroy)) ||
        (api == API_MKLJIT && (!create || !destroy))) {
        printf("{\"fatal\":\"symbols\"}\n");
        return 1;
    }

    size_t flush_n = (size_t)flush_mb << 17; /* doubles */
    double *flush_buf = NULL;
    if (cold > 0) {
        flush_buf = aligned_alloc(64, flush_n * sizeof(double));
        if (!flush_buf) return 3;
        memset(flush_buf, 0, flush_n * sizeof(double));
    }
    double timer_cost = 0.0; /* subtracted from single-call cold timings */
    {
        double t0 = now();
        for (int i = 0; i < 1000; ++i) (void)now();
        timer_cost = (now() - t0) / 1001.0;
    }

    for (int si = first_shape; si < argc; ++si) {
        problem p = {0};
        p.api = api; p.f64 = f64; p.batch = 1;
        const char *trans = strchr(argv[si], ':');
        if (trans) {
            ++trans;
            p.ta = trans[0] == 't';
            p.tb = trans[0] && trans[1] == 't';
        }
        if (sscanf(argv[si], "%d,%d,%d,%d", &p.M, &p.N, &p.K, &p.batch) < 3 || p.M < 1 ||
            p.N < 1 || p.K < 1 || p.batch < 1 ||
            (trans && (strlen(trans) != 2 || !strchr("nt", trans[0]) || !strchr("nt", trans[1])))) {
            printf("{\"shape\":\"%s\",\"status\":\"bad-shape\"}\n", argv[si]);
            continue;
        }
        p.esize = f64 ? 8 : 4;
        p.lda = p.ta ? p.K : p.M;
        p.ldb = p.tb ? p.N : p.K;
        p.sa = (size_t)p.M * p.K; p.sb = (size_t)p.K * p.N; p.sc = (size_t)p.M * p.N;
        size_t off = align == 64 ? 0 : 16; /* numpy's default: 16-byte but not 32-aligned */
        size_t bytes[3] = {p.sa * p.batch * p.esize, p.sb * p.batch * p.esize, p.sc * p.batch * p.esize};
        char *raw[3];
        for (int m = 0; m < 3; ++m) {
            raw[m] = aligned_alloc(64, ((bytes[m] + off + 63) / 64) * 64);
            if (!raw[m]) return 3;
        }
        p.A = raw[0] + off; p.B = raw[1] + off; p.C = raw[2] + off;
        fill(p.A, p.sa * p.batch, f64, 1);
        fill(p.B, p.sb * p.batch, f64, 2);
        memset(p.C, 0xff, bytes[2]); /* NaN: beta = 0 must not read C */

        const char *status = "ok";
        char detail[160] = "";
        p.fn = entry;
        p.fn_batch = entry_batch;
        if (api == API_PLAN) {
            p.handle = ((at_create_fn)create)(f64, 0, p.ta, p.tb, p.M, p.N, p.K, p.lda, p.ldb, p.M, threads);
            if (!p.handle) {
                status = "plan-failed";
                snprintf(detail, sizeof detail, "%s", at_error ? at_error() : "");
            }
        } else if (api == API_XSMM) {
            /* LIBXSMM 1.17's flags: 1 transposes A, 2 B; it declines what its JIT lacks. */
            int lda = p.lda, ldb = p.ldb, ldc = p.M, prefetch = 0, flags = p.ta | p.tb << 1;
            if (f64) {
                double alpha = 1.0, beta = 0.0;
                p.fn = ((xsmm_d_dispatch_fn)create)(p.M, p.N, p.K, &lda, &ldb, &ldc, &alpha, &beta, &flags, &prefetch);
            } else {
                float alpha = 1.0f, beta = 0.0f;
                p.fn = ((xsmm_s_dispatch_fn)create)(p.M, p.N, p.K, &lda, &ldb, &ldc, &alpha, &beta, &flags, &prefetch);
            }
            if (!p.fn) status = "unsupported";
        } else if (api == API_MKLJIT) {
            int ta = p.ta ? TRANS : NO_TRANS, tb = p.tb ? TRANS : NO_TRANS;
            int rc = f64 ? ((mkl_jit_d_create_fn)create)(&p.handle, COL_MAJOR, ta, tb, p.M, p.N, p.K, 1.0, p.lda, p.ldb, 0.0, p.M)
                         : ((mkl_jit_s_create_fn)create)(&p.handle, COL_MAJOR, ta, tb, p.M, p.N, p.K, 1.0f, p.lda, p.ldb, 0.0f, p.M);
            /* 0: JIT kernel; 1 (MKL_NO_JIT): a kernel that calls the standard gemm; 2: error. */
            if (rc == 2 || !p.handle) status = "unsupported";
            else {
                p.fn = ((mkl_jit_get_fn)get)(p.handle);
                if (rc == 1) snprintf(detail, sizeof detail, "no-jit");
                if (!p.fn) status = "unsupported";
            }
        }

        double best = NAN, median = NAN, cold_best = NAN, cold_median = NAN, err = NAN, core = -1.0;
        long iters = 0;
        int ok_check = 0;
        if (!strcmp(status, "ok")) {
            run_once(&p);
            err = check(&p);
            ok_check = err <= (p.K + 4) * (f64 ? 1.1102230246251565e-16 : 5.960464477539063e-08);
            /* Warm-up: at least min_time / 4 of calls, so lazy initialisation, page
             * faults, JIT and frequency ramps are paid before the clock starts. */
            double t0 = now();
            long n = 0;
            do { run_once(&p); ++n; } while (now() - t0 < min_time / 4 || n < 3);
            double per = (now() - t0) / (double)n;
            iters = (long)(min_time / (per > 1e-9 ? per : 1e-9)) + 1;
            double *samples = malloc(sizeof(double) * (size_t)(repeats > cold ? repeats : cold));
            core = core_gflops(f64);
            for (int r = 0; r < repeats; ++r) {
                /* The clock can move within the repeats: a run of the peak loop before
                 * each, so the fastest repeat has a peak taken beside it too. */
                double between = core_once(f64);
                if (between > core) core = between;
                double s = now();
                for (long i = 0; i < iters; ++i) run_once(&p);
                samples[r] = (now() - s) / (double)iters;
            }
            double after = core_gflops(f64);
            if (after > core) core = after;
            qsort(samples, (size_t)repeats, sizeof(double), cmp_double);
            best = samples[0];
            median = samples[repeats / 2];
            if (cold > 0) {
                for (int r = 0; r < cold; ++r) {
                    flush_caches(flush_buf, flush_n);
                    double s = now();
                    run_once(&p);
                    double t = now() - s - timer_cost;
                    samples[r] = t > 1e-9 ? t : 1e-9;
                }
                qsort(samples, (size_t)cold, sizeof(double), cmp_double);
                cold_best = samples[0];
                cold_median = samples[cold / 2];
            }
            free(samples);
        }
        if (api == API_PLAN && p.handle) ((at_destroy_fn)destroy)(p.handle);
        if (api == API_MKLJIT && p.handle) ((mkl_jit_destroy_fn)destroy)(p.handle);

        printf("{\"shape\":\"%s\",\"M\":%d,\"N\":%d,\"K\":%d,\"batch\":%d,\"status\":\"%s\","
               "\"detail\":\"%s\",\"iters\":%ld,\"err\":%.3e,\"check\":%s,"
               "\"best_s\":%.6e,\"median_s\":%.6e,\"cold_best_s\":%.6e,\"cold_median_s\":%.6e,"
               "\"core_gflops\":%.4g}\n",
               argv[si], p.M, p.N, p.K, p.batch, status, detail, iters,
               isnan(err) ? -1.0 : (isinf(err) ? 1e300 : err), ok_check ? "true" : "false",
               isnan(best) ? -1.0 : best, isnan(median) ? -1.0 : median,
               isnan(cold_best) ? -1.0 : cold_best, isnan(cold_median) ? -1.0 : cold_median, core);
        fflush(stdout);
        for (int m = 0; m < 3; ++m) free(raw[m]);
    }
    free(flush_buf);
    return 0;
}
