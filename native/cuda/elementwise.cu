// Elementwise CUDA kernels with ONNX (numpy) broadcasting: arithmetic, comparisons and logic on
// two operands, unary functions (with up to two float parameters), Where, casts. Float types
// compute in float32 and round once; int32/int64 compute in their own type. Shapes travel as a
// Broadcast struct of up to 8 dims (args.h, with the op codes).
#include <type_traits>

#include "common.cuh"


// Element i of the output: the operands' offsets.
__device__ __forceinline__ void operand_offsets(int64_t i, const Broadcast& s, int64_t& ia, int64_t& ib) {
  int64_t rest = i;
  ia = ib = 0;
  for (int d = s.rank - 1; d >= 0; d--) {
    int64_t c = rest % s.dims[d];
    rest /= s.dims[d];
    ia += c * s.a_strides[d];
    ib += c * s.b_strides[d];
  }
}

// The arithmetic type of an element type: float for the float types, the type itself for ints.
template <typename T> struct Arith { typedef float type; };
template <> struct Arith<int32_t> { typedef int32_t type; };
template <> struct Arith<int64_t> { typedef int64_t type; };
template <> struct Arith<uint8_t> { typedef uint8_t type; };  // the unsigned types: BitShift's
template <> struct Arith<uint16_t> { typedef uint16_t type; };
template <> struct Arith<uint32_t> { typedef uint32_t type; };
template <> struct Arith<uint64_t> { typedef uint64_t type; };
template <typename T> __device__ __forceinline__ typename Arith<T>::type get(const T* p) { return ld(p); }
#define INT_ACCESS(T)                                                 \
  __device__ __forceinline__ T get(const T* p) { return *p; }        \
  __device__ __forceinline__ void put(T* p, T v) { *p = v; }
template <typename T> __device__ __forceinline__ void put(T* p, typename Arith<T>::type v) { st(p, v); }
INT_ACCESS(int32_t)
INT_ACCESS(int64_t)
INT_ACCESS(uint8_t)
INT_ACCESS(uint16_t)
INT_ACCESS(uint32_t)
INT_ACCESS(uint64_t)
#undef INT_ACCESS


__device__ __forceinline__ float binary(int op, float a, float b) {
  switch (op) {
    case ADD: return a + b;
    case SUB: return a - b;
    case MUL: return a * b;
    case DIV: return a / b;
    case POW: return powf(a, b);
    case MAX_: return a != a || b != b ? a + b : fmaxf(a, b);  // NaN propagates, as ONNX Max/Min
    case MIN_: return a != a || b != b ? a + b : fminf(a, b);
    case MOD: {  // the sign of the divisor, as Python's %
      float r = fmodf(a, b);
      return r != 0.0f && ((r < 0.0f) != (b < 0.0f)) ? r + b : r;
    }
    case FMOD: return fmodf(a, b);
    default: return a < 0.0f ? a * b : a;  // PRELU, b the slope
  }
}

template <typename I>
__device__ __forceinline__ bool negative(I x) {  // false for the unsigned types, without comparing them to 0
  if constexpr (std::is_signed<I>::value) return x < 0; else return false;
}

template <typename I>
__device__ __forceinline__ I binary(int op, I a, I b) {  // integers; division by zero gives 0, not a trap
  switch (op) {
    case SHIFT_LEFT: return (uint64_t)b >= 8 * sizeof(I) ? (I)0 : (I)(a << b);  // shifted out: 0, as numpy
    case SHIFT_RIGHT: return (uint64_t)b >= 8 * sizeof(I) ? (I)0 : (I)(a >> b);
    case ADD: return a + b;
    case SUB: return a - b;
    case MUL: return a * b;
    case DIV: return b ? a / b : 0;  // truncation, as ORT's CPU kernels
    case MAX_: return a > b ? a : b;
    case MIN_: return a < b ? a : b;
    case MOD: {
      if (!b) return 0;
      I r = a % b;
      return r != 0 && (negative(r) != negative(b)) ? r + b : r;
    }
    case FMOD: return b ? a % b : 0;
    case BIT_AND: return a & b;
    case BIT_OR: return a | b;
    case BIT_XOR: return a ^ b;
    default: return negative(a) ? a * b : a;
  }
}

