/* pool.c: the library's own pthread pool.
 *
 * Workers are started on first need and live for the process.  One parallel
 * region runs at a time; a call that finds the pool busy (another application
 * thread, or a kernel called from inside a region) runs its shares serially on
 * the calling thread, which gives the same bits because no result depends on
 * which thread computes a share.
 *
 * Waiting spins briefly before it sleeps.  Waking a sleeping thread goes
 * through the kernel, and on a virtual machine through the hypervisor when its
 * CPU had halted: an install on a 2-vCPU KVM guest timed 70-85 us for a
 * two-thread 16^3 product that takes 1.8 us on one, so two threads lost to one
 * up to 180^3.  A worker that has just finished therefore polls for the next
 * region for AT_SPIN_NS before it blocks, and the caller polls for the
 * workers' end of a region as long, so back-to-back products (a solver's or a
 * network's loop) never pay the wake-up.  The spin is short: it costs another
 * library at most that long of one core after each of our calls.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h> /* sched_yield; on Linux sched_getaffinity: the CPUs this process may run on */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "at_internal.h"

#define AT_SPIN_NS 100000

static pthread_mutex_t pool_busy = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_wake = PTHREAD_COND_INITIALIZER;
static pthread_cond_t pool_done = PTHREAD_COND_INITIALIZER;
static int pool_started;       /* workers alive (thread ids 1..pool_started) */
/* Written under pool_lock; atomic so that a spinning thread may read it without. */
static _Atomic uint64_t pool_generation;
static at_task_fn pool_fn;
static void *pool_ctx;
static int pool_width;         /* shares in the current region */
static int pool_team;          /* the current region is a team's (at__parallel_team) */
static _Atomic int pool_remaining;
/* The generation whose region share k (1..) was last claimed in: by worker k, or
 * by the caller (region) when the worker had not started it by then. */
static _Atomic uint64_t share_claim[AT_MAX_THREADS];

_Atomic int at__nthreads; /* 0: not read from the environment yet */

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Every 64 polls a spinning thread checks the time and yields its CPU: the
 * thread it waits for may be queued behind it on the same CPU.  A worker woken
 * from sleep can be placed on its waker's CPU, and then the two share one CPU
 * until the scheduler moves one.  Spinning through that, a two-thread 4-bit
 * GEMV (M = 1, K = N = 4096) on a 2-vCPU VM ran 0.6-0.7 ms a call in repeats
 * after a pause, against 0.25-0.3 ms in others and 0.5 on one thread: while
 * they shared a CPU, one burned the time slice the other needed.  On a CPU
 * with nothing else to run, sched_yield returns at once. */
static int spin_poll(unsigned i, int64_t deadline)
{
    if (i % 64) return 1;
    if (now_ns() > deadline) return 0;
    sched_yield();
    return 1;
}

/* Polls until *value differs from `from` (1) or AT_SPIN_NS have passed (0). */
static int spin_while_u64(_Atomic uint64_t *value, uint64_t from)
{
    int64_t deadline = now_ns() + AT_SPIN_NS;
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(value, memory_order_acquire) != from) return 1;
        cpu_relax();
        if (!spin_poll(i, deadline)) return 0;
    }
}

static int spin_while_positive(_Atomic int *value)
{
    int64_t deadline = now_ns() + AT_SPIN_NS;
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(value, memory_order_acquire) <= 0) return 1;
        cpu_relax();
        if (!spin_poll(i, deadline)) return 0;
    }
}

static _Atomic int64_t regions_run, shares_taken;

void at_pool_stats(int64_t *regions, int64_t *taken)
{
    if (regions) *regions = atomic_load(&regions_run);
    if (taken) *taken = atomic_load(&shares_taken);
}

/* Share k of the region of generation gen, for the first thread to ask: a worker
 * of an older region that wakes late finds a newer generation there and leaves
 * it alone (its region's task and context may be gone). */
