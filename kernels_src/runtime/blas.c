/* blas.c: convenience, CBLAS and Fortran BLAS entry points.
 *
 * Every entry checks its arguments as the reference library does, looks its
 * plan up in the cache (this thread's front cache first: see cache.c) and
 * executes it.  Argument errors go to the host's xerbla_ or cblas_xerbla (a
 * program's own, as LAPACK test drivers define, or its BLAS's); the library
 * defines neither, so it never replaces another library's (see report_xerbla).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_DEFAULT */
#endif
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "at_internal.h"

/* The body of every single-product entry, on arguments already checked: the
 * CBLAS and Fortran entries check them by the reference's rules, which accept
 * exactly what at__check_args accepts, so they come here without checking twice.
 * Out of line, and with dtype, layout and transpositions packed into one word:
 * with its arguments in six registers and four stack slots the typed entries
 * below reach it by a jump, so their common case saves no registers. */
/* Why no plan came back on checked arguments: memory (any CPU gets a plan,
 * made of the kernels it can run). */
static int plan_failure(void) { return AT_ENOMEM; }

/* The BLAS entries return nothing: a call that could not compute must not be
 * silent, so it says why C was left as it was (as xerbla does for arguments). */
static __attribute__((noinline, cold)) void report_failure(const char *routine)
{
    fprintf(stderr, "libautotune: %s: %s; C is unchanged\n", routine, at_last_error());
}

#define AT_FLAGS(dtype, layout, ta, tb) ((dtype) | (layout) << 1 | (ta) << 2 | (tb) << 3)
static __attribute__((noinline)) int gemm_checked(int flags, int64_t M, int64_t N, int64_t K,
                                                  const void *A, int64_t lda, const void *B,
                                                  int64_t ldb, void *C, int64_t ldc,
                                                  double alpha, double beta)
{
    if (M == 0 || N == 0) return AT_OK;
    int dtype = flags & 1, layout = flags >> 1 & 1, trans_a = flags >> 2 & 1;
    int trans_b = flags >> 3 & 1;
    int owned;
    at_plan *p = at__plan_lookup(dtype, layout, trans_a, trans_b, M, N, K, lda, ldb, ldc, &owned);
    if (!p) return plan_failure();
    int rc = at__execute_one(p, alpha, A, B, beta, C);
    if (owned) at__plan_release(p);
    return rc;
}

/* The typed entries' common case first: the thread's last shape again, which
 * runs from here: a plan of one kernel call calls it, any other goes to the
 * executor.  Through gemm_checked that plan was looked up a second time: 4-6 ns
 * of the 12-15 by which cblas_sgemm trailed at_plan_execute at 5^3-24^3 (Zen 4).
 * Anything else takes gemm_checked. */
#define AT_GEMM_TYPED(NAME, T, DT)                                                         \
    static inline int NAME(int layout, int ta, int tb, int64_t M, int64_t N, int64_t K,    \
                           T alpha, const T *A, int64_t lda, const T *B, int64_t ldb,      \
                           T beta, T *C, int64_t ldc)                                      \
    {                                                                                      \
        at_tcache *front;                                                                  \
        const at_plan *p = at__plan_front(DT, layout, ta, tb, M, N, K, lda, ldb, ldc, &front); \
        if (p) {                                                                           \
            at__count_hit(front);                                                          \
            if (at__single_ready_##T(p, alpha)) {                                          \
                at__single_run_##T(p, alpha, A, B, beta, C);                               \
                return AT_OK;                                                              \
            }                                                                              \
            return at__execute_one(p, alpha, A, B, beta, C);                               \
        }                                                                                  \
        return gemm_checked(AT_FLAGS(DT, layout, ta, tb), M, N, K, A, lda, B, ldb, C, ldc, \
                            alpha, beta);                                                  \
    }
AT_GEMM_TYPED(gemm_f32, float, AT_F32)
AT_GEMM_TYPED(gemm_f64, double, AT_F64)
#undef AT_GEMM_TYPED