template <typename T>
__device__ void binary_body(int op, int64_t n, const T* a, const T* b, T* y, const Broadcast& s) {
  GRID_LOOP(i, n) {
    int64_t ia, ib;
    operand_offsets(i, s, ia, ib);
    put(y + i, binary(op, get(a + ia), get(b + ib)));
  }
}


template <typename T>
__device__ void compare_body(int op, int64_t n, const T* a, const T* b, bool* y, const Broadcast& s) {
  GRID_LOOP(i, n) {
    int64_t ia, ib;
    operand_offsets(i, s, ia, ib);
    auto x = get(a + ia), z = get(b + ib);
    bool r;
    switch (op) {
      case EQUAL: r = x == z; break;
      case LESS: r = x < z; break;
      case LESS_EQUAL: r = x <= z; break;
      case GREATER: r = x > z; break;
      default: r = x >= z;
    }
    y[i] = r;
  }
}

#define BINARY(S, T)                                                                                        \
  extern "C" __global__ void seamless_binary_##S(int op, int64_t n, const T* a, const T* b, T* y, Broadcast s) { dependent_launch(); \
    binary_body(op, n, a, b, y, s);                                                                         \
  }                                                                                                         \
  extern "C" __global__ void seamless_compare_##S(int op, int64_t n, const T* a, const T* b, bool* y,       \
                                                  Broadcast s) { dependent_launch();                        \
    compare_body(op, n, a, b, y, s);                                                                        \
  }
FOR_FLOATS(BINARY)
BINARY(i32, int32_t)
BINARY(i64, int64_t)
BINARY(u8, uint8_t)
BINARY(u16, uint16_t)
BINARY(u32, uint32_t)
BINARY(u64, uint64_t)


extern "C" __global__ void seamless_logic(int op, int64_t n, const bool* a, const bool* b, bool* y, Broadcast s) { dependent_launch();
  GRID_LOOP(i, n) {
    int64_t ia, ib;
    operand_offsets(i, s, ia, ib);
    bool x = a[ia];
    y[i] = op == NOT ? !x : op == AND ? x && b[ib] : op == OR ? x || b[ib] : x != b[ib];
  }
}


// p, q: the op's parameters (alpha/beta, gamma, clip bounds, a divisor)
__device__ __forceinline__ float unary(int op, float x, float p, float q) {
  switch (op) {
    case RELU: return x > 0.0f ? x : 0.0f;
    case SIGMOID: return 1.0f / (1.0f + expf(-x));
    case TANH: return tanhf(x);
    case EXP: return expf(x);
    case LOG: return logf(x);
    case NEG: return -x;
    case ABS: return fabsf(x);
    case SQRT: return sqrtf(x);
    case ERF: return erff(x);
    case RECIPROCAL: return 1.0f / x;
    case SIN: return sinf(x);
    case COS: return cosf(x);
    case FLOOR: return floorf(x);
    case CEIL: return ceilf(x);
    case ROUND: return rintf(x);  // halves to even, as ONNX Round
    case SOFTPLUS: return x > 20.0f ? x : log1pf(expf(x));  // the identity past float32 precision
    case LEAKY_RELU: return x < 0.0f ? p * x : x;
    case HARD_SIGMOID: return fmaxf(0.0f, fminf(1.0f, p * x + q));
    case HARD_SWISH: return x * fmaxf(0.0f, fminf(1.0f, x / 6.0f + 0.5f));
    case ELU: return x < 0.0f ? p * (expf(x) - 1.0f) : x;
    case SELU: return x <= 0.0f ? q * (p * expf(x) - p) : q * x;
    case CELU: return fmaxf(0.0f, x) + fminf(0.0f, p * (expf(x / p) - 1.0f));
    case CLIP: return x != x ? x : fminf(fmaxf(x, p), q);
    case THRESHOLDED_RELU: return x > p ? x : 0.0f;
    case SIGN: return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x;
    case SOFTSIGN: return x / (1.0f + fabsf(x));
    case MISH: return x * tanhf(x > 20.0f ? x : log1pf(expf(x)));
    case TAN: return tanf(x);
    case ASIN: return asinf(x);
    case ACOS: return acosf(x);
    case ATAN: return atanf(x);
    case SINH: return sinhf(x);
    case COSH: return coshf(x);
    case ASINH: return asinhf(x);
    case ACOSH: return acoshf(x);
    case ATANH: return atanhf(x);
    case DIV_BY: return x / p;
    default: return x * p;  // MUL_BY
  }
}

