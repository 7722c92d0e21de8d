/* ONNX Attention (opset 23), float32, on the GEMM (matmul.c). Built in the one unit after program.c, which includes
 * kernels.h (seamless_sgemm, seamless_sgemm_pack_b).
 *
 * present = past ++ new keys / values; per (batch, query head) and block of query rows the scaled scores Q.K^T
 * (softcapped), the mask (boolean: -inf where false; float: added) and the causal -inf added as one bias, a softmax
 * whose fully masked rows are zeros, and the probabilities times the values. Query head n reads KV head
 * n / (nq / nkv). dims: b, nq, nkv, s (queries), l (new keys), p (past), h, hv. strides: element strides of
 * (batch, head, row) of q, k, v and out (3-D or 4-D: their columns contiguous), then of (batch, head, row, col) of
 * the mask (0 where it broadcasts). Both products run on the GEMM's tiles, each sum over its terms in order. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "parallel.h"
#include "simd.h"

#define ATTENTION_ROWS 60  /* query rows a block (5 of the GEMM's 12-row tiles): their scores at a time */

typedef struct {
  const float *q, *present_k, *present_v;
  const void* mask;
  int mask_bool, causal, failed;
  float *out, *qk;
  const int64_t *dims, *strides;
  float scale, softcap;
  size_t tasks;
} OnnxAttentionJob;

/* row (query i's scores) to its probabilities in place: scaled (the qk output), softcapped, biased, softmaxed (a
 * fully masked row: zeros). Without a qk output or softcap and with the mask's keys contiguous, in vectors. */
SEAMLESS_SIMD static void attention_row(const OnnxAttentionJob* job, int64_t bi, int64_t n, int64_t i, float* row) {
  const int64_t* d = job->dims;
  const int64_t nq = d[1], s = d[3], p = d[5], t = d[4] + d[5];
  const int64_t* ms = job->strides + 12;
  const int64_t visible = job->causal && i + p + 1 < t ? i + p + 1 : t;  /* keys after it: causal -inf */
  const float scale = job->scale;
  if (!job->qk && !(job->softcap > 0.0f) && (!job->mask || ms[3] == 1)) {
    const int64_t at = bi * ms[0] + n * ms[1] + i * ms[2];
    const float* mf = job->mask && !job->mask_bool ? (const float*)job->mask + at : NULL;
    const uint8_t* mb = job->mask && job->mask_bool ? (const uint8_t*)job->mask + at : NULL;
    if (mf)
      for (int64_t j = 0; j < t; j++) row[j] = row[j] * scale + (j < visible ? mf[j] : mf[j] + -INFINITY);
    else if (mb)
      for (int64_t j = 0; j < t; j++) row[j] = row[j] * scale + (mb[j] && j < visible ? 0.0f : -INFINITY);
    else
      for (int64_t j = 0; j < t; j++) row[j] = j < visible ? row[j] * scale : row[j] * scale + -INFINITY;
    seamless_softmax_row_f32(row, row, (size_t)t, 1, NULL);
    return;
  }
  for (int64_t j = 0; j < t; j++) {
    float v = row[j] * scale;
    if (job->qk) job->qk[((bi * nq + n) * s + i) * t + j] = v;
    if (job->softcap > 0.0f) v = job->softcap * tanhf(v / job->softcap);
    if (job->mask || job->causal) {
      float bias = 0.0f;
      if (job->mask) {
        const int64_t at = bi * ms[0] + n * ms[1] + i * ms[2] + j * ms[3];
        bias = job->mask_bool ? (((const uint8_t*)job->mask)[at] ? 0.0f : -INFINITY) : ((const float*)job->mask)[at];
      }
      if (j >= visible) bias += -INFINITY;  /* bottom-right aligned: past keys all visible */
      v += bias;
    }
    row[j] = v;
  }
  seamless_softmax_row_f32(row, row, (size_t)t, 1, NULL);
}

