/* Elementwise CPU kernels numpy lacks or runs in several passes. Written so that gcc -O3
 * vectorizes the float32 loops (no libm calls inside them); SEAMLESS_SIMD compiles each loop
 * for AVX-512, AVX2 and baseline x86-64 and picks one at load time. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fastmath.h"
#include "parallel.h"
#include "simd.h"

/* erfc(a) for 0 <= a <= 4: e^(P(a - 2) - a^2), P a degree-11 Chebyshev fit of ln(erfc(a)) + a^2 on [0, 4]
 * (relative error ~3e-7 in float32 before the exponential's rounding): erfc itself to a relative error, so
 * GELU's 1 + erf(z) = erfc(-z) stays accurate where it is small (the Abramowitz-Stegun form, absolute error
 * 1.5e-7, left GELU's outputs below x = -4 with relative errors up to 7e-2). */
static inline float seamless_erfc4(float a) {
  const float t = a - 2.0f;
  const float p = -1.36494124f + t * (-0.418160826f + t * (0.0762486979f + t * (-0.0164650586f +
                  t * (0.00357210962f + t * (-0.000732539978f + t * (0.00013383702f + t * (-2.0560914e-05f +
                  t * (2.68038298e-06f + t * (1.27129482e-07f + t * (-3.4003773e-07f + t * 7.85752619e-08f))))))))));
  return seamless_expf(p - a * a);
}

/* erf: the odd Taylor series below |x| = 0.5 (relative error < 1e-8), elsewhere 1 - erfc; saturates at |x| = 4
 * where erf rounds to +-1 in float32. */
static inline float seamless_erf1(float x) {
  float ax = fabsf(x);
  float x2 = x * x;
  float series = x * (1.12837917f + x2 * (-0.376126389f + x2 * (0.112837917f + x2 * (-0.0268661706f +
                 x2 * (0.00522397762f + x2 * (-0.000854832702f + x2 * 0.000120553302f))))));
  float tail = 1.0f - seamless_erfc4(ax < 4.0f ? ax : 4.0f);
  tail = x < 0.0f ? -tail : tail;
  float y = ax < 0.5f ? series : tail;
  return x != x ? x : y;  /* NaN stays NaN */
}

typedef struct { const float* x; float* y; size_t n, tasks; } UnaryJob;

SEAMLESS_SIMD static void erf_task(void* user, size_t task) {
  UnaryJob* job = user;
  size_t begin, end;
  seamless_task_range(job->n, job->tasks, task, &begin, &end);
  for (size_t i = begin; i < end; i++) job->y[i] = seamless_erf1(job->x[i]);
}

void seamless_erf_f32(const float* x, float* y, size_t n, void* par_fn, void* par_ctx) {
  UnaryJob job = {x, y, n, seamless_task_count(n, 1 << 15)};
  seamless_run_tasks(par_fn, par_ctx, job.tasks, erf_task, &job);
}

void seamless_erf_f64(const double* x, double* y, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] = erf(x[i]);
}

/* GELU with erf: y = x/2 (1 + erf(z)), z = x / sqrt 2, where 1 + erf(z) is 2 - erfc(z) for z >= 0 and erfc(-z)
 * below: no cancellation, so no Taylor branch near 0. Past |z| = 4 it is 2 or 0 (so x = -inf gives NaN, as
 * 0.5 x (1 + erf) does in float32). */
SEAMLESS_SIMD static void gelu_task(void* user, size_t task) {
  UnaryJob* job = user;
  size_t begin, end;
  seamless_task_range(job->n, job->tasks, task, &begin, &end);
  for (size_t i = begin; i < end; i++) {
    float x = job->x[i], z = x * 0.70710678118654752f, a = fabsf(z);
    float e = a < 4.0f ? seamless_erfc4(a) : 0.0f;
    job->y[i] = 0.5f * x * (z >= 0.0f ? 2.0f - e : e);
  }
}

void seamless_gelu_f32(const float* x, float* y, size_t n, void* par_fn, void* par_ctx) {
  UnaryJob job = {x, y, n, seamless_task_count(n, 1 << 15)};
  seamless_run_tasks(par_fn, par_ctx, job.tasks, gelu_task, &job);
}

typedef struct { const float* x; float* y; size_t rows, cols, tasks; } RowJob;

#define LANES 16  /* independent partial results, so reductions vectorize without -ffast-math */
typedef float lanes_f __attribute__((vector_size(4 * LANES), aligned(4)));    /* unaligned-safe loads */
typedef int32_t lanes_i __attribute__((vector_size(4 * LANES), aligned(4)));

