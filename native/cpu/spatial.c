/* Conv (float32): im2col and the GEMM (matmul.c); MaxPool and AveragePool. Built in the one unit after
 * program.c, which includes kernels.h (SeamlessConvArgs, SeamlessPoolArgs). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "parallel.h"
#include "simd.h"

/* The outputs o of [0, out) whose tap at `offset` (o * stride + offset) falls inside [0, in): [*lo, *hi) */
static void tap_range(int64_t offset, int64_t stride, int64_t in, int64_t out, int64_t* lo, int64_t* hi) {
  *lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  *hi = in - offset <= 0 ? 0 : (in - offset + stride - 1) / stride;
  if (*hi > out) *hi = out;
  if (*lo > *hi) *lo = *hi;
}

static int pointwise(const SeamlessConvArgs* a);

/* im2col's copies are short (a tap's run along an output row, a panel's 16 floats) and many (290 k memcpy calls in
 * a 128-channel 3x3 convolution of 56 x 56, half its time): inline, 16 floats a step. */
typedef float f16v __attribute__((vector_size(64), aligned(4)));  /* unaligned-safe */

static inline void copy_floats(float* dst, const float* src, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) *(f16v*)(dst + i) = *(const f16v*)(src + i);
  for (; i < n; i++) dst[i] = src[i];
}

static inline void zero_floats(float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) *(f16v*)(dst + i) = (f16v){0};
  for (; i < n; i++) dst[i] = 0.0f;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SPATIAL_AVX512 1  /* the pools' and depthwise convolutions' own AVX-512 loops: masked loads and stores */

static int spatial_isa = -1;  /* seamless_spatial_set_isa */

static int spatial_avx512_cpu(void) {
  static int has = -1;
  if (has < 0) {
    __builtin_cpu_init();
    has = __builtin_cpu_supports("avx512f") ? 1 : 0;
  }
  return has;
}

static int spatial_avx512(void) { return spatial_avx512_cpu() && spatial_isa != 0; }
#endif

#ifdef SPATIAL_AVX512
#define SPATIAL_AVX512_INLINE __attribute__((target("avx512f"), always_inline)) static inline

/* The AVX-512 plane loops (pools, depthwise convolutions) take 16 outputs of a row a step, reading the floats their
 * taps read along an input row (at most 48 from `at`: vectors A, B, C), each tap's 16 floats then picked from those
 * by a permutation (lane_picks: lane j's offset, 2 j at stride 2). */
SPATIAL_AVX512_INLINE __m512i lane_iota(void) {
  return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

SPATIAL_AVX512_INLINE __m512i lane_picks(int64_t stride) {
  return stride == 2 ? _mm512_add_epi32(lane_iota(), lane_iota()) : lane_iota();
}

/* The lanes of A, B, C inside the row and the step's span */
SPATIAL_AVX512_INLINE void step_lanes(int64_t at, int64_t span, int64_t width, __mmask16 in[3]) {
  const __m512i pos = _mm512_add_epi32(_mm512_set1_epi32((int)at), lane_iota()), end = _mm512_set1_epi32((int)width);
  for (int v = 0; v < 3; v++) {
    const __m512i p = _mm512_add_epi32(pos, _mm512_set1_epi32(16 * v));
    in[v] = _mm512_cmpge_epi32_mask(p, _mm512_setzero_si512()) & _mm512_cmplt_epi32_mask(p, end) &
            (__mmask16)(span - 16 * v >= 16 ? 0xffffu : span > 16 * v ? (1u << (span - 16 * v)) - 1 : 0);
  }
}

enum { ROW_TAPS = 17 };  /* the most taps along the row of a window the plane loops take (16 floats wide) */

/* The tap at `offset` along the row: lane j float picks[j] + offset of A B C (< 48; at stride 2 past 32 from B, C) */
SPATIAL_AVX512_INLINE __m512 pick_tap(__m512 va, __m512 vb, __m512 vc, __m512i picks, int64_t offset) {
  const __m512i idx = _mm512_add_epi32(picks, _mm512_set1_epi32((int)offset));
  const __m512 tap = _mm512_permutex2var_ps(va, idx, vb);
  const __mmask16 past = _mm512_cmpge_epi32_mask(idx, _mm512_set1_epi32(32));
  return past ? _mm512_mask_blend_ps(past, tap, _mm512_permutex2var_ps(vb, _mm512_sub_epi32(idx, _mm512_set1_epi32(16)),
                                                                        vc))
              : tap;
}
#endif

/* Row r of cols (K x L, in `row`, ROW_SLACK floats past L writable) into the GEMM's packed panels of B (matmul.c
 * seamless_sgemm_pack_b's layout: panels of 16 columns, k-major, the last zero-padded): its 16-column pieces to
 * (i / 16) K 16 + r 16. */
enum { ROW_SLACK = 16 };
/* Rows r, r + 1, ... (count <= 16, `ld` apart in `rows`) of cols as columns of its transpose (the rows path: position
 * j's taps at j k): up to 16 consecutive floats a position, not one float a line */
static inline void rows_to_columns(const float* rows, int64_t ld, int64_t r, int64_t count, int64_t k, int64_t l,
                                   float* a_rows) {
  for (int64_t j = 0; j < l; j++)
    for (int64_t i = 0; i < count; i++) a_rows[j * k + r + i] = rows[i * ld + j];
}

static inline void row_to_panels(float* row, int64_t r, int64_t k, int64_t l, float* packed) {
  *(f16v*)(row + l) = (f16v){0};  /* the last panel's padding */
  for (int64_t i = 0; i < l; i += 16) *(f16v*)(packed + (i / 16) * k * 16 + r * 16) = *(const f16v*)(row + i);
}

/* Runs of a row of cols, written in increasing order: whole vectors, so each may write up to 15 floats past its end
 * (the next run's floats, written after it, or the row's slack); the copy reads whole vectors where they end before
 * x_end (past it, float by float) */
static inline void zero_run(float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) *(f16v*)(dst + i) = (f16v){0};
}

static inline void copy_run(float* dst, const float* src, int64_t n, const float* x_end) {
  int64_t i = 0;
  for (; i < n && src + i + 16 <= x_end; i += 16) *(f16v*)(dst + i) = *(const f16v*)(src + i);
  for (; i < n; i++) dst[i] = src[i];
}

/* The 16 floats at src, src + 2, ..., src + 30 (a macro: a function returning a 64-byte vector would have an ABI
 * that depends on the ISA it is compiled for) */
#if defined(__clang__)
#define EVENS(src) \
  __builtin_shufflevector(*(const f16v*)(src), *(const f16v*)((src) + 16), 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, \
                          24, 26, 28, 30)
#else
typedef int32_t i16v __attribute__((vector_size(64)));
#define EVENS(src) \
  __builtin_shuffle(*(const f16v*)(src), *(const f16v*)((src) + 16), \
                    (i16v){0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30})
#endif

/* dst[i] = src[2 i] for i < n, as copy_run (whole vectors: 32 floats read, their even ones kept) */
static inline void copy_run_stride2(float* dst, const float* src, int64_t n, const float* x_end) {
  int64_t i = 0;
  for (; i < n && src + 2 * i + 32 <= x_end; i += 16) *(f16v*)(dst + i) = EVENS(src + 2 * i);
  for (; i < n; i++) dst[i] = src[2 * i];
}

/* cols[((c k0 + q0) k1 + q1) k2 + q2, i] = x[c, o0 s0 - p0 + q0 d0, ...] for output positions i = (o0, o1, o2) in
 * [j0, j0 + cols) (zeros outside the input), packed as the GEMM's B: a row per weight tap made in `row` (cols +
 * ROW_SLACK floats), read along the input's rows (each tap's run of outputs inside the row found once: a plain copy
 * where the stride is 1); or, with a_rows, 16 rows at a time into `row` (16 of cols + ROW_SLACK) and transposed into
 * a_rows (the rows path: [cols, k]; r0 a multiple of 16). x_end: the end of x's tensor. */
SEAMLESS_SIMD static void im2col(const SeamlessConvArgs* a, const float* x, const float* x_end, int64_t r0,
                                 int64_t r1, int64_t j0, int64_t cols, float* row, float* packed, float* a_rows) {
  const int64_t in0 = a->in_shape[0], in1 = a->in_shape[1], in2 = a->in_shape[2], plane = in0 * in1 * in2;
  const int64_t out1 = a->out_shape[1], out2 = a->out_shape[2], s2 = a->stride[2];
  const int64_t k0 = a->kernel[0], k1 = a->kernel[1], k2 = a->kernel[2];
  for (int64_t r = r0; r < r1; r++) {  /* row r of cols: channel c's tap (q0, q1, q2) */
    const int64_t q2 = r % k2, q1 = r / k2 % k1, q0 = r / (k2 * k1) % k0, c = r / (k2 * k1 * k0);
    const int64_t offset = q2 * a->dilation[2] - a->pad[2];
    int64_t lo, hi, first = j0 % out2, o1 = j0 / out2 % out1, o0 = j0 / out2 / out1;
    float* out = a_rows ? row + (r - r0) % 16 * (cols + ROW_SLACK) : row;
    tap_range(offset, s2, in2, out2, &lo, &hi);
    for (int64_t left = cols; left > 0;) {  /* the output rows' pieces in the block: [first, last) of row (o0, o1) */
      const int64_t last = out2 - first < left ? out2 : first + left;
      const int64_t p0 = o0 * a->stride[0] - a->pad[0] + q0 * a->dilation[0];
      const int64_t p1 = o1 * a->stride[1] - a->pad[1] + q1 * a->dilation[1];
      if (p0 < 0 || p0 >= in0 || p1 < 0 || p1 >= in1) {  /* a row of padding */
        zero_run(out, last - first);
      } else {
        const float* line = x + c * plane + (p0 * in1 + p1) * in2;
        const int64_t z1 = lo < first ? first : lo > last ? last : lo, z2 = hi > last ? last : hi < z1 ? z1 : hi;
        zero_run(out, z1 - first);
        if (s2 == 1)
          copy_run(out + z1 - first, line + offset + z1, z2 - z1, x_end);
        else if (s2 == 2)
          copy_run_stride2(out + z1 - first, line + offset + 2 * z1, z2 - z1, x_end);
        else
          for (int64_t o2 = z1; o2 < z2; o2++) out[o2 - first] = line[o2 * s2 + offset];
        zero_run(out + z2 - first, last - z2);
      }
      out += last - first;
      left -= last - first;
      first = 0;
      if (++o1 == out1) o1 = 0, o0++;
    }
    if (!a_rows)
      row_to_panels(row, r, a->k, cols, packed);
    else if ((r - r0) % 16 == 15 || r == r1 - 1)
      rows_to_columns(row, cols + ROW_SLACK, r - (r - r0) % 16, (r - r0) % 16 + 1, a->k, cols, a_rows);
  }
}

/* A block of the GEMM's B made on the pool: im2col's rows (taps) shared among tasks, each with a row buffer of its
 * own, or for a 1x1 stride-1 convolution x's columns packed panel by panel */
enum { CONV_TASKS = 8 };  /* at most: the row buffers in the scratch */
typedef struct {
  const SeamlessConvArgs* a;
  const float *x, *x_end;
  int64_t j0, cols;
  float *rows, *packed;
  size_t tasks;
  float* a_rows;  /* the rows path's [cols, k], or NULL: packed panels */
} ColsJob;

static void cols_task(void* user, size_t task) {
  const ColsJob* job = user;
  const SeamlessConvArgs* a = job->a;
  size_t b0, b1;
  if (job->a_rows) {  /* the rows path: groups of 16 rows; x's own rows (channels) for a 1x1 stride-1 convolution */
    seamless_task_range((size_t)((a->k + 15) / 16), job->tasks, task, &b0, &b1);
    const int64_t r0 = (int64_t)b0 * 16, r1 = (int64_t)b1 * 16 < a->k ? (int64_t)b1 * 16 : a->k;
    if (pointwise(a))
      for (int64_t r = r0; r < r1; r += 16)
        rows_to_columns(job->x + r * a->l + job->j0, a->l, r, r1 - r < 16 ? r1 - r : 16, a->k, job->cols,
                        job->a_rows);
    else if (r0 < r1)
      im2col(a, job->x, job->x_end, r0, r1, job->j0, job->cols,
             job->rows + (int64_t)task * 16 * (job->cols + ROW_SLACK), NULL, job->a_rows);
    return;
  }
  if (pointwise(a)) {
    seamless_task_range((size_t)((job->cols + 15) / 16), job->tasks, task, &b0, &b1);
    const int64_t first = (int64_t)b0 * 16, last = (int64_t)b1 * 16 < job->cols ? (int64_t)b1 * 16 : job->cols;
    if (first < last)
      seamless_sgemm_pack_b(job->x + job->j0 + first, (size_t)a->k, (size_t)(last - first), (size_t)a->l, 0,
                            job->packed + first * a->k);
    return;
  }
  seamless_task_range((size_t)a->k, job->tasks, task, &b0, &b1);
  im2col(a, job->x, job->x_end, (int64_t)b0, (int64_t)b1, job->j0, job->cols,
         job->rows + (int64_t)task * (job->cols + ROW_SLACK), job->packed, job->a_rows);
}

