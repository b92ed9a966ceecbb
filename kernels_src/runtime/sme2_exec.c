/* sme2_exec.c: the executor of an SME2 library, one streaming region per share.
 *
 * exec_t.h's run_part hands thread t's share of a plan here.  Everything that
 * allocates runs first, in normal mode; then at__sme2_region (sme2_region.S)
 * enters streaming mode with ZA on, once, and calls the share's body, which
 * is compiled as __arm_streaming: the Goto packs, the per-kernel panel packs
 * (the transposing pack through a ZA tile), the kernels' `<name>_s` entry
 * points and the portable edge code all run inside that one region.  On return
 * PSTATE.SM and PSTATE.ZA are off again.
 *
 * Packed-format kernels (variants pa, pb, papb and their hybrids) read their
 * operand from a panel: op(A)[i, p] at i + p*pack_a_ld, op(B)[p, j] at j + p*pack_b_ld,
 * zero beyond the block, with the leading dims in the kernels' records (at_kernel.h).  On
 * the no-pack path each distinct panel of a share is packed once per call, by the
 * first step that reads it, and kept for the others (KleidiAI packs each operand
 * once; repacking per step cost 65 % of a 256^3 call's instructions).  On the
 * packed path a kernel panel is packed from the block's panel before a step and
 * reused while the next step reads the same rows (or columns).
 *
 * A streaming entry takes the step's extent as a last argument (x7 = rows | columns
 * << 32): a variable-block kernel (variant ending in v) computes that much of its
 * block, the planner's cost grid (cost.c) having let it cover any block up to its
 * own; fixed blocks ignore it.
 *
 * A kernel without a streaming entry (a NEON kernel in a mixed table) is called
 * through an ordinary function pointer: the compiler leaves streaming mode
 * around that call, ZA stays on and untouched.  The arithmetic is the plan's,
 * so results stay bitwise identical for any thread count. */
#include <stdlib.h>

#include "at_sme2.h"

#if !defined(__ARM_FEATURE_SME)
#error "sme2_exec.c runs in streaming mode: compile it with the sme2 target's flags"
#endif

typedef void (*at_region_fn)(void *ctx) __arm_streaming;
void at__sme2_region(at_region_fn fn, void *ctx);
void at__sme2_pack_t_f32_s(int64_t K, int64_t n, const float *src, int64_t ld, float *dst,
                           int64_t ldd) __arm_streaming;
void at__sme2_pack_t_f64_s(int64_t K, int64_t n, const double *src, int64_t ld, double *dst,
                           int64_t ldd) __arm_streaming;

static int64_t round_up(int64_t v, int64_t q) { return (v + q - 1) / q * q; }

/* This file's normal-mode functions (the share's set-up before the region).  The
 * sme2 flags' armv9-a turns SVE on, and the compiler vectorised these with it
 * (ptrue/st1w filling the panel index): SIGILL on a CPU with SME2 and no SVE
 * (Apple's M4 has none; QEMU's -cpu max,sve=off) at its first SME2 plan.  The
 * streaming functions keep SME's streaming SVE; turning SVE off for the whole
 * file instead makes clang save VG through __arm_get_current_vg, which libgcc
 * does not have. */
#define AT_NORMAL_MODE __attribute__((target("+nosve")))

/* One kernel panel of a no-pack share: op(A)'s rows x0..x0+n (side 0) or op(B)'s
 * columns x0..x0+n (side 1) over all of K, in a kernel format of leading dim ld. */
typedef struct {
    int64_t x0, n, ld;
    int64_t offset; /* elements from the start of the side's panel memory */
    int32_t packed; /* set in the region by the first step that reads it */
    int32_t next;   /* the previous panel starting at the same x0, or -1 */
} at_panel;

/* The distinct panels steps [s0, s1) of a no-pack plan read on one side: slot[s - s0]
 * is the step's panel (or -1: its kernel reads the operand in place), pan[] the
 * panels.  Returns the elements they need together.  head[x0] (M + 1 or N + 1
 * entries) lists the panels starting at row (column) x0, so a step finds its
 * panel in a few instructions whatever the number of panels. */
AT_NORMAL_MODE static int64_t at__sme2_panels(const at_plan *p, int64_t s0, int64_t s1, int side, int32_t *slot,
                               at_panel *pan, int32_t *head)
{
    int64_t npan = 0, total = 0, dim = side ? p->N : p->M;
    for (int64_t x = 0; x <= dim; x++) head[x] = -1;
    for (int64_t s = s0; s < s1; s++) {
        const at_step *x = &p->steps[s];
        slot[s - s0] = -1;
        if (x->kernel < 0) continue;
        const at_kernel *d = &at_kernel_table[x->kernel].kernel;
        int64_t ld = side ? d->pack_b_ld : d->pack_a_ld;
        if (ld <= 0) continue;
        int64_t x0 = side ? x->j0 : x->i0, n = side ? x->nb : x->mb;
        int32_t q = head[x0];
        while (q >= 0 && !(pan[q].n == n && pan[q].ld == ld)) q = pan[q].next;
        if (q < 0) {
            q = (int32_t)npan++;
            pan[q] = (at_panel){x0, n, ld, total, 0, head[x0]};
            head[x0] = q;
            total += ld * p->K;
        }
        slot[s - s0] = q;
    }
    return total;
}

/* 64-byte aligned, whole cache lines; NULL for zero elements is fine. */
AT_NORMAL_MODE static void *panel_alloc(int64_t elems, size_t es)
{
    if (elems <= 0) return NULL;
    size_t bytes = (size_t)elems * es;
    return aligned_alloc(64, (bytes + 63) / 64 * 64);
}

#define AT_T float
#define AT_KFN at_sgemm_fn
#define AT_KFN_S at_skernel_s
#define AT_PACK_T_S at__sme2_pack_t_f32_s
#define AT_FN(name) name##_f32
typedef void (*at_skernel_s)(int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                             float *C, int64_t ldc, float alpha, float beta,
                             int64_t extent) __arm_streaming;
#include "sme2_exec_t.h"
#undef AT_T
#undef AT_KFN
#undef AT_KFN_S
#undef AT_PACK_T_S
#undef AT_FN

#define AT_T double
#define AT_KFN at_dgemm_fn
#define AT_KFN_S at_dkernel_s
#define AT_PACK_T_S at__sme2_pack_t_f64_s
#define AT_FN(name) name##_f64
typedef void (*at_dkernel_s)(int64_t K, const double *A, int64_t lda, const double *B,
                             int64_t ldb, double *C, int64_t ldc, double alpha, double beta,
                             int64_t extent) __arm_streaming;
#include "sme2_exec_t.h"
#undef AT_T
#undef AT_KFN
#undef AT_KFN_S
#undef AT_PACK_T_S
#undef AT_FN