/* Softmax of one row (y may be x): one pass for the max, one for exp and sum, one to scale. The max and the sums in
 * LANES lanes written as vectors (gcc left the max's select loop scalar: a MiniLM layer's 1536 x 128 scores 160 ->
 * 112 us on an AMD EPYC core, the same bits). A NaN makes the row NaN; a row of -inf is NaN too, or zeros with
 * masked_zero (attention's fully masked rows). sink: a logit in the max and the sum but no output (attention
 * sinks), or NULL. */
SEAMLESS_SIMD void seamless_softmax_row_f32(const float* x, float* y, size_t cols, int masked_zero,
                                            const float* sink) {
  size_t body = cols / LANES * LANES;
  lanes_f lane = (lanes_f){0} - INFINITY;
  for (size_t c = 0; c < body; c += LANES) {
    lanes_f v = *(const lanes_f*)(x + c);
    lanes_i above = v > lane;  /* NaN never is: the max ignores it, and exp(NaN - m) makes the row NaN */
    lane = (lanes_f)(((lanes_i)v & above) | ((lanes_i)lane & ~above));
  }
  float m = -INFINITY;
  for (int l = 0; l < LANES; l++) m = lane[l] > m ? lane[l] : m;
  for (size_t c = body; c < cols; c++) m = x[c] > m ? x[c] : m;
  if (sink) m = *sink > m ? *sink : m;
  if (masked_zero && m == -INFINITY) {
    int nan = 0;
    for (size_t c = 0; c < cols; c++) nan |= x[c] != x[c];
    if (!nan) {
      memset(y, 0, cols * sizeof(float));
      return;
    }
  }
  lanes_f sums = (lanes_f){0};
  for (size_t c = 0; c < body; c += LANES) {
    lanes_f e;
    for (int l = 0; l < LANES; l++) e[l] = seamless_expf(x[c + l] - m);
    *(lanes_f*)(y + c) = e;
    sums += e;
  }
  float sum = 0.0f;
  for (int l = 0; l < LANES; l++) sum += sums[l];
  for (size_t c = body; c < cols; c++) {
    y[c] = seamless_expf(x[c] - m);
    sum += y[c];
  }
  if (sink) sum += seamless_expf(*sink - m);
  float inv = 1.0f / sum;
  for (size_t c = 0; c < cols; c++) y[c] *= inv;
}

/* Softmax over the last axis of a [rows, cols] array, a row at a time */
static void softmax_task(void* user, size_t task) {
  RowJob* job = user;
  size_t begin, end;
  seamless_task_range(job->rows, job->tasks, task, &begin, &end);
  for (size_t r = begin; r < end; r++)
    seamless_softmax_row_f32(job->x + r * job->cols, job->y + r * job->cols, job->cols, 0, NULL);
}

void seamless_softmax_f32(const float* x, float* y, size_t rows, size_t cols, void* par_fn, void* par_ctx) {
  RowJob job = {x, y, rows, cols, seamless_task_count(rows * cols, 1 << 14)};
  if (job.tasks > rows) job.tasks = rows ? rows : 1;
  seamless_run_tasks(par_fn, par_ctx, job.tasks, softmax_task, &job);
}

/* ORT's GELU-family activations (com.microsoft), float32: QuickGelu y = x * sigmoid(alpha * x).
 * The sigmoid goes through a vectorizable exp (x = k ln2 + r, degree-6 polynomial for e^r, 2^k
 * through the exponent bits; ~2 ulp) on the non-positive side only: sigmoid(z) = 1 / (1 + e^-z)
 * for z >= 0 and e^z / (1 + e^z) for z < 0, so the exponential never overflows. */

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

/* ---- a matrix transposed: y[c][r] = x[r][c] for rows x cols elements of `size` bytes (1, 2, 4 or 8), in tiles
 * of 32 x 32 so that both sides are read and written by whole cache lines (a strided copy reads one element a
 * line: plan/fusion.py's transposed weights took 0.2-0.3 GB/s in numpy) */

#define TRANSPOSE_TILE 32

typedef struct { const char* x; char* y; size_t rows, cols, ldy, size, tile_rows, tasks; } TransposeJob;

#define TRANSPOSE_TILE_OF(T)                                                                       \
  for (size_t c = c0; c < c1; c++) {                                                               \
    T* out = (T*)j->y + c * j->ldy;                                                                \
    const T* in = (const T*)j->x + c;                                                              \
    for (size_t r = r0; r < r1; r++) out[r] = in[r * j->cols];                                     \
  }

