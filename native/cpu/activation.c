/* ORT's GELU-family activations (com.microsoft), float32: QuickGelu y = x * sigmoid(alpha * x).
 * The sigmoid goes through a vectorizable exp (x = k ln2 + r, degree-6 polynomial for e^r, 2^k
 * through the exponent bits; ~2 ulp) on the non-positive side only: sigmoid(z) = 1 / (1 + e^-z)
 * for z >= 0 and e^z / (1 + e^z) for z < 0, so the exponential never overflows. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "parallel.h"
#include "simd.h"

static inline float act_exp_neg(float x) { /* e^x for x <= 0 */
  x = x < -87.0f ? -87.0f : x;
  float k = rintf(x * 1.44269504088896341f);
  float r = x - k * 0.693145751953125f;
  r = r - k * 1.428606765330187e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  union { uint32_t u; float f; } two_k;
  two_k.u = (uint32_t)((int32_t)k + 127) << 23;
  return p * two_k.f;
}

typedef struct { const float* x; float* y; size_t n, tasks; float alpha; } QuickGeluJob;

SEAMLESS_SIMD static void quick_gelu_task(void* user, size_t task) {
  const QuickGeluJob* job = (const QuickGeluJob*)user;
  size_t begin, end;
  seamless_task_range(job->n, job->tasks, task, &begin, &end);
  const float a = job->alpha;
  for (size_t i = begin; i < end; i++) {
    float x = job->x[i], z = a * x;
    float e = act_exp_neg(z < 0.0f ? z : -z); /* e^-|z| */
    float sig = z >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    job->y[i] = x * sig;
  }
}

void seamless_quick_gelu_f32(const float* x, float* y, size_t n, float alpha, void* par_fn, void* par_ctx) {
  QuickGeluJob job = {x, y, n, seamless_task_count(n, 1 << 15), alpha};
  seamless_run_tasks(par_fn, par_ctx, job.tasks, quick_gelu_task, &job);
}
