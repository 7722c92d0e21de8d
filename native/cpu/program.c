/* A partition's native program (program.h): its steps run in order over buffer slots, each through
 * the kernel its op code names. exec/program.py resolved every shape and stride when it recorded the
 * program; what a step still reads from the run's data (gather indices) it checks here, before any
 * memory is touched. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fastmath.h"
#include "kernels.h"  /* the kernels the steps call */
#include "parallel.h"
#include "program.h"
#include "simd.h"

#define STATUS_FAIL 1
#define STATUS_INVALID_ARGUMENT 2
#define PARALLEL_GRAIN (1 << 14)   /* elements a task should have at least */

/* ---- elementwise over broadcast operands -------------------------------------------------- */

/* One row of the output: n elements, operands at strides 0 or 1 (the common cases, vectorized) or any. */
typedef void (*RowFn)(const char* a, int64_t sa, const char* b, int64_t sb, char* y, int64_t n);

#define ROW(name, T, R, EXPR)                                                                    \
  SEAMLESS_SIMD static void name(const char* pa, int64_t sa, const char* pb, int64_t sb, char* py, \
                                 int64_t n) {                                                    \
    const T* a = (const T*)pa;                                                                   \
    const T* b = (const T*)pb;                                                                   \
    R* y = (R*)py;                                                                               \
    if (sa == 1 && sb == 1)                                                                      \
      for (int64_t i = 0; i < n; i++) { T x = a[i], z = b[i]; y[i] = (R)(EXPR); }                \
    else if (sa == 1 && sb == 0) {                                                               \
      T z = b[0];                                                                                \
      for (int64_t i = 0; i < n; i++) { T x = a[i]; y[i] = (R)(EXPR); }                          \
    } else if (sa == 0 && sb == 1) {                                                             \
      T x = a[0];                                                                                \
      for (int64_t i = 0; i < n; i++) { T z = b[i]; y[i] = (R)(EXPR); }                          \
    } else                                                                                       \
      for (int64_t i = 0; i < n; i++) { T x = a[i * sa], z = b[i * sb]; y[i] = (R)(EXPR); }      \
  }

