/* at_planner.h: what the tiler's units share (cost.c, cover.c, threads.c, plan.c).
 * Apart from at_internal.h because no other unit plans: the executor, the cache
 * and the entry points see plans only through struct at_plan. */
#ifndef AT_PLANNER_H
#define AT_PLANNER_H

#include <stdint.h>

#include "at_internal.h"

#pragma GCC visibility push(hidden)

/* cost.c (set by plan.c) */
/* The parameters of the plan being built: the snapshot on at__plan_build's stack
 * (params.c keeps the library's; planning itself takes no lock).  Thread-local,
 * so the cost model reads it without taking it as an argument everywhere.
 * Local-dynamic, as when it was one unit's static: GCC gives a hidden extern
 * thread-local the general-dynamic model, a __tls_get_addr call per access
 * (the definition in cost.c repeats the model: GCC does not carry it over). */
#define AT_TLS_LOCAL __attribute__((tls_model("local-dynamic")))
extern _Thread_local const at_tune_params *at__tp AT_TLS_LOCAL;

/* cpu.c decides which kernels this CPU runs; a plan is made of those alone. */
static inline int64_t at__gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static inline const at_kernel *at__kernel_for(int i, int dtype, int ta, int tb)
{
    const at_kernel *d = &at_kernel_table[i].kernel;
    if (d->dtype != dtype || d->trans_a != ta || d->trans_b != tb) return NULL;
    return at__kernel_usable(i) ? d : NULL;
}

/* cost.c */
/* A grid cell no kernel computes: its steps run the portable edge code. */
#define AT_EDGE (-1)

typedef struct {
    int H, W;          /* heights 1..H, widths 1..W */
    int32_t *kid;      /* [(h-1)*W + (w-1)]: kernel index or AT_EDGE */
    double *sec;       /* predicted seconds of that block */
} at_grid;

/* favour: a kernel index whose blocks cost what the family's fastest kernel's do
 * at depth K (a main kernel measured at install: at_tune_params.pack_kernel for
 * the packed path, place_kernel_* in place), or -1. */
int at__grid_build(at_grid *g, int dtype, int ta, int tb, int64_t K, int64_t lda,
                   int64_t ldb, int favour);
void at__grid_free(at_grid *g);
/* Also ranks whole families: the packed path picks its panels' format by it. */
double at__kernel_gflops(const at_table_entry *d, int64_t K);
/* Inline: build_packed charges it once per block, in its loop over blocks. */
static inline double at__pack_seconds(int dtype)
{
    return at__weight(at__tp->pack_seconds[dtype], at_params_builtin.pack_seconds[dtype]);
}

/* The depth each no-pack step walks at a time, all steps in turn per slice (0: all
 * of K at once); mr is the tallest step's height, nr the columns of C; `from_memory`:
 * A outgrows the last-level cache between calls (place_stream_bytes).
 * A multiple of AT_PLACE_SLICE_STEP. */
#define AT_PLACE_SLICE_STEP 8
/* The widest C whose no-pack plan over a cached A walks K in slices (plan.c,
 * slice_place_walks; over an A from memory, place_stream_bytes, every one does), and
 * the widest row of C, in bytes, that stays in place over an A from memory
 * (takes_packed_path: f32 32 columns, fp64 16). */
#define AT_PLACE_SLICE_MAX_N 8
#define AT_PLACE_STREAM_MAX_ROW_BYTES 128
/* A no-pack plan over a B from memory walks C column by column where N is at least
 * this many times M (plan.c, order_by_columns). */
#define AT_ORDER_BY_COLUMNS_RATIO 8
/* The widest C that stays in place over a transposed A (takes_packed_path). */
#define AT_PLACE_TRANS_MAX_N 32
/* Lines below a band of whole-line slivers that a walk over an A from memory
 * prefetches (plan.c, slice_place_walks). */
#define AT_PLACE_PREFETCH_LINES 2
int64_t at__place_k_slice(int64_t K, int mr, int nr, int64_t lda, int bpe, int from_memory);

/* cover.c */
/* Grows as a block is tiled; the no-pack and packed plans keep v as their steps. */
typedef struct {
    at_step *v;
    int64_t n, cap;
} at_steps;

/* Tile an m x n block with the grid: append its steps (relative coordinates). */
int at__tile_block(const at_grid *g, int64_t m, int64_t n, at_steps *out, double *seconds);
/* The same for many blocks of one grid: a tiler keeps what its searches share.
 * exhaustive = 1 tries every block size and band height, the search before the
 * pruning (the bounded one's reference in tests/test_cover_search.py).  The grid
 * must outlive the tiler. */
typedef struct at_tiler at_tiler;
at_tiler *at__tiler_new(const at_grid *g, int exhaustive);
int at__tiler_tile(at_tiler *t, int64_t m, int64_t n, at_steps *out, double *seconds);
void at__tiler_free(at_tiler *t);

/* threads.c */
/* A step or block as the thread split sees it; plan.c copies thread back. */
typedef struct {
    int64_t i0, j0;
    double sec;
    int32_t mb, nb;
    int32_t thread;
} at_item;

/* ldc (elements) and elem (bytes) place C's lines: a candidate is charged for
 * each line two threads write (threads.c). */
double at__split_threads(at_item *it, int64_t n, int64_t M, int64_t N, int64_t m_step,
                         int64_t n_step, int T, int mode, int64_t ldc, int64_t elem);

#pragma GCC visibility pop

#endif
