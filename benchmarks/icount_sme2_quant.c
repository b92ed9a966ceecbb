/* icount_sme2_quant.c: the program `python -m benchmarks.arm_icount --quantised` runs
 * under qemu-aarch64 to count guest instructions of one quantised product
 * C[M, N] = A[M, K] (f32) x W[K, N] on SME2: symmetric 4-bit weights in blocks of 32, or
 * 8-bit weights (one scale per column; A quantised per row and block of `block` values).
 *
 *   icount_sme2_quant autotune|library|kleidiai M N K count|check      (data: $AT_QICOUNT_DATA)
 *
 * The data file (written by benchmarks/arm_icount.py) holds the bits and A's block, A, W
 * packed for autotune's SME2 kernels (autotune.quant.pack_sme2), W in the nxk layout
 * KleidiAI's RHS packer reads (8 bits: int8 codes [N][K], then N f32 scales), the exact C,
 * then W in the library's qpanel8 format (autotune.quant.pack_panels), its int64 code bytes
 * and scale count first.  A's blocks have max |a| = 127 and integer values and W's
 * scales are 1, so autotune's quantisation is exact and a right C equals the reference
 * exactly; so is KleidiAI's for 4 bits (its f16 scales too).  KleidiAI's 8-bit path
 * quantises A per row, asymmetrically (qai8dx: scale (max - min) / 255, here 254 / 255),
 * so its C is checked against the exact one by relative (Frobenius) error instead.
 *
 * Measured, between the markers (icount.h) icount_begin(2) and icount_end(2) (the first call,
 * phase 1, warms nothing up but is counted too):
 *   autotune: at_qsme2_quantize_a (A quantised and packed), then the block kernel
 *     at_q4s_sme2_1vlx4vl over whole row tiles and, for a last tile of one row, the
 *     GEMV at_q4s_sme2_1x4vl (M = 1 is all GEMV);
 *   library: the same through libautotune's at_qmatmul_f32 (its own choice, the
 *     weights carrying their SME2 form), so the wiring's overhead shows;
 *   kleidiai: kai_run_lhs_quant_pack_qsi8d32p_f32_neon, then for M = 1 its
 *     1x4VL sdot kernel, else its 1VLx4VL mopa kernel; 8 bits: kai_run_lhs_quant_pack_qai8dxp_f32,
 *     then ..._qai8dxp1x4_qsi8cxp4vlx4_1x4vl_sme2_dot (M = 1) or ..._qai8dxp1vlx4_qsi8cxp4vlx4_1vlx4vl_sme2_mopa.
 *   The 8-bit kernels of autotune are at_q8_sme2_1vlx4vl and at_q8_sme2_1x4vl.
 * W's packing is outside the markers on both sides: it is done once per model. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_qsme2.h"
#include "autotune.h"
#define ICOUNT_PROGRAM "arm_qicount"
#include "icount.h"
#include "kai/ukernels/matmul/matmul_clamp_f32_qsi8d32p_qsi4c32p/kai_matmul_clamp_f32_qsi8d32p1vlx4_qsi4c32p4vlx4_1vlx4vl_sme2_mopa.h"
#include "kai/ukernels/matmul/matmul_clamp_f32_qsi8d32p_qsi4c32p/kai_matmul_clamp_f32_qsi8d32p1x4_qsi4c32p4vlx4_1x4vl_sme2_sdot.h"
#include "kai/ukernels/matmul/pack/kai_lhs_quant_pack_qsi8d32p_f32_neon.h"
#include "kai/ukernels/matmul/pack/kai_rhs_pack_nxk_qsi4c32ps1s0scalef16_qsu4c32s16s0_neon.h"
#include "kai/ukernels/matmul/matmul_clamp_f32_qai8dxp_qsi8cxp/kai_matmul_clamp_f32_qai8dxp1vlx4_qsi8cxp4vlx4_1vlx4vl_sme2_mopa.h"
#include "kai/ukernels/matmul/matmul_clamp_f32_qai8dxp_qsi8cxp/kai_matmul_clamp_f32_qai8dxp1x4_qsi8cxp4vlx4_1x4vl_sme2_dot.h"
#include "kai/ukernels/matmul/pack/kai_lhs_quant_pack_qai8dxp_f32.h"
#include "kai/ukernels/matmul/pack/kai_rhs_pack_nxk_qsi8cxp_qsi8cx_neon.h"

#define BL 32 /* KleidiAI's 4-bit block, and autotune's for 4 bits */
/* KleidiAI's 8-bit C may differ from the exact one by this relative (Frobenius) error
 * (arm_icount.KAI_TOLERANCE, the NEON kind's check). */