#define NUMERIC_ROWS(T, tag)                                                      \
  ROW(add_##tag, T, T, x + z)                                                     \
  ROW(sub_##tag, T, T, x - z)                                                     \
  ROW(mul_##tag, T, T, x * z)                                                     \
  ROW(max_##tag, T, T, (x > z || x != x) ? x : z)                                 \
  ROW(min_##tag, T, T, (x < z || x != x) ? x : z)                                 \
  ROW(eq_##tag, T, uint8_t, x == z)                                               \
  ROW(lt_##tag, T, uint8_t, x < z)                                                \
  ROW(gt_##tag, T, uint8_t, x > z)                                                \
  ROW(le_##tag, T, uint8_t, x <= z)                                               \
  ROW(ge_##tag, T, uint8_t, x >= z)

NUMERIC_ROWS(float, f32)
NUMERIC_ROWS(double, f64)
NUMERIC_ROWS(int64_t, i64)
NUMERIC_ROWS(int32_t, i32)
ROW(div_f32, float, float, x / z)
ROW(div_f64, double, double, x / z)
/* Pow: an exponent of 2 or 3 along the row is stock's x * x or (x * x) * x (ORT's CPU Pow; exact products, not pow) */
#define POW_ROW(name, T, POW)                                                                                 \
  SEAMLESS_SIMD static void name(const char* pa, int64_t sa, const char* pb, int64_t sb, char* py, int64_t n) { \
    const T *a = (const T*)pa, *b = (const T*)pb;                                                              \
    T* y = (T*)py;                                                                                             \
    if (sa == 1 && sb == 0 && b[0] == 2)                                                                       \
      for (int64_t i = 0; i < n; i++) y[i] = a[i] * a[i];                                                      \
    else if (sa == 1 && sb == 0 && b[0] == 3)                                                                  \
      for (int64_t i = 0; i < n; i++) y[i] = a[i] * a[i] * a[i];                                               \
    else                                                                                                       \
      for (int64_t i = 0; i < n; i++) y[i] = POW(a[i * sa], b[i * sb]);                                        \
  }
POW_ROW(pow_f32, float, powf)
POW_ROW(pow_f64, double, pow)
ROW(and_b, uint8_t, uint8_t, x && z)
ROW(or_b, uint8_t, uint8_t, x || z)
ROW(eq_b, uint8_t, uint8_t, x == z)

#define NUMERIC_TABLE(tag, div, pow)                                                                   \
  {add_##tag, sub_##tag, mul_##tag, div, max_##tag, min_##tag, eq_##tag, lt_##tag, gt_##tag, le_##tag, \
   ge_##tag, NULL, NULL, pow}

/* The row function of (type, op), or NULL where the pair has none (exec/program.py asks first). */
static RowFn binary_row(int32_t type, int32_t op) {
  static const RowFn f32[] = NUMERIC_TABLE(f32, div_f32, pow_f32);
  static const RowFn f64[] = NUMERIC_TABLE(f64, div_f64, pow_f64);
  static const RowFn i64[] = NUMERIC_TABLE(i64, NULL, NULL);
  static const RowFn i32[] = NUMERIC_TABLE(i32, NULL, NULL);
  static const RowFn b[] = {NULL, NULL, NULL, NULL, NULL, NULL, eq_b, NULL, NULL, NULL, NULL, and_b, or_b, NULL};
  if (op < 0 || op > SEAMLESS_POW) return NULL;
  switch (type) {
    case SEAMLESS_F32: return f32[op];
    case SEAMLESS_F64: return f64[op];
    case SEAMLESS_I64: return i64[op];
    case SEAMLESS_I32: return i32[op];
    case SEAMLESS_BOOL: return b[op];
    default: return NULL;
  }
}

int seamless_binary_supported(int32_t type, int32_t op) { return binary_row(type, op) != NULL; }

static int64_t type_bytes(int32_t type) {
  switch (type) {
    case SEAMLESS_F64: case SEAMLESS_I64: return 8;
    case SEAMLESS_F32: case SEAMLESS_I32: return 4;
    default: return 1;
  }
}

typedef struct {
  const SeamlessBinaryArgs* g;
  RowFn row;
  const char *a, *b, *c;   /* c: Where's condition */
  char* y;
  int64_t in_bytes, out_bytes, rows;
  size_t tasks;
} BinaryJob;

/* Rows [r0, r1) of the output (a row: its last axis), walking the outer axes like an odometer. */
static void binary_rows(const BinaryJob* j, int64_t r0, int64_t r1) {
  const SeamlessBinaryArgs* g = j->g;
  int last = g->rank - 1;
  int64_t n = g->dims[last], idx[SEAMLESS_PROGRAM_RANK] = {0}, oa = 0, ob = 0, oc = 0, r = r0;
  for (int d = last - 1; d >= 0; d--) {
    idx[d] = r % g->dims[d];
    r /= g->dims[d];
    oa += idx[d] * g->sa[d]; ob += idx[d] * g->sb[d]; oc += idx[d] * g->sc[d];
  }
  for (int64_t row = r0; row < r1; row++) {
    char* y = j->y + row * n * j->out_bytes;
    if (j->c) {  /* Where: cond ? a : b, element by element */
      for (int64_t i = 0; i < n; i++) {
        const char* src = j->c[oc + i * g->sc[last]] ? j->a + (oa + i * g->sa[last]) * j->in_bytes
                                                      : j->b + (ob + i * g->sb[last]) * j->in_bytes;
        memcpy(y + i * j->in_bytes, src, (size_t)j->in_bytes);
      }
    } else {
      j->row(j->a + oa * j->in_bytes, g->sa[last], j->b + ob * j->in_bytes, g->sb[last], y, n);
    }
    for (int d = last - 1; d >= 0; d--) {
      oa += g->sa[d]; ob += g->sb[d]; oc += g->sc[d];
      if (++idx[d] < g->dims[d]) break;
      oa -= g->sa[d] * g->dims[d]; ob -= g->sb[d] * g->dims[d]; oc -= g->sc[d] * g->dims[d];
      idx[d] = 0;
    }
  }
}

static void binary_task(void* user, size_t task) {
  const BinaryJob* j = user;
  int64_t r0 = j->rows * (int64_t)task / (int64_t)j->tasks, r1 = j->rows * (int64_t)(task + 1) / (int64_t)j->tasks;
  binary_rows(j, r0, r1);
}

static int64_t elements(int rank, const int64_t* dims) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= dims[d];
  return n;
}

static int run_binary(const SeamlessBinaryArgs* g, const char* c, const char* a, const char* b, char* y,
                      void* par_fn, void* par_ctx) {
  BinaryJob j = {.g = g, .a = a, .b = b, .c = c, .y = y, .in_bytes = type_bytes(g->type)};
  if (!c) {
    j.row = binary_row(g->type, g->op);
    if (!j.row) return STATUS_FAIL;
    j.out_bytes = g->op >= SEAMLESS_EQUAL && g->op <= SEAMLESS_GREATER_EQUAL ? 1 : j.in_bytes;
  } else {
    j.out_bytes = j.in_bytes;
  }
  int64_t total = elements(g->rank, g->dims);
  j.rows = total / (g->dims[g->rank - 1] ? g->dims[g->rank - 1] : 1);
  if (!total) return 0;
  size_t tasks = seamless_task_count((size_t)total, PARALLEL_GRAIN);
  j.tasks = tasks < (size_t)j.rows ? tasks : (size_t)j.rows;
  seamless_run_tasks(par_fn, par_ctx, j.tasks, binary_task, &j);
  return 0;
}

/* ---- unary, cast ------------------------------------------------------------------------- */

SEAMLESS_SIMD static void unary_f32(int32_t op, const float* x, float* y, int64_t n) {
  switch (op) {
    case SEAMLESS_SIGMOID:  /* exp(-|x|) never overflows: the algebraically equal form per sign */
      for (int64_t i = 0; i < n; i++) {
        float e = expf(-fabsf(x[i]));
        y[i] = x[i] >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e);
      }
      break;
    case SEAMLESS_SILU:
      for (int64_t i = 0; i < n; i++) {
        float e = expf(-fabsf(x[i]));
        y[i] = x[i] * (x[i] >= 0 ? 1.0f / (1.0f + e) : e / (1.0f + e));
      }
      break;
    case SEAMLESS_TANH: for (int64_t i = 0; i < n; i++) y[i] = seamless_tanhf(x[i]); break;
    case SEAMLESS_GELU_TANH:  /* Gelu approximate="tanh": kernels/cpu/elementwise.py gelu's float32 arithmetic */
      for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + seamless_tanhf(0.7978845608028654f * (v + 0.044715f * (v * v * v))));
      }
      break;
    case SEAMLESS_EXP: for (int64_t i = 0; i < n; i++) y[i] = expf(x[i]); break;
    case SEAMLESS_COS: for (int64_t i = 0; i < n; i++) y[i] = cosf(x[i]); break;
    case SEAMLESS_SIN: for (int64_t i = 0; i < n; i++) y[i] = sinf(x[i]); break;
    case SEAMLESS_LOG: for (int64_t i = 0; i < n; i++) y[i] = logf(x[i]); break;
    case SEAMLESS_SQRT: for (int64_t i = 0; i < n; i++) y[i] = sqrtf(x[i]); break;
    case SEAMLESS_NEG: for (int64_t i = 0; i < n; i++) y[i] = -x[i]; break;
    case SEAMLESS_ABS: for (int64_t i = 0; i < n; i++) y[i] = fabsf(x[i]); break;
    case SEAMLESS_RELU: for (int64_t i = 0; i < n; i++) y[i] = seamless_relu_f32(x[i]); break;
    case SEAMLESS_RECIPROCAL: for (int64_t i = 0; i < n; i++) y[i] = 1.0f / x[i]; break;
    default: break;
  }
}

static int run_unary(const SeamlessUnaryArgs* g, const char* x, char* y, void* par_fn, void* par_ctx) {
  if (g->type == SEAMLESS_BOOL && g->op == SEAMLESS_NOT) {
    for (int64_t i = 0; i < g->n; i++) y[i] = !x[i];
    return 0;
  }
  if (g->type != SEAMLESS_F32) return STATUS_FAIL;
  const float* xf = (const float*)x;
  float* yf = (float*)y;
  switch (g->op) {
    case SEAMLESS_ERF: seamless_erf_f32(xf, yf, (size_t)g->n, par_fn, par_ctx); return 0;
    case SEAMLESS_GELU: seamless_gelu_f32(xf, yf, (size_t)g->n, par_fn, par_ctx); return 0;
    case SEAMLESS_QUICK_GELU: seamless_quick_gelu_f32(xf, yf, (size_t)g->n, g->alpha, par_fn, par_ctx); return 0;
    case SEAMLESS_NOT: return STATUS_FAIL;
    case SEAMLESS_CLIP:  /* numpy's maximum then minimum: a NaN operand gives NaN */
      for (int64_t i = 0; i < g->n; i++) {
        float v = (xf[i] > g->alpha || xf[i] != xf[i]) ? xf[i] : g->alpha;
        yf[i] = (v < g->beta || v != v) ? v : g->beta;
      }
      return 0;
    default: unary_f32(g->op, xf, yf, g->n); return 0;
  }
}

#define CAST_LOOP(S, D) for (int64_t i = 0; i < g->n; i++) ((D*)y)[i] = (D)((const S*)x)[i]
#define CAST_TO(S)                                                      \
  switch (g->to) {                                                      \
    case SEAMLESS_F32: CAST_LOOP(S, float); return 0;                   \
    case SEAMLESS_F64: CAST_LOOP(S, double); return 0;                  \
    case SEAMLESS_I64: CAST_LOOP(S, int64_t); return 0;                 \
    case SEAMLESS_I32: CAST_LOOP(S, int32_t); return 0;                 \
    case SEAMLESS_U8: CAST_LOOP(S, uint8_t); return 0;                  \
    case SEAMLESS_I8: CAST_LOOP(S, int8_t); return 0;                   \
    case SEAMLESS_BOOL:                                                 \
      for (int64_t i = 0; i < g->n; i++) y[i] = ((const S*)x)[i] != 0;  \
      return 0;                                                         \
    default: return STATUS_FAIL;                                        \
  }

/* Casts from integers and booleans (exact or wrapping as C and numpy do) and between the float types;
 * exec/program.py leaves float-to-integer casts (undefined in C out of range) to the Python kernel. */
static int run_cast(const SeamlessCastArgs* g, const char* x, char* y) {
  switch (g->from) {
    case SEAMLESS_F32: CAST_TO(float)
    case SEAMLESS_F64: CAST_TO(double)
    case SEAMLESS_I64: CAST_TO(int64_t)
    case SEAMLESS_I32: CAST_TO(int32_t)
    case SEAMLESS_U8: case SEAMLESS_BOOL: CAST_TO(uint8_t)
    case SEAMLESS_I8: CAST_TO(int8_t)
    default: return STATUS_FAIL;
  }
}

/* ---- data movement ----------------------------------------------------------------------- */

static int run_gather_nd(const SeamlessGatherNdArgs* g, const char* data, const int64_t* indices, char* y,
                         char* error, size_t error_len) {
  const int64_t count = g->batches * g->tuples;
  for (int64_t j = 0; j < g->k; j++)  /* axis by axis, as the Python kernel (nd_index_range) reports the first */
    for (int64_t t = 0; t < count; t++) {
      const int64_t v = indices[t * g->k + j];
      if (v < -g->dims[j] || v >= g->dims[j]) {
        snprintf(error, error_len, "invalid index found, index = %lld", (long long)v);
        return STATUS_INVALID_ARGUMENT;
      }
    }
  for (int64_t t = 0; t < count; t++) {
    int64_t offset = t / g->tuples * g->batch_bytes;
    for (int64_t j = 0; j < g->k; j++) {
      const int64_t v = indices[t * g->k + j];
      offset += (v < 0 ? v + g->dims[j] : v) * g->strides[j];
    }
    memcpy(y + t * g->slice_bytes, data + offset, (size_t)g->slice_bytes);
  }
  return 0;
}

static int run_gather(const SeamlessGatherArgs* g, const char* data, const char* indices, char* y, char* error,
                      size_t error_len) {
  for (int64_t i = 0; i < g->count; i++) {  /* every index checked before anything is copied */
    int64_t v = g->index_type == SEAMLESS_I32 ? ((const int32_t*)indices)[i] : ((const int64_t*)indices)[i];
    if (g->from_zero && (v < 0 || v >= g->size)) {
      snprintf(error, error_len, "input index out of range: %lld outside [0, %lld)", (long long)v, (long long)g->size);
      return STATUS_INVALID_ARGUMENT;
    }
    if (v < -g->size || v >= g->size) {
      snprintf(error, error_len, "indices element out of data bounds, idx=%lld must be within the inclusive "
               "range [%lld,%lld]", (long long)v, (long long)-g->size, (long long)(g->size - 1));
      return STATUS_INVALID_ARGUMENT;
    }
  }
  size_t inner = (size_t)g->inner_bytes;
  for (int64_t o = 0; o < g->outer; o++)
    for (int64_t i = 0; i < g->count; i++) {
      int64_t v = g->index_type == SEAMLESS_I32 ? ((const int32_t*)indices)[i] : ((const int64_t*)indices)[i];
      if (v < 0) v += g->size;
      memcpy(y + (o * g->count + i) * (int64_t)inner, data + (o * g->size + v) * (int64_t)inner, inner);
    }
  return 0;
}

/* GatherElements / ScatterElements: the data offset of each index element, after all indices were checked. */
static int64_t elements_index(const SeamlessElementsArgs* g, const char* indices, int64_t i) {
  int64_t v = g->index_type == SEAMLESS_I32 ? ((const int32_t*)indices)[i] : ((const int64_t*)indices)[i];
  return v < 0 ? v + g->size : v;
}

/* 1 with the first index outside [-size, size) in *value; 0 when all are within. */
static int elements_bad_index(const SeamlessElementsArgs* g, const char* indices, int64_t count, int64_t* value) {
  for (int64_t i = 0; i < count; i++) {
    int64_t v = g->index_type == SEAMLESS_I32 ? ((const int32_t*)indices)[i] : ((const int64_t*)indices)[i];
    if (v < -g->size || v >= g->size) { *value = v; return 1; }
  }
  return 0;
}

/* BODY for every element e of indices with at, its data offset: indices' dims walked like an odometer. */
#define FOR_EACH_ELEMENT(g, indices, count, BODY)                                            \
  do {                                                                                       \
    int64_t idx_[SEAMLESS_PROGRAM_RANK] = {0}, base_ = 0;                                     \
    for (int64_t i_ = 0; i_ < (count); i_++) {                                               \
      const int64_t at = base_ + elements_index(g, indices, i_) * (g)->strides[(g)->axis];   \
      const int64_t e = i_;                                                                  \
      BODY;                                                                                  \
      for (int d_ = (g)->rank - 1; d_ >= 0; d_--) {                                          \
        if (d_ != (g)->axis) base_ += (g)->strides[d_];                                      \
        if (++idx_[d_] < (g)->dims[d_]) break;                                               \
        if (d_ != (g)->axis) base_ -= (g)->strides[d_] * (g)->dims[d_];                      \
        idx_[d_] = 0;                                                                        \
      }                                                                                      \
    }                                                                                        \
  } while (0)

static int run_gather_elements(const SeamlessElementsArgs* g, const char* data, const char* indices, char* y,
                               char* error, size_t error_len) {
  const int64_t count = elements(g->rank, g->dims), eb = type_bytes(g->type);
  int64_t bad;
  if (elements_bad_index(g, indices, count, &bad)) {
    snprintf(error, error_len, "GatherElements op: Out of range value in index tensor");
    return STATUS_FAIL;
  }
  FOR_EACH_ELEMENT(g, indices, count, memcpy(y + e * eb, data + at * eb, (size_t)eb));
  return 0;
}

#define SCATTER_REDUCE(T)                                                                         \
  FOR_EACH_ELEMENT(g, indices, count, {                                                          \
    T* out = (T*)y + at;                                                                         \
    const T u = ((const T*)updates)[e];                                                          \
    switch (g->reduction) {                                                                      \
      case SEAMLESS_ADD: *out += u; break;                                                       \
      case SEAMLESS_MUL: *out *= u; break;                                                       \
      case SEAMLESS_MAX: *out = (*out > u || *out != *out) ? *out : u; break;                    \
      default: *out = (*out < u || *out != *out) ? *out : u; break;                              \
    }                                                                                            \
  })

static int run_scatter_elements(const SeamlessElementsArgs* g, const char* data, const char* indices,
                                const char* updates, char* y, char* error, size_t error_len) {
  const int64_t count = elements(g->rank, g->dims), eb = type_bytes(g->type);
  int64_t bad;
  if (elements_bad_index(g, indices, count, &bad)) {
    snprintf(error, error_len, "indices element out of data bounds, idx=%lld must be within the inclusive "
             "range [%lld,%lld]", (long long)bad, (long long)-g->size, (long long)(g->size - 1));
    return STATUS_INVALID_ARGUMENT;
  }
  if (y != data && g->data_elements) memcpy(y, data, (size_t)(g->data_elements * eb));
  if (g->reduction < 0) FOR_EACH_ELEMENT(g, indices, count, memcpy(y + at * eb, updates + e * eb, (size_t)eb));
  else if (g->type == SEAMLESS_F32) SCATTER_REDUCE(float);
  else if (g->type == SEAMLESS_F64) SCATTER_REDUCE(double);
  else return STATUS_FAIL;
  return 0;
}

/* TopK: whether (va, ia) comes before (vb, ib) in stock's order. */
static int top_k_before(float va, int64_t ia, float vb, int64_t ib, int largest) {
  const int na = va != va, nb = vb != vb;
  if (na || nb) return na && nb ? ia < ib : largest ? na : nb;  /* NaN above every number */
  if (va != vb) return largest ? va > vb : va < vb;
  return ia < ib;
}

typedef struct { float value; int64_t index; } TopKPair;

static int top_k_larger_first(const void* a, const void* b) {
  const TopKPair *p = a, *q = b;
  return top_k_before(p->value, p->index, q->value, q->index, 1) ? -1 : 1;  /* distinct indices: never equal */
}

static int top_k_smaller_first(const void* a, const void* b) {
  const TopKPair *p = a, *q = b;
  return top_k_before(p->value, p->index, q->value, q->index, 0) ? -1 : 1;
}

/* Whether none of x[0..15] can rank before a kept value t (t a number; a later index loses ties; NaN ranks first):
 * one vector compare for the common case of a value that changes nothing. */
SEAMLESS_SIMD static int top_k_none_past(const float* x, float t, int largest) {
  if (t != t) return 0;
  int past = 0;
  for (int i = 0; i < 16; i++) past |= largest ? !(x[i] <= t) : !(x[i] >= t);  /* NaN: not <=, not >= */
  return !past;
}

static void run_top_k(const SeamlessTopKArgs* g, const float* x, float* values, int64_t* indices, TopKPair* scratch) {
  const int64_t n = g->n, k = g->k, inner = g->inner;
  TopKPair best[SEAMLESS_TOP_K_INSERT];
  for (int64_t o = 0; o < g->outer; o++)
    for (int64_t c = 0; c < inner; c++) {
      const float* row = x + o * n * inner + c;
      TopKPair* kept = k <= SEAMLESS_TOP_K_INSERT ? best : scratch;
      int64_t count = 0;
      if (kept == best) {  /* insertion into the k best so far, in order; the row read by ascending index */
        for (int64_t j = 0; j < n && k; j++) {
          const float v = row[j * inner];
          if (count == k && !top_k_before(v, j, best[k - 1].value, best[k - 1].index, g->largest)) continue;
          int64_t at = count < k ? count++ : k - 1;
          for (; at > 0 && top_k_before(v, j, best[at - 1].value, best[at - 1].index, g->largest); at--)
            best[at] = best[at - 1];
          best[at] = (TopKPair){v, j};
        }
      } else {  /* a heap of the k best so far, the one ranked last at its root; then the k sorted */
        for (int64_t j = 0; j < n; j++) {
          if (count == k && inner == 1 && (j & 15) == 0 && j + 16 <= n && top_k_none_past(row + j, scratch[0].value,
                                                                                          g->largest)) {
            j += 15;  /* sixteen values none of which ranks before the root */
            continue;
          }
          const float v = row[j * inner];
          if (count == k) {  /* a later index loses ties: most values fail the first test */
            const float t = scratch[0].value;
            if (v == v && t == t && (g->largest ? v <= t : v >= t)) continue;
            if (!top_k_before(v, j, t, scratch[0].index, g->largest)) continue;
          }
          int64_t at;
          if (count < k) {  /* sift up */
            for (at = count++; at > 0; at = (at - 1) / 2) {
              const TopKPair* up = &scratch[(at - 1) / 2];
              if (!top_k_before(up->value, up->index, v, j, g->largest)) break;
              scratch[at] = *up;
            }
          } else {  /* replace the root, sift down */
            for (at = 0;;) {
              int64_t child = 2 * at + 1;
              if (child >= k) break;
              if (child + 1 < k && top_k_before(scratch[child].value, scratch[child].index, scratch[child + 1].value,
                                                scratch[child + 1].index, g->largest))
                child++;  /* the later-ranked child */
              if (!top_k_before(v, j, scratch[child].value, scratch[child].index, g->largest)) break;
              scratch[at] = scratch[child];
              at = child;
            }
          }
          scratch[at] = (TopKPair){v, j};
        }
        qsort(scratch, (size_t)count, sizeof *scratch, g->largest ? top_k_larger_first : top_k_smaller_first);
      }
      for (int64_t j = 0; j < k; j++) {
        values[(o * k + j) * inner + c] = kept[j].value;
        indices[(o * k + j) * inner + c] = kept[j].index;
      }
    }
}

typedef struct { const SeamlessStridedArgs* g; const char* x; char* y; int64_t rows; size_t tasks; } StridedJob;

#define STRIDED_ROW(T) for (int64_t i = 0; i < n; i++) ((T*)y)[i * ds] = ((const T*)x)[i * ss]

static void strided_task(void* user, size_t task) {
  const StridedJob* j = user;
  const SeamlessStridedArgs* g = j->g;
  int last = g->rank - 1;
  int64_t e = g->elem_bytes, n = g->dims[last], ss = g->src[last], ds = g->dst[last];
  int64_t r0 = j->rows * (int64_t)task / (int64_t)j->tasks, r1 = j->rows * (int64_t)(task + 1) / (int64_t)j->tasks;
  int64_t idx[SEAMLESS_PROGRAM_RANK] = {0}, src = g->src_offset, dst = g->dst_offset, r = r0;
  for (int d = last - 1; d >= 0; d--) {
    idx[d] = r % g->dims[d];
    r /= g->dims[d];
    src += idx[d] * g->src[d];
    dst += idx[d] * g->dst[d];
  }
  for (int64_t row = r0; row < r1; row++) {
    char* y = j->y + dst * e;
    const char* x = j->x + src * e;
    if (ss == 1 && ds == 1) memcpy(y, x, (size_t)(n * e));
    else if (e == 4) STRIDED_ROW(uint32_t);
    else if (e == 8) STRIDED_ROW(uint64_t);
    else if (e == 2) STRIDED_ROW(uint16_t);
    else STRIDED_ROW(uint8_t);
    for (int d = last - 1; d >= 0; d--) {
      src += g->src[d];
      dst += g->dst[d];
      if (++idx[d] < g->dims[d]) break;
      src -= g->src[d] * g->dims[d];
      dst -= g->dst[d] * g->dims[d];
      idx[d] = 0;
    }
  }
}

static void run_strided(const SeamlessStridedArgs* g, const char* x, char* y, void* par_fn, void* par_ctx) {
  int64_t total = elements(g->rank, g->dims), n = g->dims[g->rank - 1];
  if (!total) return;
  StridedJob j = {g, x, y, total / n, 0};
  size_t tasks = seamless_task_count((size_t)(total * g->elem_bytes), PARALLEL_GRAIN * 4);
  j.tasks = tasks < (size_t)j.rows ? tasks : (size_t)j.rows;
  seamless_run_tasks(par_fn, par_ctx, j.tasks, strided_task, &j);
}

/* ---- reductions ---------------------------------------------------------------------------- */

typedef struct { const SeamlessReduceArgs* g; const char* x; char* y; int64_t count, per; size_t tasks; } ReduceJob;

/* The next row of an output's reduced elements (the reduced axes but the last, walked like an odometer): *off moves
 * to its first element. */
static inline void next_reduced_row(const SeamlessReduceArgs* g, int64_t* idx, int64_t* off) {
  for (int d = g->reduced_rank - 2; d >= 0; d--) {
    *off += g->reduced_strides[d];
    if (++idx[d] < g->reduced_dims[d]) return;
    *off -= g->reduced_strides[d] * g->reduced_dims[d];
    idx[d] = 0;
  }
}

/* One output element in double: the reduced axes walked like an odometer (float32 x; int64 x: SUM only). */
static double reduce_one(const SeamlessReduceArgs* g, const char* x, int64_t per) {
  int last = g->reduced_rank - 1;
  int64_t n = g->reduced_dims[last], s = g->reduced_strides[last], idx[SEAMLESS_PROGRAM_RANK] = {0}, off = 0;
  double acc = 0.0;
  for (int64_t rows = per / n; rows > 0; rows--) {
    const float* row = (const float*)x + off;
    if (g->type == SEAMLESS_I64)
      for (int64_t i = 0; i < n; i++) acc += (double)((const int64_t*)x)[off + i * s];
    else switch (g->op) {
      case SEAMLESS_REDUCE_SUM: case SEAMLESS_REDUCE_MEAN: for (int64_t i = 0; i < n; i++) acc += row[i * s]; break;
      case SEAMLESS_REDUCE_SUM_SQUARE: case SEAMLESS_REDUCE_L2:
        for (int64_t i = 0; i < n; i++) acc += (double)row[i * s] * row[i * s];
        break;
      default: for (int64_t i = 0; i < n; i++) acc += fabs((double)row[i * s]); break;
    }
    next_reduced_row(g, idx, &off);
  }
  if (g->op == SEAMLESS_REDUCE_MEAN) acc /= (double)per;
  if (g->op == SEAMLESS_REDUCE_L2) acc = sqrt(acc);
  return acc;
}

/* Stock's max (min): a unless b is strictly greater (less); a NaN a stays, a NaN b is dropped. */
static inline float keep_extreme(float a, float b, int greater) { return (greater ? b > a : b < a) ? b : a; }

/* Eigen's SSE2 maxCoeff (minCoeff) of a contiguous row of n > 0 floats, as stock's ReduceMax takes it: whole packets
 * of 4 from the row's first 16-byte boundary alternately into two accumulators, combined, an odd last packet added,
 * the lanes halved (0 with 2, 1 with 3, then the two); then the elements before and after the packets in turn. */
static float eigen_extreme(const float* row, int64_t n, int greater) {
  uintptr_t address = (uintptr_t)row;
  int64_t start = address % 4 ? n : (int64_t)((4 - address / 4 % 4) % 4);
  start = start < n ? start : n;
  int64_t count = (n - start) / 4, end = start + count * 4;
  float r;
  if (!count) {
    r = row[0];
    for (int64_t i = 1; i < n; i++) r = keep_extreme(r, row[i], greater);
    return r;
  }
  float a[4], b[4];
  for (int l = 0; l < 4; l++) a[l] = row[start + l];
  if (count > 1) {
    for (int l = 0; l < 4; l++) b[l] = row[start + 4 + l];
    for (int64_t p = 2; p + 1 < count; p += 2)
      for (int l = 0; l < 4; l++) {
        a[l] = keep_extreme(a[l], row[start + 4 * p + l], greater);
        b[l] = keep_extreme(b[l], row[start + 4 * p + 4 + l], greater);
      }
    for (int l = 0; l < 4; l++) a[l] = keep_extreme(a[l], b[l], greater);
    if (count % 2)
      for (int l = 0; l < 4; l++) a[l] = keep_extreme(a[l], row[end - 4 + l], greater);
  }
  r = keep_extreme(keep_extreme(a[0], a[2], greater), keep_extreme(a[1], a[3], greater), greater);
  for (int64_t i = 0; i < start; i++) r = keep_extreme(r, row[i], greater);
  for (int64_t i = end; i < n; i++) r = keep_extreme(r, row[i], greater);
  return r;
}

/* MAX or MIN of one output element: eigen_extreme on its row, or folded from its first element in order. */
static float extreme_one(const SeamlessReduceArgs* g, const float* x, int64_t per) {
  int greater = g->op == SEAMLESS_REDUCE_MAX, last = g->reduced_rank - 1;
  if (g->eigen_rows) return eigen_extreme(x, per, greater);
  int64_t n = g->reduced_dims[last], s = g->reduced_strides[last], idx[SEAMLESS_PROGRAM_RANK] = {0}, off = 0;
  float r = x[0];
  for (int64_t rows = per / n; rows > 0; rows--) {
    for (int64_t i = 0; i < n; i++) r = keep_extreme(r, x[off + i * s], greater);
    next_reduced_row(g, idx, &off);
  }
  return r;
}

/* An int64 sum as stock computes it: in double, then saturated into int64 (beyond its range its limit, else
 * truncated; kernels/cpu/reduction.py _saturated). */
static int64_t saturated_i64(double v) {
  if (v >= 9223372036854775807.0) return INT64_MAX;
  if (!(v > -9223372036854775808.0)) return INT64_MIN;  /* NaN too */
  return (int64_t)v;
}

static void reduce_task(void* user, size_t task) {
  const ReduceJob* j = user;
  const SeamlessReduceArgs* g = j->g;
  int64_t r0 = j->count * (int64_t)task / (int64_t)j->tasks, r1 = j->count * (int64_t)(task + 1) / (int64_t)j->tasks;
  for (int64_t o = r0; o < r1; o++) {
    int64_t off = 0, r = o;
    for (int d = g->rank - 1; d >= 0; d--) {
      off += (r % g->dims[d]) * g->strides[d];
      r /= g->dims[d];
    }
    const char* x = j->x + off * (g->type == SEAMLESS_I64 ? 8 : 4);
    if (g->type == SEAMLESS_I64) ((int64_t*)j->y)[o] = saturated_i64(reduce_one(g, x, j->per));
    else if (g->op == SEAMLESS_REDUCE_MAX || g->op == SEAMLESS_REDUCE_MIN)
      ((float*)j->y)[o] = extreme_one(g, (const float*)x, j->per);
    else ((float*)j->y)[o] = (float)reduce_one(g, x, j->per);
  }
}

static void run_causal_conv(const SeamlessCausalConvArgs* a, const float* x, const float* weight, const float* bias,
                            const float* past, float* y, float* present) {
  const int64_t n = a->length, k = a->k, span = (k - 1) * a->dilation;
  for (int64_t row = 0; row < a->batch * a->channels; row++) {
    const int64_t c = row % a->channels;
    const float *xr = x + row * n, *pr = past ? past + row * span : NULL, *w = weight + c * k;
    float* yr = y + row * n;
    for (int64_t t = 0; t < n; t++) {
      float acc = bias ? bias[c] : 0.0f;
      for (int64_t j = 0; j < k; j++) {  /* in the Python kernel's order: bias, then the taps */
        const int64_t i = t + j * a->dilation;  /* position in v = past ++ x */
        acc += w[j] * (i >= span ? xr[i - span] : pr ? pr[i] : 0.0f);
      }
      yr[t] = a->activation ? acc / (1.0f + expf(-acc)) : acc;
    }
    float* sr = present + row * span;
    for (int64_t i = 0; i < span; i++) {
      const int64_t at = n + i;
      sr[i] = at >= span ? xr[at - span] : pr ? pr[at] : 0.0f;
    }
  }
}

static float moe_activation(int kind, float v) {
  if (kind == 4) return 0.5f * v * (1.0f + seamless_tanhf(0.7978845608028654f * (v + 0.044715f * (v * v * v))));
  return kind == 0 ? (v > 0.0f ? v : 0.0f) : kind == 1 ? v / (1.0f + expf(-v)) : v;
}

#define MOE_LANES SEAMLESS_DOT_LANES

/* seamless_dot_f32 compiled for each SIMD level (its callers here are not) */
SEAMLESS_SIMD static float moe_dot(const float* a, const float* b, int64_t n) {
  return seamless_dot_f32(a, b, (size_t)n);
}

/* One expert's product over a chunk of its tokens, rows [r0, r1) of w [rows, cols] (+ bias) times each token's
 * input, each weight row read once for the chunk. in_token: the chunk's rows of `in` (NULL: rows 0..count-1);
 * out_token: y rows to add scale[j] times the result to (NULL: stored in rows 0..count-1 of out). */
typedef struct {
  const float *w, *bias, *in;
  float* out;
  int64_t rows, cols, count;
  const int32_t *in_token, *out_token;
  const float* scale;
  const uint8_t* q;               /* QMoE: w is NULL and these hold the expert's weights (SeamlessMoeArgs) */
  const float *q_scale, *q_zero;
  int64_t bits, block, blocks, row_bytes;
  size_t tasks;
} MoeProduct;

#define MOE_PIECE 512   /* cols of a QMoE weight row dequantized at a time, on the stack */

/* Cols [c0, c1) of a QMoE expert's row (its bytes, scales and zeros per block; zero NULL: 2^(bits - 1)) as floats,
 * scale (q - zero) per block: with out_odd, 4 bits in two halves, the weights of the even cols in out, the odd ones'
 * in out_odd (as moe_quantized splits the inputs); c0 and the blocks' starts are even (pieces of MOE_PIECE cols,
 * blocks of 16 and more or one of the whole row). */
SEAMLESS_SIMD static void moe_dequantize(const MoeProduct* p, const uint8_t* row, const float* scale, const float* zero,
                                         int64_t c0, int64_t c1, float* out, float* out_odd) {
  const int64_t pack = 8 / p->bits, mask = (1 << p->bits) - 1;
  for (int64_t c = c0; c < c1;) {
    const int64_t b = c / p->block, end = (b + 1) * p->block < c1 ? (b + 1) * p->block : c1;
    const float s = scale[b], z = zero ? zero[b] : (float)(1 << (p->bits - 1));
    if (p->bits == 4 && out_odd)
      for (int64_t i = c / 2; i < (end + 1) / 2; i++) {
        out[i - c0 / 2] = s * ((float)(row[i] & 15) - z);
        out_odd[i - c0 / 2] = s * ((float)(row[i] >> 4) - z);
      }
    else if (p->bits == 4)
      for (int64_t i = c; i < end; i++) out[i - c0] = s * ((float)((row[i / 2] >> ((i % 2) * 4)) & 15) - z);
    else if (p->bits == 8)
      for (int64_t i = c; i < end; i++) out[i - c0] = s * ((float)row[i] - z);
    else
      for (int64_t i = c; i < end; i++)
        out[i - c0] = s * ((float)((row[i / pack] >> ((i % pack) * p->bits)) & mask) - z);
    c = end;
  }
}

/* One 4- or 8-bit QMoE weight row against one input: sum over blocks of scale (q - zero) . x, in MOE_LANES sums;
 * 4 bits: the low nibbles against xe, the high ones against xo (the input's even and odd elements, split by
 * moe_quantized). */
SEAMLESS_SIMD static float moe_quantized_dot(const MoeProduct* p, const uint8_t* row, const float* scale,
                                             const float* zero, const float* xe, const float* xo) {
  float acc[MOE_LANES] = {0};
  for (int64_t b = 0; b < p->blocks; b++) {
    const int64_t c0 = b * p->block, c1 = c0 + p->block < p->cols ? c0 + p->block : p->cols;
    const float s = scale[b], z = zero[b];
    if (p->bits == 4) {
      const uint8_t* q = row + c0 / 2;
      const float *e = xe + c0 / 2, *o = xo + c0 / 2;
      const int64_t n = (c1 - c0 + 1) / 2;
      int64_t i = 0;
      for (; i + MOE_LANES <= n; i += MOE_LANES)
        for (int j = 0; j < MOE_LANES; j++)
          acc[j] += s * (((float)(q[i + j] & 15) - z) * e[i + j] + ((float)(q[i + j] >> 4) - z) * o[i + j]);
      for (; i < n; i++) acc[0] += s * (((float)(q[i] & 15) - z) * e[i] + ((float)(q[i] >> 4) - z) * o[i]);
    } else {
      const uint8_t* q = row + c0;
      const float* x = xe + c0;
      const int64_t n = c1 - c0;
      int64_t i = 0;
      for (; i + MOE_LANES <= n; i += MOE_LANES)
        for (int j = 0; j < MOE_LANES; j++) acc[j] += s * (((float)q[i + j] - z) * x[i + j]);
      for (; i < n; i++) acc[0] += s * (((float)q[i] - z) * x[i]);
    }
  }
  float v = 0.0f;
  for (int j = 0; j < MOE_LANES; j++) v += acc[j];
  return v;
}

/* Row r of a 4- or 8-bit QMoE product against each token. */
static void moe_quantized_row(const MoeProduct* p, int64_t r, float* acc) {
  const int64_t half = (p->cols + 1) / 2, stride = p->bits == 4 ? 2 * half : p->cols;
  for (int64_t j = 0; j < p->count; j++) {
    const float* in = p->in + (p->in_token ? p->in_token[j] : j) * stride;
    acc[j] = moe_quantized_dot(p, p->q + r * p->row_bytes, p->q_scale + r * p->blocks, p->q_zero + r * p->blocks, in,
                               in + half);
  }
}

#define MOE_DEQUANTIZE_TOKENS 4   /* from this many tokens in a chunk, QMoE rows are dequantized once for them all */

static void moe_product_task(void* user, size_t task) {
  const MoeProduct* p = user;
  size_t r0, r1;
  float row[2 * MOE_PIECE], acc[SEAMLESS_MOE_CHUNK];
  seamless_task_range((size_t)p->rows, p->tasks, task, &r0, &r1);
  const int split = p->q && p->bits == 4;
  const int64_t half = (p->cols + 1) / 2, stride = split ? 2 * half : p->cols;
  for (size_t r = r0; r < r1; r++) {
    if (p->q && p->bits != 2 && p->count < MOE_DEQUANTIZE_TOKENS) {
      moe_quantized_row(p, (int64_t)r, acc);
    } else {
      for (int64_t j = 0; j < p->count; j++) acc[j] = 0.0f;
      for (int64_t c0 = 0; c0 < p->cols; c0 += MOE_PIECE) {  /* float weights: one piece, the whole row */
        const int64_t n = p->q ? (p->cols - c0 < MOE_PIECE ? p->cols - c0 : MOE_PIECE) : p->cols;
        const float* w = p->q ? row : p->w + r * p->cols;
        if (p->q)
          moe_dequantize(p, p->q + r * p->row_bytes, p->q_scale + r * p->blocks, p->q_zero + r * p->blocks, c0, c0 + n,
                         row, row + MOE_PIECE);
        for (int64_t j = 0; j < p->count; j++) {
          const float* in = p->in + (p->in_token ? p->in_token[j] : j) * stride;
          acc[j] += split ? moe_dot(row, in + c0 / 2, (n + 1) / 2) +
                                moe_dot(row + MOE_PIECE, in + half + c0 / 2, (n + 1) / 2)
                          : moe_dot(w, in + c0, n);
        }
        if (!p->q) break;
      }
    }
    for (int64_t j = 0; j < p->count; j++) {
      const float v = p->bias ? acc[j] + p->bias[r] : acc[j];
      if (p->out_token) p->out[p->out_token[j] * p->rows + r] += p->scale[j] * v;
      else p->out[j * p->rows + r] = v;
    }
  }
}

static void moe_product(MoeProduct* p, void* par_fn, void* par_ctx) {
  size_t tasks = seamless_task_count((size_t)(p->rows * p->cols * p->count), PARALLEL_GRAIN * 4);
  p->tasks = tasks < (size_t)p->rows ? tasks : (size_t)p->rows;
  seamless_run_tasks(par_fn, par_ctx, p->tasks, moe_product_task, p);
}

/* Points p (rows x cols of expert e) at QMoE's integer weights q (the fc slot's bytes) instead of floats; for 4 bits
 * the chunk's inputs are split into their even and odd elements in `split` (each token's row 2 ceil(cols / 2) floats,
 * the odd half padded with a zero). */
static void moe_quantized_weights(MoeProduct* p, const SeamlessMoeArgs* a, const void* q, const float* scale,
                                  const float* zero, int64_t block, int64_t e) {
  const int64_t pack = 8 / a->bits;
  p->bits = a->bits;
  p->block = block;
  p->blocks = (p->cols + block - 1) / block;
  p->row_bytes = (p->cols + pack - 1) / pack;
  p->q = (const uint8_t*)q + e * p->rows * p->row_bytes;
  p->q_scale = scale + e * p->rows * p->blocks;
  p->q_zero = zero ? zero + e * p->rows * p->blocks : NULL;
  p->w = NULL;
}

static void moe_quantized(MoeProduct* p, const SeamlessMoeArgs* a, const void* q, const float* scale,
                          const float* zero, int64_t block, int64_t e, float* split) {
  const int64_t half = (p->cols + 1) / 2;
  moe_quantized_weights(p, a, q, scale, zero, block, e);
  if (a->bits != 4) return;
  for (int64_t j = 0; j < p->count; j++) {
    const float* in = p->in + (p->in_token ? p->in_token[j] : j) * p->cols;
    float *even = split + j * 2 * half, *odd = even + half;
    for (int64_t i = 0; i < p->cols; i++) (i % 2 ? odd : even)[i / 2] = in[i];
    if (p->cols % 2) odd[half - 1] = 0.0f;
  }
  p->in = split;
  p->in_token = NULL;
}

/* act [n, inter] from h1 [n, rows1] (SeamlessMoeArgs' activation). */
static void moe_activate(const SeamlessMoeArgs* a, const float* h1, float* act, int64_t n) {
  const int64_t inter = a->inter, rows1 = a->activation == 2 ? 2 * inter : inter;
  for (int64_t j = 0; j < n; j++) {
    const float* hj = h1 + j * rows1;
    float* aj = act + j * inter;
    for (int64_t m = 0; m < inter; m++) {
      if (a->activation != 2) { aj[m] = moe_activation(a->activation, hj[m]); continue; }
      float gate = hj[2 * m], lin = hj[2 * m + 1];
      if (a->has_limit) {
        gate = gate < a->limit ? gate : a->limit;
        lin = lin < -a->limit ? -a->limit : lin > a->limit ? a->limit : lin;
      }
      aj[m] = gate / (1.0f + expf(-a->alpha * gate)) * (lin + a->beta);
    }
  }
}

/* panels: the expert's weights packed as MatMulNBits' panels (SeamlessMoeArgs), each row put back in the row layout
 * first; failed: set where that scratch could not be had */
typedef struct { const MoeProduct* p; int64_t r0, r1; float* out; size_t tasks; int panels, failed; } MoeDequantizeJob;

static void moe_dequantize_task(void* user, size_t task) {
  MoeDequantizeJob* j = user;
  const MoeProduct* p = j->p;
  size_t a, b;
  seamless_task_range((size_t)(j->r1 - j->r0), j->tasks, task, &a, &b);
  uint8_t* row = j->panels ? malloc((size_t)p->row_bytes + 2 * (size_t)p->blocks * sizeof(float)) : NULL;
  if (j->panels && !row) {
    __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  for (size_t i = a; i < b; i++) {
    const int64_t r = j->r0 + (int64_t)i;
    const uint8_t* q = p->q + r * p->row_bytes;
    const float *scale = p->q_scale + r * p->blocks, *zero = p->q_zero ? p->q_zero + r * p->blocks : NULL;
    if (row) {
      float* row_scale = (float*)(row + p->row_bytes);
      float* row_zero = zero ? row_scale + p->blocks : NULL;
      seamless_matmul_nbits_panel_row(p->q, p->q_scale, p->q_zero, (size_t)p->rows, (size_t)r, (size_t)p->blocks,
                                      (size_t)p->row_bytes, row, row_scale, row_zero);
      q = row, scale = row_scale, zero = row_zero;
    }
    moe_dequantize(p, q, scale, zero, 0, p->cols, j->out + (int64_t)i * p->cols, NULL);
  }
  free(row);
}

/* Whether QMoE's experts are MatMulNBits' B layout (block-wise 4/8-bit weights whose rows hold whole blocks; scales
 * and zero points per block), so that its float kernel multiplies them. */
static int moe_nbits_layout(const SeamlessMoeArgs* a) {
  return a->qmoe && a->bits != 2 && a->block1 != a->hidden && a->hidden % a->block1 == 0 && a->block2 != a->inter &&
         a->inter % a->block2 == 0;
}

/* out [count, rows] = in [count, cols] . expert e's weights^T [rows, cols] + bias: up to a chunk of tokens of
 * MatMulNBits' layout by its float kernel, else a GEMM (QMoE's weights dequantized SEAMLESS_MOE_GEMM_ROWS rows at a
 * time into deq). 0, or -1 (out of memory). */
static int moe_matmul(const SeamlessMoeArgs* a, const void* w, const float* scale, const float* zero,
                      const uint8_t* packed_zero, int panels, int64_t block, int64_t e, int64_t rows, int64_t cols,
                      const float* in, int64_t count, const float* bias, float* out, float* deq, void* par_fn,
                      void* par_ctx) {
  const int64_t pack = a->qmoe ? 8 / a->bits : 1, blocks = a->qmoe ? (cols + block - 1) / block : 1;
  if (count <= SEAMLESS_MOE_CHUNK && moe_nbits_layout(a)) {
    const int rc = seamless_matmul_nbits_f32(
        in, (size_t)count, (size_t)cols, (const uint8_t*)w + e * rows * (cols / pack), scale + e * rows * blocks,
        packed_zero ? packed_zero + e * rows * ((blocks + pack - 1) / pack) : NULL,
        panels && zero ? zero + e * rows * blocks : NULL, bias ? bias + e * rows : NULL, out, (size_t)rows,
        (size_t)a->bits, (size_t)block, 0, panels, par_fn, par_ctx);
    if (rc != 1) return rc ? -1 : 0;  /* 1: a configuration it does not take, the GEMM below does */
  }
  if (!a->qmoe) {
    if (seamless_sgemm_batched(1, (size_t)count, (size_t)rows, (size_t)cols, in, (size_t)cols, 0,
                               (const float*)w + e * rows * cols, (size_t)cols, 0, 1, out, (size_t)rows, 0, par_fn,
                               par_ctx))
      return -1;
  } else {
    MoeProduct p = {.rows = rows, .cols = cols};
    moe_quantized_weights(&p, a, w, scale, zero, block, e);
    for (int64_t r0 = 0; r0 < rows; r0 += SEAMLESS_MOE_GEMM_ROWS) {
      const int64_t r1 = r0 + SEAMLESS_MOE_GEMM_ROWS < rows ? r0 + SEAMLESS_MOE_GEMM_ROWS : rows;
      size_t tasks = seamless_task_count((size_t)((r1 - r0) * cols), PARALLEL_GRAIN);
      MoeDequantizeJob job = {&p, r0, r1, deq, tasks < (size_t)(r1 - r0) ? tasks : (size_t)(r1 - r0), panels, 0};
      seamless_run_tasks(par_fn, par_ctx, job.tasks, moe_dequantize_task, &job);
      if (job.failed || seamless_sgemm_batched(1, (size_t)count, (size_t)(r1 - r0), (size_t)cols, in, (size_t)cols,
                                               0, deq, (size_t)cols, 0, 1, out + r0, (size_t)rows, 0, par_fn, par_ctx))
        return -1;
    }
  }
  if (bias)
    for (int64_t j = 0; j < count; j++)
      for (int64_t r = 0; r < rows; r++) out[j * rows + r] += bias[e * rows + r];
  return 0;
}

/* An expert over all its tokens by whole products (moe_matmul). g: the scratch's GEMM part (program.h
 * SEAMLESS_OP_MOE): their inputs gathered [count, hidden], h1 [count, rows1], act [count, inter], the second product
 * [count, hidden], QMoE's dequantized rows. */
static int moe_expert_products(const SeamlessMoeArgs* a, int64_t e, const int32_t* members, const float* scale,
                               int64_t count, const float* x, const float* fc1, const float* b1, const float* fc2,
                               const float* b2, float* y, float* g, void* par_fn, void* par_ctx) {
  const int64_t h = a->hidden, inter = a->inter, rows1 = a->activation == 2 ? 2 * inter : inter;
  float *in = g, *h1 = in + a->tokens * h, *act = h1 + a->tokens * rows1, *out = act + a->tokens * inter;
  float* deq = out + a->tokens * h;
  for (int64_t j = 0; j < count; j++) memcpy(in + j * h, x + members[j] * h, (size_t)h * sizeof *in);
  if (moe_matmul(a, fc1, a->scale1, a->zero1, a->packed_zero1, a->panels1, a->block1, e, rows1, h, in, count, b1, h1,
                 deq, par_fn, par_ctx))
    return -1;
  moe_activate(a, h1, act, count);
  if (moe_matmul(a, fc2, a->scale2, a->zero2, a->packed_zero2, a->panels2, a->block2, e, h, inter, act, count, b2,
                 out, deq, par_fn, par_ctx))
    return -1;
  for (int64_t j = 0; j < count; j++)
    for (int64_t i = 0; i < h; i++) y[members[j] * h + i] += scale[j] * out[j * h + i];
  return 0;
}

/* MoE: each token routed (the router's softmax, its k best, their weights), then each expert over its tokens: up to
 * SEAMLESS_MOE_CHUNK row by row (QMoE of MatMulNBits' layout by its kernel), more as GEMMs; a token's y sums its experts in expert order, as the Python kernel
 * does. 0, or -1 (out of memory). */
static int run_moe(const SeamlessMoeArgs* a, const float* x, const float* router, const float* fc1, const float* b1,
                   const float* fc2, const float* b2, float* y, float* scratch, void* par_fn, void* par_ctx) {
  const int64_t h = a->hidden, e_count = a->experts, inter = a->inter, k = a->k, tokens = a->tokens;
  const int64_t rows1 = a->activation == 2 ? 2 * inter : inter;
  float *probs = scratch, *weight = probs + e_count;  /* weight, chosen: [tokens, k] */
  int32_t *chosen = (int32_t*)(weight + tokens * k), *members = chosen + tokens * k;
  float *h1 = (float*)(members + tokens), *act = h1 + SEAMLESS_MOE_CHUNK * rows1;
  float* split = act + SEAMLESS_MOE_CHUNK * inter;
  float* gemm = split + SEAMLESS_MOE_CHUNK * ((h > inter ? h : inter) + 1);
  for (int64_t t = 0; t < tokens; t++) {
    const float* logits = router + t * e_count;
    int32_t* mine = chosen + t * k;
    float* w = weight + t * k;
    const float* key = logits;  /* QMoE ranks the logits, MoE the softmax */
    if (!a->qmoe) {
      float top = logits[0], sum = 0.0f;
      for (int64_t e = 1; e < e_count; e++) top = logits[e] > top ? logits[e] : top;
      for (int64_t e = 0; e < e_count; e++) sum += probs[e] = expf(logits[e] - top);
      for (int64_t e = 0; e < e_count; e++) probs[e] /= sum;
      key = probs;
    }
    for (int64_t s = 0; s < k; s++) {  /* the k largest; a tie to the lower index (MoE) or the higher (QMoE) */
      int64_t best = -1;
      for (int64_t e = 0; e < e_count; e++) {
        int taken = 0;
        for (int64_t q = 0; q < s; q++) taken |= mine[q] == e;
        if (!taken && (best < 0 || key[e] > key[best] || (a->qmoe && key[e] == key[best]))) best = e;
      }
      mine[s] = (int32_t)best;
      w[s] = key[best];
    }
    float total = 0.0f;
    if (a->qmoe) {  /* the softmax over the k chosen */
      for (int64_t s = 0; s < k; s++) total += w[s] = expf(w[s] - key[mine[0]]);
      for (int64_t s = 0; s < k; s++) w[s] = total != 0.0f ? w[s] / total : 0.0f;
    } else if (a->normalize) {
      for (int64_t s = 0; s < k; s++) total += w[s];
      for (int64_t s = 0; s < k; s++) w[s] /= total;
    }
  }
  memset(y, 0, (size_t)(tokens * h) * sizeof *y);
  float* scale = gemm;  /* each member's routing weight; the GEMMs' scratch after it */
  for (int64_t e = 0; e < e_count; e++) {
    int64_t count = 0;
    for (int64_t t = 0; t < tokens; t++)
      for (int64_t s = 0; s < k; s++)
        if (chosen[t * k + s] == e && (!a->qmoe || weight[t * k + s] > 1e-8f)) {
          scale[count] = weight[t * k + s];
          members[count++] = (int32_t)t;
        }
    if (count > SEAMLESS_MOE_CHUNK || (count && moe_nbits_layout(a))) {
      if (moe_expert_products(a, e, members, scale, count, x, fc1, b1, fc2, b2, y, gemm + tokens, par_fn, par_ctx))
        return -1;
    } else if (count) {  /* up to a chunk: row by row, each weight row read once for them all */
      MoeProduct up = {.w = a->qmoe ? NULL : fc1 + e * rows1 * h, .bias = b1 ? b1 + e * rows1 : NULL, .in = x,
                       .out = h1, .rows = rows1, .cols = h, .count = count, .in_token = members};
      if (a->qmoe) moe_quantized(&up, a, fc1, a->scale1, a->zero1, a->block1, e, split);
      moe_product(&up, par_fn, par_ctx);
      moe_activate(a, h1, act, count);
      MoeProduct down = {.w = a->qmoe ? NULL : fc2 + e * h * inter, .bias = b2 ? b2 + e * h : NULL, .in = act,
                         .out = y, .rows = h, .cols = inter, .count = count, .out_token = members, .scale = scale};
      if (a->qmoe) moe_quantized(&down, a, fc2, a->scale2, a->zero2, a->block2, e, split);
      moe_product(&down, par_fn, par_ctx);
    }
  }
  return 0;
}

/* Pad: per output element its source along each axis (an odometer over y's dims), the constant outside x. */
static int64_t pad_source(int64_t i, int64_t n, int mode) {
  if (i >= 0 && i < n) return i;
  if (mode == 0 || n == 0) return -1;
  if (mode == 2) return i < 0 ? 0 : n - 1;
  if (mode == 3) return ((i % n) + n) % n;
  if (n == 1) return 0;
  const int64_t period = 2 * (n - 1);  /* reflect */
  int64_t r = ((i % period) + period) % period;
  return r < n ? r : period - r;
}

static void run_pad(const SeamlessPadArgs* a, const void* x, void* y) {
  const int rank = a->rank;
  const size_t eb = (size_t)a->elem_bytes;
  int64_t idx[SEAMLESS_PROGRAM_RANK] = {0}, total = 1, xstride[SEAMLESS_PROGRAM_RANK], step = 1;
  for (int d = rank - 1; d >= 0; d--) { xstride[d] = step; step *= a->x_dims[d]; }
  for (int d = 0; d < rank; d++) total *= a->y_dims[d];
  char* out = y;
  for (int64_t e = 0; e < total; e++, out += eb) {
    int64_t off = 0;
    int inside = 1;
    for (int d = 0; d < rank && inside; d++) {
      const int64_t src = pad_source(idx[d] - a->begin[d], a->x_dims[d], a->mode);
      if (src < 0) inside = 0; else off += src * xstride[d];
    }
    memcpy(out, inside ? (const char*)x + (size_t)off * eb : (const char*)a->value, eb);
    for (int d = rank - 1; d >= 0; d--) {
      if (++idx[d] < a->y_dims[d]) break;
      idx[d] = 0;
    }
  }
}

static void run_reduce(const SeamlessReduceArgs* g, const char* x, char* y, void* par_fn, void* par_ctx) {
  ReduceJob j = {g, x, y, elements(g->rank, g->dims), elements(g->reduced_rank, g->reduced_dims), 0};
  if (!j.count) return;
  size_t tasks = seamless_task_count((size_t)(j.count * j.per), PARALLEL_GRAIN);
  j.tasks = tasks < (size_t)j.count ? tasks : (size_t)j.count;
  seamless_run_tasks(par_fn, par_ctx, j.tasks, reduce_task, &j);
}

/* ---- the families with their own native kernels ------------------------------------------- */


/* GroupQueryAttention after the checks of seqlens_k stock makes (kernels/cpu/attention.py gqa_layout). */
static int run_gqa(const SeamlessGqaArgs* g, const SeamlessStep* st, char* const* ptr, void* par_fn, void* par_ctx,
                   char* error, size_t error_len) {
  const float* q = (const float*)ptr[st->slot[0]];
  const float* k = st->slot[1] >= 0 ? (const float*)ptr[st->slot[1]] : q + g->k_offset;
  const float* v = st->slot[2] >= 0 ? (const float*)ptr[st->slot[2]] : q + g->v_offset;
  const int32_t* lens = (const int32_t*)ptr[st->slot[5]];
  int32_t shortest = INT32_MAX;
  for (int64_t i = 0; i < g->b; i++) {
    if (lens[i] < 0 || lens[i] >= g->total) {
      snprintf(error, error_len, "seqlens_k[%lld] = %d is out of range [0, %lld)", (long long)i, lens[i],
               (long long)g->total);
      return STATUS_INVALID_ARGUMENT;
    }
    shortest = lens[i] < shortest ? lens[i] : shortest;
  }
  if (!g->first_prompt && (int64_t)shortest + 1 < g->s) {
    snprintf(error, error_len, "seqlens_k (shortest %d) shorter than the %lld new tokens", shortest, (long long)g->s);
    return STATUS_INVALID_ARGUMENT;
  }
  int rc = seamless_gqa_f32(q, k, v, (size_t)g->q_row, (size_t)g->k_row, (size_t)g->v_row,
                            st->slot[3] >= 0 ? (const float*)ptr[st->slot[3]] : NULL,
                            st->slot[4] >= 0 ? (const float*)ptr[st->slot[4]] : NULL, (size_t)g->past_len,
                            (float*)ptr[st->slot[7]], (float*)ptr[st->slot[8]], (size_t)g->present_len,
                            (float*)ptr[st->slot[6]], lens, g->first_prompt, (size_t)g->b, (size_t)g->s,
                            (size_t)g->num_heads, (size_t)g->kv_num_heads, (size_t)g->head_size, g->cos, g->sin,
                            (size_t)g->half, g->interleaved, NULL, g->scale, g->softcap, g->window, g->causal,
                            g->window_cache, g->sink, par_fn, par_ctx);
  if (rc) snprintf(error, error_len, rc == 2 ? "out of memory" : "seqlens_k out of range");
  return rc ? STATUS_FAIL : 0;
}

/* cffi's extern "Python+C" callback (native/cpu/python_step.h, which only cffi reads) */
int seamless_python_step(void* handle, void* const* operands, char* error, size_t error_len);

static int run_step(const SeamlessStep* s, char* const* ptr, void* par_fn, void* par_ctx, char* error,
                    size_t error_len) {
  const void* args = s->args;
#define P(i) (s->slot[i] >= 0 ? ptr[s->slot[i]] : NULL)
  switch (s->op) {
    case SEAMLESS_OP_COPY: {
      size_t nbytes = (size_t)((const SeamlessCopyArgs*)args)->nbytes;
      if (nbytes) memcpy(ptr[s->slot[1]], ptr[s->slot[0]], nbytes);
      return 0;
    }
    case SEAMLESS_OP_BINARY: return run_binary(args, NULL, P(0), P(1), P(2), par_fn, par_ctx);
    case SEAMLESS_OP_WHERE: return run_binary(args, P(0), P(1), P(2), P(3), par_fn, par_ctx);
    case SEAMLESS_OP_UNARY: return run_unary(args, P(0), P(1), par_fn, par_ctx);
    case SEAMLESS_OP_CAST: return run_cast(args, P(0), P(1));
    case SEAMLESS_OP_GATHER: return run_gather(args, P(0), P(1), P(2), error, error_len);
    case SEAMLESS_OP_COPY_STRIDED: run_strided(args, P(0), P(1), par_fn, par_ctx); return 0;
    case SEAMLESS_OP_SOFTMAX: {
      const SeamlessRowsArgs* g = args;
      seamless_softmax_f32((const float*)P(0), (float*)P(1), (size_t)g->rows, (size_t)g->cols, par_fn, par_ctx);
      return 0;
    }
    case SEAMLESS_OP_LAYERNORM: {
      const SeamlessRowsArgs* g = args;
      seamless_layernorm_f32((const float*)P(0), (const float*)P(1), (const float*)P(2), (float*)P(3), NULL, NULL,
                             (size_t)g->rows, (size_t)g->cols, g->eps, par_fn, par_ctx);
      return 0;
    }
    case SEAMLESS_OP_GEMM: {
      const SeamlessGemmArgs* g = args;
      if (g->m && g->n)
        seamless_sgemm((size_t)g->m, (size_t)g->n, (size_t)g->k, (const float*)P(0), NULL, (size_t)g->k, g->packed,
                       g->split, g->bias, NULL, (float*)P(1), (size_t)g->n, par_fn, par_ctx);
      return 0;
    }
    case SEAMLESS_OP_GEMM_BATCHED: {
      const SeamlessGemmArgs* g = args;
      if (g->batch && g->m && g->n &&
          seamless_sgemm_batched((size_t)g->batch, (size_t)g->m, (size_t)g->n, (size_t)g->k, (const float*)P(0),
                                 (size_t)g->k, (size_t)g->stride_a, (const float*)P(1), (size_t)g->ldb,
                                 (size_t)g->stride_b, 0, (float*)P(2), (size_t)g->n, (size_t)(g->m * g->n),
                                 par_fn, par_ctx)) {
        snprintf(error, error_len, "out of memory for the GEMM's packing scratch");
        return STATUS_FAIL;
      }
      return 0;
    }
    case SEAMLESS_OP_REDUCE: run_reduce(args, P(0), P(1), par_fn, par_ctx); return 0;
    case SEAMLESS_OP_LSTM: {
      const SeamlessLstmArgs* g = args;
      const size_t state = (size_t)(g->batch * g->n) * sizeof(float);
      float *h = (float*)P(4), *c = (float*)P(5);
      const char *h0 = P(1), *c0 = P(2);  /* initial states; absent: zeros */
      if (h0) memcpy(h, h0, state); else memset(h, 0, state);
      if (c0) memcpy(c, c0, state); else memset(c, 0, state);
      seamless_lstm_f32((size_t)g->steps, (size_t)g->batch, (size_t)g->n, (const float*)P(0), (size_t)(4 * g->n), NULL,
                        NULL, g->packed_r, g->peepholes, g->has_clip, g->clip, g->acts, h, c, (float*)P(3),
                        (size_t)(g->batch * g->n), (float*)P(6), (float*)P(7));
      return 0;
    }
    case SEAMLESS_OP_PAD: run_pad(args, P(0), P(1)); return 0;
    case SEAMLESS_OP_TOP_K:
      run_top_k(args, (const float*)P(0), (float*)P(1), (int64_t*)P(2), (TopKPair*)P(3));
      return 0;
    case SEAMLESS_OP_GATHER_ELEMENTS: return run_gather_elements(args, P(0), P(1), P(2), error, error_len);
    case SEAMLESS_OP_SCATTER_ELEMENTS:
      return run_scatter_elements(args, P(0), P(1), P(2), P(3), error, error_len);
    case SEAMLESS_OP_MOE:
      if (run_moe(args, (const float*)P(0), (const float*)P(1), (const float*)P(2), (const float*)P(3),
                  (const float*)P(4), (const float*)P(5), (float*)P(6), (float*)P(7), par_fn, par_ctx)) {
        snprintf(error, error_len, "out of memory for the GEMM's packing scratch");
        return STATUS_FAIL;
      }
      return 0;
    case SEAMLESS_OP_CAUSAL_CONV:
      run_causal_conv(args, (const float*)P(0), (const float*)P(1), (const float*)P(2), (const float*)P(3),
                      (float*)P(4), (float*)P(5));
      return 0;
    case SEAMLESS_OP_LINEAR_ATTENTION: {
      const SeamlessLinearAttentionArgs* g = args;
      seamless_linear_attention_f32((const float*)P(0), (const float*)P(1), (const float*)P(2), (const float*)P(3),
                                    (const float*)P(4), (const float*)P(5), (float*)P(6), (float*)P(7), (float*)P(8),
                                    (size_t)g->batch, (size_t)g->tokens, (size_t)g->q_heads, (size_t)g->kv_heads,
                                    (size_t)g->k_heads, (size_t)g->d_k, (size_t)g->d_v, g->gated, g->delta,
                                    g->decay_per_key, g->beta_per_head, g->scale, par_fn, par_ctx);
      return 0;
    }
    case SEAMLESS_OP_MROTARY: {
      const SeamlessMRotaryArgs* g = args;
      const int64_t* pos = (const int64_t*)P(1);
      int64_t bad = seamless_mrotary_f32((const float*)P(0), pos, (float*)P(2), (size_t)g->batch, (size_t)g->seq,
                                         (size_t)g->heads, (size_t)g->head, (size_t)g->half, g->batch_stride,
                                         g->seq_stride, g->head_stride, g->cos, g->sin, g->max_pos, g->owner, g->scale,
                                         g->interleaved, par_fn, par_ctx);
      if (!bad) return 0;
      const int64_t tokens = g->batch * g->seq;
      snprintf(error, error_len, "MRotaryEmbedding: position_ids value %lld at stream %lld, index %lld is out of "
               "range [0, %lld)", (long long)pos[bad - 1], (long long)((bad - 1) / tokens),
               (long long)((bad - 1) % tokens), (long long)g->max_pos);
      return STATUS_INVALID_ARGUMENT;
    }
    case SEAMLESS_OP_GATED_RMS_NORM: {
      const SeamlessRowNormArgs* g = args;
      seamless_gated_rmsnorm_f32((const float*)P(0), (const float*)P(1), (const float*)P(2), (float*)P(3),
                                 (size_t)g->rows, (size_t)g->cols, g->eps, g->mode, par_fn, par_ctx);
      return 0;
    }
    case SEAMLESS_OP_LP_NORM: {
      const SeamlessRowNormArgs* g = args;
      seamless_lp_norm_f32((const float*)P(0), (float*)P(1), (size_t)g->rows, (size_t)g->cols, g->mode, g->eps,
                           par_fn, par_ctx);
      return 0;
    }
    case SEAMLESS_OP_LINEAR_ATTENTION_GATE: {
      const SeamlessRowNormArgs* g = args;
      seamless_linear_attention_gate_f32((const float*)P(0), (const float*)P(1), (const float*)P(2),
                                         (const float*)P(3), (float*)P(4), (float*)P(5), (size_t)g->rows,
                                         (size_t)g->cols);
      return 0;
    }
    case SEAMLESS_OP_CONV:
      seamless_conv_f32(args, (const float*)P(0), (const float*)P(3), (float*)P(1), (float*)P(2), par_fn, par_ctx);
      return 0;
    case SEAMLESS_OP_POOL:
      seamless_pool_f32(args, (const float*)P(0), (float*)P(1), par_fn, par_ctx);
      return 0;
    case SEAMLESS_OP_ROTARY: {
      const SeamlessRotaryArgs* g = args;
      const int64_t* pos = (const int64_t*)P(3);
      int64_t bad = seamless_rotary_f32((const float*)P(0), pos, (const float*)P(1), (const float*)P(2), (float*)P(4),
                                        (size_t)g->batch, (size_t)g->seq, (size_t)g->heads, (size_t)g->head,
                                        (size_t)g->half, g->batch_stride, g->seq_stride, g->head_stride, g->max_pos,
                                        g->interleaved, par_fn, par_ctx);
      if (!bad) return 0;
      snprintf(error, error_len, "position_ids value %lld at index %lld is out of range [0, %lld)",
               (long long)pos[bad - 1], (long long)(bad - 1), (long long)g->max_pos);
      return STATUS_INVALID_ARGUMENT;
    }
    case SEAMLESS_OP_GATHER_ND:
      return run_gather_nd(args, P(0), (const int64_t*)P(1), P(2), error, error_len);
    case SEAMLESS_OP_ONNX_ATTENTION: {
      const SeamlessOnnxAttentionArgs* g = args;
      if (seamless_onnx_attention_f32((const float*)P(0), (const float*)P(1), (const float*)P(2), (const float*)P(3),
                                      (const float*)P(4), P(5), g->mask_bool, (float*)P(6), (float*)P(7),
                                      (float*)P(8), (float*)P(9), g->dims, g->strides, g->causal, g->scale,
                                      g->softcap, par_fn, par_ctx)) {
        snprintf(error, error_len, "out of memory for the attention's scores");
        return STATUS_FAIL;
      }
      return 0;
    }
    case SEAMLESS_OP_CHANNEL_AFFINE: {
      const SeamlessChannelAffineArgs* g = args;
      seamless_channel_affine_f32((const float*)P(0), (const float*)P(1), (const float*)P(2), (float*)P(3),
                                  (size_t)g->n, (size_t)g->c, (size_t)g->spatial, (int)g->relu, par_fn, par_ctx);
      return 0;
    }
    case SEAMLESS_OP_LRN: {
      const SeamlessLrnArgs* g = args;
      seamless_lrn_f32((const float*)P(0), (float*)P(1), (size_t)g->n, (size_t)g->c, (size_t)g->spatial,
                       (size_t)g->size, g->alpha_over_size, g->bias, g->beta, par_fn, par_ctx);
      return 0;
    }
    case SEAMLESS_OP_RMS_NORM: {
      const SeamlessRowsArgs* g = args;
      seamless_skip_rmsnorm_f32((const float*)P(0), (const float*)P(1), (size_t)g->skip_rows, (const float*)P(2),
                                (const float*)P(3), (float*)P(4), (float*)P(5), (float*)P(6), (size_t)g->rows,
                                (size_t)g->cols, g->eps, par_fn, par_ctx);
      return 0;
    }
    case SEAMLESS_OP_GQA: return run_gqa(args, s, ptr, par_fn, par_ctx, error, error_len);
    case SEAMLESS_OP_PYTHON: {
      const SeamlessPythonArgs* g = args;
      void* operands[SEAMLESS_STEP_OPERANDS];
      for (int i = 0; i < g->n_operands && i < SEAMLESS_STEP_OPERANDS; i++) operands[i] = P(i);
      return seamless_python_step(g->handle, operands, error, error_len);
    }
    case SEAMLESS_OP_GATHER_BLOCK_QUANTIZED: {
      const SeamlessGatherQuantizedArgs* g = args;
      if (seamless_gather_block_quantized_f32(g->data, (size_t)g->rows, (size_t)g->cols, (const int64_t*)P(0),
                                              (size_t)g->count, g->scales, g->zero_points, (size_t)g->bits,
                                              (size_t)g->block_size, g->panels, (float*)P(1))) {
        snprintf(error, error_len, "out of memory");
        return STATUS_FAIL;
      }
      return 0;
    }
    case SEAMLESS_OP_MATMUL_NBITS: {
      const SeamlessNBitsArgs* g = args;
      int rc = seamless_matmul_nbits_f32((const float*)P(0), (size_t)g->m, (size_t)g->k, g->b, g->scales, g->zp_u8,
                                         g->zp_f32, g->bias, (float*)P(1), (size_t)g->n, (size_t)g->bits,
                                         (size_t)g->block_size, g->int8, g->panels, par_fn, par_ctx);
      if (rc) snprintf(error, error_len, rc == 2 ? "out of memory" : "unsupported MatMulNBits configuration");
      return rc ? STATUS_FAIL : 0;
    }
    default:
      snprintf(error, error_len, "unknown step op %d", s->op);
      return STATUS_FAIL;
  }
#undef P
}

int seamless_program_run(const SeamlessProgram* p, void* const* io, char* arena, void* par_fn, void* par_ctx,
                         char* error, size_t error_len) {
  char* stack_ptrs[64];
  char** ptr = p->n_slots <= 64 ? stack_ptrs : malloc((size_t)p->n_slots * sizeof *ptr);
  if (!ptr) {
    snprintf(error, error_len, "out of memory");
    return STATUS_FAIL;
  }
  int io_slots = p->n_in + p->n_out;
  for (int i = 0; i < p->n_slots; i++)
    ptr[i] = i < io_slots ? io[i] : (p->fixed[i] ? p->fixed[i] : arena + p->offset[i]);
  int code = 0;
  for (int i = 0; i < p->n_steps && !code; i++) {
    char message[SEAMLESS_PROGRAM_ERROR] = "";
    code = run_step(&p->steps[i], ptr, par_fn, par_ctx, message, sizeof message);
    if (code)
      snprintf(error, error_len, "%s: %s: %s", p->steps[i].label, code == STATUS_INVALID_ARGUMENT ? "InvalidArgument"
               : "RuntimeError", message[0] ? message : "step failed");
  }
  if (ptr != stack_ptrs) free(ptr);
  return code;
}
