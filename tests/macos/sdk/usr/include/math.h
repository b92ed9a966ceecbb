/* Test stub of the macOS SDK's <math.h> (see stdio.h).  The SDK's classification
 * macros go through inline functions around the same builtins. */
#ifndef AT_STUB_MATH_H
#define AT_STUB_MATH_H
#define INFINITY __builtin_inff()
#define NAN __builtin_nanf("")
#define HUGE_VAL __builtin_huge_val()
#define isfinite(x) __builtin_isfinite(x)
#define isnan(x) __builtin_isnan(x)
#define isinf(x) __builtin_isinf(x)
double ceil(double x);
double floor(double x);
double round(double x);
double sqrt(double x);
double log(double x);
double log2(double x);
double exp(double x);
double pow(double x, double y);
double fabs(double x);
float fabsf(float x);
double fmin(double x, double y);
double fmax(double x, double y);
#endif
