/* qdriver.c: runs the quantised matmul of an aarch64 libautotune on cases the
 * host wrote (tests/test_quant_arm.py), under QEMU user mode.
 *
 *   qdriver IN OUT
 *
 * IN is a sequence of cases, each: int64 M, K, N, bits, symmetric, block, and the
 * length of a kernel name; the name (empty: the library's own choice,
 * at_qmatmul_f32; else at_qmatmul_f32_using); A (M x K f32, row-major); the packed
 * codes, scales and (asymmetric 4 bits) zero points of autotune.quant.pack_panels.
 * OUT gets, per case, the int64 status and C (M x N f32).  The host computes the
 * reference and compares: this program only calls the library.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune.h"

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
    if (argc != 3) {
        fprintf(stderr, "usage: qdriver IN OUT\n");
        return 2;
    }
    FILE *in = fopen(argv[1], "rb"), *out = fopen(argv[2], "wb");
    if (!in || !out) {
        fprintf(stderr, "qdriver: cannot open %s or %s\n", argv[1], argv[2]);
        return 2;
    }
    int64_t head[7];
    int cases = 0;
    while (read_all(in, head, sizeof head)) {
        const int64_t M = head[0], K = head[1], N = head[2], bits = head[3], symmetric = head[4], block = head[5];
        char *name = malloc((size_t)head[6] + 1);
        if (!name || !read_all(in, name, (size_t)head[6])) {
            fprintf(stderr, "qdriver: truncated input\n");
            return 2;
        }
        name[head[6]] = '\0';
        const int64_t blocks = (K + block - 1) / block, kp = blocks * block;
        const int64_t panels = (N + 31) / 32 * 4;
        const size_t code_bytes = (size_t)(panels * (kp / 32) * (bits == 8 ? 256 : 128));
        const size_t scale_count = (size_t)(panels * blocks * 8);
        float *A = take(in, sizeof(float) * (size_t)(M * K));
        uint8_t *codes = take(in, code_bytes);
        float *scales = take(in, sizeof(float) * scale_count);
        float *zeros = bits == 4 && !symmetric ? take(in, sizeof(float) * scale_count) : NULL;
        float *C = calloc((size_t)(M * N) + 1, sizeof(float));
        const at_qweights w = {(int32_t)bits, (int32_t)symmetric, K, N, block, codes, scales, zeros};
        const int64_t status = name[0] ? at_qmatmul_f32_using(name, M, A, K, &w, NULL, NULL, C, N)
                                       : at_qmatmul_f32(M, A, K, &w, NULL, NULL, C, N);
        fwrite(&status, sizeof status, 1, out);
        fwrite(C, sizeof(float), (size_t)(M * N), out);
        free(name), free(A), free(codes), free(scales), free(zeros), free(C);
        cases++;
    }
    fclose(out);
    printf("{\"event\": \"done\", \"cases\": %d}\n", cases);
    return 0;
}
