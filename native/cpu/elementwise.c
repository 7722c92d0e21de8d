/* Elementwise CPU kernels numpy lacks or runs in several passes. Written so that gcc -O3
 * vectorizes the float32 loops (no libm calls inside them); SEAMLESS_SIMD compiles each loop
 * for AVX-512, AVX2 and baseline x86-64 and picks one at load time. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "simd.h"

/* e^x for x in [-87, 88]: x = k ln2 + r, |r| <= ln2/2, e^r by its degree-6 Taylor polynomial
 * (relative error ~1e-7), 2^k assembled in the exponent bits. */
static inline float seamless_expf(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float shifter = 12582912.0f;  /* 1.5 * 2^23: adding and subtracting it rounds to an integer */
  float k = (x * 1.44269504089f + shifter) - shifter;
  float r = x - k * 0.693359375f + k * 2.12194440e-4f;  /* ln2 split in two for exactness */
  float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.66666672e-1f + r * (4.16666679e-2f +
            r * (8.33333377e-3f + r * 1.38888892e-3f)))));
  int32_t bits = ((int32_t)k + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

/* erf: the odd Taylor series below |x| = 0.5 (relative error < 1e-8), elsewhere
 * 1 - poly(t) e^{-x^2} with t = 1 / (1 + 0.3275911 |x|) (Abramowitz & Stegun 7.1.26,
 * absolute error < 1.5e-7); saturates at |x| = 4 where erf rounds to +-1 in float32. */
static inline float seamless_erf1(float x) {
  float ax = fabsf(x);
  float x2 = x * x;
  float series = x * (1.12837917f + x2 * (-0.376126389f + x2 * (0.112837917f + x2 * (-0.0268661706f +
                 x2 * (0.00522397762f + x2 * (-0.000854832702f + x2 * 0.000120553302f))))));
  float a = ax < 4.0f ? ax : 4.0f;
  float t = 1.0f / (1.0f + 0.3275911f * a);
  float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  float tail = 1.0f - poly * seamless_expf(-a * a);
  tail = x < 0.0f ? -tail : tail;
  float y = ax < 0.5f ? series : tail;
  return x != x ? x : y;  /* NaN stays NaN */
}

SEAMLESS_SIMD void seamless_erf_f32(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] = seamless_erf1(x[i]);
}

void seamless_erf_f64(const double* x, double* y, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] = erf(x[i]);
}

/* Softmax over the last axis of a [rows, cols] array, one pass for the max, one for exp and sum. */
SEAMLESS_SIMD void seamless_softmax_f32(const float* x, float* y, size_t rows, size_t cols) {
  for (size_t r = 0; r < rows; r++) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float m = -INFINITY;
    for (size_t c = 0; c < cols; c++) m = xr[c] > m ? xr[c] : m;
    float sum = 0.0f;
    for (size_t c = 0; c < cols; c++) { yr[c] = seamless_expf(xr[c] - m); sum += yr[c]; }
    float inv = 1.0f / sum;
    for (size_t c = 0; c < cols; c++) yr[c] *= inv;
  }
}
