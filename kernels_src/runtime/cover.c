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
 * minimising the sum.  For large n the optimum repeats the part b of best cost
 * per element except for a remainder below P*P (an exchange argument), so only
 * that remainder needs the dynamic programme and planning stays O(P^2 x parts)
 * whatever n is.  With `tight`, the remainder's bound comes from the parts
 * themselves: b / gcd(p, b) copies of a part p add up to a multiple of b and can
 * be swapped for copies of b at no greater cost, so an optimum has fewer than
 * that many of each, and (any b parts having a subset whose sum b divides) fewer
 * than b parts other than b in all.  A row of NEON widths 1-12 then runs its
 * programme over about 60 columns, not the whole block. */

typedef struct {
    int64_t reps;     /* leading parts of size `rep` */
    int32_t rep;
    int32_t ntail;
    int32_t *tail;    /* then these parts, in order */
    double cost;
} at_cover;

/* The programme: f[x] = min over parts p <= x of f[x - p] + cost[p - 1], for x up
 * to rem, with from[x] the part chosen; ties go to the bigger part (fewer calls,
 * fewer reloads of A and B).  O(rem x parts). */
static int cover_plain(int64_t rem, const double *cost, const int32_t *parts, int nparts, double *f,
                       int32_t *from)
{
    f[0] = 0;
    for (int64_t x = 1; x <= rem; x++) {
        f[x] = INFINITY;
        from[x] = 0;
        for (int i = 0; i < nparts && parts[i] <= x; i++) {
            int p = parts[i];
            double v = f[x - p] + cost[p - 1];
            if (v < f[x] || (v == f[x] && p > from[x])) {
                f[x] = v;
                from[x] = p;
            }
        }
    }
    return AT_OK;
}

/* The same programme, the same choices, in O(rem x runs).  A run is a stretch of
 * consecutive part sizes lo..hi of one cost c (an SME2 variable block offers its
 * cost to every size up to its own, so a row of them is one run, not 64 parts):
 * its best candidate for x is c + the least f[y] over the window y in
 * [x - hi, x - lo], kept in a monotone deque whose front is the window's least f
 * and, among equals, its smallest y (the biggest part, as the tie rule wants). */
static int cover_runs(int64_t rem, const double *cost, const int32_t *parts, int nparts, double *f,
                      int32_t *from)
{
    int nruns = 0;
    for (int i = 0; i < nparts; i++)
        if (!i || parts[i] != parts[i - 1] + 1 || cost[parts[i] - 1] != cost[parts[i - 1] - 1]) nruns++;
    int32_t *lo = malloc(sizeof *lo * (size_t)nruns * 2);
    int64_t *slot = malloc(sizeof *slot * (size_t)nruns * 4);
    int64_t *ring = malloc(sizeof *ring * (size_t)(nparts + nruns));
    if (!lo || !slot || !ring) {
        free(lo);
        free(slot);
        free(ring);
        return AT_ENOMEM;
    }
    int32_t *hi = lo + nruns;
    int64_t *base = slot, *size = slot + nruns, *head = slot + 2 * nruns, *count = slot + 3 * nruns;
    int r = -1;
    int64_t used = 0;
    for (int i = 0; i < nparts; i++) {
        if (!i || parts[i] != parts[i - 1] + 1 || cost[parts[i] - 1] != cost[parts[i - 1] - 1]) {
            if (r >= 0) used += size[r];
            lo[++r] = parts[i];
            base[r] = used;
            head[r] = count[r] = 0;
        }
        hi[r] = parts[i];
        size[r] = hi[r] - lo[r] + 2; /* the window holds at most hi - lo + 1 */
    }
    f[0] = 0;
    for (int64_t x = 1; x <= rem; x++) {
        f[x] = INFINITY;
        from[x] = 0;
        for (r = 0; r < nruns; r++) {
            int64_t *q = ring + base[r], n = size[r];
            int64_t in = x - lo[r];
            if (in < 0) continue;
            while (count[r] && f[q[(head[r] + count[r] - 1) % n]] > f[in]) count[r]--;
            q[(head[r] + count[r]++) % n] = in;
            while (q[head[r]] < x - hi[r]) {
                head[r] = (head[r] + 1) % n;
                count[r]--;
            }
            int64_t y = q[head[r]];
            double v = f[y] + cost[lo[r] - 1];
            int32_t p = (int32_t)(x - y);
            if (v < f[x] || (v == f[x] && p > from[x])) {
                f[x] = v;
                from[x] = p;
            }
        }
    }
    free(lo);
    free(slot);
    free(ring);
    return AT_OK;
}

