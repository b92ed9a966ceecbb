/* icount_float.c: the program `python -m benchmarks.arm_icount` runs under qemu-aarch64
 * to count guest instructions of one float GEMM call.
 *
 *   icount_float autotune M N K count|check   cblas_sgemm, row-major NN, alpha 1, beta 0: twice
 *   icount_float kleidiai M N K count|check   KleidiAI's f32 SME2 path (built with -DAT_KLEIDIAI)
 *   icount_float kleidiai-neon M N K count|check   KleidiAI's f32 NEON path (the same build)
 *
 * Each measured call sits between two marker functions, icount_begin(phase) and
 * icount_end(phase) (icount.h): phase 1 is the first call (for autotune it plans the shape),
 * phase 2 the same call again (autotune's plan is cached).  The counter attributes
 * every instruction executed between a begin and the next end to a symbol; the
 * markers are noinline and do nothing, so they only show where a phase starts.
 *
 * KleidiAI's call is what a BLAS-like user of it does: pack op(A) (LHS, M x K) with
 * kai_run_lhs_pack_f32p2vlx1_f32_sme, pack B (RHS, K x N, with a zero bias) with
 * kai_run_rhs_pack_kxn_f32p2vlx1biasf32_f32_f32_sme, then run
 * kai_run_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa over the whole C.
 * Its packed buffers are allocated outside the markers (a caller would keep
 * them); autotune's call allocates its panels inside (that is its real cost).
 * KleidiAI's NEON path (for the NEON library, run on a CPU model without SME)
 * reads the LHS in place: pack B (K x N, zero bias) with
 * kai_run_rhs_pack_kxn_x32p16x1b_x32_x32_neon, then run
 * kai_run_matmul_clamp_f32_f32_f32p16x1b_6x16_neon_mla over the whole C.
 *
 * With `check`, the result is compared with a double-precision reference:
 * |c - ref| <= 2 (K + 2) eps sum |a||b|; the program prints one JSON line and
 * exits 1 on a wrong answer.  Operand values are small integers over 8, so the
 * check is meaningful at any K.  With `count` the program stops after the second
 * call: the counter runs it under QEMU's per-instruction log, where a reference
 * of M N K multiply-adds would cost far more than the calls measured. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune.h"
#define ICOUNT_PROGRAM "arm_icount"
#include "icount.h"

#ifdef AT_KLEIDIAI
#include "kai/ukernels/matmul/matmul_clamp_f32_f32p_f32p/kai_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa.h"
#include "kai/ukernels/matmul/pack/kai_lhs_pack_f32p2vlx1_f32_sme.h"
#include "kai/ukernels/matmul/pack/kai_rhs_pack_kxn_f32p2vlx1biasf32_f32_f32_sme.h"
#include "kai/ukernels/matmul/matmul_clamp_f32_f32_f32p/kai_matmul_clamp_f32_f32_f32p16x1b_6x16_neon_mla.h"
#include "kai/ukernels/matmul/pack/kai_rhs_pack_kxn_x32p16x1b_x32_x32_neon.h"
#endif

static float value(long i, long j, int salt) { return (float)((i * 7 + j * 3 + salt) % 17 - 8) / 8.0f; }

#ifdef AT_KLEIDIAI
typedef struct {
    void *lhs_packed, *rhs_packed;
    float *bias;
} kai_buffers;

static int kai_alloc(kai_buffers *b, size_t M, size_t N, size_t K, int neon)
{
    if (neon) {
        b->lhs_packed = NULL;
        b->rhs_packed = malloc(kai_get_rhs_packed_size_rhs_pack_kxn_x32p16x1b_x32_x32_neon(N, K));
        b->bias = calloc(N ? N : 1, sizeof(float));
        return b->rhs_packed && b->bias;
    }
    size_t mr = kai_get_mr_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa();
    size_t kr = kai_get_kr_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa();
    size_t sr = kai_get_sr_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa();
    b->lhs_packed = malloc(kai_get_lhs_packed_size_lhs_pack_f32p2vlx1_f32_sme(M, K, mr, kr, sr));
    b->rhs_packed = malloc(kai_get_rhs_packed_size_rhs_pack_kxn_f32p2vlx1biasf32_f32_f32_sme(N, K));
    b->bias = calloc(N ? N : 1, sizeof(float));
    return b->lhs_packed && b->rhs_packed && b->bias;
}

static void kai_gemm(kai_buffers *b, size_t M, size_t N, size_t K, const float *A, const float *B, float *C)
{
    size_t mr = kai_get_mr_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa();
    size_t nr = kai_get_nr_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa();
    size_t kr = kai_get_kr_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa();
    size_t sr = kai_get_sr_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa();
    kai_run_lhs_pack_f32p2vlx1_f32_sme(M, K, mr, kr, sr, 0, A, K * sizeof(float), b->lhs_packed);
    kai_run_rhs_pack_kxn_f32p2vlx1biasf32_f32_f32_sme(1, N, K, nr, kr, sr, N * sizeof(float), B, b->bias, NULL,
                                                     b->rhs_packed, 0, NULL);
    kai_run_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa(M, N, K, b->lhs_packed, b->rhs_packed, C,
                                                                 N * sizeof(float), sizeof(float), -FLT_MAX,
                                                                 FLT_MAX);
}

static void kai_gemm_neon(kai_buffers *b, size_t M, size_t N, size_t K, const float *A, const float *B, float *C)
{
    size_t nr = kai_get_nr_matmul_clamp_f32_f32_f32p16x1b_6x16_neon_mla();
    size_t kr = kai_get_kr_matmul_clamp_f32_f32_f32p16x1b_6x16_neon_mla();
    size_t sr = kai_get_sr_matmul_clamp_f32_f32_f32p16x1b_6x16_neon_mla();
    kai_run_rhs_pack_kxn_x32p16x1b_x32_x32_neon(1, N, K, nr, kr, sr, N * sizeof(float), B, b->bias, NULL,
                                                b->rhs_packed, 0, NULL);
    kai_run_matmul_clamp_f32_f32_f32p16x1b_6x16_neon_mla(M, N, K, A, K * sizeof(float), b->rhs_packed, C,
                                                         N * sizeof(float), sizeof(float), -FLT_MAX, FLT_MAX);
}
#endif

int main(int argc, char **argv)
{
    if (argc != 6 || (strcmp(argv[5], "count") != 0 && strcmp(argv[5], "check") != 0)) {
        fprintf(stderr, "usage: %s autotune|kleidiai|kleidiai-neon M N K count|check\n", argv[0]);
        return 2;
    }
    const char *lib = argv[1];
    long M = atol(argv[2]), N = atol(argv[3]), K = atol(argv[4]);
    int neon = strcmp(lib, "kleidiai-neon") == 0, kai = neon || strcmp(lib, "kleidiai") == 0;
    if (!kai && strcmp(lib, "autotune") != 0) {
        fprintf(stderr, "unknown library %s\n", lib);
        return 2;
    }
#ifndef AT_KLEIDIAI
    if (kai) {
        fprintf(stderr, "this driver was built without KleidiAI\n");
        return 2;
    }
#endif
    float *A = malloc(sizeof(float) * (size_t)(M * K + 1));
    float *B = malloc(sizeof(float) * (size_t)(K * N + 1));
    float *C = malloc(sizeof(float) * (size_t)(M * N + 1));
    if (!A || !B || !C) return 3;
    for (long i = 0; i < M; i++)
        for (long p = 0; p < K; p++) A[i * K + p] = value(i, p, 1); /* row-major M x K */
    for (long p = 0; p < K; p++)
        for (long j = 0; j < N; j++) B[p * N + j] = value(p, j, 5); /* row-major K x N */
