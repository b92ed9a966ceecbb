/* threads.c: the thread split (KleidiAI/MLAS, then balanced by predicted work).
 *
 * The items (steps or blocks) are fixed before this point: only their owner is
 * chosen here, so the tiling of C never depends on the thread count.
 *
 * Three kinds of assignment are scored by the predicted load of the busiest
 * thread; of those within AT_SPLIT_TIE of the lightest, the one whose threads
 * reach the fewest rows of A and columns of B wins (then the earlier kind,
 * which keeps more locality):
 *  1. MLAS grids: start from one tile per item, ceil(M/m_step) x ceil(N/n_step);
 *     rescale the two counts toward the thread count keeping C's aspect ratio
 *     (a from 1 to min(tiles, T), b = ceil(T / a)); tiles go to threads
 *     round-robin.  Contiguous regions of C, but when the items do not divide
 *     evenly into a x b tiles one thread can get almost everything (fp64 256^3
 *     with 120 x 252 blocks gave 61,440 of 65,536 elements to thread 0).
 *  2. Contiguous runs of the item order (row bands, or blocks of one column
 *     panel) cut where the running predicted time crosses t/T of the total: each
 *     thread gets at most one item more than its share and keeps neighbours
 *     together, so a packed B panel is shared by the blocks of one run.
 *  3. Longest processing time first: items by decreasing predicted time, each to
 *     the least loaded thread; the tightest bound (4/3 of optimal) when the items
 *     are few and unequal.
 *
 * Each candidate's load counts the cache lines of C that two threads write: where
 * one thread's item sits on another's in a column of (column-major) C and the
 * boundary row does not start a 64-byte line, both threads store into that line
 * of every column they share, and it moves between their cores at each store.
 * On a 2-vCPU Xeon VM (f32 87 x 93 x 56, cut at row 48 of ldc = 87) the split by
 * rows ran 8.1 us a call, the split by columns 4.2, one thread 6.3.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "at_planner.h"

typedef struct {
    double sec;
    int64_t idx;
} at_lpt;

static int lpt_order(const void *x, const void *y)
{
    const at_lpt *a = x, *b = y;
    if (a->sec != b->sec) return a->sec > b->sec ? -1 : 1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

/* The items by decreasing predicted time, ties by index: the order LPT takes
 * them.  A plan's items take few distinct times (a tiling repeats a handful of
 * block sizes; 512 x 512 x 64 on NEON has some 4,000 steps of three), so with at
 * most AT_LPT_KINDS of them the items are counted into one bucket per time, in
 * O(n x kinds), instead of sorted (glibc's merge sort over them cost 2 million
 * guest instructions of that plan's first call under QEMU).  The same order. */
#define AT_LPT_KINDS 16

static void lpt_sort(at_lpt *ord, const at_item *it, int64_t n, int32_t *kind)
{
    double sec[AT_LPT_KINDS];
    int64_t start[AT_LPT_KINDS + 1];
    int kinds = 0;
    for (int64_t k = 0; k < n; k++) {
        int c = 0;
        while (c < kinds && sec[c] != it[k].sec) c++;
        if (c == kinds) {
            /* Too many times, or one that equals nothing (NaN): sort. */
            if (kinds == AT_LPT_KINDS || it[k].sec != it[k].sec) {
                for (int64_t q = 0; q < n; q++) {
                    ord[q].sec = it[q].sec;
                    ord[q].idx = q;
                }
                qsort(ord, (size_t)n, sizeof *ord, lpt_order);
                return;
            }
            sec[kinds++] = it[k].sec;
        }
        kind[k] = c;
    }
    /* rank[c]: the place of time c among the kinds, the longest first. */
    int rank[AT_LPT_KINDS];
    for (int c = 0; c < kinds; c++) {
        rank[c] = 0;
        for (int d = 0; d < kinds; d++) rank[c] += sec[d] > sec[c];
        start[rank[c] + 1] = 0;
    }
    start[0] = 0;
    for (int64_t k = 0; k < n; k++) start[rank[kind[k]] + 1]++;
    for (int r = 0; r < kinds; r++) start[r + 1] += start[r];
    for (int64_t k = 0; k < n; k++) {
        int64_t at = start[rank[kind[k]]]++;
        ord[at].sec = it[k].sec;
        ord[at].idx = k;
    }
}

static double max_load(const double *load, int T)
{
    double mx = 0;
    for (int t = 0; t < T; t++)
        if (load[t] > mx) mx = load[t];
    return mx;
}

/* Predicted loads within this fraction of the lightest count as a tie, which goes
 * to the assignment whose threads reach the fewest rows of A and columns of B.
 * The predicted times are the kernels' on operands in cache: they do not see
 * that splitting a 1000 x 10 x 100 product by columns makes each thread read
 * all of A, where a split by rows reads it once.  That split was 1.6 % heavier
 * by the prediction and the column split ran at 1.3x one thread's speed, the
 * row split at 1.8x (2-core Zen 3 VM, calls back to back). */
