/* plan.c: the input-aware tiler's plans.  It turns a problem description into a
 * kernel executing plan and makes every decision the executor will need; the
 * public planning API (at_plan_*, at_kernel_*) is here too.
 *
 * Small problems (IAAT): C is covered by kernel-sized blocks read in place.  A
 * dynamic programme splits M into row bands of kernel heights and each band's N
 * into kernel widths, minimising the predicted time, where a block's time comes
 * from its kernel's measured GFLOPS at this K (or the analytic model when the
 * table was emulated).  Bigger blocks and fewer memory operations win through
 * the measurements themselves: a 16x6 kernel loads (16+6)K elements for 192K
 * flops, a 1x6 kernel (1+6)K for 12K.
 *
 * Large problems (Goto): C is cut into blk_m x blk_n blocks, K into blk_k slices;
 * each block's operands are packed into contiguous panels and the same kernels
 * run on them with small leading dimensions.
 *
 * Threads never change the tiling of C, only which thread runs which block, and
 * K is never split across threads: results are bitwise identical for any count.
 *
 * The rest of the tiler: the predicted times and the cost grid are cost.c's, the
 * covers that tile a block cover.c's, the thread split threads.c's (shared
 * through at_planner.h).  The parameters planning reads are params.c's; errors
 * go through error.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "at_planner.h"

/* ---- plan construction ------------------------------------------------------ */

void at__plan_free(at_plan *plan)
{
    if (!plan) return;
    for (int s = 0; s < 4; s++) at__plan_free(plan->sub[s]);
    free(plan->steps);
    free(plan->blocks);
    free(plan->thread_start);
    free(plan->direct);
    free(plan);
}

/* What planning asks of each kernel family (transposition ta * 2 + tb) of a
 * dtype, from one pass over the table (a library carries hundreds of kernels)
 * rather than a pass per family and question. */
typedef struct {
    int count;   /* kernels this CPU runs */
    int repacks; /* whether one reads a packed panel of its own (SME2's pa/pb/papb
                  * formats): on the packed path it would pack again what the
                  * block's panels hold */
    double rate; /* the best GFLOPS at depth K (0 when not asked), for choosing
                  * packed formats, and that kernel's block */
    int h, w;
} at_family;

static void families(int dtype, int64_t K, at_family f[4])
{
    memset(f, 0, 4 * sizeof *f);
    for (int i = 0; i < at_kernel_table_count; i++) {
        const at_kernel *k = &at_kernel_table[i].kernel;
        if (k->dtype != dtype) continue;
        const at_kernel *d = at__kernel_for(i, dtype, k->trans_a, k->trans_b);
        if (!d) continue;
        at_family *fam = &f[d->trans_a * 2 + d->trans_b];
        fam->count++;
        fam->repacks |= d->pack_a_ld > 0 || d->pack_b_ld > 0;
        if (K < 0) continue;
        double g = at__kernel_gflops(&at_kernel_table[i], K);
        if (g > fam->rate) {
            fam->rate = g;
            fam->h = d->mr;
            fam->w = d->nr;
        }
    }
}

static int64_t round_down(int64_t v, int64_t q)
{
    int64_t r = (v / q) * q;
    return r > 0 ? r : q;
}

/* Blocks of at most cap that cut n into as few blocks as cap does, as even as
 * the kernels allow.  The size is rounded up to a multiple of q (the height or
 * width of the main kernel, so it covers the block's interior); when that
 * leaves a last block under half the others (500 rows in blocks of 24k: 120 x 4
 * + 20), to a multiple of q2 instead (the vector length along this dimension,
 * or 1), which keeps the vector lanes full at the cost of a narrower tail
 * kernel inside each block. */
static int64_t even_blocks(int64_t n, int64_t cap, int64_t q, int64_t q2)
{
    if (cap >= n) return n;
    int64_t nb = (n + cap - 1) / cap;
    int64_t even = (n + nb - 1) / nb;
    int64_t up = (even + q - 1) / q * q;
    if (up > cap) up = cap;
    if (2 * (n - (nb - 1) * up) < up) {
        int64_t up2 = (even + q2 - 1) / q2 * q2;
        if (up2 <= cap) up = up2;
    }
    return up;
}

/* Sort items (and their steps or blocks) by thread, stably, and record offsets. */
static int group_by_thread(at_plan *p, at_item *it, int64_t n, size_t elem, void *arr)
{
    int T = p->info.threads;
    p->thread_start = calloc((size_t)T + 1, sizeof *p->thread_start);
    char *tmp = malloc(elem * (size_t)(n ? n : 1));
    if (!p->thread_start || !tmp) {
        free(tmp);
        return AT_ENOMEM;
    }
    for (int64_t k = 0; k < n; k++) p->thread_start[it[k].thread + 1]++;
    for (int t = 0; t < T; t++) p->thread_start[t + 1] += p->thread_start[t];
    int64_t *fill = calloc((size_t)T, sizeof *fill);
    if (!fill) {
        free(tmp);
        return AT_ENOMEM;
    }
    for (int64_t k = 0; k < n; k++) {
        int t = it[k].thread;
        memcpy(tmp + elem * (size_t)(p->thread_start[t] + fill[t]++), (char *)arr + elem * (size_t)k,
               elem);
    }
    memcpy(arr, tmp, elem * (size_t)n);
    free(fill);
    free(tmp);
    return AT_OK;
}

/* A no-pack tiling of the whole C: its grid, steps and predicted seconds. */
typedef struct {
    at_grid g;
    at_steps st;
    double seconds;
    int built;
} at_nopack;

static void nopack_free(at_nopack *o)
{
    if (o->built) at__grid_free(&o->g);
    free(o->st.v);
    memset(o, 0, sizeof *o);
}

/* The main kernel of products read in place, measured at install
 * (at_tune_params.place_kernel_*), as the tiler's favoured kernel; -1 for none.
 * The kernels' figures time each one alone, its A in a sliver m_r wide and its
 * B streaming, and rank the kernels one vector tall first, but read in place
 * those run behind the taller ones: tiling f32 128 x 120 x 128 with one kernel
 * on a 2-vCPU Xeon (AVX-512), 16x5 ran at 116 GFLOPS and 64x5, 48x8 and 32x8
 * at 174-175, and 96 x 10 x 1000 at 124 against 178; the figures had 16x5 at
 * 165 and 64x5 at 139 (K = 256), so plans took 16x5.  The install times a few
 * candidates on such products (autotune/crossovers.py, PLACE_SHAPES), and the
 * kernel is taken where they reach: from this depth, up to the flops of the
 * largest.  Beyond, B streams from L2 as in the figures, and they choose: with
 * 64x5 favoured, f32 160^3 and 256^3 ran 0.91-0.96x the figures' plans, while
 * 128^3 ran 1.86x, 128 x 64 x 128 1.75x and 300 x 20 x 300 1.19x. */
#define AT_PLACE_FAVOUR_K 64
#define AT_PLACE_FAVOUR_FLOPS (2.0 * 128 * 128 * 128)

static int place_favour(int dtype, int ta, int tb, int64_t m, int64_t n, int64_t K)
{
    const int32_t *by_trans[4] = {at__tp->place_kernel_nn, at__tp->place_kernel_nt,
                                  at__tp->place_kernel_tn, at__tp->place_kernel_tt};
    int32_t v = by_trans[ta * 2 + tb][dtype];
    if (K < AT_PLACE_FAVOUR_K || 2.0 * (double)m * (double)n * (double)K > AT_PLACE_FAVOUR_FLOPS ||
        v <= 0 || v > at_kernel_table_count)
        return -1;
    return at__kernel_for(v - 1, dtype, ta, tb) ? v - 1 : -1;
}

