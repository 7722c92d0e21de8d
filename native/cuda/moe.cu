// com.microsoft MoE and QMoE (kernels/cuda/moe.py): routing, both expert products and the activation on the GPU,
// the chosen experts never read by the host (a decode step stays one captured segment). Arithmetic as the CPU
// kernels (kernels/cpu/moe.py, native/cpu/program.c run_moe): float32 routing, sums and intermediates.
#include "common.cuh"

namespace moe {

// An expert weight: MoE's as stored (w), QMoE's scale (q - zero) with q `bits` wide, the lowest bits first, a scale
// per block of `block` cols (block_shift: log2(block) when a power of two, else -1), the zero points packed along the
// blocks (zp_blockwise) or along the rows, 2^(bits-1) without them.

__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffff, v, off);
  return v;
}

// The zero point of a 4-bit QMoE weight of expert e's row r (row: e * g.rows + r) in quantization block b of the row's
// `blocks`: packed along the blocks (zp_blockwise) or along the rows, 8 without zero points.
__device__ __forceinline__ float zero_of(const MoeWeights& g, const uint8_t* zp, int64_t e, int64_t r, int64_t row,
                                         int b, int blocks) {
  if (zp && g.zp_blockwise) return (float)((zp[row * ((blocks + 1) / 2) + b / 2] >> ((b % 2) * 4)) & 15);
  if (zp) return (float)((zp[e * ((g.rows + 1) / 2) + r / 2] >> ((r % 2) * 4)) & 15);
  return 8.0f;
}

// Whether QMoE rows take the chunked path: 4 bits, blocks of 32 columns or more, rows of whole 32-column chunks
// (16 bytes), weights and activations 16-byte aligned (the builder's int4 MoE exports).
template <typename X>
__device__ __forceinline__ bool chunked(const MoeWeights& g, const uint8_t* q, const X* x) {
  return q && g.bits == 4 && g.block_shift >= 5 && g.cols % 32 == 0 && !(((uintptr_t)q | (uintptr_t)x) & 15);
}

constexpr int CHUNKS_IN_FLIGHT = 4;  // a lane's chunks loaded before any is summed

// sum over slots s of weight(s) * (expert(s)'s row r . x(s)) on the chunked path, a lane's share (warp_sum adds
// them): the slots' 32-column chunks are dealt to the lanes together, CHUNKS_IN_FLIGHT a lane loaded at once, so a
// row of 512 columns keeps every lane busy and a token's experts' loads are in flight together. slot(s, e, x, w)
// gives slot s's expert, activations and weight (0: skipped, not read). Each chunk: 16 bytes, one scale and zero
// point, dequantized without conversions (common.cuh nibble_dot8).
template <typename T, typename X, typename Slot>
__device__ __forceinline__ float chunked_sum(const MoeWeights& g, const uint8_t* q, const T* scale, const uint8_t* zp,
                                             int64_t r, int slots, Slot slot, int lane) {
  const int chunks = (int)g.cols / 32, items = slots * chunks, row_bytes = (int)g.cols / 2;
  const int blocks = (int)((g.cols + g.block - 1) / g.block);
  float acc = 0.0f;
  for (int j0 = 0; j0 < items; j0 += 32 * CHUNKS_IN_FLIGHT) {
    uint4 packed[CHUNKS_IN_FLIGHT];
    float sc[CHUNKS_IN_FLIGHT], offset[CHUNKS_IN_FLIGHT];  // only the loads are held: x and weight read again below
    unsigned live = 0;
#pragma unroll
    for (int u = 0; u < CHUNKS_IN_FLIGHT; u++) {
      const int j = j0 + u * 32 + lane, s = j / chunks, c0 = (j - s * chunks) * 32;
      int64_t e = 0;
      const X* x;
      float weight = 0.0f;
      if (j < items) slot(s, e, x, weight);
      if (weight == 0.0f) continue;
      live |= 1u << u;
      const int64_t row = e * g.rows + r;
      const int b = c0 >> g.block_shift;
      packed[u] = *reinterpret_cast<const uint4*>(q + row * row_bytes + c0 / 2);
      sc[u] = ld(scale + row * blocks + b);
      offset[u] = 8388608.0f + zero_of(g, zp, e, r, row, b, blocks);
    }
#pragma unroll
    for (int u = 0; u < CHUNKS_IN_FLIGHT; u++) {
      const int j = j0 + u * 32 + lane, s = j / chunks, c0 = (j - s * chunks) * 32;
      if (!((live >> u) & 1)) continue;
      int64_t e;
      const X* x;
      float weight;
      slot(s, e, x, weight);
      float dot = 0.0f, xs[8];
#pragma unroll
      for (int w = 0; w < 4; w++) {
        load8(x + c0 + 8 * w, xs);
        nibble_dot8(reinterpret_cast<const uint32_t*>(&packed[u])[w], offset[u], xs, dot);
      }
      acc += weight * (dot * sc[u]);
    }
  }
  return acc;
}

// A lane's share of expert e's rows r0 .. r0 + R - 1 (those below g.rows) times x on the chunked path: a pass loads a
// 16-byte chunk of each row at once and reads x's 32 columns once for all of them.
template <int R, typename T, typename X>
__device__ __forceinline__ void rows_dot(const MoeWeights& g, const uint8_t* q, const T* scale, const uint8_t* zp,
                                         int64_t e, int64_t r0, const X* x, int lane, float* acc) {
  const int cols = (int)g.cols, row_bytes = cols / 2, blocks = (int)((g.cols + g.block - 1) / g.block);
  for (int c0 = lane * 32; c0 < cols; c0 += 32 * 32) {
    const int b = c0 >> g.block_shift;
    uint4 packed[R];
    float sc[R], offset[R], dot[R];
#pragma unroll
    for (int u = 0; u < R; u++) {
      const int64_t r = r0 + u < g.rows ? r0 + u : r0, row = e * g.rows + r;  // a missing row reads row r0 again
      packed[u] = *reinterpret_cast<const uint4*>(q + row * row_bytes + c0 / 2);
      sc[u] = ld(scale + row * blocks + b);
      offset[u] = 8388608.0f + zero_of(g, zp, e, r, row, b, blocks);
      dot[u] = 0.0f;
    }
#pragma unroll
    for (int w = 0; w < 4; w++) {
      float xs[8];
      load8(x + c0 + 8 * w, xs);
#pragma unroll
      for (int u = 0; u < R; u++) nibble_dot8(reinterpret_cast<const uint32_t*>(&packed[u])[w], offset[u], xs, dot[u]);
    }
#pragma unroll
    for (int u = 0; u < R; u++) acc[u] += dot[u] * sc[u];
  }
}

