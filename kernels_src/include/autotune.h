/* autotune.h: the public C interface of libautotune.
 *
 * Plan once, execute many: at_plan_create() runs the input-aware tiler for one
 * problem description and returns a kernel executing plan; at_plan_execute()
 * runs it with no further decision.  The convenience entry points (at_sgemm,
 * cblas_sgemm, sgemm_, ...) look plans up in a bounded, thread-safe cache.
 *
 * Conventions are BLAS's: C = alpha * op(A) * op(B) + beta * C, op(A) is M x K,
 * op(B) is K x N, C is M x N; beta == 0 never reads C, alpha == 0 never reads A
 * or B.  Results are bitwise identical for any thread count.
 */
#ifndef AUTOTUNE_H
#define AUTOTUNE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AT_ABI_VERSION 1

typedef enum { AT_F32 = 0, AT_F64 = 1 } at_dtype;
typedef enum { AT_COL_MAJOR = 0, AT_ROW_MAJOR = 1 } at_layout;

/* Status codes; every failing call returns one and leaves C untouched. */
enum {
    AT_OK = 0,
    AT_EINVAL = -1,   /* an argument is invalid (dtype, dims, leading dims) */
    AT_ENOMEM = -2,   /* allocation failed */
    AT_ENOKERNEL = -3, /* no kernel of that dtype in the library */
    AT_ENOCPU = -4    /* this CPU lacks an instruction set the library's kernels need */
};

typedef struct at_plan at_plan;

/* One kernel call of a plan, in column-major coordinates of the problem the
 * plan computes (a row-major plan computes C^T = op(B)^T op(A)^T). */
#define AT_PACK_A 1
#define AT_PACK_B 2
typedef struct {
    int32_t kernel; /* index into the library's kernel table; -1: portable edge code */
    int32_t thread; /* which worker runs it */
    int64_t i0, j0; /* top-left element of the block of C */
    int32_t mb, nb; /* block size: the kernel's mr x nr, or less for a variable-block SME2 kernel */
    int32_t pack;   /* AT_PACK_A | AT_PACK_B: operands read from packed panels */
} at_step;

typedef struct {
    int32_t dtype, layout, trans_a, trans_b;
    int64_t M, N, K, lda, ldb, ldc;
    int32_t path;        /* 0: no packing (small GEMM), 1: Goto blocking with packed panels */
    int32_t threads;     /* threads the plan was split for (1 below the size threshold) */
    int32_t kernel_trans;/* transposition of the kernels used ("nn"=0 .. "tt"=3) */
    int32_t a_copied;    /* 1: the no-pack path reads op(A) from a copy in rows along K
                          * (a few rows of an untransposed A), 0: in place */
    int64_t nsteps;      /* steps as at_plan_steps() reports them */
    int64_t blk_m, blk_n, blk_k; /* Goto blocks; on the no-pack path 0, 0 and the K slice
                          * each step walks at a time, every step in turn (0: all of K) */
    double predicted_seconds;
    double memops;       /* elements moved to registers: sum(mb + nb) * K + 2 M N */
    int64_t prefetch_rows; /* no-pack path over an A from memory: how many rows below a
                          * band of whole-line slivers the walk prefetches A (0: none) */
    int64_t direct_steps; /* no-pack path of a few kernel steps on one thread: how many
                          * a call runs straight from the plan's list, each kernel called
                          * from a line of its own (0: through the executor's walk) */
    int64_t column_order; /* no-pack path over a B from memory, C much wider than tall:
                          * 1 where each thread's steps go column by column, not band by
                          * band of rows */
} at_plan_info;

typedef struct {
    const char *name;
    int32_t dtype, trans_a, trans_b, mr, nr;
} at_kernel_info;

/* Planning and execution. */
at_plan *at_plan_create(int dtype, int layout, int trans_a, int trans_b,
                        int64_t M, int64_t N, int64_t K,
                        int64_t lda, int64_t ldb, int64_t ldc);
/* The same for an explicit thread count (0: at_get_num_threads()). */
at_plan *at_plan_create_ex(int dtype, int layout, int trans_a, int trans_b,
                           int64_t M, int64_t N, int64_t K,
                           int64_t lda, int64_t ldb, int64_t ldc, int threads);
int at_plan_execute(const at_plan *plan, double alpha, const void *A,
                    const void *B, double beta, void *C);
/* A batch of problems of the plan's shape: item b uses A + b*stride_a elements etc. */
int at_plan_execute_batch(const at_plan *plan, int64_t batch, double alpha,
                          const void *A, int64_t stride_a, const void *B, int64_t stride_b,
                          double beta, void *C, int64_t stride_c);