static int nopack_tile(at_nopack *o, int dtype, int ta, int tb, int64_t m, int64_t n, int64_t K,
                       int64_t lda, int64_t ldb)
{
    memset(o, 0, sizeof *o);
    int rc = at__grid_build(&o->g, dtype, ta, tb, K, lda, ldb, place_favour(dtype, ta, tb, m, n, K));
    if (rc) return rc;
    o->built = 1;
    return at__tile_block(&o->g, m, n, &o->st, &o->seconds);
}

/* A few rows of an untransposed op(A) leave the families read in place short of
 * lanes: nn vectorises along M and, of 2 rows, gathers or masks (f32 2 x 256 x
 * 256, one thread, 2-vCPU Zen 4: 30 GFLOPS against OpenBLAS's 97); nt the same.
 * Copied into rows along K (its M x K elements, a 1/N share of the product's
 * loads), op(A) reads in the transposed format: the tn kernels' dot products
 * along K, or with op(B) = B^T the tt kernels' rows of B against broadcasts of
 * A, which fill their vectors at any M.  The copy is taken when the tiler
 * predicts it and the other family's tiling faster than the tiling in place;
 * each share copies the whole of A (a share is a range of columns when M is
 * this small), on its stack or, past AT_COPY_A_STACK (exec_t.h), in a buffer of
 * its call. */
#define AT_COPY_A_ROWS 16
#define AT_COPY_A_BYTES ((int64_t)1 << 20)
#define AT_COPY_A_CALL_SECONDS 40e-9 /* a buffer and the walk over K, besides the elements */

/* Rows of the copy start on 64-byte lines, and a row of a multiple of 4 KiB gets
 * another line: rows a page apart fall in one L1 set, and a kernel reads up to
 * 16 of them at once. */
static int64_t copy_a_ld(int64_t K, int64_t elem)
{
    int64_t line = 64 / elem, ld = (K + line - 1) / line * line;
    if ((ld * elem) % 4096 == 0) ld += line;
    return ld;
}

static double copy_a_seconds(const at_plan *p, int dtype)
{
    return (double)p->M * (double)p->K * at__pack_seconds(dtype) + AT_COPY_A_CALL_SECONDS;
}

/* The split of n items over T threads, kept only where it pays: its busiest
 * share plus the fixed cost of a parallel region (thread_seconds, measured at
 * install) below `single`, one thread's time.  thread_flops alone let 48^3 f32
 * split on a 2-vCPU Xeon VM, 1.72 us a call against 1.34 on one thread: the
 * region there costs about 1 us, more than the split saves.  Returns the
 * predicted seconds (the region's cost included) and sets *T to the threads
 * the plan uses. */
static double split_if_it_pays(at_plan *p, at_item *it, int64_t n, int64_t m_step, int64_t n_step,
                               int *T, double single)
{
    int dt = p->info.dtype;
    if (*T <= 1) return single;
    double load = at__split_threads(it, n, p->M, p->N, m_step, n_step, *T, at__tp->grid[dt], p->ldc,
                                    dt == AT_F32 ? 4 : 8);
    if (!isfinite(load)) return load;
    if (load + at__tp->thread_seconds < single) return load + at__tp->thread_seconds;
    for (int64_t k = 0; k < n; k++) it[k].thread = 0;
    *T = 1;
    return single;
}

/* Whether the A of p, read in place, outgrows the last-level cache between calls
 * (place_stream_bytes, measured at install): it then comes from memory, read by as
 * many concurrent streams as a slice has columns. */
static int a_from_memory(const at_plan *p, int dtype)
{
    double bytes = (double)p->M * (double)p->K * (dtype == AT_F32 ? 4 : 8);
    return bytes >= at__tp->place_stream_bytes[dtype];
}

/* A no-pack plan of a few columns of C reading A in place walks K in slices
 * (cost.c, at__place_k_slice), reported as its blk_k: x @ W of a row-major caller
 * with a few rows, whose slivers of A are each read by one or two steps.  Not a
 * wider C: its steps re-read each sliver one after another anyway, and C, read and
 * written once a slice, is as wide as they are (f32 256^3 in place ran 0.86x in
 * slices of 32 on Zen 1); but any width where A comes from memory, whose walk over
 * all of K is as many streams as K is deep (cost.c): rows of C of up to 128 bytes stay
 * in place there (takes_packed_path), and wider ones below the packing crossover (Zen 1, one
 * thread, GFLOPS over all of K / in slices: f32 1500x32x1500 12.2 / 28.8, 1500x96x1500
 * 12.7 / 30.8; fp64 1024x64x1024 5.9 / 13.9).  Not a copied A
 * (rows along K, no walk across columns), not a lone step (no neighbour re-reads
 * its lines; the entries call it themselves), not an SME2 plan (its executor walks
 * its own steps).  Decided from the shape and the steps alone, never from where
 * the operands lie, so the bits of a product do not depend on its addresses.
 *
 * Where A comes from memory and most steps' slivers are whole lines (an f32 16-row
 * or fp64 8-row kernel), the walk also prefetches the lines two lines below
 * each band of such slivers before the band's first step.  That walk reads one line
 * of each of a slice's columns a band, and the hardware prefetchers fall behind:
 * Zen 1, one thread, GFLOPS without / with: f32 2000x16x2000 26.2 / 33.5,
 * 2048x16x2048 25.3 / 30.7, 2000x5x2000 20.7 / 28.5, 2000x11x2000 28.2 / 32.0; fp64
 * 2000x5x2000 11.1 / 14.7, 1500x5x1500 11.9 / 14.5; with A 16 bytes past a line
 * 1.15-1.42x.  Not slivers of a line and a half (f32 24 rows, fp64 12), whose lines
 * the prefetchers follow (fp64 1024x4x1024 0.90x, f32 2000x9x2000 0.95x, the
 * search for bands included), nor an A in cache (f32 700x5x1400 0.85x, fp64
 * 512x5x512 0.93x).  A prefetch changes no result. */
static void slice_place_walks(at_plan *p, int dtype)
{
    int from_memory = a_from_memory(p, dtype), bpe = dtype == AT_F32 ? 4 : 8;
    if (p->info.path != 0 || p->copy_a || p->ta || p->streaming || p->nsteps < 2 ||
        (!from_memory && p->N > AT_PLACE_SLICE_MAX_N))
        return;
    int tallest = 1;
    int64_t whole_lines = 0;
    for (int64_t s = 0; s < p->nsteps; s++) {
        if (p->steps[s].mb > tallest) tallest = p->steps[s].mb;
        whole_lines += p->steps[s].mb * bpe % AT_L1_LINE == 0;
    }
    p->place_kc = at__place_k_slice(p->K, tallest, (int)p->N, p->lda, bpe, from_memory);
    p->info.blk_k = p->place_kc;
    if (p->place_kc && from_memory && 2 * whole_lines > p->nsteps)
        p->place_prefetch = p->info.prefetch_rows = AT_PLACE_PREFETCH_LINES * AT_L1_LINE / bpe;
}

/* `pre`: the tiling choose_vector_flags already made for the plan's own flags
 * and leading dimensions, or one not built. */