/* A depthwise convolution (one input and one output channel a group): each output its taps' sum, in the weights'
 * order, plus the bias; a task per range of (image, channel) planes. A GEMM per channel of a few taps cost ~10x. */
typedef struct {
  const SeamlessConvArgs* a;
  const float* x;
  float* y;
  float* scratch;  /* depthwise_floats() a task, or NULL */
  size_t tasks;
} DepthwiseJob;

static size_t depthwise_tasks(const SeamlessConvArgs* a) {
  const size_t tasks = seamless_task_count((size_t)(a->n * a->m * a->l * a->k), 1 << 15);
  return tasks < (size_t)(a->n * a->m) ? tasks : (size_t)(a->n * a->m);
}

/* A zero-padded copy of one channel's plane xc (a's in_shape) into dst, ext[3] floats: the input at a's begin pads,
 * zeros around it, written row by row in whole-vector runs (up to 15 floats past dst's end: PAD_SLACK floats the
 * caller leaves, or what it writes next) */
enum { PAD_SLACK = 16 };
SEAMLESS_SIMD static void pad_plane(const SeamlessConvArgs* a, const float* xc, const int64_t ext[3], float* dst) {
  const int64_t in0 = a->in_shape[0], in1 = a->in_shape[1], in2 = a->in_shape[2];
  const int64_t c_lo = a->pad[2] < ext[2] ? a->pad[2] : ext[2];  /* the copied columns [c_lo, c_hi) */
  const int64_t c_hi = a->pad[2] + in2 < ext[2] ? a->pad[2] + in2 : ext[2];
  for (int64_t z = 0; z < ext[0]; z++)
    for (int64_t r = 0; r < ext[1]; r++) {
      float* row = dst + (z * ext[1] + r) * ext[2];
      const int64_t iz = z - a->pad[0], ir = r - a->pad[1];
      if (iz < 0 || iz >= in0 || ir < 0 || ir >= in1 || c_lo >= c_hi) {
        zero_run(row, ext[2]);
        continue;
      }
      zero_run(row, c_lo);
      copy_run(row + c_lo, xc + (iz * in1 + ir) * in2 + c_lo - a->pad[2], c_hi - c_lo, xc + in0 * in1 * in2);
      zero_run(row + c_hi, ext[2] - c_hi);
    }
}

/* A depthwise plane through a zero-padded copy of its input (every tap then inside: no ranges, and a tap's products
 * vectorize over the plane): the same taps' sum in the weights' order, plus the bias. [1, 272, 14, 14] 3x3 at 1
 * thread: 5.75x -> 2.12x stock. buf: depthwise_floats() floats (the padded plane, its slack, the sums). */
enum { DW_SLACK = 64 };  /* floats past the padded plane: the last row's junk columns read there (at least 32) */

static int64_t depthwise_ext(const SeamlessConvArgs* a, int64_t ext[3]) {  /* the padded plane's extents, floats */
  int64_t size = 1;
  for (int d = 0; d < 3; d++) {
    ext[d] = (a->out_shape[d] - 1) * a->stride[d] + (a->kernel[d] - 1) * a->dilation[d] + 1;
    size *= ext[d];
  }
  return size;
}

/* The padded plane with its slack, in whole 16-float steps: where the sums start in depthwise_padded's buf */
static int64_t depthwise_plane_floats(const SeamlessConvArgs* a) {
  int64_t ext[3];
  return (depthwise_ext(a, ext) + DW_SLACK + 15) / 16 * 16;
}

/* The scratch depthwise_padded takes (the plane, then the sums as long), or 0 where its taps reach past the slack
 * (the per-row loop then) */
static int64_t depthwise_floats(const SeamlessConvArgs* a) {
  return (a->kernel[2] - 1) * a->dilation[2] > DW_SLACK ? 0 : 2 * depthwise_plane_floats(a);
}

SEAMLESS_SIMD static void depthwise_padded(const SeamlessConvArgs* a, const float* xc, const float* w, float b,
                                           float* yc, float* buf) {
  int64_t ext[3];
  const int64_t size = depthwise_ext(a, ext);
  float* restrict acc = buf + depthwise_plane_floats(a);
  pad_plane(a, xc, ext, buf);
  const int64_t out2 = a->out_shape[2], s2 = a->stride[2];
  zero_floats(buf + size, DW_SLACK);
  if (s2 <= 2) {
    /* a row's stride 1 or 2: 16 outputs of a row at a time, their sums in a register over the taps (read at most
     * 15 floats past a padded row at stride 1, 31 at 2: the next row's, or the slack), plus the bias, into y (whole
     * vectors, spilling into the next rows, written after), through acc where they would reach past the plane */
    const int64_t whole = (out2 + 15) / 16 * 16;
    float* const end = yc + a->l;
    for (int64_t o0 = 0; o0 < a->out_shape[0]; o0++)
      for (int64_t o1 = 0; o1 < a->out_shape[1]; o1++, yc += out2) {
        const int last = end - yc < whole;
        for (int64_t j = 0; j < out2; j += 16) {
          f16v sum = {0};
          const float* wt = w;
          for (int64_t q0 = 0; q0 < a->kernel[0]; q0++)
            for (int64_t q1 = 0; q1 < a->kernel[1]; q1++) {
              const float* src = buf + ((o0 * a->stride[0] + q0 * a->dilation[0]) * ext[1] + o1 * a->stride[1] +
                                        q1 * a->dilation[1]) * ext[2] + s2 * j;
              for (int64_t q2 = 0; q2 < a->kernel[2]; q2++, wt++)
                sum += (s2 == 1 ? *(const f16v*)(src + q2 * a->dilation[2]) : EVENS(src + q2 * a->dilation[2])) * *wt;
            }
          *(f16v*)((last ? acc : yc) + j) = sum + b;
        }
        if (last) copy_floats(yc, acc, out2);
      }
    return;
  }
  /* a row's stride 3 or more: each tap's products over the whole plane at once at stride 1, rows ext[2] wide (the
   * last (k - 1) d columns of each are junk): one long vector loop a tap, whatever the row's width; then every
   * stride-th row and column kept (s1 s2 times the products, at 16 a step rather than one) */
  const int64_t flat = ((a->out_shape[1] - 1) * a->stride[1] + 1) * ext[2];  /* within size: rows past it unread */
  for (int64_t o0 = 0; o0 < a->out_shape[0]; o0++, yc += a->out_shape[1] * out2) {
    zero_floats(acc, flat);
    const float* wt = w;
    for (int64_t q0 = 0; q0 < a->kernel[0]; q0++)
      for (int64_t q1 = 0; q1 < a->kernel[1]; q1++)
        for (int64_t q2 = 0; q2 < a->kernel[2]; q2++, wt++) {
          const float* restrict src = buf + ((o0 * a->stride[0] + q0 * a->dilation[0]) * ext[1] + q1 * a->dilation[1]) *
                                                ext[2] + q2 * a->dilation[2];
          const float wv = *wt;
          for (int64_t i = 0; i < flat; i++) acc[i] += src[i] * wv;
        }
    for (int64_t o1 = 0; o1 < a->out_shape[1]; o1++)
      for (int64_t o2 = 0; o2 < out2; o2++) yc[o1 * out2 + o2] = acc[o1 * a->stride[1] * ext[2] + o2 * s2] + b;
  }
}

#ifdef SPATIAL_AVX512
/* Whether depthwise_plane_avx512 takes a convolution: 2-D, a window at most 17 floats wide along the row, rows short
 * enough for 32-bit lane positions; stride 2 along the row, or stride 1 with rows of at most 16 outputs. One 3x3
 * depthwise convolution, 1 thread, ours / stock, depthwise_padded -> this: stride 2 of [1, 112, 56, 56] 2.07x ->
 * 1.49x, of [1, 96, 112, 112] 1.77x -> 1.29x; stride 1 of [1, 272, 14, 14] 2.06-2.16x -> 1.73-1.76x, of
 * [1, 544, 7, 7] 3.8-4.2x -> 3.1-3.2x; but of [1, 136, 28, 28] 1.91x -> 2.00x and of [1, 32, 112, 112] 1.89x ->
 * 2.33x (the padded copy's plane-wide loops win on long rows at stride 1). */
static int depthwise_plane_fits(const SeamlessConvArgs* a) {
  return spatial_avx512() && a->kernel[0] == 1 && a->in_shape[0] == 1 && a->out_shape[0] == 1 && a->pad[0] == 0 &&
         (a->stride[2] == 2 || (a->stride[2] == 1 && a->out_shape[2] <= 16)) &&
         (a->kernel[2] - 1) * a->dilation[2] <= 16 && a->in_shape[2] < (1 << 28) && a->pad[2] < (1 << 28);
}

/* A depthwise 2-D plane (depthwise_plane_fits), 16 outputs of a row a step: at stride 2 for each window row the floats
 * the step's taps read loaded once, masked to the row (zeros outside it: the padding's, as depthwise_padded's copy
 * holds them), each tap's picked from them, at stride 1 each tap's loaded in place masked to the row; multiplied in,
 * the taps in the weights' order, then the bias: depthwise_padded's sums without its padded copy of the plane (whose
 * stores its first reads waited for). */
__attribute__((target("avx512f"))) static void depthwise_plane_avx512(const SeamlessConvArgs* a, const float* xc,
                                                                       const float* w, float b, float* yc) {
  const int64_t in1 = a->in_shape[1], width = a->in_shape[2], out2 = a->out_shape[2], st2 = a->stride[2];
  const int64_t k1s = a->kernel[1], d1 = a->dilation[1], k2s = a->kernel[2], d2 = a->dilation[2];
  const __m512i pick = lane_picks(st2);
  const __m512 zero = _mm512_setzero_ps(), bias = _mm512_set1_ps(b);
  for (int64_t o1 = 0; o1 < a->out_shape[1]; o1++, yc += out2)
    for (int64_t j = 0; j < out2; j += 16) {
      const int64_t n = out2 - j < 16 ? out2 - j : 16, at = j * st2 - a->pad[2];
      __mmask16 in[3];
      step_lanes(at, st2 * (n - 1) + (k2s - 1) * d2 + 1, width, in);
      __m512 sum = zero;
      const float* wt = w;
      __mmask16 tap_in[ROW_TAPS];  /* stride 1: per tap along the row, the lanes whose tap lies inside it */
      if (st2 == 1) {
        const __m512i pos = _mm512_add_epi32(_mm512_set1_epi32((int)at), lane_iota());
        for (int64_t q2 = 0; q2 < k2s; q2++) {
          const __m512i p = _mm512_add_epi32(pos, _mm512_set1_epi32((int)(q2 * d2)));
          tap_in[q2] = _mm512_cmpge_epi32_mask(p, _mm512_setzero_si512()) &
                       _mm512_cmplt_epi32_mask(p, _mm512_set1_epi32((int)width)) & (__mmask16)((1u << n) - 1);
        }
      }
      for (int64_t q1 = 0; q1 < k1s; q1++) {
        const int64_t r = o1 * a->stride[1] - a->pad[1] + q1 * d1;
        if (st2 == 1) {  /* each tap one load masked to the row (14 x 14: 77 -> 68 us against picking it) */
          for (int64_t q2 = 0; q2 < k2s; q2++, wt++)
            if (r >= 0 && r < in1)
              sum = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tap_in[q2], xc + r * width + at + q2 * d2),
                                    _mm512_set1_ps(*wt), sum);
          continue;
        }
        __m512 va = zero, vb = zero, vc = zero;
        if (r >= 0 && r < in1) {
          const float* row = xc + r * width + at;
          va = _mm512_maskz_loadu_ps(in[0], row), vb = _mm512_maskz_loadu_ps(in[1], row + 16);
          vc = _mm512_maskz_loadu_ps(in[2], row + 32);
        }
        for (int64_t q2 = 0; q2 < k2s; q2++, wt++)
          sum = _mm512_fmadd_ps(pick_tap(va, vb, vc, pick, q2 * d2),
                                _mm512_set1_ps(*wt), sum);
      }
      _mm512_mask_storeu_ps(yc + j, (__mmask16)((1u << n) - 1), _mm512_add_ps(sum, bias));
    }
}
#endif

