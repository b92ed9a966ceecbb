/* at_table.h: the format of the generated kernel table (at_table.c).
 *
 * `autotune install` writes one at_table.c per library with
 * autotune.link.emit_kernel_table_c(): a declaration of every selected
 * kernel, an array of descriptors, the kernels' facts and the planner's parameters.  The runtime
 * reads nothing else; the hot path never opens a file.
 */
#ifndef AT_TABLE_H
#define AT_TABLE_H

#include <stdint.h>

#include "autotune.h"
#include "at_kernel.h"

#define AT_KGRID_MAX 8
#define AT_TABLE_FORMAT 4

/* A kernel of the library: its record (the kernel contract, at_kernel.h) and
 * how fast the install measured it. */
typedef struct {
    at_kernel kernel;
    int32_t nk;               /* points of the K grid measured (<= AT_KGRID_MAX) */
    int32_t k[AT_KGRID_MAX];  /* ascending */
    double gflops[AT_KGRID_MAX]; /* median GFLOPS at k[i]; 0 when unmeasured */
} at_table_entry;

enum { AT_PROVENANCE_MEASURED = 0, AT_PROVENANCE_MODEL = 1 };

/* What the install knows about the kernels it baked in: facts, not parameters
 * (the tuner never changes them, at_params_set leaves them alone). */
typedef struct {
    int32_t format;           /* AT_TABLE_FORMAT */
    int32_t provenance;       /* MODEL: rank kernels by the analytic model */
    double peak_gflops[2];    /* one core's measured FMA peak per dtype */
    int32_t simd_bytes;       /* vector width for the analytic model */
} at_kernel_facts;

extern const at_table_entry at_kernel_table[];
extern const int at_kernel_table_count;
extern const at_kernel_facts at_facts;
/* HostInfo names of the CPU features the kernels need, separated by spaces
 * ("avx512f avx512vl ... fma"); cpu.c checks them before the first plan. */
extern const char at_library_features[];
/* The planner's parameters (autotune.h's at_tune_params, declared once in
 * autotune/params.py): the table's, and the built-in values a zero cost weight
 * stands for. */
extern const at_tune_params at_params;
extern const at_tune_params at_params_builtin;

#endif