static int build_nopack(at_plan *p, int T, at_nopack *pre)
{
    int rc = AT_OK;
    if (!pre->built)
        rc = nopack_tile(pre, p->info.dtype, p->ta, p->tb, p->M, p->N, p->K, p->lda, p->ldb);
    if (rc) return rc;
    const at_grid *g = &pre->g;
    p->ktrans_a = p->ta;
    p->ktrans_b = p->tb;
    p->steps = pre->st.v;
    p->nsteps = pre->st.n;
    pre->st.v = NULL;
    double memops = 0;
    at_item *it = malloc(sizeof *it * (size_t)(p->nsteps ? p->nsteps : 1));
    if (!it) return AT_ENOMEM;
    for (int64_t k = 0; k < p->nsteps; k++) {
        const at_step *s = &p->steps[k];
        it[k].i0 = s->i0;
        it[k].j0 = s->j0;
        it[k].mb = s->mb;
        it[k].nb = s->nb;
        it[k].sec = g->sec[(size_t)(s->mb - 1) * g->W + (s->nb - 1)];
        it[k].thread = 0;
        memops += (double)(s->mb + s->nb) * (double)p->K;
    }
    if (T > p->nsteps) T = (int)(p->nsteps ? p->nsteps : 1);
    double load = split_if_it_pays(p, it, p->nsteps, p->nsteps ? p->steps[0].mb : 1,
                                   p->nsteps ? p->steps[0].nb : 1, &T, pre->seconds);
    p->info.threads = T;
    if (!isfinite(load)) {
        free(it);
        return AT_ENOMEM;
    }
    for (int64_t k = 0; k < p->nsteps; k++) p->steps[k].thread = it[k].thread;
    rc = group_by_thread(p, it, p->nsteps, sizeof *p->steps, p->steps);
    free(it);
    p->info.predicted_seconds = load + (p->copy_a ? copy_a_seconds(p, p->info.dtype) : 0);
    p->info.memops = memops + 2.0 * (double)p->M * (double)p->N;
    p->info.nsteps = p->nsteps;
    p->info.path = 0;
    p->info.a_copied = p->copy_a;
    for (int64_t k = 0; p->copy_a && k < p->nsteps; k++) p->steps[k].pack = AT_PACK_A;
    return rc;
}

/* Steps by the column of C they start at, then the row. */
static int by_column(const void *x, const void *y)
{
    const at_step *a = x, *b = y;
    if (a->j0 != b->j0) return a->j0 < b->j0 ? -1 : 1;
    return (a->i0 > b->i0) - (a->i0 < b->i0);
}

/* A no-pack plan walks C band by band, each band of rows across all of N, so each
 * band reads all of B.  Where B comes from memory and A is small beside it (a few
 * rows of C, many columns), every band reads B from memory again, a thin last band
 * (one row of 17) as long as a tall one.  Each thread's steps then go column by
 * column instead: the bands meet B's columns one after another, while those are in
 * cache, and re-read A, which is small.  Zen 1, one thread, GFLOPS band by band /
 * column by column: fp64 17x700x2000 16.3 / 18.6 (BLIS 19.0), 9x1000x1000 14.7 / 18.8,
 * 33x2000x500 18.1 / 20.8; 24x1000x1000 21.0 / 20.5, 40x600x2000 18.4 / 18.4, f32
 * 17x700x2000 36.8 / 37.3, 20x800x1500 43.8 / 41.7.  Not a walk in slices of K (its
 * own order), nor a copied A.  Steps write disjoint blocks of C over all of K, so the
 * order changes no bit. */
static void order_by_columns(at_plan *p, int dtype)
{
    double bpe = dtype == AT_F32 ? 4 : 8, b_bytes = (double)p->K * (double)p->N * bpe;
    if (p->info.path != 0 || p->copy_a || p->place_kc || p->streaming || p->nsteps < 2 ||
        b_bytes < at__tp->place_stream_bytes[dtype] ||
        (double)p->M * AT_ORDER_BY_COLUMNS_RATIO > (double)p->N)
        return;
    for (int t = 0; t < p->info.threads; t++)
        qsort(p->steps + p->thread_start[t], (size_t)(p->thread_start[t + 1] - p->thread_start[t]),
              sizeof *p->steps, by_column);
    p->info.column_order = 1;
}

/* The direct list of a no-pack plan of a few steps (at_internal.h): each step's
 * kernel and operand offsets, so a call runs its kernels and nothing else.  Only
 * kernels that read A and B in place and are ordinary functions: a packed-format
 * kernel (pack_a_ld, pack_b_ld: SME2's pa/pb/papb and hybrids) reads panels only
 * the executor packs, and an SME2 kernel (fn_s) runs in the executor's streaming
 * region.  Not a copied A (the executor copies it first), nor a walk in slices of
 * K.  Decided here, from the kernels' records, so every translation unit of the
 * runtime agrees. */
static int choose_direct(at_plan *p)
{
    if (p->info.path != 0 || p->copy_a || p->streaming || p->place_kc || p->nsteps < 1 ||
        p->nsteps > AT_DIRECT_STEPS)
        return AT_OK;
    for (int64_t s = 0; s < p->nsteps; s++) {
        if (p->steps[s].kernel < 0) return AT_OK;
        const at_kernel *k = &at_kernel_table[p->steps[s].kernel].kernel;
        if (k->pack_a_ld || k->pack_b_ld || k->fn_s) return AT_OK;
    }
    p->direct = malloc((size_t)p->nsteps * sizeof *p->direct);
    if (!p->direct) return AT_ENOMEM;
    for (int64_t s = 0; s < p->nsteps; s++) {
        const at_step *x = &p->steps[s];
        p->direct[s] = (at_direct){at_kernel_table[x->kernel].kernel.fn,
                                   p->ta ? x->i0 * p->lda : x->i0,
                                   p->tb ? x->j0 : x->j0 * p->ldb, x->i0 + x->j0 * p->ldc};
    }
    p->ndirect = (int32_t)p->nsteps;
    p->single_steps = p->info.threads == 1 ? p->ndirect : 0;
    p->info.direct_steps = p->single_steps;
    if (p->single_steps == 1) p->single = p->direct[0].fn;
    return AT_OK;
}

