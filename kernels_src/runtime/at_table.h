/* at_table.h: the format of the generated kernel table (at_table.c).
 *
 * `autotune install` writes one at_table.c per library with
 * autotune.runtime.library.emit_kernel_table_c(): a declaration of every selected
 * kernel, an array of descriptors and the planner's parameters.  The runtime
 * reads nothing else; the hot path never opens a file.
 */
#ifndef AT_TABLE_H
#define AT_TABLE_H

#include <stdint.h>

#define AT_KGRID_MAX 8
#define AT_TABLE_FORMAT 1

/* Every kernel has the ABI of docs/architecture.md; the descriptor stores it
 * type-erased and the executor casts it back by dtype. */
typedef void (*at_kernel_fn)(void);
typedef void (*at_skernel)(int64_t K, const float *A, int64_t lda, const float *B,
                           int64_t ldb, float *C, int64_t ldc, float alpha, float beta);
typedef void (*at_dkernel)(int64_t K, const double *A, int64_t lda, const double *B,
                           int64_t ldb, double *C, int64_t ldc, double alpha, double beta);

typedef struct {
    const char *name;
    int32_t dtype;            /* 0 = f32, 1 = f64 */
    int32_t trans_a, trans_b;
    int32_t mr, nr;
    at_kernel_fn fn;
    int32_t nk;               /* points of the K grid measured (<= AT_KGRID_MAX) */
    int32_t k[AT_KGRID_MAX];  /* ascending */
    double gflops[AT_KGRID_MAX]; /* median GFLOPS at k[i]; 0 when unmeasured */
} at_kernel_desc;

enum { AT_PROVENANCE_MEASURED = 0, AT_PROVENANCE_MODEL = 1 };

typedef struct {
    int32_t format;           /* AT_TABLE_FORMAT */
    int32_t provenance;       /* MODEL: rank kernels by the analytic model */
    int64_t blk_m[2], blk_n[2], blk_k[2]; /* Goto blocks per dtype */
    double pack_flops[2];     /* 2MNK at or above which the packed path is used */
    double thread_flops;      /* 2MNK below which a plan runs on one thread */
    double peak_gflops[2];    /* one core's measured FMA peak per dtype */
    int32_t simd_bytes;       /* vector width for the analytic model */
    int32_t reserved;
    /* The tiler's cost weights and thread grid, per dtype (autotune.tune owns
     * them).  Zero means the built-in value, so a table that leaves them out
     * plans exactly as before they existed. */
    double call_seconds[2];   /* charged per kernel call besides its flops (2e-9) */
    double edge_frac[2];      /* portable edge code speed as a fraction of peak (0.03) */
    double pack_seconds[2];   /* charged per element copied into a packed panel (0.25e-9) */
    int32_t grid[2];          /* thread grid: 0 least predicted load, 1 split M, 2 split N */
} at_planner_params;

extern const at_kernel_desc at_kernel_table[];
extern const int at_kernel_table_count;
extern const at_planner_params at_params;

#endif
