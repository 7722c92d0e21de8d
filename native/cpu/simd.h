/* Hot loops are compiled for several x86-64 levels; the loader picks the best (GNU ifunc). */
#pragma once
#if defined(__x86_64__) && defined(__GNUC__)
#define SEAMLESS_SIMD __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SEAMLESS_SIMD
#endif

#include <stddef.h>

/* Relu as the Relu step and stock ORT compute it: NaN stays NaN */
static inline float seamless_relu_f32(float x) { return (x > 0.0f || x != x) ? x : 0.0f; }

#define SEAMLESS_DOT_LANES 16

/* A float32 dot product in SEAMLESS_DOT_LANES independent sums: vectorized (in the SEAMLESS_SIMD function it is
 * inlined into) without reassociating any one sum. */
static inline float seamless_dot_f32(const float* a, const float* b, size_t n) {
  float acc[SEAMLESS_DOT_LANES] = {0};
  size_t i = 0;
  for (; i + SEAMLESS_DOT_LANES <= n; i += SEAMLESS_DOT_LANES)
    for (size_t j = 0; j < SEAMLESS_DOT_LANES; j++) acc[j] += a[i + j] * b[i + j];
  for (; i < n; i++) acc[0] += a[i] * b[i];
  float v = 0.0f;
  for (size_t j = 0; j < SEAMLESS_DOT_LANES; j++) v += acc[j];
  return v;
}