static int build_packed(at_plan *p, int T)
{
    int dt = p->info.dtype;
    /* The packed panels may take any format: use the family that runs fastest,
     * the operands' own first.  A panel in its source's format is a run of
     * column (row) copies; any other is a transpose, element by element (B's
     * took 5 % of a 1024^3 fp32 product in the nt family against 1 % for
     * copies), so another family must be 2 % faster to be chosen. */
    int fa = 0, fb = 1, h = 1, w = 1;
    double best = -1;
    int order[5][2] = {{p->ta, p->tb}, {0, 1}, {0, 0}, {1, 1}, {1, 0}};
    at_family fam[4];
    families(dt, at__tp->blk_k[dt], fam);
    /* A family whose kernels read panels of their own (SME2's formats other than
     * nt) would pack each step's operand again from the block's panels: the
     * families that read the block's panels in place go first, whatever their
     * order above. */
    int in_place = 0;
    for (int f = 0; f < 4; f++) in_place |= fam[f].count && !fam[f].repacks;
    for (int o = 0; o < 5; o++) {
        const at_family *c = &fam[order[o][0] * 2 + order[o][1]];
        if (in_place && c->repacks) continue;
        if (c->count && c->rate > best * 1.02) {
            best = c->rate;
            fa = order[o][0];
            fb = order[o][1];
            h = c->h > 0 ? c->h : 1;
            w = c->w > 0 ? c->w : 1;
        }
    }
    /* A main kernel measured at install (at_tune_params.pack_kernel) takes the place
     * of the figures' choice: the figures of one install took fp32 NT 8x13, which
     * ran 1024^3 and 2048^3 1.11x and 1.21x slower than NT 16x5 in plans with the
     * same runtime and parameters (2-vCPU Zen 3). */
    int favour = -1, pk = at__tp->pack_kernel[dt];
    if (pk > 0 && pk <= at_kernel_table_count) {
        const at_kernel *k = &at_kernel_table[pk - 1].kernel;
        if (k->dtype == dt && at__kernel_for(pk - 1, dt, k->trans_a, k->trans_b) &&
            !(in_place && fam[k->trans_a * 2 + k->trans_b].repacks)) {
            favour = pk - 1;
            fa = k->trans_a;
            fb = k->trans_b;
            h = k->mr;
            w = k->nr;
        }
    }
    p->ktrans_a = fa;
    p->ktrans_b = fb;
    int64_t bm = round_down(at__tp->blk_m[dt] > 0 ? at__tp->blk_m[dt] : at_params_builtin.blk_m[dt], h);
    int64_t bn = round_down(at__tp->blk_n[dt] > 0 ? at__tp->blk_n[dt] : at_params_builtin.blk_n[dt], w);
    int64_t bk = at__tp->blk_k[dt] > 0 ? at__tp->blk_k[dt] : at_params_builtin.blk_k[dt];
    /* The same number of blocks, as even as the kernel sizes allow: 256 rows in
     * blocks of at most 120 become 96 + 96 + 64, not 120 + 120 + 16.  Blocks are
     * the unit of the thread split, and a sliver block is a sliver of work that
     * no assignment can balance; the caps stay caps (the caches' limits). */
    int lanes = (at_facts.simd_bytes > 0 ? at_facts.simd_bytes : 16) / (dt == AT_F64 ? 8 : 4);
    if (lanes < 1) lanes = 1;
    /* Blocks are also the unit of the thread split: fewer blocks than threads
     * leave threads idle (f32 128^3 to 256^3 in blocks of 128 x 256, two threads
     * ran at one thread's speed; cut for both, nn 1.4-2x and tn 1.4-5x faster, and
     * on one thread nn within 2 %, tn up to 7 % slower; 2-vCPU Zen 5).  The side with more
     * kernel widths to spare is cut until every core of the host could have a
     * block: the host's, not the plan's thread count, which would change the
     * tiling and with it the bits (docs/runtime.md, "Reproducible by default"). */
    int64_t cores = at__host_cpus(), nbm0 = (p->M + bm - 1) / bm, nbn0 = (p->N + bn - 1) / bn;
    if (nbm0 * nbn0 < cores) {
        if (p->N / w >= p->M / h) {
            int64_t want = (cores + nbm0 - 1) / nbm0, cut = (p->N + want - 1) / want;
            bn = (cut + w - 1) / w * w;
        } else {
            int64_t want = (cores + nbn0 - 1) / nbn0, cut = (p->M + want - 1) / want;
            bm = (cut + h - 1) / h * h;
        }
    }
    /* NN and NT kernels vectorise along M, TT along N, TN along K (docs/kernels.md). */
    bm = even_blocks(p->M, bm, h, fa ? 1 : lanes);
    bn = even_blocks(p->N, bn, w, fa && fb ? lanes : 1);
    /* As few K slices as the cap allows, as even as they come: 1024 in slices of
     * at most 320 is four of 256, not 320 x 3 + 64, whose last slice reads and
     * writes all of C for a fifth of a slice's work.  A multiple of 8 (whole vectors
     * along K for the kernels that vectorise it) where that stays within the cap
     * and shortens the last slice by at most 8 per other slice. */
    /* The cap is soft by a quarter, as BLIS's maximum blocksizes are: a K up to
     * 5/4 of it stays one slice rather than two of under 2/3, which read and write
     * all of C twice and call every kernel twice for half the depth (f64 256^3 in
     * slices of at most 208, 2-vCPU Zen 1: one slice of 256 ran 3 % faster on one
     * thread and 5 % on two; 300^3 to 600^3 within 2 % either way). */
    if (bk < p->K && 4 * p->K <= 5 * bk) bk = p->K;
    if (bk > p->K) bk = p->K;
    if (bk < p->K) {
        int64_t slices = (p->K + bk - 1) / bk, even = (p->K + slices - 1) / slices;
        int64_t even8 = (even + 7) / 8 * 8;
        bk = even8 <= bk && p->K - (slices - 1) * even8 >= even8 - 8 * (slices - 1) ? even8 : even;
    }
    /* Cap: at_step stores block sizes in 32 bits. */
    if (bm > (1 << 30)) bm = 1 << 30;
    if (bn > (1 << 30)) bn = 1 << 30;
    p->info.blk_m = bm;
    p->info.blk_n = bn;
    p->info.blk_k = bk;

    at_grid g;
    int rc = at__grid_build(&g, dt, fa, fb, bk, 0, 0, favour);
    if (rc) return rc;
    /* One tiler for the blocks: those of a column of blocks share their width,
     * and with it the covers of the grid's rows. */
    at_tiler *tiler = at__tiler_new(&g, 0);
    int64_t nbm = (p->M + bm - 1) / bm, nbn = (p->N + bn - 1) / bn;
    p->nblocks = nbm * nbn;
    p->blocks = malloc(sizeof *p->blocks * (size_t)p->nblocks);
    at_item *it = malloc(sizeof *it * (size_t)p->nblocks);
    at_steps st = {0};
    double tsec[4] = {0};
    if (!p->blocks || !it || !tiler) {
        rc = AT_ENOMEM;
        goto done;
    }
    double memops = 0;
    int64_t k = 0, expanded = 0;
    for (int64_t jb = 0; jb < nbn; jb++)
        for (int64_t ib = 0; ib < nbm; ib++, k++) {
            at_block *b = &p->blocks[k];
            b->i0 = ib * bm;
            b->j0 = jb * bn;
            b->mb = (int32_t)(p->M - b->i0 < bm ? p->M - b->i0 : bm);
            b->nb = (int32_t)(p->N - b->j0 < bn ? p->N - b->j0 : bn);
            b->thread = 0;
            int t;
            for (t = 0; t < p->ntilings; t++)
                if (p->tilings[t].mb == b->mb && p->tilings[t].nb == b->nb) break;
            if (t == p->ntilings) {
                p->tilings[t].mb = b->mb;
                p->tilings[t].nb = b->nb;
                p->tilings[t].first = st.n;
                rc = at__tiler_tile(tiler, b->mb, b->nb, &st, &tsec[t]);
                if (rc) goto done;
                p->tilings[t].count = st.n - p->tilings[t].first;
                p->ntilings++;
            }
            b->tiling = t;
            double packed = (double)b->mb * (double)p->K + (double)b->nb * (double)p->K;
            it[k].i0 = b->i0;
            it[k].j0 = b->j0;
            it[k].mb = b->mb;
            it[k].nb = b->nb;
            it[k].thread = 0;
            it[k].sec = tsec[t] * (double)p->K / (double)bk + packed * at__pack_seconds(dt);
            for (int64_t s = 0; s < p->tilings[t].count; s++) {
                const at_step *m = &st.v[p->tilings[t].first + s];
                memops += (double)(m->mb + m->nb) * (double)p->K;
            }
            expanded += p->tilings[t].count;
        }
    p->steps = st.v;
    p->nsteps = st.n;
    st.v = NULL;
    if (T > p->nblocks) T = (int)p->nblocks;
    double single = 0;
    for (int64_t q = 0; q < p->nblocks; q++) single += it[q].sec;
    double load = split_if_it_pays(p, it, p->nblocks, bm, bn, &T, single);
    p->info.threads = T;
    if (!isfinite(load)) {
        rc = AT_ENOMEM;
        goto done;
    }
    for (int64_t q = 0; q < p->nblocks; q++) p->blocks[q].thread = it[q].thread;
    rc = group_by_thread(p, it, p->nblocks, sizeof *p->blocks, p->blocks);
    p->info.predicted_seconds = load;
    p->info.memops = memops + 2.0 * (double)p->M * (double)p->N;
    p->info.nsteps = expanded;
    p->info.path = 1;
done:
    free(it);
    free(st.v);
    at__tiler_free(tiler);
    at__grid_free(&g);
    return rc;
}

