// Row-wise kernels over the last axis, one block of 256 threads per row: Softmax, LogSoftmax and
// the layer norms (float32 statistics for float16/bfloat16 data, as ORT does).
#include "common.cuh"

template <typename T>
__device__ void softmax_row(const T* x, T* y, int64_t cols, int flags) {  // flags: 1 log, 2 zero masked rows
  const T* xr = x + blockIdx.x * cols;
  T* yr = y + blockIdx.x * cols;
  // each thread sums from the end of the row: a row padded at its start with -inf (a left-padded KV
  // cache, matmul.cu) adds zeros last and gives the same bytes
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, ld(xr + (c)));
  m = block_reduce(m, true);
  float sum = 0.0f;
  for (int64_t c = cols - 1 - threadIdx.x; c >= 0; c -= blockDim.x) sum += expf(ld(xr + (c)) - m);
  sum = block_reduce(sum, false);
  float inv = 1.0f / sum, log_sum = logf(sum);
  bool zero = (flags & 2) && m == -INFINITY;  // every key masked: zeros (Attention), not NaN
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    st(yr + (c), zero ? 0.0f : (flags & 1) ? ld(xr + (c)) - m - log_sum : expf(ld(xr + (c)) - m) * inv);
}

template <typename T>
__device__ void layernorm_row(const T* x, const T* scale, const T* bias, T* y, int64_t cols, float eps) {
  const T* xr = x + blockIdx.x * cols;
  T* yr = y + blockIdx.x * cols;
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += ld(xr + (c));
  float mean = block_reduce(sum, false) / cols;
  float sq = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) { float d = ld(xr + (c)) - mean; sq += d * d; }
  float inv = rsqrtf(block_reduce(sq, false) / cols + eps);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float v = (ld(xr + (c)) - mean) * inv * ld(scale + (c));
    st(yr + (c), bias ? v + ld(bias + (c)) : v);
  }
}

#define SOFTMAX_LAYERNORM(S, T)                                                                           \
  extern "C" __global__ void seamless_softmax_##S(const T* x, T* y, int64_t cols, int flags) { dependent_launch(); \
    softmax_row(x, y, cols, flags);                                                                      \
  }                                                                                                      \
  extern "C" __global__ void seamless_layernorm_##S(const T* x, const T* s, const T* b, T* y, int64_t cols, \
                                                    float eps) { dependent_launch();                     \
    layernorm_row(x, s, b, y, cols, eps);                                                                \
  }
FOR_FLOATS(SOFTMAX_LAYERNORM)

// Layer or RMS normalisation of a row, optionally of x + skip (+ bias) first (the Skip*LayerNormalization
// ops), writing that sum too when sum_out is given: y = (v - mean) / sqrt(mean((v - mean)^2) + eps) * scale
// (+ beta), with mean 0 for RMS (`simplified`). The row stays in shared memory between the passes.
template <typename T>
__device__ void skip_norm_row(const T* x, const T* skip, const T* bias, const T* scale, const T* beta, T* y,
                              T* sum_out, int64_t cols, float eps, int simplified) {
  extern __shared__ float row[];
  const int64_t base = blockIdx.x * cols;
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float v = ld(x + (base + c));
    if (skip) v += ld(skip + (base + c));
    if (bias) v += ld(bias + (c));
    if (sum_out) st(sum_out + (base + c), v);
    row[c] = v;
    sum += v;
  }
  float mean = simplified ? 0.0f : block_reduce(sum, false) / cols;
  float sq = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) { float d = row[c] - mean; sq += d * d; }
  float inv = rsqrtf(block_reduce(sq, false) / cols + eps);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float v = (row[c] - mean) * inv * ld(scale + (c));
    st(y + (base + c), beta ? v + ld(beta + (c)) : v);
  }
}

// The same with eight values per thread in registers (16-byte loads and stores): for rows of a multiple
// of 8 elements, every pointer 16-byte aligned, one block of cols / 8 threads rounded up to a warp.
template <typename T>
__device__ void skip_norm_row8(const T* x, const T* skip, const T* bias, const T* scale, const T* beta, T* y,
                               T* sum_out, int64_t cols, float eps, int simplified) {
  const int64_t c = threadIdx.x * 8, at = blockIdx.x * cols + c;
  float v[8];
  if (norm8(x, skip, bias, scale, beta, sum_out, at, c, cols, eps, simplified, v)) store8(y + at, v);
}

#define SKIP_NORM(S, T)                                                                                        \
  extern "C" __global__ void seamless_skip_norm_##S(const T* x, const T* skip, const T* bias, const T* scale,    \
                                                    const T* beta, T* y, T* sum_out, int64_t cols, float eps,  \
                                                    int simplified) { dependent_launch();                      \
    skip_norm_row(x, skip, bias, scale, beta, y, sum_out, cols, eps, simplified);                             \
  }                                                                                                            \
  extern "C" __global__ void seamless_skip_norm8_##S(const T* x, const T* skip, const T* bias, const T* scale,   \
                                                     const T* beta, T* y, T* sum_out, int64_t cols, float eps, \
                                                     int simplified) { dependent_launch();                     \
    skip_norm_row8(x, skip, bias, scale, beta, y, sum_out, cols, eps, simplified);                            \
  }
FOR_FLOATS(SKIP_NORM)
