/* Packing routines of the SME2 kernels' operand formats (sme2_pack.S). */
#ifndef AT_SME2_PACK_H
#define AT_SME2_PACK_H

#include <stdint.h>

/* dst[x + p*ldd] = src[p + x*ld] for x < n, p < K; zero for n <= x < ldd.
 * ldd must be a multiple of the streaming vector length in elements. */
void at_sme2_pack_t_f32(int64_t K, int64_t n, const float *src, int64_t ld, float *dst, int64_t ldd);
void at_sme2_pack_t_f64(int64_t K, int64_t n, const double *src, int64_t ld, double *dst, int64_t ldd);

#endif