/* The no-pack tiling of an m x n C in family (ta, tb); none built (o->built == 0)
 * when the family has no kernels. */
static int nopack_family(at_nopack *o, int dtype, int ta, int tb, int64_t m, int64_t n, int64_t K,
                         int64_t lda, int64_t ldb)
{
    memset(o, 0, sizeof *o);
    at_family fam[4];
    families(dtype, -1, fam);
    if (!fam[ta * 2 + tb].count) return AT_OK;
    return nopack_tile(o, dtype, ta, tb, m, n, K, lda, ldb);
}

/* The leading dimension of a vector operand read with a flipped flag: 1 when the
 * new format walks K along the leading dimension (op(A) untransposed, op(B)
 * transposed: element p at X[p * ld]); otherwise the walk is along the
 * contiguous dimension, X[p + 0 * ld], and K keeps the stored plan consistent
 * with a K-long column. */
static int64_t vector_ld(int64_t ld, int flipped, int walks_ld, int64_t K)
{
    if (!flipped) return ld;
    return walks_ld ? 1 : (K > 0 ? K : 1);
}

/* A 1 x K op(A) is a vector: the no-transpose format reads op(A)[0,p] at A[p*lda],
 * the transposed one at A[p].  The two agree when lda == 1 (NN with M == 1 in
 * column-major, where lda >= M allows it) and a transposed vector can always be
 * read as an untransposed one with lda = 1.  Likewise op(B) with N == 1.  Such a
 * free flag picks the kernel family: for 1 x N with B's columns contiguous the
 * TN kernels run dot products along K in the vector lanes, where the NN family
 * (vectorised along M, of which there is one row) leaves a portable kernel.  Of
 * the equivalent families the one the tiler predicts fastest is kept, so a table
 * without the flipped family, or where it measures slower, plans as before. */
static int choose_vector_flags(at_plan *p, int dtype, at_nopack *kept)
{
    memset(kept, 0, sizeof *kept);
    int free_a = p->M == 1 && (p->ta == 1 || p->lda == 1);
    int free_b = p->N == 1 && (p->tb == 0 || p->ldb == 1);
    if (!free_a && !free_b) return AT_OK;
    int best_a = p->ta, best_b = p->tb;
    double best = INFINITY;
    for (int fa = 0; fa <= free_a; fa++)
        for (int fb = 0; fb <= free_b; fb++) {
            int ta = fa ? !p->ta : p->ta, tb = fb ? !p->tb : p->tb;
            at_nopack o;
            int rc = nopack_family(&o, dtype, ta, tb, p->M, p->N, p->K, vector_ld(p->lda, fa, !ta, p->K),
                                   vector_ld(p->ldb, fb, tb, p->K));
            if (rc) {
                nopack_free(&o);
                return rc;
            }
            /* The caller's own flags win ties: they are tried first.  The winner's
             * tiling is kept: a no-pack plan is that tiling (its grid was built
             * for the same flags and leading dimensions). */
            if (o.built && o.seconds < best * (1 - 1e-9)) {
                best = o.seconds;
                best_a = ta;
                best_b = tb;
                nopack_free(kept);
                *kept = o;
            } else {
                nopack_free(&o);
            }
        }
    p->lda = vector_ld(p->lda, best_a != p->ta, !best_a, p->K);
    p->ldb = vector_ld(p->ldb, best_b != p->tb, best_b, p->K);
    p->ta = best_a;
    p->tb = best_b;
    return AT_OK;
}

static int choose_copy_a(at_plan *p, int dtype, at_nopack *kept)
{
    int64_t elem = dtype == AT_F32 ? 4 : 8, ld = copy_a_ld(p->K, elem);
    if (p->ta || p->M > AT_COPY_A_ROWS || p->M * ld * elem > AT_COPY_A_BYTES) return AT_OK;
    int rc = AT_OK;
    if (!kept->built) {
        rc = nopack_family(kept, dtype, p->ta, p->tb, p->M, p->N, p->K, p->lda, p->ldb);
        if (rc) return rc;
    }
    at_nopack o;
    rc = nopack_family(&o, dtype, 1, p->tb, p->M, p->N, p->K, ld, p->ldb);
    if (rc) {
        nopack_free(&o);
        return rc;
    }
    /* Priced as on one thread whatever the plan's threads: the kernels, and so the
     * bits of C, stay those of any thread count.  (With threads each share copies
     * all of A, so a copy that barely pays on one thread may not on several.) */
    if (o.built && (!kept->built || o.seconds + copy_a_seconds(p, dtype) < kept->seconds)) {
        nopack_free(kept);
        *kept = o;
        p->copy_a = 1;
        p->src_lda = p->lda;
        p->lda = ld;
        p->ta = 1;
    } else {
        nopack_free(&o);
    }
    return AT_OK;
}

/* Whether plans of dtype may use SME2 kernels on this CPU: their executor walks its
 * own steps and takes no K slices, and nothing has timed their in-place plans against
 * packed ones where A comes from memory (takes_packed_path). */
static int has_sme2_kernels(int dtype)
{
    for (int i = 0; i < at_kernel_table_count; i++)
        if (at_kernel_table[i].kernel.fn_s && at_kernel_table[i].kernel.dtype == dtype && at__kernel_usable(i))
            return 1;
    return 0;
}

/* Whether the column-major problem of p takes the packed path.  Without a
 * kernel of its own transposition it must: the panels are packed into the form
 * of the kernels there are.  Otherwise from pack_flops on, the crossover the
 * install measured on squares of side s (2 s^3 flops), and only when A holds
 * more than such a square's s^2 elements.  In place, a plan keeps each band's
 * sliver of A while B's columns stream past it, so a product whose A is small
 * reads B a few times from cache and has nothing to gain from the copy, however
 * many flops it has (f32, one thread, 2-core Zen 3 VM: 24 x 2500 x 48 ran at
 * 57 GFLOPS in place and 36 packed, 64 x 100000 x 64 at 60 and 48); with A
 * large, packing wins from the same flops (100000 x 64 x 64: 39 packed, 34 in
 * place; 64 x 4000 x 4000: 53 and 47). */
