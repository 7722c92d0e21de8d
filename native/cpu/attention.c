/* GroupQueryAttention (com.microsoft), float32, in one call: rotary embedding of the new query and
 * key rows, the present KV cache (past rows + new rows, zeros elsewhere, as ORT's CPU EP writes it
 * into a fresh buffer), and causal (optionally windowed, soft-capped, smooth/sink) softmax attention.
 *
 * Layouts: query/key/value rows are tokens [B, S, *] with a row stride in elements (packed QKV:
 * one input, key and value at offsets); head i of a row starts at i * H. Caches are BNSH
 * [B, Nkv, L, H]. The output is [B, S, N * H].
 *
 * Per batch entry b: T = seqlens_k[b] + 1 keys; the new rows go to cache rows [P, P + S) with
 * P = 0 for the first prompt, else T - S; query s attends keys [lo, P + s] (lo > 0 only with a
 * local window of W keys: lo = P + s + 1 - W), clipped to T.
 *
 * Two passes on the caller's thread pool: (1) rotate the new rows and build the present cache,
 * one task per (b, kv head); (2) attention, one task per (b, query head, block of query rows).
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fastmath.h"
#include "parallel.h"
#include "simd.h"

typedef struct {
  const float *q, *k, *v;
  size_t q_row, k_row, v_row;
  const float *past_k, *past_v;
  size_t past_len;
  float *present_k, *present_v;
  size_t present_len;
  float* out;
  float* qrot; /* [B, N, S, H] rotated (or copied) query rows */
  const int32_t* seqlens;
  int first_prompt;
  size_t b, s, nh, nkv, h;
  const float *cos, *sin;
  size_t half;
  int interleaved;
  const int64_t* pos; /* [B, S] rotary positions, or NULL: derived (GQA's rule, see gqa_position) */
  int rotary;         /* half > 0 */
  float scale, softcap;
  int64_t window;
  int causal;
  const float* sink; /* [N] or NULL */
  size_t s_blocks;   /* query-row blocks per (b, head) in pass 2 */
  int window_cache;  /* sliding_window_cache=1: the past/present buffers hold the most recent positions */
  float *keys, *values; /* window_cache: per (b, kv head), the past's resident rows then the new ones */
  size_t key_rows;      /* rows of each */
} GqaJob;


static inline size_t gqa_past_rows(const GqaJob* job, size_t bi) {
  size_t t = (size_t)job->seqlens[bi] + 1;
  return job->first_prompt ? 0 : t - job->s;
}

/* sliding_window_cache=1: how many rows of a window-sized cache of `capacity` hold positions after t tokens: all of
 * them up to the capacity, then eviction of G = capacity - window + 1 at a time (kernels/cpu/attention.py
 * _window_resident, stock's contract). */
static inline size_t gqa_resident(size_t t, size_t capacity, size_t window) {
  if (t <= capacity) return t;
  size_t g = capacity - window + 1;
  return t - g * ((t - capacity + g - 1) / g);
}

/* The keys batch entry bi attends to: present's rows from 0, or with a window-sized cache the past's resident rows
 * then the new ones (*first: the position of row 0, *rows: how many). */
static inline const float* gqa_keys(const GqaJob* job, size_t bi, size_t kh, int value, size_t* first, size_t* rows) {
  size_t p = gqa_past_rows(job, bi), h = job->h;
  if (job->window_cache) {
    size_t resident = gqa_resident(p, job->present_len, (size_t)job->window);
    *first = p - resident;
    *rows = resident + job->s;
    return (value ? job->values : job->keys) + (bi * job->nkv + kh) * job->key_rows * h;
  }
  size_t t = (size_t)job->seqlens[bi] + 1;
  *first = 0;
  *rows = t < job->present_len ? t : job->present_len;
  return (value ? job->present_v : job->present_k) + (bi * job->nkv + kh) * job->present_len * h;
}

/* Rotary position of query row si of batch entry bi: si in the first prompt, else past + si. */
static inline int64_t gqa_position(const GqaJob* job, size_t bi, size_t si) {
  if (job->pos) return job->pos[bi * job->s + si];
  return (int64_t)(gqa_past_rows(job, bi) + si);
}

