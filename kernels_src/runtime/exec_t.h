/* exec_t.h: the executor's body for one element type, included by exec.c with
 * AT_T (float or double), AT_KFN (the kernel pointer type) and AT_FN(name). */

/* C = beta * C over an m x n column-major block; beta == 0 stores zeros so a C
 * full of NaN never leaks into the result. */
static void AT_FN(scale)(int64_t m, int64_t n, AT_T *C, int64_t ldc, AT_T beta)
{
    if (beta == (AT_T)1) return;
    for (int64_t j = 0; j < n; j++) {
        AT_T *c = C + j * ldc;
        if (beta == (AT_T)0)
            for (int64_t i = 0; i < m; i++) c[i] = 0;
        else
            for (int64_t i = 0; i < m; i++) c[i] *= beta;
    }
}

/* Portable code for block sizes no kernel covers, with the kernel ABI's
 * semantics (sequential sum over p, beta == 0 never reads C). */
static void AT_FN(edge)(int64_t K, const AT_T *A, int64_t lda, int ta, const AT_T *B,
                        int64_t ldb, int tb, AT_T *C, int64_t ldc, int mb, int nb, AT_T alpha,
                        AT_T beta)
{
    for (int j = 0; j < nb; j++)
        for (int i = 0; i < mb; i++) {
            AT_T s = 0;
            for (int64_t p = 0; p < K; p++) {
                AT_T a = ta ? A[p + i * lda] : A[i + p * lda];
                AT_T b = tb ? B[j + p * ldb] : B[p + j * ldb];
                s += a * b;
            }
            AT_T *c = &C[i + j * ldc];
            *c = beta == (AT_T)0 ? alpha * s : alpha * s + beta * *c;
        }
}

/* Runs steps [s0, s1) on operands whose block origin is (i_off, j_off).  Inlined
 * into its callers: at 2x2x2 a call and its 14 arguments cost as much as the kernel. */
static inline __attribute__((always_inline)) void AT_FN(run_steps)(const at_step *st, int64_t s0, int64_t s1, int64_t K, const AT_T *A,
                             int64_t lda, int ta, const AT_T *B, int64_t ldb, int tb, AT_T *C,
                             int64_t ldc, AT_T alpha, AT_T beta)
{
    for (int64_t s = s0; s < s1; s++) {
        const at_step *x = &st[s];
        const AT_T *a = ta ? A + x->i0 * lda : A + x->i0;
        const AT_T *b = tb ? B + x->j0 : B + x->j0 * ldb;
        AT_T *c = C + x->i0 + x->j0 * ldc;
        if (x->kernel >= 0)
            ((AT_KFN)at_kernel_table[x->kernel].fn)(K, a, lda, b, ldb, c, ldc, alpha, beta);
        else
            AT_FN(edge)(K, a, lda, ta, b, ldb, tb, c, ldc, x->mb, x->nb, alpha, beta);
    }
}

/* op(A)[i0 : i0+mb, p0 : p0+kb] into a panel of format fa (0: column-major mb x kb,
 * 1: its transpose), walking the source contiguously. */
static void AT_FN(pack_a)(const AT_T *A, int64_t lda, int ta, int64_t i0, int64_t p0, int64_t mb,
                          int64_t kb, AT_T *dst, int fa)
{
    if (!ta) {
        for (int64_t p = 0; p < kb; p++) {
            const AT_T *src = A + i0 + (p0 + p) * lda;
            if (!fa)
                memcpy(dst + p * mb, src, sizeof(AT_T) * (size_t)mb);
            else
                for (int64_t i = 0; i < mb; i++) dst[p + i * kb] = src[i];
        }
    } else {
        for (int64_t i = 0; i < mb; i++) {
            const AT_T *src = A + p0 + (i0 + i) * lda;
            if (fa)
                memcpy(dst + i * kb, src, sizeof(AT_T) * (size_t)kb);
            else
                for (int64_t p = 0; p < kb; p++) dst[i + p * mb] = src[p];
        }
    }
}

/* op(B)[p0 : p0+kb, j0 : j0+nb] into format fb (0: column-major kb x nb, 1: transpose). */
static void AT_FN(pack_b)(const AT_T *B, int64_t ldb, int tb, int64_t p0, int64_t j0, int64_t kb,
                          int64_t nb, AT_T *dst, int fb)
{
    if (!tb) {
        for (int64_t j = 0; j < nb; j++) {
            const AT_T *src = B + p0 + (j0 + j) * ldb;
            if (!fb)
                memcpy(dst + j * kb, src, sizeof(AT_T) * (size_t)kb);
            else
                for (int64_t p = 0; p < kb; p++) dst[j + p * nb] = src[p];
        }
    } else {
        for (int64_t p = 0; p < kb; p++) {
            const AT_T *src = B + j0 + (p0 + p) * ldb;
            if (fb)
                memcpy(dst + p * nb, src, sizeof(AT_T) * (size_t)nb);
            else
                for (int64_t j = 0; j < nb; j++) dst[p + j * kb] = src[j];
        }
    }
}