SEAMLESS_SIMD static void depthwise_task(void* user, size_t task) {
  const DepthwiseJob* job = user;
  const SeamlessConvArgs* a = job->a;
  const int64_t in0 = a->in_shape[0], in1 = a->in_shape[1], in2 = a->in_shape[2], plane = in0 * in1 * in2;
  const int64_t out2 = a->out_shape[2], s2 = a->stride[2];
  enum { KEPT = 16 };  /* the first taps' output ranges along the row, made once (divisions) */
  int64_t kept_lo[KEPT], kept_hi[KEPT];
  for (int64_t q2 = 0; q2 < a->kernel[2] && q2 < KEPT; q2++)
    tap_range(q2 * a->dilation[2] - a->pad[2], s2, in2, out2, &kept_lo[q2], &kept_hi[q2]);
  size_t p0, p1;
  seamless_task_range((size_t)(a->n * a->c), job->tasks, task, &p0, &p1);
  float* buf = job->scratch ? job->scratch + task * (size_t)depthwise_floats(a) : NULL;  /* none: the per-row loop */
#ifdef SPATIAL_AVX512
  const int in_registers = depthwise_plane_fits(a);
#endif
  for (size_t p = p0; p < p1; p++) {
    const int64_t ch = (int64_t)p % a->c;
    const float *xc = job->x + (int64_t)p * plane, *w = a->weights + ch * a->k;
    const float b = a->bias ? a->bias[ch] : 0.0f;
    float* yc = job->y + (int64_t)p * a->l;
#ifdef SPATIAL_AVX512
    if (in_registers) {
      depthwise_plane_avx512(a, xc, w, b, yc);
      continue;
    }
#endif
    if (buf) {
      depthwise_padded(a, xc, w, b, yc, buf);
      continue;
    }
    /* an output row at a time: each tap's products added across the row (taps in the weights' order) */
    for (int64_t o0 = 0; o0 < a->out_shape[0]; o0++)
      for (int64_t o1 = 0; o1 < a->out_shape[1]; o1++, yc += out2) {
        for (int64_t o2 = 0; o2 < out2; o2++) yc[o2] = 0.0f;
        const float* wt = w;
        for (int64_t q0 = 0; q0 < a->kernel[0]; q0++) {
          const int64_t r0 = o0 * a->stride[0] - a->pad[0] + q0 * a->dilation[0];
          for (int64_t q1 = 0; q1 < a->kernel[1]; q1++) {
            const int64_t r1 = o1 * a->stride[1] - a->pad[1] + q1 * a->dilation[1];
            if (r0 < 0 || r0 >= in0 || r1 < 0 || r1 >= in1) {
              wt += a->kernel[2];
              continue;
            }
            const float* line = xc + (r0 * in1 + r1) * in2;
            for (int64_t q2 = 0; q2 < a->kernel[2]; q2++, wt++) {
              const int64_t offset = q2 * a->dilation[2] - a->pad[2];
              int64_t lo, hi;
              if (q2 < KEPT) lo = kept_lo[q2], hi = kept_hi[q2];
              else tap_range(offset, s2, in2, out2, &lo, &hi);
              const float wv = *wt;
              if (s2 == 1) {
                const float* src = line + offset;
                for (int64_t o2 = lo; o2 < hi; o2++) yc[o2] += src[o2] * wv;
              } else {
                for (int64_t o2 = lo; o2 < hi; o2++) yc[o2] += line[o2 * s2 + offset] * wv;
              }
            }
          }
        }
        for (int64_t o2 = 0; o2 < out2; o2++) yc[o2] += b;
      }
  }
}

static int depthwise(const SeamlessConvArgs* a) { return a->c == a->group && a->m == a->group; }

/* A 1x1 convolution of stride 1 without pads (at either end: the output as large as the input): x itself is cols */
static int pointwise(const SeamlessConvArgs* a) {
  int yes = 1;
  for (int d = 0; d < 3; d++)
    yes &= a->kernel[d] == 1 && a->stride[d] == 1 && a->pad[d] == 0 && a->out_shape[d] == a->in_shape[d];
  return yes;
}

/* Output positions a block of the GEMM's columns: its packed B (im2col's, or x's own) within CONV_BLOCK_BYTES, so
 * that it is written and read in cache, not through memory (a whole 3x3 convolution's cols were 14 MB in
 * DenseNet's first block, for 32 output channels); but 64 columns at least, two of the GEMM's wide tiles (a block
 * of 16 at 4608 taps re-read the 9 MB of weights 4 times for 7 x 7 outputs: 4-5 % slower) */
#define CONV_BLOCK_BYTES (512 * 1024)
static int64_t conv_block_columns(const SeamlessConvArgs* a) {
  int64_t cols = CONV_BLOCK_BYTES / (int64_t)sizeof(float) / (a->k > 0 ? a->k : 1) / 16 * 16;
  if (cols < 64) cols = 64;
  return cols < a->l ? cols : a->l;
}

/* The direct path's geometry (2 spatial dims: the first of in_shape, kernel and out_shape 1): the padded plane's
 * rows and their length, and the GEMM's columns: output (o1, o2) at o1 * p2 + o2, the last row's tail not computed */
typedef struct {
  int64_t p1, p2, flat;
  int padded;
} DirectShape;

static DirectShape direct_shape(const SeamlessConvArgs* a) {
  DirectShape d;
  d.p1 = a->out_shape[1] + (a->kernel[1] - 1) * a->dilation[1];
  d.p2 = a->out_shape[2] + (a->kernel[2] - 1) * a->dilation[2];
  d.flat = (a->out_shape[1] - 1) * d.p2 + a->out_shape[2];
  d.padded = d.p1 != a->in_shape[1] || d.p2 != a->in_shape[2];
  return d;
}

int64_t seamless_conv_direct(const SeamlessConvArgs* a) {
  if (depthwise(a) || a->in_shape[0] != 1 || a->kernel[0] != 1 || a->out_shape[0] != 1 || a->pad[0] != 0 ||
      a->stride[1] != 1 || a->stride[2] != 1 || !seamless_sgemm_indirect_supported((size_t)(a->m / a->group)))
    return 0;
  const DirectShape d = direct_shape(a);
  return d.p1 >= a->in_shape[1] + a->pad[1] && d.p2 >= a->in_shape[2] + a->pad[2] &&
         4 * (d.p2 - a->out_shape[2]) <= a->out_shape[2];
}

static int use_direct(const SeamlessConvArgs* a) { return a->direct && seamless_conv_direct(a); }

/* The rows path where the positions fill few of the GEMM's 16-wide column panels and there are channels enough for
 * its columns. ResNet-50's convolutions alone, 1 thread, ours / stock in one run: 3x3 of 512 channels on 7 x 7 1.37x
 * -> 1.12x, on 14 x 14 stride 2 1.30x -> 1.03x, 1x1 512 -> 2048 on 7 x 7 1.27x -> 1.19x; on 14 x 14 (196 positions)
 * the rows path was slower (1x1 256 -> 1024 1.06 -> 1.35 ms): not taken there. */
#define ROWS_MAX_POSITIONS 100
int64_t seamless_conv_rows(const SeamlessConvArgs* a) {
  return !depthwise(a) && a->l <= ROWS_MAX_POSITIONS && a->m / a->group >= 16;
}

static int use_rows(const SeamlessConvArgs* a) { return a->packed_rows && seamless_conv_rows(a); }

/* The plane the channels path reads (2 spatial dims: the first of in_shape, kernel and out_shape 1): rows p1 of p2
 * floats. x itself where the taps reach no padding; else a zero-padded copy of what they reach. */
typedef struct {
  int64_t p1, p2;
  int padded;
} ChannelPlane;

static ChannelPlane channel_plane(const SeamlessConvArgs* a) {
  ChannelPlane d;
  d.p1 = (a->out_shape[1] - 1) * a->stride[1] + (a->kernel[1] - 1) * a->dilation[1] + 1;
  d.p2 = (a->out_shape[2] - 1) * a->stride[2] + (a->kernel[2] - 1) * a->dilation[2] + 1;
  d.padded = a->pad[1] || a->pad[2] || d.p1 > a->in_shape[1] || d.p2 > a->in_shape[2];
  if (!d.padded) d.p1 = a->in_shape[1], d.p2 = a->in_shape[2];
  return d;
}

/* The channels path's conditions, on a CPU with AVX-512 (whatever seamless_spatial_set_isa says: args made with it
 * keep their path): 2 spatial dims, stride 1 or 2 along the row, 16 output channels a group or more, and 16 taps or
 * more (a tile's transposition into y costs about 5 taps' products: 1x1 16 -> 64 at 55 x 55 lost 5 % alone, won 8 %
 * with FusedConv's Relu, which the other paths apply in a pass of their own; a 3x3 stem of 3 channels won 15 %). */
enum { CHANNEL_MIN_TAPS = 16 };
static int channels_fit(const SeamlessConvArgs* a) {
#ifdef SPATIAL_AVX512
  return spatial_avx512_cpu() && !depthwise(a) && a->in_shape[0] == 1 && a->kernel[0] == 1 && a->out_shape[0] == 1 &&
         a->pad[0] == 0 && (a->stride[2] == 1 || a->stride[2] == 2) && a->m / a->group >= 16 &&
         a->k >= CHANNEL_MIN_TAPS;
#else
  (void)a;
  return 0;
#endif
}

int64_t seamless_conv_channels(const SeamlessConvArgs* a) {
#ifdef SPATIAL_AVX512
  return spatial_avx512() && channels_fit(a);
#else
  return channels_fit(a);
#endif
}

static int use_channels(const SeamlessConvArgs* a) { return a->channels && a->packed_rows && channels_fit(a); }

/* The direct path's scratch: the taps' offsets (2 floats each), the GEMM's last columns packed, the padded planes
 * and pad_plane's slack (where pads are), the GEMM's output before its dropped columns go (where there
 * are any) */
static int64_t direct_floats(const SeamlessConvArgs* a) {
  const DirectShape d = direct_shape(a);
  return 2 * a->k + (int64_t)seamless_sgemm_indirect_tail_floats((size_t)a->k) +
         (d.padded ? a->c / a->group * d.p1 * d.p2 + PAD_SLACK : 0) +
         (d.p2 != a->out_shape[2] ? a->m / a->group * d.flat : 0);
}

/* B of the GEMM packed (matmul.c's panels) for a block of columns, then im2col's row buffers (a task's each); a
 * depthwise convolution's padded planes and sums (a task's each) */
int64_t seamless_conv_scratch_floats(const SeamlessConvArgs* a) {
  if (depthwise(a)) return (int64_t)depthwise_tasks(a) * depthwise_floats(a);
  if (use_channels(a)) {
    const ChannelPlane d = channel_plane(a);
    return 2 * a->k + (d.padded ? a->c / a->group * d.p1 * d.p2 + PAD_SLACK : 0);
  }
  if (use_rows(a)) return a->l * a->k + a->l * (a->m / a->group) + CONV_TASKS * 16 * (a->l + ROW_SLACK);
  if (use_direct(a)) return direct_floats(a);
  const int64_t cols = conv_block_columns(a);
  return (int64_t)seamless_sgemm_packed_size((size_t)a->k, (size_t)cols) +
         (pointwise(a) ? 0 : CONV_TASKS * (cols + ROW_SLACK));
}

/* FusedConv's Add and Relu over rows x cols of y from element `at` (row stride ld), where a block was just written
 * (in cache): y + z (z: y's shape, or NULL), as the Add of the convolution's output would round it, then the Relu */
SEAMLESS_SIMD static void finish_rows(const SeamlessConvArgs* a, float* y, const float* z, int64_t at, int64_t rows,
                                      int64_t cols, int64_t ld) {
  if (!z && !a->relu) return;
  for (int64_t r = 0; r < rows; r++) {
    float* yr = y + at + r * ld;
    const float* zr = z ? z + at + r * ld : NULL;
    if (zr)
      for (int64_t j = 0; j < cols; j++) yr[j] += zr[j];
    if (a->relu)
      for (int64_t j = 0; j < cols; j++) yr[j] = seamless_relu_f32(yr[j]);
  }
}

/* Per image and group the GEMM over the input's planes read in place (seamless_sgemm_indirect), zero-padded into
 * the scratch where the convolution pads: tap r = (c, q1, q2) is the plane at c p1 p2 + q1 d1 p2 + q2 d2, output
 * (o1, o2) its column o1 p2 + o2. */
static void conv_direct(const SeamlessConvArgs* a, const float* x, const float* z, float* y, float* scratch,
                        void* par_fn, void* par_ctx) {
  const int64_t cg = a->c / a->group, mg = a->m / a->group, in1 = a->in_shape[1], in2 = a->in_shape[2];
  const int64_t out2 = a->out_shape[2], k1 = a->kernel[1], k2 = a->kernel[2];
  const DirectShape d = direct_shape(a);
  int64_t* off = (int64_t*)scratch;
  float* tail = scratch + 2 * a->k;
  float* plane = tail + seamless_sgemm_indirect_tail_floats((size_t)a->k);
  float* wide = d.padded ? plane + cg * d.p1 * d.p2 + PAD_SLACK : plane;  /* the GEMM's output with the dropped columns */
  const int64_t ext[3] = {1, d.p1, d.p2};
  for (int64_t r = 0; r < a->k; r++)
    off[r] = r / (k1 * k2) * d.p1 * d.p2 + r / k2 % k1 * a->dilation[1] * d.p2 + r % k2 * a->dilation[2];
  for (int64_t n = 0; n < a->n; n++)
    for (int64_t g = 0; g < a->group; g++) {
      const float* xg = x + (n * a->c + g * cg) * in1 * in2;
      float* yg = y + (n * a->m + g * mg) * a->l;
      for (int64_t c = 0; d.padded && c < cg; c++) pad_plane(a, xg + c * in1 * in2, ext, plane + c * d.p1 * d.p2);
      const int drop = d.p2 != out2;
      seamless_sgemm_indirect((size_t)mg, (size_t)d.flat, (size_t)a->k, a->weights + g * mg * a->k,
                              a->packed_weights + g * mg * a->k, (size_t)a->k, d.padded ? plane : xg, off, tail,
                              a->bias ? a->bias + g * mg : NULL, drop ? wide : yg, (size_t)d.flat, par_fn, par_ctx);
      for (int64_t j = 0; drop && j < mg; j++)
        for (int64_t o1 = 0; o1 < a->out_shape[1]; o1++)
          memcpy(yg + j * a->l + o1 * out2, wide + j * d.flat + o1 * d.p2, (size_t)out2 * sizeof(float));
      finish_rows(a, y, z, (n * a->m + g * mg) * a->l, mg, a->l, a->l);
    }
}

