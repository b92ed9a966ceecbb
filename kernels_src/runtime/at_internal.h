/* at_internal.h: what the runtime's translation units share. */
#ifndef AT_INTERNAL_H
#define AT_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "autotune.h"
#include "at_table.h"

#define AT_MAX_THREADS 256
/* The cache line cost.c's L1 model and the executor's prefetches assume: every x86
 * core's and most Arm cores' (Apple's are 128 bytes). */
#define AT_L1_LINE 64

/* Everything below is the library's own: hidden, so calls between its units
 * are direct instead of through the PLT (a few ns each on a 2x2x2 call). */
#pragma GCC visibility push(hidden)

/* A macro block of the packed path: one thread computes it over all of K. */
typedef struct {
    int64_t i0, j0;
    int32_t mb, nb;
    int32_t thread;
    int32_t tiling;   /* index of its micro tiling in plan->tilings */
} at_block;

/* Steps [first, first + count) of plan->steps tile one block shape. */
typedef struct {
    int32_t mb, nb;
    int64_t first, count;
} at_tiling;

struct at_plan {
    at_plan_info info;         /* as the caller described the problem */
    /* The column-major problem the plan computes (row-major swapped into it). */
    int64_t M, N, K, lda, ldb, ldc;
    int32_t ta, tb;
    _Atomic int refs;          /* the cache and each in-flight call hold one */
    int32_t ktrans_a, ktrans_b;/* operand formats the kernels read */
    int32_t streaming;         /* a step calls an SME2 kernel: the executor's streaming region */
    /* No-pack path, a few rows of an untransposed A (plan.c, choose_copy_a): the
     * executor copies op(A) into rows along K of leading dimension lda (ta is
     * then 1) from the caller's A, whose leading dimension is src_lda. */
    int32_t copy_a;
    int64_t src_lda;
    /* No-pack path: steps in global coordinates, grouped by thread.
     * Packed path: micro steps relative to their block, grouped by tiling. */
    int64_t nsteps;
    at_step *steps;
    /* No-pack path: the depth each step walks at a time, every step in turn per
     * slice (plan.c, slice_place_walks); 0: all of K in one call. */
    int64_t place_kc;
    /* No-pack path, sliced, A from memory: rows below a band of whole-line slivers
     * whose lines the walk prefetches before the band's first step (0: none). */
    int64_t place_prefetch;
    int64_t nblocks;
    at_block *blocks;          /* grouped by thread, then by column panel */
    int32_t ntilings;
    at_tiling tilings[4];
    int64_t *thread_start;     /* threads + 1 offsets into steps or blocks */
    double thread_flops;       /* the batch split's threshold, as planned */
    /* A no-pack plan of at most AT_DIRECT_STEPS kernel steps over all of K, each
     * kernel an ordinary function reading A and B in place (no panels, no
     * streaming entry): the steps' kernels and operand offsets, in step order,
     * resolved once (plan.c, choose_direct).  A batch runs them per item; where
     * the plan has one thread, single_steps == ndirect and the entry points call
     * them themselves (at__single_run_*); `single` is then the kernel of a plan
     * of one step, one load closer (a 2x2x2 call took 2.4 ns longer through the
     * list, Zen 1).  ndirect == 0: none. */
    int32_t ndirect, single_steps;
    struct at_direct *direct;
    at_kernel_fn single;
    /* A plan whose steps would grow with M x N past a bound (a tall, thin C of
     * millions of rows): C is cut into chunks of chunk_m x chunk_n (in the
     * column-major problem), all of one shape but the last row and column of
     * chunks, and sub[s] is the column-major plan of shape s (bit 0: the last
     * row of chunks, when shorter; bit 1: the last column, when narrower).  The
     * executor runs the chunks in column order through their shape's plan, so
     * the plan's size does not depend on M or N.  chunk_m == 0: not chunked. */
    int64_t chunk_m, chunk_n;
    at_plan *sub[4];
    size_t bytes;              /* what the plan holds in memory (the cache's budget) */
};

/* plan.c (the rest of the tiler shares at_planner.h) */
at_plan *at__plan_build(int dtype, int layout, int trans_a, int trans_b, int64_t M, int64_t N,
                        int64_t K, int64_t lda, int64_t ldb, int64_t ldc, int threads);
