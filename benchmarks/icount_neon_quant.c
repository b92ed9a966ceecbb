/* icount_neon_quant.c: one quantised matmul (f32 A x symmetric 4-bit W, blocks of 32),
 * autotune's or KleidiAI's, between two marker functions (icount.h), for counting guest
 * instructions under QEMU (`python -m benchmarks.arm_icount --quantised --isa neon`).
 *
 *   icount_neon_quant IN WHO OUT
 *
 * IN (written by the Python side): int64 M, N, K, block; A (M x K f32); autotune's
 * packed weights (int64 byte count, then the qpanel8 codes; int64 count, then
 * the f32 scales); KleidiAI's native weights (int64 byte count, then
 * qsu4c32s16s0: per column and block an f16 scale and 16 bytes per 32 values of K).
 * WHO: "autotune" (at_qmatmul_f32, the library's choice), "autotune:NAME"
 * (at_qmatmul_f32_using), "kai-dotprod" (LHS quantise-and-pack + the 1x4 dotprod
 * kernel for M = 1, the 16x4 dotprod kernel above) or "kai-i8mm" (the same + the
 * 16x4 i8mm kernel).  KleidiAI's RHS packing
 * happens before the markers, as autotune's happens when W is quantised: what
 * is counted is what a call costs once the weights are loaded.
 * The call runs twice, phase 1 and phase 2, each between icount_begin and
 * icount_end; OUT gets C (M x N f32) of the second.
 */
#include <float.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune.h"
/* The program's file name (arm_icount.py keeps the one the published counts were measured with). */
#define ICOUNT_PROGRAM "arm_neon_qicount"
#include "icount.h"

#ifdef AT_KLEIDIAI
#include "kai/ukernels/matmul/matmul_clamp_f32_qsi8d32p_qsi4c32p/kai_matmul_clamp_f32_qsi8d32p1x4_qsi4c32p4x4_1x4_neon_dotprod.h"
#include "kai/ukernels/matmul/matmul_clamp_f32_qsi8d32p_qsi4c32p/kai_matmul_clamp_f32_qsi8d32p4x4_qsi4c32p4x4_16x4_neon_dotprod.h"
#include "kai/ukernels/matmul/matmul_clamp_f32_qsi8d32p_qsi4c32p/kai_matmul_clamp_f32_qsi8d32p4x8_qsi4c32p4x8_16x4_neon_i8mm.h"
#include "kai/ukernels/matmul/pack/kai_lhs_quant_pack_qsi8d32p_f32.h"
#include "kai/ukernels/matmul/pack/kai_rhs_pack_nxk_qsi4c32pscalef16_qsu4c32s16s0.h"
#endif

#ifdef AT_KLEIDIAI
/* KleidiAI's micro-kernel API for one of its two kernels. */
typedef struct {
    size_t (*mr)(void), (*nr)(void), (*kr)(void), (*sr)(void);
    void (*run)(size_t m, size_t n, size_t k, size_t bl, const void *lhs, const void *rhs, float *dst,
                size_t dst_stride_row, size_t dst_stride_col, float lo, float hi);
} kai_kernel;

static const kai_kernel KAI_DOTPROD = {
    kai_get_mr_matmul_clamp_f32_qsi8d32p1x4_qsi4c32p4x4_1x4_neon_dotprod,
    kai_get_nr_matmul_clamp_f32_qsi8d32p1x4_qsi4c32p4x4_1x4_neon_dotprod,
    kai_get_kr_matmul_clamp_f32_qsi8d32p1x4_qsi4c32p4x4_1x4_neon_dotprod,
    kai_get_sr_matmul_clamp_f32_qsi8d32p1x4_qsi4c32p4x4_1x4_neon_dotprod,
    kai_run_matmul_clamp_f32_qsi8d32p1x4_qsi4c32p4x4_1x4_neon_dotprod,
};
static const kai_kernel KAI_DOTPROD_16X4 = {
    kai_get_mr_matmul_clamp_f32_qsi8d32p4x4_qsi4c32p4x4_16x4_neon_dotprod,
    kai_get_nr_matmul_clamp_f32_qsi8d32p4x4_qsi4c32p4x4_16x4_neon_dotprod,
    kai_get_kr_matmul_clamp_f32_qsi8d32p4x4_qsi4c32p4x4_16x4_neon_dotprod,
    kai_get_sr_matmul_clamp_f32_qsi8d32p4x4_qsi4c32p4x4_16x4_neon_dotprod,
    kai_run_matmul_clamp_f32_qsi8d32p4x4_qsi4c32p4x4_16x4_neon_dotprod,
};
static const kai_kernel KAI_I8MM = {
    kai_get_mr_matmul_clamp_f32_qsi8d32p4x8_qsi4c32p4x8_16x4_neon_i8mm,
    kai_get_nr_matmul_clamp_f32_qsi8d32p4x8_qsi4c32p4x8_16x4_neon_i8mm,
    kai_get_kr_matmul_clamp_f32_qsi8d32p4x8_qsi4c32p4x8_16x4_neon_i8mm,
    kai_get_sr_matmul_clamp_f32_qsi8d32p4x8_qsi4c32p4x8_16x4_neon_i8mm,
    kai_run_matmul_clamp_f32_qsi8d32p4x8_qsi4c32p4x8_16x4_neon_i8mm,
};
#endif

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: " ICOUNT_PROGRAM " IN WHO OUT\n");
        return 2;
    }
    FILE *in = fopen(argv[1], "rb");
    if (!in) return 2;
    int64_t head[4];
    if (fread(head, sizeof head, 1, in) != 1) return 2;
    const int64_t M = head[0], N = head[1], K = head[2], block = head[3];
    float *A = icount_read(in, sizeof(float) * (size_t)(M * K));
    size_t code_bytes, scale_bytes, native_bytes;
    uint8_t *codes = icount_read_counted(in, &code_bytes);
    float *scales = icount_read_counted(in, &scale_bytes);
    uint8_t *native = icount_read_counted(in, &native_bytes);
    fclose(in);
    float *C = calloc((size_t)(M * N), sizeof(float));
    const char *who = argv[2];
    const at_qweights w = {4, 1, K, N, block, codes, scales, NULL};
    int status = 0;