// One lane's share of expert e's row r times the vector x (a warp's lanes together: the whole row; warp_sum adds
// them) off the chunked path: QMoE rows a 32-bit word a lane when whole words tile the row (128 bytes a warp step),
// else a byte; MoE's float rows an element a lane.
template <typename T, typename X>
__device__ __forceinline__ float row_dot(const MoeWeights& g, const T* w, const uint8_t* q, const T* scale,
                                         const uint8_t* zp, int64_t e, int64_t r, const X* x, int lane) {
  const int cols = (int)g.cols;
  float acc = 0.0f;
  if (!q) {
    const T* row = w + (e * g.rows + r) * g.cols;
    for (int c = lane; c < cols; c += 32) acc += ld(row + c) * ld(x + c);
    return acc;
  }
  const int bits = (int)g.bits, pack = 8 / bits, mask = (1 << bits) - 1;
  const int blocks = (cols + (int)g.block - 1) / (int)g.block, row_bytes = (cols + pack - 1) / pack;
  const uint8_t* qr = q + (e * g.rows + r) * row_bytes;
  const T* sr = scale + (e * g.rows + r) * blocks;
  float row_zero = (float)(1 << (bits - 1));
  const uint8_t* zr = nullptr;
  if (zp && g.zp_blockwise) {
    zr = zp + (e * g.rows + r) * ((blocks + pack - 1) / pack);
  } else if (zp) {
    row_zero = (float)((zp[e * ((g.rows + pack - 1) / pack) + r / pack] >> ((r % pack) * bits)) & mask);
  }
  auto column = [&](int c, int code) {  // one quantized value's product
    const int b = g.block_shift >= 0 ? c >> g.block_shift : c / (int)g.block;
    const float zero = zr ? (float)((zr[b / pack] >> ((b % pack) * bits)) & mask) : row_zero;
    return ld(sr + b) * ((float)code - zero) * ld(x + c);
  };
  if (row_bytes % 4 == 0) {
    const uint32_t* words = reinterpret_cast<const uint32_t*>(qr);  // rows of whole words stay word-aligned
    for (int j = lane; j < row_bytes / 4; j += 32) {
      const uint32_t word = words[j];
      const int c0 = j * 4 * pack;
#pragma unroll 8
      for (int p = 0; p < 4 * pack; p++)
        if (c0 + p < cols) acc += column(c0 + p, (int)((word >> (p * bits)) & mask));
    }
  } else {
    for (int j = lane; j < row_bytes; j += 32) {
      const int byte = qr[j], c0 = j * pack;
      for (int p = 0; p < pack && c0 + p < cols; p++) acc += column(c0 + p, (byte >> (p * bits)) & mask);
    }
  }
  return acc;
}

// The better of two (key, expert) candidates: the larger key; on a tie the lower expert (MoE) or the higher (QMoE).
__device__ __forceinline__ bool better(float key, int e, float other_key, int other, int qmoe) {
  if (other < 0) return e >= 0;
  if (e < 0) return false;
  return key > other_key || (key == other_key && (qmoe ? e > other : e < other));
}

constexpr int ROUTE_HELD = 8;  // experts a lane keeps in registers on routing's fast path (up to 256 a warp)

// A float's order as an unsigned integer's (v not NaN; -0 as +0, which compares equal to it), and back.
__device__ __forceinline__ unsigned ordered(float v) {
  const unsigned b = __float_as_uint(v + 0.0f);
  return (b & 0x80000000u) ? ~b : b | 0x80000000u;
}
__device__ __forceinline__ float unordered(unsigned u) {
  return __uint_as_float((u & 0x80000000u) ? u & 0x7FFFFFFFu : ~u);
}

// The k best of a token's values v (lane l holds experts l + 32 m, m < ROUTE_HELD; none NaN) as route picks them:
// each pick one warp max of the ordered keys, then one of the experts holding it (ties: the lower expert for MoE, the
// higher for QMoE), two warp reductions where route's general loop shuffles key and expert five times each.
__device__ __forceinline__ void pick_held(const float* v, int n, int64_t k, int qmoe, int lane, int32_t* chosen,
                                          float* weights) {
  unsigned taken = 0;
  for (int64_t s = 0; s < k; s++) {
    unsigned key = 0;  // below every number's key
    int best = -1;
#pragma unroll
    for (int m = 0; m < ROUTE_HELD; m++) {
      const int e = lane + 32 * m;
      if (e >= n || ((taken >> m) & 1)) continue;
      const unsigned u = ordered(v[m]);
      if (u > key || (qmoe && u == key)) { key = u; best = e; }
    }
    const unsigned top = __reduce_max_sync(0xffffffffu, key);
    const int mine = best >= 0 && key == top ? best : (qmoe ? -1 : INT_MAX);
    int winner = qmoe ? __reduce_max_sync(0xffffffffu, mine) : __reduce_min_sync(0xffffffffu, mine);
    if (top == 0) winner = -1;  // no expert left (k above the experts)
    if (winner >= 0 && winner % 32 == lane) taken |= 1u << (winner / 32);
    if (lane == 0) {
      chosen[s] = winner;
      weights[s] = winner >= 0 ? unordered(top) : 0.0f;
    }
  }
}

