/* sme2_exec_t.h: the SME2 executor's body for one element type, included by
 * sme2_exec.c with AT_T, AT_KFN (normal kernel pointer), AT_KFN_S (streaming
 * kernel pointer), AT_PACK_T_S (streaming transposing pack) and AT_FN(name). */

typedef struct {
    const at_plan *p;
    int t;
    const AT_T *A, *B;
    AT_T *C;
    AT_T alpha, beta;
    AT_T *ga, *gb;       /* the packed path's block panels */
    int64_t gald, gbld;  /* their leading dims (multiples of VL) */
    AT_T *ka, *kb;       /* the kernels' operand panels */
    /* No-pack path: per step of the share, the panel of op(A) (op(B)) it reads,
     * as an index into pan[0] (pan[1]), or -1 when its kernel reads in place. */
    int32_t *slot[2];
    at_panel *pan[2];
} AT_FN(sme2_ctx);

/* dst[x + q*ldd] for x < n, q < K from the operand element (x, q), which is at
 * src[x + q*ld] when xc (x contiguous: a copy) and at src[q + x*ld] otherwise
 * (the transposing pack through ZA); zero for n <= x < ldd.  ldd is a multiple
 * of VL.  Plain loops: the compiler keeps them streaming-legal. */
static void AT_FN(to_panel)(AT_T *dst, int64_t ldd, const AT_T *src, int64_t ld, int xc,
                            int64_t n, int64_t K) __arm_streaming
{
    if (!xc) {
        AT_PACK_T_S(K, n, src, ld, dst, ldd);
        return;
    }
    for (int64_t q = 0; q < K; q++) {
        const AT_T *s = src + q * ld;
        AT_T *d = dst + q * ldd;
        for (int64_t x = 0; x < n; x++) d[x] = s[x];
        for (int64_t x = n; x < ldd; x++) d[x] = 0;
    }
}

#define AT_EDGE_FN AT_FN(edge_s)
#define AT_EDGE_ATTR __arm_streaming
#include "edge_t.h"
#undef AT_EDGE_FN
#undef AT_EDGE_ATTR

/* A step's block for a streaming entry's last argument (x7): rows | columns << 32. */
static inline int64_t AT_FN(extent)(const at_step *x) __arm_streaming
{
    return (int64_t)((uint64_t)(uint32_t)x->mb | (uint64_t)(uint32_t)x->nb << 32);
}

/* Steps [s0, s1) on operands of formats ta / tb whose origin is the block's.
 * A packed-format kernel gets its panel.  On the no-pack path (cx->slot set)
 * every distinct panel of the share has its own place, packed the first time a
 * step reads it: each operand is packed once per call, however many row bands
 * (column bands) read it.  On the packed path the panel is packed again only
 * when the step reads other rows (columns) than the previous step's. */