/* Micro-panel formats (Goto's packing).  A kernel reading a whole-block panel
 * of format fa == 0 steps mb elements per k, and one of format fb == 1 nb: at
 * fp64 352 x 864 that is 2.8 KB per k, a new page every page/stride k steps, so
 * one mr x kb sliver spans hundreds of pages and the L2 streamer (which stops
 * at page edges) never gets going; and a stride of a multiple of 2 KiB (fp32
 * blk_n 512) puts a whole micro-panel in 2 of L1's 64 sets (fp32 1024^3 fell
 * from 220 to 152 GFLOPS).  Instead each row band of A (height h, from
 * the tiling) is stored alone, column-major with leading dimension h, at
 * i0 * kb; each column band of B (width w) row-major with leading dimension w at
 * j0 * kb: a kernel's operands are then contiguous h*kb and kb*w runs.  The other
 * two formats already store bands contiguously at the same offsets.  The kernel
 * does the same arithmetic whatever its leading dimensions: the bits do not change. */

/* The row bands of a tiling: a band opens at each step with j0 == 0 (tile_block
 * emits bands in order, every step of a band of its height).  Returns the count. */
static int64_t AT_FN(row_bands)(const at_step *st, int64_t first, int64_t count, int32_t *bi0,
                                int32_t *bh)
{
    int64_t n = 0;
    for (int64_t s = first; s < first + count; s++)
        if (st[s].j0 == 0) {
            bi0[n] = (int32_t)st[s].i0;
            bh[n++] = st[s].mb;
        }
    return n;
}

/* op(A)[i0 : i0+mb, p0 : p0+kb] as the bands (bi0, bh) in micro-panel format 0. */
static void AT_FN(pack_a_bands)(const AT_T *A, int64_t lda, int ta, int64_t i0, int64_t p0,
                                int64_t kb, AT_T *dst, int64_t nbands, const int32_t *bi0,
                                const int32_t *bh)
{
    if (!ta) {
        /* Source columns are contiguous: read each once, scatter into the bands. */
        for (int64_t p = 0; p < kb; p++) {
            const AT_T *src = A + i0 + (p0 + p) * lda;
            for (int64_t b = 0; b < nbands; b++) {
                int64_t h = bh[b];
                AT_T *d = dst + (int64_t)bi0[b] * kb + p * h;
                /* memcpy: the library is built at -O2, where gcc leaves a copy
                 * of run-time length scalar. */
                memcpy(d, src + bi0[b], sizeof(AT_T) * (size_t)h);
            }
        }
    } else {
        /* Rows of op(A) are contiguous: walk the h of a band side by side so the
         * stores run contiguously (scattered stores cost more than h read streams). */
        for (int64_t b = 0; b < nbands; b++) {
            int64_t h = bh[b];
            AT_T *d = dst + (int64_t)bi0[b] * kb;
            const AT_T *src = A + p0 + (i0 + bi0[b]) * lda;
            for (int64_t p = 0; p < kb; p++)
                for (int64_t i = 0; i < h; i++) d[i + p * h] = src[p + i * lda];
        }
    }
}

/* op(B)[p0 : p0+kb, j0 : j0+nb] as the column bands of width bw[j] (0 inside a
 * band) in micro-panel format 1. */
static void AT_FN(pack_b_bands)(const AT_T *B, int64_t ldb, int tb, int64_t p0, int64_t j0,
                                int64_t kb, int64_t nb, AT_T *dst, const int32_t *bw)
{
    for (int64_t c = 0; c < nb; c += bw[c]) {
        int64_t w = bw[c];
        AT_T *d = dst + c * kb;
        if (!tb) {
            /* w column streams read side by side, stores contiguous: the store-
             * per-32-bytes order (column by column) made packing B cost 6% of
             * a 1024^3 fp32 product. */
            const AT_T *src = B + p0 + (j0 + c) * ldb;
            for (int64_t p = 0; p < kb; p++)
                for (int64_t j = 0; j < w; j++) d[j + p * w] = src[p + j * ldb];
        } else {
            for (int64_t p = 0; p < kb; p++) {
                const AT_T *src = B + j0 + c + (p0 + p) * ldb;
                for (int64_t j = 0; j < w; j++) d[j + p * w] = src[j];
            }
        }
    }
}