// A warp per token: its k experts and weights (native/cpu/program.c run_moe's routing, qmoe: QMoE's). Lane l holds
// experts l, l + 32, ... (at most 64 of them: taken, a bit each); up to 256 experts without NaN: pick_held.
template <typename T>
__device__ void route(int64_t tokens, int64_t experts, int64_t k, int qmoe, int normalize, const T* router,
                      int32_t* chosen, float* weights) {
  const int lane = threadIdx.x & 31, n = (int)experts;
  GRID_LOOP(i, tokens * 32) {
    const int64_t t = i / 32;
    const T* logits = router + t * experts;
    float top = -INFINITY, sum = 0.0f;
    for (int e = lane; e < n; e += 32) top = fmaxf(top, ld(logits + e));
    for (int off = 16; off > 0; off >>= 1) top = fmaxf(top, __shfl_xor_sync(0xffffffff, top, off));
    if (!qmoe) {
      for (int e = lane; e < n; e += 32) sum += expf(ld(logits + e) - top);
      sum = warp_sum(sum);
    }
    float held[ROUTE_HELD];
    bool nan = false;
#pragma unroll
    for (int m = 0; m < ROUTE_HELD; m++) {
      const int e = lane + 32 * m;
      held[m] = e < n ? (qmoe ? ld(logits + e) : expf(ld(logits + e) - top) / sum) : 0.0f;
      nan |= held[m] != held[m];
    }
    if (n <= 32 * ROUTE_HELD && !__any_sync(0xffffffffu, nan)) {
      pick_held(held, n, k, qmoe, lane, chosen + t * k, weights + t * k);
    } else {
      uint64_t taken = 0;
      for (int64_t s = 0; s < k; s++) {
        float key = 0.0f;
        int best = -1;
        for (int e = lane, m = 0; e < n; e += 32, m++) {
          const float v = qmoe ? ld(logits + e) : expf(ld(logits + e) - top) / sum;
          if (!((taken >> m) & 1) && better(v, e, key, best, qmoe)) { key = v; best = e; }
        }
        for (int off = 16; off > 0; off >>= 1) {
          const float other_key = __shfl_xor_sync(0xffffffff, key, off);
          const int other = __shfl_xor_sync(0xffffffff, best, off);
          if (better(other_key, other, key, best, qmoe)) { key = other_key; best = other; }
        }
        if (best >= 0 && best % 32 == lane) taken |= 1ull << (best / 32);
        if (lane == 0) {
          chosen[t * k + s] = best;
          weights[t * k + s] = key;
        }
      }
    }
    __syncwarp();
    if (lane == 0) {
      float* w = weights + t * k;
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
}

// A warp per token, k = 2 (validated at Compile): Phi-3.5-MoE's sparse mixer as ORT's CUDA kernels route. Slot 0 is the
// largest logit (ties to the lower expert), weighted by the softmax over the logits it does not mask, those within
// 2 jitter_eps of it relative to max(|logit|, it); slot 1 the same among the experts but slot 0's.
template <typename T>
__device__ void route_sparse_mixer(int64_t tokens, int64_t experts, const T* router, int32_t* chosen, float* weights) {
  const float jitter_eps = 0.01f;
  const int lane = threadIdx.x & 31, n = (int)experts;
  GRID_LOOP(i, tokens * 32) {
    const int64_t t = i / 32;
    const T* logits = router + t * experts;
    int first = -1;
    for (int s = 0; s < 2; s++) {
      float key = 0.0f;
      int best = -1;
      for (int e = lane; e < n; e += 32)
        if (e != first && better(ld(logits + e), e, key, best, 0)) { key = ld(logits + e); best = e; }
      for (int off = 16; off > 0; off >>= 1) {
        const float other_key = __shfl_xor_sync(0xffffffff, key, off);
        const int other = __shfl_xor_sync(0xffffffff, best, off);
        if (better(other_key, other, key, best, 0)) { key = other_key; best = other; }
      }
      float sum = 0.0f;
      for (int e = lane; e < n; e += 32) {
        const float v = ld(logits + e);
        if (e != first && !(key - v > 2.0f * jitter_eps * fmaxf(fabsf(v), key))) sum += expf(v - key);
      }
      sum = warp_sum(sum);
      if (lane == 0) {
        chosen[t * 2 + s] = best;
        weights[t * 2 + s] = 1.0f / sum;
      }
      first = best;
    }
  }
}

__device__ __forceinline__ bool runs(int qmoe, float w) { return !qmoe || w > 1e-8f; }

// An activation of one value (kind: 0 relu, 1 silu, 3 identity, 4 gelu (tanh)), and swiglu's (2) of a gate and a
// linear value (rows 2m and 2m + 1 of the up product: interleaved).
__device__ __forceinline__ float activation_of(const MoeActivation& a, float x) {
  return a.kind == 0 ? fmaxf(x, 0.0f) : a.kind == 1 ? x / (1.0f + expf(-x))
         : a.kind == 4 ? 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))) : x;
}
__device__ __forceinline__ float swiglu(const MoeActivation& a, float gate, float lin) {
  if (a.has_limit) { gate = fminf(gate, a.limit); lin = fminf(fmaxf(lin, -a.limit), a.limit); }
  return gate / (1.0f + expf(-a.alpha * gate)) * (lin + a.beta);
}

// An up product's rows r (even) and r + 1 (has_next: below its rows) of pair p, bias added: stored as they are
// (out: [pairs, rows]) or, with a.kind >= 0, activated (out: [pairs, inter]; swiglu: one value of the two).
__device__ __forceinline__ void store_up(const MoeActivation& a, int64_t p, int64_t rows, int64_t r, float v0,
                                         float v1, bool has_next, float* out) {
  if (a.kind == 2) {
    out[p * (rows / 2) + r / 2] = swiglu(a, v0, v1);
    return;
  }
  const bool act = a.kind >= 0;
  out[p * rows + r] = act ? activation_of(a, v0) : v0;
  if (has_next) out[p * rows + r + 1] = act ? activation_of(a, v1) : v1;
}

