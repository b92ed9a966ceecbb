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

#define AT_EDGE_FN AT_FN(edge)
#define AT_EDGE_ATTR
#include "edge_t.h"
#undef AT_EDGE_FN
#undef AT_EDGE_ATTR

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
            ((AT_KFN)at_kernel_table[x->kernel].kernel.fn)(K, a, lda, b, ldb, c, ldc, alpha, beta);
        else
            AT_FN(edge)(K, a, lda, ta, b, ldb, tb, c, ldc, x->mb, x->nb, alpha, beta);
    }
}

/* A no-pack plan's steps [s0, s1): all of K per step, or K in slices of kc with
 * every step in turn per slice (plan.c, slice_place_walks), C accumulating from
 * the second slice on.  Only an untransposed A is sliced (kc is 0 otherwise). */
static inline __attribute__((always_inline)) void AT_FN(run_place)(const at_plan *p, int64_t s0, int64_t s1, const AT_T *A,
                             const AT_T *B, AT_T *C, AT_T alpha, AT_T beta)
{
    int64_t K = p->K, kc = p->place_kc;
    if (!kc) {
        AT_FN(run_steps)(p->steps, s0, s1, K, A, p->lda, p->ta, B, p->ldb, p->tb, C, p->ldc, alpha,
                         beta);
        return;
    }
    for (int64_t k0 = 0; k0 < K; k0 += kc) {
        int64_t kb = K - k0 < kc ? K - k0 : kc;
        const AT_T *a = A + k0 * p->lda, *b = p->tb ? B + k0 * p->ldb : B + k0;
        AT_T beta_k = k0 ? (AT_T)1 : beta;
        if (!p->place_prefetch) {
            AT_FN(run_steps)(p->steps, s0, s1, kb, a, p->lda, 0, b, p->ldb, p->tb, C, p->ldc,
                             alpha, beta_k);
            continue;
        }
        /* A from memory: before a band of whole-line slivers starts, the lines
         * place_prefetch rows below it, a slice's columns each (plan.c,
         * slice_place_walks). */
        for (int64_t s = s0; s < s1; s++) {
            const at_step *x = &p->steps[s];
            if ((s == s0 || x->i0 != p->steps[s - 1].i0) && x->mb * sizeof(AT_T) % AT_L1_LINE == 0) {
                int64_t r0 = x->i0 + p->place_prefetch, r1 = r0 + x->mb;
                if (r1 > p->M) r1 = p->M;
                for (int64_t r = r0; r < r1; r += AT_L1_LINE / (int64_t)sizeof(AT_T))
                    for (int64_t k = 0; k < kb; k++) __builtin_prefetch(a + r + k * p->lda, 0, 3);
            }
            AT_FN(run_steps)(p->steps, s, s + 1, kb, a, p->lda, 0, b, p->ldb, p->tb, C, p->ldc,
                             alpha, beta_k);
        }
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

#ifndef AT_EXEC_PANEL_LD
#define AT_EXEC_PANEL_LD
/* The leading dimension of a whole panel of B in format 1 (row-major, nb wide;
 * the tilings of its blocks cut its columns differently, so it has no bands):
 * nb, one cache line more where a row is an even number of lines.  A kernel
 * reads its columns one row per K step, and rows a multiple of 128 bytes apart
 * share a fraction of L1's sets (2 KiB apart, 2 of 64): an fp32 NT 24x4 kernel
 * ran 512^3 and 1024^3 at 23-26 GFLOPS from a 512-wide panel and at 35 with
 * the padding (Zen 1).  An odd number of lines reaches every set.  At most
 * AT_PANEL_PAD bytes more a row. */
#define AT_PANEL_PAD 64
static inline int64_t at_panel_ld(int64_t nb, size_t es)
{
    return ((size_t)nb * es) % (2 * AT_PANEL_PAD) == 0 ? nb + (int64_t)(AT_PANEL_PAD / es) : nb;
}
#endif

/* op(B)[p0 : p0+kb, j0 : j0+nb] into format fb (0: column-major kb x nb, 1: its
 * transpose, rows ldd apart). */
static void AT_FN(pack_b)(const AT_T *B, int64_t ldb, int tb, int64_t p0, int64_t j0, int64_t kb,
                          int64_t nb, AT_T *dst, int fb, int64_t ldd)
{
    if (!tb) {
        for (int64_t j = 0; j < nb; j++) {
            const AT_T *src = B + p0 + (j0 + j) * ldb;
            if (!fb)
                memcpy(dst + j * kb, src, sizeof(AT_T) * (size_t)kb);
            else
                for (int64_t p = 0; p < kb; p++) dst[j + p * ldd] = src[p];
        }
    } else {
        for (int64_t p = 0; p < kb; p++) {
            const AT_T *src = B + j0 + (p0 + p) * ldb;
            if (fb)
                memcpy(dst + p * ldd, src, sizeof(AT_T) * (size_t)nb);
            else
                for (int64_t j = 0; j < nb; j++) dst[p + j * kb] = src[j];
        }
    }
}

#ifndef AT_PACK_A_BYTES
/* Packed rows of A a share keeps per K slice (see run_part). */
#define AT_PACK_A_BYTES (4 << 20)
#endif

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

#ifndef AT_EXEC_TILING_BANDS
#define AT_EXEC_TILING_BANDS
/* The row bands of each tiling u: a band opens at each step with j0 == 0
 * (tile_block emits bands in order, every step of a band of its height).  Their
 * rows (bi0 at bands + 2 u bm, heights bh after them), the offset of each one's
 * first step in the tiling (sb + u (bm + 1), with the tiling's count after the
 * last), their count nbands[u], and cls[u]: the first tiling with the same
 * bands, whose packed rows of A serve it too (every tiling's, for fa == 1,
 * whose format does not depend on the bands). */
static void tiling_bands(const at_plan *p, int64_t bm, int fa, int32_t *bands, int32_t *sb,
                         int64_t nbands[4], int cls[4])
{
    for (int u = 0; u < p->ntilings; u++) {
        int32_t *bi0 = bands + 2 * u * bm, *bh = bi0 + bm, *first = sb + u * (bm + 1);
        const at_tiling *ti = &p->tilings[u];
        int64_t n = 0;
        for (int64_t s = ti->first; s < ti->first + ti->count; s++)
            if (p->steps[s].j0 == 0) {
                bi0[n] = (int32_t)p->steps[s].i0;
                bh[n] = p->steps[s].mb;
                first[n++] = (int32_t)(s - ti->first);
            }
        first[n] = (int32_t)ti->count;
        nbands[u] = n;
        cls[u] = fa ? 0 : u;
        for (int v = 0; v < u && cls[u] == u; v++)
            if (nbands[v] == n && !memcmp(bands + 2 * v * bm, bi0, sizeof *bi0 * (size_t)n) &&
                !memcmp(bands + 2 * v * bm + bm, bh, sizeof *bh * (size_t)n))
                cls[u] = v;
    }
}
#endif

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
        /* Rows of op(A) are contiguous: a cache line's worth of each of the h rows
         * in turn, so the stores stay within a few lines.  Walking all h rows per
         * k touched h lines lda apart, which share L1 sets when lda is a multiple
         * of 4 KiB: every element missed (fp32 1024^3 TN ran at 219 GFLOPS against
         * NN's 250). */
        enum { Q = 64 / sizeof(AT_T) };
        for (int64_t b = 0; b < nbands; b++) {
            int64_t h = bh[b];
            AT_T *d = dst + (int64_t)bi0[b] * kb;
            const AT_T *src = A + p0 + (i0 + bi0[b]) * lda;
            for (int64_t q0 = 0; q0 < kb; q0 += Q) {
                int64_t q1 = q0 + Q < kb ? q0 + Q : kb;
                for (int64_t i = 0; i < h; i++)
                    for (int64_t p = q0; p < q1; p++) d[i + p * h] = src[p + i * lda];
            }
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

#ifndef AT_EXEC_PREFETCH
#define AT_EXEC_PREFETCH
/* Source lines that a later pack will read, fetched into L2 a few per kernel
 * call.  Between two calls of a large product its operands leave the caches:
 * packing them on demand ran at the memory's bandwidth (0.5 ns per element at
 * 1024^3 against 0.1 from L3, 5-8 % of the time) while the kernels in between
 * left the memory idle. */
typedef struct {
    const char *base;
    int64_t ld, lines, runs; /* `runs` runs of `lines` cache lines, ld bytes apart */
    int64_t r, l, per_call;  /* the next line to fetch (run, line); lines per kernel call */
} at_prefetch;

/* runs x bytes at base, ld bytes apart, spread over `calls` kernel calls. */
static void at_prefetch_set(at_prefetch *f, const void *base, int64_t ld, int64_t bytes,
                            int64_t runs, int64_t calls)
{
    /* A run may start anywhere in a line: from the line of its first byte, one
     * more line covers its end whatever the offset. */
    uintptr_t off = (uintptr_t)base % 64;
    f->base = (const char *)base - off;
    f->ld = ld;
    f->lines = ld % 64 == 0 ? (int64_t)(off + (uintptr_t)bytes + 63) / 64 : (bytes + 127) / 64;
    f->runs = runs;
    f->r = f->l = 0;
    f->per_call = calls > 0 ? (f->lines * runs + calls - 1) / calls : 0;
}

static inline void at_prefetch_step(at_prefetch *f)
{
    for (int64_t k = 0; k < f->per_call && f->r < f->runs; k++) {
        __builtin_prefetch(f->base + f->r * f->ld + f->l * 64, 0, 2);
        if (++f->l == f->lines) {
            f->l = 0;
            f->r++;
        }
    }
}
#endif

#ifndef AT_EXEC_PANELS
#define AT_EXEC_PANELS
#include <pthread.h>
/* Each thread's panel memory, kept from call to call: panels allocated per call
 * came back as fresh pages, whose faults took 10 % of a packed fp64 256^3
 * product.  Up to AT_PANELS_KEEP bytes stay with the thread until it exits. */
#define AT_PANELS_KEEP ((size_t)16 << 20)
static _Thread_local struct {
    void *p;
    size_t size; /* 0: not kept (not registered for the thread's exit) */
} at_panels;
static pthread_key_t at_panels_key;
static pthread_once_t at_panels_once = PTHREAD_ONCE_INIT;
static int at_panels_key_ok;

static void at_panels_init(void) { at_panels_key_ok = pthread_key_create(&at_panels_key, free) == 0; }

/* 64-byte aligned memory of at least `bytes` for this thread's panels, NULL if
 * none can be had.  One user per thread at a time (run_part), ended by
 * at_panels_done. */
static void *at_panels_get(size_t bytes)
{
    if (at_panels.p && at_panels.size >= bytes) return at_panels.p;
    if (at_panels.size) pthread_setspecific(at_panels_key, NULL);
    free(at_panels.p);
    at_panels.size = 0;
    at_panels.p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    pthread_once(&at_panels_once, at_panels_init);
    /* The key's destructor frees the memory when the thread exits. */
    if (at_panels.p && bytes <= AT_PANELS_KEEP && at_panels_key_ok &&
        pthread_setspecific(at_panels_key, at_panels.p) == 0)
        at_panels.size = bytes;
    return at_panels.p;
}

/* Memory that is not kept goes back now. */
static void at_panels_done(void)
{
    if (!at_panels.size) {
        free(at_panels.p);
        at_panels.p = NULL;
    }
}
#endif

#ifndef AT_EXEC_BANDS
#define AT_EXEC_BANDS
/* The band widths of the column panel of blocks blk(0..n) (all at one j0), at
 * its columns in bw + j0, 0 inside a band.  B goes in bands (format 1) when
 * every step of the panel's blocks starts and ends on the first block's column
 * cuts: blocks whose tilings cut N differently (the cut depends on the band
 * height) read it as one whole panel of leading dimension nb, which a 0 in the
 * panel's first column marks (no band starts at width 0).  blk(k) is block
 * map[k], or first + k without a map. */
static void panel_bands(const at_plan *p, const int32_t *map, int64_t first, int64_t n, int32_t *bw)
{
#define AT_BLK(k) (&p->blocks[map ? map[k] : first + (k)])
    const at_block *b0 = AT_BLK(0);
    int32_t *w = bw + b0->j0;
    const at_tiling *t0 = &p->tilings[b0->tiling];
    memset(w, 0, sizeof *w * (size_t)b0->nb);
    for (int64_t s = t0->first; s < t0->first + t0->count && p->steps[s].i0 == 0; s++)
        w[p->steps[s].j0] = p->steps[s].nb;
    for (int64_t k = 0; w[0] && k < n; k++) {
        const at_tiling *ti = &p->tilings[AT_BLK(k)->tiling];
        for (int64_t s = ti->first; s < ti->first + ti->count; s++)
            if (w[p->steps[s].j0] != p->steps[s].nb) {
                w[0] = 0;
                break;
            }
    }
#undef AT_BLK
}
#endif

/* Steps [s0, s1) on micro-panels: A's band at i0 * kb, B's at j0 * kb (for B
 * whole-panel format 1, bandb == 0: column j0 of a panel of leading dimension ldpb).
 * Between calls: the next step's C tile into L1 (C comes from memory too, and
 * the kernels load it only after their K loop: without this, fp64 1024^3 ran
 * at 82 GFLOPS in the median against 110, the best being the same), and the
 * lines of pf. */
static inline __attribute__((always_inline)) void AT_FN(run_panels)(
    const at_step *st, int64_t s0, int64_t s1, int64_t kb, const AT_T *pa, int fa,
    const AT_T *pb, int fb, int bandb, int64_t ldpb, AT_T *C, int64_t ldc, AT_T alpha, AT_T beta,
    at_prefetch *pf)
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
        if (s + 1 < s1) {
            const at_step *y = x + 1;
            const char *cn = (const char *)(C + y->i0 + y->j0 * ldc);
            for (int j = 0; j < y->nb; j++, cn += sizeof(AT_T) * ldc) {
                /* Each line of the column once, whatever its alignment. */
                const char *last = cn + sizeof(AT_T) * (size_t)(y->mb - 1);
                for (const char *q = cn - (uintptr_t)cn % 64; q <= last; q += 64)
                    __builtin_prefetch(q, 1, 3);
            }
        }
        at_prefetch_step(&pf[0]);
        at_prefetch_step(&pf[1]);
        if (x->kernel >= 0)
            ((AT_KFN)at_kernel_table[x->kernel].kernel.fn)(kb, a, lda, b, ldb, c, ldc, alpha, beta);
        else
            AT_FN(edge)(kb, a, lda, fa, b, ldb, fb, c, ldc, x->mb, x->nb, alpha, beta);
    }
}

#ifdef AT_SME2_EXEC
/* Thread t's share with the portable code alone: every step (no-pack path) or
 * block (packed path) of the share over all of K, straight from the operands.
 * For a thread whose streaming vector length is no longer the one the plan's
 * SME2 kernels were made for: right answers at the portable code's speed. */
static int AT_FN(run_part_portable)(const at_plan *p, int t, const AT_T *A, const AT_T *B, AT_T *C,
                                    AT_T alpha, AT_T beta)
{
    for (int64_t s = p->thread_start[t]; s < p->thread_start[t + 1]; s++) {
        int64_t i0, j0, mb, nb;
        if (p->info.path == 0) {
            i0 = p->steps[s].i0, j0 = p->steps[s].j0, mb = p->steps[s].mb, nb = p->steps[s].nb;
        } else {
            i0 = p->blocks[s].i0, j0 = p->blocks[s].j0, mb = p->blocks[s].mb, nb = p->blocks[s].nb;
        }
        AT_FN(edge)(p->K, p->ta ? A + i0 * p->lda : A + i0, p->lda, p->ta,
                    p->tb ? B + j0 : B + j0 * p->ldb, p->ldb, p->tb, C + i0 + j0 * p->ldc, p->ldc,
                    mb, nb, alpha, beta);
    }
    return AT_OK;
}
#endif

/* Thread t's share of one problem.  Returns AT_ENOMEM if its panels cannot be had. */
static int AT_FN(run_part)(const at_plan *p, int t, const AT_T *A, const AT_T *B, AT_T *C,
                           AT_T alpha, AT_T beta)
{
#ifdef AT_SME2_EXEC
    /* An SME2 library runs each share that calls SME2 kernels in one streaming
     * region (sme2_exec.c); a share without any stays in normal mode, here. */
    if (p->streaming) {
        if (!at__svl_unchanged()) return AT_FN(run_part_portable)(p, t, A, B, C, alpha, beta);
        int sme = AT_FN(at__sme2_part)(p, t, A, B, C, alpha, beta);
        if (sme != AT_SME2_DECLINED) return sme;
    }
#endif
    int64_t first = p->thread_start[t], last = p->thread_start[t + 1];
    if (p->info.path == 0) {
        AT_FN(run_place)(p, first, last, A, B, C, alpha, beta);
        return AT_OK;
    }
    if (first == last) return AT_OK;
    int64_t bm = p->info.blk_m, bn = p->info.blk_n, bk = p->info.blk_k;
    int fa = p->ktrans_a, fb = p->ktrans_b, nt = p->ntilings;
    int64_t nbm = (p->M + bm - 1) / bm;
    /* A block row is packed once per K slice and kept for every column panel of
     * the share (Goto packs A once per K slice; re-packing it per panel of blk_n
     * columns copied A N / blk_n times, 4-5x at 1024^3).  The kept rows are
     * capped at AT_PACK_A_BYTES: beyond, the share runs in chunks of block rows,
     * re-packing B once per chunk instead. */
    int64_t slot = bm * bk;
    int64_t maxslots = AT_PACK_A_BYTES / ((int64_t)sizeof(AT_T) * slot);
    if (maxslots < 4) maxslots = 4;
    /* A's layout follows a tiling's row bands (format 0), so blocks share a
     * packed row only when their tilings cut it alike: cls maps a tiling to the
     * first one with the same bands.  Format 1 does not depend on the bands. */
    int32_t *bands = malloc(sizeof *bands * (size_t)(3 * nt * (bm + 1) + p->N + 8 * nbm));
    int64_t nbands[4] = {0};
    int cls[4];
    if (!bands) return AT_ENOMEM;
    int32_t *sb = bands + 2 * nt * bm, *bw = sb + nt * (bm + 1), *smap = bw + p->N;
    tiling_bands(p, bm, fa, bands, sb, nbands, cls);
    /* bw: each column panel's B bands (panel_bands); used marks the (block row,
     * class) pairs the share packs. */
    int32_t *used = smap + 4 * nbm;
    memset(used, 0, sizeof *used * (size_t)(4 * nbm));
    for (int64_t g0 = first, g1; g0 < last; g0 = g1) {
        for (g1 = g0; g1 < last && p->blocks[g1].j0 == p->blocks[g0].j0; g1++) {
            const at_block *bl = &p->blocks[g1];
            used[bl->i0 / bm * 4 + cls[bl->tiling]] = 1;
        }
        if (fb) panel_bands(p, NULL, g0, g1 - g0, bw);
    }
    int64_t nslots = 0;
    for (int64_t k = 0; k < 4 * nbm; k++) nslots += used[k];
    if (nslots > maxslots) nslots = maxslots;
    /* 64-byte alignment keeps panel columns on cache-line boundaries. */
    size_t asz = ((sizeof(AT_T) * (size_t)(nslots * slot) + 63) / 64) * 64;
    size_t bsz = ((sizeof(AT_T) * (size_t)bk * ((size_t)bn + AT_PANEL_PAD / sizeof(AT_T)) + 63) / 64) * 64;
    char *panels = at_panels_get(asz + bsz);
    int64_t *tag = malloc(sizeof *tag * (size_t)(nslots + last - first)), *ord = tag + nslots;
    if (!panels || !tag) {
        at_panels_done();
        free(tag);
        free(bands);
        return AT_ENOMEM;
    }
    AT_T *pa = (AT_T *)panels, *pb = (AT_T *)(panels + asz);
    /* Chunks of block rows [lo, hi) whose packed rows fit the slots.  Within a
     * chunk the K slices run outermost and in order, so every element of C is
     * accumulated in the same order whichever thread computes it. */
    for (int64_t lo = 0, hi; lo < nbm; lo = hi) {
        int64_t n = 0;
        for (hi = lo; hi < nbm; hi++) {
            int64_t k = 0;
            for (int c = 0; c < 4; c++) k += used[hi * 4 + c];
            if (n + k > nslots) break;
            for (int c = 0; c < 4; c++) smap[hi * 4 + c] = used[hi * 4 + c] ? (int32_t)n++ : -1;
        }
        if (n == 0) continue;
        /* The chunk's blocks in the share's order (column panels consecutive). */
        int64_t nord = 0;
        for (int64_t g = first; g < last; g++) {
            int64_t ib = p->blocks[g].i0 / bm;
            if (ib >= lo && ib < hi) ord[nord++] = g;
        }
        for (int64_t s = 0; s < n; s++) tag[s] = -1;
        for (int64_t p0 = 0; p0 < p->K; p0 += bk) {
            int64_t kb = p->K - p0 < bk ? p->K - p0 : bk;
            int64_t p1 = p0 + bk, kb1 = p->K - p1 < bk ? p->K - p1 : bk;
            AT_T be = p0 == 0 ? beta : (AT_T)1;
            for (int64_t q0 = 0, q1; q0 < nord; q0 = q1) {
                const at_block *b0 = &p->blocks[ord[q0]];
                q1 = q0 + 1;
                while (q1 < nord && p->blocks[ord[q1]].j0 == b0->j0) q1++;
                const int32_t *w = bw + b0->j0;
                int bandb = fb && w[0] > 0;
                int64_t ldpb = at_panel_ld(b0->nb, sizeof(AT_T));
                if (bandb)
                    AT_FN(pack_b_bands)(B, p->ldb, p->tb, p0, b0->j0, kb, b0->nb, pb, w);
                else
                    AT_FN(pack_b)(B, p->ldb, p->tb, p0, b0->j0, kb, b0->nb, pb, fb, ldpb);
                at_prefetch pf[2] = {{0}};
                for (int64_t q = q0; q < q1; q++) {
                    const at_block *bl = &p->blocks[ord[q]];
                    const at_tiling *ti = &p->tilings[bl->tiling];
                    int c = cls[bl->tiling];
                    int64_t s = smap[bl->i0 / bm * 4 + c];
                    AT_T *a = pa + s * slot;
                    if (tag[s] != p0) {
                        if (fa)
                            AT_FN(pack_a)(A, p->lda, p->ta, bl->i0, p0, bl->mb, kb, a, fa);
                        else
                            AT_FN(pack_a_bands)(A, p->lda, p->ta, bl->i0, p0, kb, a, nbands[c],
                                                bands + 2 * c * bm, bands + 2 * c * bm + bm);
                        tag[s] = p0;
                    }
                    /* While the panel's last block runs: the next panel's B.  Spread
                     * over the whole panel, the first lines fetched met the rest of
                     * the share's A on its way through L2 (1 MiB of fp64 rows at
                     * 1024^3) and were gone before the pack. */
                    const at_block *bn1 = q1 < nord ? &p->blocks[ord[q1]] : &p->blocks[ord[0]];
                    int64_t pn = q1 < nord ? p0 : p1, kn = q1 < nord ? kb : kb1;
                    if (q + 1 == q1 && pn < p->K) {
                        if (!p->tb)
                            at_prefetch_set(&pf[1], B + pn + bn1->j0 * p->ldb, (int64_t)sizeof(AT_T) * p->ldb,
                                            (int64_t)sizeof(AT_T) * kn, bn1->nb, ti->count);
                        else
                            at_prefetch_set(&pf[1], B + bn1->j0 + pn * p->ldb, (int64_t)sizeof(AT_T) * p->ldb,
                                            (int64_t)sizeof(AT_T) * bn1->nb, kn, ti->count);
                    }
                    /* While this block runs: the next block's A, if it packs. */
                    const at_block *bx = q + 1 < nord ? &p->blocks[ord[q + 1]] : &p->blocks[ord[0]];
                    int64_t px = q + 1 < nord ? p0 : p1, kx = q + 1 < nord ? kb : kb1;
                    pf[0].per_call = 0;
                    if (px < p->K && tag[smap[bx->i0 / bm * 4 + cls[bx->tiling]]] != px) {
                        if (!p->ta)
                            at_prefetch_set(&pf[0], A + bx->i0 + px * p->lda, (int64_t)sizeof(AT_T) * p->lda,
                                            (int64_t)sizeof(AT_T) * bx->mb, kx, ti->count);
                        else
                            at_prefetch_set(&pf[0], A + px + bx->i0 * p->lda, (int64_t)sizeof(AT_T) * p->lda,
                                            (int64_t)sizeof(AT_T) * kx, bx->mb, ti->count);
                    }
                    AT_FN(run_panels)(p->steps, ti->first, ti->first + ti->count, kb, a, fa, pb,
                                      fb, bandb, ldpb, C + bl->i0 + bl->j0 * p->ldc, p->ldc,
                                      alpha, be, pf);
                }
            }
        }
    }
    at_panels_done();
    free(tag);
    free(bands);
    return AT_OK;
}

/* Thread t's part of a packed plan run by a team (exec.c, run_team).  The team
 * walks the K slices and column panels together: its threads pack a panel of B
 * between them, once, into one of two shared buffers, wait for each other, and
 * each computes its own row bands of the panel's blocks from A rows it packed
 * itself.  A band goes to the thread whose share of M holds its middle row, so
 * the threads' loads differ by one band at most, where a split of whole blocks
 * gave 256^3 (three blocks) to two threads 2:1.  Each element is computed by
 * the kernel of its step over the K slices in order, as on one thread: the same
 * bits.  Two buffers need one wait per panel: a thread packing panel q + 2 has
 * passed the wait of panel q + 1, which every thread reached after computing q. */
static int AT_FN(team_part)(at_team *tm, int t)
{
    const at_plan *p = tm->p;
    const AT_T *A = tm->A, *B = tm->B;
    AT_T *C = tm->C, alpha = (AT_T)tm->alpha, beta = (AT_T)tm->beta;
    int T = tm->threads, fa = p->ktrans_a, fb = p->ktrans_b, nt = p->ntilings;
    int64_t bm = p->info.blk_m, bn = p->info.blk_n, bk = p->info.blk_k;
    int64_t nbm = (p->M + bm - 1) / bm, nbn = (p->N + bn - 1) / bn;
    const int32_t *bands = tm->bands, *sb = tm->sb;
    /* This thread's bands [lo, hi) of each block row, per tiling. */
    int32_t *own = malloc(sizeof *own * (size_t)(2 * nt * nbm + 4 * nbm));
    int32_t *smap = own ? own + 2 * nt * nbm : NULL;
    int64_t *tag = NULL;
    AT_T *pa = NULL;
    int64_t nslots = 0, slot = bm * bk;
    if (!own) goto ready;
    for (int64_t ib = 0; ib < nbm; ib++) {
        for (int c = 0; c < 4; c++) smap[ib * 4 + c] = -1;
        for (int u = 0; u < nt; u++) {
            const int32_t *bi0 = bands + 2 * u * bm, *bh = bi0 + bm;
            int32_t lo = 0, hi = 0;
            for (int64_t b = 0; b < tm->nbands[u]; b++) {
                double mid = (double)(ib * bm + bi0[b]) + 0.5 * bh[b];
                int owner = (int)(mid * T / (double)p->M);
                if (owner < t) lo = hi = (int32_t)b + 1;
                else if (owner == t) hi = (int32_t)b + 1;
            }
            own[2 * (ib * nt + u)] = lo;
            own[2 * (ib * nt + u) + 1] = hi;
            /* A block row's tilings are those of its blocks: a tiling of another
             * height has no step here, and its bands are no concern of this row. */
            int used = 0;
            for (int64_t jb = 0; jb < nbn && !used; jb++) used = p->blocks[tm->grid[jb * nbm + ib]].tiling == u;
            /* Format 1 rows of A do not depend on the bands, but a thread packs
             * only its own: a slot per tiling then, not per class of bands. */
            int c = fa ? u : tm->cls[u];
            if (used && lo < hi && smap[ib * 4 + c] < 0) smap[ib * 4 + c] = (int32_t)nslots++;
        }
    }
    pa = nslots ? at_panels_get(sizeof(AT_T) * (size_t)(nslots * slot)) : NULL;
    tag = malloc(sizeof *tag * (size_t)(nslots + 1));
    if (tag)
        for (int64_t s = 0; s < nslots; s++) tag[s] = -1;
ready:
    /* No thread may leave before the first wait, where a partner waits for it:
     * all start, or all decline and the caller runs the plan without a team. */
    if (!own || !tag || (nslots && !pa)) atomic_store(&tm->failed, 1);
    if (t == 0 && !team_panels(tm)) atomic_store(&tm->failed, 1);
    at__team_wait(&tm->barrier);
    if (atomic_load(&tm->failed)) {
        at_panels_done();
        free(tag);
        free(own);
        return AT_OK;
    }
    at_prefetch none[2] = {{0}};
    int64_t q = 0; /* panels so far: the buffer of this one */
    for (int64_t p0 = 0; p0 < p->K; p0 += bk) {
        int64_t kb = p->K - p0 < bk ? p->K - p0 : bk;
        AT_T be = p0 == 0 ? beta : (AT_T)1;
        for (int64_t jb = 0; jb < nbn; jb++, q++) {
            int64_t j0 = jb * bn, nb = p->N - j0 < bn ? p->N - j0 : bn;
            AT_T *pb = (AT_T *)tm->panel[q & 1];
            const int32_t *w = tm->bw + j0;
            int bandb = fb && w[0] > 0;
            int64_t ldpb = at_panel_ld(nb, sizeof(AT_T));
            if (fb && !bandb) {
                /* A whole panel of format 1 is row-major: split its rows (K). */
                int64_t r0 = kb * t / T, r1 = kb * (t + 1) / T;
                if (r1 > r0)
                    AT_FN(pack_b)(B, p->ldb, p->tb, p0 + r0, j0, r1 - r0, nb, pb + r0 * ldpb, 1, ldpb);
            } else {
                /* Columns nb t / T onwards, from the first band that starts there. */
                int64_t c0 = 0, c1 = 0, from = nb * t / T, to = nb * (t + 1) / T;
                if (bandb) {
                    while (c0 < nb && c0 < from) c0 += w[c0];
                    c1 = c0;
                    while (c1 < nb && c1 < to) c1 += w[c1];
                } else {
                    c0 = from;
                    c1 = to;
                }
                if (c1 > c0) {
                    if (bandb)
                        AT_FN(pack_b_bands)(B, p->ldb, p->tb, p0, j0 + c0, kb, c1 - c0, pb + c0 * kb, w + c0);
                    else
                        AT_FN(pack_b)(B, p->ldb, p->tb, p0, j0 + c0, kb, c1 - c0, pb + c0 * kb, 0, kb);
                }
            }
            at__team_wait(&tm->barrier);
            for (int64_t ib = 0; ib < nbm; ib++) {
                const at_block *bl = &p->blocks[tm->grid[jb * nbm + ib]];
                int u = bl->tiling, c = fa ? u : tm->cls[u];
                int32_t lo = own[2 * (ib * nt + u)], hi = own[2 * (ib * nt + u) + 1];
                if (lo >= hi) continue;
                const int32_t *bi0 = bands + 2 * u * bm, *bh = bi0 + bm, *first = sb + u * (bm + 1);
                int64_t s = smap[ib * 4 + c];
                AT_T *a = pa + s * slot;
                if (tag[s] != p0) {
                    if (fa) {
                        int64_t r = bi0[lo], rows = bi0[hi - 1] + bh[hi - 1] - r;
                        AT_FN(pack_a)(A, p->lda, p->ta, bl->i0 + r, p0, rows, kb, a + r * kb, 1);
                    } else {
                        AT_FN(pack_a_bands)(A, p->lda, p->ta, bl->i0, p0, kb, a, hi - lo, bi0 + lo, bh + lo);
                    }
                    tag[s] = p0;
                }
                const at_tiling *ti = &p->tilings[u];
                AT_FN(run_panels)(p->steps, ti->first + first[lo], ti->first + first[hi], kb, a, fa, pb,
                                  fb, bandb, ldpb, C + bl->i0 + bl->j0 * p->ldc, p->ldc, alpha, be, none);
            }
        }
    }
    at_panels_done();
    free(tag);
    free(own);
    return AT_OK;
}

#ifndef AT_COPY_A_STACK
/* A copy of op(A) up to this size lives on the stack of its call (plan.c, choose_copy_a). */
#define AT_COPY_A_STACK 8192
#endif

/* Element (i, k) of the caller's untransposed A into row i of the copy, at
 * dst[k + i * lda]: the rows along K a copy_a plan's tn or tt kernels read.
 * Four rows at a time, each pass a walk along K: a loop over all M rows inside
 * the walk took 1.1 ns an element at M = 2 (Zen 4), this 0.3. */
static void AT_FN(copy_a)(const at_plan *p, const AT_T *A, AT_T *dst)
{
    int64_t M = p->M, K = p->K, src = p->src_lda, ld = p->lda, i = 0;
    for (; i + 4 <= M; i += 4) {
        const AT_T *a = A + i;
        AT_T *d = dst + i * ld;
        for (int64_t k = 0; k < K; k++, a += src) {
            d[k] = a[0];
            d[k + ld] = a[1];
            d[k + 2 * ld] = a[2];
            d[k + 3 * ld] = a[3];
        }
    }
    for (; i + 2 <= M; i += 2) {
        const AT_T *a = A + i;
        AT_T *d = dst + i * ld;
        for (int64_t k = 0; k < K; k++, a += src) {
            d[k] = a[0];
            d[k + ld] = a[1];
        }
    }
    for (; i < M; i++) {
        const AT_T *a = A + i;
        AT_T *d = dst + i * ld;
        for (int64_t k = 0; k < K; k++, a += src) d[k] = a[0];
    }
}

/* Shares [t0, t1) of a copy_a plan on one copy of op(A).  Apart from the shares'
 * own callers so that their frames stay small: a 2 x 2 x 2 product's call costs
 * what its kernel does. */
static __attribute__((noinline)) int AT_FN(run_copied)(const at_plan *p, int t0, int t1,
                                                       const AT_T *A, const AT_T *B, AT_T *C,
                                                       AT_T alpha, AT_T beta)
{
    AT_T stack[AT_COPY_A_STACK / sizeof(AT_T)] __attribute__((aligned(64)));
    size_t bytes = sizeof(AT_T) * (size_t)(p->M * p->lda);
    AT_T *a = bytes <= sizeof stack ? stack : aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!a) return AT_ENOMEM;
    AT_FN(copy_a)(p, A, a);
    int rc = AT_OK;
    for (int t = t0; t < t1; t++) {
        int r = AT_FN(run_part)(p, t, a, B, C, alpha, beta);
        if (r) rc = r;
    }
    if (a != stack) free(a);
    return rc;
}