/* dst[0:H] = rotary(src[0:H]) at position pos (or a copy without rotary). */
static inline void gqa_rotate(const GqaJob* job, const float* src, float* dst, int64_t pos) {
  size_t h = job->h;
  if (!job->rotary) {
    memcpy(dst, src, h * sizeof(float));
    return;
  }
  size_t half = job->half;
  const float* c = job->cos + pos * half;
  const float* sn = job->sin + pos * half;
  if (job->interleaved) {
    for (size_t i = 0; i < half; i++) {
      float x1 = src[2 * i], x2 = src[2 * i + 1];
      dst[2 * i] = x1 * c[i] - x2 * sn[i];
      dst[2 * i + 1] = x1 * sn[i] + x2 * c[i];
    }
  } else {
    for (size_t i = 0; i < half; i++) {
      float x1 = src[i], x2 = src[i + half];
      dst[i] = x1 * c[i] - x2 * sn[i];
      dst[i + half] = x1 * sn[i] + x2 * c[i];
    }
  }
  if (2 * half < h) memcpy(dst + 2 * half, src + 2 * half, (h - 2 * half) * sizeof(float));
}

/* Pass 1: task = (b, kv head): present rows for that head, and the rotated query rows of its group. */
SEAMLESS_SIMD static void gqa_prepare_task(void* user, size_t task) {
  const GqaJob* job = (const GqaJob*)user;
  size_t bi = task / job->nkv, kh = task % job->nkv;
  size_t h = job->h, s = job->s, L = job->present_len;
  size_t p = gqa_past_rows(job, bi);
  size_t group = job->nh / job->nkv;
  for (int which = 0; which < 2; which++) {
    float* present = (which ? job->present_v : job->present_k) + (bi * job->nkv + kh) * L * h;
    size_t first, rows;  /* the keys: present itself, or a window-sized cache's work rows (copied to present after) */
    float* dst = (float*)gqa_keys(job, bi, kh, which, &first, &rows);
    size_t at = p - first;  /* the first new row */
    const float* past = which ? job->past_v : job->past_k;
    if (at && past) memcpy(dst, past + (bi * job->nkv + kh) * job->past_len * h, at * h * sizeof(float));
    const float* src = which ? job->v : job->k;
    size_t row = which ? job->v_row : job->k_row, limit = job->window_cache ? rows : L;
    for (size_t si = 0; si < s && at + si < limit; si++) {
      const float* x = src + (bi * s + si) * row + kh * h;
      float* y = dst + (at + si) * h;
      if (which)
        memcpy(y, x, h * sizeof(float));
      else
        gqa_rotate(job, x, y, gqa_position(job, bi, si));
    }
    size_t filled = at + s;
    if (job->window_cache) {  /* present: the most recent positions from row 0 */
      filled = gqa_resident(p + s, L, (size_t)job->window);
      memcpy(present, dst + (rows - filled) * h, filled * h * sizeof(float));
    }
    if (filled < L) memset(present + filled * h, 0, (L - filled) * h * sizeof(float));
  }
  for (size_t g = 0; g < group; g++) {
    size_t head = kh * group + g;
    for (size_t si = 0; si < s; si++)
      gqa_rotate(job, job->q + (bi * s + si) * job->q_row + head * h,
                 job->qrot + ((bi * job->nh + head) * s + si) * h, gqa_position(job, bi, si));
  }
}

/* One query row against keys [lo, hi): softmax(q . k * scale [softcapped], with the sink) . v.
 * scores: scratch of >= hi floats. Generic version (auto-vectorized per target clone). */