#ifdef AT_KLEIDIAI
    /* The 1x4 dotprod kernel computes one row only: more rows take the 16x4 one. */
    const kai_kernel *kai = strcmp(who, "kai-dotprod") == 0 ? (M == 1 ? &KAI_DOTPROD : &KAI_DOTPROD_16X4)
                            : strcmp(who, "kai-i8mm") == 0  ? &KAI_I8MM
                                                            : NULL;
    void *lhs_packed = NULL, *rhs_packed = NULL;
    if (kai) {
        const size_t mr = kai->mr(), nr = kai->nr(), kr = kai->kr(), sr = kai->sr();
        lhs_packed = malloc(kai_get_lhs_packed_size_lhs_quant_pack_qsi8d32p_f32((size_t)M, (size_t)K, (size_t)block,
                                                                                mr, kr, sr));
        rhs_packed = malloc(kai_get_rhs_packed_size_rhs_pack_nxk_qsi4c32pscalef16_qsu4c32s16s0((size_t)N, (size_t)K,
                                                                                              nr, kr, (size_t)block));
        const struct kai_rhs_pack_qs4cxs1s0_param params = {.lhs_zero_point = 1, .rhs_zero_point = 8};
        kai_run_rhs_pack_nxk_qsi4c32pscalef16_qsu4c32s16s0(1, (size_t)N, (size_t)K, nr, kr, sr, (size_t)block, native,
                                                           NULL, rhs_packed, 0, &params);
    }
#else
    const void *kai = NULL;
    if (strncmp(who, "kai", 3) == 0) {
        fprintf(stderr, ICOUNT_PROGRAM ": built without KleidiAI\n");
        return 2;
    }
#endif
    (void)native_bytes, (void)code_bytes, (void)scale_bytes;
    for (int phase = 1; phase <= 2; ++phase) {
        icount_begin(phase);
        if (!kai) {
            status = strncmp(who, "autotune:", 9) == 0
                         ? at_qmatmul_f32_using(who + 9, M, A, K, &w, NULL, NULL, C, N)
                         : at_qmatmul_f32(M, A, K, &w, NULL, NULL, C, N);
        }
#ifdef AT_KLEIDIAI
        else {
            kai_run_lhs_quant_pack_qsi8d32p_f32((size_t)M, (size_t)K, (size_t)block, kai->mr(), kai->kr(), kai->sr(),
                                                0, A, sizeof(float) * (size_t)K, lhs_packed);
            kai->run((size_t)M, (size_t)N, (size_t)K, (size_t)block, lhs_packed, rhs_packed, C,
                     sizeof(float) * (size_t)N, sizeof(float), -FLT_MAX, FLT_MAX);
        }
#endif
        icount_end(phase);
    }
    if (status != 0) {
        fprintf(stderr, ICOUNT_PROGRAM ": %s returned %d: %s\n", who, status, at_last_error());
        return 1;
    }
    FILE *out = fopen(argv[3], "wb");
    if (!out || fwrite(C, sizeof(float), (size_t)(M * N), out) != (size_t)(M * N)) return 2;
    fclose(out);
    return 0;
}