template <typename I>
__device__ __forceinline__ I unary(int op, I x, float p, float q) {  // the int subset: Neg, Abs, Sign, Relu, Clip, ~
  switch (op) {
    case NEG: return -x;
    case BIT_NOT: return ~x;
    case ABS: return x < 0 ? -x : x;
    case SIGN: return (x > 0) - (x < 0);
    case RELU: return x > 0 ? x : 0;
    default: return x < (I)p ? (I)p : x > (I)q ? (I)q : x;  // CLIP (bounds exact up to 2^24)
  }
}

template <typename T>
__device__ void unary_body(int op, int64_t n, const T* x, T* y, float p, float q) {
  GRID_LOOP(i, n) put(y + i, unary(op, get(x + i), p, q));
}

#define UNARY(S, T)                                                                                            \
  extern "C" __global__ void seamless_unary_##S(int op, int64_t n, const T* x, T* y, float p, float q) { dependent_launch(); \
    unary_body(op, n, x, y, p, q);                                                                             \
  }
FOR_FLOATS(UNARY)
UNARY(i32, int32_t)
UNARY(i64, int64_t)

// The Gelu family with an optional bias over the last axis (com.microsoft FastGelu, QuickGelu,
// BiasGelu; ONNX Gelu): y = act(x + bias[i % bias_len]).

__device__ __forceinline__ float activation(int op, float v, float alpha) {
  switch (op) {
    case FAST_GELU: return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    case QUICK_GELU: return v / (1.0f + expf(-alpha * v));
    default: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  }
}

template <typename T>
__device__ void activation_body(int op, int64_t n, const T* x, const T* bias, int64_t bias_len, float alpha, T* y) {
  GRID_LOOP(i, n) {
    float v = ld(x + i) + (bias ? ld(bias + i % bias_len) : 0.0f);
    st(y + i, activation(op, v, alpha));
  }
}

#define ACTIVATION(S, T)                                                                                     \
  extern "C" __global__ void seamless_activation_##S(int op, int64_t n, const T* x, const T* bias,          \
                                                     int64_t bias_len, float alpha, T* y) { dependent_launch(); \
    activation_body(op, n, x, bias, bias_len, alpha, y);                                                    \
  }
FOR_FLOATS(ACTIVATION)

// y[r, j] = silu(x[r, j]) * x[r, n + j] over rows of 2n: the SwiGLU of a [gate | up] product
// (plan/fusion.py's MatMulSwiGLU). wide (n % 8 == 0, x and y 16-byte aligned): 8 columns a thread, 16-byte
// loads and stores, one division for them (a prompt's SwiGLU after its GEMM; the same values).
template <typename T>
__device__ void swiglu_body(int64_t count, int64_t n, const T* x, T* y, int wide) {
  if (wide) {
    int64_t n8 = n / 8;
    GRID_LOOP(i, count / 8) {
      int64_t r = i / n8, c = (i - r * n8) * 8;
      float g[8], u[8];
      load8(x + r * 2 * n + c, g);
      load8(x + r * 2 * n + n + c, u);
      for (int e = 0; e < 8; e++) g[e] = g[e] / (1.0f + expf(-g[e])) * u[e];
      store8(y + i * 8, g);
    }
    return;
  }
  GRID_LOOP(i, count) {
    const T* row = x + (i / n) * 2 * n;
    float g = ld(row + i % n);
    st(y + i, g / (1.0f + expf(-g)) * ld(row + n + i % n));
  }
}

#define SWIGLU(S, T)                                                                                              \
  extern "C" __global__ void seamless_swiglu_##S(int64_t count, int64_t n, const T* x, T* y, int wide) {          \
    dependent_launch();                                                                                           \
    swiglu_body(count, n, x, y, wide);                                                                            \
  }
FOR_FLOATS(SWIGLU)

// Where(cond, a, b) with broadcasting, any element type by size: the Broadcast strides of `a` and
// `b`, plus the condition's.

