// Row-wise kernels over the last axis, one block of 256 threads per row: Softmax and
// LayerNormalization (float32 statistics for float16 data, as ORT does).
#include "common.cuh"

template <typename T>
__device__ void softmax_row(const T* x, T* y, int64_t cols) {
  const T* xr = x + blockIdx.x * cols;
  T* yr = y + blockIdx.x * cols;
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, ld(xr + (c)));
  m = block_reduce(m, true);
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += expf(ld(xr + (c)) - m);
  float inv = 1.0f / block_reduce(sum, false);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) st(yr + (c), expf(ld(xr + (c)) - m) * inv);
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

extern "C" __global__ void seamless_softmax_f32(const float* x, float* y, int64_t cols) { softmax_row(x, y, cols); }
extern "C" __global__ void seamless_softmax_f16(const __half* x, __half* y, int64_t cols) { softmax_row(x, y, cols); }
extern "C" __global__ void seamless_layernorm_f32(const float* x, const float* s, const float* b, float* y, int64_t cols,
                                                  float eps) { layernorm_row(x, s, b, y, cols, eps); }
extern "C" __global__ void seamless_layernorm_f16(const __half* x, const __half* s, const __half* b, __half* y,
                                                  int64_t cols, float eps) { layernorm_row(x, s, b, y, cols, eps); }

// Mean over the last axis (ReduceMean of a row), float32 accumulation.
template <typename T>
__device__ void mean_row(const T* x, T* y, int64_t cols) {
  const T* xr = x + blockIdx.x * cols;
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += ld(xr + (c));
  sum = block_reduce(sum, false);
  if (threadIdx.x == 0) st(y + (blockIdx.x), sum / cols);
}

extern "C" __global__ void seamless_mean_f32(const float* x, float* y, int64_t cols) { mean_row(x, y, cols); }
extern "C" __global__ void seamless_mean_f16(const __half* x, __half* y, int64_t cols) { mean_row(x, y, cols); }

// Cast between float32 and float16.
extern "C" __global__ void seamless_cast_f32_f16(int64_t n, const float* x, __half* y) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = __float2half(x[i]);
}
extern "C" __global__ void seamless_cast_f16_f32(int64_t n, const __half* x, float* y) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = __half2float(x[i]);
}

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

extern "C" __global__ void seamless_skip_norm_f32(const float* x, const float* skip, const float* bias,
                                                  const float* scale, const float* beta, float* y, float* sum_out,
                                                  int64_t cols, float eps, int simplified) {
  skip_norm_row(x, skip, bias, scale, beta, y, sum_out, cols, eps, simplified);
}
extern "C" __global__ void seamless_skip_norm_f16(const __half* x, const __half* skip, const __half* bias,
                                                  const __half* scale, const __half* beta, __half* y, __half* sum_out,
                                                  int64_t cols, float eps, int simplified) {
  skip_norm_row(x, skip, bias, scale, beta, y, sum_out, cols, eps, simplified);
}
