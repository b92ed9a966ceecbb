/* The kernels a driver build checks; tests/arm_driver/build.py writes the table. */
#ifndef DRV_REGISTRY_H
#define DRV_REGISTRY_H

typedef struct {
    const char *name;
    int dtype; /* 0 = f32, 1 = f64 */
    int mr, nr, ta, tb;
    int pa_ld, pb_ld; /* packed panel strides (elements); 0 = operand read in place */
    void (*fn)(void); /* cast to the typed signature */
} drv_kernel;

extern const drv_kernel drv_kernels[];
extern const int drv_count;

#endif
