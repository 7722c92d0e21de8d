/* ORT's GELU-family activations (com.microsoft), float32: QuickGelu y = x * sigmoid(alpha * x).
 * The sigmoid goes through a vectorizable exp (x = k ln2 + r, degree-6 polynomial for e^r, 2^k
 * through the exponent bits; ~2 ulp) on the non-positive side only: sigmoid(z) = 1 / (1 + e^-z)
 * for z >= 0 and e^z / (1 + e^z) for z < 0, so the exponential never overflows. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "parallel.h"
#include "fastmath.h"
#include "simd.h"


typedef struct { const float* x; float* y; size_t n, tasks; float alpha; } QuickGeluJob;

SEAMLESS_SIMD static void quick_gelu_task(void* user, size_t task) {
  const QuickGeluJob* job = (const QuickGeluJob*)user;
  size_t begin, end;
  seamless_task_range(job->n, job->tasks, task, &begin, &end);
  const float a = job->alpha;
  for (size_t i = begin; i < end; i++) {
    float x = job->x[i], z = a * x;
    float e = seamless_expf(z < 0.0f ? z : -z); /* e^-|z| */
    float sig = z >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    job->y[i] = x * sig;
  }
}

void seamless_quick_gelu_f32(const float* x, float* y, size_t n, float alpha, void* par_fn, void* par_ctx) {
  QuickGeluJob job = {x, y, n, seamless_task_count(n, 1 << 15), alpha};
  seamless_run_tasks(par_fn, par_ctx, job.tasks, quick_gelu_task, &job);
}