// act[t, s, m] from h[t, s, :] (the up product, stored as it is), times gate[t, s, m] (FC3's product) where there is
// one: after `grouped` (its registers did not take store_up) and FC3's product.
__device__ void activate(int64_t n, int64_t inter, MoeActivation a, const float* h, const float* gate, float* act) {
  GRID_LOOP(i, n) {
    const int64_t ts = i / inter, m = i % inter;
    const float v = a.kind == 2 ? swiglu(a, h[ts * 2 * inter + 2 * m], h[ts * 2 * inter + 2 * m + 1])
                                : activation_of(a, h[ts * inter + m]);
    act[i] = gate ? v * gate[i] : v;
  }
}

// A warp per (token, slot, MOE_UP_ROWS rows): fc1[e] row r . x[t] (+ bias), float32, stored by store_up (activated
// where a.kind says). Rows a warp at once so that their loads are in flight together (a row of 2048 4-bit columns is 2
// chunks a lane); the grid is launched for rows / MOE_UP_ROWS warps (kernels/cuda/moe.py), any grid computes every row.
static_assert(MOE_UP_ROWS % 2 == 0, "moe.cu up: rows in the pairs store_up takes (swiglu's gate and linear rows)");
template <typename T>
__device__ void up(int64_t tokens, int64_t k, int qmoe, MoeWeights g, MoeActivation a, const int32_t* chosen,
                   const float* weights, const T* x, const T* w, const uint8_t* q, const T* scale, const uint8_t* zp,
                   const T* bias, float* out) {
  const int lane = threadIdx.x & 31;
  const int64_t groups = (g.rows + MOE_UP_ROWS - 1) / MOE_UP_ROWS;
  GRID_LOOP(i, tokens * k * groups * 32) {
    const int64_t o = i / 32, r0 = o % groups * MOE_UP_ROWS, ts = o / groups, t = ts / k, e = chosen[ts];
    const bool live = runs(qmoe, weights[ts]);
    const T* xt = x + t * g.cols;
    float acc[MOE_UP_ROWS] = {};
    if (live && chunked(g, q, xt)) {
      rows_dot<MOE_UP_ROWS>(g, q, scale, zp, e, r0, xt, lane, acc);
    } else if (live) {
#pragma unroll
      for (int u = 0; u < MOE_UP_ROWS; u++)
        if (r0 + u < g.rows) acc[u] = row_dot(g, w, q, scale, zp, e, r0 + u, xt, lane);
    }
#pragma unroll
    for (int u = 0; u < MOE_UP_ROWS; u++) {
      acc[u] = warp_sum(acc[u]);
      if (bias && r0 + u < g.rows) acc[u] += ld(bias + e * g.rows + r0 + u);
    }
#pragma unroll
    for (int u = 0; u < MOE_UP_ROWS; u += 2)
      if (lane == 0 && r0 + u < g.rows) store_up(a, ts, g.rows, r0 + u, acc[u], acc[u + 1], r0 + u + 1 < g.rows, out);
  }
}

// A warp per (token, output): y[t, o] = sum over its experts of weight (fc2[e] row o . act + bias). DEALT (rows of
// fewer chunks than a warp has lanes, kernels/cuda/moe.py): every slot's chunks dealt to the lanes at once
// (chunked_sum); else, and off the chunked path, one expert after another in expert order, a row's chunks a lane's
// passes (fewer registers: more warps resident where rows are long).
template <typename T, bool DEALT>
__device__ void down(int64_t tokens, int64_t k, int qmoe, MoeWeights g, const int32_t* chosen, const float* weights,
                     const float* act, const T* w, const uint8_t* q, const T* scale, const uint8_t* zp, const T* bias,
                     T* y) {
  const int lane = threadIdx.x & 31;
  GRID_LOOP(i, tokens * g.rows * 32) {
    const int64_t o = i / 32, r = o % g.rows, t = o / g.rows;
    if (DEALT && chunked(g, q, act)) {  // each chunk's product weighted
      float out = warp_sum(chunked_sum<T, float>(g, q, scale, zp, r, (int)k,
                                                [&](int s, int64_t& e, const float*& xs, float& wt) {
        const int64_t ts = t * k + s;
        e = chosen[ts];
        xs = act + ts * g.cols;
        wt = runs(qmoe, weights[ts]) ? weights[ts] : 0.0f;
      }, lane));
      if (lane == 0) {
        for (int64_t s = 0; bias && s < k; s++)
          if (runs(qmoe, weights[t * k + s])) out += weights[t * k + s] * ld(bias + chosen[t * k + s] * g.rows + r);
        st(y + o, out);
      }
      continue;
    }
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
      if (chunked(g, q, act + ts * g.cols)) rows_dot<1>(g, q, scale, zp, e, r, act + ts * g.cols, lane, &acc);
      else acc = row_dot(g, w, q, scale, zp, e, r, act + ts * g.cols, lane);
      acc = warp_sum(acc);
      out += weights[ts] * (bias ? acc + ld(bias + e * g.rows + r) : acc);
    }
    if (lane == 0) st(y + o, out);
  }
}

