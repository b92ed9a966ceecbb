/* cover.c: covering C with kernel-sized blocks (IAAT's dynamic programme).
 *
 * A block is split into row bands of kernel heights and each band into kernel
 * widths, both by the one-dimensional cover below, minimising the cost grid's
 * predicted time (cost.c).
 *
 * The grid holds every block size up to the biggest kernel (64 x 64 for SME2 at
 * SVL 512), most of them portable edge blocks.  Covering every row of it with
 * every width cost 17 million instructions per new 256^3 shape under QEMU, more
 * than twenty such products; the search here skips what cannot be in an optimum
 * (dominated parts and band heights, below) and finds the same predicted time.
 * The exhaustive search stays behind a flag, for the test that checks this.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "at_planner.h"

/* ---- one-dimensional cover --------------------------------------------------
 * Split n into parts of the candidate sizes (at most P) with cost[p-1] each,
 * minimising the sum.  For large n the optimum repeats the part of best cost per
 * element except for a remainder below P*P (an exchange argument), so only that
 * remainder needs the dynamic programme and planning stays O(P^2 x parts)
 * whatever n is. */

typedef struct {
    int64_t reps;     /* leading parts of size `rep` */
    int32_t rep;
    int32_t ntail;
    int32_t *tail;    /* then these parts, in order */
    double cost;
} at_cover;

static int cover(int64_t n, int P, const double *cost, const int32_t *parts, int nparts,
                 at_cover *out)
{
    memset(out, 0, sizeof *out);
    if (n == 0) return AT_OK;
    int best = 0;
    for (int i = 0; i < nparts; i++) {
        int p = parts[i];
        if (isfinite(cost[p - 1]) &&
            (!best || cost[p - 1] / p < cost[best - 1] / best - 1e-18 * cost[best - 1]))
            best = p;
    }
    if (!best) {
        out->cost = INFINITY;
        return AT_OK;
    }
    int64_t cap = (int64_t)P * P + P;
    int64_t reps = 0, rem = n;
    if (n > cap) {
        reps = (n - cap + best - 1) / best;
        rem = n - reps * best;
    }
    double *f = malloc(sizeof *f * (size_t)(rem + 1));
    int32_t *from = malloc(sizeof *from * (size_t)(rem + 1));
    if (!f || !from) {
        free(f);
        free(from);
        return AT_ENOMEM;
    }
    f[0] = 0;
    for (int64_t x = 1; x <= rem; x++) {
        f[x] = INFINITY;
        from[x] = 0;
        for (int i = 0; i < nparts && parts[i] <= x; i++) {
            int p = parts[i];
            double v = f[x - p] + cost[p - 1];
            /* Ties go to the bigger part: fewer calls, fewer reloads of A and B. */
            if (v < f[x] || (v == f[x] && p > from[x])) {
                f[x] = v;
                from[x] = p;
            }
        }
    }
    out->reps = reps;
    out->rep = best;
    out->cost = f[rem] + (double)reps * cost[best - 1];
    if (isfinite(f[rem])) {
        int32_t cnt = 0;
        for (int64_t x = rem; x > 0; x -= from[x]) cnt++;
        out->tail = malloc(sizeof *out->tail * (size_t)(cnt ? cnt : 1));
        if (!out->tail) {
            free(f);
            free(from);
            return AT_ENOMEM;
        }
        /* Big parts first: the block at the origin is the main kernel. */
        int32_t k = 0;
        for (int64_t x = rem; x > 0; x -= from[x]) out->tail[k++] = from[x];
        out->ntail = cnt;
    }
    free(f);
    free(from);
    return AT_OK;
}

static int64_t cover_count(const at_cover *c) { return c->reps + c->ntail; }
static int32_t cover_part(const at_cover *c, int64_t i)
{
    return i < c->reps ? c->rep : c->tail[i - c->reps];
}

