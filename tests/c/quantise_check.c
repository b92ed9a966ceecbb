/* quantise_check.c: qgemm.c's quantisers of A side by side, on x86 (tests/test_quant_zmm.py
 * builds it with an empty registry, error.c, pool.c and features.c).  qgemm.c is
 * included, so its static quantisers are called as the library calls them: through
 * quantize_rows, the last partial block in scalar code.  Built with AT_EMULATE_AVX512,
 * the AVX-512 one runs on AVX2 with its intrinsics emulated (avx512_emulated.h).
 *
 * Input (stdin): int64 M, K, block, then M x K float32, row-major.  Output (stdout):
 * two bytes, what quant_block() chooses for ymm and for zmm kernels (0 scalar,
 * 1 AVX2, 2 AVX-512); then per quantiser (scalar, AVX2, AVX-512) a byte, 1 when it
 * ran (this CPU has its features), followed by its M x Kp int8 codes, M x blocks
 * float32 scales and M x blocks float32 code sums. */
#include <stdio.h>

#ifdef AT_EMULATE_AVX512
/* quantize_block_avx512's own source on AVX2: its intrinsics from avx512_emulated.h, and
 * every target attribute of qgemm.c made AVX2's (the AVX2 quantiser's already is), so
 * the compiler emits no AVX-512 instruction.  qgemm.c's headers come first: their
 * include guards keep the macros below out of them. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "at_internal.h"
#include "at_qkernel.h"
#include "autotune.h"
#include "avx512_emulated.h"
#define target(isa) target("avx2,fma")
#define EMULATED 1
#else
#define EMULATED 0
#endif

#include "qgemm.c"

static int code_of(quant_block_fn f) { return f == quantize_block_avx512 ? 2 : f == quantize_block_avx2 ? 1 : 0; }

int main(void)
{
    int64_t head[3];
    if (fread(head, sizeof head, 1, stdin) != 1) return 2;
    const int64_t M = head[0], K = head[1], block = head[2];
    const int64_t blocks = (K + block - 1) / block, kp = blocks * block;
    float *A = malloc(sizeof(float) * (size_t)(M * K));
    int8_t *qa = malloc((size_t)(M * kp));
    float *sa = malloc(sizeof(float) * (size_t)(M * blocks)), *asum = malloc(sizeof(float) * (size_t)(M * blocks));
    if (!A || !qa || !sa || !asum || fread(A, sizeof(float), (size_t)(M * K), stdin) != (size_t)(M * K)) return 2;
    const unsigned char chosen[2] = {(unsigned char)code_of(quant_block(0)), (unsigned char)code_of(quant_block(1))};
    fwrite(chosen, 1, 2, stdout);
    const quant_block_fn paths[3] = {NULL, quantize_block_avx2, quantize_block_avx512};
    const int runs[3] = {1, at__has_features("avx2 fma"), EMULATED ? at__has_features("avx2 fma")
                                                                    : at__has_features("avx512f")};
    for (int p = 0; p < 3; ++p) {
        const unsigned char ran = (unsigned char)runs[p];
        fwrite(&ran, 1, 1, stdout);
        if (!ran) continue;
        /* Stale values from the path before must not pass for this one's. */
        memset(qa, 0x55, (size_t)(M * kp));
        memset(sa, 0x55, sizeof(float) * (size_t)(M * blocks));
        memset(asum, 0x55, sizeof(float) * (size_t)(M * blocks));
        quantize_rows(M, K, A, K, block, blocks, qa, sa, asum, paths[p]);
        fwrite(qa, 1, (size_t)(M * kp), stdout);
        fwrite(sa, sizeof(float), (size_t)(M * blocks), stdout);
        fwrite(asum, sizeof(float), (size_t)(M * blocks), stdout);
    }
    free(A), free(qa), free(sa), free(asum);
    return fflush(stdout) == 0 ? 0 : 1;
}
