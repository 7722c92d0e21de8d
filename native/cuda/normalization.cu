// Normalisations: the layer norms, row-wise over the last axis, one block of 256 threads per row (float32
// statistics for float16/bfloat16 data, as ORT does); BatchNormalization, InstanceNormalization and LRN at the end.
#include "common.cuh"

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

#define LAYERNORM(S, T)                                                                                   \
  extern "C" __global__ void seamless_layernorm_##S(const T* x, const T* s, const T* b, T* y, int64_t cols, \
                                                    float eps) { dependent_launch();                     \
    layernorm_row(x, s, b, y, cols, eps);                                                                \
  }
FOR_FLOATS(LAYERNORM)
#undef LAYERNORM

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

// BatchNormalization, InstanceNormalization and LRN: normalisation over channels.
namespace channel_norm {

// BatchNormalization (inference): y = x * a + b with a = scale / sqrt(var + eps), b = B - mean * a, as
// ORT folds it. Parameter p of element i is (i / div) % count: per channel (div = spatial size,
// count = C), or per (channel, position) for opset 7-8's spatial=0 (div = 1, count = C * spatial size).
template <typename T>
__device__ void batch_norm(int64_t n, const T* x, const T* scale, const T* bias, const T* mean, const T* var, T* y,
                           int64_t div, int64_t count, float eps) {
  GRID_LOOP(i, n) {
    int64_t p = (i / div) % count;
    float a = 1.0f / sqrtf(ld(var + p) + eps) * ld(scale + p);
    float b = ld(bias + p) - ld(mean + p) * a;
    st(y + i, ld(x + i) * a + b);
  }
}

// InstanceNormalization: one block per (image, channel) plane of `cols` elements; the mean, then the
// variance around it (two passes, as ORT), then y = (x - mean) * scale / sqrt(var + eps) + B.
template <typename T>
__device__ void instance_norm_row(const T* x, const T* scale, const T* bias, T* y, int64_t channels, int64_t cols,
                                  float eps) {
  const int64_t base = blockIdx.x * cols;
  const int64_t c = blockIdx.x % channels;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) sum += ld(x + base + j);
  const float mean = block_reduce(sum, false) / cols;
  float sq = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    float d = ld(x + base + j) - mean;
    sq += d * d;
  }
  const float a = ld(scale + c) / sqrtf(block_reduce(sq, false) / cols + eps);
  const float b = ld(bias + c);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) st(y + base + j, (ld(x + base + j) - mean) * a + b);
}

// LRN across channels: y = x * (bias + alpha / size * sum of x^2 over channels
// [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)])^-beta.
template <typename T>
__device__ void lrn(int64_t n, const T* x, T* y, int64_t channels, int64_t inner, int64_t size, float alpha_over_size,
                    float beta, float bias) {
  GRID_LOOP(i, n) {
    const int64_t c = (i / inner) % channels;
    const T* channel0 = x + (i - c * inner);  // this position in channel 0 of the image
    const int64_t before = (size - 1) / 2, after = size - 1 - before;
    const int64_t lo = c - before < 0 ? 0 : c - before;
    const int64_t hi = c + after > channels - 1 ? channels - 1 : c + after;
    float sum = 0.0f;
    for (int64_t j = lo; j <= hi; j++) {
      float v = ld(channel0 + j * inner);
      sum += v * v;
    }
    st(y + i, ld(x + i) * powf(bias + alpha_over_size * sum, -beta));
  }
}

}  // namespace channel_norm

#define CHANNEL_NORM_KERNELS(S, T)                                                                                     \
  extern "C" __global__ void seamless_batch_norm_##S(int64_t n, const T* x, const T* scale, const T* bias,             \
                                                     const T* mean, const T* var, T* y, int64_t div, int64_t count,    \
                                                     float eps) { dependent_launch();                                  \
    channel_norm::batch_norm(n, x, scale, bias, mean, var, y, div, count, eps);                                             \
  }                                                                                                                    \
  extern "C" __global__ void seamless_instance_norm_##S(const T* x, const T* scale, const T* bias, T* y,               \
                                                        int64_t channels, int64_t cols, float eps) { dependent_launch(); \
    channel_norm::instance_norm_row(x, scale, bias, y, channels, cols, eps);                                                \
  }                                                                                                                    \
  extern "C" __global__ void seamless_lrn_##S(int64_t n, const T* x, T* y, int64_t channels, int64_t inner,            \
                                              int64_t size, float alpha_over_size, float beta, float bias) { dependent_launch(); \
    channel_norm::lrn(n, x, y, channels, inner, size, alpha_over_size, beta, bias);                                         \
  }
FOR_FLOATS(CHANNEL_NORM_KERNELS)
#undef CHANNEL_NORM_KERNELS


