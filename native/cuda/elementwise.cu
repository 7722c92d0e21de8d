// Elementwise CUDA kernels: binary ops with ONNX (numpy) broadcasting and unary ops, float32
// and float16 (computed in float32). Shapes travel as a Broadcast struct of up to 8 dims.
#include "common.cuh"

#define SEAMLESS_MAX_DIMS 8

struct Broadcast {            // output dims and, per operand, its strides in elements (0 on broadcast axes)
  int64_t dims[SEAMLESS_MAX_DIMS];
  int64_t a_strides[SEAMLESS_MAX_DIMS];
  int64_t b_strides[SEAMLESS_MAX_DIMS];
  int32_t rank;
};

enum BinaryOp { ADD = 0, SUB = 1, MUL = 2, DIV = 3, POW = 4, MAX_ = 5, MIN_ = 6 };
enum UnaryOp { RELU = 0, SIGMOID = 1, TANH = 2, EXP = 3, LOG = 4, NEG = 5, ABS = 6, SQRT = 7, ERF = 8,
               RECIPROCAL = 9, SIN = 10, COS = 11, FLOOR = 12, CEIL = 13, ROUND = 14, SOFTPLUS = 15 };

__device__ __forceinline__ float binary(int op, float a, float b) {
  switch (op) {
    case ADD: return a + b;
    case SUB: return a - b;
    case MUL: return a * b;
    case DIV: return a / b;
    case POW: return powf(a, b);
    case MAX_: return a != a || b != b ? a + b : fmaxf(a, b);  // NaN propagates, as ONNX Max/Min
    default: return a != a || b != b ? a + b : fminf(a, b);
  }
}

__device__ __forceinline__ float unary(int op, float x) {
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
    default: return x > 20.0f ? x : log1pf(expf(x));  // SOFTPLUS (the identity past float32 precision)
  }
}

template <typename T>
__device__ void binary_body(int op, int64_t n, const T* a, const T* b, T* y, const Broadcast& s) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t rest = i, ia = 0, ib = 0;
    for (int d = s.rank - 1; d >= 0; d--) {
      int64_t c = rest % s.dims[d];
      rest /= s.dims[d];
      ia += c * s.a_strides[d];
      ib += c * s.b_strides[d];
    }
    st(y + i, binary(op, ld(a + ia), ld(b + ib)));
  }
}

template <typename T>
__device__ void unary_body(int op, int64_t n, const T* x, T* y) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    st(y + i, unary(op, ld(x + i)));
}

extern "C" __global__ void seamless_binary_f32(int op, int64_t n, const float* a, const float* b, float* y, Broadcast s) {
  binary_body(op, n, a, b, y, s);
}
extern "C" __global__ void seamless_binary_f16(int op, int64_t n, const __half* a, const __half* b, __half* y, Broadcast s) {
  binary_body(op, n, a, b, y, s);
}
extern "C" __global__ void seamless_unary_f32(int op, int64_t n, const float* x, float* y) { unary_body(op, n, x, y); }
extern "C" __global__ void seamless_unary_f16(int op, int64_t n, const __half* x, __half* y) { unary_body(op, n, x, y); }

// The Gelu family with an optional bias over the last axis (com.microsoft FastGelu, QuickGelu,
// BiasGelu; ONNX Gelu with approximate="tanh"): y = act(x + bias[i % bias_len]).
enum Activation { FAST_GELU = 0, QUICK_GELU = 1, ERF_GELU = 2 };

__device__ __forceinline__ float activation(int op, float v, float alpha) {
  switch (op) {
    case FAST_GELU: return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    case QUICK_GELU: return v / (1.0f + expf(-alpha * v));
    default: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  }
}

template <typename T>
__device__ void activation_body(int op, int64_t n, const T* x, const T* bias, int64_t bias_len, float alpha, T* y) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float v = ld(x + i) + (bias ? ld(bias + i % bias_len) : 0.0f);
    st(y + i, activation(op, v, alpha));
  }
}

extern "C" __global__ void seamless_activation_f32(int op, int64_t n, const float* x, const float* bias,
                                                   int64_t bias_len, float alpha, float* y) {
  activation_body(op, n, x, bias, bias_len, alpha, y);
}
extern "C" __global__ void seamless_activation_f16(int op, int64_t n, const __half* x, const __half* bias,
                                                   int64_t bias_len, float alpha, __half* y) {
  activation_body(op, n, x, bias, bias_len, alpha, y);
}

// Where(cond, a, b) with broadcasting: the Broadcast strides of `a` and `b`, plus the condition's.
struct Broadcast3 {
  Broadcast ab;
  int64_t c_strides[SEAMLESS_MAX_DIMS];
};

template <typename T>
__device__ void where_body(int64_t n, const bool* c, const T* a, const T* b, T* y, const Broadcast3& s) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t rest = i, ia = 0, ib = 0, ic = 0;
    for (int d = s.ab.rank - 1; d >= 0; d--) {
      int64_t k = rest % s.ab.dims[d];
      rest /= s.ab.dims[d];
      ia += k * s.ab.a_strides[d];
      ib += k * s.ab.b_strides[d];
      ic += k * s.c_strides[d];
    }
    y[i] = c[ic] ? a[ia] : b[ib];
  }
}

extern "C" __global__ void seamless_where_f32(int64_t n, const bool* c, const float* a, const float* b, float* y,
                                              Broadcast3 s) { where_body(n, c, a, b, y, s); }
extern "C" __global__ void seamless_where_f16(int64_t n, const bool* c, const __half* a, const __half* b, __half* y,
                                              Broadcast3 s) { where_body(n, c, a, b, y, s); }