#define KAI_TOLERANCE 0.05

typedef struct {
    int64_t bits, block, vl, M, N, K, ours_codes, ours_scales, kai_rhs, panel_codes, panel_scales;
    float *A, *ours_ws, *want, *panel_ws;
    uint8_t *ours_wq, *kai_native, *panel_wq;
} data;

static void load(const char *path, data *d)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    int64_t *h = icount_read(f, 9 * sizeof(int64_t));
    d->bits = h[0], d->block = h[1], d->vl = h[2], d->M = h[3], d->N = h[4], d->K = h[5], d->ours_codes = h[6];
    d->ours_scales = h[7], d->kai_rhs = h[8];
    d->A = icount_read(f, sizeof(float) * (size_t)(d->M * d->K));
    d->ours_wq = icount_read(f, (size_t)d->ours_codes);
    d->ours_ws = icount_read(f, sizeof(float) * (size_t)d->ours_scales);
    d->kai_native = icount_read(f, (size_t)d->kai_rhs);
    d->want = icount_read(f, sizeof(float) * (size_t)(d->M * d->N));
    int64_t *tail = icount_read(f, 2 * sizeof(int64_t));
    d->panel_codes = tail[0], d->panel_scales = tail[1];
    free(tail);
    d->panel_wq = icount_read(f, (size_t)d->panel_codes);
    d->panel_ws = icount_read(f, sizeof(float) * (size_t)d->panel_scales);
    fclose(f);
    free(h);
}

typedef struct {
    int8_t *qa, *qa_tail;
    float *sa, *sa_tail;
} ours_buffers;

static void ours(const data *d, ours_buffers *b, float *C)
{
    const int64_t vl = d->vl, bl = d->block, blocks = d->K / bl, sub = bl / 32;
    const int64_t whole = d->M % vl == 1 ? d->M - 1 : d->M;
    const at_qsme2_fn block = d->bits == 8 ? at_q8_sme2_1vlx4vl : at_q4s_sme2_1vlx4vl;
    const at_qsme2_fn gemv = d->bits == 8 ? at_q8_sme2_1x4vl : at_q4s_sme2_1x4vl;
    if (whole) {
        at_qsme2_quantize_a(whole, d->K, d->A, d->K, bl, blocks, vl, 0, b->qa, b->sa);
        block(blocks, sub, b->qa, whole, b->sa, d->N, d->ours_wq, d->ours_ws, C, d->N, 0);
    }
    if (whole < d->M) {
        at_qsme2_quantize_a(1, d->K, d->A + whole * d->K, d->K, bl, blocks, 1, 0, b->qa_tail, b->sa_tail);
        gemv(blocks, sub, b->qa_tail, 1, b->sa_tail, d->N, d->ours_wq, d->ours_ws, C + whole * d->N, d->N, 0);
    }
}

static void library(const data *d, float *C)
{
    const at_qweights w = {(int32_t)d->bits, 1, d->K, d->N, d->block, d->panel_wq, d->panel_ws, NULL,
                           d->ours_wq, d->ours_ws, d->vl * 32};
    if (at_qmatmul_f32(d->M, d->A, d->K, &w, NULL, NULL, C, d->N) != AT_OK) {
        fprintf(stderr, "at_qmatmul_f32: %s\n", at_last_error());
        exit(2);
    }
}

/* KleidiAI's LHS quantise-and-pack for KERNEL's tile, then KERNEL over the whole C.  A macro
 * rather than a table of function pointers, so the calls between the markers stay direct. */
#define KAI_QMATMUL(KERNEL)                                                                                     \
    do {                                                                                                       \
        kai_run_lhs_quant_pack_qsi8d32p_f32_neon(M, K, BL, kai_get_mr_matmul_clamp_f32_##KERNEL(),             \
                                                 kai_get_kr_matmul_clamp_f32_##KERNEL(),                      \
                                                 kai_get_sr_matmul_clamp_f32_##KERNEL(), 0, d->A,              \
                                                 K * sizeof(float), lhs_packed);                               \
        kai_run_matmul_clamp_f32_##KERNEL(M, N, K, BL, lhs_packed, rhs_packed, C, N * sizeof(float),           \
                                          sizeof(float), -FLT_MAX, FLT_MAX);                                   \
    } while (0)