/* Whether, in a run lo..hi of one cost c, two parts below hi can always be traded
 * for no more: two that fit in hi merge into one part of the run (c for 2c), and
 * two that do not become hi and the part p + q - hi, which must then be a part of
 * cost at most c (inside the run it is).  Then some optimum holds at most one part
 * of the run below hi: each trade lowers the number of parts other than the best,
 * or keeps it and spreads their sizes, so trading ends.  With the other exchange
 * (copies of a part summing to a multiple of the best one become copies of it) the
 * run adds at most hi - 1 and fewer than best / gcd(hi, best) copies of hi. */
static int run_trades(const double *cost, const int32_t *parts, int nparts, int64_t lo, int64_t hi)
{
    double c = cost[lo - 1];
    for (int64_t r = 2 * lo - hi > 1 ? 2 * lo - hi : 1; r < lo; r++) {
        int a = 0, b = nparts - 1, found = 0;
        while (a <= b && !found) {
            int mid = (a + b) / 2;
            if (parts[mid] == r) found = 1;
            else if (parts[mid] < r) a = mid + 1;
            else b = mid - 1;
        }
        if (!found || !(cost[r - 1] <= c)) return 0;
    }
    return 1;
}

static int cover(int64_t n, int P, const double *cost, const int32_t *parts, int nparts, int tight,
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
    if (tight) {
        int64_t each = 0, widest = 0;
        for (int i = 0, j; i < nparts; i = j + 1) {
            /* The run parts[i..j]: consecutive sizes of one cost. */
            for (j = i; j + 1 < nparts && parts[j + 1] == parts[j] + 1 && cost[parts[j + 1] - 1] == cost[parts[i] - 1];)
                j++;
            int64_t lo = parts[i], hi = parts[j];
            if (!isfinite(cost[lo - 1])) continue;
            if (lo < hi && run_trades(cost, parts, nparts, lo, hi)) {
                each += (hi != best ? (best / at__gcd64(hi, best) - 1) * hi : 0) + hi - 1;
            } else {
                for (int k = i; k <= j; k++)
                    if (parts[k] != best) each += (best / at__gcd64(parts[k], best) - 1) * parts[k];
            }
            if ((hi != best ? hi : hi - 1) > widest) widest = hi != best ? hi : hi - 1;
        }
        int64_t bound = each < (best - 1) * widest ? each : (best - 1) * widest;
        /* The excess bound.  At r, the best part's seconds per element, a cover
         * costs n r plus its other parts' excess, c_p - r p each: at least u p
         * (u the least excess per element of a part other than the best) and at
         * least e (the least excess of one).  Every optimum's excess is at most E,
         * that of any one cover (here n / best copies of the best part and the
         * remainder as one part, when it is one), so its other parts add up to at
         * most E / u, and number at most E / e, each at most `widest`.  A 32-row
         * band of width 256 then runs no programme at all, where the bound above
         * leaves 256 columns. */
        int64_t x = n % best;
        double r = cost[best - 1] / best, excess = x ? INFINITY : 0, u = INFINITY, e = INFINITY;
        for (int i = 0; i < nparts; i++) {
            int p = parts[i];
            if (p == x) excess = cost[p - 1] - r * p;
            if (p == best) continue;
            if (cost[p - 1] / p - r < u) u = cost[p - 1] / p - r;
            if (cost[p - 1] - r * p < e) e = cost[p - 1] - r * p;
        }
        if (excess <= 0) {
            bound = 0; /* n / best copies of the best part: no other part can do better */
        } else if (isfinite(excess) && u > 0) {
            /* The margins: rounding in r, u, e and the excess, relative. */
            double most = floor(excess / u * (1 + 1e-9)) + 1;
            double count = floor(excess / e * (1 + 1e-9)) + 1;
            if (count * (double)widest < most) most = count * (double)widest;
            if (most < (double)bound) bound = (int64_t)most;
        }
        /* Some optimum's other parts add up to at most bound: leave at least that. */
        if (n - bound >= best) {
            reps = (n - bound) / best;
            rem = n - reps * best;
        }
    } else if (n > cap) {
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
    int rc = tight ? cover_runs(rem, cost, parts, nparts, f, from) : cover_plain(rem, cost, parts, nparts, f, from);
    if (rc) {
        free(f);
        free(from);
        return rc;
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
    /* The kept parts so far as runs lo..hi of one cost, each with a monotone deque
     * of the window y in [p - hi, p - lo] whose front is the least f[y]: the best
     * cover of p by parts is then the least over runs of cost + front, O(runs) per
     * size instead of O(kept parts), the same value.  Without memory for the deques
     * the plain loop below does it. */
    int32_t *lo = malloc(sizeof *lo * (size_t)P * 2);
    int64_t *ring = malloc(sizeof *ring * (size_t)P * (size_t)(P + 1));
    int32_t *head = malloc(sizeof *head * (size_t)P * 2);
    int k = 0, runs = 0;
    f[0] = 0;
    for (int p = 1; p <= P; p++) {
        double v = INFINITY;
        if (lo && ring && head) {
            int32_t *hi = lo + P, *count = head + P;
            for (int r = 0; r < runs; r++) {
                int64_t *q = ring + (size_t)r * (size_t)(P + 1);
                int64_t in = p - lo[r], n = P + 1;
                while (count[r] && f[q[(head[r] + count[r] - 1) % n]] > f[in]) count[r]--;
                q[(head[r] + count[r]++) % n] = in;
                while (q[head[r]] < p - hi[r]) {
                    head[r] = (int32_t)((head[r] + 1) % n);
                    count[r]--;
                }
                double c = cost[lo[r] - 1] + f[q[head[r]]];
                if (c < v) v = c;
            }
        } else {
            for (int i = 0; i < k; i++) {
                double c = cost[parts[i] - 1] + f[p - parts[i]];
                if (c < v) v = c;
            }
        }
        /* Ties keep the bigger part, as the cover's own tie rule does. */
        if (isfinite(cost[p - 1]) && cost[p - 1] <= v) {
            if (lo && ring && head) {
                int32_t *hi = lo + P, *count = head + P;
                if (runs && hi[runs - 1] == p - 1 && cost[p - 2] == cost[p - 1]) {
                    hi[runs - 1] = p; /* the window's low end stays: p + 1 - p == p - (p - 1) */
                } else {
                    lo[runs] = hi[runs] = p;
                    head[runs] = count[runs] = 0;
                    runs++;
                }
            }
            parts[k++] = p;
            v = cost[p - 1];
        }
        f[p] = v;
    }
    free(lo);
    free(ring);
    free(head);
    return k;
}

/* What a grid's searches share: per row, its undominated widths (found when a row
 * is first covered, up to the widest size asked for so far), and the rows' covers
 * of the last width n (a packed plan's blocks of one column of blocks share it).
 *
 * Rows are covered lazily.  Until its cover is known, a band of height h is
 * bounded below by n times its cheapest seconds per column (widths up to n), and
 * the cover of the block's height runs over those bounds; the heights it then
 * uses whose bands are only bounded are covered and the height cover runs again.
 * When it uses known bands alone it is optimal: any other cover costs at least its
 * bounds' sum, which is at least this one's.  A block of 32-row bands covers only
 * the rows it uses (two of 64 for a 256^3 block at SVL 512), not every height whose
 * band no pair of smaller ones beats (the 16 below 17, where one variable block
 * makes every band the same price). */
struct at_tiler {
    const at_grid *g;
    int exhaustive;
    int32_t *parts;  /* [H * W]: row h's undominated widths from (h-1) * W */
    int32_t *nparts; /* [H]: how many */
    int32_t *plim;   /* [H]: up to which width they were looked for (0: not yet) */
    int32_t *all;    /* [max(H, W)]: 1, 2, ... (the exhaustive search's parts) */
    double *f;       /* scratch [max(H, W) + 1], twice */
    double *f2;
    int32_t *kept;   /* [H]: the band heights a tiling uses */
    int64_t n;       /* the width rows[] and band[] are for; -1: none */
    int last;        /* the height covered last at width n (0: none) */
    at_cover *rows;  /* [H] */
    double *band;    /* [H]: rows[h-1].cost once known[h-1], until then a lower bound;
                      * INFINITY for a height left out */
    unsigned char *known; /* [H] */
};

void at__tiler_free(at_tiler *t)
{
    if (!t) return;
    if (t->rows)
        for (int h = 0; h < t->g->H; h++) free(t->rows[h].tail);
    free(t->rows);
    free(t->band);
    free(t->known);
    free(t->parts);
    free(t->nparts);
    free(t->plim);
    free(t->all);
    free(t->f);
    free(t->f2);
    free(t->kept);
    free(t);
}

at_tiler *at__tiler_new(const at_grid *g, int exhaustive)
{
    at_tiler *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    int H = g->H, W = g->W, P = H > W ? H : W;
    t->g = g;
    t->exhaustive = exhaustive;
    t->n = -1;
    t->rows = calloc((size_t)H, sizeof *t->rows);
    t->band = malloc(sizeof *t->band * (size_t)H);
    t->known = calloc((size_t)H, 1);
    t->parts = malloc(sizeof *t->parts * (size_t)H * (size_t)W);
    t->nparts = calloc((size_t)H, sizeof *t->nparts);
    t->plim = calloc((size_t)H, sizeof *t->plim);
    t->all = malloc(sizeof *t->all * (size_t)P);
    t->f = malloc(sizeof *t->f * (size_t)(P + 1));
    t->f2 = malloc(sizeof *t->f2 * (size_t)(P + 1));
    t->kept = malloc(sizeof *t->kept * (size_t)H);
    if (!t->rows || !t->band || !t->known || !t->parts || !t->nparts || !t->plim || !t->all || !t->f ||
        !t->f2 || !t->kept) {
        at__tiler_free(t);
        return NULL;
    }
    for (int p = 1; p <= P; p++) t->all[p - 1] = p;
    return t;
}

/* Cover width t->n with band height h: rows[h-1], band[h-1], known. */
static int cover_row(at_tiler *t, int h)
{
    const at_grid *g = t->g;
    const double *row = &g->sec[(size_t)(h - 1) * g->W];
    at_cover *rc = &t->rows[h - 1];
    int32_t *parts = t->all;
    int np = g->W;
    if (!t->exhaustive) {
        /* Widths past n never fit.  A size's dominance depends on smaller sizes
         * only, so the widths kept up to a limit are a prefix of those kept up to
         * a wider one: a narrower block reuses them. */
        int P = t->n < g->W ? (int)t->n : g->W;
        parts = &t->parts[(size_t)(h - 1) * g->W];
        /* The row covered last (l) lends its cover when this one costs the same
         * at l's widths and no less at the others: any cover of this row costs at
         * least as much in row l, whose optimum costs the same here, and the
         * widths this row keeps are l's (none cheaper here, none dearer at l's).
         * Such are the heights one variable block serves, whose edge blocks grow
         * with the height (17-31, 33-47 and 49-63 at SVL 512). */
        int l = t->last, same = l && t->plim[l - 1] >= P;
        if (same) {
            const double *lrow = &g->sec[(size_t)(l - 1) * g->W];
            const int32_t *lp = &t->parts[(size_t)(l - 1) * g->W];
            for (int w = 1, k = 0; w <= P && same; w++) {
                int kept = k < t->nparts[l - 1] && lp[k] == w;
                k += kept;
                same = kept ? row[w - 1] == lrow[w - 1] : row[w - 1] >= lrow[w - 1];
            }
        }
        if (same) {
            const at_cover *src = &t->rows[l - 1];
            int32_t *tail = NULL;
            if (src->ntail) {
                tail = malloc(sizeof *tail * (size_t)src->ntail);
                if (!tail) return AT_ENOMEM;
                memcpy(tail, src->tail, sizeof *tail * (size_t)src->ntail);
            }
            free(rc->tail);
            *rc = *src;
            rc->tail = tail;
            /* Its widths up to P (beyond, the rows may differ). */
            const int32_t *lp = &t->parts[(size_t)(l - 1) * g->W];
            int np = 0;
            while (np < t->nparts[l - 1] && lp[np] <= P) np++;
            memcpy(parts, lp, sizeof *parts * (size_t)np);
            t->nparts[h - 1] = np;
            t->plim[h - 1] = P;
            t->band[h - 1] = rc->cost;
            t->known[h - 1] = 1;
            t->last = h;
            return AT_OK;
        }
        if (t->plim[h - 1] < P) {
            t->nparts[h - 1] = useful_parts(P, row, parts, t->f2);
            t->plim[h - 1] = P;
        }
        np = t->nparts[h - 1];
        while (np && parts[np - 1] > P) np--;
    }
    free(rc->tail);
    int rc_ = cover(t->n, g->W, row, parts, np, !t->exhaustive, rc);
    if (rc_) return rc_;
    t->band[h - 1] = rc->cost;
    t->known[h - 1] = 1;
    t->last = h;
    return AT_OK;
}

/* Start the rows over for width n: each band's lower bound, or (exhaustive) its
 * cover. */
static int rows_for(at_tiler *t, int64_t n)
{
    const at_grid *g = t->g;
    if (t->n == n) return AT_OK;
    int W = n < g->W ? (int)n : g->W;
    for (int h = 1; h <= g->H; h++) {
        free(t->rows[h - 1].tail);
        memset(&t->rows[h - 1], 0, sizeof t->rows[h - 1]);
        t->known[h - 1] = 0;
        const double *row = &g->sec[(size_t)(h - 1) * g->W];
        double r = INFINITY;
        for (int w = 1; w <= W; w++)
            if (row[w - 1] < r * w) r = row[w - 1] / w;
        /* Any cover's parts cost at least r per column.  The margin covers the
         * rounding of the products and sums (a bound a few ulps above the cover
         * could only cost as much, relatively, as the ulps). */
        t->band[h - 1] = r * (double)n * (1 - 1e-12);
    }
    t->n = n;
    t->last = 0;
    if (t->exhaustive)
        for (int h = 1; h <= g->H; h++) {
            int rc = cover_row(t, h);
            if (rc) {
                t->n = -1;
                return rc;
            }
        }
    return AT_OK;
}

/* Every band not yet known: covered, or left out when two smaller bands already
 * meet its lower bound (best[h]: the cheapest known way to cover h rows, one band
 * or two of smaller heights, themselves bands or splits).  The fallback when the
 * lazy search keeps asking for more rows. */
static int cover_all_rows(at_tiler *t)
{
    const at_grid *g = t->g;
    double *best = t->f;
    best[0] = 0;
    for (int h = 1; h <= g->H; h++) {
        double split = INFINITY;
        for (int q = 1; q + q <= h; q++)
            if (best[q] + best[h - q] < split) split = best[q] + best[h - q];
        if (!t->known[h - 1]) {
            if (split <= t->band[h - 1]) {
                t->band[h - 1] = INFINITY;
                t->known[h - 1] = 1;
            } else {
                int rc = cover_row(t, h);
                if (rc) return rc;
            }
        }
        best[h] = t->band[h - 1] < split ? t->band[h - 1] : split;
    }
    return AT_OK;
}

/* Rounds of the lazy search before every row is covered: a 256^3 block takes two. */
#define AT_LAZY_ROUNDS 4

/* Tile an m x n block with the tiler's grid: append its steps (relative
 * coordinates). */
int at__tiler_tile(at_tiler *t, int64_t m, int64_t n, at_steps *out, double *seconds)
{
    const at_grid *g = t->g;
    at_cover mc;
    memset(&mc, 0, sizeof mc);
    int rc = rows_for(t, n);
    if (rc) return rc;
    int PH = m < g->H ? (int)m : g->H;
    for (int round = 0;; round++) {
        int32_t *parts = t->exhaustive ? t->all : t->kept;
        int np = t->exhaustive ? g->H : useful_parts(PH, t->band, t->kept, t->f);
        rc = cover(m, g->H, t->band, parts, np, !t->exhaustive, &mc);
        if (rc) goto done;
        /* The heights it uses whose bands are only bounded. */
        int pending = 0;
        for (int64_t k = mc.reps ? -1 : 0; k < mc.ntail; k++) {
            int h = k < 0 ? mc.rep : mc.tail[k];
            if (t->known[h - 1]) continue;
            if ((rc = cover_row(t, h))) goto done;
            pending = 1;
        }
        if (!pending) break;
        free(mc.tail);
        memset(&mc, 0, sizeof mc);
        if (round + 1 == AT_LAZY_ROUNDS && (rc = cover_all_rows(t))) goto done;
    }
    *seconds = mc.cost;
    int64_t i0 = 0;
    for (int64_t bi = 0; bi < cover_count(&mc); bi++) {
        int h = cover_part(&mc, bi);
        const at_cover *rc_ = &t->rows[h - 1];
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
    free(mc.tail);
    return rc;
}

int at__tile_block(const at_grid *g, int64_t m, int64_t n, at_steps *out, double *seconds)
{
    at_tiler *t = at__tiler_new(g, 0);
    if (!t) return AT_ENOMEM;
    int rc = at__tiler_tile(t, m, n, out, seconds);
    at__tiler_free(t);
    return rc;
}