// A prompt's (token, slot) pairs grouped by expert, for `grouped` and `grouped_mma`: one block of MOE_GROUP_THREADS
// threads counts each expert's pairs, a warp lays them out (order: each expert's pairs together, experts ascending;
// within an expert in no set order: each pair's product is its own) and lists the tiles of up to `tile` pairs (tiles:
// expert, first pair in order, pairs; ntiles: how many, at most pairs / tile + experts). 2 * experts int32 of shared
// memory.
__device__ void group(int64_t pairs, int64_t experts, int tile, const int32_t* chosen, int32_t* order,
                      int32_t* tiles, int32_t* ntiles) {
  extern __shared__ int32_t counts[];  // [experts] pairs, then [experts] each expert's next place in order
  int32_t* next = counts + experts;
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int32_t e = chosen[p];
    if (e >= 0 && e < experts) atomicAdd(&counts[e], 1);
  }
  __syncthreads();
  if (threadIdx.x < 32) {  // lane l lays out experts [lo, hi): its sums, the warp's running sums before them
    const int lane = threadIdx.x;
    const int64_t per = (experts + 31) / 32, lo = min(lane * per, experts), hi = min(lo + per, experts);
    int32_t own_pairs = 0, own_tiles = 0;
    for (int64_t e = lo; e < hi; e++) {
      own_pairs += counts[e];
      own_tiles += (counts[e] + tile - 1) / tile;
    }
    int32_t before_pairs = own_pairs, before_tiles = own_tiles;  // inclusive scans, then less their own
    for (int off = 1; off < 32; off <<= 1) {
      const int32_t p = __shfl_up_sync(0xffffffff, before_pairs, off);
      const int32_t t = __shfl_up_sync(0xffffffff, before_tiles, off);
      if (lane >= off) { before_pairs += p; before_tiles += t; }
    }
    if (lane == 31) *ntiles = before_tiles;
    before_pairs -= own_pairs;
    before_tiles -= own_tiles;
    for (int64_t e = lo; e < hi; e++) {
      next[e] = before_pairs;
      for (int32_t first = 0; first < counts[e]; first += tile, before_tiles++) {
        tiles[3 * before_tiles] = (int32_t)e;
        tiles[3 * before_tiles + 1] = before_pairs + first;
        tiles[3 * before_tiles + 2] = min(tile, counts[e] - first);
      }
      before_pairs += counts[e];
    }
  }
  __syncthreads();
  for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int32_t e = chosen[p];
    if (e >= 0 && e < experts) order[atomicAdd(&next[e], 1)] = (int32_t)p;
  }
}

// A prompt's products of 4-bit expert rows on the chunked path (blocks of 32 columns or more, rows of whole 32-column
// chunks; kernels/cuda/moe.py checks): out[p, r] = (pair p runs ? expert(p)'s row r . x(p) : 0) + bias, float32, for
// MOE_TILE pairs of one expert a block (blockIdx.x: a tile of `group`'s, past ntiles none) and MOE_TILE_ROWS rows
// (blockIdx.y), so each weight is read once for the tile's pairs, not once a pair. x(p): row p / k of x (up: the
// tokens' activations) or row p (down: each pair's activated intermediate). Each 32-column chunk as rows_dot sums it
// (its dot of (q - zero) . x, then times its scale), the pairs' activations a window of columns in shared memory.
template <typename T, typename X>
__device__ void grouped(int64_t k, int by_pair, int qmoe, MoeWeights g, const int32_t* tiles, const int32_t* ntiles,
                        const int32_t* order, const float* weights, const X* x, const uint8_t* q, const T* scale,
                        const uint8_t* zp, const T* bias, float* out) {
  constexpr int WINDOW = 32768 / (MOE_TILE * (int)sizeof(X));  // columns of the window: 32 KB of shared memory
  __shared__ __align__(16) X xs[MOE_TILE * WINDOW];
  __shared__ const X* rows_of[MOE_TILE];
  const int tile = blockIdx.x;
  if (tile >= *ntiles) return;
  const int64_t e = tiles[3 * tile], first = tiles[3 * tile + 1];
  const int n = tiles[3 * tile + 2];
  if (threadIdx.x < MOE_TILE) {
    const int64_t p = threadIdx.x < n ? order[first + threadIdx.x] : 0;
    rows_of[threadIdx.x] = x + (by_pair ? p : p / k) * g.cols;
  }
  const int kl = threadIdx.x & 3, cols = (int)g.cols, row_bytes = cols / 2;
  const int blocks = (int)((g.cols + g.block - 1) / g.block);
  const int64_t r0 = blockIdx.y * (int64_t)MOE_TILE_ROWS + 2 * (threadIdx.x >> 2);
  float acc[2][MOE_TILE] = {};
  for (int w0 = 0; w0 < cols; w0 += WINDOW) {
    const int width = min(WINDOW, cols - w0);
    __syncthreads();  // rows_of written; the last window read
    for (int i = threadIdx.x; i < MOE_TILE * WINDOW; i += blockDim.x) {
      const int j = i / WINDOW, c = i % WINDOW;
      xs[i] = j < n && c < width ? rows_of[j][w0 + c] : X(0.0f);
    }
    __syncthreads();
    for (int ch = kl; ch < width / 32; ch += 4) {
      const int c0 = w0 + ch * 32, b = c0 >> g.block_shift;
      uint4 packed[2];
      float sc[2], offset[2], dot[2][MOE_TILE] = {};
#pragma unroll
      for (int u = 0; u < 2; u++) {
        const int64_t r = r0 + u < g.rows ? r0 + u : 0, row = e * g.rows + r;  // a missing row reads row 0
        packed[u] = *reinterpret_cast<const uint4*>(q + row * row_bytes + c0 / 2);
        sc[u] = ld(scale + row * blocks + b);
        offset[u] = 8388608.0f + zero_of(g, zp, e, r, row, b, blocks);
      }
#pragma unroll
      for (int w = 0; w < 4; w++) {
        float wv[2][8];
        nibbles8(reinterpret_cast<const uint32_t*>(&packed[0])[w], offset[0], wv[0]);
        nibbles8(reinterpret_cast<const uint32_t*>(&packed[1])[w], offset[1], wv[1]);
#pragma unroll
        for (int j = 0; j < MOE_TILE; j++) {
          if (j >= n) break;  // a short tile (n: the block's)
          float xv[8];
          load8(xs + j * WINDOW + ch * 32 + 8 * w, xv);
#pragma unroll
          for (int i = 0; i < 8; i++) {
            dot[0][j] += xv[i] * wv[0][i];
            dot[1][j] += xv[i] * wv[1][i];
          }
        }
      }
#pragma unroll
      for (int j = 0; j < MOE_TILE; j++) {
        acc[0][j] += dot[0][j] * sc[0];
        acc[1][j] += dot[1][j] * sc[1];
      }
    }
  }
#pragma unroll
  for (int u = 0; u < 2; u++) {
#pragma unroll
    for (int j = 0; j < MOE_TILE; j++) {  // the 4 threads of a row pair: adjacent lanes
      float v = acc[u][j];
      v += __shfl_xor_sync(0xffffffff, v, 1);
      v += __shfl_xor_sync(0xffffffff, v, 2);
      const int64_t r = r0 + u;
      if (kl == 0 && j < n && r < g.rows) {
        const int64_t p = order[first + j];
        out[p * g.rows + r] = (runs(qmoe, weights[p]) ? v : 0.0f) + (bias ? ld(bias + e * g.rows + r) : 0.0f);
      }
    }
  }
}

