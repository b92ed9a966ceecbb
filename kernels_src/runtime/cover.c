/* cover.c: covering C with kernel-sized blocks (IAAT's dynamic programme).
 *
 * A block is split into row bands of kernel heights and each band into kernel
 * widths, both by the one-dimensional cover below, minimising the cost grid's
 * predicted time (cost.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "at_planner.h"

/* ---- one-dimensional cover --------------------------------------------------
 * Split n into parts of sizes 1..P with cost[p-1] each, minimising the sum.  For
 * large n the optimum repeats the part of best cost per element except for a
 * remainder below P*P (an exchange argument), so only that remainder needs the
 * dynamic programme and planning stays O(P^3) whatever n is. */

typedef struct {
    int64_t reps;     /* leading parts of size `rep` */
    int32_t rep;
    int32_t ntail;
    int32_t *tail;    /* then these parts, in order */
    double cost;
} at_cover;

static int cover(int64_t n, int P, const double *cost, at_cover *out)
{
    memset(out, 0, sizeof *out);
    if (n == 0) return AT_OK;
    int best = 0;
    for (int p = 1; p <= P; p++)
        if (isfinite(cost[p - 1]) &&
            (!best || cost[p - 1] / p < cost[best - 1] / best - 1e-18 * cost[best - 1]))
            best = p;
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
        for (int p = 1; p <= P && p <= x; p++) {
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

/* Tile an m x n block with the grid: append its steps (relative coordinates). */
int at__tile_block(const at_grid *g, int64_t m, int64_t n, at_steps *out, double *seconds)
{
    int rc = AT_OK;
    at_cover *rows = calloc((size_t)g->H, sizeof *rows);
    double *band = malloc(sizeof *band * (size_t)g->H);
    at_cover mc;
    memset(&mc, 0, sizeof mc);
    if (!rows || !band) {
        rc = AT_ENOMEM;
        goto done;
    }
    for (int h = 1; h <= g->H; h++) {
        rc = cover(n, g->W, &g->sec[(size_t)(h - 1) * g->W], &rows[h - 1]);
        if (rc) goto done;
        band[h - 1] = rows[h - 1].cost;
    }
    rc = cover(m, g->H, band, &mc);
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
    free(mc.tail);
    return rc;
}

