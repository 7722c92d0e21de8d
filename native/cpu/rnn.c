/* RNN, GRU and LSTM layers (ONNX semantics), float32: one direction over all its steps per call.
 * Each loop step is one product of the states by R^T (rnn_matmul; R^T packed once by the caller)
 * and one pass over the gates per batch row. Row b at loop step t reads its input projections
 * (X W^T + biases, computed before the loop: row s * batch + b of xw, rows ldx apart) at source
 * step s = order[t, b] (order NULL: s = t) and writes its output at step s; a row past its length
 * (t >= lens[b]) keeps its state and writes nothing (the caller zeroes y). Activations: 0 Sigmoid,
 * 1 Tanh, 2 Relu, through a vectorizable exp (~1e-7 relative; tanh near 0 by its series). The
 * exported loops are compiled per x86-64 level. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fastmath.h"
#include "simd.h"

typedef float rnn_v16 __attribute__((vector_size(64), aligned(4))); /* unaligned-safe loads */

/* The helpers inline into each of the exported loops' per-target builds. */
#define RNN_INLINE static inline __attribute__((always_inline))

/* out[i, c] = sum_k h[i, k] r[k, c] for `rows` (<= 4) rows and the columns of `panels` (<= 4) panels from
 * panel p0 of r packed as seamless_sgemm_pack_b packs (panels of 16 columns, k-major, zero-padded; cols
 * real columns): each k's 16-column slices are loaded once for all the rows, each panel streams through
 * memory in order, and one row keeps even and odd k apart so the sums' FMA latency stays hidden. */
RNN_INLINE void rnn_block(const float* h, size_t n, int rows, int panels, const float* packed, size_t p0,
                          size_t cols, float* out, size_t ldo) {
  rnn_v16 acc[4][4] = {{{0}}};
  const float* r = packed + p0 * n * 16; /* panel q's slice k at r + (q n + k) 16 */
  size_t k = 0;
  if (rows == 1) /* even k into acc[0], odd k into acc[1] */
    for (; k + 2 <= n; k += 2)
      for (int q = 0; q < panels; q++) {
        acc[0][q] += h[k] * *(const rnn_v16*)(r + (q * n + k) * 16);
        acc[1][q] += h[k + 1] * *(const rnn_v16*)(r + (q * n + k + 1) * 16);
      }
  for (; k < n; k++)
    for (int q = 0; q < panels; q++) {
      rnn_v16 slice = *(const rnn_v16*)(r + (q * n + k) * 16);
      for (int i = 0; i < rows; i++) acc[i][q] += h[i * n + k] * slice;
    }
  if (rows == 1)
    for (int q = 0; q < panels; q++) acc[0][q] += acc[1][q];
  for (int i = 0; i < rows; i++)
    for (int q = 0; q < panels; q++) {
      size_t c0 = (p0 + q) * 16, width = cols - c0 < 16 ? cols - c0 : 16;
      if (width == 16) {
        *(rnn_v16*)(out + i * ldo + c0) = acc[i][q];
      } else { /* the last, partial panel: no store past the row's columns */
        float last[16];
        memcpy(last, &acc[i][q], sizeof last);
        memcpy(out + i * ldo + c0, last, width * sizeof(float));
      }
    }
}

/* The product's tile, as many sums as the vector registers hold: 4 rows x 4 panels with AVX-512's 32
 * registers, 2 x 2 with AVX2's 16 (or NEON's 32 of 128 bits), 1 x 1 otherwise. */
static int rnn_tile(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx512f") ? 4 : (__builtin_cpu_supports("avx2") ? 2 : 1);
#else
  return 2;
#endif
}

/* rnn_matmul's blocks of tile x tile (the last rows and panels by fewer). */
#define RNN_TILED(tile)                                                                              \
  do {                                                                                              \
    size_t p = 0;                                                                                   \
    for (; p + (tile) <= panels; p += (tile)) {                                                     \
      size_t b = 0;                                                                                 \
      for (; b + (tile) <= batch; b += (tile))                                                      \
        rnn_block(h + b * n, n, (tile), (tile), packed, p, cols, out + b * ldo, ldo);               \
      for (; b < batch; b++) rnn_block(h + b * n, n, 1, (tile), packed, p, cols, out + b * ldo, ldo); \
    }                                                                                               \
    for (; p < panels; p++)                                                                         \
      for (size_t b = 0; b < batch; b++) rnn_block(h + b * n, n, 1, 1, packed, p, cols, out + b * ldo, ldo); \
  } while (0)

