/* qdriver.c: runs the quantised matmul of an aarch64 libautotune on cases the
 * host wrote (tests/test_quant_arm.py, tests/test_quant_sme2_library.py), under
 * QEMU user mode.
 *
 *   qdriver IN OUT
 *   qdriver svl          prints at_qsme2_svl(): the SVL whose SME2 form the library would use
 *   qdriver names        prints at_qkernel_name(i), one a line
 *
 * IN is a sequence of cases, each: int64 M, K, N, bits, symmetric, block, the
 * length of a kernel name, the SME2 form's SVL in bits (0: none), its code bytes
 * and scale count, ldc, and flags (1: a bias follows, 2: a clamp follows); the
 * name (empty: the library's own choice, at_qmatmul_f32; else at_qmatmul_f32_using);
 * A (M x K f32, row-major); the packed codes, scales and (asymmetric 4 bits) zero
 * points of autotune.quant.pack_panels; the SME2 form's codes and scales
 * (autotune.quant.pack_sme2); the bias (N floats) and clamp (2 floats) if flagged.
 * OUT gets, per case, the int64 status and C (M x ldc f32; C starts as all-ones
 * bytes, a NaN, so columns past N must come back as they were).  The host computes
 * the reference and compares: this program only calls the library.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune.h"

enum { H_M, H_K, H_N, H_BITS, H_SYM, H_BLOCK, H_NAME, H_SVL, H_SCODES, H_SSCALES, H_LDC, H_FLAGS, H_COUNT };

static int read_all(FILE *f, void *dst, size_t bytes)
{
    return fread(dst, 1, bytes, f) == bytes;
}

static void *take(FILE *f, size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p || !read_all(f, p, bytes)) {
        fprintf(stderr, "qdriver: truncated input\n");
        exit(2);
    }
    return p;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "svl")) {
        printf("%d\n", at_qsme2_svl());
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "names")) {
        for (int i = 0; at_qkernel_name(i); ++i) printf("%s\n", at_qkernel_name(i));
        return 0;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: qdriver IN OUT | qdriver svl | qdriver names\n");
        return 2;
    }
    FILE *in = fopen(argv[1], "rb"), *out = fopen(argv[2], "wb");
    if (!in || !out) {
        fprintf(stderr, "qdriver: cannot open %s or %s\n", argv[1], argv[2]);
        return 2;
    }
    int64_t head[H_COUNT];
    int cases = 0;
    while (read_all(in, head, sizeof head)) {
        const int64_t M = head[H_M], K = head[H_K], N = head[H_N], bits = head[H_BITS], block = head[H_BLOCK];
        const int64_t symmetric = head[H_SYM], ldc = head[H_LDC], flags = head[H_FLAGS];
        char *name = malloc((size_t)head[H_NAME] + 1);
        if (!name || !read_all(in, name, (size_t)head[H_NAME])) {
            fprintf(stderr, "qdriver: truncated input\n");
            return 2;
        }
        name[head[H_NAME]] = '\0';
        const int64_t blocks = (K + block - 1) / block, kp = blocks * block;
        const int64_t panels = (N + 31) / 32 * 4;
        const size_t code_bytes = (size_t)(panels * (kp / 32) * (bits == 8 ? 256 : 128));
        const size_t scale_count = (size_t)(panels * blocks * 8);
        float *A = take(in, sizeof(float) * (size_t)(M * K));
        uint8_t *codes = take(in, code_bytes);
        float *scales = take(in, sizeof(float) * scale_count);
        float *zeros = bits == 4 && !symmetric ? take(in, sizeof(float) * scale_count) : NULL;
        uint8_t *sme2_codes = head[H_SVL] ? take(in, (size_t)head[H_SCODES]) : NULL;
        float *sme2_scales = head[H_SVL] ? take(in, sizeof(float) * (size_t)head[H_SSCALES]) : NULL;
        float *bias = flags & 1 ? take(in, sizeof(float) * (size_t)N) : NULL;
        float *clamp = flags & 2 ? take(in, sizeof(float) * 2) : NULL;
        float *C = malloc(sizeof(float) * (size_t)(M * ldc + 1));
        memset(C, 0xff, sizeof(float) * (size_t)(M * ldc + 1));
        const at_qweights w = {(int32_t)bits, (int32_t)symmetric, K, N, block, codes, scales, zeros,
                               sme2_codes, sme2_scales, head[H_SVL]};
        const int64_t status = name[0] ? at_qmatmul_f32_using(name, M, A, K, &w, bias, clamp, C, ldc)
                                       : at_qmatmul_f32(M, A, K, &w, bias, clamp, C, ldc);
        fwrite(&status, sizeof status, 1, out);
        fwrite(C, sizeof(float), (size_t)(M * ldc), out);
        free(name), free(A), free(codes), free(scales), free(zeros), free(sme2_codes), free(sme2_scales);
        free(bias), free(clamp), free(C);
        cases++;
    }
    fclose(out);
    printf("{\"event\": \"done\", \"cases\": %d}\n", cases);
    return 0;
}