#if defined(__SSE2__)
#include <emmintrin.h>
/* 8 x 8 16-bit elements: rows of x at xs apart into rows of y at ys apart (three rounds of interleaves) */
static inline void transpose_8x8_u16(const uint16_t* x, size_t xs, uint16_t* y, size_t ys) {
  __m128i r[8], a[8], b[8];
  for (int i = 0; i < 8; i++) r[i] = _mm_loadu_si128((const __m128i*)(x + i * xs));
  for (int i = 0; i < 4; i++) {
    a[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; i++)
    for (int h = 0; h < 2; h++) {
      b[4 * i + 2 * h] = _mm_unpacklo_epi32(a[4 * i + h], a[4 * i + h + 2]);
      b[4 * i + 2 * h + 1] = _mm_unpackhi_epi32(a[4 * i + h], a[4 * i + h + 2]);
    }
  for (int k = 0; k < 4; k++) {
    _mm_storeu_si128((__m128i*)(y + (2 * k) * ys), _mm_unpacklo_epi64(b[k], b[k + 4]));
    _mm_storeu_si128((__m128i*)(y + (2 * k + 1) * ys), _mm_unpackhi_epi64(b[k], b[k + 4]));
  }
}

/* 4 x 4 32-bit elements, likewise */
static inline void transpose_4x4_u32(const uint32_t* x, size_t xs, uint32_t* y, size_t ys) {
  __m128 r0 = _mm_loadu_ps((const float*)x), r1 = _mm_loadu_ps((const float*)(x + xs));
  __m128 r2 = _mm_loadu_ps((const float*)(x + 2 * xs)), r3 = _mm_loadu_ps((const float*)(x + 3 * xs));
  _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
  _mm_storeu_ps((float*)y, r0);
  _mm_storeu_ps((float*)(y + ys), r1);
  _mm_storeu_ps((float*)(y + 2 * ys), r2);
  _mm_storeu_ps((float*)(y + 3 * ys), r3);
}
#endif

/* A whole tile of 2- or 4-byte elements by SIMD blocks; 0 where there is none (the element loop does it). */
static int transpose_tile_simd(const TransposeJob* j, size_t r0, size_t c0) {
#if defined(__SSE2__)
  if (j->size == 2) {
    for (size_t r = r0; r < r0 + TRANSPOSE_TILE; r += 8)
      for (size_t c = c0; c < c0 + TRANSPOSE_TILE; c += 8)
        transpose_8x8_u16((const uint16_t*)j->x + r * j->cols + c, j->cols, (uint16_t*)j->y + c * j->ldy + r, j->ldy);
    return 1;
  }
  if (j->size == 4) {
    for (size_t r = r0; r < r0 + TRANSPOSE_TILE; r += 4)
      for (size_t c = c0; c < c0 + TRANSPOSE_TILE; c += 4)
        transpose_4x4_u32((const uint32_t*)j->x + r * j->cols + c, j->cols, (uint32_t*)j->y + c * j->ldy + r, j->ldy);
    return 1;
  }
#endif
  (void)j; (void)r0; (void)c0;
  return 0;
}

static void transpose_task(void* user, size_t task) {
  const TransposeJob* j = user;
  size_t b0, b1;
  seamless_task_range(j->tile_rows, j->tasks, task, &b0, &b1);
  for (size_t r0 = b0 * TRANSPOSE_TILE; r0 < b1 * TRANSPOSE_TILE && r0 < j->rows; r0 += TRANSPOSE_TILE)
    for (size_t c0 = 0; c0 < j->cols; c0 += TRANSPOSE_TILE) {
      size_t r1 = r0 + TRANSPOSE_TILE < j->rows ? r0 + TRANSPOSE_TILE : j->rows;
      size_t c1 = c0 + TRANSPOSE_TILE < j->cols ? c0 + TRANSPOSE_TILE : j->cols;
      if (r1 - r0 == TRANSPOSE_TILE && c1 - c0 == TRANSPOSE_TILE && transpose_tile_simd(j, r0, c0)) continue;
      switch (j->size) {
        case 1: TRANSPOSE_TILE_OF(uint8_t); break;
        case 2: TRANSPOSE_TILE_OF(uint16_t); break;
        case 4: TRANSPOSE_TILE_OF(uint32_t); break;
        default: TRANSPOSE_TILE_OF(uint64_t); break;
      }
    }
}

/* y[c * ldy + r] = x[r * cols + c]; 0, or 1 for an element size other than 1, 2, 4, 8 (nothing written). */
int seamless_transpose_2d(const void* x, void* y, size_t rows, size_t cols, size_t ldy, size_t size, void* par_fn,
                          void* par_ctx) {
  if (size != 1 && size != 2 && size != 4 && size != 8) return 1;
  TransposeJob j = {x, y, rows, cols, ldy, size, (rows + TRANSPOSE_TILE - 1) / TRANSPOSE_TILE, 0};
  size_t tasks = seamless_task_count(rows * cols * size, 1 << 18);
  j.tasks = tasks < j.tile_rows ? tasks : j.tile_rows;
  if (j.tasks) seamless_run_tasks(par_fn, par_ctx, j.tasks, transpose_task, &j);
  return 0;
}
