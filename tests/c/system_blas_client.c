/* A program linked with the system BLAS (-lblas: Debian's reference BLAS or
 * whichever libblas.so.3 the alternatives point at) that knows nothing of
 * autotune: Fortran-style dgemm_ and sgemm_ calls, checked against a plain loop.
 * Prints which object provided dgemm_, then libautotune's plan-cache counters
 * when a libautotune is in the process (found by name at run time, as a
 * preloaded library's symbols are), then "ok" or the first error. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

void dgemm_(const char *ta, const char *tb, const int *m, const int *n, const int *k,
            const double *alpha, const double *a, const int *lda, const double *b, const int *ldb,
            const double *beta, double *c, const int *ldc);
void sgemm_(const char *ta, const char *tb, const int *m, const int *n, const int *k,
            const float *alpha, const float *a, const int *lda, const float *b, const int *ldb,
            const float *beta, float *c, const int *ldc);

int main(void)
{
    enum { M = 37, N = 11, K = 23 };
    double a[K * M], b[K * N], c[M * N];
    float as[M * K], bs[K * N], cs[M * N];
    for (int i = 0; i < K * M; ++i) a[i] = as[i] = (float)((i * 7 % 13) - 6) / 8.0f;
    for (int i = 0; i < K * N; ++i) b[i] = bs[i] = (float)((i * 5 % 11) - 5) / 4.0f;
    for (int i = 0; i < M * N; ++i) c[i] = cs[i] = 1.0f;
    const int m = M, n = N, k = K, lda = K, ldb = K, ldc = M;
    const double alpha = 0.5, beta = -1.0;
    const float alphas = 0.5f, betas = -1.0f;
    /* C = 0.5 A^T B - C with A stored K x M, B stored K x N. */
    dgemm_("T", "N", &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc);
    sgemm_("T", "N", &m, &n, &k, &alphas, as, &lda, bs, &ldb, &betas, cs, &ldc);

    Dl_info info;
    printf("dgemm_ %s\n", dladdr((void *)dgemm_, &info) && info.dli_fname ? info.dli_fname : "?");
    void (*stats)(int64_t *, int64_t *) =
        (void (*)(int64_t *, int64_t *))dlsym(RTLD_DEFAULT, "at_plan_cache_stats");
    if (stats) {
        int64_t created = 0, hits = 0;
        stats(&created, &hits);
        printf("plans %lld\n", (long long)(created + hits));
    }
    for (int j = 0; j < N; ++j)
        for (int i = 0; i < M; ++i) {
            double want = -1.0, mag = 1.0;
            for (int p = 0; p < K; ++p) {
                want += 0.5 * a[p + i * K] * b[p + j * K];
                mag += fabs(0.5 * a[p + i * K] * b[p + j * K]);
            }
            if (fabs(c[i + j * M] - want) > 2.0 * (K + 2) * 2.3e-16 * mag ||
                fabs(cs[i + j * M] - want) > 2.0 * (K + 2) * 1.2e-7 * mag) {
                printf("wrong at %d,%d: %g %g vs %g\n", i, j, c[i + j * M], cs[i + j * M], want);
                return 1;
            }
        }
    printf("ok\n");
    return 0;
}
