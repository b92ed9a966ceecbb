/* blas_entry.c: a C program using libautotune as a BLAS.
 *
 * Calls cblas_sgemm (both layouts), cblas_dgemm, sgemm_ and dgemm_ (as Fortran
 * would, with hidden string lengths), checks them against a naive loop, then
 * makes bad calls: the library's default xerbla_ / cblas_xerbla print to stderr;
 * this program's own cblas_xerbla (when built with -DOWN_XERBLA) overrides the
 * weak one and records the parameter number (reference CBLAS's) instead.
 * Prints one line per check, "ok <name>" or "FAIL <name> ...", then "done <failures>".
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "autotune.h"

static int failures;

#ifdef OWN_XERBLA
/* As reference CBLAS, a row-major gemm reports M, N, lda and ldb under each
 * other's numbers and sets RowMajorStrg so that a handler can map them back. */
extern int RowMajorStrg;
static int last_param = -1, last_row_major = -1;
void cblas_xerbla(int p, const char *rout, const char *form, ...)
{
    (void)rout;
    (void)form;
    last_param = p;
    last_row_major = RowMajorStrg;
}
#endif

static double frand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return ((*s >> 8) & 0xffff) / 32768.0 - 1.0;
}

/* Column-major reference with general strides for op(A), op(B). */
static void ref(int ta, int tb, int M, int N, int K, double alpha, const double *A, int lda,
                const double *B, int ldb, double beta, double *C, int ldc)
{
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++) {
            double s = 0;
            for (int p = 0; p < K; p++)
                s += (ta ? A[p + i * lda] : A[i + p * lda]) * (tb ? B[j + p * ldb] : B[p + j * ldb]);
            C[i + j * ldc] = alpha * s + (beta == 0 ? 0 : beta * C[i + j * ldc]);
        }
}

static void check(const char *name, const double *want, const float *gotf, const double *gotd,
                  int n, double tol)
{
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double g = gotf ? gotf[i] : gotd[i];
        double e = fabs(g - want[i]);
        if (!(e <= worst)) worst = e;
    }
    if (worst <= tol) {
        printf("ok %s\n", name);
    } else {
        printf("FAIL %s max error %g\n", name, worst);
        failures++;
    }
}

int main(void)
{
    enum { M = 37, N = 29, K = 41, LDA = 45, LDB = 50, LDC = 40 };
    unsigned seed = 7;
    double *A = malloc(sizeof(double) * LDA * 64), *B = malloc(sizeof(double) * LDB * 64);
    double *C = malloc(sizeof(double) * LDC * 64), *R = malloc(sizeof(double) * LDC * 64);
    float *Af = malloc(sizeof(float) * LDA * 64), *Bf = malloc(sizeof(float) * LDB * 64);
    float *Cf = malloc(sizeof(float) * LDC * 64);
    for (int i = 0; i < LDA * 64; i++) Af[i] = (float)(A[i] = frand(&seed));
    for (int i = 0; i < LDB * 64; i++) Bf[i] = (float)(B[i] = frand(&seed));
    for (int i = 0; i < LDC * 64; i++) Cf[i] = (float)(C[i] = R[i] = frand(&seed));

    /* cblas_sgemm, column-major, NT. */
    ref(0, 1, M, N, K, 1.5, A, LDA, B, LDB, -0.5, R, LDC);
    cblas_sgemm(CblasColMajor, CblasNoTrans, CblasTrans, M, N, K, 1.5f, Af, LDA, Bf, LDB, -0.5f,
                Cf, LDC);
    check("cblas_sgemm_col_nt", R, Cf, NULL, LDC * N, 1e-4 * K);

    /* cblas_dgemm, row-major, TN: row-major C (M x N, ldc) is column-major C^T. */
    for (int i = 0; i < LDC * 64; i++) C[i] = R[i];
    /* Row-major op(A) = A^T with A stored K x M row-major: lda >= M. */
    ref(0, 1, N, M, K, 2.0, B, LDB, A, LDA, 0.0, R, LDC);
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, M, N, K, 2.0, A, LDA, B, LDB, 0.0, C, LDC);
    check("cblas_dgemm_row_tn", R, NULL, C, LDC * M, 1e-12 * K);

    /* sgemm_ and dgemm_ as Fortran calls them (hidden lengths after ldc). */
    {
        int m = M, n = N, k = K, lda = LDA, ldb = LDB, ldc = LDC;
        float one = 1.0f, zero = 0.0f;
        double done = 1.0, dzero = 0.0;
        for (int i = 0; i < LDC * 64; i++) Cf[i] = NAN; /* beta = 0 must not read C */
        void (*f_sgemm)(const char *, const char *, const int *, const int *, const int *,
                        const float *, const float *, const int *, const float *, const int *,
                        const float *, float *, const int *, size_t, size_t) =
            (void (*)(const char *, const char *, const int *, const int *, const int *,
                      const float *, const float *, const int *, const float *, const int *,
                      const float *, float *, const int *, size_t, size_t))(void (*)(void))sgemm_;
        f_sgemm("T", "N", &m, &n, &k, &one, Af, &lda, Bf, &ldb, &zero, Cf, &ldc, 1, 1);
        ref(1, 0, M, N, K, 1.0, A, LDA, B, LDB, 0.0, R, LDC);
        for (int j = 0; j < N; j++)
            for (int i = M; i < LDC; i++) R[i + j * LDC] = Cf[i + j * LDC] = 0; /* padding rows */
        check("sgemm_tn_beta0_nan_c", R, Cf, NULL, LDC * N, 1e-4 * K);
        dgemm_("N", "N", &m, &n, &k, &done, A, &lda, B, &ldb, &dzero, C, &ldc);
        ref(0, 0, M, N, K, 1.0, A, LDA, B, LDB, 0.0, R, LDC);
        for (int j = 0; j < N; j++)
            for (int i = M; i < LDC; i++) R[i + j * LDC] = C[i + j * LDC] = 0;
        check("dgemm_nn", R, NULL, C, LDC * N, 1e-12 * K);

        /* Bad arguments: reported, C untouched. */
        int bad_lda = M - 1;
        float before = Cf[0];
        sgemm_("N", "N", &m, &n, &k, &one, Af, &bad_lda, Bf, &ldb, &zero, Cf, &ldc);
        printf("%s sgemm_bad_lda_untouched\n", Cf[0] == before ? "ok" : "FAIL");
        failures += Cf[0] != before;
        sgemm_("X", "N", &m, &n, &k, &one, Af, &lda, Bf, &ldb, &zero, Cf, &ldc);
        fflush(stdout);
    }
    cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, Af, LDA, Bf, LDB, 0.0f,
                Cf, M - 1);
#ifdef OWN_XERBLA
    printf("%s cblas_own_xerbla_param %d\n", last_param == 14 ? "ok" : "FAIL", last_param);
    failures += last_param != 14;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, Af, K - 1, Bf, LDB,
                0.0f, Cf, LDC);
    printf("%s cblas_own_xerbla_row_lda %d %d\n", last_param == 11 && last_row_major == 1 ? "ok" : "FAIL",
           last_param, last_row_major);
    failures += last_param != 11 || last_row_major != 1;
#endif
    fflush(stdout);
    printf("done %d\n", failures);
    free(A);
    free(B);
    free(C);
    free(R);
    free(Af);
    free(Bf);
    free(Cf);
    return failures != 0;
}