/* A batch given by pointer arrays. */
int at_plan_execute_ptrs(const at_plan *plan, int64_t batch, double alpha,
                         const void *const *A, const void *const *B, double beta,
                         void *const *C);
void at_plan_destroy(at_plan *plan);

/* Introspection (for the Python view of plans). */
int at_plan_get_info(const at_plan *plan, at_plan_info *info);
/* Copies up to cap steps; returns the number of steps of the plan. */
int64_t at_plan_steps(const at_plan *plan, at_step *out, int64_t cap);
/* The same from step `first` on: a large plan (10^8 kernel calls for 100000^3)
 * can be read a window at a time. */
int64_t at_plan_steps_from(const at_plan *plan, int64_t first, at_step *out, int64_t cap);
/* Per kernel (index of at_kernel_get; the last slot, at_kernel_count(), is the
 * portable edge code): its calls and the elements of C it computes, without
 * listing the steps.  Both arrays hold at_kernel_count() + 1 entries. */
int at_plan_usage(const at_plan *plan, int64_t *calls, int64_t *elements);
int at_kernel_count(void);
int at_kernel_get(int index, at_kernel_info *info);
/* The last plan-creation error of the calling thread, as text. */
const char *at_last_error(void);

/* Convenience entry points through the plan cache (status codes as above). */
int at_sgemm(int layout, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
             float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
             float beta, float *C, int64_t ldc);
int at_dgemm(int layout, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
             double alpha, const double *A, int64_t lda, const double *B, int64_t ldb,
             double beta, double *C, int64_t ldc);
int at_gemm_batch_strided(int dtype, int layout, int trans_a, int trans_b,
                          int64_t M, int64_t N, int64_t K, double alpha,
                          const void *A, int64_t lda, int64_t stride_a,
                          const void *B, int64_t ldb, int64_t stride_b, double beta,
                          void *C, int64_t ldc, int64_t stride_c, int64_t batch);
/* Either dtype: pointers to float or double, alpha and beta converted. */
int at_gemm(int dtype, int layout, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K,
            double alpha, const void *A, int64_t lda, const void *B, int64_t ldb,
            double beta, void *C, int64_t ldc);
/* Drops every cached plan (plans in use stay alive until their call returns). */
void at_plan_cache_clear(void);
/* Plans created since load, and cache hits: for tests and `autotune plan`. */
void at_plan_cache_stats(int64_t *created, int64_t *hits);
/* Packed products since load run by a team of threads that packed each panel
 * of B once between them, and those that ran without one (the pool was busy,
 * or memory short): for tests and benchmarks. */
void at_team_stats(int64_t *teams, int64_t *declined);

/* Parallel regions the pool has run since load, and the workers' shares the
 * calling thread ran itself because their worker had not started them when it
 * finished its own (asleep, or waiting for a CPU): for tests and benchmarks. */
void at_pool_stats(int64_t *regions, int64_t *taken);

/* The planner's parameters, replaceable at run time so that a tuner can try a
 * setting without rebuilding the library.  Index [0] is f32, [1] f64.  Zero in a
 * cost weight selects the built-in value.  Declared, with defaults and search
 * ranges, in autotune/params.py; a test checks this layout against it. */
typedef struct {
    int64_t blk_m[2], blk_n[2], blk_k[2]; /* Goto blocks of the packed path */
    double pack_flops[2];     /* 2s^3: packed path from these flops on, for an A of s^2 elements or more */
    double thread_flops;      /* 2MNK below which a plan runs on one thread */
    double call_seconds[2];   /* tiler cost charged per kernel call (favours big blocks) */
    double edge_frac[2];      /* speed of portable edge code as a fraction of peak */
    double pack_seconds[2];   /* tiler cost per element copied into a packed panel */
    int32_t grid[2];          /* thread grid: 0 least predicted load, 1 split M, 2 split N */
    double pack_flops_tn[2];  /* a tn product (op(A) = A^T, B as stored; column-major) is packed
                                 from these flops on too, where that is below pack_flops */
    int32_t pack_kernel[2];   /* the packed path's main kernel: 1 + its index in this library's
                                 kernel table (at_kernel_get); 0: the fastest by the table */
    double thread_seconds;    /* fixed cost of a call on several threads (waking and joining
                                 the pool): a plan splits only where its busiest share plus
                                 this beats one thread */
    int32_t place_kernel_nn[2]; /* the main kernel of products read in place, per transposition
                                   (nn: neither operand transposed): 1 + the index of a kernel of */
    int32_t place_kernel_nt[2]; /* that dtype and transposition; 0: the fastest by the table. */
    int32_t place_kernel_tn[2]; /* Taken from K = 64 up to 2 x 128^3 flops, where the install */
    int32_t place_kernel_tt[2]; /* timed it; other products tile by the kernels' figures */
    double place_stream_bytes[2]; /* bytes of an A read in place from which it comes from
                                     memory, not the last-level cache: rows of C of up to 128
                                     bytes (f32 32 columns, fp64 16) stay in place and walk K in
                                     short slices (measured at install) */
} at_tune_params;