static int claim(int k, uint64_t gen)
{
    uint64_t cur = atomic_load_explicit(&share_claim[k], memory_order_acquire);
    return cur < gen && atomic_compare_exchange_strong_explicit(&share_claim[k], &cur, gen,
                                                                memory_order_acq_rel,
                                                                memory_order_acquire);
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&pool_lock);
    for (;;) {
        if (pool_generation == seen) {
            pthread_mutex_unlock(&pool_lock);
            spin_while_u64(&pool_generation, seen);
            pthread_mutex_lock(&pool_lock);
        }
        while (pool_generation == seen) pthread_cond_wait(&pool_wake, &pool_lock);
        seen = pool_generation;
        if (id >= pool_width) continue;
        at_task_fn fn = pool_fn;
        void *ctx = pool_ctx;
        int team = pool_team;
        pthread_mutex_unlock(&pool_lock);
        if (!team && !claim(id, seen)) {
            /* The caller ran this share itself: nothing to count. */
            pthread_mutex_lock(&pool_lock);
            continue;
        }
        fn(ctx, id);
        pthread_mutex_lock(&pool_lock);
        if (--pool_remaining == 0) pthread_cond_signal(&pool_done);
    }
    return NULL;
}

/* A forked child has none of the parent's workers (and may have copied a lock
 * held by one): it starts from an empty pool. */
static void pool_after_fork_child(void)
{
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    pool_busy = m;
    pool_lock = m;
    pool_wake = c;
    pool_done = c;
    pool_started = 0;
    pool_remaining = 0;
}

static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static void pool_register_fork(void) { pthread_atfork(NULL, NULL, pool_after_fork_child); }

/* Runs a region of n shares on the pool, or returns 0 when it cannot: the pool
 * is busy, or (team) fewer than n - 1 workers could be had. */
static int region(int n, at_task_fn fn, void *ctx, int team)
{
    pthread_once(&pool_once, pool_register_fork);
    if (pthread_mutex_trylock(&pool_busy) != 0) return 0;
    pthread_mutex_lock(&pool_lock);
    while (pool_started < n - 1) {
        pthread_t th;
        if (pthread_create(&th, NULL, worker, (void *)(intptr_t)(pool_started + 1)) != 0) break;
        pthread_detach(th);
        pool_started++;
    }
    if (team && pool_started < n - 1) {
        pthread_mutex_unlock(&pool_lock);
        pthread_mutex_unlock(&pool_busy);
        return 0;
    }
    /* Shares no worker can take run on the caller below. */
    int width = pool_started + 1 < n ? pool_started + 1 : n;
    pool_fn = fn;
    pool_ctx = ctx;
    pool_width = width;
    pool_team = team;
    pool_remaining = width - 1;
    uint64_t gen = ++pool_generation;
    pthread_cond_broadcast(&pool_wake);
    pthread_mutex_unlock(&pool_lock);
    fn(ctx, 0);
    for (int t = width; t < n; t++) fn(ctx, t);
    /* A worker that has not started its share by now was asleep, or is queued on
     * a CPU another thread holds: the caller runs the share instead of waiting
     * for it.  Two threads then take about one thread's time, where waiting took
     * up to three times that (the same 2-vCPU VM, 160^3 f32, before the spins
     * yielded).  A team's shares wait for each other inside, so they stay put. */
    if (!team)
        for (int t = 1; t < width; t++)
            if (claim(t, gen)) {
                fn(ctx, t);
                atomic_fetch_sub_explicit(&pool_remaining, 1, memory_order_acq_rel);
                atomic_fetch_add(&shares_taken, 1);
            }
    atomic_fetch_add(&regions_run, 1);
    spin_while_positive(&pool_remaining);
    pthread_mutex_lock(&pool_lock);
    while (pool_remaining > 0) pthread_cond_wait(&pool_done, &pool_lock);
    pthread_mutex_unlock(&pool_lock);
    pthread_mutex_unlock(&pool_busy);
    return 1;
}

void at__parallel(int n, at_task_fn fn, void *ctx)
{
    if (n > 1 && region(n, fn, ctx, 0)) return;
    for (int t = 0; t < n; t++) fn(ctx, t);
}

