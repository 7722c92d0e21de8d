// GroupQueryAttention and RotaryEmbedding (com.microsoft) on CUDA, float types (float32 arithmetic).
// Lengths and positions are read from device memory (seqlens_k, position_ids): nothing waits for
// the host, and out-of-range values are clamped to the buffers instead of read past them.
// Step 1 (gqa_prepare), one thread per element of the present buffers [B, Nkv, L, H] and of the new
// tokens: present = the first p[b] cached tokens of past, the new tokens' k and v (after rotary) at
// p[b] on, zeros after them; q (after rotary) to [B, N, S, H].
// Step 2 (gqa_attend): one block per (batch, head, query token): scores against the t[b] cached
// keys, causal / local-window mask, softcap, softmax (optionally with a sink: smooth softmax),
// then the weighted sum of values into out [B, S, N * H].
#include "common.cuh"

struct GqaShape {
  int32_t batch, seq, heads, kv_heads, head_size, present_len, rot_half, do_rotary, interleaved, packed;
  int32_t first_prompt, cos_rows, past_buf;
};

// Of batch b: the cached tokens before this run's first new token, and the tokens visible after it.
__device__ __forceinline__ int past_len(const int32_t* seqlens, int b, const GqaShape& g) {
  int p = g.first_prompt ? 0 : seqlens[b] + 1 - g.seq;
  return max(0, min(p, g.present_len - g.seq));
}
__device__ __forceinline__ int total_len(const int32_t* seqlens, int b, const GqaShape& g) {
  return max(0, min(seqlens[b] + 1, g.present_len));
}

// Element t of the present buffers from the past: a cached token's, or zero after them (the new
// tokens' positions are left to prepare_new).
template <typename T>
__device__ __forceinline__ void copy_past(int64_t t, const T* past_k, const T* past_v, T* pk, T* pv,
                                          const int32_t* seqlens, const GqaShape& g) {
  int d = t % g.head_size;
  int64_t r = t / g.head_size;
  int pos = r % g.present_len;
  r /= g.present_len;  // b * kv_heads + kv head
  int b = r / g.kv_heads, p = past_len(seqlens, b, g);
  if (pos >= p && pos < p + g.seq) return;
  if (past_k && pos < p && pos < g.past_buf) {
    int64_t src = (r * g.past_buf + pos) * g.head_size + d;
    pk[t] = past_k[src];
    pv[t] = past_v[src];
  } else {
    st(pk + t, 0.0f);
    st(pv + t, 0.0f);
  }
}

// Channel d (< 2 * rot_half) of one head's row after rotary embedding with its position's cos/sin rows.
template <typename T>
__device__ __forceinline__ float rotate(const T* row, int d, const T* cos_row, const T* sin_row, int rot_half,
                                        bool interleaved) {
  int j = interleaved ? d / 2 : d % rot_half;  // the frequency of this channel
  float x = ld(row + d), c = ld(cos_row + j), s = ld(sin_row + j);
  if (interleaved) {
    float other = ld(row + (d ^ 1));
    return (d & 1) ? x * c + other * s : x * c - other * s;
  }
  float other = ld(row + (d < rot_half ? d + rot_half : d - rot_half));
  return d < rot_half ? x * c - other * s : x * c + other * s;
}

// Element t of the new tokens, over (b, i, head in q..k..v, d): q/k rotated with cos/sin rows at
// position p[b] + i; q to q_out, k and v to the present buffers at that position.
template <typename T>
__device__ __forceinline__ void prepare_new(int64_t t, const T* q_in, const T* k_in, const T* v_in, const T* cos,
                                            const T* sin, const int32_t* seqlens, T* q_out, T* k_out, T* v_out,
                                            const GqaShape& g) {
  int64_t heads_all = g.heads + 2 * g.kv_heads;
  int d = t % g.head_size;
  int64_t r = t / g.head_size;
  int h = r % heads_all;
  r /= heads_all;
  int i = r % g.seq, b = r / g.seq;
  const T* src;
  int64_t base;  // start of this head's row in the source
  if (g.packed) {
    src = q_in;
    base = ((int64_t)(b * g.seq + i) * heads_all + h) * g.head_size;
  } else if (h < g.heads) {
    src = q_in;
    base = ((int64_t)(b * g.seq + i) * g.heads + h) * g.head_size;
  } else if (h < g.heads + g.kv_heads) {
    src = k_in;
    base = ((int64_t)(b * g.seq + i) * g.kv_heads + (h - g.heads)) * g.head_size;
  } else {
    src = v_in;
    base = ((int64_t)(b * g.seq + i) * g.kv_heads + (h - g.heads - g.kv_heads)) * g.head_size;
  }
  float x = ld(src + base + d);
  int pos = past_len(seqlens, b, g) + i;
  bool is_v = h >= g.heads + g.kv_heads;
  if (g.do_rotary && !is_v && d < 2 * g.rot_half) {
    int row = min(pos, g.cos_rows - 1);
    x = rotate(src + base, d, cos + (int64_t)row * g.rot_half, sin + (int64_t)row * g.rot_half, g.rot_half,
               g.interleaved);
  }
  if (h < g.heads) {
    st(q_out + (((int64_t)b * g.heads + h) * g.seq + i) * g.head_size + d, x);
  } else {
    int kh = is_v ? h - g.heads - g.kv_heads : h - g.heads;
    T* dst = is_v ? v_out : k_out;
    st(dst + (((int64_t)b * g.kv_heads + kh) * g.present_len + pos) * g.head_size + d, x);
  }
}