/* Steps [s0, s1) on micro-panels: A's band at i0 * kb, B's at j0 * kb (for B
 * whole-panel format 1, bandb == 0: column j0 of a panel of leading dimension ldpb). */
static inline __attribute__((always_inline)) void AT_FN(run_panels)(
    const at_step *st, int64_t s0, int64_t s1, int64_t kb, const AT_T *pa, int fa,
    const AT_T *pb, int fb, int bandb, int64_t ldpb, AT_T *C, int64_t ldc, AT_T alpha, AT_T beta)
{
    for (int64_t s = s0; s < s1; s++) {
        const at_step *x = &st[s];
        const AT_T *a = pa + x->i0 * kb;
        int64_t lda = fa ? kb : x->mb;
        const AT_T *b;
        int64_t ldb;
        if (!fb) {
            b = pb + x->j0 * kb;
            ldb = kb;
        } else if (bandb) {
            b = pb + x->j0 * kb;
            ldb = x->nb;
        } else {
            b = pb + x->j0;
            ldb = ldpb;
        }
        AT_T *c = C + x->i0 + x->j0 * ldc;
        if (x->kernel >= 0)
            ((AT_KFN)at_kernel_table[x->kernel].fn)(kb, a, lda, b, ldb, c, ldc, alpha, beta);
        else
            AT_FN(edge)(kb, a, lda, fa, b, ldb, fb, c, ldc, x->mb, x->nb, alpha, beta);
    }
}

/* Thread t's share of one problem.  Returns AT_ENOMEM if its panels cannot be had. */
static int AT_FN(run_part)(const at_plan *p, int t, const AT_T *A, const AT_T *B, AT_T *C,
                           AT_T alpha, AT_T beta)
{
#ifdef AT_SME2_EXEC
    /* An SME2 library runs each share that calls SME2 kernels in one streaming
     * region (sme2_exec.c); a share without any stays in normal mode, here. */
    int sme = AT_FN(at__sme2_part)(p, t, A, B, C, alpha, beta);
    if (sme != AT_SME2_DECLINED) return sme;
#endif
    int64_t first = p->thread_start[t], last = p->thread_start[t + 1];
    if (p->info.path == 0) {
        AT_FN(run_steps)(p->steps, first, last, p->K, A, p->lda, p->ta, B, p->ldb, p->tb, C,
                         p->ldc, alpha, beta);
        return AT_OK;
    }
    if (first == last) return AT_OK;
    int64_t bm = p->info.blk_m, bn = p->info.blk_n, bk = p->info.blk_k;
    /* 64-byte alignment keeps panel columns on cache-line boundaries. */
    size_t asz = ((sizeof(AT_T) * (size_t)(bm * bk) + 63) / 64) * 64;
    size_t bsz = ((sizeof(AT_T) * (size_t)(bk * bn) + 63) / 64) * 64;
    AT_T *pa = aligned_alloc(64, asz), *pb = aligned_alloc(64, bsz);
    /* Band lists: at most one row band per row of a block, one width per column. */
    int32_t *bi0 = malloc(sizeof *bi0 * (size_t)(2 * bm + bn));
    if (!pa || !pb || !bi0) {
        free(pa);
        free(pb);
        free(bi0);
        return AT_ENOMEM;
    }
    int32_t *bh = bi0 + bm, *bw = bi0 + 2 * bm;
    int fa = p->ktrans_a, fb = p->ktrans_b;
    /* Blocks of one column panel are consecutive: B's panel is packed once per K
     * slice for all of them; the K slices run in order, so every element of C is
     * accumulated in the same order whichever thread computes it. */
    for (int64_t g0 = first; g0 < last;) {
        int64_t g1 = g0 + 1;
        while (g1 < last && p->blocks[g1].j0 == p->blocks[g0].j0) g1++;
        const at_block *b0 = &p->blocks[g0];
        /* B's panel is shared by blocks whose tilings may cut N differently
         * (the cut depends on the band height): B goes in bands only when every
         * step of the group starts and ends on the first row band's cut. */
        int bandb = 0;
        if (fb) {
            const at_tiling *t0 = &p->tilings[b0->tiling];
            memset(bw, 0, sizeof *bw * (size_t)b0->nb);
            for (int64_t s = t0->first; s < t0->first + t0->count && p->steps[s].i0 == 0; s++)
                bw[p->steps[s].j0] = p->steps[s].nb;
            bandb = 1;
            for (int64_t g = g0; bandb && g < g1; g++) {
                const at_tiling *ti = &p->tilings[p->blocks[g].tiling];
                for (int64_t s = ti->first; s < ti->first + ti->count; s++)
                    if (bw[p->steps[s].j0] != p->steps[s].nb) {
                        bandb = 0;
                        break;
                    }
            }
        }
        for (int64_t p0 = 0; p0 < p->K; p0 += bk) {
            int64_t kb = p->K - p0 < bk ? p->K - p0 : bk;
            AT_T be = p0 == 0 ? beta : (AT_T)1;
            if (bandb)
                AT_FN(pack_b_bands)(B, p->ldb, p->tb, p0, b0->j0, kb, b0->nb, pb, bw);
            else
                AT_FN(pack_b)(B, p->ldb, p->tb, p0, b0->j0, kb, b0->nb, pb, fb);
            for (int64_t g = g0; g < g1; g++) {
                const at_block *bl = &p->blocks[g];
                const at_tiling *ti = &p->tilings[bl->tiling];
                if (fa)
                    AT_FN(pack_a)(A, p->lda, p->ta, bl->i0, p0, bl->mb, kb, pa, fa);
                else {
                    int64_t nbands = AT_FN(row_bands)(p->steps, ti->first, ti->count, bi0, bh);
                    AT_FN(pack_a_bands)(A, p->lda, p->ta, bl->i0, p0, kb, pa, nbands, bi0, bh);
                }
                AT_FN(run_panels)(p->steps, ti->first, ti->first + ti->count, kb, pa, fa, pb, fb,
                                  bandb, b0->nb, C + bl->i0 + bl->j0 * p->ldc, p->ldc, alpha, be);
            }
        }
        g0 = g1;
    }
    free(pa);
    free(pb);
    free(bi0);
    return AT_OK;
}

