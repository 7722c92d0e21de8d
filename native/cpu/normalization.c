/* Normalisations over the last axis, float32 in and out, float32 statistics (ORT's default stash type). */
#include <math.h>
#include <stddef.h>

#include "simd.h"

/* LayerNormalization of a [rows, cols] array: y = (x - mean) / sqrt(var + eps) * scale + bias.
 * bias, mean and inv_std may be NULL. */
SEAMLESS_SIMD void seamless_layernorm_f32(const float* x, const float* scale, const float* bias, float* y, float* mean,
                            float* inv_std, size_t rows, size_t cols, float eps) {
  for (size_t r = 0; r < rows; r++) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    double sum = 0.0, sq = 0.0;
    for (size_t c = 0; c < cols; c++) { sum += xr[c]; sq += (double)xr[c] * xr[c]; }
    float mu = (float)(sum / cols);
    float var = (float)(sq / cols - (sum / cols) * (sum / cols));
    float inv = 1.0f / sqrtf((var > 0.0f ? var : 0.0f) + eps);
    if (bias)
      for (size_t c = 0; c < cols; c++) yr[c] = (xr[c] - mu) * inv * scale[c] + bias[c];
    else
      for (size_t c = 0; c < cols; c++) yr[c] = (xr[c] - mu) * inv * scale[c];
    if (mean) mean[r] = mu;
    if (inv_std) inv_std[r] = inv;
  }
}