static int steps_push(at_steps *s, at_step st)
{
    if (s->n == s->cap) {
        int64_t cap = s->cap ? 2 * s->cap : 64;
        at_step *v = realloc(s->v, sizeof *v * (size_t)cap);
        if (!v) return AT_ENOMEM;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = st;
    return AT_OK;
}

/* ---- bounded search -----------------------------------------------------------
 * Two prunings, both exact: what they drop can be replaced by what they keep at
 * no greater predicted time, so the optimum's time is unchanged (only ties may
 * resolve differently).
 *
 * Parts.  A size p whose cost is at least that of the best cover of p by smaller
 * parts is never needed: swap it for that cover.  Sizes go up in order, so the
 * best cover of every smaller size is known when p is tested: O(P x kept parts)
 * per row.  A kernel much faster than the edge code drops every edge block wider
 * than itself (kernel + narrower edge), so a row keeps its kernels' widths and a
 * few narrow edges.
 *
 * Heights.  Heights go up in order too; best[h] is the cheapest known way to
 * cover a band of h rows, either one band of height h or two of smaller heights
 * (themselves bands or splits).  Before covering row h (its one-dimensional cover
 * of n), its cost is bounded below by n x its cheapest cost per column; when the
 * split already meets that bound, band h is never needed and its cover is
 * skipped.  Heights with no kernel sit between kernel heights whose bands are
 * far faster than edge code, so nearly all of them go. */

/* Write the undominated sizes of cost[0..P-1], ascending, into parts; f is
 * scratch of P + 1. */
static int useful_parts(int P, const double *cost, int32_t *parts, double *f)
{
    int k = 0;
    f[0] = 0;
    for (int p = 1; p <= P; p++) {
        double v = INFINITY;
        for (int i = 0; i < k; i++) {
            double c = cost[parts[i] - 1] + f[p - parts[i]];
            if (c < v) v = c;
        }
        /* Ties keep the bigger part, as the cover's own tie rule does. */
        if (isfinite(cost[p - 1]) && cost[p - 1] <= v) {
            parts[k++] = p;
            v = cost[p - 1];
        }
        f[p] = v;
    }
    return k;
}

static int all_parts(int P, int32_t *parts)
{
    for (int p = 1; p <= P; p++) parts[p - 1] = p;
    return P;
}

/* Tile an m x n block with the grid: append its steps (relative coordinates).
 * exhaustive: cover every row with every width and band with every height, the
 * search before the pruning (kept for the test that compares the two). */
int at__tile_block_ex(const at_grid *g, int64_t m, int64_t n, int exhaustive, at_steps *out,
                      double *seconds)
{
    int rc = AT_OK;
    int P = g->H > g->W ? g->H : g->W;
    at_cover *rows = calloc((size_t)g->H, sizeof *rows);
    double *band = malloc(sizeof *band * (size_t)g->H);
    double *best = malloc(sizeof *best * (size_t)(g->H + 1));
    double *f = malloc(sizeof *f * (size_t)(P + 1));
    int32_t *parts = malloc(sizeof *parts * (size_t)P);
    at_cover mc;
    memset(&mc, 0, sizeof mc);
    if (!rows || !band || !best || !f || !parts) {
        rc = AT_ENOMEM;
        goto done;
    }
    best[0] = 0;
    for (int h = 1; h <= g->H; h++) {
        const double *row = &g->sec[(size_t)(h - 1) * g->W];
        band[h - 1] = INFINITY;
        double split = INFINITY;
        for (int q = 1; q + q <= h; q++)
            if (best[q] + best[h - q] < split) split = best[q] + best[h - q];
        best[h] = split;
        if (!exhaustive) {
            double rate = INFINITY;
            for (int w = 1; w <= g->W; w++)
                if (row[w - 1] / w < rate) rate = row[w - 1] / w;
            if (split <= rate * (double)n) continue;
        }
        int np = exhaustive ? all_parts(g->W, parts) : useful_parts(g->W, row, parts, f);
        rc = cover(n, g->W, row, parts, np, &rows[h - 1]);
        if (rc) goto done;
        band[h - 1] = rows[h - 1].cost;
        if (band[h - 1] < best[h]) best[h] = band[h - 1];
    }
    int np = exhaustive ? all_parts(g->H, parts) : useful_parts(g->H, band, parts, f);
    rc = cover(m, g->H, band, parts, np, &mc);
    if (rc) goto done;
    *seconds = mc.cost;
    int64_t i0 = 0;
    for (int64_t bi = 0; bi < cover_count(&mc); bi++) {
        int h = cover_part(&mc, bi);
        const at_cover *rc_ = &rows[h - 1];
        int64_t j0 = 0;
        for (int64_t bj = 0; bj < cover_count(rc_); bj++) {
            int w = cover_part(rc_, bj);
            at_step st = {g->kid[(size_t)(h - 1) * g->W + (w - 1)], 0, i0, j0, h, w, 0};
            if ((rc = steps_push(out, st))) goto done;
            j0 += w;
        }
        i0 += h;
    }
done:
    if (rows)
        for (int h = 0; h < g->H; h++) free(rows[h].tail);
    free(rows);
    free(band);
    free(best);
    free(f);
    free(parts);
    free(mc.tail);
    return rc;
}

int at__tile_block(const at_grid *g, int64_t m, int64_t n, at_steps *out, double *seconds)
{
    return at__tile_block_ex(g, m, n, 0, out, seconds);
}