// GatedRMSNorm (com.microsoft): a block per row of cols, y = x / sqrt(mean(x^2) + eps) * scale * act(gate) with act
// z * sigmoid(z) (silu) or sigmoid(z), float32 inside.
template <typename T>
__device__ void gated_rmsnorm_row(const T* x, const T* scale, const T* gate, T* y, int64_t cols, float eps, int silu) {
  const int64_t base = blockIdx.x * cols;
  float sq = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) { float v = ld(x + (base + c)); sq += v * v; }
  float inv = rsqrtf(block_reduce(sq, false) / cols + eps);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float z = ld(gate + (base + c)), sig = 1.0f / (1.0f + expf(-z));
    st(y + (base + c), ld(x + (base + c)) * inv * ld(scale + c) * (silu ? z * sig : sig));
  }
}

// GroupQueryAttention's q_norm_weight / k_norm_weight (Qwen3's per-head Q/K RMSNorm, before the rotary embedding):
// each of a row's `heads` vectors of h values (rows `pitch` values apart, the first at x) becomes
// v / sqrt(mean(v^2) + eps) * w, float32 inside, a warp a vector (in place where y is x).
template <typename T>
__device__ void head_rmsnorm(const T* x, const T* w, T* y, int64_t rows, int64_t heads, int64_t pitch, int64_t h,
                             float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
  for (int64_t v = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32; v < rows * heads; v += warps) {
    const int64_t at = v / heads * pitch + v % heads * h;
    float sq = 0.0f;
    for (int64_t c = lane; c < h; c += 32) { float e = ld(x + at + c); sq += e * e; }
    for (int off = 16; off > 0; off >>= 1) sq += __shfl_xor_sync(0xffffffff, sq, off);
    const float inv = rsqrtf(sq / h + eps);
    for (int64_t c = lane; c < h; c += 32) st(y + at + c, ld(x + at + c) * inv * ld(w + c));
  }
}

// LpNormalization: each vector of n values (`inner` apart: the axis' stride) over its L1 or L2 norm, float32 inside,
// a zero vector left zero; a warp a vector (Qwen3.5's q and k: 128 values a head).
template <typename T>
__device__ void lp_norm(const T* x, T* y, int64_t vectors, int64_t n, int64_t inner, int p) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
  for (int64_t v = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32; v < vectors; v += warps) {
    const int64_t at = v / inner * n * inner + v % inner;
    float sum = 0.0f;
    for (int64_t c = lane; c < n; c += 32) { float e = ld(x + at + c * inner); sum += p == 1 ? fabsf(e) : e * e; }
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffff, sum, off);
    const float norm = p == 1 ? sum : sqrtf(sum);
    for (int64_t c = lane; c < n; c += 32) st(y + at + c * inner, norm == 0.0f ? 0.0f : ld(x + at + c * inner) / norm);
  }
}

// LinearAttentionGate (com.microsoft): per element of a [rows, heads], decay = decay_scale * softplus(a + dt_bias)
// (float32 per-head vectors) and, with b, beta = sigmoid(b).
template <typename T>
__device__ void linear_attention_gate(int64_t n, int64_t heads, const T* a, const float* dt_bias,
                                      const float* decay_scale, const T* b, T* decay, T* beta) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t h = i % heads;
    float v = ld(a + i) + dt_bias[h];
    st(decay + i, decay_scale[h] * (v > 0.0f ? v + logf(expf(-v) + 1.0f) : logf(expf(v) + 1.0f)));
    if (beta) st(beta + i, 1.0f / (1.0f + expf(-ld(b + i))));
  }
}

#define GATED(S, T)                                                                                                \
  extern "C" __global__ void seamless_gated_rmsnorm_##S(const T* x, const T* scale, const T* gate, T* y,          \
                                                        int64_t cols, float eps, int silu) { dependent_launch();  \
    gated_rmsnorm_row(x, scale, gate, y, cols, eps, silu);                                                         \
  }                                                                                                                \
  extern "C" __global__ void seamless_head_rmsnorm_##S(const T* x, const T* w, T* y, int64_t rows, int64_t heads,  \
                                                       int64_t pitch, int64_t h, float eps) {                     \
    dependent_launch();                                                                                            \
    head_rmsnorm(x, w, y, rows, heads, pitch, h, eps);                                                             \
  }                                                                                                                \
  extern "C" __global__ void seamless_lp_norm_##S(const T* x, T* y, int64_t vectors, int64_t n, int64_t inner,      \
                                                  int p) { dependent_launch();                                   \
    lp_norm(x, y, vectors, n, inner, p);                                                                           \
  }                                                                                                                \
  extern "C" __global__ void seamless_linear_attention_gate_##S(int64_t n, int64_t heads, const T* a,             \
                                                                const float* dt_bias, const float* decay_scale,  \
                                                                const T* b, T* decay, T* beta) {                 \
    dependent_launch();                                                                                            \
    linear_attention_gate(n, heads, a, dt_bias, decay_scale, b, decay, beta);                                     \
  }
FOR_FLOATS(GATED)
#undef GATED