/* The channels path (AVX-512): the output channels as the vectors' lanes, so no position is computed and dropped
 * (the direct path's GEMM columns run on past a row's end: 224 of them for a 13 x 13 plane's 169 outputs). A tile is
 * V panels of 16 channels (packed_rows: K x 16 each, k-major) times N positions along an output row, each position
 * tap r's float broadcast from the plane at off[r] (conv_direct's offsets); every output the sum over the taps in
 * order from 0, then the bias: the GEMM's sums, the same bits. Stored to out[p * 16 V + 16 v + lane]. */
#ifdef SPATIAL_AVX512
enum { CHANNEL_TILE_POSITIONS = 14 };  /* 2 x 14 sums, two weight vectors and a broadcast: 31 of the 32 registers */

#define DEFINE_CHANNEL_TILE(V, N, S)                                                                            \
  __attribute__((target("avx512f"))) static void channel_tile_##V##_##N##_##S(                                \
      const float* w, int64_t panel, const float* x, const int64_t* off, int64_t K, float* out) {              \
    __m512 acc[V][N];                                                                                           \
    for (int v = 0; v < V; v++)                                                                                 \
      for (int p = 0; p < N; p++) acc[v][p] = _mm512_setzero_ps();                                              \
    for (int64_t r = 0; r < K; r++) {                                                                           \
      const float* xr = x + off[r];                                                                             \
      const __m512 w0 = _mm512_loadu_ps(w + r * 16), w1 = V > 1 ? _mm512_loadu_ps(w + panel + r * 16) : w0;   \
      _Pragma("GCC unroll 16") for (int p = 0; p < N; p++) {                                                    \
        const __m512 b = _mm512_set1_ps(xr[p * S]);                                                             \
        acc[0][p] = _mm512_fmadd_ps(w0, b, acc[0][p]);                                                          \
        if (V > 1) acc[V - 1][p] = _mm512_fmadd_ps(w1, b, acc[V - 1][p]);                                       \
      }                                                                                                         \
    }                                                                                                           \
    for (int v = 0; v < V; v++)                                                                                 \
      for (int p = 0; p < N; p++) _mm512_storeu_ps(out + p * 16 * V + 16 * v, acc[v][p]);                       \
  }
#define DEFINE_CHANNEL_TILES(N) \
  DEFINE_CHANNEL_TILE(1, N, 1) DEFINE_CHANNEL_TILE(2, N, 1) DEFINE_CHANNEL_TILE(1, N, 2) DEFINE_CHANNEL_TILE(2, N, 2)
DEFINE_CHANNEL_TILES(1) DEFINE_CHANNEL_TILES(2) DEFINE_CHANNEL_TILES(3) DEFINE_CHANNEL_TILES(4)
DEFINE_CHANNEL_TILES(5) DEFINE_CHANNEL_TILES(6) DEFINE_CHANNEL_TILES(7) DEFINE_CHANNEL_TILES(8)
DEFINE_CHANNEL_TILES(9) DEFINE_CHANNEL_TILES(10) DEFINE_CHANNEL_TILES(11) DEFINE_CHANNEL_TILES(12)
DEFINE_CHANNEL_TILES(13) DEFINE_CHANNEL_TILES(14)

typedef void (*ChannelTileFn)(const float*, int64_t, const float*, const int64_t*, int64_t, float*);
#define CHANNEL_TILE_SET(N) \
  {{channel_tile_1_##N##_1, channel_tile_2_##N##_1}, {channel_tile_1_##N##_2, channel_tile_2_##N##_2}}
static const ChannelTileFn channel_tiles[CHANNEL_TILE_POSITIONS][2][2] = {  /* [positions - 1][stride - 1][V - 1] */
    CHANNEL_TILE_SET(1), CHANNEL_TILE_SET(2), CHANNEL_TILE_SET(3), CHANNEL_TILE_SET(4), CHANNEL_TILE_SET(5),
    CHANNEL_TILE_SET(6), CHANNEL_TILE_SET(7), CHANNEL_TILE_SET(8), CHANNEL_TILE_SET(9), CHANNEL_TILE_SET(10),
    CHANNEL_TILE_SET(11), CHANNEL_TILE_SET(12), CHANNEL_TILE_SET(13), CHANNEL_TILE_SET(14)};

typedef struct {
  const SeamlessConvArgs* a;
  const float *plane, *panels, *bias;  /* a group's: its (padded) planes, packed_rows, bias (or NULL) */
  const int64_t* off;
  float* y;                            /* the group's outputs, m/group x l */
  const float* z;                      /* the residual at y's place, or NULL */
  int64_t p2, blocks;                  /* the plane's row length; blocks of 32 channels */
  size_t tasks;
} ChannelJob;

/* The 16 x 16 floats of r transposed in place: r[j][i] = r[i][j] before */
SPATIAL_AVX512_INLINE void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    const __m512d t0 = _mm512_castps_pd(t[i]), t1 = _mm512_castps_pd(t[i + 1]);
    const __m512d t2 = _mm512_castps_pd(t[i + 2]), t3 = _mm512_castps_pd(t[i + 3]);
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
  }
  for (int i = 0; i < 4; i++) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 8; i++) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
  }
}

/* A tile's sums (out: n positions of 16 vecs channels) into y's rows of its `lanes` channels (row stride l), 16
 * channels transposed at a time: plus the bias, the residual z, then the Relu, as finish_rows would (the same
 * values) */
__attribute__((target("avx512f"))) static void channel_store(const ChannelJob* job, const float* out, int64_t vecs,
                                                              int64_t lanes, int64_t n, int64_t m0, int64_t at) {
  const int64_t l = job->a->l;
  const __mmask16 row = (__mmask16)((1u << n) - 1);
  for (int64_t v = 0; v < vecs; v++) {
    __m512 r[16];
    for (int64_t p = 0; p < 16; p++) r[p] = p < n ? _mm512_loadu_ps(out + p * 16 * vecs + 16 * v) : _mm512_setzero_ps();
    transpose16(r);
    for (int64_t j = 0; j < 16 && 16 * v + j < lanes; j++) {
      const int64_t m = m0 + 16 * v + j, place = m * l + at;
      __m512 value = r[j];
      if (job->bias) value = _mm512_add_ps(value, _mm512_set1_ps(job->bias[m]));
      if (job->z) value = _mm512_add_ps(value, _mm512_maskz_loadu_ps(row, job->z + place));
      if (job->a->relu)  /* seamless_relu_f32: x where x > 0 or NaN, else 0 */
        value = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(value, _mm512_setzero_ps(), _CMP_NLE_UQ), value);
      _mm512_mask_storeu_ps(job->y + place, row, value);
    }
  }
}

/* A task's (block of 32 channels, output row) pairs, block-major: consecutive pairs read the same weights. A row
 * is cut into near-equal runs of at most CHANNEL_TILE_POSITIONS. */
static void channel_task(void* user, size_t task) {
  const ChannelJob* job = user;
  const SeamlessConvArgs* a = job->a;
  const int64_t mg = a->m / a->group, out1 = a->out_shape[1], out2 = a->out_shape[2], K = a->k;
  const int64_t runs = (out2 + CHANNEL_TILE_POSITIONS - 1) / CHANNEL_TILE_POSITIONS;
  float out[CHANNEL_TILE_POSITIONS * 32];
  size_t u0, u1;
  seamless_task_range((size_t)(job->blocks * out1), job->tasks, task, &u0, &u1);
  for (size_t u = u0; u < u1; u++) {
    const int64_t block = (int64_t)u / out1, o1 = (int64_t)u % out1, m0 = block * 32;
    const int64_t vecs = mg - m0 > 16 ? 2 : 1, lanes = mg - m0 < 32 ? mg - m0 : 32;
    const float* w = job->panels + block * 2 * K * 16;
    for (int64_t run = 0, o2 = 0; run < runs; run++) {
      const int64_t n = (out2 - o2) / (runs - run);  /* the rest shared evenly by the runs left */
      channel_tiles[n - 1][a->stride[2] - 1][vecs - 1](w, K * 16, job->plane + o1 * a->stride[1] * job->p2 +
                                                           o2 * a->stride[2], job->off, K, out);
      channel_store(job, out, vecs, lanes, n, m0, o1 * out2 + o2);
      o2 += n;
    }
  }
}
#endif

/* Per image and group: the planes padded into the scratch where the convolution pads (as conv_direct's), the
 * channels path's tiles over them */
static void conv_channels(const SeamlessConvArgs* a, const float* x, const float* z, float* y, float* scratch,
                          void* par_fn, void* par_ctx) {
#ifdef SPATIAL_AVX512
  const int64_t cg = a->c / a->group, mg = a->m / a->group, in1 = a->in_shape[1], in2 = a->in_shape[2];
  const int64_t k1 = a->kernel[1], k2 = a->kernel[2];
  const ChannelPlane d = channel_plane(a);
  const size_t packed_group = seamless_sgemm_packed_size((size_t)a->k, (size_t)mg);
  int64_t* off = (int64_t*)scratch;
  float* plane = scratch + 2 * a->k;
  const int64_t ext[3] = {1, d.p1, d.p2};
  for (int64_t r = 0; r < a->k; r++)
    off[r] = r / (k1 * k2) * d.p1 * d.p2 + r / k2 % k1 * a->dilation[1] * d.p2 + r % k2 * a->dilation[2];
  ChannelJob job = {a, NULL, NULL, NULL, off, NULL, NULL, d.p2, (mg + 31) / 32, 0};
  job.tasks = seamless_task_count((size_t)(mg * a->l * a->k), 1 << 18);
  if (job.tasks > (size_t)(job.blocks * a->out_shape[1])) job.tasks = (size_t)(job.blocks * a->out_shape[1]);
  for (int64_t n = 0; n < a->n; n++)
    for (int64_t g = 0; g < a->group; g++) {
      const float* xg = x + (n * a->c + g * cg) * in1 * in2;
      for (int64_t c = 0; d.padded && c < cg; c++) pad_plane(a, xg + c * in1 * in2, ext, plane + c * d.p1 * d.p2);
      job.plane = d.padded ? plane : xg;
      job.panels = a->packed_rows + g * packed_group;
      job.bias = a->bias ? a->bias + g * mg : NULL;
      job.y = y + (n * a->m + g * mg) * a->l;
      job.z = z ? z + (n * a->m + g * mg) * a->l : NULL;
      seamless_run_tasks(par_fn, par_ctx, job.tasks, channel_task, &job);
    }
#else
  (void)a, (void)x, (void)z, (void)y, (void)scratch, (void)par_fn, (void)par_ctx;
#endif
}

/* The rows path, per image and group: product[l, m/group] = cols^T . W^T (+ the bias per column), cols^T made by
 * im2col's rows transposed (x's own rows for a 1x1 stride-1 convolution), then transposed into y. Each output the
 * same sum in the same order as the columns path, so the same bits. */
static void conv_rows(const SeamlessConvArgs* a, const float* x, const float* z, float* y, float* scratch,
                      void* par_fn, void* par_ctx) {
  const int64_t cg = a->c / a->group, mg = a->m / a->group, plane = a->in_shape[0] * a->in_shape[1] * a->in_shape[2];
  const size_t packed_group = seamless_sgemm_packed_size((size_t)a->k, (size_t)mg);
  float *a_rows = scratch, *product = a_rows + a->l * a->k, *row = product + a->l * mg;
  for (int64_t n = 0; n < a->n; n++)
    for (int64_t g = 0; g < a->group; g++) {
      ColsJob job = {a, x + (n * a->c + g * cg) * plane, x + a->n * a->c * plane, 0, a->l, row, NULL,
                     seamless_task_count((size_t)(a->k * a->l), 1 << 14), a_rows};
      if (job.tasks > CONV_TASKS) job.tasks = CONV_TASKS;
      seamless_run_tasks(par_fn, par_ctx, job.tasks, cols_task, &job);
      seamless_sgemm((size_t)a->l, (size_t)mg, (size_t)a->k, a_rows, NULL, (size_t)a->k,
                     a->packed_rows + g * packed_group, NULL, a->bias ? a->bias + g * mg : NULL, NULL, product,
                     (size_t)mg, par_fn, par_ctx);
      float* yg = y + (n * a->m + g * mg) * a->l;
      for (int64_t j0 = 0; j0 < a->l; j0 += 16)  /* 16 x 16 blocks: both sides' lines in cache */
        for (int64_t m0 = 0; m0 < mg; m0 += 16)
          for (int64_t m = m0; m < m0 + 16 && m < mg; m++)
            for (int64_t j = j0; j < j0 + 16 && j < a->l; j++) yg[m * a->l + j] = product[j * mg + m];
      finish_rows(a, y, z, (n * a->m + g * mg) * a->l, mg, a->l, a->l);
    }
}