int at__parallel_team(int n, at_task_fn fn, void *ctx)
{
    if (n < 2) return 0;
    return region(n, fn, ctx, 1);
}

void at__team_wait(at_team_barrier *b)
{
    unsigned phase = atomic_load_explicit(&b->phase, memory_order_acquire);
    if (atomic_fetch_add_explicit(&b->arrived, 1, memory_order_acq_rel) == b->n - 1) {
        atomic_store_explicit(&b->arrived, 0, memory_order_relaxed);
        atomic_store_explicit(&b->phase, phase + 1, memory_order_release);
        return;
    }
    /* A partner that shares this CPU, or whose CPU another process took, arrives
     * late: give it the CPU (as spin_poll does) rather than burn its time slice.
     * A team never sleeps here: its partners are all running the same plan. */
    for (unsigned i = 1; atomic_load_explicit(&b->phase, memory_order_acquire) == phase; i++) {
        cpu_relax();
        if (i % 64 == 0) sched_yield();
    }
}

/* A thread count from variable `name`: > 0, or 0 when unset or empty.  A value
 * that is no count is said once per variable, then ignored.  OpenMP allows a
 * list ("4,2" for nested regions): its first entry is the outer level's. */
static long env_threads(const char *name, int list, atomic_flag *warned)
{
    const char *env = getenv(name);
    if (!env || !*env) return 0;
    char *end = (char *)env;
    long v = strtol(env, &end, 10);
    int bad = end == env || v < 0 || (*end && !(list && *end == ','));
    if (bad) { /* "1e3", "-1", "four" */
        if (!atomic_flag_test_and_set(warned))
            fprintf(stderr, "autotune: ignoring %s=\"%s\": not a whole number of threads\n", name, env);
        return 0;
    }
    return v;
}

/* The CPUs this process may run on: its affinity mask where there is one
 * (taskset, cgroups' cpusets, a batch scheduler's allocation), else the online CPUs. */
static long usable_cpus(void)
{
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
    return sysconf(_SC_NPROCESSORS_ONLN);
}

int at__host_cpus(void)
{
    static _Atomic int cpus;
    int n = atomic_load_explicit(&cpus, memory_order_relaxed);
    if (n > 0) return n;
    long v = sysconf(_SC_NPROCESSORS_ONLN);
    n = v < 1 ? 1 : v > AT_MAX_THREADS ? AT_MAX_THREADS : (int)v;
    atomic_store_explicit(&cpus, n, memory_order_relaxed);
    return n;
}

/* at__num_threads' first call (at_internal.h): the environment's choice.  The
 * library's own variable first; when it is unset, the ones a process already
 * uses to size every other pool in it (OMP_NUM_THREADS, then OpenBLAS's
 * own), so OMP_NUM_THREADS=1 beside joblib or Dask workers keeps this library
 * from adding threads too; 0 in any of them means "not set". */
int at__num_threads_init(void)
{
    int n = atomic_load(&at__nthreads);
    if (n > 0) return n;
    static atomic_flag warned[3] = {ATOMIC_FLAG_INIT, ATOMIC_FLAG_INIT, ATOMIC_FLAG_INIT};
    long v = env_threads("AUTOTUNE_NUM_THREADS", 0, &warned[0]);
    if (v < 1) v = env_threads("OMP_NUM_THREADS", 1, &warned[1]);
    if (v < 1) v = env_threads("OPENBLAS_NUM_THREADS", 0, &warned[2]);
    if (v < 1) v = usable_cpus();
    if (v < 1) v = 1;
    if (v > AT_MAX_THREADS) v = AT_MAX_THREADS;
    int expected = 0;
    atomic_compare_exchange_strong(&at__nthreads, &expected, (int)v);
    return atomic_load(&at__nthreads);
}

void at_set_num_threads(int n)
{
    if (n < 1) {
        /* Back to the environment's choice on next use. */
        atomic_store(&at__nthreads, 0);
        return;
    }
    atomic_store(&at__nthreads, n > AT_MAX_THREADS ? AT_MAX_THREADS : n);
}

int at_get_num_threads(void) { return at__num_threads(); }
