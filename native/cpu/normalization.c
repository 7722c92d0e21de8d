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

/* RMS normalization with an optional residual add, float32 (ORT's SimplifiedLayerNormalization,
 * SkipSimplifiedLayerNormalization; ONNX RMSNormalization):
 *   s = x + skip (+ bias);  y = s / sqrt(mean(s^2) + eps) * gamma
 * skip (optional) has skip_rows rows and repeats over the rows of x (broadcast over the batch);
 * sum_out (optional) receives s, inv_out (optional) 1 / sqrt(mean(s^2) + eps) per row.
 * Like ORT, y divides by the root rather than multiplying by its inverse. */

#define RMS_LANES 16

typedef struct {
  const float *x, *skip, *bias, *gamma;
  float *y, *sum_out, *inv_out;
  size_t skip_rows, rows, cols, tasks;
  float eps;
} RmsJob;

SEAMLESS_SIMD static void rmsnorm_task(void* user, size_t task) {
  const RmsJob* job = (const RmsJob*)user;
  size_t r0, r1, cols = job->cols;
  seamless_task_range(job->rows, job->tasks, task, &r0, &r1);
  for (size_t r = r0; r < r1; r++) {
    const float* xr = job->x + r * cols;
    float* yr = job->y + r * cols;
    float* sr = job->sum_out ? job->sum_out + r * cols : yr; /* s lives in y until normalized */
    if (job->skip) {
      const float* kr = job->skip + (r % job->skip_rows) * cols;
      if (job->bias)
        for (size_t c = 0; c < cols; c++) sr[c] = xr[c] + kr[c] + job->bias[c];
      else
        for (size_t c = 0; c < cols; c++) sr[c] = xr[c] + kr[c];
    } else {
      sr = (float*)xr;
    }
    float acc[RMS_LANES] = {0};
    size_t c = 0;
    for (; c + RMS_LANES <= cols; c += RMS_LANES)
      for (size_t j = 0; j < RMS_LANES; j++) acc[j] += sr[c + j] * sr[c + j];
    for (; c < cols; c++) acc[0] += sr[c] * sr[c];
    float sq = 0.0f;
    for (size_t j = 0; j < RMS_LANES; j++) sq += acc[j];
    float rms = sqrtf(sq / (float)cols + job->eps);
    for (c = 0; c < cols; c++) yr[c] = sr[c] / rms * job->gamma[c];
    if (job->inv_out) job->inv_out[r] = 1.0f / rms;
  }
}

void seamless_skip_rmsnorm_f32(const float* x, const float* skip, size_t skip_rows, const float* bias,
                               const float* gamma, float* y, float* sum_out, float* inv_out, size_t rows, size_t cols,
                               float eps, void* par_fn, void* par_ctx) {
  RmsJob job = {x, skip, bias, gamma, y, sum_out, inv_out, skip_rows ? skip_rows : 1, rows, cols, 0, eps};
  job.tasks = seamless_task_count(rows * cols, 1 << 14);
  if (job.tasks > rows) job.tasks = rows ? rows : 1;
  seamless_run_tasks(par_fn, par_ctx, job.tasks, rmsnorm_task, &job);
}


/* GatedRMSNorm (com.microsoft): float32 throughout, as stock computes it */
typedef struct {
  const float *x, *scale, *gate;
  float* y;
  size_t rows, cols, tasks;
  float eps;
  int silu;
} GatedNormJob;

SEAMLESS_SIMD static void gated_rmsnorm_task(void* user, size_t task) {
  const GatedNormJob* job = user;
  size_t r0, r1, cols = job->cols;
  seamless_task_range(job->rows, job->tasks, task, &r0, &r1);
  for (size_t r = r0; r < r1; r++) {
    const float *xr = job->x + r * cols, *zr = job->gate + r * cols;
    float* yr = job->y + r * cols;
    const float inv = 1.0f / sqrtf(mean_of(xr, cols, 0.0f, 1) + job->eps);
    for (size_t c = 0; c < cols; c++) {
      const float z = zr[c], sig = 1.0f / (1.0f + expf(-z));
      yr[c] = xr[c] * inv * job->scale[c] * (job->silu ? z * sig : sig);
    }
  }
}

void seamless_gated_rmsnorm_f32(const float* x, const float* scale, const float* gate, float* y, size_t rows,
                                size_t cols, float eps, int silu, void* par_fn, void* par_ctx) {
  GatedNormJob job = {x, scale, gate, y, rows, cols, 0, eps, silu};
  job.tasks = seamless_task_count(rows * cols, 1 << 14);
  if (job.tasks > rows) job.tasks = rows ? rows : 1;
  seamless_run_tasks(par_fn, par_ctx, job.tasks, gated_rmsnorm_task, &job);
}

/* LinearAttentionGate (com.microsoft): softplus as stock writes it (stable on both sides of 0) */
void seamless_linear_attention_gate_f32(const float* a, const float* dt_bias, const float* decay_scale,
                                        const float* b, float* decay, float* beta, size_t rows, size_t heads) {
  for (size_t r = 0; r < rows; r++)
    for (size_t h = 0; h < heads; h++) {
      const size_t i = r * heads + h;
      const float v = a[i] + dt_bias[h];
      decay[i] = decay_scale[h] * (v > 0.0f ? v + logf(expf(-v) + 1.0f) : logf(expf(v) + 1.0f));
      if (beta) beta[i] = 1.0f / (1.0f + expf(-b[i]));
    }
}

