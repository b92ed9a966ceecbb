/* at_internal.h: what the runtime's translation units share. */
#ifndef AT_INTERNAL_H
#define AT_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "autotune.h"
#include "at_table.h"

#define AT_MAX_THREADS 256

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
    /* No-pack path: steps in global coordinates, grouped by thread.
     * Packed path: micro steps relative to their block, grouped by tiling. */
    int64_t nsteps;
    at_step *steps;
    int64_t nblocks;
    at_block *blocks;          /* grouped by thread, then by column panel */
    int32_t ntilings;
    at_tiling tilings[4];
    int64_t *thread_start;     /* threads + 1 offsets into steps or blocks */
    double thread_flops;       /* the batch split's threshold, as planned */
};

/* tiler.c */
at_plan *at__plan_build(int dtype, int layout, int trans_a, int trans_b, int64_t M, int64_t N,
                        int64_t K, int64_t lda, int64_t ldb, int64_t ldc, int threads);
void at__plan_free(at_plan *plan);
void at__set_error(const char *fmt, ...);
/* Bumped by at_params_set: part of the cache key, so no plan made with older
 * parameters is found again even if it was being built during the change. */
uint64_t at__params_generation(void);
int at__check_args(int dtype, int layout, int ta, int tb, int64_t M, int64_t N, int64_t K,
                   int64_t lda, int64_t ldb, int64_t ldc);

/* exec.c */
int at__execute(const at_plan *plan, int64_t batch, double alpha, const void *const *A,
                const void *const *B, double beta, void *const *C, const void *A0,
                int64_t sa, const void *B0, int64_t sb, void *C0, int64_t sc);

/* cache.c */
at_plan *at__plan_acquire(int dtype, int layout, int trans_a, int trans_b, int64_t M,
                          int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc);
void at__plan_release(at_plan *plan);
/* The hot-path lookup: the plan from this thread's front cache.  With *owned == 0
 * the pointer is borrowed (the front cache holds its reference, and only this
 * thread's next lookup can drop it); with *owned == 1 the caller must release
 * it (the front cache could not be had). */
at_plan *at__plan_lookup(int dtype, int layout, int trans_a, int trans_b, int64_t M,
                         int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc,
                         int *owned);

/* pool.c: runs fn(ctx, t) for t in [0, n) on n threads (the caller is thread 0). */
typedef void (*at_task_fn)(void *ctx, int t);
void at__parallel(int n, at_task_fn fn, void *ctx);
int at__num_threads(void);

#endif