static void AT_FN(steps_s)(AT_FN(sme2_ctx) *cx, const at_step *st, int64_t s0, int64_t s1,
                           int64_t K, const AT_T *A, int64_t lda, int ta, const AT_T *B,
                           int64_t ldb, int tb, AT_T *C, int64_t ldc, AT_T alpha,
                           AT_T beta) __arm_streaming
{
    if (cx->slot[0]) {
        for (int64_t s = s0; s < s1; s++) {
            const at_step *x = &st[s];
            const AT_T *a = ta ? A + x->i0 * lda : A + x->i0;
            const AT_T *b = tb ? B + x->j0 : B + x->j0 * ldb;
            AT_T *c = C + x->i0 + x->j0 * ldc;
            if (x->kernel < 0) {
                AT_FN(edge_s)(K, a, lda, ta, b, ldb, tb, c, ldc, x->mb, x->nb, alpha, beta);
                continue;
            }
            const at_kernel *k = &at_kernel_table[x->kernel].kernel;
            const AT_T *ka = a, *kb = b;
            int64_t klda = lda, kldb = ldb;
            int32_t ia = cx->slot[0][s - s0], ib = cx->slot[1][s - s0];
            if (ia >= 0) {
                at_panel *q = &cx->pan[0][ia];
                if (!q->packed) {
                    AT_FN(to_panel)(cx->ka + q->offset, q->ld, a, lda, !ta, x->mb, K);
                    q->packed = 1;
                }
                ka = cx->ka + q->offset;
                klda = q->ld;
            }
            if (ib >= 0) {
                at_panel *q = &cx->pan[1][ib];
                if (!q->packed) {
                    AT_FN(to_panel)(cx->kb + q->offset, q->ld, b, ldb, tb, x->nb, K);
                    q->packed = 1;
                }
                kb = cx->kb + q->offset;
                kldb = q->ld;
            }
            if (k->fn_s)
                ((AT_KFN_S)k->fn_s)(K, ka, klda, kb, kldb, c, ldc, alpha, beta, AT_FN(extent)(x));
            else /* not a streaming kernel: the compiler leaves streaming mode around it */
                ((AT_KFN)k->fn)(K, ka, klda, kb, kldb, c, ldc, alpha, beta);
        }
        return;
    }
    const AT_T *last_a = NULL, *last_b = NULL;
    int64_t last_an = -1, last_bn = -1, last_ald = -1, last_bld = -1;
    for (int64_t s = s0; s < s1; s++) {
        const at_step *x = &st[s];
        const AT_T *a = ta ? A + x->i0 * lda : A + x->i0;
        const AT_T *b = tb ? B + x->j0 : B + x->j0 * ldb;
        AT_T *c = C + x->i0 + x->j0 * ldc;
        if (x->kernel < 0) {
            AT_FN(edge_s)(K, a, lda, ta, b, ldb, tb, c, ldc, x->mb, x->nb, alpha, beta);
            continue;
        }
        const at_kernel *k = &at_kernel_table[x->kernel].kernel;
        const AT_T *ka = a, *kb = b;
        int64_t klda = lda, kldb = ldb;
        if (k->pack_a_ld > 0) {
            if (a != last_a || x->mb != last_an || k->pack_a_ld != last_ald) {
                AT_FN(to_panel)(cx->ka, k->pack_a_ld, a, lda, !ta, x->mb, K);
                last_a = a;
                last_an = x->mb;
                last_ald = k->pack_a_ld;
            }
            ka = cx->ka;
            klda = k->pack_a_ld;
        }
        if (k->pack_b_ld > 0) {
            if (b != last_b || x->nb != last_bn || k->pack_b_ld != last_bld) {
                AT_FN(to_panel)(cx->kb, k->pack_b_ld, b, ldb, tb, x->nb, K);
                last_b = b;
                last_bn = x->nb;
                last_bld = k->pack_b_ld;
            }
            kb = cx->kb;
            kldb = k->pack_b_ld;
        }
        if (k->fn_s)
            ((AT_KFN_S)k->fn_s)(K, ka, klda, kb, kldb, c, ldc, alpha, beta, AT_FN(extent)(x));
        else /* not a streaming kernel: the compiler leaves streaming mode around it */
            ((AT_KFN)k->fn)(K, ka, klda, kb, kldb, c, ldc, alpha, beta);
    }
}

/* The streaming region's body: thread t's share, as exec_t.h's run_part walks
 * it (the same blocks, K slices and steps in the same order). */
static void AT_FN(sme2_body)(void *ctx) __arm_streaming
{
    AT_FN(sme2_ctx) *cx = ctx;
    const at_plan *p = cx->p;
    int64_t first = p->thread_start[cx->t], last = p->thread_start[cx->t + 1];
    if (p->info.path == 0) {
        AT_FN(steps_s)(cx, p->steps, first, last, p->K, cx->A, p->lda, p->ta, cx->B, p->ldb,
                       p->tb, cx->C, p->ldc, cx->alpha, cx->beta);
        return;
    }
    int64_t bk = p->info.blk_k, lda = p->lda, ldb = p->ldb;
    int fa = p->ktrans_a, fb = p->ktrans_b, ta = p->ta, tb = p->tb;
    for (int64_t g0 = first; g0 < last;) {
        int64_t g1 = g0 + 1;
        while (g1 < last && p->blocks[g1].j0 == p->blocks[g0].j0) g1++;
        for (int64_t p0 = 0; p0 < p->K; p0 += bk) {
            int64_t kb = p->K - p0 < bk ? p->K - p0 : bk;
            AT_T be = p0 == 0 ? cx->beta : (AT_T)1;
            const at_block *b0 = &p->blocks[g0];
            /* op(B)[p0.., j0..]: format fb = 1 keeps j contiguous, fb = 0 keeps p. */
            const AT_T *bs = tb ? cx->B + b0->j0 + p0 * ldb : cx->B + p0 + b0->j0 * ldb;
            if (fb)
                AT_FN(to_panel)(cx->gb, cx->gbld, bs, ldb, tb, b0->nb, kb);
            else
                AT_FN(to_panel)(cx->gb, cx->gbld, bs, ldb, !tb, kb, b0->nb);
            for (int64_t g = g0; g < g1; g++) {
                const at_block *bl = &p->blocks[g];
                const at_tiling *ti = &p->tilings[bl->tiling];
                const AT_T *as = ta ? cx->A + p0 + bl->i0 * lda : cx->A + bl->i0 + p0 * lda;
                if (fa)
                    AT_FN(to_panel)(cx->ga, cx->gald, as, lda, ta, kb, bl->mb);
                else
                    AT_FN(to_panel)(cx->ga, cx->gald, as, lda, !ta, bl->mb, kb);
                AT_FN(steps_s)(cx, p->steps, ti->first, ti->first + ti->count, kb, cx->ga,
                               cx->gald, fa, cx->gb, cx->gbld, fb, cx->C + bl->i0 + bl->j0 * p->ldc,
                               p->ldc, cx->alpha, be);
            }
        }
        g0 = g1;
    }
}