// `grouped` on tensor cores for float16 models (sm_80 and up): tiles of up to MOE_MMA_PAIRS (32) pairs of one expert
// (`group`'s), MOE_MMA_ROWS expert rows a block (blockIdx.y), 8 warps of MMA_ROW_TILES tiles of 8 rows each. Per group
// of 32 columns (inside one quantization block: blocks of 32 or more, powers of two), two mma.sync m16n8k16 give 16
// pairs' dots with 8 rows: A the pairs' activations (lane c + 4g: pairs c and c + 8, columns 8g..8g+7, half_pairs),
// B the rows' (q - z) in half (exact, nibble_pairs), float32 sums; each lane scales its D columns' sums by their
// rows' scales and adds them up (quantization.cu's mma rows kernel, with pairs for rows); each B serves two such A
// (tiles of 16 pairs, each weight read and made half once a tile, were 19-27 % slower: session 64). The activations
// pass through shared memory as halves, a window of columns at a time: x (up) as it is; down's float32 activations
// (SPLIT) as hi + lo halves, two mmas each (about 22 bits of each value kept), each pair's row first scaled by a power
// of two that puts its largest value at 2^14 (within float16's range; undone on the sums, exactly).
constexpr int MMA_PAD = 32;  // halves after each row of the window: rows 64 bytes apart modulo 128 (the window's
                             // columns: 8192 / MOE_MMA_PAIRS), so lanes reading rows c and c + 1 hit other banks
constexpr int MMA_ROW_TILES = MOE_MMA_ROWS / 8 / 8;  // a warp's tiles of 8 rows: A's fragments loaded once for them
constexpr int MMA_AHEAD = 2;  // groups of 32 columns whose weights a lane loads before it computes any

