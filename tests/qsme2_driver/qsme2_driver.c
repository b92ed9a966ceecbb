/* qsme2_driver.c: runs the SME2 quantised kernels on cases written by
 * tests/test_quant_sme2.py, under QEMU (or on an SME2 machine).
 *
 *   qsme2_driver vl                 prints VL (int32 lanes of the SVL)
 *   qsme2_driver run CASE OUT ...   per pair: reads CASE, writes C to OUT
 *
 * A case: int64 header {vl, form (0 block kernel, 1 GEMV; plus 2 for asymmetric 4-bit weights, 4 for 8-bit
 * ones), M, K, N, block, blocks,
 * ldc, load_c, code bytes, scale count}, then A (M x K f32, row-major), the weights'
 * codes and scales (autotune.quant.pack_sme2 for that vl) and C's initial M x ldc
 * values.  A is quantised and packed by at_qsme2_quantize_a and the kernel computes
 * all of C; OUT gets C's M x ldc values (columns past N must come back untouched). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "at_qsme2.h"

enum { H_VL, H_FORM, H_M, H_K, H_N, H_BLOCK, H_BLOCKS, H_LDC, H_LOADC, H_CODES, H_SCALES, H_COUNT };

static void *read_exact(FILE *f, size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p || fread(p, 1, bytes, f) != bytes) {
        fprintf(stderr, "short case file\n");
        exit(2);
    }
    return p;
}

static int run_case(const char *in_path, const char *out_path)
{
    FILE *f = fopen(in_path, "rb");
    if (!f) {
        perror(in_path);
        return 2;
    }
    int64_t *h = read_exact(f, sizeof(int64_t) * H_COUNT);
    const int64_t vl = h[H_VL], M = h[H_M], K = h[H_K], N = h[H_N], block = h[H_BLOCK], blocks = h[H_BLOCKS];
    const int64_t ldc = h[H_LDC];
    if (vl != at_qsme2_vl()) {
        fprintf(stderr, "case packed for VL %lld, this CPU has VL %lld\n", (long long)vl, (long long)at_qsme2_vl());
        return 3;
    }
    float *A = read_exact(f, sizeof(float) * (size_t)(M * K));
    uint8_t *wq = read_exact(f, (size_t)h[H_CODES]);
    float *ws = read_exact(f, sizeof(float) * (size_t)h[H_SCALES]);
    float *C = read_exact(f, sizeof(float) * (size_t)(M * ldc));
    fclose(f);
    const int64_t gemv = h[H_FORM] & 1, kind = h[H_FORM] >> 1, asym = kind == 1, mr = gemv ? 1 : vl;
    const int64_t kp = blocks * block;
    int8_t *qa = malloc((size_t)at_qsme2_qa_bytes(M, kp, mr));
    float *sa = malloc(sizeof(float) * (size_t)at_qsme2_sa_count(M, blocks, mr, asym));
    at_qsme2_quantize_a(M, K, A, K, block, blocks, mr, asym, qa, sa);
    static const at_qsme2_fn kernels[3][2] = {{at_q4s_sme2_1vlx4vl, at_q4s_sme2_1x4vl},
                                              {at_q4a_sme2_1vlx4vl, at_q4a_sme2_1x4vl},
                                              {at_q8_sme2_1vlx4vl, at_q8_sme2_1x4vl}};
    if (kind > 2) {
        fprintf(stderr, "unknown form %lld\n", (long long)h[H_FORM]);
        return 2;
    }
    const at_qsme2_fn fn = kernels[kind][gemv];
    fn(blocks, block / 32, qa, M, sa, N, wq, ws, C, ldc, h[H_LOADC]);
    FILE *o = fopen(out_path, "wb");
    if (!o || fwrite(C, sizeof(float), (size_t)(M * ldc), o) != (size_t)(M * ldc)) {
        perror(out_path);
        return 2;
    }
    fclose(o);
    free(A), free(wq), free(ws), free(C), free(qa), free(sa), free(h);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "vl")) {
        printf("%lld\n", (long long)at_qsme2_vl());
        return 0;
    }
    if (argc < 4 || strcmp(argv[1], "run") || (argc - 2) % 2) {
        fprintf(stderr, "usage: qsme2_driver vl | run CASE OUT [CASE OUT ...]\n");
        return 2;
    }
    for (int i = 2; i < argc; i += 2) {
        const int rc = run_case(argv[i], argv[i + 1]);
        if (rc) return rc;
    }
    return 0;
}