AT_NORMAL_MODE int AT_FN(at__sme2_part)(const at_plan *p, int t, const AT_T *A, const AT_T *B, AT_T *C,
                         AT_T alpha, AT_T beta)
{
    int64_t first = p->thread_start[t], last = p->thread_start[t + 1];
    if (first == last) return AT_OK;
    int64_t vl = at__svl_bytes() / (int64_t)sizeof(AT_T);
    if (vl < 1) vl = 1;
    AT_FN(sme2_ctx) cx = {p, t, A, B, C, alpha, beta, NULL, NULL, 0, 0, NULL, NULL, {NULL, NULL}, {NULL, NULL}};
    /* Everything that allocates happens here, before the streaming region. */
    int64_t s0 = first, s1 = last, kmax = p->K;
    if (p->info.path != 0) {
        s0 = 0;
        s1 = p->nsteps;
        kmax = p->info.blk_k;
    }
    int64_t pa = 0, pb = 0, streaming = 0;
    for (int64_t s = s0; s < s1; s++) {
        int k = p->steps[s].kernel;
        if (k < 0) continue;
        const at_kernel *d = &at_kernel_table[k].kernel;
        if (d->pack_a_ld > pa) pa = d->pack_a_ld;
        if (d->pack_b_ld > pb) pb = d->pack_b_ld;
        streaming += d->fn_s != NULL;
    }
    if (!streaming) return AT_SME2_DECLINED;
    int64_t ka_elems = pa * kmax, kb_elems = pb * kmax;
    void *index = NULL;
    if (p->info.path != 0) {
        int64_t bm = p->info.blk_m, bn = p->info.blk_n, bk = p->info.blk_k;
        cx.gald = p->ktrans_a ? round_up(bk, vl) : round_up(bm, vl);
        cx.gbld = p->ktrans_b ? round_up(bn, vl) : round_up(bk, vl);
        cx.ga = panel_alloc(cx.gald * (p->ktrans_a ? bm : bk), sizeof(AT_T));
        cx.gb = panel_alloc(cx.gbld * (p->ktrans_b ? bk : bn), sizeof(AT_T));
    } else if (pa || pb) {
        /* The share's distinct panels, each packed once in the region. */
        int64_t ns = s1 - s0;
        /* Panels, the steps' slots, and per side a list head per first row
         * (column) of a panel: at__sme2_panels' lookup. */
        index = malloc(sizeof(at_panel) * 2 * (size_t)ns +
                       sizeof(int32_t) * (2 * (size_t)ns + (size_t)(p->M + p->N + 2)));
        if (!index) return AT_ENOMEM;
        cx.pan[0] = index;
        cx.pan[1] = cx.pan[0] + ns;
        cx.slot[0] = (int32_t *)(cx.pan[1] + ns);
        cx.slot[1] = cx.slot[0] + ns;
        int32_t *head = cx.slot[1] + ns;
        ka_elems = at__sme2_panels(p, s0, s1, 0, cx.slot[0], cx.pan[0], head);
        kb_elems = at__sme2_panels(p, s0, s1, 1, cx.slot[1], cx.pan[1], head + p->M + 1);
    }
    cx.ka = panel_alloc(ka_elems, sizeof(AT_T));
    cx.kb = panel_alloc(kb_elems, sizeof(AT_T));
    int rc = AT_OK;
    if ((p->info.path != 0 && (!cx.ga || !cx.gb)) || (ka_elems > 0 && !cx.ka) ||
        (kb_elems > 0 && !cx.kb))
        rc = AT_ENOMEM;
    else
        at__sme2_region(AT_FN(sme2_body), &cx);
    free(cx.ga);
    free(cx.gb);
    free(cx.ka);
    free(cx.kb);
    free(index);
    return rc;
}