template <typename T>
__device__ void prepare(const T* past_k, const T* past_v, const T* q_in, const T* k_in, const T* v_in, const T* cos,
                        const T* sin, const int32_t* seqlens, T* q_out, T* k_out, T* v_out, GqaShape g) {
  int64_t copies = (int64_t)g.batch * g.kv_heads * g.present_len * g.head_size;
  int64_t n = copies + (int64_t)g.batch * g.seq * (g.heads + 2 * g.kv_heads) * g.head_size;
  GRID_LOOP(t, n) {
    if (t < copies)
      copy_past(t, past_k, past_v, k_out, v_out, seqlens, g);
    else
      prepare_new(t - copies, q_in, k_in, v_in, cos, sin, seqlens, q_out, k_out, v_out, g);
  }
}

struct AttendParams {
  float scale, softcap;
  int32_t local_window, causal, smooth;
};

// grid: batch * heads * seq blocks; dynamic shared memory: present_len + head_size + max(blockDim, 8 * head_size)
// floats. Threads score keys (a 16-byte load per 8 channels when head_size % 8 == 0), then split the
// weighted sum of values over groups of keys, summed in a fixed order.
template <typename T>
__device__ void attend(const T* q, const T* k, const T* v, const int32_t* seqlens, const float* sink, T* out,
                       GqaShape g, AttendParams a) {
  extern __shared__ float smem[];
  float* scores = smem;
  float* qrow = smem + g.present_len;
  float* part = qrow + g.head_size;
  int i = blockIdx.x % g.seq, h = (blockIdx.x / g.seq) % g.heads, b = blockIdx.x / (g.seq * g.heads);
  int kh = h / (g.heads / g.kv_heads);
  int t = total_len(seqlens, b, g), limit = a.causal ? past_len(seqlens, b, g) + i + 1 : t;  // keys [lo, limit) visible
  int lo = a.causal && a.local_window > 0 && limit - a.local_window > 0 ? limit - a.local_window : 0;
  const T* qp = q + (((int64_t)b * g.heads + h) * g.seq + i) * g.head_size;
  for (int d = threadIdx.x; d < g.head_size; d += blockDim.x) qrow[d] = ld(qp + d);
  __syncthreads();
  const T* kb = k + ((int64_t)b * g.kv_heads + kh) * g.present_len * g.head_size;
  const T* vb = v + ((int64_t)b * g.kv_heads + kh) * g.present_len * g.head_size;
  bool wide = g.head_size % 8 == 0;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < t; j += blockDim.x) {
    float s = -INFINITY;
    if (j >= lo && j < limit) {
      s = 0.0f;
      const T* key = kb + (int64_t)j * g.head_size;
      if (wide) {
        for (int d = 0; d < g.head_size; d += 8) {
          float x[8];
          load8(key + d, x);
          for (int e = 0; e < 8; e++) s += qrow[d + e] * x[e];
        }
      } else {
        for (int d = 0; d < g.head_size; d++) s += qrow[d] * ld(key + d);
      }
      s *= a.scale;
      if (a.softcap > 0.0f) s = a.softcap * tanhf(s / a.softcap);
    }
    scores[j] = s;
    m = fmaxf(m, s);
  }
  m = block_reduce(m, true);
  float sink_logit = a.smooth ? sink[h] : -INFINITY;
  if (a.smooth) m = fmaxf(m, sink_logit);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < t; j += blockDim.x) {
    float e = scores[j] == -INFINITY ? 0.0f : expf(scores[j] - m);
    scores[j] = e;
    sum += e;
  }
  sum = block_reduce(sum, false);
  if (a.smooth) sum += expf(sink_logit - m);
  float inv = 1.0f / sum;
  int end = limit < t ? limit : t, parts;
  if (wide && 32 % (g.head_size / 8) == 0) {
    // groups of head_size / 8 lanes (8 channels each, 16-byte loads) sum every groups-th key's value;
    // a warp's groups are added by shuffles, then the warps' sums in warp order
    int lanes = g.head_size / 8, groups = blockDim.x / lanes, group = threadIdx.x / lanes;
    int c = (threadIdx.x % lanes) * 8;
    float acc[8] = {};
    for (int j = lo + group; j < end; j += groups) {
      float x[8];
      load8(vb + (int64_t)j * g.head_size + c, x);
      for (int e = 0; e < 8; e++) acc[e] += scores[j] * x[e];
    }
    for (int off = lanes; off < 32; off <<= 1)
      for (int e = 0; e < 8; e++) acc[e] += __shfl_xor_sync(0xffffffff, acc[e], off);
    if ((threadIdx.x & 31) < lanes)
      for (int e = 0; e < 8; e++) part[(threadIdx.x >> 5) * g.head_size + c + e] = acc[e];
    parts = blockDim.x >> 5;
  } else {  // groups of head_size threads each sum every groups-th key's value
    int groups = blockDim.x >= g.head_size ? blockDim.x / g.head_size : 1, group = threadIdx.x / g.head_size;
    if (group < groups)
      for (int d = threadIdx.x % g.head_size; d < g.head_size; d += blockDim.x) {
        float acc = 0.0f;
        for (int j = lo + group; j < end; j += groups) acc += scores[j] * ld(vb + (int64_t)j * g.head_size + d);
        part[group * g.head_size + d] = acc;
      }
    parts = groups;
  }
  __syncthreads();
  T* o = out + (((int64_t)b * g.seq + i) * g.heads + h) * g.head_size;
  for (int d = threadIdx.x; d < g.head_size; d += blockDim.x) {
    float acc = 0.0f;
    for (int r = 0; r < parts; r++) acc += part[r * g.head_size + d];
    st(o + d, acc * inv);
  }
}

