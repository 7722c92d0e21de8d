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
 * one task per (b, kv head); (2) attention, one task per (b, query head, block of query rows): a
 * block of 12+ rows (a prompt) as two GEMMs (scores over the block's keys, then probabilities times
 * values), a row at a time otherwise (a decode step).
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fastmath.h"
#include "kernels.h"
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

/* dst[0:h] = src rotated by the cos/sin rows c, sn (half each): pairs (i, i + half), or (2i, 2i + 1) when
 * interleaved; the channels past 2 * half are copied. */
static inline void rotate_row(const float* src, float* dst, size_t h, size_t half, const float* c, const float* sn,
                              int interleaved) {
  if (interleaved) {
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

/* dst[0:H] = rotary(src[0:H]) at position pos (or a copy without rotary). */
static inline void gqa_rotate(const GqaJob* job, const float* src, float* dst, int64_t pos) {
  if (!job->rotary) {
    memcpy(dst, src, job->h * sizeof(float));
    return;
  }
  rotate_row(src, dst, job->h, job->half, job->cos + pos * job->half, job->sin + pos * job->half, job->interleaved);
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

/* Keys [lo, hi) (rows of kc, row 0 holding position `first`) query row si attends: causal, within the window */
static inline void gqa_key_range(const GqaJob* job, size_t p, size_t first, size_t t, size_t si, size_t* lo,
                                 size_t* hi) {
  *lo = 0;
  *hi = t;
  if (job->causal) {  /* in positions, then rows of kc */
    size_t causal_len = p + si + 1, start = 0;
    if (job->window > 0 && causal_len > (size_t)job->window) start = causal_len - (size_t)job->window;
    *hi = causal_len - first < t ? causal_len - first : t;
    *lo = start > first ? start - first : 0;
  }
  if (*lo > *hi) *lo = *hi;
}

#define GQA_BLOCK_ROWS 60  /* query rows a prompt's task takes (5 of the GEMM's 12-row tiles) */

/* Query rows [s0, s1) of one head (12+ rows) on the GEMM: scores = Q K^T over the keys any of them attends (a
 * row's range grows with it), each row's softmax in place (zeros outside its range: its probabilities), out = P V.
 * The same arithmetic as gqa_attend_row but the sums' order. Returns 0, or 2 when out of memory. */
static int gqa_attend_block(const GqaJob* job, size_t bi, size_t head, size_t s0, size_t s1, const float* kc,
                            const float* vc, size_t first, size_t t, size_t p, const float* sink) {
  const size_t h = job->h, rows = s1 - s0, ldo = job->nh * h;
  size_t klo, khi, lo, hi;
  gqa_key_range(job, p, first, t, s0, &klo, &hi);
  gqa_key_range(job, p, first, t, s1 - 1, &lo, &khi);
  float* o0 = job->out + (bi * job->s + s0) * ldo + head * h;
  if (klo >= khi) {
    for (size_t r = 0; r < rows; r++) memset(o0 + r * ldo, 0, h * sizeof(float));
    return 0;
  }
  const size_t n = khi - klo, score_floats = (rows * n + 15) & ~(size_t)15;
  const size_t pk_floats = seamless_sgemm_packed_size(h, n), pv_floats = seamless_sgemm_packed_size(n, h);
  float* scores = aligned_alloc(64, (score_floats + pk_floats + pv_floats) * sizeof(float));
  if (!scores) return 2;
  float *pk = scores + score_floats, *pv = pk + pk_floats;
  seamless_sgemm_pack_b(kc + klo * h, h, n, h, 1, pk);
  seamless_sgemm_pack_b(vc + klo * h, n, h, h, 0, pv);
  seamless_sgemm(rows, n, h, job->qrot + ((bi * job->nh + head) * job->s + s0) * h, NULL, h, pk, NULL, NULL, NULL,
                 scores, n, NULL, NULL);
  for (size_t r = 0; r < rows; r++) {
    float* row = scores + r * n;
    gqa_key_range(job, p, first, t, s0 + r, &lo, &hi);
    lo = lo > klo ? lo - klo : 0;
    hi = hi > klo ? hi - klo : 0;
    if (job->softcap > 0.0f)
      for (size_t j = lo; j < hi; j++) row[j] = job->softcap * tanhf(row[j] * job->scale / job->softcap);
    else
      for (size_t j = lo; j < hi; j++) row[j] *= job->scale;
    if (lo < hi) seamless_softmax_row_f32(row + lo, row + lo, hi - lo, 0, sink);
    memset(row, 0, lo * sizeof(float));  /* no keys: a row of zeros, as the row kernel writes */
    if (lo < hi) memset(row + hi, 0, (n - hi) * sizeof(float));
    else memset(row, 0, n * sizeof(float));
  }
  seamless_sgemm(rows, h, n, scores, NULL, n, pv, NULL, NULL, NULL, o0, ldo, NULL, NULL);
  free(scores);
  return 0;
}

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
  const float* sink = job->sink ? job->sink + head : NULL;
  size_t s0 = blk * GQA_BLOCK_ROWS, s1 = s0 + GQA_BLOCK_ROWS < s ? s0 + GQA_BLOCK_ROWS : s;
  if (s1 - s0 >= 12 && gqa_attend_block(job, bi, head, s0, s1, kc, vc, first, t, p, sink) == 0) return;
  float stack_scores[1024];
  float* scores = t <= 1024 ? stack_scores : (float*)malloc(t * sizeof(float));
  if (!scores) return;
  int fast = 0;
#if defined(__x86_64__) && defined(__GNUC__)
  fast = h % 16 == 0 && h <= 256 && gqa_has_avx512();
#endif
  for (size_t si = s0; si < s1; si++) {
    float* o = job->out + (bi * s + si) * job->nh * h + head * h;
    const float* q = job->qrot + ((bi * job->nh + head) * s + si) * h;
    size_t lo, hi;
    gqa_key_range(job, p, first, t, si, &lo, &hi);
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
  /* query rows per task: all of them when decoding, blocks of up to GQA_BLOCK_ROWS in a prompt */
  job.s_blocks = (s + GQA_BLOCK_ROWS - 1) / GQA_BLOCK_ROWS;
  seamless_run_tasks(par_fn, par_ctx, b * nh * job.s_blocks, gqa_attend_task, &job);
  free(job.qrot);
  free(job.keys);
  return 0;
}


/* ---- MRotaryEmbedding (com.microsoft): Qwen2-VL/3-VL/3.5's multimodal rotary embedding ----
 * x and y [batch, seq, heads, head] at the given element strides; pos [3, batch * seq] (streams T, H, W). Each
 * token's cos/sin row is assembled column by column from the cache row of the stream that owns the column (owner,
 * from the sections), scaled; then RotaryEmbedding's rotation. Every position is checked first. */

#define MROTARY_HALF_MAX 1024  /* rotary columns a token's assembled row holds (kernels.h) */

typedef struct {
  const float *x, *cos, *sin;
  const int64_t* pos;
  const int8_t* owner;
  float* y;
  size_t batch, seq, heads, head, half, tasks;
  int64_t batch_stride, seq_stride, head_stride;
  float scale;
  int interleaved;
} MRotaryJob;

static void mrotary_task(void* user, size_t task) {
  const MRotaryJob* job = user;
  const size_t half = job->half, tokens = job->batch * job->seq;
  float c[MROTARY_HALF_MAX], sn[MROTARY_HALF_MAX];
  size_t t0, t1;
  seamless_task_range(tokens, job->tasks, task, &t0, &t1);
  for (size_t t = t0; t < t1; t++) {
    const int64_t b = (int64_t)(t / job->seq), si = (int64_t)(t % job->seq);
    for (size_t i = 0; i < half; i++) {
      const int64_t row = job->pos[(size_t)job->owner[i] * tokens + t] * (int64_t)half;
      c[i] = job->cos[row + (int64_t)i] * job->scale;
      sn[i] = job->sin[row + (int64_t)i] * job->scale;
    }
    for (size_t n = 0; n < job->heads; n++) {
      const int64_t at = b * job->batch_stride + si * job->seq_stride + (int64_t)n * job->head_stride;
      rotate_row(job->x + at, job->y + at, job->head, half, c, sn, job->interleaved);
    }
  }
}

int64_t seamless_mrotary_f32(const float* x, const int64_t* pos, float* y, size_t batch, size_t seq, size_t heads,
                             size_t head, size_t half, int64_t batch_stride, int64_t seq_stride, int64_t head_stride,
                             const float* cos_cache, const float* sin_cache, int64_t max_pos, const int8_t* owner,
                             float scale, int interleaved, void* par_fn, void* par_ctx) {
  const size_t tokens = batch * seq;
  for (size_t i = 0; i < 3 * tokens; i++)
    if (pos[i] < 0 || pos[i] >= max_pos) return (int64_t)i + 1;
  MRotaryJob job = {x, cos_cache, sin_cache, pos, owner, y, batch, seq, heads, head, half, 0, batch_stride,
                    seq_stride, head_stride, scale, interleaved};
  job.tasks = seamless_task_count(tokens * heads * head, 1 << 14);
  if (job.tasks > tokens) job.tasks = tokens ? tokens : 1;
  seamless_run_tasks(par_fn, par_ctx, job.tasks, mrotary_task, &job);
  return 0;
}

/* ---- ONNX RotaryEmbedding (opset 23): each token's cos/sin row, the cache's row at its position (or, without
 * position_ids, the token's own row of (B, S, half) caches), rotating the first 2 half channels of each head */
typedef struct {
  const float *x, *cos, *sin;
  const int64_t* pos;
  float* y;
  size_t seq, heads, head, half, tasks, tokens;
  int64_t batch_stride, seq_stride, head_stride;
  int interleaved;
} RotaryJob;

SEAMLESS_SIMD static void rotary_task(void* user, size_t task) {
  const RotaryJob* job = user;
  size_t t0, t1;
  seamless_task_range(job->tokens, job->tasks, task, &t0, &t1);
  for (size_t t = t0; t < t1; t++) {
    const int64_t row = job->pos ? job->pos[t] : (int64_t)t;
    const float *c = job->cos + row * (int64_t)job->half, *sn = job->sin + row * (int64_t)job->half;
    const int64_t base = (int64_t)(t / job->seq) * job->batch_stride + (int64_t)(t % job->seq) * job->seq_stride;
    for (size_t n = 0; n < job->heads; n++) {
      const int64_t at = base + (int64_t)n * job->head_stride;
      rotate_row(job->x + at, job->y + at, job->head, job->half, c, sn, job->interleaved);
    }
  }
}

int64_t seamless_rotary_f32(const float* x, const int64_t* pos, const float* cos_cache, const float* sin_cache,
                            float* y, size_t batch, size_t seq, size_t heads, size_t head, size_t half,
                            int64_t batch_stride, int64_t seq_stride, int64_t head_stride, int64_t max_pos,
                            int interleaved, void* par_fn, void* par_ctx) {
  const size_t tokens = batch * seq;
  for (size_t i = 0; pos && i < tokens; i++)
    if (pos[i] < 0 || pos[i] >= max_pos) return (int64_t)i + 1;
  RotaryJob job = {x, cos_cache, sin_cache, pos, y, seq, heads, head, half, 0, tokens, batch_stride, seq_stride,
                   head_stride, interleaved};
  job.tasks = seamless_task_count(tokens * heads * head, 1 << 14);
  if (job.tasks > tokens) job.tasks = tokens ? tokens : 1;
  seamless_run_tasks(par_fn, par_ctx, job.tasks, rotary_task, &job);
  return 0;
}

/* ---- LinearAttention (com.microsoft): the gated-delta recurrence, one task per range of (batch, KV head) ----
 * q [B, T, qh * dk], k [B, T, kh * dk], v [B, T, kv * dv]; decay [B, T, kv] or per key [B, T, kv * dk]; beta
 * [B, T, kv] or [B, T, 1]; state [B, kv, dk, dv] (from past, or zeros); y [B, T, max(qh, kv) * dv]. Per token:
 * S *= exp(decay); with the delta rule u = beta (v - S^T k), else u = v; S += k u^T; then each query head reading
 * this state: o = scale q^T S (GQA: query heads h * qh / kv ..; inverse GQA: query head h * qh / kv into output
 * head h). S's rows are dv contiguous floats, so every inner loop runs along a row. scratch: B * kv * dv floats. */

typedef struct {
  const float *q, *k, *v, *past, *decay, *beta;
  float *y, *state, *scratch;
  size_t batch, tokens, qh, kv, kh, dk, dv, tasks;
  int gated, delta, decay_per_key, beta_per_head;
  float scale;
} LinearJob;

/* out[0:dv] = sum_i w[i] * s[i, 0:dv] */
SEAMLESS_SIMD static void rows_combined(const float* w, const float* s, size_t dk, size_t dv, float* out) {
  for (size_t j = 0; j < dv; j++) out[j] = 0.0f;
  for (size_t i = 0; i < dk; i++) {
    const float wi = w[i];
    const float* row = s + i * dv;
    for (size_t j = 0; j < dv; j++) out[j] += wi * row[j];
  }
}

SEAMLESS_SIMD static void linear_attention_task(void* user, size_t task) {
  const LinearJob* job = user;
  const size_t dk = job->dk, dv = job->dv, T = job->tokens, kv = job->kv, qh = job->qh, kh = job->kh;
  const size_t out_row = (qh > kv ? qh : kv) * dv, group = qh >= kv ? qh / kv : 0;
  size_t p0, p1;
  seamless_task_range(job->batch * kv, job->tasks, task, &p0, &p1);
  for (size_t pair = p0; pair < p1; pair++) {
    const size_t b = pair / kv, h = pair % kv, hk = h / (kv / kh);
    float* S = job->state + pair * dk * dv;
    float* u = job->scratch + pair * dv;
    if (job->past) memcpy(S, job->past + pair * dk * dv, dk * dv * sizeof(float));
    else memset(S, 0, dk * dv * sizeof(float));
    for (size_t t = 0; t < T; t++) {
      const size_t tok = b * T + t;
      const float* kt = job->k + tok * kh * dk + hk * dk;
      const float* vt = job->v + tok * kv * dv + h * dv;
      if (job->gated) {
        if (job->decay_per_key) {
          const float* g = job->decay + tok * kv * dk + h * dk;
          for (size_t i = 0; i < dk; i++) {
            const float e = expf(g[i]);
            for (size_t j = 0; j < dv; j++) S[i * dv + j] *= e;
          }
        } else {
          const float e = expf(job->decay[tok * kv + h]);
          for (size_t i = 0; i < dk * dv; i++) S[i] *= e;
        }
      }
      const float* update = vt;
      if (job->delta) {
        const float bt = job->beta_per_head ? job->beta[tok * kv + h] : job->beta[tok];
        rows_combined(kt, S, dk, dv, u);  /* S^T k */
        for (size_t j = 0; j < dv; j++) u[j] = bt * (vt[j] - u[j]);
        update = u;
      }
      for (size_t i = 0; i < dk; i++) {
        const float ki = kt[i];
        float* row = S + i * dv;
        for (size_t j = 0; j < dv; j++) row[j] += ki * update[j];
      }
      const size_t first = group ? h * group : h * qh / kv, count = group ? group : 1;
      for (size_t r = 0; r < count; r++) {
        const float* qt = job->q + tok * qh * dk + (first + r) * dk;
        float* ot = job->y + tok * out_row + (group ? first + r : h) * dv;
        rows_combined(qt, S, dk, dv, ot);
        for (size_t j = 0; j < dv; j++) ot[j] *= job->scale;
      }
    }
  }
}

void seamless_linear_attention_f32(const float* q, const float* k, const float* v, const float* past,
                                   const float* decay, const float* beta, float* y, float* state, float* scratch,
                                   size_t batch, size_t tokens, size_t qh, size_t kv, size_t kh, size_t dk, size_t dv,
                                   int gated, int delta, int decay_per_key, int beta_per_head, float scale,
                                   void* par_fn, void* par_ctx) {
  LinearJob job = {q, k, v, past, decay, beta, y, state, scratch, batch, tokens, qh, kv, kh, dk, dv, 0, gated, delta,
                   decay_per_key, beta_per_head, scale};
  const size_t pairs = batch * kv;
  job.tasks = seamless_task_count(pairs * tokens * dk * dv * 4, 1 << 15);
  if (job.tasks > pairs) job.tasks = pairs ? pairs : 1;
  seamless_run_tasks(par_fn, par_ctx, job.tasks, linear_attention_task, &job);
}