/* LpNormalization over the last axis (p 1 or 2) */
typedef struct {
  const float* x;
  float* y;
  size_t rows, cols, tasks;
  int p;
  float eps;
} LpNormJob;

SEAMLESS_SIMD static void lp_norm_task(void* user, size_t task) {
  const LpNormJob* job = user;
  size_t r0, r1, cols = job->cols;
  seamless_task_range(job->rows, job->tasks, task, &r0, &r1);
  for (size_t r = r0; r < r1; r++) {
    const float* xr = job->x + r * cols;
    float* yr = job->y + r * cols;
    float norm = 0.0f;
    if (job->p == 1)
      for (size_t c = 0; c < cols; c++) norm += fabsf(xr[c]);
    else
      norm = sqrtf(fmaxf(mean_of(xr, cols, 0.0f, 1) * (float)cols, job->eps));  /* eps: a floor on the sum */
    for (size_t c = 0; c < cols; c++) yr[c] = norm == 0.0f ? 0.0f : xr[c] / norm;
  }
}

void seamless_lp_norm_f32(const float* x, float* y, size_t rows, size_t cols, int p, float eps, void* par_fn,
                          void* par_ctx) {
  LpNormJob job = {x, y, rows, cols, 0, p, eps};
  job.tasks = seamless_task_count(rows * cols, 1 << 14);
  if (job.tasks > rows) job.tasks = rows ? rows : 1;
  seamless_run_tasks(par_fn, par_ctx, job.tasks, lp_norm_task, &job);
}

/* LRN: the window's squares summed in channel order (the Python kernel's order), then powf */
typedef struct {
  const float* x;
  float* y;
  size_t n, c, spatial, size, tasks;
  float alpha_over_size, bias, beta;
} LrnJob;

static void lrn_task(void* user, size_t task) {
  const LrnJob* job = user;
  const size_t sp = job->spatial, lo = (job->size - 1) / 2;
  size_t r0, r1;
  seamless_task_range(job->n * job->c, job->tasks, task, &r0, &r1);
  for (size_t r = r0; r < r1; r++) {
    const size_t image = r / job->c, ch = r % job->c;
    /* channels ch - lo to ch - lo + size - 1 inside [0, c) */
    const size_t first = ch < lo ? 0 : ch - lo, last = ch + job->size - lo < job->c ? ch + job->size - lo : job->c;
    const float* xi = job->x + image * job->c * sp;
    for (size_t s = 0; s < sp; s++) {
      float total = 0.0f;
      for (size_t j = first; j < last; j++) {
        const float v = xi[j * sp + s];
        total += v * v;
      }
      job->y[r * sp + s] = xi[ch * sp + s] / powf(job->bias + job->alpha_over_size * total, job->beta);
    }
  }
}

typedef struct {
  const float *x, *scale, *shift;
  float* y;
  size_t c, spatial, rows, tasks;
  int relu;
} AffineJob;

/* no FMA: the product rounded, then the sum, as the unfused Mul and Add (and the Python kernel, which calls this) */
__attribute__((optimize("fp-contract=off"))) SEAMLESS_SIMD static void affine_row(const float* x, float a, float b,
                                                                                   float* y, size_t n, int relu) {
  if (relu)
    for (size_t i = 0; i < n; i++) y[i] = seamless_relu_f32(x[i] * a + b);
  else
    for (size_t i = 0; i < n; i++) y[i] = x[i] * a + b;
}

static void affine_task(void* user, size_t task) {
  const AffineJob* job = user;
  size_t r0, r1;
  seamless_task_range(job->rows, job->tasks, task, &r0, &r1);
  for (size_t r = r0; r < r1; r++)
    affine_row(job->x + r * job->spatial, job->scale[r % job->c], job->shift[r % job->c], job->y + r * job->spatial,
               job->spatial, job->relu);
}

void seamless_channel_affine_f32(const float* x, const float* scale, const float* shift, float* y, size_t n, size_t c,
                                 size_t spatial, int relu, void* par_fn, void* par_ctx) {
  AffineJob job = {x, scale, shift, y, c, spatial, n * c, seamless_task_count(n * c * spatial, 1 << 14), relu};
  if (job.tasks > n * c) job.tasks = n * c > 0 ? n * c : 1;
  seamless_run_tasks(par_fn, par_ctx, job.tasks, affine_task, &job);
}

void seamless_lrn_f32(const float* x, float* y, size_t n, size_t c, size_t spatial, size_t size, float alpha_over_size,
                      float bias, float beta, void* par_fn, void* par_ctx) {
  LrnJob job = {x, y, n, c, spatial, size, seamless_task_count(n * c * spatial * size, 1 << 14), alpha_over_size, bias,
                beta};
  if (job.tasks > n * c) job.tasks = n * c > 0 ? n * c : 1;
  seamless_run_tasks(par_fn, par_ctx, job.tasks, lrn_task, &job);
}