static void onnx_attention_task(void* user, size_t task) {
  OnnxAttentionJob* job = user;
  const int64_t* d = job->dims;
  const int64_t b = d[0], nq = d[1], nkv = d[2], s = d[3], h = d[6], hv = d[7], t = d[4] + d[5];
  const int64_t *qs = job->strides, *os = job->strides + 9;
  /* per task: a block's scores, and one KV head's keys (as K^T) and values packed for the GEMM once, for all its
   * query heads' row blocks */
  /* score rows a multiple of 128 floats apart would share a few L1 sets when the second product reads them in place
   * (matmul.c pack_a_pays): 16 floats more apart */
  const int64_t ld = t % 128 ? t : t + 16;
  const size_t score_floats = (size_t)(ATTENTION_ROWS * ld + 16) & ~(size_t)15;
  const size_t keys_floats = seamless_sgemm_packed_size((size_t)h, (size_t)t);
  const size_t values_floats = seamless_sgemm_packed_size((size_t)t, (size_t)hv);
  float* scores = aligned_alloc(64, (score_floats + keys_floats + values_floats) * sizeof(float));
  if (!scores) {
    job->failed = 1;
    return;
  }
  float *packed_k = scores + score_floats, *packed_v = packed_k + keys_floats;
  size_t p0, p1;
  int64_t packed_head = -1;
  seamless_task_range((size_t)(b * nq), job->tasks, task, &p0, &p1);
  for (size_t pair = p0; pair < p1; pair++) {
    const int64_t bi = (int64_t)pair / nq, n = (int64_t)pair % nq, kvh = bi * nkv + n / (nq / nkv);
    if (kvh != packed_head) {
      seamless_sgemm_pack_b(job->present_k + kvh * t * h, (size_t)h, (size_t)t, (size_t)h, 1, packed_k);
      seamless_sgemm_pack_b(job->present_v + kvh * t * hv, (size_t)t, (size_t)hv, (size_t)hv, 0, packed_v);
      packed_head = kvh;
    }
    for (int64_t i0 = 0; i0 < s; i0 += ATTENTION_ROWS) {
      const int64_t rows = s - i0 < ATTENTION_ROWS ? s - i0 : ATTENTION_ROWS;
      const float* q0 = job->q + bi * qs[0] + n * qs[1] + i0 * qs[2];
      float* out0 = job->out + bi * os[0] + n * os[1] + i0 * os[2];
      seamless_sgemm((size_t)rows, (size_t)t, (size_t)h, q0, NULL, (size_t)qs[2], packed_k, NULL, NULL, NULL, scores,
                     (size_t)ld, NULL, NULL);
      for (int64_t r = 0; r < rows; r++) attention_row(job, bi, n, i0 + r, scores + r * ld);
      seamless_sgemm((size_t)rows, (size_t)hv, (size_t)t, scores, NULL, (size_t)ld, packed_v, NULL, NULL, NULL, out0,
                     (size_t)os[2], NULL, NULL);  /* no keys: zeros, a sum of nothing */
    }
  }
  free(scores);
}

int seamless_onnx_attention_f32(const float* q, const float* k, const float* v, const float* past_k,
                                const float* past_v, const void* mask, int mask_bool, float* out, float* present_k,
                                float* present_v, float* qk, const int64_t* dims, const int64_t* strides, int causal,
                                float scale, float softcap, void* par_fn, void* par_ctx) {
  const int64_t b = dims[0], nq = dims[1], nkv = dims[2], s = dims[3], l = dims[4], p = dims[5], h = dims[6],
                hv = dims[7], t = l + p;
  const int64_t *ks = strides + 3, *vs = strides + 6;
  for (int64_t bi = 0; bi < b; bi++)  /* present: the past's rows, then the new ones */
    for (int64_t n = 0; n < nkv; n++) {
      float* pk = present_k + (bi * nkv + n) * t * h;
      float* pv = present_v + (bi * nkv + n) * t * hv;
      if (p) {
        memcpy(pk, past_k + (bi * nkv + n) * p * h, (size_t)(p * h) * sizeof(float));
        memcpy(pv, past_v + (bi * nkv + n) * p * hv, (size_t)(p * hv) * sizeof(float));
      }
      for (int64_t j = 0; j < l; j++) {
        memcpy(pk + (p + j) * h, k + bi * ks[0] + n * ks[1] + j * ks[2], (size_t)h * sizeof(float));
        memcpy(pv + (p + j) * hv, v + bi * vs[0] + n * vs[1] + j * vs[2], (size_t)hv * sizeof(float));
      }
    }
  OnnxAttentionJob job = {q, present_k, present_v, mask, mask_bool, causal, 0, out, qk, dims, strides, scale, softcap,
                          seamless_task_count((size_t)(b * nq * s * t * (h + hv)), 1 << 15)};
  if (job.tasks > (size_t)(b * nq)) job.tasks = b * nq > 0 ? (size_t)(b * nq) : 1;
  seamless_run_tasks(par_fn, par_ctx, job.tasks, onnx_attention_task, &job);
  return job.failed ? 2 : 0;
}