int at_gemm(int dtype, int layout, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
            double alpha, const void *A, int64_t lda, const void *B, int64_t ldb, double beta,
            void *C, int64_t ldc)
{
    int rc = at__check_args(dtype, layout, trans_a, trans_b, M, N, K, lda, ldb, ldc);
    if (rc) return rc;
    if (dtype == AT_F32)
        return gemm_f32(layout, trans_a, trans_b, M, N, K, (float)alpha, A, lda, B, ldb,
                        (float)beta, C, ldc);
    return gemm_f64(layout, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

int at_sgemm(int layout, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
             const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
             int64_t ldc)
{
    int rc = at__check_args(AT_F32, layout, trans_a, trans_b, M, N, K, lda, ldb, ldc);
    if (rc) return rc;
    return gemm_f32(layout, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

int at_dgemm(int layout, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, double alpha,
             const double *A, int64_t lda, const double *B, int64_t ldb, double beta, double *C,
             int64_t ldc)
{
    int rc = at__check_args(AT_F64, layout, trans_a, trans_b, M, N, K, lda, ldb, ldc);
    if (rc) return rc;
    return gemm_f64(layout, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

int at_gemm_batch_strided(int dtype, int layout, int trans_a, int trans_b, int64_t M, int64_t N,
                          int64_t K, double alpha, const void *A, int64_t lda, int64_t stride_a,
                          const void *B, int64_t ldb, int64_t stride_b, double beta, void *C,
                          int64_t ldc, int64_t stride_c, int64_t batch)
{
    int rc = at__check_args(dtype, layout, trans_a, trans_b, M, N, K, lda, ldb, ldc);
    if (rc) return rc;
    if (batch < 0) {
        at__set_error("batch must be non-negative, got %lld", (long long)batch);
        return AT_EINVAL;
    }
    if (M == 0 || N == 0 || batch == 0) return AT_OK;
    int owned;
    at_plan *p = at__plan_lookup(dtype, layout, trans_a, trans_b, M, N, K, lda, ldb, ldc, &owned);
    if (!p) return plan_failure();
    rc = at__execute(p, batch, alpha, NULL, NULL, beta, NULL, A, stride_a, B, stride_b, C,
                     stride_c);
    if (owned) at__plan_release(p);
    return rc;
}

/* ---- error handlers ---------------------------------------------------------- */

/* Argument errors go to the host's handlers, as a BLAS consumer expects: the
 * program's (or its BLAS's) xerbla_ and cblas_xerbla.  The library defines
 * neither: preloaded into a program, a definition would bind every other
 * library's calls to it (numpy's LAPACK stopped reporting through its own
 * xerbla_, and its override test was skipped).  Where the host has no handler,
 * the library prints as BLAS does.
 *
 * ELF: weak references, never definitions.  They bind at load time to a
 * definition in the global scope (the program, a preloaded or linked library)
 * and make the linker export a program's own xerbla_, as it would for a BLAS
 * linked beside it.  A handler loaded later with RTLD_GLOBAL is found by dlsym
 * when the error happens.  Mach-O has no undefined weak references without
 * extra linker flags, so there dlsym alone looks. */
#ifndef __APPLE__
extern void xerbla_(const char *srname, const int *info, size_t len) __attribute__((weak));
extern void cblas_xerbla(int p, const char *rout, const char *form, ...) __attribute__((weak));
#define AT_LINKED(name) ((void *)&(name))
#else
#define AT_LINKED(name) NULL
#endif

typedef void (*xerbla_fn)(const char *srname, const int *info, size_t len);
typedef void (*cblas_xerbla_fn)(int p, const char *rout, const char *form, ...);

static void *host_symbol(void *linked, const char *name)
{
    return linked ? linked : dlsym(RTLD_DEFAULT, name);
}

static __attribute__((noinline, cold)) void report_xerbla(const char *srname, int info)
{
    xerbla_fn host = (xerbla_fn)host_symbol(AT_LINKED(xerbla_), "xerbla_");
    if (host) {
        host(srname, &info, strlen(srname));
        return;
    }
    /* The reference prints the name trimmed of trailing blanks, then stops; a
     * library loaded into Python must not end the process, so this returns as
     * OpenBLAS's does. */
    size_t n = 0;
    while (srname[n] && srname[n] != ' ') n++;
    fprintf(stderr, " ** On entry to %.*s parameter number %2d had an illegal value\n", (int)n, srname,
            info);
}

/* Reference CBLAS runs a row-major cblas_?gemm as the Fortran routine with A and
 * B (M and N) exchanged, so the parameter number it reports for M, N, lda and
 * ldb is the other one's, with RowMajorStrg set so that a handler (the netlib
 * CBLAS tester's among them) can map it back.  This library reports the same
 * numbers and sets the same flag.
 *
 * Unlike the handlers, reference CBLAS's two globals are defined here (weak) and
 * exported: a consumer written for reference CBLAS links against them (Debian's
 * CBLAS testers carry a copy relocation for RowMajorStrg and do not start without
 * a library that defines it), and a flag, unlike a function, merged with the
 * host's by interposition is still the one flag every party reads and writes. */
__attribute__((weak)) int RowMajorStrg;
__attribute__((weak)) int CBLAS_CallFromC;

static int row_major_position(int pos)
{
    switch (pos) {
    case 4: return 5;
    case 5: return 4;
    case 9: return 11;
    case 11: return 9;
    default: return pos;
    }
}

/* ``p``: the reference's number (exchanged for a row-major gemm, ``row``);
 * ``form`` takes at most the one int ``value``. */
static __attribute__((noinline, cold)) void report_cblas(int p, int row, const char *rout, const char *form,
                                                        int value)
{
    cblas_xerbla_fn host = (cblas_xerbla_fn)host_symbol(AT_LINKED(cblas_xerbla), "cblas_xerbla");
    if (host) {
        CBLAS_CallFromC = 1;
        RowMajorStrg = row;
        host(p, rout, form, value);
        RowMajorStrg = 0;
        return;
    }
    if (row && strstr(rout, "gemm")) p = row_major_position(p);
    if (p) fprintf(stderr, "Parameter %d to routine %s was incorrect\n", p, rout);
    fprintf(stderr, form, value);
}

/* ---- CBLAS --------------------------------------------------------------------- */

/* Reference CBLAS's checks, numbered as the CBLAS prototype (order is 1); zero if
 * the arguments are valid. */
static __attribute__((noinline, cold)) int cblas_check(int order, int ta, int tb, int M, int N,
                                                      int K, int lda, int ldb, int ldc,
                                                      const char *rout)
{
    if (order != CblasColMajor && order != CblasRowMajor) {
        report_cblas(1, 0, rout, "Illegal order setting, %d\n", order);
        return 1;
    }
    int ok_a = ta == CblasNoTrans || ta == CblasTrans || ta == CblasConjTrans;
    int ok_b = tb == CblasNoTrans || tb == CblasTrans || tb == CblasConjTrans;
    if (!ok_a) {
        report_cblas(2, 0, rout, "Illegal TransA setting, %d\n", ta);
        return 2;
    }
    if (!ok_b) {
        report_cblas(3, 0, rout, "Illegal TransB setting, %d\n", tb);
        return 3;
    }
    int pos = 0;
    int row = order == CblasRowMajor;
    int at = ta != CblasNoTrans, bt = tb != CblasNoTrans;
    int need_a = row ? (at ? M : K) : (at ? K : M);
    int need_b = row ? (bt ? K : N) : (bt ? N : K);
    int need_c = row ? N : M;
    if (M < 0)
        pos = 4;
    else if (N < 0)
        pos = 5;
    else if (K < 0)
        pos = 6;
    else if (lda < (need_a > 1 ? need_a : 1))
        pos = 9;
    else if (ldb < (need_b > 1 ? need_b : 1))
        pos = 11;
    else if (ldc < (need_c > 1 ? need_c : 1))
        pos = 14;
    if (pos) report_cblas(row ? row_major_position(pos) : pos, row, rout, "", 0);
    return pos;
}

/* Whether cblas_check would accept the arguments, as one test: combined with &
 * rather than &&, the valid case (every call of a correct program) takes one
 * branch instead of a dozen, and cblas_check runs only to report. */
static inline int cblas_valid(int order, int ta, int tb, int M, int N, int K, int lda, int ldb,
                              int ldc)
{
    int row = order == CblasRowMajor;
    int at = ta != CblasNoTrans, bt = tb != CblasNoTrans;
    int need_a = row != at ? K : M, need_b = row != bt ? N : K, need_c = row ? N : M;
    return ((unsigned)(order - CblasRowMajor) <= 1u) & ((unsigned)(ta - CblasNoTrans) <= 2u) &
           ((unsigned)(tb - CblasNoTrans) <= 2u) & ((M | N | K) >= 0) &
           (lda >= (need_a > 1 ? need_a : 1)) & (ldb >= (need_b > 1 ? need_b : 1)) &
           (ldc >= (need_c > 1 ? need_c : 1));
}

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M,
                 int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                 float beta, float *C, int ldc)
{
    if (__builtin_expect(!cblas_valid((int)order, (int)ta, (int)tb, M, N, K, lda, ldb, ldc), 0)) {
        cblas_check((int)order, (int)ta, (int)tb, M, N, K, lda, ldb, ldc, "cblas_sgemm");
        return;
    }
    if (__builtin_expect(gemm_f32(order == CblasRowMajor, ta != CblasNoTrans, tb != CblasNoTrans, M, N,
                               K, alpha, A, lda, B, ldb, beta, C, ldc) != AT_OK, 0))
        report_failure("cblas_sgemm");
}

void cblas_dgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M,
                 int N, int K, double alpha, const double *A, int lda, const double *B, int ldb,
                 double beta, double *C, int ldc)
{
    if (__builtin_expect(!cblas_valid((int)order, (int)ta, (int)tb, M, N, K, lda, ldb, ldc), 0)) {
        cblas_check((int)order, (int)ta, (int)tb, M, N, K, lda, ldb, ldc, "cblas_dgemm");
        return;
    }
    if (__builtin_expect(gemm_f64(order == CblasRowMajor, ta != CblasNoTrans, tb != CblasNoTrans, M, N,
                               K, alpha, A, lda, B, ldb, beta, C, ldc) != AT_OK, 0))
        report_failure("cblas_dgemm");
}

/* ---- Fortran BLAS ------------------------------------------------------------- */

static int trans_flag(char c)
{
    if (c == 'N' || c == 'n') return 0;
    if (c == 'T' || c == 't' || c == 'C' || c == 'c') return 1;
    return -1;
}

/* The reference SGEMM's INFO: 1-based position of the first bad argument. */
static int fortran_check(const char *ta, const char *tb, int M, int N, int K, int lda, int ldb,
                         int ldc)
{
    int a = trans_flag(*ta), b = trans_flag(*tb);
    int nrowa = a == 1 ? K : M, nrowb = b == 1 ? N : K;
    if (a < 0) return 1;
    if (b < 0) return 2;
    if (M < 0) return 3;
    if (N < 0) return 4;
    if (K < 0) return 5;
    if (lda < (nrowa > 1 ? nrowa : 1)) return 8;
    if (ldb < (nrowb > 1 ? nrowb : 1)) return 10;
    if (ldc < (M > 1 ? M : 1)) return 13;
    return 0;
}

void sgemm_(const char *ta, const char *tb, const int *M, const int *N, const int *K,
            const float *alpha, const float *A, const int *lda, const float *B, const int *ldb,
            const float *beta, float *C, const int *ldc)
{
    int info = fortran_check(ta, tb, *M, *N, *K, *lda, *ldb, *ldc);
    if (info) {
        report_xerbla("SGEMM ", info);
        return;
    }
    if (__builtin_expect(gemm_f32(AT_COL_MAJOR, trans_flag(*ta), trans_flag(*tb), *M, *N, *K, *alpha, A,
                               *lda, B, *ldb, *beta, C, *ldc) != AT_OK, 0))
        report_failure("sgemm_");
}

void dgemm_(const char *ta, const char *tb, const int *M, const int *N, const int *K,
            const double *alpha, const double *A, const int *lda, const double *B, const int *ldb,
            const double *beta, double *C, const int *ldc)
{
    int info = fortran_check(ta, tb, *M, *N, *K, *lda, *ldb, *ldc);
    if (info) {
        report_xerbla("DGEMM ", info);
        return;
    }
    if (__builtin_expect(gemm_f64(AT_COL_MAJOR, trans_flag(*ta), trans_flag(*tb), *M, *N, *K, *alpha, A,
                               *lda, B, *ldb, *beta, C, *ldc) != AT_OK, 0))
        report_failure("dgemm_");
}

/* ---- batched CBLAS (MKL's and OpenBLAS's signatures) ------------------------- */

/* The first bad argument of one product of a batch routine, numbered as that
 * routine's prototype (layout is 1, transa 2, transb 3, m 4, n 5, k 6); the
 * leading dimensions' numbers differ between the strided and the grouped
 * routine, so the caller passes them.  Unlike cblas_?gemm, MKL reports the
 * position in its own prototype for either layout (no reference CBLAS
 * exchange of M and N), so neither does this.  Zero if valid. */
static int batch_item_check(int order, int ta, int tb, int M, int N, int K, int lda, int ldb,
                            int ldc, int pos_lda, int pos_ldb, int pos_ldc)
{
    if (order != CblasColMajor && order != CblasRowMajor) return 1;
    if (ta != CblasNoTrans && ta != CblasTrans && ta != CblasConjTrans) return 2;
    if (tb != CblasNoTrans && tb != CblasTrans && tb != CblasConjTrans) return 3;
    if (M < 0) return 4;
    if (N < 0) return 5;
    if (K < 0) return 6;
    int row = order == CblasRowMajor;
    int at = ta != CblasNoTrans, bt = tb != CblasNoTrans;
    int need_a = row != at ? K : M, need_b = row != bt ? N : K, need_c = row ? N : M;
    if (lda < (need_a > 1 ? need_a : 1)) return pos_lda;
    if (ldb < (need_b > 1 ? need_b : 1)) return pos_ldb;
    if (ldc < (need_c > 1 ? need_c : 1)) return pos_ldc;
    return 0;
}

static __attribute__((noinline, cold)) void batch_report(int pos, const char *rout)
{
    report_cblas(pos, 0, rout, "", 0);
}

/* cblas_?gemm_batch_strided: batch_size products of one shape, item i at
 * A + i*stridea, B + i*strideb, C + i*stridec.  One plan, the batch split over
 * the threads by at__execute (as at_gemm_batch_strided). */
static void batch_strided(int dtype, const char *rout, int order, int ta, int tb, int M, int N,
                          int K, double alpha, const void *A, int lda, int stridea, const void *B,
                          int ldb, int strideb, double beta, void *C, int ldc, int stridec,
                          int batch)
{
    int pos = batch_item_check(order, ta, tb, M, N, K, lda, ldb, ldc, 9, 12, 16);
    if (!pos && stridea < 0) pos = 10;
    if (!pos && strideb < 0) pos = 13;
    /* A stridec below the item's span (0 included) is allowed: items that share
     * C are summed into it in item order (the executor serialises them). */
    if (!pos && stridec < 0) pos = 17;
    if (!pos && batch < 0) pos = 18;
    if (pos) {
        batch_report(pos, rout);
        return;
    }
    if (at_gemm_batch_strided(dtype, order == CblasRowMajor, ta != CblasNoTrans, tb != CblasNoTrans,
                              M, N, K, alpha, A, lda, stridea, B, ldb, strideb, beta, C, ldc,
                              stridec, batch) != AT_OK)
        report_failure(rout);
}

/* cblas_?gemm_batch: group_count groups, group g holding group_size[g] products
 * that share its shape, transpositions, scalars and leading dims, with operands
 * from consecutive entries of the pointer arrays.  Every group is checked before
 * any computes, so a bad argument leaves every C as it was; then one plan per
 * group executes that group's pointers, split over the threads. */
static void batch_grouped(int dtype, const char *rout, int order, const enum CBLAS_TRANSPOSE *ta,
                          const enum CBLAS_TRANSPOSE *tb, const int *M, const int *N, const int *K,
                          const double *alpha, const double *beta, const void *const *A,
                          const int *lda, const void *const *B, const int *ldb, void *const *C,
                          const int *ldc, int group_count, const int *group_size)
{
    int pos = 0;
    if (order != CblasColMajor && order != CblasRowMajor) pos = 1;
    else if (group_count < 0) pos = 15;
    for (int g = 0; !pos && g < group_count; g++) {
        pos = batch_item_check(order, (int)ta[g], (int)tb[g], M[g], N[g], K[g], lda[g], ldb[g],
                               ldc[g], 9, 11, 14);
        if (!pos && group_size[g] < 0) pos = 16;
    }
    if (pos) {
        batch_report(pos, rout);
        return;
    }
    int64_t first = 0;
    for (int g = 0; g < group_count; first += group_size[g], g++) {
        if (group_size[g] == 0 || M[g] == 0 || N[g] == 0) continue;
        int owned;
        at_plan *p = at__plan_lookup(dtype, order == CblasRowMajor, ta[g] != CblasNoTrans,
                                     tb[g] != CblasNoTrans, M[g], N[g], K[g], lda[g], ldb[g],
                                     ldc[g], &owned);
        int rc = p ? at__execute(p, group_size[g], alpha[g], A + first, B + first, beta[g],
                                 C + first, NULL, 0, NULL, 0, NULL, 0)
                   : plan_failure();
        if (p && owned) at__plan_release(p);
        if (rc != AT_OK) {
            report_failure(rout);
            return;
        }
    }
}

void cblas_sgemm_batch_strided(enum CBLAS_ORDER layout, enum CBLAS_TRANSPOSE transa,
                               enum CBLAS_TRANSPOSE transb, int m, int n, int k, float alpha,
                               const float *A, int lda, int stridea, const float *B, int ldb,
                               int strideb, float beta, float *C, int ldc, int stridec,
                               int batch_size)
{
    batch_strided(AT_F32, "cblas_sgemm_batch_strided", (int)layout, (int)transa, (int)transb, m, n,
                  k, alpha, A, lda, stridea, B, ldb, strideb, beta, C, ldc, stridec, batch_size);
}

void cblas_dgemm_batch_strided(enum CBLAS_ORDER layout, enum CBLAS_TRANSPOSE transa,
                               enum CBLAS_TRANSPOSE transb, int m, int n, int k, double alpha,
                               const double *A, int lda, int stridea, const double *B, int ldb,
                               int strideb, double beta, double *C, int ldc, int stridec,
                               int batch_size)
{
    batch_strided(AT_F64, "cblas_dgemm_batch_strided", (int)layout, (int)transa, (int)transb, m, n,
                  k, alpha, A, lda, stridea, B, ldb, strideb, beta, C, ldc, stridec, batch_size);
}

/* Group scalars are float in the s routine; the executor takes them as double
 * (exact), so they are widened per group, a bounded copy on the stack or heap. */
void cblas_sgemm_batch(enum CBLAS_ORDER layout, const enum CBLAS_TRANSPOSE *transa_array,
                       const enum CBLAS_TRANSPOSE *transb_array, const int *m_array,
                       const int *n_array, const int *k_array, const float *alpha_array,
                       const float **A_array, const int *lda_array, const float **B_array,
                       const int *ldb_array, const float *beta_array, float **C_array,
                       const int *ldc_array, int group_count, const int *group_size)
{
    double small[2 * 16] = {0}, *scal = small;
    if (group_count > 16) {
        scal = malloc(sizeof(double) * 2 * (size_t)group_count);
        if (!scal) {
            at__set_error("out of memory for %d groups' scalars", group_count);
            report_failure("cblas_sgemm_batch");
            return;
        }
    }
    for (int g = 0; g < group_count; g++) {
        scal[g] = alpha_array[g];
        scal[group_count + g] = beta_array[g];
    }
    batch_grouped(AT_F32, "cblas_sgemm_batch", (int)layout, transa_array, transb_array, m_array,
                  n_array, k_array, scal, group_count > 0 ? scal + group_count : scal,
                  (const void *const *)A_array, lda_array, (const void *const *)B_array, ldb_array,
                  (void *const *)C_array, ldc_array, group_count, group_size);
    if (scal != small) free(scal);
}

void cblas_dgemm_batch(enum CBLAS_ORDER layout, const enum CBLAS_TRANSPOSE *transa_array,
                       const enum CBLAS_TRANSPOSE *transb_array, const int *m_array,
                       const int *n_array, const int *k_array, const double *alpha_array,
                       const double **A_array, const int *lda_array, const double **B_array,
                       const int *ldb_array, const double *beta_array, double **C_array,
                       const int *ldc_array, int group_count, const int *group_size)
{
    batch_grouped(AT_F64, "cblas_dgemm_batch", (int)layout, transa_array, transb_array, m_array,
                  n_array, k_array, alpha_array, beta_array, (const void *const *)A_array,
                  lda_array, (const void *const *)B_array, ldb_array, (void *const *)C_array,
                  ldc_array, group_count, group_size);
}
