/* Normalisations over the last axis, float32 in and out, float32 statistics (ORT's default stash type). */
#include <math.h>
#include <stddef.h>

#include "parallel.h"
#include "simd.h"

#define LANES 16  /* independent partial sums, so the reductions vectorize without -ffast-math */

/* mean of x (squared deviations from mu when squares) over n floats */
static inline float mean_of(const float* x, size_t n, float mu, int squares) {
  float lane[LANES] = {0};
  size_t body = n / LANES * LANES;
  for (size_t c = 0; c < body; c += LANES)
    for (int l = 0; l < LANES; l++) {
      float d = x[c + l] - mu;
      lane[l] += squares ? d * d : x[c + l];
    }
  float sum = 0.0f;
  for (int l = 0; l < LANES; l++) sum += lane[l];
  for (size_t c = body; c < n; c++) {
    float d = x[c] - mu;
    sum += squares ? d * d : x[c];
  }
  return sum / (float)n;
}

typedef struct {
  const float *x, *scale, *bias;
  float *y, *mean, *inv_std;
  size_t rows, cols, tasks;
  float eps;
} LayerNormJob;

SEAMLESS_SIMD static void layernorm_task(void* user, size_t task) {
  LayerNormJob* job = user;
  size_t begin, end, cols = job->cols;
  seamless_task_range(job->rows, job->tasks, task, &begin, &end);
  for (size_t r = begin; r < end; r++) {
    const float* xr = job->x + r * cols;
    float* yr = job->y + r * cols;
    float mu = mean_of(xr, cols, 0.0f, 0);
    float var = mean_of(xr, cols, mu, 1);  /* two passes: no cancellation in E[x^2] - E[x]^2 */
    float inv = 1.0f / sqrtf(var + job->eps);
    if (job->bias)
      for (size_t c = 0; c < cols; c++) yr[c] = (xr[c] - mu) * inv * job->scale[c] + job->bias[c];
    else
      for (size_t c = 0; c < cols; c++) yr[c] = (xr[c] - mu) * inv * job->scale[c];
    if (job->mean) job->mean[r] = mu;
    if (job->inv_std) job->inv_std[r] = inv;
  }
}

/* LayerNormalization of a [rows, cols] array: y = (x - mean) / sqrt(var + eps) * scale + bias.
 * bias, mean and inv_std may be NULL. */
void seamless_layernorm_f32(const float* x, const float* scale, const float* bias, float* y, float* mean,
                            float* inv_std, size_t rows, size_t cols, float eps, void* par_fn, void* par_ctx) {
  LayerNormJob job = {x, scale, bias, y, mean, inv_std, rows, cols, 0, eps};
  job.tasks = seamless_task_count(rows * cols, 1 << 14);
  if (job.tasks > rows) job.tasks = rows ? rows : 1;
  seamless_run_tasks(par_fn, par_ctx, job.tasks, layernorm_task, &job);
}