/* Shares [t0, t1) of one problem, whatever the plan. */
static int AT_FN(run_shares)(const at_plan *p, int t0, int t1, const AT_T *A, const AT_T *B,
                             AT_T *C, AT_T alpha, AT_T beta)
{
    if (p->copy_a) return AT_FN(run_copied)(p, t0, t1, A, B, C, alpha, beta);
    int rc = AT_OK;
    for (int t = t0; t < t1; t++) {
        int r = AT_FN(run_part)(p, t, A, B, C, alpha, beta);
        if (r) rc = r;
    }
    return rc;
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
    return AT_FN(run_shares)(p, t0, t1, (const AT_T *)A, (const AT_T *)B, (AT_T *)C, a, b);
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
    /* (A plan with SME2 steps keeps run_part: it decides whether a share runs
     * in a streaming region.) */
    if (p->info.path == 0 && !AT_STREAMING(p) && !p->copy_a) {
        AT_FN(run_place)(p, p->thread_start[0], p->thread_start[p->info.threads], (const AT_T *)A,
                         (const AT_T *)B, (AT_T *)C, a, b);
        return AT_OK;
    }
    return AT_FN(run_shares)(p, 0, p->info.threads, (const AT_T *)A, (const AT_T *)B, (AT_T *)C,
                             a, b);
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
    /* (A plan with SME2 steps keeps the generic walk below: its shares may run
     * in a streaming region, which run_part decides.) */
    if (p->info.path == 0 && !AT_STREAMING(p) && !p->copy_a) {
        int64_t K = p->K, lda = p->lda, ldb = p->ldb, ldc = p->ldc;
        /* A plan of a few kernel steps (every small product) has them resolved
         * once (plan.c, choose_direct), so an item costs its kernel calls and
         * nothing else. */
        if (p->ndirect) {
            const at_direct *d = p->direct;
            int n = p->ndirect;
            for (int64_t i = lo; i < hi; i++) {
                const AT_T *x = Ap ? (const AT_T *)Ap[i] : (const AT_T *)(A0 + i * sa);
                const AT_T *y = Bp ? (const AT_T *)Bp[i] : (const AT_T *)(B0 + i * sb);
                AT_T *z = j->C ? (AT_T *)j->C[i] : (AT_T *)(j->C0 + i * sc);
                AT_DIRECT_RUN(AT_KFN, d, n, K, x, lda, y, ldb, z, ldc, a, b);
            }
            return AT_OK;
        }
        int64_t s0 = p->thread_start[0], s1 = p->thread_start[p->info.threads];
        for (int64_t i = lo; i < hi; i++) {
            const AT_T *x = Ap ? (const AT_T *)Ap[i] : (const AT_T *)(A0 + i * sa);
            const AT_T *y = Bp ? (const AT_T *)Bp[i] : (const AT_T *)(B0 + i * sb);
            AT_T *z = j->C ? (AT_T *)j->C[i] : (AT_T *)(j->C0 + i * sc);
            AT_FN(run_place)(p, s0, s1, x, y, z, a, b);
        }
        return AT_OK;
    }
    int rc = AT_OK;
    for (int64_t i = lo; i < hi; i++) {
        const AT_T *x = Ap ? (const AT_T *)Ap[i] : (const AT_T *)(A0 + i * sa);
        const AT_T *y = Bp ? (const AT_T *)Bp[i] : (const AT_T *)(B0 + i * sb);
        AT_T *z = j->C ? (AT_T *)j->C[i] : (AT_T *)(j->C0 + i * sc);
        int r = AT_FN(run_shares)(p, 0, p->info.threads, x, y, z, a, b);
        if (r) rc = r;
    }
    return rc;
}