void at__plan_free(at_plan *plan);
int at__check_args(int dtype, int layout, int ta, int tb, int64_t M, int64_t N, int64_t K,
                   int64_t lda, int64_t ldb, int64_t ldc);

/* error.c */
void at__set_error(const char *fmt, ...);

/* cpu.c: whether this CPU can run kernel i of at_kernel_table (its features,
 * and the SVL of an SME2 kernel); computed once per process. */
int at__kernel_usable(int index);
/* features.c: whether this CPU has one feature (a HostInfo name of `len` bytes),
 * all of a space-separated list, and each name of a list passed to fn. */
int at__has_feature(const char *name, size_t len);
int at__has_features(const char *list);
void at__each_feature(const char *list, void (*fn)(const char *, size_t, void *), void *ctx);
/* This CPU's streaming vector length in bytes (0 without SME): the SVL of the
 * SME2 kernels at__kernel_usable() lets plans use. */
int32_t at__svl_bytes(void);
/* Whether the calling thread's SVL is still at__svl_bytes() (SME CPUs only). */
int at__svl_unchanged(void);

/* params.c */
/* fork(): the planner's parameter lock, taken before the fork and released
 * (parent) or reset (child) after; cache.c registers the handlers. */
enum { AT_FORK_PREPARE, AT_FORK_PARENT, AT_FORK_CHILD };
void at__params_fork(int phase);
/* The parameters plans are made with now (params.c), copied under its lock. */
void at__params_snapshot(at_tune_params *out);
/* A cost weight of zero stands for the built-in value (a table or caller that
 * leaves it out plans as before the weight existed). */
static inline double at__weight(double value, double builtin) { return value > 0 ? value : builtin; }
/* Bumped by at_params_set: part of the cache key, so no plan made with older
 * parameters is found again even if it was being built during the change.
 * Read inline: a call per lookup is a measurable share of a 2x2x2 product. */
extern _Atomic uint64_t at__params_gen;
static inline uint64_t at__params_generation(void)
{
    return atomic_load_explicit(&at__params_gen, memory_order_acquire);
}

/* exec.c */
int at__execute(const at_plan *plan, int64_t batch, double alpha, const void *const *A,
                const void *const *B, double beta, void *const *C, const void *A0,
                int64_t sa, const void *B0, int64_t sb, void *C0, int64_t sc);
/* at__execute for one problem (at_plan_execute, at_gemm): fewer arguments to
 * pass on the path where a 2x2x2 call is mostly call overhead. */
int at__execute_one(const at_plan *plan, double alpha, const void *A, const void *B, double beta,
                    void *C);

/* pool.c: runs fn(ctx, t) for t in [0, n) on n threads (the caller is thread 0). */
typedef void (*at_task_fn)(void *ctx, int t);
void at__parallel(int n, at_task_fn fn, void *ctx);
/* fn(ctx, t) for t in [0, n) on n threads at once, so that they may wait for
 * each other (at__team_wait); 0, and nothing run, when n threads cannot be had
 * (the pool busy with another region, or workers that cannot be started). */
int at__parallel_team(int n, at_task_fn fn, void *ctx);
/* A barrier for the n threads of a team region: each returns once all have
 * arrived.  Spins, yielding the CPU every 64 polls: a region is short. */
typedef struct {
    _Atomic int arrived;
    _Atomic unsigned phase;
    int n;
} at_team_barrier;
void at__team_wait(at_team_barrier *b);
/* The thread count: AUTOTUNE_NUM_THREADS or at_set_num_threads; 0 until first
 * read, which at__num_threads_init does. */
extern _Atomic int at__nthreads;
int at__num_threads_init(void);
/* The online CPUs (at most AT_MAX_THREADS): a fact of the machine, which no thread
 * setting or affinity mask changes, for decisions that must not change the bits. */
int at__host_cpus(void);
static inline int at__num_threads(void)
{
    int n = atomic_load_explicit(&at__nthreads, memory_order_relaxed);
    return n > 0 ? n : at__num_threads_init();
}

/* cache.c */
at_plan *at__plan_acquire(int dtype, int layout, int trans_a, int trans_b, int64_t M,
                          int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc);