/* One whole problem: the BLAS special cases, then the plan's parts [t0, t1). */
static int AT_FN(run_item)(const at_plan *p, int t0, int t1, const void *A, const void *B,
                           void *C, double alpha, double beta)
{
    AT_T a = (AT_T)alpha, b = (AT_T)beta;
    if (p->M == 0 || p->N == 0) return AT_OK;
    if (p->K == 0 || a == (AT_T)0) {
        /* alpha == 0 reads neither A nor B, as the reference BLAS. */
        if (t0 == 0) AT_FN(scale)(p->M, p->N, (AT_T *)C, p->ldc, b);
        return AT_OK;
    }
    int rc = AT_OK;
    for (int t = t0; t < t1; t++) {
        int r = AT_FN(run_part)(p, t, (const AT_T *)A, (const AT_T *)B, (AT_T *)C, a, b);
        if (r) rc = r;
    }
    return rc;
}

/* One problem on a one-thread plan (batch 1): run_item's work with no job, no
 * share loop and no pool; a no-pack plan goes straight to its steps. */
static int AT_FN(run_one)(const at_plan *p, const void *A, const void *B, void *C, double alpha,
                          double beta)
{
    AT_T a = (AT_T)alpha, b = (AT_T)beta;
    if (p->info.layout == AT_ROW_MAJOR) {
        /* The plan computes C^T = op(B)^T op(A)^T: the operands trade places. */
        const void *t = A;
        A = B;
        B = t;
    }
    if (p->K == 0 || a == (AT_T)0) {
        /* alpha == 0 reads neither A nor B, as the reference BLAS. */
        AT_FN(scale)(p->M, p->N, (AT_T *)C, p->ldc, b);
        return AT_OK;
    }
#ifndef AT_SME2_EXEC
    /* (An SME2 library keeps run_part: it decides whether a share runs in a
     * streaming region.) */
    if (p->info.path == 0) {
        AT_FN(run_steps)(p->steps, p->thread_start[0], p->thread_start[p->info.threads], p->K,
                         (const AT_T *)A, p->lda, p->ta, (const AT_T *)B, p->ldb, p->tb,
                         (AT_T *)C, p->ldc, a, b);
        return AT_OK;
    }
#endif
    int rc = AT_OK;
    for (int t = 0; t < p->info.threads; t++) {
        int r = AT_FN(run_part)(p, t, (const AT_T *)A, (const AT_T *)B, (AT_T *)C, a, b);
        if (r) rc = r;
    }
    return rc;
}

/* Items [lo, hi) of job j, each with every share of the plan in turn: what
 * run_item does per item, with the BLAS special cases, the row-major swap and
 * the dtype decided once for the whole range.  A no-pack plan runs its steps
 * straight from here, and a plan of a few kernel steps calls its kernels
 * directly per item.  The kernel calls and their arguments
 * are exactly run_item's, so the bits are too. */