static int takes_packed_path(const at_plan *p, int dtype, double flops)
{
    at_family fam[4];
    families(dtype, -1, fam);
    if (!(fam[0].count || fam[1].count || fam[2].count || fam[3].count)) return 0;
    if (!fam[p->ta * 2 + p->tb].count) return 1;
    /* A few columns of C use each element of an untransposed A as many times: a copy
     * of A costs about what the product does, and in place it walks K in slices
     * (slice_place_walks).  The crossover, measured on squares, does not hold there:
     * on Zen 1 it packed fp64 x @ W past 152^3 flops, 2x2048 @ 2048x2048 at 0.74x and
     * 1x4096 @ 4096x1024 at 0.36x numpy's speed. */
    if (!p->ta && p->N <= AT_PLACE_SLICE_MAX_N) return 0;
    /* Nor rows of C of up to 128 bytes (f32 32 columns, fp64 16) over an A from
     * memory: a packed block of it serves one panel of B and is copied through the
     * caches for it, where in place each slice of A is read once, in short slices
     * with the band after next prefetched (slice_place_walks).  Zen 1, packed / in
     * place, GFLOPS: fp64 one thread 1024x16x1024 12.8 / 15.2, 1500x12x1500 10.9 /
     * 14.4, 4000x16x700 12.2 / 15.6; f32 one thread 2000x17x2000 23.9 / 28.4,
     * 2000x24x2000 25.1 / 36.1, 2000x32x2000 31.4 / 34.6, 4000x24x1000 24.2 / 33.5,
     * 500x24x8000 27.0 / 33.9, 2048x32x2048 27.8 / 27.3; two threads 2000x24x2000
     * 45.7 / 58.7, 3000x20x3000 43.3 / 56.9, 2048x32x2048 54.6 / 57.8.  fp64 past 16
     * columns was mixed, in place 0.97-1.09x (1500x17x1500 13.2 / 14.4, 1500x32x1500
     * 15.9 / 15.4, 2000x24x1000 14.0 / 13.5), and past 32 f32 columns a cached C's
     * traffic grows. */
    int bpe = dtype == AT_F32 ? (int)sizeof(float) : (int)sizeof(double);
    if (!p->ta && p->N * bpe <= AT_PLACE_STREAM_MAX_ROW_BYTES && a_from_memory(p, dtype) &&
        !has_sme2_kernels(dtype))
        return 0;
    /* Nor up to 32 columns of C over a transposed A.  The crossovers are measured on
     * squares, where tn's packs from a few dozen rows (dot products along K lose to a
     * packed A there); but a copy of A^T is a transpose of all of A for a product that
     * uses each element N times.  In place, each row of op(A) is a contiguous column of A
     * and the tn/tt kernels read it as a stream.  Zen 1, one thread, packed / in place,
     * GFLOPS: f32 tn 2048x1x2048 1.8 / 9.3 (BLIS 9.0), 2048x4x2048 6.7 / 18.7 (14.7),
     * 2048x16x2048 17.0 / 25.3 (22.9), 2048x32x2048 23.1 / 26.4, 512x32x512 25.1 / 30.7,
     * 256x8x256 13.4 / 27.1; fp64 tn 2048x4x2048 3.5 / 12.1, 1024x32x1024 11.7 / 16.5;
     * f32 tt 2048x32x2048 24.1 / 35.9; fp64 tt 1024x16x1024 10.4 / 17.5.  Past 32 they
     * tie (f32 tn 2048x48x2048 0.96x the time packed) and then packing wins (64: 1.08x).
     * Not where SME2 kernels may run the plan: nobody has timed their in-place plans. */
    if (p->ta && p->N <= AT_PLACE_TRANS_MAX_N && !has_sme2_kernels(dtype)) return 0;
    double cross = at__tp->pack_flops[dtype], a = (double)p->M * (double)p->K;
    /* In place, op(A) = A^T meets B as dot products along K (the tn kernels), the
     * slowest way to read a large A: measured on a 2-vCPU Zen 5, f32 one thread,
     * packed took 0.44x of in place's time at tn 512^3 and as long at nn 512^3.
     * Its crossover is measured on its own, and never later than the others'. */
    if (p->ta && !p->tb && at__tp->pack_flops_tn[dtype] < cross) cross = at__tp->pack_flops_tn[dtype];
    /* A of s^2 elements or more: (M K)^3 >= s^6 = (cross / 2)^2, without a root. */
    return flops >= cross && a * a * a >= (cross / 2.0) * (cross / 2.0);
}

/* ---- chunks: plans whose size does not grow with M x N ------------------------
 * A no-pack plan lists a step per kernel call and a packed plan a record per
 * block, so a tall, thin C (2^33 x 1) would need a plan of gigabytes (and as
 * long to make) for a product of a few flops per row.  Past the bounds below C
 * is cut into chunks, each computed by the plan of its shape (at most four
 * shapes), and the plan holds those.  A chunk is a product of its own: its
 * elements are computed as the whole plan's would be (one kernel per element
 * and K slice, in slice order), so results stay independent of the thread count. */
#define AT_CHUNK_AREA ((int64_t)1 << 20) /* no-pack: elements of C per chunk (~2 MB of steps) */
#define AT_CHUNK_BLOCKS 128              /* packed: blocks along each side of a chunk */

static at_plan *plan_build(int dtype, int layout, int trans_a, int trans_b, int64_t M, int64_t N,
                           int64_t K, int64_t lda, int64_t ldb, int64_t ldc, int threads,
                           const at_tune_params *tp);

/* Whether the column-major problem of p needs chunks, and their size. */
static int choose_chunks(const at_plan *p, int dtype, double flops, int64_t *cm, int64_t *cn)
{
    int64_t M = p->M, N = p->N;
    if (takes_packed_path(p, dtype, flops)) {
        int64_t bm = at__tp->blk_m[dtype] > 0 ? at__tp->blk_m[dtype] : at_params_builtin.blk_m[dtype];
        int64_t bn = at__tp->blk_n[dtype] > 0 ? at__tp->blk_n[dtype] : at_params_builtin.blk_n[dtype];
        if (bm < 1) bm = 1;
        if (bn < 1) bn = 1;
        int64_t rows = M / bm + (M % bm != 0), cols = N / bn + (N % bn != 0);
        if ((double)rows * (double)cols <= (double)AT_CHUNK_BLOCKS * AT_CHUNK_BLOCKS) return 0;
        *cm = rows > AT_CHUNK_BLOCKS ? bm * AT_CHUNK_BLOCKS : M;
        *cn = cols > AT_CHUNK_BLOCKS ? bn * AT_CHUNK_BLOCKS : N;
        return 1;
    }
    if ((double)M * (double)N <= (double)AT_CHUNK_AREA) return 0;
    /* Multiples of 64 rows or columns: every kernel height or width the
     * families have divides them or leaves one edge band per chunk. */
    if (N <= 1024) {
        *cn = N;
        *cm = round_down(AT_CHUNK_AREA / N, 64);
    } else if (M <= 1024) {
        *cm = M;
        *cn = round_down(AT_CHUNK_AREA / M, 64);
    } else {
        *cm = *cn = 1024;
    }
    return 1;
}

/* The chunk counts of each shape s (bit 0: the last, shorter row of chunks;
 * bit 1: the last, narrower column). */
static void chunk_counts(const at_plan *p, int64_t count[4], int64_t rows[2], int64_t cols[2])
{
    int64_t nm = p->M / p->chunk_m + (p->M % p->chunk_m != 0);
    int64_t nn = p->N / p->chunk_n + (p->N % p->chunk_n != 0);
    int64_t fm = p->M / p->chunk_m, fn = p->N / p->chunk_n; /* full-size ones */
    rows[0] = p->chunk_m;
    rows[1] = p->M - fm * p->chunk_m;
    cols[0] = p->chunk_n;
    cols[1] = p->N - fn * p->chunk_n;
    count[0] = fm * fn;
    count[1] = (nm - fm) * fn;
    count[2] = fm * (nn - fn);
    count[3] = (nm - fm) * (nn - fn);
}