SEAMLESS_SIMD static void gqa_attend_row(const GqaJob* job, const float* q, const float* kc, const float* vc,
                                         size_t lo, size_t hi, const float* sink, float* scores, float* o) {
  size_t h = job->h;
  float m = -INFINITY;
  for (size_t j = lo; j < hi; j++) {
    float x = seamless_dot_f32(q, kc + j * h, h) * job->scale;
    if (job->softcap > 0.0f) x = job->softcap * tanhf(x / job->softcap);
    scores[j] = x;
    m = x > m ? x : m;
  }
  if (sink) m = *sink > m ? *sink : m;
  for (size_t j = lo; j < hi; j++) scores[j] = seamless_expf(scores[j] - m);
  float sum = 0.0f;
  for (size_t j = lo; j < hi; j++) sum += scores[j];
  if (sink) sum += seamless_expf(*sink - m);
  float inv = 1.0f / sum;
  for (size_t d = 0; d < h; d++) o[d] = 0.0f;
  for (size_t j = lo; j < hi; j++) {
    float w = scores[j] * inv;
    const float* vr = vc + j * h;
    for (size_t d = 0; d < h; d++) o[d] += w * vr[d];
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define GQA_AVX512 __attribute__((target("avx512f")))

/* The same for head sizes that are multiples of 16 up to 256: q, the output and each key/value
 * row are h/16 vectors; the output accumulates in registers. */
GQA_AVX512 static void gqa_attend_row_avx512(const GqaJob* job, const float* q, const float* kc, const float* vc,
                                             size_t lo, size_t hi, const float* sink, float* scores, float* o) {
  const size_t h = job->h, nv = h / 16;
  __m512 qv[16], acc[16];
  for (size_t v = 0; v < nv; v++) qv[v] = _mm512_loadu_ps(q + 16 * v);
  float m = -INFINITY;
  for (size_t j = lo; j < hi; j++) {
    const float* kr = kc + j * h;
    __m512 a = _mm512_mul_ps(qv[0], _mm512_loadu_ps(kr));
    for (size_t v = 1; v < nv; v++) a = _mm512_fmadd_ps(qv[v], _mm512_loadu_ps(kr + 16 * v), a);
    float x = _mm512_reduce_add_ps(a) * job->scale;
    if (job->softcap > 0.0f) x = job->softcap * tanhf(x / job->softcap);
    scores[j] = x;
    m = x > m ? x : m;
  }
  if (sink) m = *sink > m ? *sink : m;
  for (size_t j = lo; j < hi; j++) scores[j] = seamless_expf(scores[j] - m); /* vectorizes: no reduction */
  __m512 vsum = _mm512_setzero_ps();
  size_t j = lo;
  for (; j + 16 <= hi; j += 16) vsum = _mm512_add_ps(vsum, _mm512_loadu_ps(scores + j));
  float sum = _mm512_reduce_add_ps(vsum);
  for (; j < hi; j++) sum += scores[j];
  if (sink) sum += seamless_expf(*sink - m);
  const float inv = 1.0f / sum;
  for (size_t v = 0; v < nv; v++) acc[v] = _mm512_setzero_ps();
  for (size_t j = lo; j < hi; j++) {
    const __m512 w = _mm512_set1_ps(scores[j] * inv);
    const float* vr = vc + j * h;
    for (size_t v = 0; v < nv; v++) acc[v] = _mm512_fmadd_ps(w, _mm512_loadu_ps(vr + 16 * v), acc[v]);
  }
  for (size_t v = 0; v < nv; v++) _mm512_storeu_ps(o + 16 * v, acc[v]);
}

static int gqa_has_avx512(void) {
  static int has = -1;
  if (has < 0) {
    __builtin_cpu_init();
    has = __builtin_cpu_supports("avx512f") ? 1 : 0;
  }
  return has;
}
#endif

/* Pass 2: task = (b, query head, block of query rows). */
static void gqa_attend_task(void* user, size_t task) {
  const GqaJob* job = (const GqaJob*)user;
  size_t blk = task % job->s_blocks, rest = task / job->s_blocks;
  size_t head = rest % job->nh, bi = rest / job->nh;
  size_t h = job->h, s = job->s;
  size_t kh = head / (job->nh / job->nkv);
  size_t p = gqa_past_rows(job, bi), first, t;
  const float* kc = gqa_keys(job, bi, kh, 0, &first, &t);
  const float* vc = gqa_keys(job, bi, kh, 1, &first, &t);
  float stack_scores[1024];
  float* scores = t <= 1024 ? stack_scores : (float*)malloc(t * sizeof(float));
  if (!scores) return;
  const float* sink = job->sink ? job->sink + head : NULL;
  int fast = 0;
#if defined(__x86_64__) && defined(__GNUC__)
  fast = h % 16 == 0 && h <= 256 && gqa_has_avx512();
#endif
  size_t s0 = s * blk / job->s_blocks, s1 = s * (blk + 1) / job->s_blocks;
  for (size_t si = s0; si < s1; si++) {
    float* o = job->out + (bi * s + si) * job->nh * h + head * h;
    const float* q = job->qrot + ((bi * job->nh + head) * s + si) * h;
    size_t lo = 0, hi = t;
    if (job->causal) {  /* in positions, then rows of kc (row 0 holds position `first`) */
      size_t causal_len = p + si + 1, start = 0;
      if (job->window > 0 && causal_len > (size_t)job->window) start = causal_len - (size_t)job->window;
      hi = causal_len - first < t ? causal_len - first : t;
      lo = start > first ? start - first : 0;
    }
    if (lo >= hi) {
      memset(o, 0, h * sizeof(float));
      continue;
    }
#if defined(__x86_64__) && defined(__GNUC__)
    if (fast) {
      gqa_attend_row_avx512(job, q, kc, vc, lo, hi, sink, scores, o);
      continue;
    }
#endif
    gqa_attend_row(job, q, kc, vc, lo, hi, sink, scores, o);
  }
  if (scores != stack_scores) free(scores);
}

/* Returns 0, 2 when out of memory, 3 when a batch entry's keys do not fit the buffers (nothing is touched). */
int seamless_gqa_f32(const float* q, const float* k, const float* v, size_t q_row, size_t k_row, size_t v_row,
                     const float* past_k, const float* past_v, size_t past_len, float* present_k, float* present_v,
                     size_t present_len, float* out, const int32_t* seqlens, int first_prompt, size_t b, size_t s,
                     size_t nh, size_t nkv, size_t h, const float* cos_cache, const float* sin_cache, size_t half,
                     int interleaved, const int64_t* pos, float scale, float softcap, int64_t window, int causal,
                     int window_cache, const float* sink, void* par_fn, void* par_ctx) {
  size_t key_rows = 0;
  if (window_cache && (window <= 0 || present_len < (size_t)window || (past_k && past_len != present_len)))
    return 3;
  for (size_t bi = 0; bi < b; bi++) { /* T keys: the past's rows, then the S new ones, within both buffers */
    int64_t t = (int64_t)seqlens[bi] + 1;
    if (t < (first_prompt ? 1 : (int64_t)s)) return 3;
    if (window_cache) {  /* the past's resident rows (within its capacity) and the new ones */
      size_t p = first_prompt ? 0 : (size_t)t - s, rows = gqa_resident(p, present_len, (size_t)window) + s;
      if (p && !past_k) return 3;
      key_rows = rows > key_rows ? rows : key_rows;
    } else if ((size_t)t > present_len || s > present_len ||
               (!first_prompt && (size_t)t - s > (past_k ? past_len : 0))) {
      return 3;
    }
  }
  GqaJob job;
  memset(&job, 0, sizeof(job));
  job.q = q;
  job.k = k;
  job.v = v;
  job.q_row = q_row;
  job.k_row = k_row;
  job.v_row = v_row;
  job.past_k = past_k;
  job.past_v = past_v;
  job.past_len = past_len;
  job.present_k = present_k;
  job.present_v = present_v;
  job.present_len = present_len;
  job.out = out;
  job.seqlens = seqlens;
  job.first_prompt = first_prompt;
  job.b = b;
  job.s = s;
  job.nh = nh;
  job.nkv = nkv;
  job.h = h;
  job.cos = cos_cache;
  job.sin = sin_cache;
  job.half = half;
  job.interleaved = interleaved;
  job.pos = pos;
  job.rotary = half > 0;
  job.scale = scale;
  job.softcap = softcap;
  job.window = window;
  job.causal = causal;
  job.sink = sink;
  job.window_cache = window_cache;
  job.key_rows = key_rows;
  job.qrot = (float*)malloc((b * nh * s * h + 1) * sizeof(float));
  if (!job.qrot) return 2;
  if (window_cache) {
    job.keys = (float*)malloc((2 * b * nkv * key_rows * h + 1) * sizeof(float));
    if (!job.keys) {
      free(job.qrot);
      return 2;
    }
    job.values = job.keys + b * nkv * key_rows * h;
  }
  /* small problems (a decode step over a short cache) run on this thread: a pool dispatch costs more */
  size_t work = b * nh * s * (present_len + s) * h;
  if (work < (1u << 18)) par_fn = par_ctx = NULL;
  seamless_run_tasks(par_fn, par_ctx, b * nkv, gqa_prepare_task, &job);
  /* query rows per task: all of them when decoding, blocks of ~16 in a prompt */
  job.s_blocks = s > 16 ? (s + 15) / 16 : 1;
  seamless_run_tasks(par_fn, par_ctx, b * nh * job.s_blocks, gqa_attend_task, &job);
  free(job.qrot);
  free(job.keys);
  return 0;
}
