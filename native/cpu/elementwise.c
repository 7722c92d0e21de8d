/* Elementwise CPU kernels numpy lacks. */
#include <math.h>
#include <stddef.h>

void seamless_erf_f32(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] = erff(x[i]);
}

void seamless_erf_f64(const double* x, double* y, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] = erf(x[i]);
}