static int build_chunks(at_plan *p, int threads, int64_t cm, int64_t cn, const at_tune_params *tp)
{
    p->chunk_m = cm;
    p->chunk_n = cn;
    int64_t count[4], rows[2], cols[2];
    chunk_counts(p, count, rows, cols);
    at_plan_info *in = &p->info;
    in->nsteps = 0;
    in->predicted_seconds = in->memops = 0;
    for (int s = 0; s < 4; s++) {
        if (!count[s]) continue;
        /* The chunk's operands are the whole's, offset: the same flags and
         * leading dimensions, as a column-major problem (row-major is swapped
         * into p already). */
        p->sub[s] = plan_build(in->dtype, AT_COL_MAJOR, p->ta, p->tb, rows[s & 1], cols[s >> 1], p->K,
                               p->lda, p->ldb, p->ldc, threads, tp);
        at__tp = tp; /* plan_build set it to the same snapshot; said for the reader */
        if (!p->sub[s]) return AT_ENOMEM;
        const at_plan_info *si = &p->sub[s]->info;
        in->nsteps += count[s] * si->nsteps;
        in->predicted_seconds += (double)count[s] * si->predicted_seconds;
        in->memops += (double)count[s] * si->memops;
    }
    const at_plan *main = p->sub[0] ? p->sub[0] : p->sub[1] ? p->sub[1] : p->sub[2] ? p->sub[2] : p->sub[3];
    in->path = main->info.path;
    in->threads = main->info.threads;
    in->blk_m = main->info.blk_m;
    in->blk_n = main->info.blk_n;
    in->blk_k = main->info.blk_k;
    in->prefetch_rows = main->info.prefetch_rows;
    in->direct_steps = main->info.direct_steps;
    in->column_order = main->info.column_order;
    p->ktrans_a = main->ktrans_a;
    p->ktrans_b = main->ktrans_b;
    return AT_OK;
}

at_plan *at__plan_build(int dtype, int layout, int trans_a, int trans_b, int64_t M, int64_t N,
                        int64_t K, int64_t lda, int64_t ldb, int64_t ldc, int threads)
{
    /* The parameters of this plan and of its chunks' plans: one snapshot. */
    at_tune_params snapshot;
    at__params_snapshot(&snapshot);
    at_plan *p = plan_build(dtype, layout, trans_a, trans_b, M, N, K, lda, ldb, ldc, threads, &snapshot);
    /* The problem as the program asked for it, on the threads it asked for (a chunk's plans
     * are the plan's own business). */
    if (p) at__record_shape(dtype, p->ta, p->tb, p->M, p->N, p->K, threads);
    return p;
}

static at_plan *plan_build(int dtype, int layout, int trans_a, int trans_b, int64_t M, int64_t N,
                           int64_t K, int64_t lda, int64_t ldb, int64_t ldc, int threads,
                           const at_tune_params *tp)
{
    at_plan *p = calloc(1, sizeof *p);
    if (!p) {
        at__set_error("out of memory");
        return NULL;
    }
    at_plan_info *in = &p->info;
    in->dtype = dtype;
    in->layout = layout;
    in->trans_a = trans_a;
    in->trans_b = trans_b;
    in->M = M;
    in->N = N;
    in->K = K;
    in->lda = lda;
    in->ldb = ldb;
    in->ldc = ldc;
    atomic_init(&p->refs, 1);
    at__tp = tp;
    p->thread_flops = at__tp->thread_flops;
    if (layout == AT_ROW_MAJOR) {
        /* C^T = op(B)^T op(A)^T: a row-major matrix is its transpose in column-major. */
        p->M = N;
        p->N = M;
        p->lda = ldb;
        p->ldb = lda;
        p->ta = trans_b;
        p->tb = trans_a;
    } else {
        p->M = M;
        p->N = N;
        p->lda = lda;
        p->ldb = ldb;
        p->ta = trans_a;
        p->tb = trans_b;
    }
    p->K = K;
    p->ldc = ldc;
    if (threads < 1) threads = 1;
    double flops = 2.0 * (double)M * (double)N * (double)K;
    if (flops < at__tp->thread_flops) threads = 1;

    int rc = AT_OK;
    int64_t chunk_m, chunk_n;
    if (M == 0 || N == 0 || K == 0) {
        /* Nothing to tile: the executor only scales C by beta. */
        in->threads = 1;
        p->thread_start = calloc(2, sizeof *p->thread_start);
        if (!p->thread_start) rc = AT_ENOMEM;
    } else if (choose_chunks(p, dtype, flops, &chunk_m, &chunk_n)) {
        rc = build_chunks(p, threads, chunk_m, chunk_n, tp);
    } else {
        at_nopack kept;
        if (!(rc = choose_vector_flags(p, dtype, &kept))) {
            if (takes_packed_path(p, dtype, flops))
                rc = build_packed(p, threads);
            else if (!(rc = choose_copy_a(p, dtype, &kept)))
                rc = build_nopack(p, threads, &kept);
        }
        nopack_free(&kept);
    }
    in->kernel_trans = p->ktrans_a * 2 + p->ktrans_b;
    for (int64_t s = 0; s < p->nsteps && !p->streaming; s++)
        p->streaming = p->steps[s].kernel >= 0 && at_kernel_table[p->steps[s].kernel].kernel.fn_s;
    if (!rc) slice_place_walks(p, dtype);
    if (!rc) order_by_columns(p, dtype);
    if (!rc) rc = choose_direct(p);
    if (rc) {
        at__set_error("out of memory while planning %lld x %lld x %lld", (long long)M,
                      (long long)N, (long long)K);
        at__plan_free(p);
        return NULL;
    }
    p->bytes = sizeof *p + (size_t)p->nsteps * sizeof *p->steps +
               (size_t)p->nblocks * sizeof *p->blocks + (size_t)p->ndirect * sizeof *p->direct +
               (p->thread_start ? ((size_t)p->info.threads + 1) * sizeof *p->thread_start : 0);
    for (int s = 0; s < 4; s++)
        if (p->sub[s]) p->bytes += p->sub[s]->bytes;
    return p;
}

/* ---- public planning API ---------------------------------------------------- */

static int check_args(int dtype, int layout, int ta, int tb, int64_t M, int64_t N, int64_t K,
                      int64_t lda, int64_t ldb, int64_t ldc)
{
    if (dtype != AT_F32 && dtype != AT_F64) {
        at__set_error("dtype must be AT_F32 (0) or AT_F64 (1), got %d", dtype);
        return AT_EINVAL;
    }
    if (layout != AT_COL_MAJOR && layout != AT_ROW_MAJOR) {
        at__set_error("layout must be AT_COL_MAJOR (0) or AT_ROW_MAJOR (1), got %d", layout);
        return AT_EINVAL;
    }
    if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1)) {
        at__set_error("trans_a and trans_b must be 0 or 1");
        return AT_EINVAL;
    }
    if (M < 0 || N < 0 || K < 0) {
        at__set_error("dimensions must be non-negative: M=%lld N=%lld K=%lld", (long long)M,
                      (long long)N, (long long)K);
        return AT_EINVAL;
    }
    int row = layout == AT_ROW_MAJOR;
    /* Rows of each operand as stored (the leading dimension must cover them). */
    int64_t ra = row ? (ta ? K : M) : (ta ? K : M);
    int64_t ca = ta ? M : K;
    int64_t rb = tb ? N : K, cb = tb ? K : N;
    int64_t need_a = row ? ca : ra, need_b = row ? cb : rb, need_c = row ? N : M;
    if (need_a < 1) need_a = 1;
    if (need_b < 1) need_b = 1;
    if (need_c < 1) need_c = 1;
    if (lda < need_a || ldb < need_b || ldc < need_c) {
        at__set_error("leading dimensions too small: lda=%lld (>= %lld), ldb=%lld (>= %lld), "
                      "ldc=%lld (>= %lld)",
                      (long long)lda, (long long)need_a, (long long)ldb, (long long)need_b,
                      (long long)ldc, (long long)need_c);
        return AT_EINVAL;
    }
    return AT_OK;
}

