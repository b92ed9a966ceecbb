/* qharness.c: runs the quantised matmul of a libautotune (linked statically) on
 * cases the host wrote: install's validation of an Arm library's quantised kernels
 * (autotune.qsuite, natively or under QEMU user mode) and the tests.
 *
 *   qharness IN OUTDIR NAME...  every case of IN with each kernel NAME forced, C to
 *                        OUTDIR/NAME.bin; JSON events "start" and "result" per
 *                        kernel and "done" at the end, for autotune.measure.drive,
 *                        which starts it again past a kernel that crashed
 *   qharness IN OUT      every case as it names its kernel, C to OUT
 *   qharness svl         prints at_qsme2_svl(): the SVL whose SME2 form the library would use
 *   qharness names       prints at_qkernel_name(i), one a line
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

#include "at_qkernel.h"
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
        fprintf(stderr, "qharness: truncated input\n");
        exit(2);
    }
    return p;
}

/* Reads one case of `in` and writes its status and C to `out`, with kernel `force`
 * (NULL: the one the case names); 0 at the end of `in`. */
static int run_case(FILE *in, FILE *out, const char *force)
{
    int64_t head[H_COUNT];
    if (!read_all(in, head, sizeof head)) return 0;
    const int64_t M = head[H_M], K = head[H_K], N = head[H_N], bits = head[H_BITS], block = head[H_BLOCK];
    const int64_t symmetric = head[H_SYM], ldc = head[H_LDC], flags = head[H_FLAGS];
    char *name = malloc((size_t)head[H_NAME] + 1);
    if (!name || !read_all(in, name, (size_t)head[H_NAME])) {
        fprintf(stderr, "qharness: truncated input\n");
        exit(2);
    }
    name[head[H_NAME]] = '\0';
    const char *kernel = force ? force : name;
    const int64_t blocks = (K + block - 1) / block, kp = blocks * block;
    const int64_t panels = (N + AT_QPAD_COLUMNS - 1) / AT_QPAD_COLUMNS * (AT_QPAD_COLUMNS / AT_QPANEL);
    const size_t code_bytes = (size_t)(panels * (kp / AT_QSUB) * (bits == 8 ? AT_QSUB_BYTES_8 : AT_QSUB_BYTES_4));
    const size_t scale_count = (size_t)(panels * blocks * AT_QPANEL);
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
    const int64_t status = kernel[0] ? at_qmatmul_f32_using(kernel, M, A, K, &w, bias, clamp, C, ldc)
                                     : at_qmatmul_f32(M, A, K, &w, bias, clamp, C, ldc);
    fwrite(&status, sizeof status, 1, out);
    fwrite(C, sizeof(float), (size_t)(M * ldc), out);
    free(name), free(A), free(codes), free(scales), free(zeros), free(sme2_codes), free(sme2_scales);
    free(bias), free(clamp), free(C);
    return 1;
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
    if (argc < 3) {
        fprintf(stderr, "usage: qharness IN OUTDIR NAME... | qharness IN OUT | qharness svl | qharness names\n");
        return 2;
    }
    FILE *in = fopen(argv[1], "rb");
    if (!in) {
        fprintf(stderr, "qharness: cannot open %s\n", argv[1]);
        return 2;
    }
    int cases = 0;
    if (argc == 3) {
        FILE *out = fopen(argv[2], "wb");
        if (!out) {
            fprintf(stderr, "qharness: cannot open %s\n", argv[2]);
            return 2;
        }
        while (run_case(in, out, NULL)) cases++;
        fclose(out);
        printf("{\"event\": \"done\", \"cases\": %d}\n", cases);
        return 0;
    }
    for (int i = 3; i < argc; ++i) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.bin", argv[2], argv[i]);
        FILE *out = fopen(path, "wb");
        if (!out) {
            printf("{\"event\": \"error\", \"kernel\": \"%s\", \"message\": \"cannot open its output\"}\n", argv[i]);
            continue;
        }
        printf("{\"event\": \"start\", \"kernel\": \"%s\"}\n", argv[i]);
        fflush(stdout); /* what a crash is blamed on */
        rewind(in);
        for (cases = 0; run_case(in, out, argv[i]); cases++) {
        }
        fclose(out);
        printf("{\"event\": \"result\", \"kernel\": \"%s\", \"cases\": %d}\n", argv[i], cases);
        fflush(stdout);
    }
    printf("{\"event\": \"done\"}\n");
    return 0;
}