#define AT_SPLIT_TIE 0.03

/* The candidates: MLAS grids a = 1 .. amax, then contiguous runs, then LPT. */
enum { AT_RUNS = -1, AT_LPT = -2 };

/* Fills own[] with candidate c's assignment; returns its busiest thread's load. */
static double assign(int64_t c, const at_item *it, int64_t n, int64_t M, int64_t N, int64_t tcn,
                     int T, int32_t *own, double *load, at_lpt *ord)
{
    memset(load, 0, sizeof *load * (size_t)T);
    if (c > 0) {
        int64_t a = c, b = (T + a - 1) / a;
        if (b > tcn) b = tcn;
        int64_t ms = (M + a - 1) / a, ns = (N + b - 1) / b;
        int64_t rb = (N + ns - 1) / ns;
        for (int64_t k = 0; k < n; k++) {
            own[k] = (int32_t)(((it[k].i0 / ms) * rb + it[k].j0 / ns) % T);
            load[own[k]] += it[k].sec;
        }
    } else if (c == AT_RUNS) {
        /* Cut at the nearest item boundary to each t/T of the total. */
        double total = 0, run = 0;
        for (int64_t k = 0; k < n; k++) total += it[k].sec;
        int t = 0;
        for (int64_t k = 0; k < n; k++) {
            /* Move on when this item would take the run further past the cut than
             * stopping short leaves it. */
            double cut = total * (double)(t + 1) / T;
            if (t + 1 < T && run + it[k].sec - cut > cut - run && load[t] > 0) t++;
            own[k] = t;
            load[t] += it[k].sec;
            run += it[k].sec;
        }
    } else {
        /* Longest processing time first; ties by item index, so the plan is reproducible. */
        lpt_sort(ord, it, n, own);
        for (int64_t k = 0; k < n; k++) {
            int lt = 0;
            for (int q = 1; q < T; q++)
                if (load[q] < load[lt]) lt = q;
            own[ord[k].idx] = lt;
            load[lt] += ord[k].sec;
        }
    }
    return max_load(load, T);
}

/* The most rows plus columns of C any thread's items span (their bounding box,
 * which is a grid's share exactly): how much of A and B the thread reads. */
static int64_t reach(const at_item *it, int64_t n, const int32_t *own, int T, int64_t *box)
{
    for (int t = 0; t < T; t++) {
        box[4 * t] = box[4 * t + 2] = INT64_MAX;
        box[4 * t + 1] = box[4 * t + 3] = -1;
    }
    for (int64_t k = 0; k < n; k++) {
        int64_t *b = box + 4 * own[k];
        if (it[k].i0 < b[0]) b[0] = it[k].i0;
        if (it[k].i0 + it[k].mb > b[1]) b[1] = it[k].i0 + it[k].mb;
        if (it[k].j0 < b[2]) b[2] = it[k].j0;
        if (it[k].j0 + it[k].nb > b[3]) b[3] = it[k].j0 + it[k].nb;
    }
    int64_t mx = 0;
    for (int t = 0; t < T; t++)
        if (box[4 * t + 1] >= 0 && box[4 * t + 1] - box[4 * t] + box[4 * t + 3] - box[4 * t + 2] > mx)
            mx = box[4 * t + 1] - box[4 * t] + box[4 * t + 3] - box[4 * t + 2];
    return mx;
}

/* What a line of C written by two threads costs the busiest of them: the 4 us
 * between the two splits above over their 93 shared lines, rounded. */
#define AT_SHARED_LINE_SECONDS 40e-9

typedef struct {
    int64_t i0, j0, idx;
} at_place;

static int by_row(const void *x, const void *y)
{
    const at_place *a = x, *b = y;
    if (a->i0 != b->i0) return a->i0 < b->i0 ? -1 : 1;
    return (a->j0 > b->j0) - (a->j0 < b->j0);
}

/* Lines of C two threads write under `own`: columns where an item ends at a
 * row that does not start a line (with C's columns whole lines apart and C
 * itself on a line, as the planner assumes; any row when they are not) and the
 * item below it belongs to another thread.  `rows` lists the items by first
 * row; `below`/`owner`: per column, where the last item seen ends and whose it is. */