at_plan *at_plan_create_ex(int dtype, int layout, int trans_a, int trans_b, int64_t M, int64_t N,
                           int64_t K, int64_t lda, int64_t ldb, int64_t ldc, int threads)
{
    if (check_args(dtype, layout, trans_a, trans_b, M, N, K, lda, ldb, ldc)) return NULL;
    if (threads <= 0) threads = at__num_threads();
    if (threads > AT_MAX_THREADS) threads = AT_MAX_THREADS;
    return at__plan_build(dtype, layout, trans_a, trans_b, M, N, K, lda, ldb, ldc, threads);
}

at_plan *at_plan_create(int dtype, int layout, int trans_a, int trans_b, int64_t M, int64_t N,
                        int64_t K, int64_t lda, int64_t ldb, int64_t ldc)
{
    return at_plan_create_ex(dtype, layout, trans_a, trans_b, M, N, K, lda, ldb, ldc, 0);
}

int at__check_args(int dtype, int layout, int ta, int tb, int64_t M, int64_t N, int64_t K,
                   int64_t lda, int64_t ldb, int64_t ldc)
{
    return check_args(dtype, layout, ta, tb, M, N, K, lda, ldb, ldc);
}

void at_plan_destroy(at_plan *plan)
{
    if (plan && atomic_fetch_sub(&plan->refs, 1) == 1) at__plan_free(plan);
}

int at_plan_get_info(const at_plan *plan, at_plan_info *info)
{
    if (!plan || !info) return AT_EINVAL;
    *info = plan->info;
    return AT_OK;
}

/* The steps of a chunked plan: its chunks' steps in the executor's order
 * (column of chunks by column), each moved to its chunk's place in C. */
static int64_t chunk_steps_from(const at_plan *plan, int64_t first, at_step *out, int64_t cap)
{
    int64_t count[4], rows[2], cols[2];
    chunk_counts(plan, count, rows, cols);
    int64_t nm = plan->M / plan->chunk_m + (plan->M % plan->chunk_m != 0);
    int64_t nn = plan->N / plan->chunk_n + (plan->N % plan->chunk_n != 0);
    int64_t n = 0, copied = 0;
    for (int64_t jc = 0; jc < nn && copied < cap; jc++)
        for (int64_t ic = 0; ic < nm && copied < cap; ic++) {
            int s = (ic == nm - 1 && rows[1]) | (jc == nn - 1 && cols[1]) << 1;
            const at_plan *sub = plan->sub[s];
            int64_t size = sub->info.nsteps;
            if (n + size <= first) {
                n += size;
                continue;
            }
            int64_t from = first > n ? first - n : 0;
            at_plan_steps_from(sub, from, out + copied, cap - copied);
            int64_t got = size - from < cap - copied ? size - from : cap - copied;
            for (int64_t k = 0; k < got; k++) {
                out[copied + k].i0 += ic * plan->chunk_m;
                out[copied + k].j0 += jc * plan->chunk_n;
            }
            copied += got;
            n += size;
        }
    return plan->info.nsteps;
}

int64_t at_plan_steps_from(const at_plan *plan, int64_t first, at_step *out, int64_t cap)
{
    if (!plan || first < 0 || cap < 0) return AT_EINVAL;
    if (plan->chunk_m) return chunk_steps_from(plan, first, out, cap);
    if (plan->info.path == 0) {
        for (int64_t k = 0; k < cap && first + k < plan->nsteps; k++) out[k] = plan->steps[first + k];
        return plan->nsteps;
    }
    /* A packed plan repeats a few tilings over its blocks: skip whole blocks
     * to the first step wanted, then copy. */
    int64_t n = 0, b = 0;
    for (; b < plan->nblocks; b++) {
        int64_t count = plan->tilings[plan->blocks[b].tiling].count;
        if (n + count > first) break;
        n += count;
    }
    int64_t copied = 0;
    for (; b < plan->nblocks; b++) {
        const at_block *bl = &plan->blocks[b];
        const at_tiling *t = &plan->tilings[bl->tiling];
        for (int64_t s = 0; s < t->count; s++, n++) {
            if (n < first || copied >= cap) continue;
            at_step st = plan->steps[t->first + s];
            st.i0 += bl->i0;
            st.j0 += bl->j0;
            st.thread = bl->thread;
            st.pack = AT_PACK_A | AT_PACK_B;
            out[copied++] = st;
        }
        if (copied >= cap) {
            /* The rest only counts: a tiling's size, not its steps. */
            for (b++; b < plan->nblocks; b++) n += plan->tilings[plan->blocks[b].tiling].count;
            break;
        }
    }
    return n;
}

int64_t at_plan_steps(const at_plan *plan, at_step *out, int64_t cap)
{
    return at_plan_steps_from(plan, 0, out, cap);
}

int at_plan_usage(const at_plan *plan, int64_t *calls, int64_t *elements)
{
    if (!plan || !calls || !elements) return AT_EINVAL;
    int slots = at_kernel_table_count + 1; /* the last one: portable edge code */
    for (int k = 0; k < slots; k++) calls[k] = elements[k] = 0;
    if (plan->chunk_m) {
        int64_t count[4], rows[2], cols[2];
        chunk_counts(plan, count, rows, cols);
        int64_t *sc = malloc(sizeof *sc * 2 * (size_t)slots);
        if (!sc) return AT_ENOMEM;
        for (int s = 0; s < 4; s++) {
            if (!count[s]) continue;
            at_plan_usage(plan->sub[s], sc, sc + slots);
            for (int k = 0; k < slots; k++) {
                calls[k] += count[s] * sc[k];
                elements[k] += count[s] * sc[slots + k];
            }
        }
        free(sc);
        return AT_OK;
    }
    int64_t nt = plan->info.path == 0 ? 1 : plan->ntilings;
    for (int64_t ti = 0; ti < nt; ti++) {
        /* How many blocks use this tiling (the small path: one, the plan itself). */
        int64_t uses = 1, first = 0, count = plan->nsteps;
        if (plan->info.path != 0) {
            uses = 0;
            for (int64_t b = 0; b < plan->nblocks; b++) uses += plan->blocks[b].tiling == ti;
            first = plan->tilings[ti].first;
            count = plan->tilings[ti].count;
        }
        for (int64_t s = first; s < first + count; s++) {
            const at_step *st = &plan->steps[s];
            int k = st->kernel >= 0 ? st->kernel : slots - 1;
            calls[k] += uses;
            elements[k] += uses * (int64_t)st->mb * st->nb;
        }
    }
    return AT_OK;
}

int at_kernel_count(void) { return at_kernel_table_count; }

int at_kernel_get(int index, at_kernel_info *info)
{
    if (index < 0 || index >= at_kernel_table_count || !info) return AT_EINVAL;
    const at_kernel *d = &at_kernel_table[index].kernel;
    info->name = d->name;
    info->dtype = d->dtype;
    info->trans_a = d->trans_a;
    info->trans_b = d->trans_b;
    info->mr = d->mr;
    info->nr = d->nr;
    return AT_OK;
}
