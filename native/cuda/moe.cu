// com.microsoft MoE and QMoE (kernels/cuda/moe.py): routing, both expert products and the activation on the GPU,
// the chosen experts never read by the host (a decode step stays one captured segment). Arithmetic as the CPU
// kernels (kernels/cpu/moe.py, native/cpu/program.c run_moe): float32 routing, sums and intermediates.
#include "common.cuh"

namespace moe {

// An expert weight: MoE's as stored (w), QMoE's scale (q - zero) with q `bits` wide, the lowest bits first, a scale
// per block of `block` cols, the zero points packed along the blocks (zp_blockwise) or along the rows, 2^(bits-1)
// without them.
struct Weights {
  int64_t rows, cols, block, bits, zp_blockwise;
};

template <typename T>
__device__ __forceinline__ float weight(const Weights& g, const T* w, const uint8_t* q, const T* scale,
                                        const uint8_t* zp, int64_t e, int64_t r, int64_t c) {
  if (!q) return ld(w + (e * g.rows + r) * g.cols + c);
  const int64_t pack = 8 / g.bits, mask = (1 << g.bits) - 1, blocks = (g.cols + g.block - 1) / g.block;
  const int64_t row_bytes = (g.cols + pack - 1) / pack, b = c / g.block;
  const float v = (float)((q[(e * g.rows + r) * row_bytes + c / pack] >> ((c % pack) * g.bits)) & mask);
  float zero = (float)(1 << (g.bits - 1));
  if (zp) {
    const int64_t at = g.zp_blockwise ? (e * g.rows + r) * ((blocks + pack - 1) / pack) + b / pack
                                      : e * ((g.rows + pack - 1) / pack) + r / pack;
    const int64_t slot = g.zp_blockwise ? b % pack : r % pack;
    zero = (float)((zp[at] >> (slot * g.bits)) & mask);
  }
  return ld(scale + (e * g.rows + r) * blocks + b) * (v - zero);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffff, v, off);
  return v;
}

// A thread per token: its k experts and weights (native/cpu/program.c run_moe's routing, qmoe: QMoE's).
template <typename T>
__device__ void route(int64_t tokens, int64_t experts, int64_t k, int qmoe, int normalize, const T* router,
                      int32_t* chosen, float* weights) {
  GRID_LOOP(t, tokens) {
    const T* logits = router + t * experts;
    int32_t* mine = chosen + t * k;
    float* w = weights + t * k;
    float top = ld(logits), sum = 0.0f;
    for (int64_t e = 1; e < experts; e++) top = fmaxf(top, ld(logits + e));
    if (!qmoe)
      for (int64_t e = 0; e < experts; e++) sum += expf(ld(logits + e) - top);
    for (int64_t s = 0; s < k; s++) {
      int64_t best = -1;
      float best_key = 0.0f;
      for (int64_t e = 0; e < experts; e++) {
        bool taken = false;
        for (int64_t j = 0; j < s; j++) taken |= mine[j] == e;
        const float key = qmoe ? ld(logits + e) : expf(ld(logits + e) - top) / sum;
        if (!taken && (best < 0 || key > best_key || (qmoe && key == best_key))) { best = e; best_key = key; }
      }
      mine[s] = (int32_t)best;
      w[s] = best_key;
    }
    float total = 0.0f;
    if (qmoe) {
      const float largest = w[0];
      for (int64_t s = 0; s < k; s++) total += w[s] = expf(w[s] - largest);
      for (int64_t s = 0; s < k; s++) w[s] = total != 0.0f ? w[s] / total : 0.0f;
    } else if (normalize) {
      for (int64_t s = 0; s < k; s++) total += w[s];
      for (int64_t s = 0; s < k; s++) w[s] /= total;
    }
  }
}

__device__ __forceinline__ bool runs(int qmoe, float w) { return !qmoe || w > 1e-8f; }

// A warp per (token, slot, row): h[t, s, r] = fc1[e] row r . x[t] (+ bias), float32.
template <typename T>
__device__ void up(int64_t tokens, int64_t k, int qmoe, Weights g, const int32_t* chosen, const float* weights,
                   const T* x, const T* w, const uint8_t* q, const T* scale, const uint8_t* zp, const T* bias,
                   float* h) {
  const int lane = threadIdx.x & 31;
  GRID_LOOP(i, tokens * k * g.rows * 32) {
    const int64_t o = i / 32, r = o % g.rows, ts = o / g.rows, t = ts / k, e = chosen[ts];
    float acc = 0.0f;
    if (runs(qmoe, weights[ts]))
      for (int64_t c = lane; c < g.cols; c += 32) acc += weight(g, w, q, scale, zp, e, r, c) * ld(x + t * g.cols + c);
    acc = warp_sum(acc);
    if (lane == 0) h[o] = bias ? acc + ld(bias + e * g.rows + r) : acc;
  }
}

