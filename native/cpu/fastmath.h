/* Vectorizable float math shared by the native kernels (no libm calls, so gcc -O3 vectorizes
 * the loops that use it). */
#pragma once
#include <stdint.h>
#include <string.h>

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

/* tanh(x): sign(x) (1 - e) / (1 + e) with e = e^(-2|x|), and below |x| = 0.25 (where 1 - e would cancel) its Taylor
 * polynomial to x^9; NaN stays NaN. Relative error ~2e-7. */
static inline float seamless_tanhf(float x) {
  const float a = x < 0.0f ? -x : x, a2 = a * a;
  const float e = seamless_expf(-2.0f * (a == a ? a : 0.0f));
  const float far = (1.0f - e) / (1.0f + e);
  const float near = a * (1.0f + a2 * (-3.33333343e-1f + a2 * (1.33333340e-1f + a2 * (-5.39682545e-2f +
                     a2 * 2.18694881e-2f))));
  const float t = a < 0.25f ? near : far;
  return x != x ? x : (x < 0.0f ? -t : t);
}