#define GQA(S, T)                                                                                              \
  extern "C" __global__ void seamless_gqa_prepare_##S(const T* past_k, const T* past_v, const T* q, const T* k,       \
                                                      const T* v, const T* cos, const T* sin, const int32_t* seqlens,   \
                                                      T* qo, T* ko, T* vo, GqaShape g) { dependent_launch();            \
    prepare(past_k, past_v, q, k, v, cos, sin, seqlens, qo, ko, vo, g);                                                 \
  }                                                                                                                     \
  extern "C" __global__ void seamless_gqa_attend_##S(const T* q, const T* k, const T* v, const int32_t* seqlens,       \
                                                     const float* sink, T* out, GqaShape g, AttendParams a) { dependent_launch(); \
    attend(q, k, v, seqlens, sink, out, g, a);                                                                          \
  }
FOR_FLOATS(GQA)

// RotaryEmbedding (com.microsoft): x viewed as [B, S, N, H] (or [B, N, S, H] when bnsh), token (b, s)
// at position pos[b * S + s] (pos[0] + s when one position is given, b * S + s when none); cos/sin rows of width
// cache_half; channels from 2 * rot_half on pass through.
struct RotaryShape {
  int32_t batch, seq, heads, head_size, rot_half, cache_half, interleaved, bnsh, first_only, cache_rows;
};

template <typename T>
__device__ void rotary(int64_t n, const T* x, const int64_t* pos, const T* cos, const T* sin, T* y, RotaryShape g) {
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n; t += (int64_t)gridDim.x * blockDim.x) {
    int d = t % g.head_size;
    int64_t r = t / g.head_size;
    int64_t b = r / ((int64_t)g.seq * g.heads), s = g.bnsh ? r % g.seq : (r / g.heads) % g.seq;
    int64_t p = !pos ? b * g.seq + s : g.first_only ? pos[0] + s : pos[b * g.seq + s];  // no pos: a row per token
    p = p < 0 ? 0 : p >= g.cache_rows ? g.cache_rows - 1 : p;
    st(y + t, d < 2 * g.rot_half ? rotate(x + (t - d), d, cos + p * g.cache_half, sin + p * g.cache_half, g.rot_half,
                                          g.interleaved)
                                 : ld(x + t));
  }
}