void at__plan_release(at_plan *plan);

/* The plan key: flags and thread count, the six sizes, the parameter generation,
 * as 64-bit words so equality is a few xor/or (no memcmp). */
#define AT_KEY_WORDS 8
typedef struct {
    uint64_t w[AT_KEY_WORDS];
} at_key;

static inline void at__key_make(at_key *k, int dtype, int layout, int trans_a, int trans_b,
                                int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                                int64_t ldc, int threads, uint64_t gen)
{
    /* The checked arguments fit: flags are 0/1, threads <= AT_MAX_THREADS. */
    k->w[0] = (uint64_t)dtype | (uint64_t)layout << 8 | (uint64_t)trans_a << 16 |
              (uint64_t)trans_b << 24 | (uint64_t)threads << 32;
    k->w[1] = (uint64_t)M;
    k->w[2] = (uint64_t)N;
    k->w[3] = (uint64_t)K;
    k->w[4] = (uint64_t)lda;
    k->w[5] = (uint64_t)ldb;
    k->w[6] = (uint64_t)ldc;
    k->w[7] = gen;
}

static inline int at__key_eq(const at_key *a, const at_key *b)
{
    uint64_t d = 0;
    for (int i = 0; i < AT_KEY_WORDS; i++) d |= a->w[i] ^ b->w[i];
    return d == 0;
}

/* One thread's front cache of its last plans (cache.c).  It lives on the heap and
 * is registered so at_plan_cache_stats can add up every thread's hits; the owner
 * alone writes its entries and counter. */
#define AT_TLS_WAYS 4
typedef struct at_tcache {
    at_key key[AT_TLS_WAYS];
    at_plan *plan[AT_TLS_WAYS]; /* most recently used first; each owns one reference */
    uint64_t params_gen, epoch; /* what the entries are valid for */
    _Atomic int64_t hits;       /* written by the owner only, read by the stats */
    struct at_tcache *prev, *next;
} at_tcache;

/* The front cache's pointer is read on every call: initial-exec, a load from a
 * fixed offset of the thread pointer, in the static TLS glibc sets aside for
 * libraries opened later (8 bytes of it; when none is left dlopen fails with a
 * message, never a wrong result). */
#define AT_TLS_FAST __attribute__((tls_model("initial-exec")))
extern _Thread_local at_tcache *at__tcache AT_TLS_FAST;
/* Bumped by at_plan_cache_clear: a front cache stamped with an older epoch is
 * emptied on its next use, since its owner is the only thread allowed to. */
extern _Atomic uint64_t at__clear_epoch;

/* Everything but the hit on the most recent entry: the rest of the front cache,
 * then the shared cache (k carries every argument). */
at_plan *at__plan_lookup_slow(const at_key *k, int *owned);

/* A hit of this thread's front cache, counted for at_plan_cache_stats (only the
 * owner writes its counter, so no atomic read-modify-write). */
