/* cover_check.c: the tiler's cover search on cost grids given on stdin, bounded
 * and exhaustive side by side (tests/test_cover_search.py builds and runs it with
 * kernels_src/runtime/cover.c).
 *
 * Input, repeated until end of file: "H W", then H x W lines "kid seconds" (row
 * by row, as at_grid holds them), then "Q" and Q lines "m n".  Output, one line per
 * query: "m n exhaustive bounded ok", the predicted seconds of both searches and
 * whether both tilings cover the m x n block exactly once with the grid's own
 * cells and add up to the seconds they report (1) or not (0).  One tiler per
 * search serves all queries of a grid, as a packed plan's blocks share one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_planner.h"

/* The steps tile [0, m) x [0, n) exactly, name the grid's kernel for their size,
 * and their cells' seconds add up to what the search reported. */
static int valid(const at_grid *g, int64_t m, int64_t n, const at_steps *s, double seconds)
{
    double sum = 0, area = 0;
    unsigned char *seen = m * n <= (1 << 22) ? calloc((size_t)(m > 0 && n > 0 ? m * n : 1), 1) : NULL;
    int ok = 1;
    for (int64_t k = 0; k < s->n && ok; k++) {
        const at_step *st = &s->v[k];
        if (st->mb < 1 || st->mb > g->H || st->nb < 1 || st->nb > g->W || st->i0 < 0 || st->j0 < 0 ||
            st->i0 + st->mb > m || st->j0 + st->nb > n) {
            ok = 0;
            break;
        }
        size_t c = (size_t)(st->mb - 1) * g->W + (st->nb - 1);
        ok = st->kernel == g->kid[c];
        sum += g->sec[c];
        area += (double)st->mb * st->nb;
        if (seen)
            for (int64_t i = st->i0; i < st->i0 + st->mb && ok; i++)
                for (int64_t j = st->j0; j < st->j0 + st->nb; j++) {
                    if (seen[i * n + j]++) ok = 0;
                }
    }
    free(seen);
    return ok && area == (double)m * (double)n && fabs(sum - seconds) <= 1e-9 * fabs(seconds);
}

int main(void)
{
    int H, W;
    while (scanf("%d %d", &H, &W) == 2) {
        at_grid g = {H, W, malloc(sizeof(int32_t) * (size_t)(H * W)), malloc(sizeof(double) * (size_t)(H * W))};
        if (!g.kid || !g.sec) return 3;
        for (int c = 0; c < H * W; c++)
            if (scanf("%d %lf", &g.kid[c], &g.sec[c]) != 2) return 2;
        at_tiler *tiler[2] = {at__tiler_new(&g, 1), at__tiler_new(&g, 0)};
        if (!tiler[0] || !tiler[1]) return 3;
        int q;
        if (scanf("%d", &q) != 1) return 2;
        while (q--) {
            long long m, n;
            if (scanf("%lld %lld", &m, &n) != 2) return 2;
            double sec[2] = {0, 0};
            int ok = 1;
            for (int e = 0; e < 2; e++) {
                at_steps st = {0};
                if (at__tiler_tile(tiler[e], m, n, &st, &sec[e])) return 3;
                ok = ok && valid(&g, m, n, &st, sec[e]);
                free(st.v);
            }
            printf("%lld %lld %.17g %.17g %d\n", m, n, sec[0], sec[1], ok);
        }
        at__tiler_free(tiler[0]);
        at__tiler_free(tiler[1]);
        free(g.kid);
        free(g.sec);
    }
    return 0;
}