#define ROTARY(S, T)                                                                                  \
  extern "C" __global__ void seamless_rotary_##S(int64_t n, const T* x, const int64_t* pos, const T* cos, const T* sin, \
                                                 T* y, RotaryShape g) { dependent_launch();                      \
    rotary(n, x, pos, cos, sin, y, g);                                                                           \
  }
FOR_FLOATS(ROTARY)

// LinearAttention (ONNX opset 27), as kernels/cpu/linear_attention.py: a block per (batch, KV head) runs
// the token-by-token recurrence on its state S [d_k, d_v] (float32, in `state`, past_state's values or
// zeros at the start): per token S *= exp(g) (gated), v = beta * (v - S^T k) (delta), S += k v^T, and
// each of the KV head's query heads gets scale * q^T S. Shared memory: k, v and the group's q rows.
namespace linear_attention {

struct Shape {
  int32_t batch, tokens, q_heads, kv_heads, d_k, d_v;
  int32_t gated, delta, decay_per_key, beta_per_head;  // decay [B, T, H_kv (* d_k)], beta [B, T, H_kv or 1]
  float scale;
};

template <typename T>
__device__ void run(const T* q, const T* k, const T* v, const T* past, const T* decay, const T* beta, T* out,
                    float* state, Shape s) {
  extern __shared__ float smem[];
  int group = s.q_heads / s.kv_heads, h = blockIdx.x % s.kv_heads, b = blockIdx.x / s.kv_heads;
  float* kk = smem;
  float* vv = kk + s.d_k;
  float* qq = vv + s.d_v;
  float* S = state + ((int64_t)b * s.kv_heads + h) * s.d_k * s.d_v;
  int64_t cells = (int64_t)s.d_k * s.d_v;
  for (int64_t e = threadIdx.x; e < cells; e += blockDim.x)
    S[e] = past ? ld(past + ((int64_t)b * s.kv_heads + h) * cells + e) : 0.0f;
  for (int t = 0; t < s.tokens; t++) {
    int64_t row = (int64_t)b * s.tokens + t;
    for (int d = threadIdx.x; d < s.d_k; d += blockDim.x) kk[d] = ld(k + (row * s.kv_heads + h) * s.d_k + d);
    for (int m = threadIdx.x; m < s.d_v; m += blockDim.x) vv[m] = ld(v + (row * s.kv_heads + h) * s.d_v + m);
    for (int e = threadIdx.x; e < group * s.d_k; e += blockDim.x)
      qq[e] = ld(q + (row * s.q_heads + h * group) * s.d_k + e);
    __syncthreads();
    if (s.gated)
      for (int64_t e = threadIdx.x; e < cells; e += blockDim.x) {
        int64_t g = s.decay_per_key ? (row * s.kv_heads + h) * s.d_k + e / s.d_v : row * s.kv_heads + h;
        S[e] = S[e] * expf(ld(decay + g));
      }
    __syncthreads();
    if (s.delta) {
      float rate = ld(beta + row * (s.beta_per_head ? s.kv_heads : 1) + (s.beta_per_head ? h : 0));
      for (int m = threadIdx.x; m < s.d_v; m += blockDim.x) {
        float u = 0.0f;
        for (int d = 0; d < s.d_k; d++) u += S[(int64_t)d * s.d_v + m] * kk[d];
        vv[m] = rate * (vv[m] - u);
      }
      __syncthreads();
    }
    for (int64_t e = threadIdx.x; e < cells; e += blockDim.x) S[e] = S[e] + kk[e / s.d_v] * vv[e % s.d_v];
    __syncthreads();
    for (int e = threadIdx.x; e < group * s.d_v; e += blockDim.x) {
      int j = e / s.d_v, m = e % s.d_v;
      float o = 0.0f;
      for (int d = 0; d < s.d_k; d++) o += qq[j * s.d_k + d] * S[(int64_t)d * s.d_v + m];
      st(out + (row * s.q_heads + h * group + j) * s.d_v + m, s.scale * o);
    }
    __syncthreads();
  }
}

}  // namespace linear_attention

#define LINEAR_ATTENTION(S_, T)                                                                                 \
  extern "C" __global__ void seamless_linear_attention_##S_(const T* q, const T* k, const T* v, const T* past,    \
                                                            const T* decay, const T* beta, T* out, float* state, \
                                                            linear_attention::Shape s) {                        \
    dependent_launch();                                                                                         \
    linear_attention::run<T>(q, k, v, past, decay, beta, out, state, s);                                        \
  }
FOR_FLOATS(LINEAR_ATTENTION)