template <bool SPLIT, typename X>
__device__ void grouped_mma(int64_t k, int qmoe, MoeWeights g, MoeActivation a, const int32_t* tiles,
                            const int32_t* ntiles, const int32_t* order, const float* weights, const X* x,
                            const uint8_t* q, const __half* scale, const uint8_t* zp, const __half* bias, float* out) {
  constexpr int PAIRS = MOE_MMA_PAIRS, M = PAIRS / 16, WINDOW = 8192 / PAIRS;  // M: the mmas' A a B serves
  static_assert(PAIRS % 16 == 0, "grouped_mma: a tile's pairs are the rows of whole mma A");
  __shared__ __align__(16) __half hi[PAIRS][WINDOW + MMA_PAD];
  __shared__ __align__(16) __half lo[SPLIT ? PAIRS : 1][WINDOW + MMA_PAD];
  __shared__ int shift[PAIRS];  // SPLIT: pair j's row was scaled by 2^-shift[j]
  __shared__ const X* rows_of[PAIRS];
  const int tile = blockIdx.x;
  if (tile >= *ntiles) return;
  const int64_t e = tiles[3 * tile], first = tiles[3 * tile + 1];
  const int n = tiles[3 * tile + 2], cols = (int)g.cols, row_bytes = cols / 2;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane & 3, c = lane >> 2;
  const int blocks = (int)((g.cols + g.block - 1) / g.block), warps = blockDim.x >> 5;
  if (threadIdx.x < PAIRS) {
    const int64_t p = threadIdx.x < n ? order[first + threadIdx.x] : 0;
    rows_of[threadIdx.x] = x + (SPLIT ? p : p / k) * g.cols;  // down: each pair's activations; up: its token's
  }
  __syncthreads();
  if constexpr (SPLIT) {
    for (int j = warp; j < PAIRS; j += warps) {
      float top = 0.0f;
      for (int col = lane; j < n && col < cols; col += 32) top = fmaxf(top, fabsf(ld(rows_of[j] + col)));
      for (int off = 16; off > 0; off >>= 1) top = fmaxf(top, __shfl_xor_sync(0xffffffff, top, off));
      if (lane == 0) shift[j] = top > 0.0f && isfinite(top) ? max(ilogbf(top) - 14, -100) : 0;
    }
  }
  const int64_t base = blockIdx.y * (int64_t)MOE_MMA_ROWS + warp * 8 * MMA_ROW_TILES;  // the warp's first row
  float acc[MMA_ROW_TILES][M][4] = {};
  for (int w0 = 0; w0 < cols; w0 += WINDOW) {
    const int width = min(WINDOW, cols - w0);  // a multiple of 32
    __syncthreads();  // rows_of and shift written; the last window read
    for (int i = threadIdx.x; i < PAIRS * WINDOW / 8; i += blockDim.x) {  // 8 columns a thread
      const int j = i / (WINDOW / 8), c8 = i % (WINDOW / 8) * 8;
      const bool live = j < n && c8 < width;
      if constexpr (SPLIT) {
        float v[8] = {}, h[8], l[8];
        if (live) load8(rows_of[j] + w0 + c8, v);
        for (int u = 0; u < 8; u++) {
          const float a = ldexpf(v[u], -shift[j]);
          h[u] = __half2float(__float2half_rn(a));
          l[u] = isfinite(h[u]) ? a - h[u] : 0.0f;
        }
        store8(&hi[j][c8], h);
        store8(&lo[j][c8], l);
      } else {
        *(uint4*)&hi[j][c8] = live ? *(const uint4*)(rows_of[j] + w0 + c8) : make_uint4(0, 0, 0, 0);
      }
    }
    __syncthreads();
    if (base >= g.rows) continue;  // no rows of the expert's left for this warp (it still takes part in the barriers)
    for (int g0 = 0; g0 < width / 32; g0 += MMA_AHEAD) {
      uint32_t word[MMA_AHEAD][MMA_ROW_TILES];
      float zero[MMA_AHEAD][MMA_ROW_TILES], sc[MMA_AHEAD][MMA_ROW_TILES][2];
#pragma unroll
      for (int u = 0; u < MMA_AHEAD; u++) {
        const bool live = g0 + u < width / 32;
        const int col = w0 + (g0 + u) * 32, b = col >> g.block_shift;
#pragma unroll
        for (int t = 0; t < MMA_ROW_TILES; t++) {
          const int64_t rd = base + t * 8 + 2 * gq, rb = base + t * 8 + c < g.rows ? base + t * 8 + c : 0;
          const int64_t row = e * g.rows + rb;  // D's first row; B's row (a missing one reads row 0)
          word[u][t] = live ? __ldg((const uint32_t*)(q + row * row_bytes + col / 2 + 4 * gq)) : 0u;
          zero[u][t] = zero_of(g, zp, e, rb, row, b, blocks);
          sc[u][t][0] = live && rd < g.rows ? ld(scale + (e * g.rows + rd) * blocks + b) : 0.0f;
          sc[u][t][1] = live && rd + 1 < g.rows ? ld(scale + (e * g.rows + rd + 1) * blocks + b) : 0.0f;
        }
      }
#pragma unroll
      for (int u = 0; u < MMA_AHEAD; u++) {
        if (g0 + u >= width / 32) break;  // the same for the whole warp
        const int at = (g0 + u) * 32 + 8 * gq;
        uint32_t a[M][2][4], l[M][2][4];  // pairs 16 m + c and 16 m + c + 8
#pragma unroll
        for (int m = 0; m < M; m++) {
          half_pairs((const uint32_t*)&hi[16 * m + c][at], a[m][0]);
          half_pairs((const uint32_t*)&hi[16 * m + c + 8][at], a[m][1]);
          if constexpr (SPLIT) {
            half_pairs((const uint32_t*)&lo[16 * m + c][at], l[m][0]);
            half_pairs((const uint32_t*)&lo[16 * m + c + 8][at], l[m][1]);
          }
        }
#pragma unroll
        for (int t = 0; t < MMA_ROW_TILES; t++) {
          uint32_t wb[4];
          nibble_pairs(word[u][t], __float2half2_rn(-1024.0f - zero[u][t]), __float2half2_rn(-64.0f - zero[u][t]), wb);
          const uint32_t b0[2] = {wb[0], wb[1]}, b1[2] = {wb[2], wb[3]};
#pragma unroll
          for (int m = 0; m < M; m++) {
            float d[4] = {};
            const uint32_t f0[4] = {a[m][0][0], a[m][1][0], a[m][0][1], a[m][1][1]};
            const uint32_t f1[4] = {a[m][0][2], a[m][1][2], a[m][0][3], a[m][1][3]};
            mma_16816<__half>(d, f0, b0);
            mma_16816<__half>(d, f1, b1);
            if constexpr (SPLIT) {
              const uint32_t h0[4] = {l[m][0][0], l[m][1][0], l[m][0][1], l[m][1][1]};
              const uint32_t h1[4] = {l[m][0][2], l[m][1][2], l[m][0][3], l[m][1][3]};
              mma_16816<__half>(d, h0, b0);
              mma_16816<__half>(d, h1, b1);
            }
            acc[t][m][0] += d[0] * sc[u][t][0];
            acc[t][m][1] += d[1] * sc[u][t][1];
            acc[t][m][2] += d[2] * sc[u][t][0];
            acc[t][m][3] += d[3] * sc[u][t][1];
          }
        }
      }
    }
  }
  if (base >= g.rows) return;
#pragma unroll
  for (int t = 0; t < MMA_ROW_TILES; t++) {
#pragma unroll
    for (int m = 0; m < M; m++) {
#pragma unroll
      for (int i = 0; i < 4; i += 2) {  // D: pairs 16 m + c (i 0) and 16 m + c + 8 (i 2), rows rd and rd + 1
        const int j = 16 * m + (i < 2 ? c : c + 8);
        const int64_t r = base + t * 8 + 2 * gq;
        if (j >= n || r >= g.rows) continue;
        const int64_t p = order[first + j];
        const bool live = runs(qmoe, weights[p]), has_next = r + 1 < g.rows;
        float v[2];
#pragma unroll
        for (int u = 0; u < 2; u++) {
          const float d = SPLIT ? ldexpf(acc[t][m][i + u], shift[j]) : acc[t][m][i + u];
          v[u] = (live ? d : 0.0f) + (bias && (u == 0 || has_next) ? ld(bias + e * g.rows + r + u) : 0.0f);
        }
        store_up(a, p, g.rows, r, v[0], v[1], has_next, out);
      }
    }
  }
}

// y[t, o] = sum over t's slots, by ascending expert (as `down` off its dealt path), of weight * part[t * k + s, o], the
// slots that run. A block per token: its slots' order found once (k int32 of dynamic shared memory), then its rows
// (the order found per output value was most of this kernel's time: k^2 reads of chosen each).
template <typename T>
__device__ void combine(int64_t tokens, int64_t k, int64_t rows, int qmoe, const int32_t* chosen,
                        const float* weights, const float* part, T* y) {
  extern __shared__ int32_t slots[];  // the token's slots that run, by ascending expert
  __shared__ int count;
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    __syncthreads();  // the last token's slots read
    if (threadIdx.x == 0) {
      int32_t last = -1;
      count = 0;
      for (int64_t n = 0; n < k; n++) {
        int64_t s = -1;
        for (int64_t j = 0; j < k; j++) {
          const int32_t e = chosen[t * k + j];
          if (e > last && (s < 0 || e < chosen[t * k + s])) s = j;
        }
        if (s < 0) break;
        last = chosen[t * k + s];
        if (runs(qmoe, weights[t * k + s])) slots[count++] = (int32_t)s;
      }
    }
    __syncthreads();
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
      float sum = 0.0f;
      for (int n = 0; n < count; n++) {
        const int64_t ts = t * k + slots[n];
        sum += weights[ts] * part[ts * rows + r];
      }
      st(y + t * rows + r, sum);
    }
  }
}

}  // namespace moe

