/* at_kernel.h: the kernel contract.
 *
 * Every generated micro-kernel, on every ISA, computes one mr x nr block of
 *
 *     C = alpha * op(A) * op(B) + beta * C      (column-major, K >= 0)
 *
 * through one of the two signatures below, and is described by one at_kernel
 * record.  The harness registry, the kernel table of libautotune and the Arm
 * drivers of the tests are arrays of this record, all written by
 * autotune/contract.py; nothing else spells the kernel ABI.
 */
#ifndef AT_KERNEL_H
#define AT_KERNEL_H

#include <stdint.h>

/* The two typed signatures.  beta == 0 means C is not read (BLAS: NaN in C
 * does not propagate); alpha and beta are passed even where the kernel was
 * specialised, so one call site serves every kernel. */
typedef void (*at_sgemm_fn)(int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                            float *C, int64_t ldc, float alpha, float beta);
typedef void (*at_dgemm_fn)(int64_t K, const double *A, int64_t lda, const double *B,
                            int64_t ldb, double *C, int64_t ldc, double alpha, double beta);

/* Records hold the entry points type-erased; callers cast back by dtype.
 * void (*)(void) is the one function pointer type C compilers accept casts to
 * and from silently. */
typedef void (*at_kernel_fn)(void);

typedef struct {
    const char *name;     /* at_<s|d>gemm_<isa>_<trans>_<mr>x<nr>[_u<unroll>][_<variant>] */
    const char *isa;      /* the family: "avx512", "avx2", "generic", "neon", "sme2" */
    const char *requires; /* CPU features it needs, HostInfo names: "avx2 fma", "sme2" */
    int32_t dtype;        /* 0 = f32 (at_sgemm_fn), 1 = f64 (at_dgemm_fn) */
    int32_t trans_a, trans_b;
    int32_t mr, nr;
    /* Operand format: 0 when the kernel reads the operand in place through
     * lda / ldb.  Otherwise it reads a packed panel with this leading dimension
     * (op(A)[i, p] at i + p*pack_a_ld, op(B)[p, j] at j + p*pack_b_ld, zero
     * beyond the block), and lda / ldb are ignored. */
    int32_t pack_a_ld, pack_b_ld;
    int32_t svl_bytes;    /* SME2: the streaming vector length it was generated for (it
                           * must not run at another); else 0 */
    at_kernel_fn fn;      /* the entry point of the signature above */
    at_kernel_fn fn_s;    /* SME2: the same kernel for callers already in streaming mode
                           * with ZA on (no mode switch per call); else NULL */
} at_kernel;

#endif