static int AT_FN(run_items)(const at_job *j, int64_t lo, int64_t hi)
{
    const at_plan *p = j->p;
    AT_T a = (AT_T)j->alpha, b = (AT_T)j->beta;
    /* The plan computes C^T = op(B)^T op(A)^T for row-major: operands trade places. */
    int swap = p->info.layout == AT_ROW_MAJOR;
    const void *const *Ap = swap ? j->B : j->A, *const *Bp = swap ? j->A : j->B;
    const char *A0 = swap ? j->B0 : j->A0, *B0 = swap ? j->A0 : j->B0;
    int64_t sa = swap ? j->sb : j->sa, sb = swap ? j->sa : j->sb, sc = j->sc;
    if (p->K == 0 || a == (AT_T)0) {
        /* alpha == 0 reads neither A nor B, as the reference BLAS. */
        for (int64_t i = lo; i < hi; i++)
            AT_FN(scale)(p->M, p->N, (AT_T *)(j->C ? j->C[i] : j->C0 + i * sc), p->ldc, b);
        return AT_OK;
    }
#ifndef AT_SME2_EXEC
    /* (An SME2 library keeps the generic walk below: its shares may run in a
     * streaming region, which run_part decides.) */
    if (p->info.path == 0) {
        const at_step *st = p->steps;
        int64_t s0 = p->thread_start[0], s1 = p->thread_start[p->info.threads];
        int64_t K = p->K, lda = p->lda, ldb = p->ldb, ldc = p->ldc;
        int ta = p->ta, tb = p->tb;
        /* A plan of a few kernel steps (every small product) resolves each step's
         * kernel and operand offsets once for the whole range, so an item costs
         * its kernel calls and nothing else. */
        enum { AT_DIRECT_STEPS = 16 };
        int64_t ns = s1 - s0;
        int direct = ns <= AT_DIRECT_STEPS;
        for (int64_t s = s0; direct && s < s1; s++) direct = st[s].kernel >= 0;
        if (direct) {
            AT_KFN fn[AT_DIRECT_STEPS];
            int64_t oa[AT_DIRECT_STEPS], ob[AT_DIRECT_STEPS], oc[AT_DIRECT_STEPS];
            for (int64_t s = 0; s < ns; s++) {
                const at_step *x = &st[s0 + s];
                fn[s] = (AT_KFN)at_kernel_table[x->kernel].fn;
                oa[s] = ta ? x->i0 * lda : x->i0;
                ob[s] = tb ? x->j0 : x->j0 * ldb;
                oc[s] = x->i0 + x->j0 * ldc;
            }
            for (int64_t i = lo; i < hi; i++) {
                const AT_T *x = Ap ? (const AT_T *)Ap[i] : (const AT_T *)(A0 + i * sa);
                const AT_T *y = Bp ? (const AT_T *)Bp[i] : (const AT_T *)(B0 + i * sb);
                AT_T *z = j->C ? (AT_T *)j->C[i] : (AT_T *)(j->C0 + i * sc);
                if (ns == 1)
                    fn[0](K, x + oa[0], lda, y + ob[0], ldb, z + oc[0], ldc, a, b);
                else
                    for (int64_t s = 0; s < ns; s++)
                        fn[s](K, x + oa[s], lda, y + ob[s], ldb, z + oc[s], ldc, a, b);
            }
            return AT_OK;
        }
        for (int64_t i = lo; i < hi; i++) {
            const AT_T *x = Ap ? (const AT_T *)Ap[i] : (const AT_T *)(A0 + i * sa);
            const AT_T *y = Bp ? (const AT_T *)Bp[i] : (const AT_T *)(B0 + i * sb);
            AT_T *z = j->C ? (AT_T *)j->C[i] : (AT_T *)(j->C0 + i * sc);
            AT_FN(run_steps)(st, s0, s1, K, x, lda, ta, y, ldb, tb, z, ldc, a, b);
        }
        return AT_OK;
    }
#endif
    int rc = AT_OK;
    for (int64_t i = lo; i < hi; i++) {
        const AT_T *x = Ap ? (const AT_T *)Ap[i] : (const AT_T *)(A0 + i * sa);
        const AT_T *y = Bp ? (const AT_T *)Bp[i] : (const AT_T *)(B0 + i * sb);
        AT_T *z = j->C ? (AT_T *)j->C[i] : (AT_T *)(j->C0 + i * sc);
        for (int t = 0; t < p->info.threads; t++) {
            int r = AT_FN(run_part)(p, t, x, y, z, a, b);
            if (r) rc = r;
        }
    }
    return rc;
}