extern "C" __global__ void __launch_bounds__(MOE_GROUP_THREADS) seamless_moe_group(int64_t pairs, int64_t experts,
                                                                                int tile, const int32_t* chosen,
                                                                                int32_t* order, int32_t* tiles,
                                                                                int32_t* ntiles) {
  dependent_launch();
  moe::group(pairs, experts, tile, chosen, order, tiles, ntiles);
}

#define MOE_KERNELS(S, T)                                                                                              \
  extern "C" __global__ void seamless_moe_route_##S(int64_t tokens, int64_t experts, int64_t k, int qmoe,             \
                                                    int normalize, const T* router, int32_t* chosen, float* weights) { \
    dependent_launch();                                                                                                \
    moe::route(tokens, experts, k, qmoe, normalize, router, chosen, weights);                                          \
  }                                                                                                                    \
  extern "C" __global__ void seamless_moe_route_sparse_mixer_##S(int64_t tokens, int64_t experts, const T* router,    \
                                                                 int32_t* chosen, float* weights) {                    \
    dependent_launch();                                                                                                \
    moe::route_sparse_mixer(tokens, experts, router, chosen, weights);                                                 \
  }                                                                                                                    \
  extern "C" __global__ void seamless_moe_up_##S(int64_t tokens, int64_t k, int qmoe, MoeWeights g, MoeActivation a, \
                                                 const int32_t* chosen, const float* weights, const T* x, const T* w, \
                                                 const uint8_t* q, const T* scale, const uint8_t* zp, const T* bias,  \
                                                 float* out) {                                                         \
    dependent_launch();                                                                                                \
    moe::up(tokens, k, qmoe, g, a, chosen, weights, x, w, q, scale, zp, bias, out);                                    \
  }                                                                                                                    \
  extern "C" __global__ void seamless_moe_down_##S(int64_t tokens, int64_t k, int qmoe, MoeWeights g,               \
                                                   const int32_t* chosen, const float* weights, const float* act,      \
                                                   const T* w, const uint8_t* q, const T* scale, const uint8_t* zp,    \
                                                   const T* bias, T* y) {                                              \
    dependent_launch();                                                                                                \
    moe::down<T, false>(tokens, k, qmoe, g, chosen, weights, act, w, q, scale, zp, bias, y);                           \
  }                                                                                                                    \
  extern "C" __global__ void seamless_moe_down_dealt_##S(int64_t tokens, int64_t k, int qmoe, MoeWeights g,         \
                                                         const int32_t* chosen, const float* weights,                 \
                                                         const float* act, const T* w, const uint8_t* q,              \
                                                         const T* scale, const uint8_t* zp, const T* bias, T* y) {    \
    dependent_launch();                                                                                                \
    moe::down<T, true>(tokens, k, qmoe, g, chosen, weights, act, w, q, scale, zp, bias, y);                            \
  }                                                                                                                    \
  extern "C" __global__ void __launch_bounds__(256) seamless_moe_grouped_##S(                                          \
      int64_t k, int qmoe, MoeWeights g, const int32_t* tiles, const int32_t* ntiles, const int32_t* order,            \
      const float* weights, const T* x, const uint8_t* q, const T* scale, const uint8_t* zp, const T* bias,            \
      float* out) { dependent_launch();                                                                                \
    moe::grouped<T, T>(k, 0, qmoe, g, tiles, ntiles, order, weights, x, q, scale, zp, bias, out);                      \
  }                                                                                                                    \
  extern "C" __global__ void __launch_bounds__(256) seamless_moe_grouped_act_##S(                                      \
      int64_t k, int qmoe, MoeWeights g, const int32_t* tiles, const int32_t* ntiles, const int32_t* order,            \
      const float* weights, const float* act, const uint8_t* q, const T* scale, const uint8_t* zp, const T* bias,      \
      float* out) { dependent_launch();                                                                                \
    moe::grouped<T, float>(k, 1, qmoe, g, tiles, ntiles, order, weights, act, q, scale, zp, bias, out);                \
  }                                                                                                                    \
  extern "C" __global__ void seamless_moe_combine_##S(int64_t tokens, int64_t k, int64_t rows, int qmoe,              \
                                                      const int32_t* chosen, const float* weights, const float* part,  \
                                                      T* y) { dependent_launch();                                      \
    moe::combine(tokens, k, rows, qmoe, chosen, weights, part, y);                                                     \
  }
FOR_FLOATS(MOE_KERNELS)
#undef MOE_KERNELS

// grouped_mma's: the tokens' float16 activations (up: X = __half), each pair's float32 ones (down: SPLIT)
#define GROUPED_MMA(NAME, SPLIT, X)                                                                                   \
  extern "C" __global__ void __launch_bounds__(256, 2) seamless_moe_##NAME##_f16(                                     \
      int64_t k, int qmoe, MoeWeights g, MoeActivation a, const int32_t* tiles, const int32_t* ntiles,                \
      const int32_t* order, const float* weights, const X* x, const uint8_t* q, const __half* scale,                  \
      const uint8_t* zp, const __half* bias, float* out) {                                                            \
    dependent_launch();                                                                                               \
    moe::grouped_mma<SPLIT>(k, qmoe, g, a, tiles, ntiles, order, weights, x, q, scale, zp, bias, out);                \
  }
GROUPED_MMA(grouped_mma, false, __half)
GROUPED_MMA(grouped_mma_act, true, float)
#undef GROUPED_MMA

extern "C" __global__ void seamless_moe_activate(int64_t n, int64_t inter, MoeActivation a, const float* h,
                                                 const float* gate, float* act) {
  dependent_launch();
  moe::activate(n, inter, a, h, gate, act);
}