template <typename T>
__device__ void where_body(int64_t n, const bool* c, const T* a, const T* b, T* y, const Broadcast3& s) {
  GRID_LOOP(i, n) {
    int64_t ia, ib, ic = 0, rest = i;
    operand_offsets(i, s.ab, ia, ib);
    for (int d = s.ab.rank - 1; d >= 0; d--) {
      ic += (rest % s.ab.dims[d]) * s.c_strides[d];
      rest /= s.ab.dims[d];
    }
    y[i] = c[ic] ? a[ia] : b[ib];
  }
}

#define WHERE(S, T)                                                                                            \
  extern "C" __global__ void seamless_where_##S(int64_t n, const bool* c, const T* a, const T* b, T* y,        \
                                                Broadcast3 s) { dependent_launch();                            \
    where_body(n, c, a, b, y, s);                                                                              \
  }
WHERE(1, uint8_t)
WHERE(2, uint16_t)
WHERE(4, uint32_t)
WHERE(8, uint64_t)

// Cast between float32/16, bfloat16, float64, int8/uint8/int32/int64 and bool: float to int
// truncates (as C, like ORT's CPU EP), anything to bool is "!= 0", bool is 0 or 1.
template <typename T> __device__ __forceinline__ double as_double(const T* p) { return (double)*p; }
__device__ __forceinline__ double as_double(const __half* p) { return (double)__half2float(*p); }
__device__ __forceinline__ double as_double(const __nv_bfloat16* p) { return (double)__bfloat162float(*p); }
template <typename T> __device__ __forceinline__ void from_double(T* p, double v) { *p = (T)v; }
__device__ __forceinline__ void from_double(bool* p, double v) { *p = v != 0.0; }
__device__ __forceinline__ void from_double(__half* p, double v) { *p = __double2half(v); }
__device__ __forceinline__ void from_double(__nv_bfloat16* p, double v) { *p = __double2bfloat16(v); }
__device__ __forceinline__ void from_double(float* p, double v) { *p = (float)v; }

template <typename S, typename D>
__device__ void cast_body(int64_t n, const S* x, D* y) {
  GRID_LOOP(i, n) {
    if constexpr (std::is_integral<S>::value && std::is_integral<D>::value && !std::is_same<D, bool>::value)
      y[i] = (D)x[i];  // int to int wraps, as static_cast (double would lose int64 digits)
    else
      from_double(y + i, as_double(x + i));
  }
}

#define CAST(SS, ST, DS, DT)                                                                             \
  extern "C" __global__ void seamless_cast_##SS##_##DS(int64_t n, const ST* x, DT* y) { dependent_launch(); cast_body(n, x, y); }
#define CAST_FROM(SS, ST)                                                                                \
  CAST(SS, ST, f32, float) CAST(SS, ST, f16, __half) CAST(SS, ST, bf16, __nv_bfloat16) CAST(SS, ST, f64, double) \
  CAST(SS, ST, i8, int8_t) CAST(SS, ST, u8, uint8_t) CAST(SS, ST, i32, int32_t) CAST(SS, ST, i64, int64_t)        \
  CAST(SS, ST, b, bool)
CAST_FROM(f32, float)
CAST_FROM(f16, __half)
CAST_FROM(bf16, __nv_bfloat16)
CAST_FROM(f64, double)
CAST_FROM(i8, int8_t)
CAST_FROM(u8, uint8_t)
CAST_FROM(i32, int32_t)
CAST_FROM(i64, int64_t)
CAST_FROM(b, bool)

// ---- Integer data an op reads as indices, lengths or divisors, checked on the GPU before kernels that cannot
// report a bad value themselves (composed ops, integer division): x viewed as [rows, k], column j within
// [low[j], high[j]] and, where `nonzero`, not 0 (kernels/cuda/elementwise.py check_ints packs IntRanges).

template <typename I>
__device__ void check_ints(int64_t n, const I* x, const IntRanges& r) {
  GRID_LOOP(i, n) {
    int64_t v = x[i];
    int j = (int)(i % r.k);
    if (v < r.low[j] || v > r.high[j] || (r.nonzero && v == 0)) report_bad(r.check, v);
  }
}

extern "C" __global__ void seamless_check_ints_i32(int64_t n, const int32_t* x, IntRanges r) {
  dependent_launch();
  check_ints(n, x, r);
}
extern "C" __global__ void seamless_check_ints_i64(int64_t n, const int64_t* x, IntRanges r) {
  dependent_launch();
  check_ints(n, x, r);
}
