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