static int64_t shared_lines(const at_item *it, const at_place *rows, int64_t n, const int32_t *own,
                            int64_t ldc_bytes, int64_t elem, int64_t *below, int32_t *owner, int64_t N)
{
    for (int64_t j = 0; j < N; j++) below[j] = -1;
    int64_t shared = 0;
    for (int64_t q = 0; q < n; q++) {
        const at_item *x = &it[rows[q].idx];
        int t = own[rows[q].idx];
        int split_line = ldc_bytes % 64 != 0 || (x->i0 * elem) % 64 != 0;
        for (int64_t j = x->j0; j < x->j0 + x->nb && j < N; j++) {
            if (split_line && below[j] == x->i0 && owner[j] != t) shared++;
            below[j] = x->i0 + x->mb;
            owner[j] = t;
        }
    }
    return shared;
}

/* Returns the busiest thread's predicted seconds, or INFINITY without memory. */
double at__split_threads(at_item *it, int64_t n, int64_t M, int64_t N, int64_t m_step,
                         int64_t n_step, int T, int mode, int64_t ldc, int64_t elem)
{
    int64_t tcm = (M + m_step - 1) / m_step, tcn = (N + n_step - 1) / n_step;
    int64_t amax = tcm < T ? tcm : T;
    /* A fixed mode keeps one grid, all threads along M or along N: the tuner's
     * explicit choice, with no rebalancing behind its back. */
    int64_t first = mode == 1 ? amax : 1, last = mode == 2 ? 1 : amax;
    int64_t ncand = last - first + 1 + (mode == 0 ? 2 : 0);
    double *load = calloc((size_t)T, sizeof *load);
    double *cand_load = malloc(sizeof *cand_load * (size_t)ncand);
    int64_t *cand_reach = malloc(sizeof *cand_reach * (size_t)ncand);
    int64_t *box = malloc(sizeof *box * 4 * (size_t)T);
    int32_t *own = malloc(sizeof *own * (size_t)(n ? n : 1));
    at_lpt *ord = malloc(sizeof *ord * (size_t)(n ? n : 1));
    /* Items whose first row starts a line of every column share none: with all
     * of them so (and a packed plan's blocks usually are), nothing is counted,
     * sorted or allocated for it. */
    int split_lines = 0;
    for (int64_t k = 0; k < n; k++)
        split_lines |= it[k].i0 > 0 && ((ldc * elem) % 64 != 0 || (it[k].i0 * elem) % 64 != 0);
    at_place *rows = split_lines ? malloc(sizeof *rows * (size_t)n) : NULL;
    int64_t *below = split_lines ? malloc(sizeof *below * (size_t)(N ? N : 1)) : NULL;
    int32_t *owner = split_lines ? malloc(sizeof *owner * (size_t)(N ? N : 1)) : NULL;
    double best = INFINITY;
    if (!load || !cand_load || !cand_reach || !box || !own || !ord ||
        (split_lines && (!rows || !below || !owner)))
        goto done;
    if (split_lines) {
        int sorted = 1;
        for (int64_t k = 0; k < n; k++) {
            rows[k] = (at_place){it[k].i0, it[k].j0, k};
            if (k && by_row(&rows[k - 1], &rows[k]) > 0) sorted = 0;
        }
        if (!sorted) qsort(rows, (size_t)n, sizeof *rows, by_row);
    }
    const double line_cost = AT_SHARED_LINE_SECONDS;
    /* Candidate q is grid first + q, then runs, then LPT. */
#define AT_CAND(q) ((q) <= last - first ? first + (q) : (q) == last - first + 1 ? AT_RUNS : AT_LPT)
    for (int64_t q = 0; q < ncand; q++) {
        cand_load[q] = assign(AT_CAND(q), it, n, M, N, tcn, T, own, load, ord);
        if (split_lines)
            cand_load[q] += line_cost * (double)shared_lines(it, rows, n, own, ldc * elem, elem, below, owner, N);
        cand_reach[q] = reach(it, n, own, T, box);
        if (cand_load[q] < best) best = cand_load[q];
    }
    /* The earliest of the least reach among the near-lightest (earlier kinds keep
     * more locality when the reach ties too). */
    int64_t pick = -1;
    for (int64_t q = 0; q < ncand; q++)
        if (cand_load[q] <= best * (1 + AT_SPLIT_TIE) && (pick < 0 || cand_reach[q] < cand_reach[pick]))
            pick = q;
    /* No finite load (a NaN prediction): no split, as without memory. */
    if (pick < 0) {
        best = INFINITY;
        goto done;
    }
    best = assign(AT_CAND(pick), it, n, M, N, tcn, T, own, load, ord);
    if (split_lines) best += line_cost * (double)shared_lines(it, rows, n, own, ldc * elem, elem, below, owner, N);
#undef AT_CAND
    for (int64_t k = 0; k < n; k++) it[k].thread = own[k];
done:
    free(load);
    free(cand_load);
    free(cand_reach);
    free(box);
    free(own);
    free(ord);
    free(rows);
    free(below);
    free(owner);
    return best;
}
