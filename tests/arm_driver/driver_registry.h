/* The kernels a driver build checks: at_kernel records (the kernel contract,
 * kernels_src/include/at_kernel.h); tests/arm_driver/build.py writes the table. */
#ifndef DRV_REGISTRY_H
#define DRV_REGISTRY_H

#include "at_kernel.h"

extern const at_kernel drv_kernels[];
extern const int drv_kernels_count;

#endif