/* Per image and group y[m/group, l] = W[m/group, k] . cols[k, l] (+ the bias per row): the output straight in
 * x's layout, cols packed as the GEMM's B (im2col writes it so; a 1x1 stride-1 convolution packs x itself), so the
 * GEMM takes its packed path (its widest tiles). */
void seamless_conv_f32(const SeamlessConvArgs* a, const float* x, const float* z, float* y, float* scratch,
                       void* par_fn, void* par_ctx) {
  const int64_t cg = a->c / a->group, mg = a->m / a->group, plane = a->in_shape[0] * a->in_shape[1] * a->in_shape[2];
  if (depthwise(a)) {
    DepthwiseJob job = {a, x, y, depthwise_floats(a) ? scratch : NULL, depthwise_tasks(a)};
    seamless_run_tasks(par_fn, par_ctx, job.tasks, depthwise_task, &job);
    finish_rows(a, y, z, 0, a->n * a->m, a->l, a->l);
    return;
  }
  if (use_channels(a)) {
    conv_channels(a, x, z, y, scratch, par_fn, par_ctx);
    return;
  }
  if (use_rows(a)) {
    conv_rows(a, x, z, y, scratch, par_fn, par_ctx);
    return;
  }
  if (use_direct(a)) {
    conv_direct(a, x, z, y, scratch, par_fn, par_ctx);
    return;
  }
  const int64_t block = conv_block_columns(a);
  float* row = scratch + seamless_sgemm_packed_size((size_t)a->k, (size_t)block);
  for (int64_t n = 0; n < a->n; n++)
    for (int64_t g = 0; g < a->group; g++) {
      const float* xg = x + (n * a->c + g * cg) * plane;
      float* yg = y + (n * a->m + g * mg) * a->l;
      for (int64_t j0 = 0; j0 < a->l; j0 += block) {
        const int64_t cols = a->l - j0 < block ? a->l - j0 : block;
        ColsJob job = {a, xg, x + a->n * a->c * plane, j0, cols, row, scratch,
                       seamless_task_count((size_t)(a->k * cols), 1 << 14), NULL};
        if (job.tasks > CONV_TASKS) job.tasks = CONV_TASKS;
        seamless_run_tasks(par_fn, par_ctx, job.tasks, cols_task, &job);
        seamless_sgemm((size_t)mg, (size_t)cols, (size_t)a->k, a->weights + g * mg * a->k,
                       a->packed_weights + g * mg * a->k, (size_t)a->k, scratch, NULL, NULL,
                       a->bias ? a->bias + g * mg : NULL, yg + j0, (size_t)a->l, par_fn, par_ctx);
        finish_rows(a, y, z, (n * a->m + g * mg) * a->l + j0, mg, cols, a->l);
      }
    }
}

/* ---- MaxPool / AveragePool: the CUDA EP's pool (native/cuda/spatial.cu) on the host, a task per range of planes */

/* MLAS's two maxima: maxps keeps the running value r only where it is greater (a NaN either side gives v);
 * std::max takes v only where it is greater (a NaN v is dropped, a NaN r stays). */
static inline float pool_maxps(float r, float v) { return r > v ? r : v; }
static inline float pool_std_max(float r, float v) { return r < v ? v : r; }

/* MLAS's vector kernel for output o: per kernel column, the kernel's rows (and planes) of that input column folded
 * into one value (whole vectors of 4 columns by maxps, the rest by std::max; 2-D from the first row, 3-D from the
 * lowest float), the lowest float outside the input; then those folded by maxps. Rows follow MLAS's unsigned
 * arithmetic: a window starting past the end reads from row 0. */
static float pool_vector_max(const SeamlessPoolArgs* a, const float* xp, const int64_t o[3], int from_lowest) {
  int64_t lo[2], hi[2];
  for (int d = 0; d < 2; d++) {
    const int64_t s = o[d] * a->stride[d] - a->pad_begin[d];
    const uint64_t end = (uint64_t)(s + a->kernel[d]);
    lo[d] = (uint64_t)s >= (uint64_t)a->in[d] ? 0 : s;
    hi[d] = end < (uint64_t)a->in[d] ? (int64_t)end : a->in[d];
  }
  const int64_t width = a->in[2], vector_cols = width / 4 * 4;
  float r = 0.0f;
  for (int64_t t = 0; t < a->kernel[2]; t++) {
    const int64_t c = o[2] * a->stride[2] + t - a->pad_begin[2];
    float f = -FLT_MAX;
    if (c >= 0 && c < width) {
      int first = !from_lowest;
      if (first) f = c < vector_cols ? NAN : -FLT_MAX;  /* no rows at all (pads at least the kernel) */
      for (int64_t r0 = lo[0]; r0 < hi[0]; r0++)
        for (int64_t r1 = lo[1]; r1 < hi[1]; r1++) {
          const float v = xp[(r0 * a->in[1] + r1) * width + c];
          f = first ? v : c < vector_cols ? pool_maxps(f, v) : pool_std_max(f, v);
          first = 0;
        }
    }
    r = t ? pool_maxps(r, f) : f;
  }
  return r;
}

/* Output element o of one plane: taps outside the input never contribute to the value; ceil_mode's taps past the
 * end pads never count in an average's divisor (as ORT). */
static float pool_one(const SeamlessPoolArgs* a, const float* xp, const int64_t o[3]) {
  const int mode = a->mode;
  if (mode == SEAMLESS_POOL_MAX_VECTOR_2D || mode == SEAMLESS_POOL_MAX_VECTOR_3D)
    return pool_vector_max(a, xp, o, mode == SEAMLESS_POOL_MAX_VECTOR_3D);
  /* MLAS's scalar loop starts its max at the lowest finite value; stock's own at the first element inside */
  float best = mode == SEAMLESS_POOL_MAX_LOOP ? -INFINITY : -FLT_MAX, sum = 0.0f;
  int64_t inside = 0, counted = 0, start[3];
  for (int d = 0; d < 3; d++) start[d] = o[d] * a->stride[d] - a->pad_begin[d];
  for (int64_t k0 = 0; k0 < a->kernel[0]; k0++) {
    const int64_t c0 = start[0] + k0 * a->dilation[0];
    for (int64_t k1 = 0; k1 < a->kernel[1]; k1++) {
      const int64_t c1 = start[1] + k1 * a->dilation[1];
      for (int64_t k2 = 0; k2 < a->kernel[2]; k2++) {
        const int64_t c2 = start[2] + k2 * a->dilation[2];
        /* taps start at or after -pad_begin, so only the end of the padded extent needs a test */
        counted += c0 < a->in[0] + a->pad_end[0] && c1 < a->in[1] + a->pad_end[1] && c2 < a->in[2] + a->pad_end[2];
        if (c0 < 0 || c0 >= a->in[0] || c1 < 0 || c1 >= a->in[1] || c2 < 0 || c2 >= a->in[2]) continue;
        const float v = xp[(c0 * a->in[1] + c1) * a->in[2] + c2];
        best = inside || mode != SEAMLESS_POOL_MAX_LOOP ? pool_std_max(best, v) : v;
        sum += v;
        inside++;
      }
    }
  }
  if (mode == SEAMLESS_POOL_MAX_SCALAR || mode == SEAMLESS_POOL_MAX_LOOP) return best;
  return inside ? sum / (float)(mode == SEAMLESS_POOL_AVERAGE_WITH_PADS ? counted : inside) : 0.0f;
}

/* MLAS's global kernel over a plane of n: element j joins lane j % 4 by maxps from the lowest float, the lanes
 * combined 0 with 2, 1 with 3, then the two (maxps); the last n % 4 by std::max. */
static float pool_global_max(const float* xp, int64_t n) {
  const int64_t full = n / 4 * 4;
  float lane[4] = {-FLT_MAX, -FLT_MAX, -FLT_MAX, -FLT_MAX};
  for (int64_t j = 0; j < full; j += 4)
    for (int l = 0; l < 4; l++) lane[l] = pool_maxps(lane[l], xp[j + l]);
  float r = pool_maxps(pool_maxps(lane[0], lane[2]), pool_maxps(lane[1], lane[3]));
  for (int64_t j = full; j < n; j++) r = pool_std_max(r, xp[j]);
  return r;
}

typedef struct {
  const SeamlessPoolArgs* a;
  const float* x;
  float* y;
  size_t tasks;
} PoolJob;

/* A window wholly inside the input: every path's maximum is the plain one where the plane holds no NaN or -inf, so no
 * tap needs a bounds test */
static float pool_inside(const SeamlessPoolArgs* a, const float* xp, const int64_t start[3]) {
  const float* first = xp + (start[0] * a->in[1] + start[1]) * a->in[2] + start[2];
  float best = *first;
  for (int64_t k0 = 0; k0 < a->kernel[0]; k0++)
    for (int64_t k1 = 0; k1 < a->kernel[1]; k1++) {
      const float* row = first + (k0 * a->dilation[0] * a->in[1] + k1 * a->dilation[1]) * a->in[2];
      for (int64_t k2 = 0; k2 < a->kernel[2]; k2++) {
        const float v = row[k2 * a->dilation[2]];
        best = v > best ? v : best;
      }
    }
  return best;
}

/* The taps of a window starting at `start` along dimension d: those inside the input, [*lo, *hi), and those before
 * the padded extent's end (the count an average with the pads divides by; ceil_mode's taps past it never count). */
static void window_taps(const SeamlessPoolArgs* a, int d, int64_t start, int64_t* lo, int64_t* hi, int64_t* padded) {
  int64_t unused;
  tap_range(start, a->dilation[d], a->in[d], a->kernel[d], lo, hi);
  tap_range(start, a->dilation[d], a->in[d] + a->pad_end[d], a->kernel[d], &unused, padded);
}

/* Which of NaN or -inf (POOL_NAN_OR_NEG_INF) and -0 (POOL_NEG_ZERO) a plane holds. None: any order of a window's taps
 * gives its one maximum (pool_max_rows, max_plane_avx512); no NaN or -inf: a window wholly inside has the plain
 * maximum (pool_inside). */
enum { POOL_NAN_OR_NEG_INF = 1, POOL_NEG_ZERO = 2 };

