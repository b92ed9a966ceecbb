/* at_sme2.h: the SME2 part of an Arm library (sme2_exec.c, sme2_region.S).
 *
 * A library built for the sme2 target runs every thread's share of a plan in
 * one streaming region: exec_t.h's run_part hands the share to
 * at__sme2_part_<dtype> when the library is compiled with AT_SME2_EXEC.  The
 * kernel records of at_kernel_table (at_kernel.h) give each SME2 kernel the
 * leading dims of the packed panels it reads, its streaming entry point and
 * the vector length it was generated for: a library carries a set of SME2
 * kernels per SVL, and plans use the set of the CPU's own (at__svl_bytes). */
#ifndef AT_SME2_H
#define AT_SME2_H

#include <stdint.h>

#include "at_internal.h"

/* Thread t's share of a plan in one streaming region.  Returns a status code,
 * or AT_SME2_DECLINED when the share calls no SME2 kernel (then the normal
 * executor runs it: no mode switch for NEON-only or edge-only shares). */
#define AT_SME2_DECLINED 1
int at__sme2_part_f32(const at_plan *p, int t, const float *A, const float *B, float *C,
                      float alpha, float beta);
int at__sme2_part_f64(const at_plan *p, int t, const double *A, const double *B, double *C,
                      double alpha, double beta);

#endif