// act[t, s, m] from h[t, s, :]: 0 relu, 1 silu, 2 swiglu (interleaved), 3 identity, 4 gelu (tanh).
__device__ void activate(int64_t n, int64_t inter, int activation, float alpha, float beta, int has_limit,
                         float limit, const float* h, float* act) {
  GRID_LOOP(i, n) {
    const int64_t ts = i / inter, m = i % inter;
    float v;
    if (activation == 2) {
      const float* row = h + ts * 2 * inter;
      float gate = row[2 * m], lin = row[2 * m + 1];
      if (has_limit) { gate = fminf(gate, limit); lin = fminf(fmaxf(lin, -limit), limit); }
      v = gate / (1.0f + expf(-alpha * gate)) * (lin + beta);
    } else {
      const float x = h[ts * inter + m];
      v = activation == 0 ? fmaxf(x, 0.0f) : activation == 1 ? x / (1.0f + expf(-x))
          : activation == 4 ? 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))) : x;
    }
    act[i] = v;
  }
}

// A warp per (token, output): y[t, o] = sum over its experts, in expert order, of weight (fc2[e] row o . act + bias).
template <typename T>
__device__ void down(int64_t tokens, int64_t k, int qmoe, Weights g, const int32_t* chosen, const float* weights,
                     const float* act, const T* w, const uint8_t* q, const T* scale, const uint8_t* zp, const T* bias,
                     T* y) {
  const int lane = threadIdx.x & 31;
  GRID_LOOP(i, tokens * g.rows * 32) {
    const int64_t o = i / 32, r = o % g.rows, t = o / g.rows;
    float out = 0.0f;
    int32_t last = -1;
    for (int64_t n = 0; n < k; n++) {  // the slots by ascending expert
      int64_t s = -1;
      for (int64_t j = 0; j < k; j++) {
        const int32_t e = chosen[t * k + j];
        if (e > last && (s < 0 || e < chosen[t * k + s])) s = j;
      }
      const int64_t ts = t * k + s, e = chosen[ts];
      last = (int32_t)e;
      if (!runs(qmoe, weights[ts])) continue;
      float acc = 0.0f;
      for (int64_t c = lane; c < g.cols; c += 32) acc += weight(g, w, q, scale, zp, e, r, c) * act[ts * g.cols + c];
      acc = warp_sum(acc);
      out += weights[ts] * (bias ? acc + ld(bias + e * g.rows + r) : acc);
    }
    if (lane == 0) st(y + o, out);
  }
}

}  // namespace moe

#define MOE_KERNELS(S, T)                                                                                              \
  extern "C" __global__ void seamless_moe_route_##S(int64_t tokens, int64_t experts, int64_t k, int qmoe,             \
                                                    int normalize, const T* router, int32_t* chosen, float* weights) { \
    dependent_launch();                                                                                                \
    moe::route(tokens, experts, k, qmoe, normalize, router, chosen, weights);                                          \
  }                                                                                                                    \
  extern "C" __global__ void seamless_moe_up_##S(int64_t tokens, int64_t k, int qmoe, moe::Weights g,                 \
                                                 const int32_t* chosen, const float* weights, const T* x, const T* w, \
                                                 const uint8_t* q, const T* scale, const uint8_t* zp, const T* bias,  \
                                                 float* h) {                                                           \
    dependent_launch();                                                                                                \
    moe::up(tokens, k, qmoe, g, chosen, weights, x, w, q, scale, zp, bias, h);                                         \
  }                                                                                                                    \
  extern "C" __global__ void seamless_moe_down_##S(int64_t tokens, int64_t k, int qmoe, moe::Weights g,               \
                                                   const int32_t* chosen, const float* weights, const float* act,      \
                                                   const T* w, const uint8_t* q, const T* scale, const uint8_t* zp,    \
                                                   const T* bias, T* y) {                                              \
    dependent_launch();                                                                                                \
    moe::down(tokens, k, qmoe, g, chosen, weights, act, w, q, scale, zp, bias, y);                                     \
  }
FOR_FLOATS(MOE_KERNELS)
#undef MOE_KERNELS

extern "C" __global__ void seamless_moe_activate(int64_t n, int64_t inter, int activation, float alpha, float beta,
                                                 int has_limit, float limit, const float* h, float* act) {
  dependent_launch();
  moe::activate(n, inter, activation, alpha, beta, has_limit, limit, h, act);
}