/* The parameters plans are made with now (the library's table unless replaced). */
int at_params_get(at_tune_params *out);
/* Replace them (NULL: back to the library's table); no cached plan of the old
 * ones is used again (the cache drops them on its next lookup).  Plans created
 * before stay valid and keep their own decisions.  AT_EINVAL for
 * a negative block or threshold, a grid mode outside 0..2, a pack_kernel
 * that is not one of the library's kernels of that dtype, or a place_kernel_*
 * that is not one of its kernels of that dtype and transposition. */
int at_params_set(const at_tune_params *params);

/* Whether this CPU runs every kernel of the library: AT_OK, or AT_ENOCPU with
 * at_last_error() naming what it lacks (an instruction set, or the streaming
 * vector length the SME2 kernels were generated for).  Either way plans only
 * use the kernels this CPU can run (the portable code covers the rest), so a
 * library moved to an older CPU computes right answers, more slowly. */
int at_cpu_check(void);
/* 1 when this CPU can run kernel `index` (of at_kernel_get), else 0. */
int at_kernel_usable(int index);
/* The CPU features the library's kernels need, space-separated ("avx2 fma"). */
const char *at_required_features(void);

/* Threads: AUTOTUNE_NUM_THREADS at first use, else the online CPUs. */
void at_set_num_threads(int n);
int at_get_num_threads(void);

/* Quantised matmul: C[M,N] (f32, row-major) = A[M,K] (f32, row-major) x W[K,N],
 * W quantised by autotune.quantize_weights and packed in its qpanel8 format
 * (docs/quantised.md).  A is quantised to int8 per row and block of `block`
 * values at call time; a NaN or Inf in a block of A makes its row of C NaN.
 * bias (N floats) is added and clamp ({low, high}) applied when not NULL.
 * Returns AT_OK, or AT_EINVAL / AT_ENOMEM with at_last_error() saying why. */
typedef struct {
    int32_t bits;          /* 4 or 8 */
    int32_t symmetric;     /* 4 bits: 1 for zero point 8, 0 for a zero point per block */
    int64_t k, n;          /* W is k x n */
    int64_t block;         /* rows of K per scale: a multiple of 32 */
    const uint8_t *codes;  /* ceil(n/32)*4 panels of 8 columns; 128 (4 bits) or 256 bytes per 32 rows of K */
    const float *scales;   /* [panels][ceil(k/block)][8] */
    const float *zeros;    /* asymmetric 4 bits: zero points as floats, laid out as scales; else NULL */
    /* Optional: the same weights in the SME2 kernels' format
     * (autotune.quant.pack_sme2), which depends on the streaming vector length it was
     * packed for.  A library with SME2 quantised kernels uses them when sme2_svl equals
     * at_qsme2_svl() (on the calling thread); otherwise these fields are ignored and the
     * arrays above are used.  NULL, NULL, 0 (what an initialiser without them gives): none. */
    const uint8_t *sme2_codes;  /* [panels of 4VL columns][Kp/4 * 8VL bytes (16VL: 8 bits)], VL = sme2_svl / 32 */
    const float *sme2_scales;   /* [panels][blocks][4VL]; asymmetric [panels][blocks][2][4VL]: scales, zero points;
                                 * 8 bits [panels][4VL]: the column's one scale */
    int64_t sme2_svl;           /* the SVL in bits the SME2 form was packed for, 0 for none */
} at_qweights;
int at_qmatmul_f32(int64_t M, const float *A, int64_t lda, const at_qweights *w,
                   const float *bias, const float *clamp, float *C, int64_t ldc);
/* The same with one named kernel for its row blocks (the portable code does the
 * other rows): for validation and benchmarks.  AT_ENOKERNEL for a name the
 * library does not have, of another kind of weights, or that this CPU cannot run. */
int at_qmatmul_f32_using(const char *kernel, int64_t M, const float *A, int64_t lda,
                         const at_qweights *w, const float *bias, const float *clamp, float *C,
                         int64_t ldc);
/* The library's quantised kernels, preferred first: the name of number `index`, NULL past the end.
 * The registry's kernels come first, then (aarch64 libraries built for SME2) the SME2 kernels
 * at_{q4s,q4a,q8}_sme2_1vlx4vl and at_{q4s,q4a,q8}_sme2_1x4vl, which run only on weights with an SME2
 * form. */
