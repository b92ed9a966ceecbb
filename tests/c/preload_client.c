/* A program written against a system BLAS (linked with -lopenblas) that knows
 * nothing of autotune. Run with LD_PRELOAD=libautotune.so, its sgemm_ and
 * cblas_dgemm must resolve to autotune and still give BLAS results.
 * Prints which object provided each symbol, then "ok" or the first error. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>

void sgemm_(const char *ta, const char *tb, const int *m, const int *n, const int *k,
            const float *alpha, const float *a, const int *lda, const float *b, const int *ldb,
            const float *beta, float *c, const int *ldc);
enum { RowMajor = 101, ColMajor = 102 };
enum { NoTrans = 111, Trans = 112 };
void cblas_dgemm(int layout, int ta, int tb, int m, int n, int k, double alpha, const double *a,
                 int lda, const double *b, int ldb, double beta, double *c, int ldc);

static const char *provider(void *symbol)
{
    Dl_info info;
    return dladdr(symbol, &info) && info.dli_fname ? info.dli_fname : "?";
}

int main(void)
{
    enum { M = 13, N = 7, K = 29, LDA = 16 };
    float a[LDA * K], b[K * N], c[M * N];
    double ad[M * K], bd[N * K], cd[M * N];
    for (int i = 0; i < LDA * K; ++i) a[i] = (float)((i * 7 % 13) - 6) / 8.0f;
    for (int i = 0; i < K * N; ++i) b[i] = (float)((i * 5 % 11) - 5) / 4.0f;
    for (int i = 0; i < M * K; ++i) ad[i] = ((i * 3 % 17) - 8) / 8.0;
    for (int i = 0; i < N * K; ++i) bd[i] = ((i * 11 % 7) - 3) / 2.0;
    for (int i = 0; i < M * N; ++i) c[i] = cd[i] = 1.0f;

    const int m = M, n = N, k = K, lda = LDA, ldb = K, ldc = M;
    const float alpha = 0.5f, beta = 2.0f;
    sgemm_("N", "N", &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc);
    /* Row-major C = A (M x K) * B^T with B stored N x K. */
    cblas_dgemm(RowMajor, NoTrans, Trans, M, N, K, 1.0, ad, K, bd, K, -1.0, cd, N);

    printf("sgemm_ %s\ncblas_dgemm %s\n", provider((void *)sgemm_), provider((void *)cblas_dgemm));
    for (int j = 0; j < N; ++j)
        for (int i = 0; i < M; ++i) {
            double want = 2.0, mag = 2.0;
            for (int p = 0; p < K; ++p) {
                want += 0.5 * a[i + p * LDA] * b[p + j * K];
                mag += fabs(0.5 * a[i + p * LDA] * b[p + j * K]);
            }
            if (fabs(c[i + j * M] - want) > 2.0 * (K + 2) * 1.2e-7 * mag) {
                printf("sgemm_ wrong at %d,%d: %g vs %g\n", i, j, c[i + j * M], want);
                return 1;
            }
        }
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            double want = -1.0, mag = 1.0;
            for (int p = 0; p < K; ++p) {
                want += ad[i * K + p] * bd[j * K + p];
                mag += fabs(ad[i * K + p] * bd[j * K + p]);
            }
            if (fabs(cd[i * N + j] - want) > 2.0 * (K + 2) * 2.3e-16 * mag) {
                printf("cblas_dgemm wrong at %d,%d: %g vs %g\n", i, j, cd[i * N + j], want);
                return 1;
            }
        }
    printf("ok\n");
    return 0;
}
