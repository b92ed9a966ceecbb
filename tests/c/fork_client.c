/* fork_client.c: threads call cblas_sgemm while the main thread forks.
 *
 * Each child plans a shape of its own (the shared plan cache's lock, the
 * planner's parameter lock) and checks the product, with an alarm so that a
 * child stuck on a lock copied in the locked state dies of SIGALRM instead of
 * hanging the test.  Usage: fork_client FORKS; exit 0 when every child was right.
 */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "autotune.h"

static atomic_int stop;

static int check(int m, int n, int k)
{
    float A[64 * 64], B[64 * 64], C[64 * 64];
    for (int i = 0; i < m * k; i++) A[i] = (float)((i * 7) % 13) - 6.0f;
    for (int i = 0; i < k * n; i++) B[i] = (float)((i * 5) % 11) - 5.0f;
    cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, A, m, B, k, 0.0f, C, m);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int p = 0; p < k; p++) s += (double)A[i + p * m] * B[p + j * k];
            if (fabs(s - C[i + j * m]) > 1e-3 * (1 + fabs(s))) return 1;
        }
    return 0;
}

static void *hammer(void *arg)
{
    int seed = (int)(long)arg;
    float A[48 * 48], B[48 * 48], C[48 * 48];
    for (int i = 0; i < 48 * 48; i++) A[i] = B[i] = 1.0f;
    /* Many shapes: lookups keep going to the shared cache and its lock. */
    for (unsigned it = (unsigned)seed; !atomic_load(&stop); it++) {
        int m = 1 + (int)(it * 7 % 47), n = 1 + (int)(it * 13 % 43), k = 1 + (int)(it % 41);
        cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, A, m, B, k, 0.0f, C,
                    m);
        if (it % 97 == 0) at_plan_cache_clear();
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int forks = argc > 1 ? atoi(argv[1]) : 1000;
    pthread_t th[2];
    for (long t = 0; t < 2; t++) pthread_create(&th[t], NULL, hammer, (void *)(t * 1000));
    int bad = 0;
    for (int f = 0; f < forks && !bad; f++) {
        pid_t pid = fork();
        if (pid == 0) {
            alarm(10);
            _exit(check(17 + f % 29, 5 + f % 31, 3 + f % 37));
        }
        int status;
        if (pid < 0 || waitpid(pid, &status, 0) != pid) {
            perror("fork_client");
            bad = 1;
        } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "fork %d: child %s %d\n", f, WIFSIGNALED(status) ? "killed by signal" : "exited",
                    WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
            bad = 1;
        }
    }
    atomic_store(&stop, 1);
    for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
    printf("%s\n", bad ? "FAILED" : "ok");
    return bad;
}