/* out[b, c] = sum_k h[b, k] r[k, c] for b < batch, c < cols, r (n x cols) packed by seamless_sgemm_pack_b,
 * out rows ldo apart: the recurrence's product of a few rows (a general GEMM's tall tiles would be mostly
 * idle). */
RNN_INLINE void rnn_matmul(const float* h, size_t batch, size_t n, const float* packed, size_t cols, float* out,
                           size_t ldo, int tile) {
  size_t panels = (cols + 15) / 16;
  if (tile == 4)
    RNN_TILED(4);
  else if (tile == 2)
    RNN_TILED(2);
  else
    RNN_TILED(1);
}

enum { RNN_SIGMOID = 0, RNN_TANH = 1, RNN_RELU = 2 };

RNN_INLINE float rnn_sigmoid(float x) {
  float e = seamless_expf(x < 0.0f ? x : -x); /* e^-|x|: never overflows */
  return x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

RNN_INLINE float rnn_tanh(float x) {
  float a = x < 0.0f ? -x : x;
  float e = seamless_expf(-2.0f * a);
  float t = a < 0.0625f ? a * (1.0f + a * a * (-1.0f / 3 + a * a * (2.0f / 15 - a * a * (17.0f / 315))))
                        : (1.0f - e) / (1.0f + e);
  return x < 0.0f ? -t : t;
}

RNN_INLINE void rnn_activate(int kind, float* x, size_t n) {
  if (kind == RNN_SIGMOID)
    for (size_t i = 0; i < n; i++) x[i] = rnn_sigmoid(x[i]);
  else if (kind == RNN_TANH)
    for (size_t i = 0; i < n; i++) x[i] = rnn_tanh(x[i]);
  else
    for (size_t i = 0; i < n; i++) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

RNN_INLINE void rnn_clip(float* x, size_t n, int has_clip, float clip) {
  if (has_clip)
    for (size_t i = 0; i < n; i++) x[i] = x[i] > clip ? clip : (x[i] < -clip ? -clip : x[i]);
}

/* x += a * b */
RNN_INLINE void rnn_mul_add(float* x, const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] += a[i] * b[i];
}

RNN_INLINE size_t rnn_source(const int64_t* order, size_t t, size_t batch, size_t b) {
  return order ? (size_t)order[t * batch + b] : t;
}

RNN_INLINE int rnn_active(const int64_t* lens, size_t t, size_t b) { return !lens || (int64_t)t < lens[b]; }

/* xw: [seq, batch] rows of n; packed_r: R^T (n x n) packed by seamless_sgemm_pack_b; act: f; h: [batch, n],
 * updated; y: [seq rows y_step apart][batch, n] or NULL; scratch: gates [batch, n]. */
SEAMLESS_SIMD void seamless_rnn_f32(size_t steps, size_t batch, size_t n, const float* xw, size_t ldx,
                                    const int64_t* order, const int64_t* lens, const float* packed_r, int has_clip,
                                    float clip, int32_t act, float* h, float* y, size_t y_step, float* gates) {
  int tile = rnn_tile();
  for (size_t t = 0; t < steps; t++) {
    rnn_matmul(h, batch, n, packed_r, n, gates, n, tile);
    for (size_t b = 0; b < batch; b++) {
      if (!rnn_active(lens, t, b)) continue;
      size_t s = rnn_source(order, t, batch, b);
      float *g = gates + b * n, *hb = h + b * n;
      const float* x = xw + (s * batch + b) * ldx;
      for (size_t i = 0; i < n; i++) g[i] += x[i];
      rnn_clip(g, n, has_clip, clip);
      rnn_activate(act, g, n);
      memcpy(hb, g, n * sizeof(float));
      if (y) memcpy(y + s * y_step + b * n, hb, n * sizeof(float));
    }
  }
}

/* xw: [seq, batch] rows of 4n (gates i, o, f, c); packed_r: R^T (n x 4n) packed; p: [3n] peepholes (i, o, f) or
 * NULL; acts: f, g, h; h, c: [batch, n], updated; y: [seq rows y_step apart][batch, n] or NULL;
 * scratch: gates [batch, 4n], tmp [n]. */
SEAMLESS_SIMD void seamless_lstm_f32(size_t steps, size_t batch, size_t n, const float* xw, size_t ldx,
                                     const int64_t* order, const int64_t* lens, const float* packed_r, const float* p,
                                     int has_clip, float clip, const int32_t* acts, float* h, float* c, float* y,
                                     size_t y_step, float* gates, float* tmp) {
  size_t gn = 4 * n;
  int tile = rnn_tile();
  for (size_t t = 0; t < steps; t++) {
    rnn_matmul(h, batch, n, packed_r, gn, gates, gn, tile);
    for (size_t b = 0; b < batch; b++) {
      if (!rnn_active(lens, t, b)) continue;
      size_t s = rnn_source(order, t, batch, b);
      float *g = gates + b * gn, *hb = h + b * n, *cb = c + b * n;
      const float* x = xw + (s * batch + b) * ldx;
      for (size_t i = 0; i < gn; i++) g[i] += x[i];
      float *gi = g, *go = g + n, *gf = g + 2 * n, *gc = g + 3 * n;
      if (p) { /* the input and forget gates see c, the output gate the new c */
        rnn_mul_add(gi, p, cb, n);
        rnn_mul_add(gf, p + 2 * n, cb, n);
        rnn_clip(gi, n, has_clip, clip);
        rnn_clip(gf, n, has_clip, clip);
        rnn_clip(gc, n, has_clip, clip);
        rnn_activate(acts[0], gi, n);
        rnn_activate(acts[0], gf, n);
      } else {
        rnn_clip(g, gn, has_clip, clip);
        rnn_activate(acts[0], g, 3 * n); /* i, o, f together */
      }
      rnn_activate(acts[1], gc, n);
      for (size_t i = 0; i < n; i++) cb[i] = gf[i] * cb[i] + gi[i] * gc[i];
      if (p) {
        rnn_mul_add(go, p + n, cb, n);
        rnn_clip(go, n, has_clip, clip);
        rnn_activate(acts[0], go, n);
      }
      memcpy(tmp, cb, n * sizeof(float));
      rnn_activate(acts[2], tmp, n);
      for (size_t i = 0; i < n; i++) hb[i] = go[i] * tmp[i];
      if (y) memcpy(y + s * y_step + b * n, hb, n * sizeof(float));
    }
  }
}

/* xw: [seq, batch] rows of 3n (gates z, r, h; with linear_before_reset the candidate's Rb is not in it);
 * packed_zr, packed_h: R_zr^T (n x 2n), R_h^T (n x n) packed; rb_h: the candidate's Rb [n]
 * (linear_before_reset);
 * acts: f, g; h: [batch, n], updated; scratch: gates [batch, 3n], rh [batch, n]. */
SEAMLESS_SIMD void seamless_gru_f32(size_t steps, size_t batch, size_t n, const float* xw, size_t ldx,
                                    const int64_t* order, const int64_t* lens, const float* packed_zr,
                                    const float* packed_h, const float* rb_h, int linear_before_reset, int has_clip,
                                    float clip, const int32_t* acts, float* h, float* y, size_t y_step,
                                    float* gates, float* rh) {
  size_t gn = 3 * n;
  int tile = rnn_tile();
  for (size_t t = 0; t < steps; t++) {
    rnn_matmul(h, batch, n, packed_zr, 2 * n, gates, gn, tile);
    if (linear_before_reset) rnn_matmul(h, batch, n, packed_h, n, gates + 2 * n, gn, tile);
    for (size_t b = 0; b < batch; b++) {
      float* g = gates + b * gn;
      const float* x = xw + (rnn_source(order, t, batch, b) * batch + b) * ldx;
      for (size_t i = 0; i < 2 * n; i++) g[i] += x[i];
      rnn_clip(g, 2 * n, has_clip, clip);
      rnn_activate(acts[0], g, 2 * n); /* z, r */
      if (!linear_before_reset)
        for (size_t i = 0; i < n; i++) rh[b * n + i] = g[n + i] * h[b * n + i];
    }
    if (!linear_before_reset) /* candidate = g(x_h + R_h (r * h) + Rb_h), Rb_h in x_h */
      rnn_matmul(rh, batch, n, packed_h, n, gates + 2 * n, gn, tile);
    for (size_t b = 0; b < batch; b++) {
      if (!rnn_active(lens, t, b)) continue;
      size_t s = rnn_source(order, t, batch, b);
      float *g = gates + b * gn, *z = g, *r = g + n, *cand = g + 2 * n, *hb = h + b * n;
      const float* x = xw + (s * batch + b) * ldx + 2 * n;
      if (linear_before_reset) /* candidate = g(x_h + r * (R_h h + Rb_h)) */
        for (size_t i = 0; i < n; i++) cand[i] = x[i] + r[i] * (cand[i] + rb_h[i]);
      else
        for (size_t i = 0; i < n; i++) cand[i] += x[i];
      rnn_clip(cand, n, has_clip, clip);
      rnn_activate(acts[1], cand, n);
      for (size_t i = 0; i < n; i++) hb[i] = (1.0f - z[i]) * cand[i] + z[i] * hb[i];
      if (y) memcpy(y + s * y_step + b * n, hb, n * sizeof(float));
    }
  }
}