#ifdef AT_KLEIDIAI
    kai_buffers kb;
    if (kai && !kai_alloc(&kb, (size_t)M, (size_t)N, (size_t)K, neon)) return 3;
#endif
    for (int phase = 1; phase <= 2; phase++) {
        for (long x = 0; x < M * N; x++) C[x] = NAN; /* beta = 0 must not read C */
        icount_begin(phase);
        if (!kai)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.0f, A, (int)K, B,
                        (int)N, 0.0f, C, (int)N);
#ifdef AT_KLEIDIAI
        else if (neon)
            kai_gemm_neon(&kb, (size_t)M, (size_t)N, (size_t)K, A, B, C);
        else
            kai_gemm(&kb, (size_t)M, (size_t)N, (size_t)K, A, B, C);
#endif
        icount_end(phase);
    }
    if (strcmp(argv[5], "count") == 0) return 0;
    double worst = 0;
    long bad = 0;
    for (long i = 0; i < M; i++)
        for (long j = 0; j < N; j++) {
            double ref = 0, mag = 0;
            for (long p = 0; p < K; p++) {
                ref += (double)A[i * K + p] * B[p * N + j];
                mag += fabs((double)A[i * K + p] * B[p * N + j]);
            }
            double err = fabs(C[i * N + j] - ref), tol = 2.0 * (K + 2) * FLT_EPSILON * mag;
            if (!(err <= tol)) bad++;
            if (mag > 0 && err / mag > worst) worst = err / mag;
        }
    printf("{\"library\": \"%s\", \"M\": %ld, \"N\": %ld, \"K\": %ld, \"wrong\": %ld, \"worst\": %.3g}\n", lib, M, N,
           K, bad, worst);
    return bad ? 1 : 0;
}