/* The same for the 8-bit kernels, whose LHS packer (per row, no block) takes no block length. */
#define KAI_QMATMUL8(KERNEL)                                                                                    \
    do {                                                                                                       \
        kai_run_lhs_quant_pack_qai8dxp_f32(M, K, kai_get_mr_matmul_clamp_f32_##KERNEL(),                       \
                                           kai_get_kr_matmul_clamp_f32_##KERNEL(),                            \
                                           kai_get_sr_matmul_clamp_f32_##KERNEL(), 0, d->A, K * sizeof(float), \
                                           lhs_packed);                                                        \
        kai_run_matmul_clamp_f32_##KERNEL(M, N, K, lhs_packed, rhs_packed, C, N * sizeof(float), sizeof(float), \
                                          -FLT_MAX, FLT_MAX);                                                  \
    } while (0)

static void kleidiai(const data *d, void *lhs_packed, const void *rhs_packed, float *C)
{
    const size_t M = (size_t)d->M, N = (size_t)d->N, K = (size_t)d->K;
    if (d->bits == 8) {
        if (M == 1)
            KAI_QMATMUL8(qai8dxp1x4_qsi8cxp4vlx4_1x4vl_sme2_dot);
        else
            KAI_QMATMUL8(qai8dxp1vlx4_qsi8cxp4vlx4_1vlx4vl_sme2_mopa);
    } else if (M == 1) {
        KAI_QMATMUL(qsi8d32p1x4_qsi4c32p4vlx4_1x4vl_sme2_sdot);
    } else {
        KAI_QMATMUL(qsi8d32p1vlx4_qsi4c32p4vlx4_1vlx4vl_sme2_mopa);
    }
}

/* KleidiAI's 8-bit LHS and RHS, packed for the kernel M selects: (lhs_packed, rhs_packed). */
static void kleidiai8_buffers(const data *d, void **lhs_packed, void **rhs_packed)
{
    const size_t M = (size_t)d->M, N = (size_t)d->N, K = (size_t)d->K;
    const int gemv = M == 1;
    const size_t mr = gemv ? kai_get_mr_matmul_clamp_f32_qai8dxp1x4_qsi8cxp4vlx4_1x4vl_sme2_dot()
                           : kai_get_mr_matmul_clamp_f32_qai8dxp1vlx4_qsi8cxp4vlx4_1vlx4vl_sme2_mopa();
    const size_t nr = gemv ? kai_get_nr_matmul_clamp_f32_qai8dxp1x4_qsi8cxp4vlx4_1x4vl_sme2_dot()
                           : kai_get_nr_matmul_clamp_f32_qai8dxp1vlx4_qsi8cxp4vlx4_1vlx4vl_sme2_mopa();
    const size_t kr = gemv ? kai_get_kr_matmul_clamp_f32_qai8dxp1x4_qsi8cxp4vlx4_1x4vl_sme2_dot()
                           : kai_get_kr_matmul_clamp_f32_qai8dxp1vlx4_qsi8cxp4vlx4_1vlx4vl_sme2_mopa();
    const size_t sr = gemv ? kai_get_sr_matmul_clamp_f32_qai8dxp1x4_qsi8cxp4vlx4_1x4vl_sme2_dot()
                           : kai_get_sr_matmul_clamp_f32_qai8dxp1vlx4_qsi8cxp4vlx4_1vlx4vl_sme2_mopa();
    *lhs_packed = malloc(kai_get_lhs_packed_size_lhs_quant_pack_qai8dxp_f32(M, K, mr, kr, sr));
    *rhs_packed = malloc(kai_get_rhs_packed_size_rhs_pack_nxk_qsi8cxp_qsi8cx_neon(N, K, nr, kr, sr));
    const int8_t *codes = (const int8_t *)d->kai_native;
    const float *scales = (const float *)(const void *)(d->kai_native + N * K);
    const struct kai_rhs_pack_qsi8cx_params params = {.lhs_zero_point = 1, .scale_multiplier = 1.0f};
    kai_run_rhs_pack_nxk_qsi8cxp_qsi8cx_neon(1, N, K, nr, kr, sr, codes, NULL, scales, *rhs_packed, 0, &params);
}