static inline void at__count_hit(at_tcache *tc)
{
    atomic_store_explicit(&tc->hits, atomic_load_explicit(&tc->hits, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* The hit on this thread's most recent plan, borrowed (see at__plan_lookup), or
 * NULL: the part of a lookup that is inlined into the entry points.  Not counted:
 * a caller that uses the plan counts the hit on *front (set on a hit), so a call
 * that looks twice (the typed entries, then gemm_checked) counts once. */
static inline at_plan *at__plan_front(int dtype, int layout, int trans_a, int trans_b,
                                      int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                                      int64_t ldc, at_tcache **front)
{
    uint64_t gen = at__params_generation();
    int threads = at__num_threads();
    at_tcache *tc = at__tcache;
    if (tc && tc->plan[0] && tc->params_gen == gen &&
        tc->epoch == atomic_load_explicit(&at__clear_epoch, memory_order_relaxed)) {
        /* Compared against the arguments in registers, not a key just stored to
         * the stack: reading that back as wider loads fails store forwarding,
         * which cost more than the rest of the lookup. */
        const uint64_t *e = tc->key[0].w;
        uint64_t w0 = (uint64_t)dtype | (uint64_t)layout << 8 | (uint64_t)trans_a << 16 |
                      (uint64_t)trans_b << 24 | (uint64_t)threads << 32;
        uint64_t d = (e[0] ^ w0) | (e[1] ^ (uint64_t)M) | (e[2] ^ (uint64_t)N) |
                     (e[3] ^ (uint64_t)K) | (e[4] ^ (uint64_t)lda) | (e[5] ^ (uint64_t)ldb) |
                     (e[6] ^ (uint64_t)ldc) | (e[7] ^ gen);
        if (d == 0) {
            *front = tc;
            return tc->plan[0];
        }
    }
    return NULL;
}

/* The hot-path lookup: the plan from this thread's front cache.  With *owned == 0
 * the pointer is borrowed (the front cache holds its reference, and only this
 * thread's next lookup can drop it); with *owned == 1 the caller must release
 * it (the front cache could not be had). */
static inline at_plan *at__plan_lookup(int dtype, int layout, int trans_a, int trans_b,
                                       int64_t M, int64_t N, int64_t K, int64_t lda,
                                       int64_t ldb, int64_t ldc, int *owned)
{
    at_tcache *front;
    at_plan *p = at__plan_front(dtype, layout, trans_a, trans_b, M, N, K, lda, ldb, ldc, &front);
    if (p) {
        at__count_hit(front);
        *owned = 0;
        return p;
    }
    at_key k;
    at__key_make(&k, dtype, layout, trans_a, trans_b, M, N, K, lda, ldb, ldc,
                 at__num_threads(), at__params_generation());
    return at__plan_lookup_slow(&k, owned);
}

/* One step of a plan's direct list: its kernel and where its block of op(A),
 * op(B) and C starts, in elements from each operand's origin. */
#define AT_DIRECT_STEPS 16
typedef struct at_direct {
    at_kernel_fn fn;
    int64_t a, b, c;
} at_direct;

/* Steps d[-n] .. d[-1] of a direct list, each kernel called from a line of
 * its own: the list is entered at its length and the cases fall through.  A
 * loop over the same calls ran 16^3 fp64 (six steps) at 440 ns and its calls
 * written out one after another at 390 (Zen 1).  The steps are the plan's, in
 * its order, so the bits are the executor's walk's. */
/* A case that runs on into the next, said so to -Wimplicit-fallthrough. */
#if defined(__has_attribute)
#if __has_attribute(fallthrough)
#define AT_FALLTHROUGH __attribute__((fallthrough))
#endif
#endif
#ifndef AT_FALLTHROUGH
#define AT_FALLTHROUGH ((void)0)
#endif
#define AT_DIRECT_RUN(KFN, d, n, K, A, lda, B, ldb, C, ldc, alpha, beta)                               \
    do {                                                                                               \
        const at_direct *d_ = (d) + (n);                                                               \
        switch (n) {                                                                                   \
        case 16: AT_DIRECT_CALL(KFN, d_ - 16, K, A, lda, B, ldb, C, ldc, alpha, beta); AT_FALLTHROUGH; \
        case 15: AT_DIRECT_CALL(KFN, d_ - 15, K, A, lda, B, ldb, C, ldc, alpha, beta); AT_FALLTHROUGH; \
        case 14: AT_DIRECT_CALL(KFN, d_ - 14, K, A, lda, B, ldb, C, ldc, alpha, beta); AT_FALLTHROUGH; \
        case 13: AT_DIRECT_CALL(KFN, d_ - 13, K, A, lda, B, ldb, C, ldc, alpha, beta); AT_FALLTHROUGH; \
        case 12: AT_DIRECT_CALL(KFN, d_ - 12, K, A, lda, B, ldb, C, ldc, alpha, beta); AT_FALLTHROUGH; \
        case 11: AT_DIRECT_CALL(KFN, d_ - 11, K, A, lda, B, ldb, C, ldc, alpha, beta); AT_FALLTHROUGH; \
        case 10: AT_DIRECT_CALL(KFN, d_ - 10, K, A, lda, B, ldb, C, ldc, alpha, beta); AT_FALLTHROUGH; \
        case 9: AT_DIRECT_CALL(KFN, d_ - 9, K, A, lda, B, ldb, C, ldc, alpha, beta); AT_FALLTHROUGH;   \
        case 8: AT_DIRECT_CALL(KFN, d_ - 8, K, A, lda, B, ldb, C, ldc, alpha, beta); AT_FALLTHROUGH;   \
        case 7: AT_DIRECT_CALL(KFN, d_ - 7, K, A, lda, B, ldb, C, ldc, alpha, beta); AT_FALLTHROUGH;   \
        case 6: AT_DIRECT_CALL(KFN, d_ - 6, K, A, lda, B, ldb, C, ldc, alpha, beta); AT_FALLTHROUGH;   \
        case 5: AT_DIRECT_CALL(KFN, d_ - 5, K, A, lda, B, ldb, C, ldc, alpha, beta); AT_FALLTHROUGH;   \
        case 4: AT_DIRECT_CALL(KFN, d_ - 4, K, A, lda, B, ldb, C, ldc, alpha, beta); AT_FALLTHROUGH;   \
        case 3: AT_DIRECT_CALL(KFN, d_ - 3, K, A, lda, B, ldb, C, ldc, alpha, beta); AT_FALLTHROUGH;   \
        case 2: AT_DIRECT_CALL(KFN, d_ - 2, K, A, lda, B, ldb, C, ldc, alpha, beta); AT_FALLTHROUGH;   \
        case 1: AT_DIRECT_CALL(KFN, d_ - 1, K, A, lda, B, ldb, C, ldc, alpha, beta); AT_FALLTHROUGH;   \
        default: break;                                                                                \
        }                                                                                              \
    } while (0)
#define AT_DIRECT_CALL(KFN, x, K, A, lda, B, ldb, C, ldc, alpha, beta)                     \
    ((KFN)(x)->fn)(K, (A) + (x)->a, lda, (B) + (x)->b, ldb, (C) + (x)->c, ldc, alpha, beta)

/* A plan of a few kernel steps run by its caller: the kernels and arguments
 * run_one would use, so the same bits, without the executor's calls in between
 * (at 2x2x2 they cost as much as the kernel).  Ready unless the plan needs the
 * executor: no direct list, more than one thread, or alpha == 0 (then, as in the
 * reference BLAS, A and B are not read).  The planner leaves the list empty for a
 * kernel that reads packed panels or runs in an SME2 streaming region (plan.c),
 * so those always take the executor.  The same definition in every translation
 * unit: nothing here may depend on a macro only some of them are compiled with
 * (AT_SME2_EXEC is exec.c's alone: blas.c, compiled without it, once called a
 * packed SME2 kernel on unpacked operands from a cached plan). */
#define AT_SINGLE(T, KFN)                                                                  \
    static inline int at__single_ready_##T(const at_plan *p, T alpha)                      \
    {                                                                                    \
        return (p->single != NULL || p->single_steps != 0) && alpha != (T)0;             \
    }                                                                                    \
    static inline void at__single_run_##T(const at_plan *p, T alpha, const T *A,         \
                                          const T *B, T beta, T *C)                      \
    {                                                                                    \
        if (p->info.layout == AT_ROW_MAJOR) {                                            \
            const T *t = A;                                                              \
            A = B;                                                                       \
            B = t;                                                                       \
        }                                                                                \
        if (p->single) /* one kernel covers C: no offsets, no jump table */              \
            ((KFN)p->single)(p->K, A, p->lda, B, p->ldb, C, p->ldc, alpha, beta);        \
        else                                                                             \
            at__direct_run_##T(p, alpha, A, B, beta, C);                                 \
    }
/* exec.c: a plan's direct list on one product (operands already swapped for
 * row-major).  Out of line: it saves six registers for its sixteen calls, which an
 * entry whose plan is one kernel does not (at_plan_execute saves none). */
void at__direct_run_float(const at_plan *p, float alpha, const float *A, const float *B,
                          float beta, float *C);
void at__direct_run_double(const at_plan *p, double alpha, const double *A, const double *B,
                           double beta, double *C);
AT_SINGLE(float, at_sgemm_fn)
AT_SINGLE(double, at_dgemm_fn)
#undef AT_SINGLE

/* record.c: one JSON line per plan built while AUTOTUNE_RECORD names a file. */
void at__record_shape(int dtype, int ta, int tb, int64_t M, int64_t N, int64_t K, int threads);

#pragma GCC visibility pop

#endif