const char *at_qkernel_name(int index);
/* The streaming vector length in bits for which this library, on this CPU and thread, would use
 * the weights' SME2 form (at_qweights.sme2_svl); 0 when the library has no SME2 quantised kernels
 * or the CPU has no SME2. */
int at_qsme2_svl(void);
/* How many int8 multiply-adds each thread must have before at_qmatmul_f32 splits a
 * product over more threads (the library's table: measured by the install; 4 Mi when
 * it was not).  at_qthreads_set: AT_EINVAL unless finite and non-negative; 0 goes back
 * to the table's value. */
int at_qthreads_set(double macs_per_thread);
double at_qthreads_get(void);

/* BLAS interfaces. */
#ifndef AT_NO_CBLAS_DECLS
enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112, CblasConjTrans = 113 };
#endif
void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
                 int M, int N, int K, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc);
void cblas_dgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb,
                 int M, int N, int K, double alpha, const double *A, int lda,
                 const double *B, int ldb, double beta, double *C, int ldc);
/* Batches, with MKL's prototypes (LP64: its MKL_INT is int) and OpenBLAS's.
 * Strided: batch_size products of one shape, item i at A + i*stridea (elements),
 * B + i*strideb, C + i*stridec; stridea or strideb 0 shares one operand, stridec
 * must keep the C items apart (>= ldc*N column-major, ldc*M row-major).
 * Grouped: group g has group_size[g] products of shape m_array[g] x n_array[g] x
 * k_array[g] with its own transpositions, scalars and leading dims; their
 * operands are the next group_size[g] entries of A_array, B_array, C_array.
 * Bad arguments go to cblas_xerbla numbered as these prototypes (layout is 1)
 * and nothing is computed; a batch or group of size 0 does nothing. */
void cblas_sgemm_batch_strided(enum CBLAS_ORDER layout, enum CBLAS_TRANSPOSE transa,
                               enum CBLAS_TRANSPOSE transb, int m, int n, int k, float alpha,
                               const float *A, int lda, int stridea, const float *B, int ldb,
                               int strideb, float beta, float *C, int ldc, int stridec,
                               int batch_size);
void cblas_dgemm_batch_strided(enum CBLAS_ORDER layout, enum CBLAS_TRANSPOSE transa,
                               enum CBLAS_TRANSPOSE transb, int m, int n, int k, double alpha,
                               const double *A, int lda, int stridea, const double *B, int ldb,
                               int strideb, double beta, double *C, int ldc, int stridec,
                               int batch_size);
void cblas_sgemm_batch(enum CBLAS_ORDER layout, const enum CBLAS_TRANSPOSE *transa_array,
                       const enum CBLAS_TRANSPOSE *transb_array, const int *m_array,
                       const int *n_array, const int *k_array, const float *alpha_array,
                       const float **A_array, const int *lda_array, const float **B_array,
                       const int *ldb_array, const float *beta_array, float **C_array,
                       const int *ldc_array, int group_count, const int *group_size);
void cblas_dgemm_batch(enum CBLAS_ORDER layout, const enum CBLAS_TRANSPOSE *transa_array,
                       const enum CBLAS_TRANSPOSE *transb_array, const int *m_array,
                       const int *n_array, const int *k_array, const double *alpha_array,
                       const double **A_array, const int *lda_array, const double **B_array,
                       const int *ldb_array, const double *beta_array, double **C_array,
                       const int *ldc_array, int group_count, const int *group_size);
void sgemm_(const char *ta, const char *tb, const int *M, const int *N, const int *K,
            const float *alpha, const float *A, const int *lda, const float *B,
            const int *ldb, const float *beta, float *C, const int *ldc);
void dgemm_(const char *ta, const char *tb, const int *M, const int *N, const int *K,
            const double *alpha, const double *A, const int *lda, const double *B,
            const int *ldb, const double *beta, double *C, const int *ldc);
/* Fortran callers pass hidden string lengths after ldc; the C calling convention
 * lets the callee ignore them, so the prototypes above leave them out.
 *
 * Bad arguments are reported through the host's error handlers, which the library
 * calls but never defines (defining them would replace another library's when
 * preloaded): a program's own, or its BLAS's, xerbla_ receives the routine name
 * ("SGEMM ") and the 1-based Fortran parameter number; cblas_xerbla receives
 * CBLAS's numbering (order is parameter 1), with reference CBLAS's RowMajorStrg
 * set for a row-major gemm (the library defines that flag and CBLAS_CallFromC, as
 * reference CBLAS does).  Without a handler the library prints the message as
 * BLAS does and returns. */
void xerbla_(const char *srname, const int *info, size_t srname_len);
void cblas_xerbla(int p, const char *rout, const char *form, ...);

#ifdef __cplusplus
}
#endif
#endif