#ifdef SPATIAL_AVX512
/* plane_specials 16 floats a step into two masks (the portable loop below, its flags as integers, took ~3x as long) */
__attribute__((target("avx512f"))) static unsigned plane_specials_avx512(const float* x, int64_t n) {
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  const __m512i neg_zero = _mm512_set1_epi32((int)0x80000000u);
  __mmask16 nan_or_neg_inf = 0, zero = 0;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 in = (__mmask16)(n - i >= 16 ? 0xffffu : (1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(in, x + i);  /* lanes past n: +0, no special */
    nan_or_neg_inf |= _mm512_cmp_ps_mask(v, neg_inf, _CMP_NGT_UQ);  /* not above -inf: -inf or NaN */
    zero |= _mm512_cmpeq_epi32_mask(_mm512_castps_si512(v), neg_zero);
  }
  return (nan_or_neg_inf ? POOL_NAN_OR_NEG_INF : 0) | (zero ? POOL_NEG_ZERO : 0);
}

/* Whether the AVX-512 plane loops (max_plane_avx512, average_plane_avx512) take a pool: 2-D, stride 1 or 2 along the
 * row, a window at most 17 floats wide along it and narrower than the row (so a window reaching into the row has a
 * tap inside it), rows short enough for 32-bit lane positions */
static int plane_fits(const SeamlessPoolArgs* a) {
  const int64_t extent = (a->kernel[2] - 1) * a->dilation[2];
  return spatial_avx512() && a->kernel[0] == 1 && a->in[0] == 1 && a->out[0] == 1 && a->pad_begin[0] == 0 &&
         (a->stride[2] == 1 || a->stride[2] == 2) &&
         extent <= 16 && extent < a->in[2] && a->in[2] < (1 << 28) && a->pad_begin[2] < (1 << 28) &&
         a->pad_end[2] < (1 << 28);
}

/* The outputs along a row whose window reaches into it, [*lo, *hi): each has a tap inside (plane_fits) */
static void reaching_columns(const SeamlessPoolArgs* a, int64_t* lo, int64_t* hi) {
  const int64_t st2 = a->stride[2], pad2 = a->pad_begin[2], last = (a->kernel[2] - 1) * a->dilation[2];
  *lo = 0, *hi = a->out[2];
  while (*lo < *hi && *lo * st2 - pad2 + last < 0) ++*lo;
  while (*hi > *lo && (*hi - 1) * st2 - pad2 >= a->in[2]) --*hi;
}

/* Output row o[1]'s outputs outside [c_lo, c_hi), or all of them where no window row lies inside: pool_one's */
static void row_edges(const SeamlessPoolArgs* a, const float* xp, float* yp, int64_t o[3], int64_t c_lo, int64_t c_hi,
                      int rows_inside) {
  for (o[2] = 0; o[2] < a->out[2]; o[2]++) {
    if (o[2] == c_lo && rows_inside) o[2] = c_hi;  /* those in between: the plane loop's */
    if (o[2] < a->out[2]) yp[o[2]] = pool_one(a, xp, o);
  }
}

/* What average_plane_avx512 derives from a pool's geometry alone, made once a task rather than once a plane (a 7 x 7
 * plane's rows took four integer divisions each): the outputs whose window reaches into a row, [c_lo, c_hi); each
 * output row's window rows inside, [lo1, hi1), and pad1 of them before the padded extent's end (window_taps); the
 * steps along a row. (MaxPool's plane loop tests a row's edges without a division; kept there, a 112 x 112 pool took
 * 4 % longer.) */
enum { PLANE_ROWS = 64 };    /* output rows whose window rows are kept (more: found row by row) */
enum { AVERAGE_STEPS = 8 };  /* AveragePool's steps kept (rows of more than 128 outputs: made row by row) */

typedef struct {
  __m512i columns;                    /* per lane: its taps along the row that count */
  __mmask16 in[3];                    /* stride 2: step_lanes' */
  __mmask16 tap_in[ROW_TAPS];         /* stride 1: per tap along the row, the lanes whose tap lies inside it */
} AverageStep;

typedef struct {
  int64_t c_lo, c_hi;
  int64_t lo1[PLANE_ROWS], hi1[PLANE_ROWS], pad1[PLANE_ROWS];
  int steps_kept;  /* the row's steps fit AVERAGE_STEPS: in `steps` */
  AverageStep steps[AVERAGE_STEPS];
} PlaneGeometry;

/* Output row o1's window rows inside (and before the padded end), from g where it keeps them */
static inline void plane_row(const SeamlessPoolArgs* a, const PlaneGeometry* g, int64_t o1, int64_t* lo1,
                             int64_t* hi1, int64_t* pad1) {
  if (o1 < PLANE_ROWS) {
    *lo1 = g->lo1[o1], *hi1 = g->hi1[o1], *pad1 = g->pad1[o1];
    return;
  }
  window_taps(a, 1, o1 * a->stride[1] - a->pad_begin[1], lo1, hi1, pad1);
}

/* MaxPool of a 2-D plane without specials (plane_fits): a step's floats folded down the window's rows inside the
 * input first, each masked to the row (-inf outside it: never a maximum where a tap lies inside), then the taps
 * picked from them. Nothing outside the taps inside is read, nothing outside the row's outputs written; an output
 * whose window has no tap inside keeps pool_one. One MaxPool, 1 thread (ours / stock, the row fold -> this): 3x3
 * stride 2 of [1, 256, 27, 27] 3.3-3.6x -> 1.4x, 3x3 stride 1 pads 1 of [1, 480, 14, 14] 3.6-3.8x -> 1.9x
 * (docs/benchmarks/cpu.md, "MaxPool (and AveragePool at stride 2) on AVX-512"). */
__attribute__((target("avx512f"))) static void max_plane_avx512(const SeamlessPoolArgs* a, const float* xp,
                                                                 float* yp) {
  const int64_t in1 = a->in[1], width = a->in[2], out2 = a->out[2], st2 = a->stride[2];
  const int64_t k1s = a->kernel[1], d1 = a->dilation[1], k2s = a->kernel[2], d2 = a->dilation[2];
  int64_t c_lo, c_hi, o[3] = {0, 0, 0};
  reaching_columns(a, &c_lo, &c_hi);
  const __m512i pick = lane_picks(st2);
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  for (o[1] = 0; o[1] < a->out[1]; o[1]++, yp += out2) {
    int64_t lo1 = 0, hi1 = k1s;  /* the window's rows inside */
    const int64_t s1 = o[1] * a->stride[1] - a->pad_begin[1];
    if (s1 < 0 || s1 + (k1s - 1) * d1 >= in1) tap_range(s1, d1, in1, k1s, &lo1, &hi1);
    row_edges(a, xp, yp, o, c_lo, c_hi, lo1 < hi1);
    if (lo1 >= hi1) continue;
    for (int64_t i = c_lo; i < c_hi; i += 16) {
      const int64_t n = c_hi - i < 16 ? c_hi - i : 16, at = i * st2 - a->pad_begin[2];
      __mmask16 in[3];
      step_lanes(at, st2 * (n - 1) + (k2s - 1) * d2 + 1, width, in);
      __m512 va = neg_inf, vb = neg_inf, vc = neg_inf;
      for (int64_t k1 = lo1; k1 < hi1; k1++) {
        const float* row = xp + (s1 + k1 * d1) * width + at;
        va = _mm512_max_ps(va, _mm512_mask_loadu_ps(neg_inf, in[0], row));
        if (in[1]) vb = _mm512_max_ps(vb, _mm512_mask_loadu_ps(neg_inf, in[1], row + 16));
        if (in[2]) vc = _mm512_max_ps(vc, _mm512_mask_loadu_ps(neg_inf, in[2], row + 32));
      }
      __m512 m = neg_inf;
      for (int64_t k2 = 0; k2 < k2s; k2++)
        m = _mm512_max_ps(m, pick_tap(va, vb, vc, pick, k2 * d2));
      _mm512_mask_storeu_ps(yp + i, (__mmask16)((1u << n) - 1), m);
    }
  }
}

/* A pool of up to 16 small 2-D planes at once, the planes as the lanes (stock's NCHWc pool keeps 16 channels a
 * vector): the planes transposed into a position-major buffer, each output then pool_one's value over its taps inside
 * for all the planes at once (AveragePool: the sum in pool_one's order divided by pool_one's count; MaxPool, of planes
 * without specials and windows each with a tap inside: their maximum, as every path's), transposed back.
 * `planes`: 1-16 consecutive planes from x and y. */
enum { SMALL_PLANE = 256 };  /* the most floats an input or output plane the planes path takes has */

static int small_planes_fit(const SeamlessPoolArgs* a) {
  if (!spatial_avx512() || a->kernel[0] != 1 || a->in[0] != 1 || a->out[0] != 1 || a->pad_begin[0] != 0 ||
      a->in[1] * a->in[2] > SMALL_PLANE || a->out[1] * a->out[2] > SMALL_PLANE)
    return 0;
  if (a->mode == SEAMLESS_POOL_AVERAGE || a->mode == SEAMLESS_POOL_AVERAGE_WITH_PADS) return 1;
  for (int d = 1; d < 3; d++)  /* MaxPool: every window with a tap inside (none keeps its mode's own answer) */
    for (int64_t o = 0; o < a->out[d]; o++) {
      int64_t lo, hi;
      tap_range(o * a->stride[d] - a->pad_begin[d], a->dilation[d], a->in[d], a->kernel[d], &lo, &hi);
      if (lo >= hi) return 0;
    }
  return a->mode != SEAMLESS_POOL_MAX_GLOBAL;
}

/* n positions (at most SMALL_PLANE) of `planes` planes `stride` floats apart, to or from a [position][16 planes]
 * buffer, 16 positions at a time through transpose16 */
__attribute__((target("avx512f"))) static void planes_to_lanes(const float* x, int64_t stride, int64_t planes,
                                                                int64_t n, float* lanes) {
  for (int64_t b = 0; b < n; b += 16) {
    const __mmask16 m = (__mmask16)(n - b >= 16 ? 0xffffu : (1u << (n - b)) - 1);
    __m512 r[16];
    for (int64_t i = 0; i < 16; i++)
      r[i] = i < planes ? _mm512_maskz_loadu_ps(m, x + i * stride + b) : _mm512_setzero_ps();
    transpose16(r);
    for (int64_t j = 0; j < 16 && b + j < n; j++) _mm512_storeu_ps(lanes + (b + j) * 16, r[j]);
  }
}

__attribute__((target("avx512f"))) static void lanes_to_planes(const float* lanes, int64_t n, int64_t planes,
                                                                float* y, int64_t stride) {
  for (int64_t b = 0; b < n; b += 16) {
    const __mmask16 m = (__mmask16)(n - b >= 16 ? 0xffffu : (1u << (n - b)) - 1);
    __m512 r[16];
    for (int64_t j = 0; j < 16; j++) r[j] = b + j < n ? _mm512_loadu_ps(lanes + (b + j) * 16) : _mm512_setzero_ps();
    transpose16(r);
    for (int64_t i = 0; i < planes; i++) _mm512_mask_storeu_ps(y + i * stride + b, m, r[i]);
  }
}

/* pool_planes_avx512's buffer: the inputs' lanes, then the outputs' 1 KB past their end (not a multiple of 4 KB
 * apart: loads of one and stores of the other would alias in the store buffer); matmul.c's per-thread buffer, not
 * the stack (33 KB) */
enum { PLANES_LANES = 2 * SMALL_PLANE * 16 + 256 };

__attribute__((target("avx512f"))) static void pool_planes_avx512(const SeamlessPoolArgs* a, float* lanes,
                                                                   const float* x, float* y, int64_t planes) {
  const int64_t in1 = a->in[1], in2 = a->in[2], out1 = a->out[1], out2 = a->out[2];
  const int with_pads = a->mode == SEAMLESS_POOL_AVERAGE_WITH_PADS;
  const int average = with_pads || a->mode == SEAMLESS_POOL_AVERAGE;
  float *in_lanes = lanes, *out_lanes = lanes + SMALL_PLANE * 16 + 256;
  int64_t lo2s[SMALL_PLANE], hi2s[SMALL_PLANE], pad2s[SMALL_PLANE];  /* per output column: window_taps, once */
  for (int64_t o2 = 0; o2 < out2; o2++)
    window_taps(a, 2, o2 * a->stride[2] - a->pad_begin[2], &lo2s[o2], &hi2s[o2], &pad2s[o2]);
  planes_to_lanes(x, in1 * in2, planes, in1 * in2, in_lanes);
  for (int64_t o1 = 0; o1 < out1; o1++) {
    int64_t lo1, hi1, pad1;
    const int64_t s1 = o1 * a->stride[1] - a->pad_begin[1];
    window_taps(a, 1, s1, &lo1, &hi1, &pad1);
    for (int64_t o2 = 0; o2 < out2; o2++) {
      const int64_t lo2 = lo2s[o2], hi2 = hi2s[o2], pad2 = pad2s[o2], s2 = o2 * a->stride[2] - a->pad_begin[2];
      float* out = out_lanes + (o1 * out2 + o2) * 16;
      if (!average) {
        __m512 best = _mm512_set1_ps(-INFINITY);
        for (int64_t k1 = lo1; k1 < hi1; k1++) {
          const float* row = in_lanes + (s1 + k1 * a->dilation[1]) * in2 * 16;
          for (int64_t k2 = lo2; k2 < hi2; k2++)
            best = _mm512_max_ps(best, _mm512_load_ps(row + (s2 + k2 * a->dilation[2]) * 16));
        }
        _mm512_store_ps(out, best);
        continue;
      }
      __m512 sum = _mm512_setzero_ps();
      for (int64_t k1 = lo1; k1 < hi1; k1++) {
        const float* row = in_lanes + (s1 + k1 * a->dilation[1]) * in2 * 16;
        for (int64_t k2 = lo2; k2 < hi2; k2++)
          sum = _mm512_add_ps(sum, _mm512_load_ps(row + (s2 + k2 * a->dilation[2]) * 16));
      }
      const int64_t count = with_pads ? pad1 * pad2 : (hi1 - lo1) * (hi2 - lo2);
      _mm512_store_ps(out, lo1 < hi1 && lo2 < hi2 ? _mm512_div_ps(sum, _mm512_set1_ps((float)count))
                                                  : _mm512_setzero_ps());
    }
  }
  lanes_to_planes(out_lanes, out1 * out2, planes, y, out1 * out2);
}

/* A step of average_plane_avx512 (16 outputs of a row from output i): the same in every row */
SPATIAL_AVX512_INLINE void average_step(const SeamlessPoolArgs* a, int64_t i, int64_t c_hi, AverageStep* s) {
  const int64_t width = a->in[2], st2 = a->stride[2], k2s = a->kernel[2], d2 = a->dilation[2];
  const int64_t n = c_hi - i < 16 ? c_hi - i : 16, at = i * st2 - a->pad_begin[2];
  const int with_pads = a->mode == SEAMLESS_POOL_AVERAGE_WITH_PADS;
  const __m512i pick = lane_picks(st2), one = _mm512_set1_epi32(1);
  const __m512i counted_end = _mm512_set1_epi32((int)(with_pads ? width + a->pad_end[2] : width));
  step_lanes(at, st2 * (n - 1) + (k2s - 1) * d2 + 1, width, s->in);
  s->columns = _mm512_setzero_si512();
  for (int64_t k2 = 0; k2 < k2s; k2++) {
    const __m512i pos = _mm512_add_epi32(_mm512_set1_epi32((int)(at + k2 * d2)), pick);
    const __mmask16 counts = _mm512_cmplt_epi32_mask(pos, counted_end) &
                             (with_pads ? 0xffffu : _mm512_cmpge_epi32_mask(pos, _mm512_setzero_si512()));
    s->columns = _mm512_mask_add_epi32(s->columns, counts, s->columns, one);
    s->tap_in[k2] = _mm512_cmpge_epi32_mask(pos, _mm512_setzero_si512()) &
                    _mm512_cmplt_epi32_mask(pos, _mm512_set1_epi32((int)width)) & (__mmask16)((1u << n) - 1);
  }
}

__attribute__((target("avx512f"))) static void plane_geometry(const SeamlessPoolArgs* a, PlaneGeometry* g) {
  reaching_columns(a, &g->c_lo, &g->c_hi);
  for (int64_t o1 = 0; o1 < a->out[1] && o1 < PLANE_ROWS; o1++)
    window_taps(a, 1, o1 * a->stride[1] - a->pad_begin[1], &g->lo1[o1], &g->hi1[o1], &g->pad1[o1]);
  g->steps_kept = g->c_hi - g->c_lo <= 16 * AVERAGE_STEPS;
  for (int64_t i = g->c_lo; g->steps_kept && i < g->c_hi; i += 16)
    average_step(a, i, g->c_hi, &g->steps[(i - g->c_lo) / 16]);
}

/* AveragePool of a 2-D plane (plane_fits), pool_one's values bit for bit: each output's taps summed from 0 in
 * pool_one's order (rows, then along the row; a tap outside the row adds a 0, which changes no sum), divided by
 * pool_one's count (the taps inside, or before the padded extent's end), a step's lanes at once. At stride 1 each
 * tap's 16 floats are one load masked to the row, at stride 2 picked from the step's floats. */
__attribute__((target("avx512f"))) static void average_plane_avx512(const SeamlessPoolArgs* a,
                                                                     const PlaneGeometry* g, const float* xp,
                                                                     float* yp) {
  const int64_t width = a->in[2], out2 = a->out[2], st2 = a->stride[2];
  const int64_t d1 = a->dilation[1], k2s = a->kernel[2], d2 = a->dilation[2];
  const int with_pads = a->mode == SEAMLESS_POOL_AVERAGE_WITH_PADS;
  const int64_t c_lo = g->c_lo, c_hi = g->c_hi;
  int64_t o[3] = {0, 0, 0};
  const __m512i pick = lane_picks(st2);
  AverageStep local;
  for (o[1] = 0; o[1] < a->out[1]; o[1]++, yp += out2) {
    int64_t lo1, hi1, pad1;
    plane_row(a, g, o[1], &lo1, &hi1, &pad1);
    const int64_t s1 = o[1] * a->stride[1] - a->pad_begin[1];
    row_edges(a, xp, yp, o, c_lo, c_hi, lo1 < hi1);
    if (lo1 >= hi1) continue;
    const __m512i rows = _mm512_set1_epi32((int)(with_pads ? pad1 : hi1 - lo1));
    for (int64_t i = c_lo; i < c_hi; i += 16) {
      const int64_t n = c_hi - i < 16 ? c_hi - i : 16, at = i * st2 - a->pad_begin[2];
      const AverageStep* step = g->steps_kept ? &g->steps[(i - c_lo) / 16]
                                              : (average_step(a, i, c_hi, &local), &local);
      __m512 sum = _mm512_setzero_ps();
      for (int64_t k1 = lo1; k1 < hi1; k1++) {
        const float* row = xp + (s1 + k1 * d1) * width + at;
        if (st2 == 1) {
          for (int64_t k2 = 0; k2 < k2s; k2++)
            sum = _mm512_add_ps(sum, _mm512_maskz_loadu_ps(step->tap_in[k2], row + k2 * d2));
        } else {
          const __m512 va = _mm512_maskz_loadu_ps(step->in[0], row), vb = _mm512_maskz_loadu_ps(step->in[1], row + 16);
          const __m512 vc = _mm512_maskz_loadu_ps(step->in[2], row + 32);
          for (int64_t k2 = 0; k2 < k2s; k2++)
            sum = _mm512_add_ps(sum, pick_tap(va, vb, vc, pick, k2 * d2));
        }
      }
      const __m512 count = _mm512_cvtepi32_ps(_mm512_mullo_epi32(rows, step->columns));
      _mm512_mask_storeu_ps(yp + i, (__mmask16)((1u << n) - 1), _mm512_div_ps(sum, count));
    }
  }
}
#endif

void seamless_spatial_set_isa(int level) {
#ifdef SPATIAL_AVX512
  spatial_isa = level;
#else
  (void)level;
#endif
}

SEAMLESS_SIMD static unsigned plane_specials(const float* x, int64_t n) {
#ifdef SPATIAL_AVX512
  if (spatial_avx512()) return plane_specials_avx512(x, n);
#endif
  uint32_t nan_or_neg_inf = 0, neg_zero = 0;
  for (int64_t i = 0; i < n; i++) {
    uint32_t v;
    memcpy(&v, x + i, sizeof v);
    nan_or_neg_inf |= ((v & 0x7fffffffu) > 0x7f800000u) | (v == 0xff800000u);
    neg_zero |= v == 0x80000000u;
  }
  return (nan_or_neg_inf ? POOL_NAN_OR_NEG_INF : 0) | (neg_zero ? POOL_NEG_ZERO : 0);
}

/* The outputs along the last axis whose taps all lie inside the input, [lo, hi) (the first tap's from its range, the
 * last's to its range's end) */
static void inner_columns(const SeamlessPoolArgs* a, int64_t* lo, int64_t* hi) {
  int64_t unused;
  tap_range(-a->pad_begin[2], a->stride[2], a->in[2], a->out[2], lo, &unused);
  tap_range((a->kernel[2] - 1) * a->dilation[2] - a->pad_begin[2], a->stride[2], a->in[2], a->out[2], &unused, hi);
  if (*lo > *hi) *lo = *hi;
}

enum { POOL_FOLD = 2048 };  /* the longest input row pool_max_rows folds (on the stack) */

enum { POOL_TAPS = 256 };  /* the most taps average_span takes at once (larger windows: the plain loop) */

/* Where a 2-D pool keeps the row length (stride 1 along both; output (r, i)'s taps are input (r, i) moved by fixed
 * offsets), the output rows whose window rows all lie inside, [*lo, *hi), are one span of the plane from their first
 * inside column to their last: returns 1 with the taps' offsets (row-major in the window, pool_one's order) where
 * there are such rows, else 0. In the span, the outputs at the row ends in between read wrapped taps (in bounds) and
 * must be rewritten. */
static int row_span(const SeamlessPoolArgs* a, int64_t in_lo, int64_t in_hi, int64_t offset[POOL_TAPS], int64_t* lo,
                    int64_t* hi) {
  const int64_t k1s = a->kernel[1], k2s = a->kernel[2], width = a->in[2];
  if (a->kernel[0] != 1 || a->out[0] != 1 || a->stride[2] != 1 || a->stride[1] != 1 || a->out[2] != width ||
      k1s * k2s > POOL_TAPS || in_lo >= in_hi)
    return 0;
  *lo = a->pad_begin[1], *hi = a->in[1] - (k1s - 1) * a->dilation[1] + a->pad_begin[1];
  *hi = *hi < a->out[1] ? *hi : a->out[1];
  if (*lo >= *hi) return 0;
  for (int64_t k1 = 0, t = 0; k1 < k1s; k1++)
    for (int64_t k2 = 0; k2 < k2s; k2++) offset[t++] = k1 * a->dilation[1] * width + k2 * a->dilation[2];
  return 1;
}

/* yp[i] = the maximum of a folded row's taps of output i, for i in [lo, hi) (taps all inside); inlined per stride. */
static inline __attribute__((always_inline)) void max_taps(const SeamlessPoolArgs* a, const float* fold, float* yp,
                                                           int64_t lo, int64_t hi, int64_t st2) {
  for (int64_t k2 = 0; k2 < a->kernel[2]; k2++) {
    const float* src = fold + k2 * a->dilation[2] - a->pad_begin[2];
    if (!k2)
      for (int64_t i = lo; i < hi; i++) yp[i] = src[i * st2];
    else
      for (int64_t i = lo; i < hi; i++) yp[i] = src[i * st2] > yp[i] ? src[i * st2] : yp[i];
  }
}

/* The maximum of a plane without specials (plane_specials) by output rows: a row's window rows inside the input
 * folded into one first (an elementwise maximum along the row: vectorized, each input row read once an output row
 * instead of once a tap), then each output's taps inside along it. On plain values every path of pool_one gives
 * that maximum of the taps inside where there is one (MLAS's vector kernel reads the lowest float for columns
 * outside, its odd windows start past the input's end: none inside); a window with no tap inside keeps pool_one.
 * MaxPool 3x3 stride 2 of 96 x 109 x 109 (SqueezeNet's first), 1 thread: 2.27 ms -> 0.62 (stock 0.26-0.28); the
 * taps' loops at a constant stride (max_taps) 0.60 -> 0.46 (stock 0.24, `bench /tmp/mp.onnx --threads 1`). */
SEAMLESS_SIMD static void pool_max_rows(const SeamlessPoolArgs* a, const float* xp, float* yp) {
  float fold[POOL_FOLD];
  const int64_t width = a->in[2], out2 = a->out[2], st2 = a->stride[2], d2 = a->dilation[2];
  int64_t o[3], in_lo, in_hi, offset[POOL_TAPS], span_lo = 0, span_hi = 0;
  inner_columns(a, &in_lo, &in_hi);
  if (row_span(a, in_lo, in_hi, offset, &span_lo, &span_hi)) {  /* the inside rows at once, tap by tap */
    const int64_t k2s = a->kernel[2], taps = a->kernel[1] * k2s;
    const int64_t lo = span_lo * out2 + in_lo, hi = (span_hi - 1) * out2 + in_hi;
    const float* first = xp - a->pad_begin[1] * width - a->pad_begin[2];  /* output q's first tap: first[q] */
    for (int64_t q = lo; q < hi; q++) yp[q] = first[q + offset[0]];
    for (int64_t t = 1; t < taps; t++) {
      const float* tap = first + offset[t];
      for (int64_t q = lo; q < hi; q++) yp[q] = tap[q] > yp[q] ? tap[q] : yp[q];
    }
    for (int64_t i = 0; i < out2; i++) {  /* the span rows' ends: a column at a time, down the rows at once */
      if (i == in_lo) i = in_hi;
      if (i >= out2) break;
      int64_t lo2, hi2, unused;
      window_taps(a, 2, i - a->pad_begin[2], &lo2, &hi2, &unused);
      if (lo2 == hi2) {  /* no tap inside along the row */
        for (int64_t r = span_lo; r < span_hi; r++) yp[r * out2 + i] = pool_one(a, xp, (const int64_t[3]){0, r, i});
        continue;
      }
      for (int64_t r0 = span_lo; r0 < span_hi; r0 += 64) {
        const int64_t n = span_hi - r0 < 64 ? span_hi - r0 : 64;
        const float* column = first + r0 * width + i;
        float m[64];
        for (int64_t r = 0; r < n; r++) m[r] = column[r * width + offset[lo2]];
        for (int64_t k1 = 0; k1 < a->kernel[1]; k1++)
          for (int64_t k2 = lo2; k2 < hi2; k2++) {
            const float* tap = column + offset[k1 * k2s + k2];
            for (int64_t r = 0; r < n; r++) m[r] = tap[r * width] > m[r] ? tap[r * width] : m[r];
          }
        for (int64_t r = 0; r < n; r++) yp[(r0 + r) * out2 + i] = m[r];
      }
    }
  }
  for (o[0] = 0; o[0] < a->out[0]; o[0]++)
    for (o[1] = 0; o[1] < a->out[1]; o[1]++, yp += out2) {
      if (o[1] >= span_lo && o[1] < span_hi) continue;  /* done above */
      const int64_t s0 = o[0] * a->stride[0] - a->pad_begin[0], s1 = o[1] * a->stride[1] - a->pad_begin[1];
      int64_t lo0, hi0, lo1, hi1;
      tap_range(s0, a->dilation[0], a->in[0], a->kernel[0], &lo0, &hi0);  /* the window's taps inside, as outputs */
      tap_range(s1, a->dilation[1], a->in[1], a->kernel[1], &lo1, &hi1);
      if (lo0 == hi0 || lo1 == hi1) {
        for (o[2] = 0; o[2] < out2; o[2]++) yp[o[2]] = pool_one(a, xp, o);
        continue;
      }
      int first = 1;
      for (int64_t k0 = lo0; k0 < hi0; k0++)
        for (int64_t k1 = lo1; k1 < hi1; k1++) {
          const float* row = xp + ((s0 + k0 * a->dilation[0]) * a->in[1] + s1 + k1 * a->dilation[1]) * width;
          if (first) memcpy(fold, row, (size_t)width * sizeof(float));
          else
            for (int64_t c = 0; c < width; c++) fold[c] = fold[c] > row[c] ? fold[c] : row[c];
          first = 0;
        }
      /* outputs whose taps all lie inside: tap by tap across them (the common strides as constants: vectorized) */
      if (st2 == 1) max_taps(a, fold, yp, in_lo, in_hi, 1);
      else if (st2 == 2) max_taps(a, fold, yp, in_lo, in_hi, 2);
      else max_taps(a, fold, yp, in_lo, in_hi, st2);
      for (o[2] = 0; o[2] < out2; o[2]++) {  /* the edges */
        if (o[2] == in_lo) o[2] = in_hi;
        if (o[2] >= out2) break;
        const int64_t s2 = o[2] * st2 - a->pad_begin[2];
        int64_t lo2, hi2;
        tap_range(s2, d2, width, a->kernel[2], &lo2, &hi2);
        if (lo2 == hi2) {
          yp[o[2]] = pool_one(a, xp, o);
          continue;
        }
        float m = fold[s2 + lo2 * d2];
        for (int64_t k2 = lo2 + 1; k2 < hi2; k2++) m = fold[s2 + k2 * d2] > m ? fold[s2 + k2 * d2] : m;
        yp[o[2]] = m;
      }
    }
}

/* y[q] = (first[q + offset[0]] + first[q + offset[1]] + ...) / count for q in [lo, hi), each sum from 0 in the offsets'
 * order (pool_one's): 16 outputs a register, four registers at once, so four chains of adds run together (a block past
 * hi takes the last 16 outputs instead: their values again). Inlined into each of its callers' SIMD clones. */
static inline __attribute__((always_inline)) void average_span(const float* first, const int64_t* offset, int64_t taps,
                                                               float count, float* y, int64_t lo, int64_t hi) {
  if (hi - lo < 16) {
    for (int64_t q = lo; q < hi; q++) {
      float sum = 0.0f;
      for (int64_t t = 0; t < taps; t++) sum += first[q + offset[t]];
      y[q] = sum / count;
    }
    return;
  }
  for (int64_t b = lo; b < hi; b += 64) {
    int64_t at[4];
    for (int j = 0; j < 4; j++) at[j] = b + 16 * j + 16 <= hi ? b + 16 * j : hi - 16;
    f16v s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
    for (int64_t t = 0; t < taps; t++) {
      const float* tap = first + offset[t];
      s0 += *(const f16v*)(tap + at[0]), s1 += *(const f16v*)(tap + at[1]);
      s2 += *(const f16v*)(tap + at[2]), s3 += *(const f16v*)(tap + at[3]);
    }
    *(f16v*)(y + at[0]) = s0 / count, *(f16v*)(y + at[1]) = s1 / count;
    *(f16v*)(y + at[2]) = s2 / count, *(f16v*)(y + at[3]) = s3 / count;
  }
}

/* AveragePool of a plane, pool_one's values bit for bit: each output's taps inside the input summed in pool_one's
 * order from 0 and divided by pool_one's count. Where a 2-D pool keeps the row length (stride 1: output (r, i)'s taps
 * are input (r, i) moved by fixed offsets), the output rows whose window rows all lie inside are one span of the plane
 * from their first inside column to their last (the columns at the row ends in between get wrapped sums, in bounds,
 * rewritten below). Any other row: its window rows inside found once, the outputs whose taps along the row all lie
 * inside summed across the row at once. Each row's ends then one by one over their taps inside. One 3x3 pool with
 * pads of 256 planes of 28 x 28, 1 thread (`bench`): 1.08 ms (the rows' inside outputs in memory, the rest by
 * pool_one) -> 0.15 (stock 0.093); Inception-v2's 8 pools 8.3-11.6 -> 1.35 ms (`bench profile`). */
SEAMLESS_SIMD static void pool_average_rows(const SeamlessPoolArgs* a, const float* xp, float* yp) {
  const int64_t in1 = a->in[1], width = a->in[2], out2 = a->out[2], st2 = a->stride[2], d2 = a->dilation[2];
  const int with_pads = a->mode == SEAMLESS_POOL_AVERAGE_WITH_PADS;
  const int64_t k1s = a->kernel[1], k2s = a->kernel[2];
  int64_t in_lo, in_hi, offset[POOL_TAPS];
  inner_columns(a, &in_lo, &in_hi);
  int64_t span_lo = 0, span_hi = 0;  /* the rows done as one span */
  if (row_span(a, in_lo, in_hi, offset, &span_lo, &span_hi)) {
    const float* first = xp - a->pad_begin[1] * width - a->pad_begin[2];  /* output q's first tap: first[q] */
    average_span(first, offset, k1s * k2s, (float)(k1s * k2s), yp, span_lo * out2 + in_lo,
                 (span_hi - 1) * out2 + in_hi);
    for (int64_t i = 0; i < out2; i++) {  /* the span rows' ends: a column at a time, down the rows at once */
      if (i == in_lo) i = in_hi;
      if (i >= out2) break;
      int64_t lo2, hi2, pad2;
      window_taps(a, 2, i - a->pad_begin[2], &lo2, &hi2, &pad2);
      const float count = (float)(k1s * (with_pads ? pad2 : hi2 - lo2));
      for (int64_t r0 = span_lo; r0 < span_hi; r0 += 64) {
        const int64_t n = span_hi - r0 < 64 ? span_hi - r0 : 64;
        float sum[64] = {0};
        for (int64_t k1 = 0; k1 < k1s; k1++)
          for (int64_t k2 = lo2; k2 < hi2; k2++) {
            const float* tap = first + r0 * width + i + offset[k1 * k2s + k2];
            for (int64_t r = 0; r < n; r++) sum[r] += tap[r * width];
          }
        for (int64_t r = 0; r < n; r++) yp[(r0 + r) * out2 + i] = lo2 == hi2 ? 0.0f : sum[r] / count;
      }
    }
  }
  for (int64_t o0 = 0; o0 < a->out[0]; o0++)
    for (int64_t o1 = 0; o1 < a->out[1]; o1++, yp += out2) {
      if (o1 >= span_lo && o1 < span_hi) continue;  /* done above */
      const int64_t s0 = o0 * a->stride[0] - a->pad_begin[0], s1 = o1 * a->stride[1] - a->pad_begin[1];
      int64_t lo0, hi0, pad0, lo1, hi1, pad1;
      window_taps(a, 0, s0, &lo0, &hi0, &pad0);
      window_taps(a, 1, s1, &lo1, &hi1, &pad1);
      if (lo0 == hi0 || lo1 == hi1) {  /* no tap inside: pool_one's 0 */
        for (int64_t i = 0; i < out2; i++) yp[i] = 0.0f;
        continue;
      }
      const int64_t rows = (hi0 - lo0) * (hi1 - lo1), padded_rows = pad0 * pad1;
      const int64_t taps = rows * k2s;
      const float inner_count = (float)((with_pads ? padded_rows : rows) * k2s);
      const float* first = xp + (s0 * in1 + s1) * width - a->pad_begin[2];  /* output i's first tap: first[i st2] */
      const int64_t step0 = a->dilation[0] * in1 * width, step1 = a->dilation[1] * width;
      if (st2 == 1 && taps <= POOL_TAPS) {
        for (int64_t k0 = lo0, t = 0; k0 < hi0; k0++)
          for (int64_t k1 = lo1; k1 < hi1; k1++)
            for (int64_t k2 = 0; k2 < k2s; k2++) offset[t++] = k0 * step0 + k1 * step1 + k2 * d2;
        average_span(first, offset, taps, inner_count, yp, in_lo, in_hi);
      } else {
        for (int64_t i = in_lo; i < in_hi; i++) yp[i] = 0.0f;
        for (int64_t k0 = lo0; k0 < hi0; k0++)
          for (int64_t k1 = lo1; k1 < hi1; k1++)
            for (int64_t k2 = 0; k2 < k2s; k2++) {
              const float* tap = first + k0 * step0 + k1 * step1 + k2 * d2;
              for (int64_t i = in_lo; i < in_hi; i++) yp[i] += tap[i * st2];
            }
        for (int64_t i = in_lo; i < in_hi; i++) yp[i] /= inner_count;
      }
      for (int64_t i = 0; i < out2; i++) {  /* the row's ends */
        if (i == in_lo) i = in_hi;
        if (i >= out2) break;
        const int64_t s2 = i * st2 - a->pad_begin[2];
        int64_t lo2, hi2, pad2;
        window_taps(a, 2, s2, &lo2, &hi2, &pad2);
        float sum = 0.0f;
        for (int64_t k0 = lo0; k0 < hi0; k0++)
          for (int64_t k1 = lo1; k1 < hi1; k1++) {
            const float* row = xp + ((s0 + k0 * a->dilation[0]) * in1 + s1 + k1 * a->dilation[1]) * width + s2;
            for (int64_t k2 = lo2; k2 < hi2; k2++) sum += row[k2 * d2];
          }
        yp[i] = lo2 == hi2 ? 0.0f : sum / (float)(with_pads ? padded_rows * pad2 : rows * (hi2 - lo2));
      }
    }
}

static void pool_task(void* user, size_t task) {
  const PoolJob* job = user;
  const SeamlessPoolArgs* a = job->a;
  const int64_t plane_in = a->in[0] * a->in[1] * a->in[2], plane_out = a->out[0] * a->out[1] * a->out[2];
  const int average = a->mode == SEAMLESS_POOL_AVERAGE || a->mode == SEAMLESS_POOL_AVERAGE_WITH_PADS;
  int64_t last[3];  /* a window's last tap from its first */
  for (int d = 0; d < 3; d++) last[d] = (a->kernel[d] - 1) * a->dilation[d];
  size_t p0, p1;
  seamless_task_range((size_t)a->planes, job->tasks, task, &p0, &p1);
#ifdef SPATIAL_AVX512
  const int plane_loop = plane_fits(a);
  float* lanes = small_planes_fit(a) ? thread_buffer(POOL_LANES_BUFFER, PLANES_LANES * sizeof(float)) : NULL;
  const int small_planes = lanes != NULL;  /* (out of memory: the plane by plane paths) */
  /* at stride 1 on longer rows average_span's four sums at once are faster */
  const int average_loop = average && !small_planes && plane_loop && (a->stride[2] == 2 || a->out[2] <= 16);
  PlaneGeometry g;
  if (average_loop) plane_geometry(a, &g);
#endif
  for (size_t p = p0; p < p1; p++) {
    const float* xp = job->x + (int64_t)p * plane_in;
    float* yp = job->y + (int64_t)p * plane_out;
    if (a->mode == SEAMLESS_POOL_MAX_GLOBAL) {
      *yp = pool_global_max(xp, plane_in);
      continue;
    }
    if (average) {
#ifdef SPATIAL_AVX512
      if (small_planes) {  /* up to 16 planes at once */
        const size_t planes = p1 - p < 16 ? p1 - p : 16;
        pool_planes_avx512(a, lanes, xp, yp, (int64_t)planes);
        p += planes - 1;
        continue;
      }
      if (average_loop) {
        average_plane_avx512(a, &g, xp, yp);
        continue;
      }
#endif
      pool_average_rows(a, xp, yp);
      continue;
    }
    const unsigned specials = plane_specials(xp, plane_in);
#ifdef SPATIAL_AVX512
    if (!specials && small_planes) {  /* with the next planes up to 16 without specials */
      size_t planes = 1;
      while (planes < 16 && p + planes < p1 && !plane_specials(job->x + (int64_t)(p + planes) * plane_in, plane_in))
        planes++;
      pool_planes_avx512(a, lanes, xp, yp, (int64_t)planes);
      p += planes - 1;
      continue;
    }
    if (!specials && plane_loop) {
      max_plane_avx512(a, xp, yp);
      continue;
    }
#endif
    if (!specials && a->in[2] <= POOL_FOLD) {
      pool_max_rows(a, xp, yp);
      continue;
    }
    const int plain = !(specials & POOL_NAN_OR_NEG_INF);  /* a maximum is the plain one */
    int64_t o[3], start[3];
    for (o[0] = 0; o[0] < a->out[0]; o[0]++)
      for (o[1] = 0; o[1] < a->out[1]; o[1]++)
        for (o[2] = 0; o[2] < a->out[2]; o[2]++) {
          int inside = plain;
          for (int d = 0; d < 3; d++) {
            start[d] = o[d] * a->stride[d] - a->pad_begin[d];
            inside &= start[d] >= 0 && start[d] + last[d] < a->in[d];
          }
          *yp++ = inside ? pool_inside(a, xp, start) : pool_one(a, xp, o);
        }
  }
}

void seamless_pool_f32(const SeamlessPoolArgs* a, const float* x, float* y, void* par_fn, void* par_ctx) {
  const int64_t taps = a->kernel[0] * a->kernel[1] * a->kernel[2];
  const size_t per_plane = (size_t)(a->out[0] * a->out[1] * a->out[2] * (taps ? taps : 1));
  PoolJob job = {a, x, y, seamless_task_count((size_t)a->planes * per_plane, 1 << 14)};
  if (job.tasks > (size_t)a->planes) job.tasks = a->planes > 0 ? (size_t)a->planes : 1;
  seamless_run_tasks(par_fn, par_ctx, job.tasks, pool_task, &job);
}