int main(int argc, char **argv)
{
    const char *path = getenv("AT_QICOUNT_DATA");
    if (argc != 6 || !path || (strcmp(argv[5], "count") && strcmp(argv[5], "check"))) {
        fprintf(stderr, "usage: AT_QICOUNT_DATA=file %s autotune|library|kleidiai M N K count|check\n", argv[0]);
        return 2;
    }
    const int kai = !strcmp(argv[1], "kleidiai"), lib = !strcmp(argv[1], "library");
    if (!kai && !lib && strcmp(argv[1], "autotune")) {
        fprintf(stderr, "unknown library %s\n", argv[1]);
        return 2;
    }
    data d;
    load(path, &d);
    if (d.M != atol(argv[2]) || d.N != atol(argv[3]) || d.K != atol(argv[4]) || d.vl != at_qsme2_vl()) {
        fprintf(stderr, "the data file is for another shape or SVL\n");
        return 2;
    }
    float *C = malloc(sizeof(float) * (size_t)(d.M * d.N));
    const size_t M = (size_t)d.M, N = (size_t)d.N, K = (size_t)d.K;
    ours_buffers ob = {0};
    void *lhs_packed = NULL, *rhs_packed = NULL;
    if (kai && d.bits == 8) {
        kleidiai8_buffers(&d, &lhs_packed, &rhs_packed);
    } else if (kai) {
        const int gemv = M == 1;
        const size_t mr = gemv ? kai_get_mr_matmul_clamp_f32_qsi8d32p1x4_qsi4c32p4vlx4_1x4vl_sme2_sdot()
                               : kai_get_mr_matmul_clamp_f32_qsi8d32p1vlx4_qsi4c32p4vlx4_1vlx4vl_sme2_mopa();
        const size_t nr = gemv ? kai_get_nr_matmul_clamp_f32_qsi8d32p1x4_qsi4c32p4vlx4_1x4vl_sme2_sdot()
                               : kai_get_nr_matmul_clamp_f32_qsi8d32p1vlx4_qsi4c32p4vlx4_1vlx4vl_sme2_mopa();
        const size_t kr = kai_get_kr_matmul_clamp_f32_qsi8d32p1vlx4_qsi4c32p4vlx4_1vlx4vl_sme2_mopa();
        const size_t sr = kai_get_sr_matmul_clamp_f32_qsi8d32p1vlx4_qsi4c32p4vlx4_1vlx4vl_sme2_mopa();
        lhs_packed = malloc(kai_get_lhs_packed_size_lhs_quant_pack_qsi8d32p_f32_neon(M, K, BL, mr, kr, sr));
        rhs_packed = malloc(kai_get_rhs_packed_size_rhs_pack_nxk_qsi4c32ps1s0scalef16_qsu4c32s16s0_neon(N, K, nr, kr, BL));
        const struct kai_rhs_pack_qs4cxs1s0_param params = {.lhs_zero_point = 1, .rhs_zero_point = 8};
        kai_run_rhs_pack_nxk_qsi4c32ps1s0scalef16_qsu4c32s16s0_neon(1, N, K, nr, kr, sr, BL, d.kai_native, NULL,
                                                                    rhs_packed, 0, &params);
    } else if (!lib) {
        const int64_t blocks = d.K / d.block;
        ob.qa = malloc((size_t)at_qsme2_qa_bytes(d.M, d.K, d.vl));
        ob.sa = malloc(sizeof(float) * (size_t)at_qsme2_sa_count(d.M, blocks, d.vl, 0));
        ob.qa_tail = malloc((size_t)d.K);
        ob.sa_tail = malloc(sizeof(float) * (size_t)blocks);
    }
    const int phases = strcmp(argv[5], "count") ? 1 : 2;
    for (int phase = 1; phase <= phases; ++phase) {
        memset(C, 0xff, sizeof(float) * M * N); /* NaN: a C never written shows */
        icount_begin(phase);
        if (kai) kleidiai(&d, lhs_packed, rhs_packed, C);
        else if (lib) library(&d, C);
        else ours(&d, &ob, C);
        icount_end(phase);
    }
    if (phases == 1) {
        long wrong = 0;
        double err = 0, norm = 0;
        for (size_t i = 0; i < M * N; ++i) {
            wrong += C[i] != d.want[i];
            err += ((double)C[i] - d.want[i]) * ((double)C[i] - d.want[i]);
            norm += (double)d.want[i] * d.want[i];
        }
        const double relative = sqrt(err / (norm > 0 ? norm : 1));
        if (kai && d.bits == 8) wrong = !(relative <= KAI_TOLERANCE); /* NaN too */
        printf("{\"wrong\": %ld, \"relative_error\": %.3g}\n", wrong, relative);
        return wrong != 0;
    }
    return 0;
}
