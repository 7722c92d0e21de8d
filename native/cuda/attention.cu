// GroupQueryAttention and RotaryEmbedding (com.microsoft) on CUDA, float types (float32 arithmetic).
// Lengths and positions are read from device memory (seqlens_k, position_ids): nothing waits for
// the host, and out-of-range values are clamped to the buffers instead of read past them, and reported
// (args.h GpuCheck: the run fails as stock's does).
// Step 1 (gqa_prepare), one thread per element of the present buffers [B, Nkv, L, H] and of the new
// tokens: present = the first p[b] cached tokens of past, the new tokens' k and v (after rotary) at
// p[b] on, zeros after them; q (after rotary) to [B, N, S, H].
// Step 2 (gqa_attend): one block per (batch, head, query token): scores against the t[b] cached
// keys, causal / local-window mask, softcap, softmax (optionally with a sink: smooth softmax),
// then the weighted sum of values into out [B, S, N * H].
// A decode step (one new token) does both in one launch split over keys (gqa_decode, below).
// A window-sized cache (sliding_window_cache=1: the past holds the most recent positions of a buffer of capacity
// C) runs steps 1 and 2 on a work buffer of C + S rows (the past's resident rows, then the new tokens); step 3
// (gqa_window_keep) moves the most recent of them to the present buffers.
#include "common.cuh"

// Of batch b: the cached tokens before this run's first new token, and the tokens visible after it, from its
// seqlens_k value clamped to its bound (a value out of range, which only the GPU sees, can neither address
// memory outside the buffers nor overflow, and every query sees at least one key).
__device__ __forceinline__ int clamped_seqlen(int seqlen, const GqaShape& g) {
  return max(0, min(seqlen, g.seq_bound - 1));
}
__device__ __forceinline__ int past_of(int seqlen, const GqaShape& g) {  // from batch b's seqlens_k value
  int p = g.first_prompt ? 0 : clamped_seqlen(seqlen, g) + 1 - g.seq;
  return max(0, min(p, g.seq_bound - g.seq));
}
// Batch b's seqlens_k value once it is settled (read after the wait for the kernel before: a guess before it may be
// stale), reported when out of range.
__device__ __forceinline__ int seqlen_of(const int32_t* seqlens, int b, const GqaShape& g) {
  int seqlen = seqlens[b];
  if (seqlen < 0 || seqlen >= g.seq_bound || (!g.first_prompt && seqlen + 1 < g.seq)) report_bad(g.check, seqlen);
  return seqlen;
}
// The rows of the cache that hold positions after t tokens: t, or for a window-sized cache all up to its capacity C,
// then evicting G = C - W + 1 at a time so that the W most recent stay (kernels/cpu/attention.py _window_resident).
// With p the past's tokens, the past's row r is row r of the buffers and new token i is row resident(p) + i.
__device__ __forceinline__ int resident(int t, const GqaShape& g) {
  if (!g.window || t <= g.capacity) return t;
  int evict = g.capacity - g.window + 1;
  return t - evict * ((t - g.capacity + evict - 1) / evict);
}
__device__ __forceinline__ int past_len(const int32_t* seqlens, int b, const GqaShape& g) {
  return past_of(seqlen_of(seqlens, b, g), g);
}
__device__ __forceinline__ int total_len(const int32_t* seqlens, int b, const GqaShape& g) {
  return clamped_seqlen(seqlen_of(seqlens, b, g), g) + 1;
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
  int b = r / g.kv_heads, p = resident(past_len(seqlens, b, g), g);
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
template <typename T, typename C>
__device__ __forceinline__ float rotate(const T* row, int d, const C* cos_row, const C* sin_row, int rot_half,
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

// The row of head h (numbered q..k..v) of new token (b, i) in the inputs.
template <typename T>
__device__ __forceinline__ const T* new_row(const T* q_in, const T* k_in, const T* v_in, int b, int i, int h,
                                            const GqaShape& g) {
  int64_t token = (int64_t)b * g.seq + i;
  if (g.packed) return q_in + (token * (g.heads + 2 * g.kv_heads) + h) * g.head_size;
  if (h < g.heads) return q_in + (token * g.heads + h) * g.head_size;
  if (h < g.heads + g.kv_heads) return k_in + (token * g.kv_heads + h - g.heads) * g.head_size;
  return v_in + (token * g.kv_heads + h - g.heads - g.kv_heads) * g.head_size;
}

// Channel d of head h (numbered q..k..v) of new token (b, i), q and k rotated at position pos.
template <typename T>
__device__ __forceinline__ float new_value(const T* q_in, const T* k_in, const T* v_in, const T* cos, const T* sin,
                                           int b, int i, int h, int d, int pos, const GqaShape& g) {
  const T* row = new_row(q_in, k_in, v_in, b, i, h, g);
  if (g.do_rotary && h < g.heads + g.kv_heads && d < 2 * g.rot_half) {
    int r = min(pos, g.cos_rows - 1);
    return rotate(row, d, cos + (int64_t)r * g.rot_half, sin + (int64_t)r * g.rot_half, g.rot_half, g.interleaved);
  }
  return ld(row + d);
}

// The cos and sin factors of channels [c0, c0 + 8) (c0 < 2 * rot_half) from a position's cos/sin rows.
template <typename T>
__device__ __forceinline__ void rotary_factors8(int c0, const T* cos_row, const T* sin_row, int rot_half,
                                                bool interleaved, float* c, float* s) {
  if (interleaved) {
    for (int e = 0; e < 8; e++) {
      c[e] = ld(cos_row + (c0 + e) / 2);
      s[e] = ld(sin_row + (c0 + e) / 2);
    }
  } else {
    load8(cos_row + c0 % rot_half, c);
    load8(sin_row + c0 % rot_half, s);
  }
}

// Channels [c0, c0 + 8) of a row after rotary embedding with the cos/sin rows (cos_row null: none), as
// rotate() computes them; every load issued before the first use. rot_half % 8 == 0 (gqa_layout checks),
// so the 8 channels are all rotated or none. `factors`: the rows' factors of these channels, loaded already.
template <typename T>
__device__ __forceinline__ void rotated8(const T* row, int c0, const T* cos_row, const T* sin_row, int rot_half,
                                         bool interleaved, float* y, const float* factors = nullptr) {
  load8(row + c0, y);
  if (!cos_row || c0 >= 2 * rot_half) return;
  float other[8], c[8], s[8];
  if (interleaved)
    for (int e = 0; e < 8; e++) other[e] = y[e ^ 1];
  else
    load8(row + (c0 < rot_half ? c0 + rot_half : c0 - rot_half), other);
  if (factors)
    for (int e = 0; e < 8; e++) c[e] = factors[e], s[e] = factors[8 + e];
  else
    rotary_factors8(c0, cos_row, sin_row, rot_half, interleaved, c, s);
  for (int e = 0; e < 8; e++) {
    bool first = interleaved ? !(e & 1) : c0 < rot_half;  // x * c - other * s, else x * c + other * s
    y[e] = first ? y[e] * c[e] - other[e] * s[e] : y[e] * c[e] + other[e] * s[e];
  }
}

// Element t of the new tokens, over (b, i, head in q..k..v, d): q to q_out, k and v to the present
// buffers at position p[b] + i.
template <typename T>
__device__ __forceinline__ void prepare_new(int64_t t, const T* q_in, const T* k_in, const T* v_in, const T* cos,
                                            const T* sin, const int32_t* seqlens, T* q_out, T* k_out, T* v_out,
                                            const GqaShape& g) {
  int64_t heads_all = g.heads + 2 * g.kv_heads;
  int d = t % g.head_size;
  int64_t r = t / g.head_size;
  int h = r % heads_all;
  r /= heads_all;
  int i = r % g.seq, b = r / g.seq, p = past_len(seqlens, b, g);
  float x = new_value(q_in, k_in, v_in, cos, sin, b, i, h, d, p + i, g);
  if (h < g.heads) {
    st(q_out + (((int64_t)b * g.heads + h) * g.seq + i) * g.head_size + d, x);
  } else {
    bool is_v = h >= g.heads + g.kv_heads;
    int kh = is_v ? h - g.heads - g.kv_heads : h - g.heads, row = resident(p, g) + i;
    T* dst = is_v ? v_out : k_out;
    st(dst + (((int64_t)b * g.kv_heads + kh) * g.present_len + row) * g.head_size + d, x);
  }
}

// Eight values' bits from src to dst (zeros where src is null); both 16-byte aligned.
template <typename T>
__device__ __forceinline__ void copy8(T* dst, const T* src) {
  for (int i = 0; i < (int)sizeof(T) / 2; i++) ((uint4*)dst)[i] = src ? ((const uint4*)src)[i] : make_uint4(0, 0, 0, 0);
}

// copy_past and prepare_new for elements [t, t + 8) of one row (head_size and rot_half multiples of 8, rows
// 16-byte aligned): the same values, with one index computation and 16-byte accesses for the eight.
template <typename T>
__device__ __forceinline__ void copy_past8(int64_t t, const T* past_k, const T* past_v, T* pk, T* pv,
                                           const int32_t* seqlens, const GqaShape& g) {
  int64_t r = t / g.head_size;
  int d = t - r * g.head_size, pos = r % g.present_len;
  r /= g.present_len;
  int b = r / g.kv_heads, p = resident(past_len(seqlens, b, g), g);
  if (pos >= p && pos < p + g.seq) return;
  bool cached = past_k && pos < p && pos < g.past_buf;
  int64_t src = (r * g.past_buf + pos) * g.head_size + d;
  copy8(pk + t, cached ? past_k + src : nullptr);
  copy8(pv + t, cached ? past_v + src : nullptr);
}
template <typename T>
__device__ __forceinline__ void prepare_new8(int64_t t, const T* q_in, const T* k_in, const T* v_in, const T* cos,
                                             const T* sin, const int32_t* seqlens, T* q_out, T* k_out, T* v_out,
                                             const GqaShape& g) {
  int64_t heads_all = g.heads + 2 * g.kv_heads, r = t / g.head_size;
  int d = t - r * g.head_size, h = r % heads_all;
  r /= heads_all;
  int i = r % g.seq, b = r / g.seq, p = past_len(seqlens, b, g), pos = p + i;
  const T* row = new_row(q_in, k_in, v_in, b, i, h, g);
  bool rotary = g.do_rotary && h < g.heads + g.kv_heads;
  int64_t at = (int64_t)min(pos, g.cos_rows - 1) * g.rot_half;
  float y[8];
  rotated8(row, d, rotary ? cos + at : nullptr, rotary ? sin + at : nullptr, g.rot_half, g.interleaved, y);
  if (h < g.heads) {
    store8(q_out + (((int64_t)b * g.heads + h) * g.seq + i) * g.head_size + d, y);
  } else {
    bool is_v = h >= g.heads + g.kv_heads;
    int kh = is_v ? h - g.heads - g.kv_heads : h - g.heads;
    int64_t at_row = ((int64_t)b * g.kv_heads + kh) * g.present_len + resident(p, g) + i;
    store8((is_v ? v_out : k_out) + at_row * g.head_size + d, y);
  }
}

// wide: eight elements a thread (kernels/cuda/attention.py decides: head_size and rot_half multiples of 8,
// every row 16-byte aligned); a 4000-token prompt's 24 calls took 1.33 ms element by element.
template <typename T>
__device__ void prepare(const T* past_k, const T* past_v, const T* q_in, const T* k_in, const T* v_in, const T* cos,
                        const T* sin, const int32_t* seqlens, T* q_out, T* k_out, T* v_out, GqaShape g, int wide) {
  int64_t copies = (int64_t)g.batch * g.kv_heads * g.present_len * g.head_size;
  int64_t n = copies + (int64_t)g.batch * g.seq * (g.heads + 2 * g.kv_heads) * g.head_size;
  if (wide) {
    GRID_LOOP(t8, n / 8) {
      int64_t t = t8 * 8;
      if (t < copies)
        copy_past8(t, past_k, past_v, k_out, v_out, seqlens, g);
      else
        prepare_new8(t - copies, q_in, k_in, v_in, cos, sin, seqlens, q_out, k_out, v_out, g);
    }
    return;
  }
  GRID_LOOP(t, n) {
    if (t < copies)
      copy_past(t, past_k, past_v, k_out, v_out, seqlens, g);
    else
      prepare_new(t - copies, q_in, k_in, v_in, cos, sin, seqlens, q_out, k_out, v_out, g);
  }
}

// The key rows new token i of batch b sees: [lo, limit), and none from t (the rows there are) on.
struct Visible {
  int t, limit, lo;
};
__device__ __forceinline__ Visible visible(const int32_t* seqlens, int b, int i, const GqaShape& g,
                                           const AttendParams& a) {
  int p = past_len(seqlens, b, g), first = resident(p, g);  // the past's rows, then the new tokens'
  int t = first + total_len(seqlens, b, g) - p, limit = a.causal ? first + i + 1 : t;
  return {t, limit, a.causal && a.local_window > 0 && limit - a.local_window > 0 ? limit - a.local_window : 0};
}

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
  const auto [t, limit, lo] = visible(seqlens, b, i, g, a);
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

// Step 3 of a window-sized cache: present row r (of C) = work row resident(p) + S - keep + r for the keep =
// resident(t) most recent rows (kernels/cpu/attention.py: the last keep rows of the past's resident ones and the
// new tokens), zeros after them. The work buffer is read whole before this launch, so present may be the past.
template <typename T>
__device__ void window_keep(const T* work_k, const T* work_v, const int32_t* seqlens, T* pk, T* pv, GqaShape g) {
  GRID_LOOP(e, (int64_t)g.batch * g.kv_heads * g.capacity * g.head_size) {
    int d = e % g.head_size;
    int64_t r = e / g.head_size;
    int row = r % g.capacity;
    r /= g.capacity;  // b * kv_heads + kv head
    int b = r / g.kv_heads, p = past_len(seqlens, b, g), keep = resident(total_len(seqlens, b, g), g);
    int src = min(max(resident(p, g) + g.seq - keep + row, 0), g.present_len - 1);
    bool kept = row < keep;
    int64_t from = (r * g.present_len + src) * g.head_size + d;
    st(pk + e, kept ? ld(work_k + from) : 0.0f);
    st(pv + e, kept ? ld(work_v + from) : 0.0f);
  }
}

// A prompt's attention on tensor cores (where attend's softcap, local window and sink are not asked; float16 and
// bfloat16, head size 64, 128 or 256), flash-attention style: a block per (batch, head,
// ATTEND_TILE query tokens), a warp per 16 of them, their q in registers; keys and values come through shared
// memory a tile of KEYS at a time (cp.async, the next tile's copies issued before the current one's products).
// Per tile, q . k^T and then p . v by mma.sync m16n8k16 with float32 sums, an online softmax in float32 (the
// weights p rounded once to T for their product with v, as flash kernels do): outputs within rounding of
// attend's, not its bits; no context limit. Fragment layouts are the PTX ISA's: lane t holds rows t / 4 and
// t / 4 + 8 of a 16-row tile and columns 2 (t % 4), +1 (and +8) of it.
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi, const __half*) {
  __half2 p = __floats2half2_rn(lo, hi);
  return *(uint32_t*)&p;
}
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi, const __nv_bfloat16*) {
  __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
  return *(uint32_t*)&p;
}

template <typename T, int H>
__device__ void attend_tiles(const T* q, const T* k, const T* v, const int32_t* seqlens, T* out, GqaShape g,
                             AttendParams a) {
  // two tiles of keys and values fit 48 KiB; padded rows
  constexpr int KEYS = H == 64 ? 64 : H == 128 ? 32 : 16, STRIDE = H + 8;
  __shared__ __align__(16) T ks[2][KEYS][STRIDE], vs[2][KEYS][STRIDE];  // (16-byte aligned, on distinct banks)
  const int tiles = (g.seq + ATTEND_TILE - 1) / ATTEND_TILE, tile = blockIdx.x % tiles;
  const int h = (blockIdx.x / tiles) % g.heads, b = blockIdx.x / (tiles * g.heads), kh = h / (g.heads / g.kv_heads);
  const int lane = threadIdx.x % 32, row = lane / 4, quad = lane % 4;
  const int i0 = tile * ATTEND_TILE + threadIdx.x / 32 * 16;  // this warp's first query token
  int end[2];  // keys its two rows see (0 past the prompt)
  for (int r = 0; r < 2; r++) {
    int i = i0 + row + 8 * r;
    Visible w = visible(seqlens, b, min(i, g.seq - 1), g, a);
    end[r] = i < g.seq ? min(w.limit, w.t) : 0;
  }
  const Visible last = visible(seqlens, b, min(tile * ATTEND_TILE + ATTEND_TILE, g.seq) - 1, g, a);
  const Visible warp_last = visible(seqlens, b, min(i0 + 15, g.seq - 1), g, a);
  const int keys = min(last.limit, last.t), warp_keys = i0 < g.seq ? min(warp_last.limit, warp_last.t) : 0;
  const T* qb = q + ((int64_t)b * g.heads + h) * g.seq * H;
  const T* kb = k + ((int64_t)b * g.kv_heads + kh) * g.present_len * H;
  const T* vb = v + ((int64_t)b * g.kv_heads + kh) * g.present_len * H;
  uint32_t qf[H / 16][4];  // a fragments of q: rows row, row + 8; channels 16 c + 2 quad, +8
  for (int c = 0; c < H / 16; c++)
    for (int e = 0; e < 4; e++) {
      int i = i0 + row + 8 * (e & 1), d = 16 * c + 2 * quad + 8 * (e >> 1);
      qf[c][e] = i < g.seq ? *(const uint32_t*)(qb + (int64_t)i * H + d) : 0u;
    }
  const bool aligned = (((uintptr_t)k | (uintptr_t)v) & 15) == 0;  // else (ORT's odd buffers) a value at a time
  auto fetch = [&](int buffer, int k0) {  // a tile of keys and values, zeros past the last key any row sees
    for (int x = threadIdx.x; x < KEYS * H / 8; x += blockDim.x) {
      int r = x / (H / 8), d = x % (H / 8) * 8;
      if (k0 + r < keys && aligned) {
        copy16_to_shared(&ks[buffer][r][d], kb + (int64_t)(k0 + r) * H + d);
        copy16_to_shared(&vs[buffer][r][d], vb + (int64_t)(k0 + r) * H + d);
      } else if (k0 + r < keys) {
        for (int e = 0; e < 8; e++) {
          ks[buffer][r][d + e] = kb[(int64_t)(k0 + r) * H + d + e];
          vs[buffer][r][d + e] = vb[(int64_t)(k0 + r) * H + d + e];
        }
      } else {
        *(uint4*)&ks[buffer][r][d] = make_uint4(0u, 0u, 0u, 0u);
        *(uint4*)&vs[buffer][r][d] = make_uint4(0u, 0u, 0u, 0u);
      }
    }
  };
  const float scale = a.scale * 1.4426950408889634f;  // scores in log2 units: exp2f
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, o[H / 8][4] = {};
  if (keys > 0) fetch(0, 0);
  for (int k0 = 0, t = 0; k0 < keys; k0 += KEYS, t ^= 1) {
    wait_copies_to_shared();
    __syncthreads();  // tile t in shared memory; every warp done with the other buffer
    if (k0 + KEYS < keys) fetch(t ^ 1, k0 + KEYS);
    if (k0 >= warp_keys) continue;  // none of this warp's rows sees these keys
    float s[KEYS / 8][4];
    for (int n = 0; n < KEYS / 8; n++) {
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
      for (int c = 0; c < H / 16; c++) {
        const T* key = &ks[t][8 * n + row][16 * c + 2 * quad];
        uint32_t kf[2] = {*(const uint32_t*)key, *(const uint32_t*)(key + 8)};
        mma_16816<T>(s[n], qf[c], kf);
      }
    }
    float top[2] = {-INFINITY, -INFINITY};
    for (int n = 0; n < KEYS / 8; n++)
      for (int e = 0; e < 4; e++) {
        int r = e >> 1;
        s[n][e] = k0 + 8 * n + 2 * quad + (e & 1) < end[r] ? s[n][e] * scale : -INFINITY;
        top[r] = fmaxf(top[r], s[n][e]);
      }
    float corr[2];
    for (int r = 0; r < 2; r++) {  // a row's 4 lanes agree on its maximum
      top[r] = fmaxf(top[r], __shfl_xor_sync(0xffffffff, top[r], 1));
      top[r] = fmaxf(top[r], __shfl_xor_sync(0xffffffff, top[r], 2));
      float now = fmaxf(m[r], top[r]);
      corr[r] = now == -INFINITY ? 1.0f : exp2f(m[r] - now);
      m[r] = now;
      l[r] *= corr[r];  // this lane's share of the row's sum
    }
    for (int n = 0; n < KEYS / 8; n++)
      for (int e = 0; e < 4; e++) {
        int r = e >> 1;
        s[n][e] = s[n][e] == -INFINITY ? 0.0f : exp2f(s[n][e] - m[r]);
        l[r] += s[n][e];
      }
    for (int j = 0; j < H / 8; j++) {
      o[j][0] *= corr[0];
      o[j][1] *= corr[0];
      o[j][2] *= corr[1];
      o[j][3] *= corr[1];
    }
#pragma unroll
    for (int kk = 0; kk < KEYS / 16; kk++) {  // p's a fragments are two n tiles of the scores' accumulators
      const T* tag = nullptr;
      uint32_t pf[4] = {pack_pair(s[2 * kk][0], s[2 * kk][1], tag), pack_pair(s[2 * kk][2], s[2 * kk][3], tag),
                        pack_pair(s[2 * kk + 1][0], s[2 * kk + 1][1], tag),
                        pack_pair(s[2 * kk + 1][2], s[2 * kk + 1][3], tag)};
#pragma unroll
      for (int jj = 0; jj < H / 16; jj++) {  // v's b fragments for channels 16 jj.. and 16 jj + 8..
        uint32_t vf[4];
        load_matrices_transposed(vf, &vs[t][16 * kk + lane % 8 + (lane / 8) % 2 * 8][16 * jj + lane / 16 * 8]);
        mma_16816<T>(o[2 * jj], pf, vf);
        mma_16816<T>(o[2 * jj + 1], pf, vf + 2);
      }
    }
  }
  for (int r = 0; r < 2; r++) {
    l[r] += __shfl_xor_sync(0xffffffff, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffff, l[r], 2);
    int i = i0 + row + 8 * r;
    if (i >= g.seq) continue;
    T* out_row = out + (((int64_t)b * g.seq + i) * g.heads + h) * H;
    float inv = 1.0f / l[r];
    for (int j = 0; j < H / 8; j++)
      *(uint32_t*)(out_row + 8 * j + 2 * quad) = pack_pair(o[j][2 * r] * inv, o[j][2 * r + 1] * inv, out_row);
  }
}

#define GQA_ATTEND_TILES(S, T, H)                                                                             \
  extern "C" __global__ void __launch_bounds__(128) seamless_gqa_attend_tiles_h##H##_##S(                      \
      const T* q, const T* k, const T* v, const int32_t* seqlens, T* out, GqaShape g, AttendParams a) {        \
    dependent_launch();                                                                                       \
    attend_tiles<T, H>(q, k, v, seqlens, out, g, a);                                                          \
  }
GQA_ATTEND_TILES(f16, __half, 64) GQA_ATTEND_TILES(f16, __half, 128) GQA_ATTEND_TILES(f16, __half, 256)
GQA_ATTEND_TILES(bf16, __nv_bfloat16, 64) GQA_ATTEND_TILES(bf16, __nv_bfloat16, 128)
GQA_ATTEND_TILES(bf16, __nv_bfloat16, 256)

// A decode step (one new token a batch row) in one launch, split over keys (flash decoding) where the
// context is long: grid (splits, batch * heads) of DECODE_THREADS threads; a present row to each
// head_size / 8 lanes (8 channels a lane), PASSES (4 or 8) rows a lane group, so a block takes up to
// PASSES * DECODE_THREADS * 8 / head_size rows. Each thread makes its q channels (rotated, rounded
// to T), the new token's k (rotated) and v, and loads its rows' k and v: past row j (j < p), the new
// token's at p, zeros after, all loads at once; the blocks of each KV head's first query head write
// them to the present buffers.
// Scores, softmax and weighted values stay in registers but for one max and one sum across warps.
// With several splits, each block leaves (max, sum, weighted values) in `partial`, and the block of
// (b, head) that finishes last (counted in `counters`, which it sets back to zero) combines them in
// order into out; a single split combines its own the same way where a sink is given (else its weight is 1).
// Eight channels of a row as stored (16 bytes, 32 for float32): past rows stay so in registers until used,
// half the registers of float32 copies for 16-bit types, so a block fits on an SM beside the kernel before.
template <typename T>
struct Row8 {
  uint4 w[sizeof(T) / 2];
};
template <typename T>
__device__ __forceinline__ void floats8(const Row8<T>& r, float* x) { load8((const T*)r.w, x); }

// A thread's past rows first + i * per_pass below `end` (zeros from there on), its 8 channels from c0; a pass
// whose rows all lie past `end` for the whole warp (its first row warp_row + i * per_pass) skips its loads.
template <typename T, int PASSES>
__device__ __forceinline__ void past_rows(const T* past_k, const T* past_v, int64_t kv, int first, int warp_row,
                                          int per_pass, int end, const GqaShape& g, int H, int c0, Row8<T>* kx,
                                          Row8<T>* vx) {
#pragma unroll
  for (int i = 0; i < PASSES; i++) {
    int j = first + i * per_pass;
    if (past_k && warp_row + i * per_pass < end && j < end) {
      kx[i] = *(const Row8<T>*)(past_k + (kv * g.past_buf + j) * H + c0);
      vx[i] = *(const Row8<T>*)(past_v + (kv * g.past_buf + j) * H + c0);
    } else {
      kx[i] = vx[i] = Row8<T>{};
    }
  }
}

// A decode step's rotary factors of a thread's channels from c0 (into factors: cos, then sin) for the past length
// seqlens_k says before the wait for the kernel before (an earlier kernel of the run wrote it, nearly always long
// finished): that guess, which decode_start checks after the wait.
template <typename T>
__device__ __forceinline__ int guess_rotary(const T* cos, const T* sin, const int32_t* seqlens, int b, int c0,
                                            const GqaShape& g, float* factors) {
  if (!g.do_rotary || c0 >= 2 * g.rot_half) return 0;
  const int guess = min(past_of(__ldcg(seqlens + b), g), g.cos_rows - 1);
  rotary_factors8(c0, cos + (int64_t)guess * g.rot_half, sin + (int64_t)guess * g.rot_half, g.rot_half,
                  g.interleaved, factors, factors + 8);
  return guess;
}
// After the wait: batch row b's past length p and visible rows (t, limit, lo), the cos and sin rows of position p,
// the factors fetched again where the guess was wrong.
template <typename T>
struct DecodeStart {
  int p, t, limit, lo;
  const T *cos_row, *sin_row;
};
template <typename T>
__device__ __forceinline__ DecodeStart<T> decode_start(const T* cos, const T* sin, const int32_t* seqlens, int b,
                                                       int c0, const GqaShape& g, const AttendParams& a, int guess,
                                                       float* factors) {
  const int p = past_len(seqlens, b, g);
  const Visible v = visible(seqlens, b, 0, g, a);
  const int r = min(p, g.cos_rows - 1);
  const T* cos_row = g.do_rotary ? cos + (int64_t)r * g.rot_half : nullptr;
  const T* sin_row = g.do_rotary ? sin + (int64_t)r * g.rot_half : nullptr;
  if (g.do_rotary && c0 < 2 * g.rot_half && r != guess)
    rotary_factors8(c0, cos_row, sin_row, g.rot_half, g.interleaved, factors, factors + 8);
  return {p, v.t, v.limit, v.lo, cos_row, sin_row};
}

// HS: the head size where known at compile time (the common 64 and 128: indexing and the lane reductions fold to
// constants), else 0 and g.head_size.
template <typename T, int PASSES, int HS>
__device__ void decode(const T* past_k, const T* past_v, const T* q_in, const T* k_in, const T* v_in, const T* cos,
                       const T* sin, const int32_t* seqlens, const float* sink, T* pk, T* pv, T* out, float* partial,
                       unsigned* counters, GqaShape g, AttendParams a) {
  constexpr int warps = DECODE_THREADS / 32;
  __shared__ float wmax[warps], wsum[warps], wacc[warps * 256], own[2 + 256];
  __shared__ bool last;
  const int H = HS ? HS : g.head_size, lanes = H / 8, per_pass = DECODE_THREADS / lanes, group = g.heads / g.kv_heads;
  const int warp = threadIdx.x / 32, c0 = threadIdx.x % lanes * 8;
  const int bq = blockIdx.y, b = bq / g.heads, qh = bq % g.heads, kh = qh / group;
  const int split = blockIdx.x, splits = gridDim.x, first = split * per_pass * PASSES + threadIdx.x / lanes;
  const int warp_row = first - threadIdx.x % 32 / lanes;  // the warp's first row: its passes skip or not together
  // a pass of the warp with rows in the present buffers (rows past them are neither stored nor seen: skipped)
  auto live = [&](int i) { return warp_row + i * per_pass < g.present_len; };
  const int64_t kv = (int64_t)b * g.kv_heads + kh;
  float q[8], knew[8];
  Row8<T> kx[PASSES], vx[PASSES];
  // Where no kernel of this run writes the past, a single split loads its rows before waiting for the kernel
  // before, without the past length (rows at or past it are replaced below): an int4 layer 22.8 -> 20.8 us.
  // The next kernel launches at once (its weights stream into L2 while this one runs), or, where they are few (a
  // quantized projection follows), once this block has its inputs, so that their loads compete less: int4 layer
  // 17.2 -> 16.6 us, float16's 19.9 -> 20.1 (H200)
  if (!a.late_launch) let_next_launch();
  const bool early = a.early && splits == 1;
  if (early)
    past_rows<T, PASSES>(past_k, past_v, kv, first, warp_row, per_pass, min(g.present_len, g.past_buf), g, H, c0, kx, vx);
  float factors[16];  // cos, then sin
  const int guess = guess_rotary(cos, sin, seqlens, b, c0, g, factors);
  wait_for_previous();
  const auto [p, t, limit, lo, cos_row, sin_row] = decode_start(cos, sin, seqlens, b, c0, g, a, guess, factors);
  // the new token's q, k and v channels (every thread: one copy of the code, L1 hits), then the rows
  rotated8(new_row(q_in, k_in, v_in, b, 0, qh, g), c0, cos_row, sin_row, g.rot_half, g.interleaved, q, factors);
  rotated8(new_row(q_in, k_in, v_in, b, 0, g.heads + kh, g), c0, cos_row, sin_row, g.rot_half, g.interleaved, knew,
           factors);
  const Row8<T> vnew = *(const Row8<T>*)(new_row(q_in, k_in, v_in, b, 0, g.heads + g.kv_heads + kh, g) + c0);
  if (!early)
    past_rows<T, PASSES>(past_k, past_v, kv, first, warp_row, per_pass, min(min(g.present_len, g.past_buf), p), g, H, c0,
                         kx, vx);
  for (int e = 0; e < 8; e++) q[e] = rounded<T>(q[e]);
  if (a.late_launch) let_next_launch();
  Row8<T> kround;
  store8((T*)kround.w, knew);
#pragma unroll
  for (int i = 0; i < PASSES; i++) {
    int j = first + i * per_pass;
    if (live(i) && j >= p) {  // the new token's row, then zeros
      kx[i] = j == p ? kround : Row8<T>{};
      vx[i] = j == p ? vnew : Row8<T>{};
    }
  }
  if (qh % group == 0)
#pragma unroll
    for (int i = 0; i < PASSES; i++) {
      int j = first + i * per_pass;
      if (live(i) && j < g.present_len && (!a.in_place || j == p)) {
        *(Row8<T>*)(pk + (kv * g.present_len + j) * H + c0) = kx[i];
        *(Row8<T>*)(pv + (kv * g.present_len + j) * H + c0) = vx[i];
      }
    }
  float s[PASSES], m = -INFINITY;
#pragma unroll
  for (int i = 0; i < PASSES; i++) {
    s[i] = -INFINITY;
    if (!live(i)) continue;
    float v = 0.0f, k[8];
    floats8(kx[i], k);
    for (int e = 0; e < 8; e++) v += q[e] * k[e];
    for (int off = 1; off < lanes; off <<= 1) v += __shfl_xor_sync(0xffffffff, v, off);
    v *= a.scale;
    if (a.softcap > 0.0f) v = a.softcap * tanhf(v / a.softcap);
    int j = first + i * per_pass;
    s[i] = j >= lo && j < limit && j < t ? v : -INFINITY;
    m = fmaxf(m, s[i]);
  }
  for (int off = lanes; off < 32; off <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, off));
  if (threadIdx.x % 32 == 0) wmax[warp] = m;
  __syncthreads();
  m = -INFINITY;
  for (int w = 0; w < warps; w++) m = fmaxf(m, wmax[w]);
  float l = 0.0f, acc[8] = {};
#pragma unroll
  for (int i = 0; i < PASSES; i++) {
    if (!live(i)) continue;  // e would be 0: adding nothing
    float e = s[i] == -INFINITY ? 0.0f : expf(s[i] - m), v[8];
    floats8(vx[i], v);
    l += e;
    for (int c = 0; c < 8; c++) acc[c] += e * v[c];
  }
  for (int off = lanes; off < 32; off <<= 1) {
    l += __shfl_xor_sync(0xffffffff, l, off);
    for (int c = 0; c < 8; c++) acc[c] += __shfl_xor_sync(0xffffffff, acc[c], off);
  }
  if (threadIdx.x % 32 < lanes) {
    for (int c = 0; c < 8; c++) wacc[warp * H + c0 + c] = acc[c];
    if (c0 == 0) wsum[warp] = l;
  }
  __syncthreads();
  if (splits == 1 && !a.smooth) {  // nothing to combine: the general path's weight would be exp(0), the same bits
    for (int d = threadIdx.x; d < H; d += DECODE_THREADS) {
      float o = 0.0f, total = 0.0f;
      for (int w = 0; w < warps; w++) {
        o += wacc[w * H + d];
        total += wsum[w];
      }
      st(out + ((int64_t)b * g.heads + qh) * H + d, o * (1.0f / total));
    }
    return;
  }
  float* mine = splits == 1 ? own : partial + ((int64_t)bq * splits + split) * (H + 2);  // max, sum, values
  for (int d = threadIdx.x; d < H; d += DECODE_THREADS) {
    float o = 0.0f;
    for (int w = 0; w < warps; w++) o += wacc[w * H + d];
    mine[2 + d] = o;
  }
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int w = 0; w < warps; w++) total += wsum[w];
    mine[0] = m;
    mine[1] = total;
  }
  __syncthreads();
  const float* all = own;
  if (splits > 1) {  // one thread's fence and count, as a grid sync does
    if (threadIdx.x == 0) {
      __threadfence();
      last = atomicAdd(counters + bq, 1u) == (unsigned)splits - 1;
      if (last) {
        counters[bq] = 0;  // every block of (b, head) has counted: ready for the next launch
        __threadfence();   // the other blocks' partials before our reads
      }
    }
    __syncthreads();
    if (!last) return;
    all = partial + (int64_t)bq * splits * (H + 2);
  }
  // The whole block combines: each thread a share of the splits (their loads at once, not one split after another:
  // at 4000 cached tokens 32 splits), then the shares in a fixed order.
  auto at = [&](int c, int i) { return splits == 1 ? all[i] : __ldcg(all + (int64_t)c * (H + 2) + i); };  // L2
  float mx = -INFINITY, sum = 0.0f;
  for (int c = threadIdx.x; c < splits; c += DECODE_THREADS) mx = fmaxf(mx, at(c, 0));
  mx = block_reduce(mx, true);
  if (a.smooth) mx = fmaxf(mx, sink[qh]);
  for (int c = threadIdx.x; c < splits; c += DECODE_THREADS) sum += at(c, 1) * expf(at(c, 0) - mx);
  sum = block_reduce(sum, false);
  if (a.smooth) sum += expf(sink[qh] - mx);
  const int groups = DECODE_THREADS / H, share = threadIdx.x / H, d = threadIdx.x % H;  // H divides DECODE_THREADS
  float o = 0.0f;
#pragma unroll 4
  for (int c = share; c < splits; c += groups) o += at(c, 2 + d) * expf(at(c, 0) - mx);
  wacc[share * H + d] = o;
  __syncthreads();
  if (threadIdx.x < H) {
    o = 0.0f;
    for (int i = 0; i < groups; i++) o += wacc[i * H + threadIdx.x];
    st(out + ((int64_t)b * g.heads + qh) * H + threadIdx.x, o * (1.0f / sum));
  }
}

// The splits' (max, sum, weighted values) of query head qh of batch row b (`all`: splits records of H + 2 floats;
// own shared memory for one split) combined in order into out by the whole block (sink: its weight).
template <typename T>
__device__ void combine_splits(const float* all, int splits, int b, int qh, int H, const float* sink, T* out,
                               float* wacc, const GqaShape& g, const AttendParams& a) {
  auto at = [&](int c, int i) { return splits == 1 ? all[i] : __ldcg(all + (int64_t)c * (H + 2) + i); };  // L2
  float mx = -INFINITY, sum = 0.0f;
  for (int c = threadIdx.x; c < splits; c += DECODE_THREADS) mx = fmaxf(mx, at(c, 0));
  mx = block_reduce(mx, true);
  if (a.smooth) mx = fmaxf(mx, sink[qh]);
  for (int c = threadIdx.x; c < splits; c += DECODE_THREADS) sum += at(c, 1) * expf(at(c, 0) - mx);
  sum = block_reduce(sum, false);
  if (a.smooth) sum += expf(sink[qh] - mx);
  const int groups = DECODE_THREADS / H, share = threadIdx.x / H, d = threadIdx.x % H;
  float o = 0.0f;
#pragma unroll 4
  for (int c = share; c < splits; c += groups) o += at(c, 2 + d) * expf(at(c, 0) - mx);
  wacc[share * H + d] = o;
  __syncthreads();
  if (threadIdx.x < H) {
    o = 0.0f;
    for (int i = 0; i < groups; i++) o += wacc[i * H + threadIdx.x];
    st(out + ((int64_t)b * g.heads + qh) * H + threadIdx.x, o * (1.0f / sum));
  }
  __syncthreads();  // wacc free again
}

// The splits' records of query heads qh0 .. qh0 + heads - 1 of batch row b (`all`: each head's splits records of
// H + 2 floats, one head after another) combined in order into out by the whole block, up to a head a warp at once:
// a warp a head's max and sum, then a thread a (head, channel)'s weighted values. Head by head (combine_splits),
// a group's last block took longer than the block of splits before it.
template <typename T>
__device__ void combine_group(const float* all, int heads, int splits, int b, int qh0, int H, const float* sink,
                              T* out, float* wmax, float* wsum, const GqaShape& g, const AttendParams& a) {
  constexpr int warps = DECODE_THREADS / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  auto at = [&](int hq, int c, int i) { return __ldcg(all + ((int64_t)hq * splits + c) * (H + 2) + i); };  // L2
  for (int h0 = 0; h0 < heads; h0 += warps) {
    const int n = min(warps, heads - h0);
    if (warp < n) {
      const int hq = h0 + warp;
      float mx = -INFINITY, sum = 0.0f;
      for (int c = lane; c < splits; c += 32) mx = fmaxf(mx, at(hq, c, 0));
      for (int off = 16; off; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, off));
      if (a.smooth) mx = fmaxf(mx, sink[qh0 + hq]);
      for (int c = lane; c < splits; c += 32) sum += at(hq, c, 1) * expf(at(hq, c, 0) - mx);
      for (int off = 16; off; off >>= 1) sum += __shfl_xor_sync(0xffffffff, sum, off);
      if (a.smooth) sum += expf(sink[qh0 + hq] - mx);
      if (lane == 0) {
        wmax[warp] = mx;
        wsum[warp] = 1.0f / sum;
      }
    }
    __syncthreads();
    for (int pair = threadIdx.x; pair < n * H; pair += DECODE_THREADS) {
      const int w = pair / H, d = pair % H;
      float o = 0.0f;
#pragma unroll 8
      for (int c = 0; c < splits; c++) o += at(h0 + w, c, 2 + d) * expf(at(h0 + w, c, 0) - wmax[w]);
      st(out + ((int64_t)b * g.heads + qh0 + h0 + w) * H + d, o * wsum[w]);
    }
    __syncthreads();  // wmax and wsum free for the next heads
  }
}

// One count a block of (b, KV head) in `counter` (thread 0's fence and count, as a grid sync does): the last of its
// `blocks` sets it back to zero and combines the splits of every query head of the group (combine_group).
template <typename T>
__device__ void last_combines_group(unsigned* counter, int blocks, const float* partial, int splits, int b, int kh,
                                    int H, const float* sink, T* out, float* wmax, float* wsum, const GqaShape& g,
                                    const AttendParams& a) {
  __shared__ bool last;
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(counter, 1u) == (unsigned)blocks - 1;
    if (last) {
      *counter = 0;
      __threadfence();
    }
  }
  __syncthreads();
  if (!last) return;
  const int group = g.heads / g.kv_heads;
  combine_group(partial + (int64_t)(b * g.heads + kh * group) * splits * (H + 2), group, splits, b, kh * group, H,
                sink, out, wmax, wsum, g, a);
}

// gqa_decode for long contexts: a block per KV head and split (grid (splits, batch * kv_heads)) takes every query
// head of its group in turn with the split's rows kept in registers, so each cached row is read once a step, not
// once a query head (the Llama-3.2-1B shape's 4, Qwen2.5-0.5B's 7; at 32k tokens decode's per-head blocks read
// 4 GB a step from L2 for 1 GB of cache: docs/benchmarks/gpu.md, session 44), and the blocks are `group` times
// fewer, each longer. The arithmetic of decode() above, head by head; its last block of (b, KV head) combines
// every head of the group. Its per-head body repeats decode()'s: one device function for both changed decode()'s
// sm_90 code (its tuned form), unmeasured so far; merge them where a GPU can time it.
template <typename T, int PASSES, int HS>
__device__ void decode_grouped(const T* past_k, const T* past_v, const T* q_in, const T* k_in, const T* v_in,
                               const T* cos, const T* sin, const int32_t* seqlens, const float* sink, T* pk, T* pv,
                               T* out, float* partial, unsigned* counters, GqaShape g, AttendParams a) {
  constexpr int warps = DECODE_THREADS / 32;
  __shared__ float wmax[warps], wsum[warps], wacc[warps * 256], own[2 + 256];
  const int H = HS ? HS : g.head_size, lanes = H / 8, per_pass = DECODE_THREADS / lanes, group = g.heads / g.kv_heads;
  const int warp = threadIdx.x / 32, c0 = threadIdx.x % lanes * 8;
  const int bk = blockIdx.y, b = bk / g.kv_heads, kh = bk % g.kv_heads;
  const int split = blockIdx.x, splits = gridDim.x, first = split * per_pass * PASSES + threadIdx.x / lanes;
  const int warp_row = first - threadIdx.x % 32 / lanes;
  auto live = [&](int i) { return warp_row + i * per_pass < g.present_len; };
  const int64_t kv = (int64_t)b * g.kv_heads + kh;
  float knew[8];
  Row8<T> kx[PASSES], vx[PASSES];
  if (!a.late_launch) let_next_launch();
  const bool early = a.early && splits == 1;
  if (early)
    past_rows<T, PASSES>(past_k, past_v, kv, first, warp_row, per_pass, min(g.present_len, g.past_buf), g, H, c0, kx, vx);
  float factors[16];  // cos, then sin
  const int guess = guess_rotary(cos, sin, seqlens, b, c0, g, factors);
  wait_for_previous();
  const auto [p, t, limit, lo, cos_row, sin_row] = decode_start(cos, sin, seqlens, b, c0, g, a, guess, factors);
  rotated8(new_row(q_in, k_in, v_in, b, 0, g.heads + kh, g), c0, cos_row, sin_row, g.rot_half, g.interleaved, knew,
           factors);
  const Row8<T> vnew = *(const Row8<T>*)(new_row(q_in, k_in, v_in, b, 0, g.heads + g.kv_heads + kh, g) + c0);
  if (!early)
    past_rows<T, PASSES>(past_k, past_v, kv, first, warp_row, per_pass, min(min(g.present_len, g.past_buf), p), g, H, c0,
                         kx, vx);
  if (a.late_launch) let_next_launch();
  Row8<T> kround;
  store8((T*)kround.w, knew);
#pragma unroll
  for (int i = 0; i < PASSES; i++) {
    int j = first + i * per_pass;
    if (live(i) && j >= p) {  // the new token's row, then zeros
      kx[i] = j == p ? kround : Row8<T>{};
      vx[i] = j == p ? vnew : Row8<T>{};
    }
  }
#pragma unroll
  for (int i = 0; i < PASSES; i++) {  // this block is the KV head's only one for these rows
    int j = first + i * per_pass;
    if (live(i) && j < g.present_len && (!a.in_place || j == p)) {
      *(Row8<T>*)(pk + (kv * g.present_len + j) * H + c0) = kx[i];
      *(Row8<T>*)(pv + (kv * g.present_len + j) * H + c0) = vx[i];
    }
  }
  for (int hq = 0; hq < group; hq++) {
    const int qh = kh * group + hq, bq = b * g.heads + qh;
    float q[8];
    rotated8(new_row(q_in, k_in, v_in, b, 0, qh, g), c0, cos_row, sin_row, g.rot_half, g.interleaved, q, factors);
    for (int e = 0; e < 8; e++) q[e] = rounded<T>(q[e]);
    float s[PASSES], m = -INFINITY;
#pragma unroll
    for (int i = 0; i < PASSES; i++) {
      s[i] = -INFINITY;
      if (!live(i)) continue;
      float v = 0.0f, k[8];
      floats8(kx[i], k);
      for (int e = 0; e < 8; e++) v += q[e] * k[e];
      for (int off = 1; off < lanes; off <<= 1) v += __shfl_xor_sync(0xffffffff, v, off);
      v *= a.scale;
      if (a.softcap > 0.0f) v = a.softcap * tanhf(v / a.softcap);
      int j = first + i * per_pass;
      s[i] = j >= lo && j < limit && j < t ? v : -INFINITY;
      m = fmaxf(m, s[i]);
    }
    for (int off = lanes; off < 32; off <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, off));
    if (threadIdx.x % 32 == 0) wmax[warp] = m;
    __syncthreads();
    m = -INFINITY;
    for (int w = 0; w < warps; w++) m = fmaxf(m, wmax[w]);
    float l = 0.0f, acc[8] = {};
#pragma unroll
    for (int i = 0; i < PASSES; i++) {
      if (!live(i)) continue;
      float e = s[i] == -INFINITY ? 0.0f : expf(s[i] - m), v[8];
      floats8(vx[i], v);
      l += e;
      for (int c = 0; c < 8; c++) acc[c] += e * v[c];
    }
    for (int off = lanes; off < 32; off <<= 1) {
      l += __shfl_xor_sync(0xffffffff, l, off);
      for (int c = 0; c < 8; c++) acc[c] += __shfl_xor_sync(0xffffffff, acc[c], off);
    }
    if (threadIdx.x % 32 < lanes) {
      for (int c = 0; c < 8; c++) wacc[warp * H + c0 + c] = acc[c];
      if (c0 == 0) wsum[warp] = l;
    }
    __syncthreads();
    float* mine = splits == 1 ? own : partial + ((int64_t)bq * splits + split) * (H + 2);  // max, sum, values
    for (int d = threadIdx.x; d < H; d += DECODE_THREADS) {
      float o = 0.0f;
      for (int w = 0; w < warps; w++) o += wacc[w * H + d];
      mine[2 + d] = o;
    }
    if (threadIdx.x == 0) {
      float total = 0.0f;
      for (int w = 0; w < warps; w++) total += wsum[w];
      mine[0] = m;
      mine[1] = total;
    }
    __syncthreads();  // wmax, wsum and wacc read: free for the next head
    if (splits == 1) combine_splits(own, 1, b, qh, H, sink, out, wacc, g, a);
  }
  if (splits == 1) return;
  last_combines_group(counters + bk, splits, partial, splits, b, kh, H, sink, out, wmax, wsum, g, a);
}

// gqa_decode for long contexts, 16-bit caches of head size 64 or 128: a block per (b, KV head, split, up to
// STREAM_HEADS query heads of the group), its rows streamed through shared memory in STREAM_STAGES stages (cp.async:
// the loads in flight hold no registers; args.h STREAM_*), three chunks in flight while one is scored for each of
// its query heads with a running max and sum a lane group (no barrier in the loop: a thread reads only the pieces
// it copied). Against gqa_decode_grouped (its rows all loaded, then each head scored with block barriers), H100:
// the 1B shape's layer at 32k tokens 86 -> 50 us, the 0.5B's 51-55 -> 41 (docs/benchmarks/gpu.md, session 54); chunks
// of one row a lane group (STREAM_PASSES 1) and every head's score ahead of the branches: 50 -> 44 us, 8k 26.5 -> 22.8
// (session 55).
// The splits are few (about two blocks an SM) and long; a group of more than STREAM_HEADS query heads takes
// several blocks a split, adjacent in the grid, which read the same rows at about the same time (L2). Each block
// leaves its heads' (max, sum, weighted values) in `partial` as decode_grouped does, and the last block of
// (b, KV head) combines every head of the group (combine_group).
// Grid (splits * subs, batch * kv_heads), subs = ceil(group / STREAM_HEADS); dynamic shared memory
// STREAM_STAGES * 2 * stream_rows(H) * H elements.
__host__ __device__ constexpr int stream_rows(int H) { return STREAM_PASSES * DECODE_THREADS / (H / 8); }

template <typename T, int H>
__device__ void decode_stream(const T* past_k, const T* past_v, const T* q_in, const T* k_in, const T* v_in,
                              const T* cos, const T* sin, const int32_t* seqlens, const float* sink, T* pk, T* pv,
                              T* out, float* partial, unsigned* counters, GqaShape g, AttendParams a) {
  constexpr int lanes = H / 8, per_pass = DECODE_THREADS / lanes, rows = stream_rows(H), warps = DECODE_THREADS / 32;
  extern __shared__ __align__(16) unsigned char stream_smem[];
  T* stage = (T*)stream_smem;  // [STREAM_STAGES][K, V][rows][H]
  __shared__ float wmax[warps * STREAM_HEADS], wsum[warps * STREAM_HEADS], wacc[warps * STREAM_HEADS * H];
  const int group = g.heads / g.kv_heads, subs = (group + STREAM_HEADS - 1) / STREAM_HEADS;
  const int split = blockIdx.x / subs, splits = gridDim.x / subs, sub = blockIdx.x % subs;
  const int bk = blockIdx.y, b = bk / g.kv_heads, kh = bk % g.kv_heads;
  const int h0 = kh * group + sub * STREAM_HEADS, n = min(STREAM_HEADS, group - sub * STREAM_HEADS);
  const int lg = threadIdx.x / lanes, c0 = threadIdx.x % lanes * 8, warp = threadIdx.x / 32;
  const int64_t kv = (int64_t)b * g.kv_heads + kh;
  if (!a.late_launch) let_next_launch();
  float factors[16];  // cos, then sin
  const int guess = guess_rotary(cos, sin, seqlens, b, c0, g, factors);
  wait_for_previous();
  const auto [p, t, limit, lo, cos_row, sin_row] = decode_start(cos, sin, seqlens, b, c0, g, a, guess, factors);
  // this split's rows [first, end); the past's rows below `loaded` come from the buffers (the rest: the new token's
  // row at p, zeros after it); in place, rows nobody sees are not loaded
  const int per_split = (g.present_len + splits - 1) / splits;
  const int first = split * per_split, end = min(g.present_len, first + per_split);
  const int loaded = min(min(g.present_len, g.past_buf), p), from = lo, seen = min(limit, t);
  auto wanted = [&](int j) { return j < loaded && (!a.in_place || (j >= from && j < seen)); };
  auto fetch = [&](int chunk) {  // chunk c of the split into stage c % STREAM_STAGES: this thread's rows of it
    T* at = stage + (int64_t)(chunk % STREAM_STAGES) * 2 * rows * H;
    for (int i = 0; i < STREAM_PASSES; i++) {
      const int row = lg + i * per_pass, j = first + chunk * rows + row;
      if (j < end && wanted(j)) {
        copy16_to_shared(at + row * H + c0, past_k + (kv * g.past_buf + j) * H + c0);
        copy16_to_shared(at + (rows + row) * H + c0, past_v + (kv * g.past_buf + j) * H + c0);
      }
    }
    commit_copies();  // one group a chunk, empty or not: the waits below count chunks
  };
  const int chunks = (end - first + rows - 1) / rows;
  for (int c = 0; c < STREAM_STAGES - 1; c++) fetch(c);
  // the new token's k (rotated, rounded to T) and v; q of this block's heads (rotated, rounded)
  float knew[8], q[STREAM_HEADS][8];
  rotated8(new_row(q_in, k_in, v_in, b, 0, g.heads + kh, g), c0, cos_row, sin_row, g.rot_half, g.interleaved, knew,
           factors);
  Row8<T> kround, vnew = *(const Row8<T>*)(new_row(q_in, k_in, v_in, b, 0, g.heads + g.kv_heads + kh, g) + c0);
  store8((T*)kround.w, knew);
#pragma unroll
  for (int h = 0; h < STREAM_HEADS; h++) {
    if (h < n) rotated8(new_row(q_in, k_in, v_in, b, 0, h0 + h, g), c0, cos_row, sin_row, g.rot_half, g.interleaved,
                        q[h], factors);
    for (int e = 0; e < 8; e++) q[h][e] = h < n ? rounded<T>(q[h][e]) : 0.0f;
  }
  if (a.late_launch) let_next_launch();
  float m[STREAM_HEADS], l[STREAM_HEADS], acc[STREAM_HEADS][8];
#pragma unroll
  for (int h = 0; h < STREAM_HEADS; h++) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
    for (int e = 0; e < 8; e++) acc[h][e] = 0.0f;
  }
  for (int c = 0; c < chunks; c++) {
    fetch(c + STREAM_STAGES - 1);
    wait_copies_but<STREAM_STAGES - 1>();  // chunk c has landed (this thread's pieces of it)
    const T* at = stage + (int64_t)(c % STREAM_STAGES) * 2 * rows * H;
    for (int i = 0; i < STREAM_PASSES; i++) {
      const int row = lg + i * per_pass, j = first + c * rows + row;
      const bool mine = j < end, shown = mine && j >= lo && j < seen;
      Row8<T> kx, vx;
      if (mine && wanted(j)) {
        kx = *(const Row8<T>*)(at + row * H + c0);
        vx = *(const Row8<T>*)(at + (rows + row) * H + c0);
      } else {
        kx = j == p ? kround : Row8<T>{};
        vx = j == p ? vnew : Row8<T>{};
      }
      if (sub == 0 && mine && j < g.present_len && (!a.in_place || j == p)) {  // the present buffers: a block a row
        *(Row8<T>*)(pk + (kv * g.present_len + j) * H + c0) = kx;
        *(Row8<T>*)(pv + (kv * g.present_len + j) * H + c0) = vx;
      }
      // every lane of the warp takes the shuffles below, or none: rows nobody in the warp sees are skipped
      if (!__any_sync(0xffffffff, shown)) continue;
      float k[8], v[8], score[STREAM_HEADS];
      floats8(kx, k);
      floats8(vx, v);
      // every head's score before any branch, so that the heads' shuffles overlap (q is 0 past the n heads)
#pragma unroll
      for (int h = 0; h < STREAM_HEADS; h++) {
        score[h] = 0.0f;
        for (int e = 0; e < 8; e++) score[h] += q[h][e] * k[e];
      }
#pragma unroll
      for (int off = 1; off < lanes; off <<= 1)
#pragma unroll
        for (int h = 0; h < STREAM_HEADS; h++) score[h] += __shfl_xor_sync(0xffffffff, score[h], off);
      if (!shown) continue;  // the lane group's row, unseen: all its lanes together
#pragma unroll
      for (int h = 0; h < STREAM_HEADS; h++) {
        if (h >= n) continue;
        float s = score[h] * a.scale;
        if (a.softcap > 0.0f) s = a.softcap * tanhf(s / a.softcap);
        if (s > m[h]) {  // a new running max: what was summed so far scaled down to it
          const float down = m[h] == -INFINITY ? 0.0f : expf(m[h] - s);
          l[h] *= down;
          for (int e = 0; e < 8; e++) acc[h][e] *= down;
          m[h] = s;
        }
        const float w = expf(s - m[h]);
        l[h] += w;
        for (int e = 0; e < 8; e++) acc[h][e] += w * v[e];
      }
    }
  }
  wait_copies_to_shared();  // the empty groups issued past the last chunk
  // the lane groups of a warp, then the warps, merged: (max, sum, values) a head
#pragma unroll
  for (int h = 0; h < STREAM_HEADS; h++) {
    if (h >= n) continue;
    for (int off = lanes; off < 32; off <<= 1) {
      const float m2 = __shfl_xor_sync(0xffffffff, m[h], off), l2 = __shfl_xor_sync(0xffffffff, l[h], off);
      const float top = fmaxf(m[h], m2);
      const float x = m[h] == -INFINITY ? 0.0f : expf(m[h] - top), y = m2 == -INFINITY ? 0.0f : expf(m2 - top);
      l[h] = l[h] * x + l2 * y;
      for (int e = 0; e < 8; e++) acc[h][e] = acc[h][e] * x + __shfl_xor_sync(0xffffffff, acc[h][e], off) * y;
      m[h] = top;
    }
    if (threadIdx.x % 32 < lanes) {
      for (int e = 0; e < 8; e++) wacc[(warp * STREAM_HEADS + h) * H + c0 + e] = acc[h][e];
      if (c0 == 0) {
        wmax[warp * STREAM_HEADS + h] = m[h];
        wsum[warp * STREAM_HEADS + h] = l[h];
      }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n * H; i += DECODE_THREADS) {  // a (head, channel) a thread
    const int h = i / H, d = i % H;
    float top = -INFINITY, sum = 0.0f, o = 0.0f;
    for (int w = 0; w < warps; w++) top = fmaxf(top, wmax[w * STREAM_HEADS + h]);
    for (int w = 0; w < warps; w++) {
      const float mw = wmax[w * STREAM_HEADS + h], x = mw == -INFINITY ? 0.0f : expf(mw - top);
      sum += wsum[w * STREAM_HEADS + h] * x;
      o += wacc[(w * STREAM_HEADS + h) * H + d] * x;
    }
    float* mine = partial + ((int64_t)(b * g.heads + h0 + h) * splits + split) * (H + 2);  // max, sum, values
    mine[2 + d] = o;
    if (d == 0) {
      mine[0] = top;
      mine[1] = sum;
    }
  }
  __syncthreads();
  last_combines_group(counters + bk, splits * subs, partial, splits, b, kh, H, sink, out, wmax, wsum, g, a);
}

// gqa_decode with PASSES rows a lane group: kernels seamless_gqa_decode_p4_* and _p8_* (any head size), and
// seamless_gqa_decode_p4_h64_*, ... for head sizes 64 and 128 of 16-bit types; for long contexts
// seamless_gqa_decode_stream_h64_* and _h128_* (16-bit types), seamless_gqa_decode_grouped_p8_* (the other head sizes
// and float32). 16-bit kernels two blocks an SM:
// unbounded, grouped p8 took 203 registers and p8 130, one block an SM, whose loads then overlapped no other block's
// (H100: the 1B step at 32k -13..-20 %, 0.5B at 8k -18 %); float32 would spill 1-1.5 KB a thread, so it stays at one
#define DECODE_BLOCKS_f32 1
#define DECODE_BLOCKS_f16 2
#define DECODE_BLOCKS_bf16 2
#define GQA_DECODE_KERNEL(S, T, PASSES, HNAME, HS)                                                           \
  extern "C" __global__ void __launch_bounds__(DECODE_THREADS, DECODE_BLOCKS_##S) seamless_gqa_decode_p##PASSES##HNAME##_##S( \
      const T* past_k, const T* past_v, const T* q, const T* k, const T* v, const T* cos, const T* sin,      \
      const int32_t* seqlens, const float* sink, T* pk, T* pv, T* out, float* partial, unsigned* counters,   \
      GqaShape g, AttendParams a) {                                                                         \
    decode<T, PASSES, HS>(past_k, past_v, q, k, v, cos, sin, seqlens, sink, pk, pv, out, partial, counters, \
                          g, a);                                                                            \
  }
#define GQA_DECODE_GROUPED_KERNEL(S, T, PASSES, HNAME, HS)                                                   \
  extern "C" __global__ void __launch_bounds__(DECODE_THREADS, DECODE_BLOCKS_##S) seamless_gqa_decode_grouped_p##PASSES##HNAME##_##S( \
      const T* past_k, const T* past_v, const T* q, const T* k, const T* v, const T* cos, const T* sin,      \
      const int32_t* seqlens, const float* sink, T* pk, T* pv, T* out, float* partial, unsigned* counters,   \
      GqaShape g, AttendParams a) {                                                                         \
    decode_grouped<T, PASSES, HS>(past_k, past_v, q, k, v, cos, sin, seqlens, sink, pk, pv, out, partial,   \
                                  counters, g, a);                                                          \
  }
#define GQA_DECODE_STREAM_KERNEL(S, T, HS)                                                                    \
  extern "C" __global__ void __launch_bounds__(DECODE_THREADS, DECODE_BLOCKS_##S) seamless_gqa_decode_stream_h##HS##_##S( \
      const T* past_k, const T* past_v, const T* q, const T* k, const T* v, const T* cos, const T* sin,      \
      const int32_t* seqlens, const float* sink, T* pk, T* pv, T* out, float* partial, unsigned* counters,   \
      GqaShape g, AttendParams a) {                                                                         \
    decode_stream<T, HS>(past_k, past_v, q, k, v, cos, sin, seqlens, sink, pk, pv, out, partial, counters, g, a); \
  }
#define GQA_DECODE_H(S, T, HS) GQA_DECODE_KERNEL(S, T, 4, _h##HS, HS) GQA_DECODE_KERNEL(S, T, 8, _h##HS, HS) \
  GQA_DECODE_STREAM_KERNEL(S, T, HS)
#define GQA(S, T)                                                                                              \
  extern "C" __global__ void seamless_gqa_prepare_##S(const T* past_k, const T* past_v, const T* q, const T* k,       \
                                                      const T* v, const T* cos, const T* sin, const int32_t* seqlens,   \
                                                      T* qo, T* ko, T* vo, GqaShape g, int wide) { dependent_launch();  \
    prepare(past_k, past_v, q, k, v, cos, sin, seqlens, qo, ko, vo, g, wide);                                           \
  }                                                                                                                     \
  extern "C" __global__ void seamless_gqa_attend_##S(const T* q, const T* k, const T* v, const int32_t* seqlens,       \
                                                     const float* sink, T* out, GqaShape g, AttendParams a) { dependent_launch(); \
    attend(q, k, v, seqlens, sink, out, g, a);                                                                          \
  }                                                                                                                     \
  extern "C" __global__ void seamless_gqa_window_keep_##S(const T* work_k, const T* work_v, const int32_t* seqlens,    \
                                                          T* pk, T* pv, GqaShape g) { dependent_launch();               \
    window_keep(work_k, work_v, seqlens, pk, pv, g);                                                                    \
  }                                                                                                                     \
  GQA_DECODE_KERNEL(S, T, 4, , 0) GQA_DECODE_KERNEL(S, T, 8, , 0) GQA_DECODE_GROUPED_KERNEL(S, T, 8, , 0)
FOR_FLOATS(GQA)
GQA_DECODE_H(f16, __half, 64) GQA_DECODE_H(f16, __half, 128)
GQA_DECODE_H(bf16, __nv_bfloat16, 64) GQA_DECODE_H(bf16, __nv_bfloat16, 128)

// RotaryEmbedding (com.microsoft): x viewed as [B, S, N, H] (or [B, N, S, H] when bnsh), token (b, s)
// at position pos[b * S + s] (pos[0] + s when one position is given, b * S + s when none); cos/sin rows of width
// cache_half; channels from 2 * rot_half on pass through.
template <typename T>
__device__ void rotary(int64_t n, const T* x, const int64_t* pos, const T* cos, const T* sin, T* y, RotaryShape g) {
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n; t += (int64_t)gridDim.x * blockDim.x) {
    int d = t % g.head_size;
    int64_t r = t / g.head_size;
    int64_t b = r / ((int64_t)g.seq * g.heads), s = g.bnsh ? r % g.seq : (r / g.heads) % g.seq;
    int64_t p = !pos ? b * g.seq + s : g.first_only ? pos[0] + s : pos[b * g.seq + s];  // no pos: a row per token
    if ((p < 0 || p >= g.cache_rows) && d == 0) report_bad(g.check, p);
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

// LinearAttention (ONNX opset 27 and com.microsoft), as kernels/cpu/attention.py: a block per (batch, KV head) runs
// the token-by-token recurrence on its state S [d_k, d_v] (float32: in `work` or registers, past_state's values or
// zeros at the start; rounded to T once, into `state`, at the end): per token S *= exp(g) (gated),
// v = beta * (v - S^T k) (delta), S += k v^T, and each query head reading the state gets scale * q^T S: the KV head's
// group of query heads (GQA), or with more KV than query heads (inverse GQA) query head h * q_heads / kv_heads into
// output head h. K has k_heads heads (KV head h reads K head
// h / (kv_heads / k_heads)). Shared memory: k, v and the readers' q rows.
namespace linear_attention {

// A state's heads (KV head h): its readers (the query heads that read it: a GQA group, or inverse GQA's one query
// head), the first of them, the K head it reads, and the output's heads (q_heads, or kv_heads for inverse GQA).
struct StateHeads {
  int group, readers, first, k_head, out_heads;
  __device__ StateHeads(int h, const LinearAttentionShape& s)
      : group(s.q_heads >= s.kv_heads ? s.q_heads / s.kv_heads : 0), readers(group ? group : 1),
        first(group ? h * group : h * s.q_heads / s.kv_heads), k_head(h / (s.kv_heads / s.k_heads)),
        out_heads(s.q_heads > s.kv_heads ? s.q_heads : s.kv_heads) {}
  __device__ int out_head(int j, int h) const { return group ? first + j : h; }  // reader j's output head
};

// The tokens a block's state takes: all of them, or a padded prompt's real length (lengths: seqlens_k, the real
// length - 1 per batch row), clamped to [0, tokens]. The padded positions' outputs read the state as it stands.
__device__ int real_tokens(const int32_t* lengths, int b, int tokens) {
  return lengths ? (int)min(max((int64_t)lengths[b] + 1, (int64_t)0), (int64_t)tokens) : tokens;
}

template <typename T>
__device__ void run(const T* q, const T* k, const T* v, const T* past, const T* decay, const T* beta, T* out,
                    float* work, T* state, const int32_t* lengths, LinearAttentionShape s) {
  extern __shared__ float smem[];
  int h = blockIdx.x % s.kv_heads, b = blockIdx.x / s.kv_heads;
  const int real = real_tokens(lengths, b, s.tokens);
  const StateHeads heads(h, s);
  float* kk = smem;
  float* vv = kk + s.d_k;
  float* qq = vv + s.d_v;
  float* S = work + ((int64_t)b * s.kv_heads + h) * s.d_k * s.d_v;
  int64_t cells = (int64_t)s.d_k * s.d_v;
  for (int64_t e = threadIdx.x; e < cells; e += blockDim.x)
    S[e] = past ? ld(past + ((int64_t)b * s.kv_heads + h) * cells + e) : 0.0f;
  for (int t = 0; t < s.tokens; t++) {
    int64_t row = (int64_t)b * s.tokens + t;
    for (int d = threadIdx.x; d < s.d_k; d += blockDim.x)
      kk[d] = ld(k + (row * s.k_heads + heads.k_head) * s.d_k + d);
    for (int m = threadIdx.x; m < s.d_v; m += blockDim.x) vv[m] = ld(v + (row * s.kv_heads + h) * s.d_v + m);
    for (int e = threadIdx.x; e < heads.readers * s.d_k; e += blockDim.x)
      qq[e] = ld(q + (row * s.q_heads + heads.first) * s.d_k + e);
    __syncthreads();
    if (s.gated && t < real)
      for (int64_t e = threadIdx.x; e < cells; e += blockDim.x) {
        int64_t g = s.decay_per_key ? (row * s.kv_heads + h) * s.d_k + e / s.d_v : row * s.kv_heads + h;
        S[e] = S[e] * expf(ld(decay + g));
      }
    __syncthreads();
    if (s.delta && t < real) {
      float rate = ld(beta + row * (s.beta_per_head ? s.kv_heads : 1) + (s.beta_per_head ? h : 0));
      for (int m = threadIdx.x; m < s.d_v; m += blockDim.x) {
        float u = 0.0f;
        for (int d = 0; d < s.d_k; d++) u += S[(int64_t)d * s.d_v + m] * kk[d];
        vv[m] = rate * (vv[m] - u);
      }
      __syncthreads();
    }
    if (t < real)
      for (int64_t e = threadIdx.x; e < cells; e += blockDim.x) S[e] = S[e] + kk[e / s.d_v] * vv[e % s.d_v];
    __syncthreads();
    for (int e = threadIdx.x; e < heads.readers * s.d_v; e += blockDim.x) {
      int j = e / s.d_v, m = e % s.d_v;
      float o = 0.0f;
      for (int d = 0; d < s.d_k; d++) o += qq[j * s.d_k + d] * S[(int64_t)d * s.d_v + m];
      st(out + (row * heads.out_heads + heads.out_head(j, h)) * s.d_v + m, s.scale * o);
    }
    __syncthreads();
  }
  for (int64_t e = threadIdx.x; e < cells; e += blockDim.x) st(state + (S - work) + e, S[e]);
}

// A token's rows in shared memory (run_columns): k, exp(decay) (d_k copies of the head's where not per key), the
// readers' q rows, each of DK floats, then each reader's q.k; the warp's lane c holds a row's columns c, c + 32, ...
template <typename T, int DK>
__device__ __forceinline__ void load_row(float (&x)[DK / 32], int r, int64_t row, const T* q, const T* k,
                                         const T* decay, int h, int first, int k_head, LinearAttentionShape s) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < DK / 32; i++) {
    const int c = lane + 32 * i;
    x[i] = r == 0   ? ld(k + (row * s.k_heads + k_head) * DK + c)
           : r == 1 ? (s.gated ? ld(decay + (s.decay_per_key ? (row * s.kv_heads + h) * DK + c : row * s.kv_heads + h))
                               : 0.0f)
                    : ld(q + (row * s.q_heads + first) * DK + (r - 2) * DK + c);
  }
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffff, x, off);
  return x;
}

// NormedLinearAttention's k or q row (a warp's, as load_row holds it) over its L2 norm with normalization.cu
// lp_norm's order of terms, rounded to T, a q row's then times q_scale rounded again: the values the LpNormalization
// and Mul nodes it replaces would have stored.
template <typename T, int DK>
__device__ __forceinline__ void l2_normalised(float (&x)[DK / 32], bool query, LinearAttentionShape s) {
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < DK / 32; i++) sum += x[i] * x[i];
  const float norm = sqrtf(warp_sum(sum));
#pragma unroll
  for (int i = 0; i < DK / 32; i++) {
    const float e = rounded<T>(norm == 0.0f ? 0.0f : x[i] / norm);
    x[i] = query && s.q_scale != 0.0f ? rounded<T>(e * s.q_scale) : e;
  }
}

// Row r as the recurrence reads it, into the token's buffer: exp of the decay, k and q normalised for
// NormedLinearAttention; a q row's q.k too (key: k's values).
template <typename T, int DK>
__device__ __forceinline__ void store_row(float (&x)[DK / 32], float (&key)[DK / 32], int r, int readers, float* buf,
                                          LinearAttentionShape s) {
  const int lane = threadIdx.x & 31;
  if (r == 1) {
#pragma unroll
    for (int i = 0; i < DK / 32; i++) x[i] = expf(x[i]);
  } else if (s.qk_l2_norm) {
    l2_normalised<T, DK>(x, r > 1, s);
  }
#pragma unroll
  for (int i = 0; i < DK / 32; i++) buf[r * DK + lane + 32 * i] = x[i];
  if (r == 0) {
#pragma unroll
    for (int i = 0; i < DK / 32; i++) key[i] = x[i];
  } else if (r > 1) {
    float qk = 0.0f;
#pragma unroll
    for (int i = 0; i < DK / 32; i++) qk += x[i] * key[i];
    qk = warp_sum(qk);
    if (lane == 0) buf[(2 + readers) * DK + r - 2] = qk;
  }
}

// A lane's part of sum_d S[d] * row[d]: its DK / 4 state values are rows (c * 4 + part) * 4 + e of its column (float4
// chunks of the row, the four parts' side by side: no bank conflicts), in four chains.
template <int DK>
__device__ __forceinline__ float part_dot(const float (&S)[DK / 4], const float* row, int part) {
  float c0 = 0.0f, c1 = 0.0f, c2 = 0.0f, c3 = 0.0f;
#pragma unroll
  for (int c = 0; c < DK / 16; c++) {
    const float4 w = reinterpret_cast<const float4*>(row)[c * 4 + part];
    c0 += S[c * 4] * w.x;
    c1 += S[c * 4 + 1] * w.y;
    c2 += S[c * 4 + 2] * w.z;
    c3 += S[c * 4 + 3] * w.w;
  }
  return (c0 + c1) + (c2 + c3);
}

// The sum over a column's four lanes (adjacent: part = lane % 4).
__device__ __forceinline__ float column_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 1);
  return x + __shfl_xor_sync(0xffffffff, x, 2);
}

// The same recurrence with a state column's d_k values in registers over four lanes (DK / 4 each): every token's
// decay, retrieval, update and readouts need no other column, so a block is one warp of 8 columns (blocks (batch,
// KV head, columns / 8): a head's arithmetic spread over the SMs), and the only shared values are the token's rows
// (load_row, store_row), in two buffers: the next token's are loaded into registers before this token's arithmetic
// and stored after it. A reader's output is q.S + u (q.k), S the state before the token's update (the same value as
// q.(S + k u), its dot products independent of the update). For d_k of 32, 64 or 128 (DK); shared memory
// 2 * ((2 + readers) * DK + readers) floats, each buffer float4-aligned (kernels/cuda/attention.py _column_shared).
template <typename T, int DK>
__device__ void run_columns(const T* q, const T* k, const T* v, const T* past, const T* decay, const T* beta, T* out,
                            T* state, const int32_t* lengths, LinearAttentionShape s) {
  extern __shared__ float smem[];
  const int part = threadIdx.x & 3, splits = (s.d_v + 7) / 8, head = blockIdx.x / splits;
  const int h = head % s.kv_heads, b = head / s.kv_heads, m = blockIdx.x % splits * 8 + threadIdx.x / 4;
  const bool column = m < s.d_v;  // the last block's lanes past d_v reckon column d_v - 1's values and store none
  const int mc = column ? m : s.d_v - 1;
  const int real = real_tokens(lengths, b, s.tokens);
  const StateHeads heads(h, s);
  const int rows = 2 + heads.readers;
  const int stride = (rows * DK + heads.readers + 3) / 4 * 4;  // a token's buffer, float4-aligned
  const int64_t base = ((int64_t)b * s.kv_heads + h) * DK * s.d_v;
  const int64_t rate_at = s.beta_per_head ? h : 0, rate_rows = s.beta_per_head ? s.kv_heads : 1;
  float S[DK / 4];
#pragma unroll
  for (int c = 0; c < DK / 16; c++)
#pragma unroll
    for (int e = 0; e < 4; e++)
      S[c * 4 + e] = past ? ld(past + base + (int64_t)((c * 4 + part) * 4 + e) * s.d_v + mc) : 0.0f;
  float u_next = 0.0f, rate_next = 0.0f, key[DK / 32];
  if (s.tokens > 0) {  // token 0's rows
    const int64_t row = (int64_t)b * s.tokens;
    for (int r = 0; r < rows; r++) {
      float x[DK / 32];
      load_row<T, DK>(x, r, row, q, k, decay, h, heads.first, heads.k_head, s);
      store_row<T, DK>(x, key, r, heads.readers, smem, s);
    }
    u_next = ld(v + (row * s.kv_heads + h) * s.d_v + mc);
    if (s.delta) rate_next = ld(beta + row * rate_rows + rate_at);
  }
  __syncwarp();
  for (int t = 0; t < s.tokens; t++) {
    const int64_t row = (int64_t)b * s.tokens + t;
    const float* kk = smem + (t & 1) * stride;
    const float *gg = kk + DK, *qq = gg + DK, *qk = kk + rows * DK;
    float* next = smem + ((t + 1) & 1) * stride;
    float u = u_next, rate = rate_next;
    float ahead[LINEAR_AHEAD_ROWS][DK / 32];  // the next token's first rows, in flight meanwhile
    const bool more = t + 1 < s.tokens, live = t < real;
    if (more) {
#pragma unroll
      for (int r = 0; r < LINEAR_AHEAD_ROWS; r++)
        if (r < rows) load_row<T, DK>(ahead[r], r, row + 1, q, k, decay, h, heads.first, heads.k_head, s);
      u_next = ld(v + ((row + 1) * s.kv_heads + h) * s.d_v + mc);
      if (s.delta) rate_next = ld(beta + (row + 1) * rate_rows + rate_at);
    }
    if (live && s.gated)
#pragma unroll
      for (int c = 0; c < DK / 16; c++) {
        const float4 g = reinterpret_cast<const float4*>(gg)[c * 4 + part];
        S[c * 4] *= g.x;
        S[c * 4 + 1] *= g.y;
        S[c * 4 + 2] *= g.z;
        S[c * 4 + 3] *= g.w;
      }
    const float retrieved = live && s.delta ? column_sum(part_dot<DK>(S, kk, part)) : 0.0f;
    if (live && s.delta) u = rate * (u - retrieved);
    for (int j = 0; j < heads.readers; j++) {
      const float o = column_sum(part_dot<DK>(S, qq + j * DK, part)) + (live ? u * qk[j] : 0.0f);
      if (column && part == (j & 3)) st(out + (row * heads.out_heads + heads.out_head(j, h)) * s.d_v + m, s.scale * o);
    }
    if (live)
#pragma unroll
      for (int c = 0; c < DK / 16; c++) {
        const float4 w = reinterpret_cast<const float4*>(kk)[c * 4 + part];
        S[c * 4] += w.x * u;
        S[c * 4 + 1] += w.y * u;
        S[c * 4 + 2] += w.z * u;
        S[c * 4 + 3] += w.w * u;
      }
    if (more) {
#pragma unroll
      for (int r = 0; r < LINEAR_AHEAD_ROWS; r++)
        if (r < rows) store_row<T, DK>(ahead[r], key, r, heads.readers, next, s);
      for (int r = LINEAR_AHEAD_ROWS; r < rows; r++) {  // more readers' rows: loaded now
        float x[DK / 32];
        load_row<T, DK>(x, r, row + 1, q, k, decay, h, heads.first, heads.k_head, s);
        store_row<T, DK>(x, key, r, heads.readers, next, s);
      }
    }
    __syncwarp();
  }
  if (column)
#pragma unroll
    for (int c = 0; c < DK / 16; c++)
#pragma unroll
      for (int e = 0; e < 4; e++) st(state + base + (int64_t)((c * 4 + part) * 4 + e) * s.d_v + m, S[c * 4 + e]);
}

// A prompt's recurrence in chunks of C = LINEAR_CHUNK tokens (the delta rule's chunked form; one decay a head and
// token). Within a chunk, with L_t the running sum of its decays (gamma_t = exp(L_t)) and S0 the state before it:
//   u = T (beta v - beta gamma k S0), T = (I + A)^-1, A[t][i] = beta_t exp(L_t - L_i) k_t.k_i for i < t;
//   o_t = gamma_t q_t S0 + sum_{i <= t} exp(L_t - L_i) (q_t.k_i) u_i;  S = gamma_C S0 + sum_i exp(L_C - L_i) k_i u_i.
// chunk_prepare computes, in parallel for every chunk, what needs no state; chunk_scan walks the chunks in order.
// Without the delta rule A = 0 and beta = 1; without the gate L = 0; padded tokens (past a prompt's real length)
// take no update (beta 0, decay 0) and read the state as it stands.

// A chunk's values, offsets in floats (kernels/cuda/attention.py _chunk_floats: its size). chunk_prepare writes
// W = T beta gamma k [C][DK], Kc = exp(L_C - L_t) k_t [C][DK], U0 = T beta v [C][d_v], per reader Qg = gamma q
// [C][DK] and P[t][i] = exp(L_t - L_i) q_t.k_i (0 for i > t) [C][C], and gamma_C (4 floats kept); chunk_scan writes
// U over U0 and S0 [DK][d_v], the state before the chunk, for chunk_output.
struct ChunkLayout {
  int64_t w, kc, u0, q, p, reader, gamma, s0, size;
  __device__ ChunkLayout(int dk, int d_v, int readers) {
    const int64_t c = LINEAR_CHUNK;
    w = 0, kc = c * dk, u0 = 2 * c * dk, q = u0 + c * d_v, p = q + c * dk, reader = c * dk + c * c;
    gamma = q + readers * reader, s0 = gamma + 4, size = s0 + (int64_t)dk * d_v;
  }
};

// sum_d a[d] * b[d] over DK floats in shared memory, float4-aligned, in four chains.
template <int DK>
__device__ __forceinline__ float dot_shared(const float* a, const float* b) {
  float c0 = 0.0f, c1 = 0.0f, c2 = 0.0f, c3 = 0.0f;
#pragma unroll 8
  for (int d = 0; d < DK; d += 4) {
    const float4 x = *reinterpret_cast<const float4*>(a + d), y = *reinterpret_cast<const float4*>(b + d);
    c0 += x.x * y.x;
    c1 += x.y * y.y;
    c2 += x.z * y.z;
    c3 += x.w * y.w;
  }
  return (c0 + c1) + (c2 + c3);
}

// Row r (0: k, 2 + j: reader j's q) of token tok as the column kernel reads it (normalised for
// NormedLinearAttention), zeros past the prompt's tokens (a last chunk's tail).
template <typename T, int DK>
__device__ __forceinline__ void chunk_row(float (&x)[DK / 32], int r, int b, int tok, const T* q, const T* k, int h,
                                          const StateHeads& heads, LinearAttentionShape s) {
  if (tok >= s.tokens) {
#pragma unroll
    for (int i = 0; i < DK / 32; i++) x[i] = 0.0f;
    return;
  }
  load_row<T, DK>(x, r, (int64_t)b * s.tokens + tok, q, k, nullptr, h, heads.first, heads.k_head, s);
  if (s.qk_l2_norm) l2_normalised<T, DK>(x, r > 1, s);
}

// A block of CHUNK_THREADS threads a (batch, KV head, chunk of this slab: chunks [from, from + count) of each
// sequence). Shared memory (_chunk_shared, under 99 KiB: every sm_80+ part's limit): k rows [C][DK + 4] (a float4
// column of 8 rows spans the banks), one reader's q rows there, or before them the forward substitution's values
// [C][CHUNK_THREADS], L and the rates [C] each, A [C][C].
template <typename T, int DK>
__device__ void chunk_prepare(const T* q, const T* k, const T* v, const T* decay, const T* beta, float* work,
                              const int32_t* lengths, LinearAttentionShape s, int from, int count) {
  constexpr int C = LINEAR_CHUNK, KS = DK + 4;
  extern __shared__ float smem[];
  constexpr int QS = C * (KS > CHUNK_THREADS ? KS : CHUNK_THREADS);
  float *ks = smem, *qs = ks + C * KS, *xs = qs, *lsum = qs + QS, *rate = lsum + C, *a = rate + C;
  const int head = blockIdx.x / count, h = head % s.kv_heads, b = head / s.kv_heads;
  const int t0 = (from + blockIdx.x % count) * C, real = real_tokens(lengths, b, s.tokens);
  const StateHeads heads(h, s);
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, warps = blockDim.x / 32;
  const ChunkLayout at(DK, s.d_v, heads.readers);
  float* mine = work + (int64_t)blockIdx.x * at.size;
  if (warp == 0) {  // L: an inclusive scan of the live tokens' decays, two a lane
    float x[2];
#pragma unroll
    for (int e = 0; e < 2; e++) {
      const int t = 2 * lane + e, tok = t0 + t;
      const int64_t row = (int64_t)b * s.tokens + tok;
      const bool live = tok < real;
      x[e] = live && s.gated ? ld(decay + row * s.kv_heads + h) : 0.0f;
      rate[t] = !live ? 0.0f : s.delta ? ld(beta + row * (s.beta_per_head ? s.kv_heads : 1) + (s.beta_per_head ? h : 0))
                                       : 1.0f;
    }
    float sum = x[0] + x[1];
    for (int off = 1; off < 32; off <<= 1) {
      const float up = __shfl_up_sync(0xffffffff, sum, off);
      if (lane >= off) sum += up;
    }
    lsum[2 * lane] = sum - x[1];
    lsum[2 * lane + 1] = sum;
  }
  for (int t = warp; t < C; t += warps) {  // k rows
    float x[DK / 32];
    chunk_row<T, DK>(x, 0, b, t0 + t, q, k, h, heads, s);
#pragma unroll
    for (int i = 0; i < DK / 32; i++) ks[t * KS + lane + 32 * i] = x[i];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < C * C; e += blockDim.x) {
    const int t = e / C, i = e % C;
    a[e] = s.delta && i < t ? rate[t] * expf(lsum[t] - lsum[i]) * dot_shared<DK>(ks + t * KS, ks + i * KS) : 0.0f;
  }
  for (int e = threadIdx.x; e < C * DK; e += blockDim.x) {
    const int t = e / DK;
    mine[at.kc + e] = expf(lsum[C - 1] - lsum[t]) * ks[t * KS + e % DK];
  }
  if (threadIdx.x == 0) mine[at.gamma] = expf(lsum[C - 1]);
  __syncthreads();
  // W's and U0's columns by forward substitution through I + A, a column a thread (its values so far in xs)
  const int w_columns = s.delta ? DK : 0;
  for (int col = threadIdx.x; col < w_columns + s.d_v; col += blockDim.x) {
    const bool key = col < w_columns;
    const int m = key ? col : col - w_columns, stride = key ? DK : s.d_v;
    float* to = mine + (key ? at.w : at.u0) + m;
    if (!key) {  // the column's beta v, all loads in flight at once (a load a step would wait on memory each step)
#pragma unroll 8
      for (int t = 0; t < C; t++) {
        const int tok = t0 + t;
        xs[t * CHUNK_THREADS + threadIdx.x] =
            tok < s.tokens ? rate[t] * ld(v + (((int64_t)b * s.tokens + tok) * s.kv_heads + h) * s.d_v + m) : 0.0f;
      }
    }
    for (int t = 0; t < C; t++) {
      float r0 = key ? rate[t] * expf(lsum[t]) * ks[t * KS + m] : xs[t * CHUNK_THREADS + threadIdx.x];
      float r1 = 0.0f;  // two chains
      int i = 0;
      for (; i + 1 < t; i += 2) {
        r0 -= a[t * C + i] * xs[i * CHUNK_THREADS + threadIdx.x];
        r1 -= a[t * C + i + 1] * xs[(i + 1) * CHUNK_THREADS + threadIdx.x];
      }
      if (i < t) r0 -= a[t * C + i] * xs[i * CHUNK_THREADS + threadIdx.x];
      xs[t * CHUNK_THREADS + threadIdx.x] = r0 + r1;
      to[t * stride] = r0 + r1;
    }
  }
  __syncthreads();  // xs is qs
  for (int j = 0; j < heads.readers; j++) {
    float* qg = mine + at.q + j * at.reader;
    for (int t = warp; t < C; t += warps) {  // reader j's q rows: normalised in qs, times gamma into Qg
      float x[DK / 32];
      chunk_row<T, DK>(x, 2 + j, b, t0 + t, q, k, h, heads, s);
      const float gamma = expf(lsum[t]);
#pragma unroll
      for (int i = 0; i < DK / 32; i++) {
        qs[t * KS + lane + 32 * i] = x[i];
        qg[t * DK + lane + 32 * i] = gamma * x[i];
      }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < C * C; e += blockDim.x) {
      const int t = e / C, i = e % C;
      qg[at.p - at.q + e] = i <= t ? expf(lsum[t] - lsum[i]) * dot_shared<DK>(qs + t * KS, ks + i * KS) : 0.0f;
    }
    __syncthreads();
  }
}

// acc[r][n] += sum_d x[(r0 + r) * K + d] * S[d][n0 + n] for a 4 x 4 tile; x in global memory (a chunk's rows of
// K values), S in shared memory (K rows, CHUNK_COLUMNS wide).
template <int K>
__device__ __forceinline__ void tile_product(float (&acc)[4][4], const float* x, int r0, const float* S, int n0) {
#pragma unroll 4
  for (int d = 0; d < K; d += 4) {
    float4 row[4];
#pragma unroll
    for (int r = 0; r < 4; r++) row[r] = *reinterpret_cast<const float4*>(x + (r0 + r) * K + d);
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const float4 st = *reinterpret_cast<const float4*>(S + (d + e) * CHUNK_COLUMNS + n0);
#pragma unroll
      for (int r = 0; r < 4; r++) {
        const float w = e == 0 ? row[r].x : e == 1 ? row[r].y : e == 2 ? row[r].z : row[r].w;
        acc[r][0] += w * st.x;
        acc[r][1] += w * st.y;
        acc[r][2] += w * st.z;
        acc[r][3] += w * st.w;
      }
    }
  }
}

// A block of CHUNK_SCAN_THREADS threads a (batch, KV head, CHUNK_COLUMNS state columns): the slab's chunks in order,
// the state's columns in shared memory in float32, from past (the first slab) or carry, into present (the last) or
// carry. Each chunk: S0 kept for chunk_output, U = U0 - W S (4 x 4 values a thread, over U0), then
// S = gamma_C S + Kc^T U. W and Kc pass through shared memory (_chunk_scan_shared; cp.async, each copied while the
// other is in use): a load from memory a step, with one block of 4 warps an SM, would leave the SM waiting.
template <typename T, int DK>
__device__ void chunk_scan(const T* past, float* work, float* carry, T* state, LinearAttentionShape s, int from,
                           int count, int last) {
  constexpr int C = LINEAR_CHUNK, NC = CHUNK_COLUMNS, RD = DK / 16;
  static_assert(CHUNK_SCAN_THREADS * 16 == C * NC && CHUNK_SCAN_THREADS / 8 * RD == DK,
                "a 4 x 4 tile of U, RD x 4 values of S, a thread");
  extern __shared__ __align__(16) float smem[];
  float *S = smem, *U = S + DK * NC, *ws = U + C * NC, *kcs = ws + C * DK;
  const int splits = (s.d_v + NC - 1) / NC, head = blockIdx.x / splits, c0 = blockIdx.x % splits * NC;
  const ChunkLayout at(DK, s.d_v, StateHeads(head % s.kv_heads, s).readers);
  const int64_t base = (int64_t)head * DK * s.d_v;
  auto chunk = [&](int c) { return work + ((int64_t)head * count + c) * at.size; };
  auto stage = [&](float* to, const float* rows) {  // a chunk's C x DK values, one copy group
    for (int e = threadIdx.x * 4; e < C * DK; e += CHUNK_SCAN_THREADS * 4) copy16_to_shared(to + e, rows + e);
    commit_copies();
  };
  if (s.delta) stage(ws, chunk(0) + at.w);
  else commit_copies();  // an empty group: the waits below count two groups a chunk
  for (int e = threadIdx.x; e < DK * NC; e += blockDim.x) {
    const int64_t n = c0 + e % NC, cell = base + (int64_t)(e / NC) * s.d_v + n;
    S[e] = n >= s.d_v ? 0.0f : from > 0 ? carry[cell] : past ? ld(past + cell) : 0.0f;
  }
  const int r0 = threadIdx.x / 8 * 4, n0 = threadIdx.x % 8 * 4, d0 = threadIdx.x / 8 * RD;
  for (int c = 0; c < count; c++) {
    float* mine = chunk(c);
    stage(kcs, mine + at.kc);
    __syncthreads();  // S complete
    for (int e = threadIdx.x; e < DK * NC; e += blockDim.x)
      if (c0 + e % NC < s.d_v) mine[at.s0 + (int64_t)(e / NC) * s.d_v + c0 + e % NC] = S[e];
    wait_copies_but<1>();  // W of this chunk landed (this thread's copies; the barrier: everyone's)
    __syncthreads();
    float acc[4][4] = {};
    if (s.delta) tile_product<DK>(acc, ws, r0, S, n0);
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
      for (int n = 0; n < 4; n++) {
        const int col = c0 + n0 + n;
        float* u = mine + at.u0 + (int64_t)(r0 + r) * s.d_v + col;
        const float x = (col < s.d_v ? *u : 0.0f) - acc[r][n];
        U[(r0 + r) * NC + n0 + n] = x;
        if (col < s.d_v) *u = x;
      }
    __syncthreads();  // U complete; every thread's reads of W done
    if (s.delta && c + 1 < count) stage(ws, chunk(c + 1) + at.w);
    else commit_copies();
    wait_copies_but<1>();  // Kc of this chunk landed
    __syncthreads();
    const float gamma = mine[at.gamma];
    float x[RD][4];
#pragma unroll
    for (int r = 0; r < RD; r++)
#pragma unroll
      for (int n = 0; n < 4; n++) x[r][n] = gamma * S[(d0 + r) * NC + n0 + n];
#pragma unroll 4
    for (int i = 0; i < C; i++) {
      const float4 u = *reinterpret_cast<const float4*>(U + i * NC + n0);
      float w[RD];  // Kc's row i from d0: RD (2, 4 or 8) values, float2-aligned
#pragma unroll
      for (int r = 0; r < RD; r += 2)
        *reinterpret_cast<float2*>(w + r) = *reinterpret_cast<const float2*>(kcs + i * DK + d0 + r);
#pragma unroll
      for (int r = 0; r < RD; r++) {
        x[r][0] += w[r] * u.x;
        x[r][1] += w[r] * u.y;
        x[r][2] += w[r] * u.z;
        x[r][3] += w[r] * u.w;
      }
    }
    __syncthreads();  // every thread's reads of S and Kc done
#pragma unroll
    for (int r = 0; r < RD; r++)
#pragma unroll
      for (int n = 0; n < 4; n++) S[(d0 + r) * NC + n0 + n] = x[r][n];
  }
  wait_copies_to_shared();  // the empty groups
  __syncthreads();
  for (int e = threadIdx.x; e < DK * NC; e += blockDim.x) {
    const int64_t n = c0 + e % NC, cell = base + (int64_t)(e / NC) * s.d_v + n;
    if (n < s.d_v) {
      if (last)
        st(state + cell, S[e]);
      else
        carry[cell] = S[e];
    }
  }
}

// A block of CHUNK_SCAN_THREADS threads a (batch, KV head, chunk, CHUNK_COLUMNS columns), all chunks at once: each
// reader's outputs o = Qg S0 + P U (4 x 4 values a thread), S0's and U's columns in shared memory.
template <typename T, int DK>
__device__ void chunk_output(const float* work, T* out, LinearAttentionShape s, int from, int count) {
  constexpr int C = LINEAR_CHUNK, NC = CHUNK_COLUMNS;
  __shared__ __align__(16) float S[DK * NC], U[C * NC];
  const int splits = (s.d_v + NC - 1) / NC, c0 = blockIdx.x % splits * NC, chunk = blockIdx.x / splits;
  const int head = chunk / count, h = head % s.kv_heads, b = head / s.kv_heads, t0 = (from + chunk % count) * C;
  const StateHeads heads(h, s);
  const ChunkLayout at(DK, s.d_v, heads.readers);
  const float* mine = work + (int64_t)chunk * at.size;
  for (int e = threadIdx.x; e < DK * NC; e += blockDim.x) {
    const int n = c0 + e % NC;
    S[e] = n < s.d_v ? mine[at.s0 + (int64_t)(e / NC) * s.d_v + n] : 0.0f;
  }
  for (int e = threadIdx.x; e < C * NC; e += blockDim.x) {
    const int n = c0 + e % NC;
    U[e] = n < s.d_v ? mine[at.u0 + (int64_t)(e / NC) * s.d_v + n] : 0.0f;
  }
  __syncthreads();
  const int r0 = threadIdx.x / 8 * 4, n0 = threadIdx.x % 8 * 4;
  for (int j = 0; j < heads.readers; j++) {
    const float* qg = mine + at.q + j * at.reader;
    float o[4][4] = {};
    tile_product<DK>(o, qg, r0, S, n0);
    tile_product<C>(o, qg + (at.p - at.q), r0, U, n0);
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
      for (int n = 0; n < 4; n++) {
        const int tok = t0 + r0 + r, col = c0 + n0 + n;
        const int64_t row = (int64_t)b * s.tokens + tok;
        if (tok < s.tokens && col < s.d_v)
          st(out + (row * heads.out_heads + heads.out_head(j, h)) * s.d_v + col, s.scale * o[r][n]);
      }
  }
}

}  // namespace linear_attention

#define LINEAR_ATTENTION_COLUMNS(S_, T, DK)                                                                     \
  extern "C" __global__ void __launch_bounds__(32) seamless_linear_attention_k##DK##_##S_(                     \
      const T* q, const T* k, const T* v, const T* past, const T* decay, const T* beta, T* out, float* work,      \
      T* state, const int32_t* lengths, LinearAttentionShape s) {                                                \
    dependent_launch();                                                                                         \
    linear_attention::run_columns<T, DK>(q, k, v, past, decay, beta, out, state, lengths, s);                   \
  }
#define LINEAR_CHUNKS(S_, T, DK)                                                                                \
  extern "C" __global__ void __launch_bounds__(CHUNK_THREADS) seamless_linear_chunk_prepare_k##DK##_##S_(       \
      const T* q, const T* k, const T* v, const T* decay, const T* beta, float* work, const int32_t* lengths,     \
      LinearAttentionShape s, int from, int count) {                                                             \
    dependent_launch();                                                                                         \
    linear_attention::chunk_prepare<T, DK>(q, k, v, decay, beta, work, lengths, s, from, count);                \
  }                                                                                                             \
  extern "C" __global__ void __launch_bounds__(CHUNK_SCAN_THREADS) seamless_linear_chunk_scan_k##DK##_##S_(     \
      const T* past, float* work, float* carry, T* state, LinearAttentionShape s, int from, int count,           \
      int last) {                                                                                                \
    dependent_launch();                                                                                         \
    linear_attention::chunk_scan<T, DK>(past, work, carry, state, s, from, count, last);                        \
  }                                                                                                             \
  extern "C" __global__ void __launch_bounds__(CHUNK_SCAN_THREADS) seamless_linear_chunk_output_k##DK##_##S_(   \
      const float* work, T* out, LinearAttentionShape s, int from, int count) {                                 \
    dependent_launch();                                                                                         \
    linear_attention::chunk_output<T, DK>(work, out, s, from, count);                                           \
  }
#define LINEAR_ATTENTION(S_, T)                                                                                 \
  extern "C" __global__ void seamless_linear_attention_##S_(const T* q, const T* k, const T* v, const T* past,  \
                                                            const T* decay, const T* beta, T* out, float* work,  \
                                                            T* state, const int32_t* lengths,                   \
                                                            LinearAttentionShape s) {                           \
    dependent_launch();                                                                                         \
    linear_attention::run<T>(q, k, v, past, decay, beta, out, work, state, lengths, s);                         \
  }                                                                                                             \
  LINEAR_ATTENTION_COLUMNS(S_, T, 32) LINEAR_ATTENTION_COLUMNS(S_, T, 64) LINEAR_ATTENTION_COLUMNS(S_, T, 128)     \
  LINEAR_CHUNKS(S_, T, 32) LINEAR_CHUNKS(S_, T, 64) LINEAR_CHUNKS(S_, T, 128)
FOR_FLOATS(LINEAR_ATTENTION)

// GatedDeltaNet (com.microsoft), as kernels/cpu/attention.py gated_delta_net for uniform requests (token-major
// q/k [T, H_q, DK], v [T, H_v, d_v], T = batch * seq): the recurrence with the state V-major [B, H_v, d_v, DK]
// in float32 (thread m holds row m), value head h reading query/key head h / (H_v / H_q), and the op's fused
// prologue per token in float32: the gate from the raw decay (softplus or sigmoid of decay + dt_bias, scaled by
// exp(a_log)), sigmoid of beta, and q, k divided by their L2 norms (a sum of squares below 1e-12 counts as 1e-12).
namespace gated_delta_net {

template <typename T, int DK>
__device__ void run(const T* q, const T* k, const T* v, const float* decay, const float* beta, const float* past,
                    const float* a_log, const float* dt_bias, T* out, float* state, GatedDeltaNetShape s) {
  __shared__ float kk[DK], qq[DK], gg[DK], norms[2];
  const int h = blockIdx.x % s.v_heads, b = blockIdx.x / s.v_heads, m = threadIdx.x;
  const int hq = h / (s.v_heads / s.q_heads);
  const int64_t base = (((int64_t)b * s.v_heads + h) * s.d_v + m) * DK;
  const float a = s.gate ? expf(a_log[h]) : 0.0f;
  float S[DK];
#pragma unroll
  for (int d = 0; d < DK; d++) S[d] = past ? past[base + d] : 0.0f;
  for (int t = 0; t < s.seq; t++) {
    const int64_t row = (int64_t)b * s.seq + t;
    for (int d = threadIdx.x; d < DK; d += blockDim.x) {
      kk[d] = ld(k + (row * s.q_heads + hq) * DK + d);
      qq[d] = ld(q + (row * s.q_heads + hq) * DK + d);
      float g = 0.0f;
      if (s.gated) {
        const int64_t at = s.decay_per_key ? (row * s.v_heads + h) * DK + d : row * s.v_heads + h;
        const float x = decay[at] + (s.gate ? dt_bias[s.bias_per_key ? h * DK + d : h] : 0.0f);
        g = s.gate == 1 ? -a * (x > 20.0f ? x : log1pf(expf(x))) : s.gate == 2 ? s.lower_bound / (1.0f + expf(-a * x)) : x;
      }
      gg[d] = expf(g);
    }
    __syncthreads();
    if (s.l2_norm && threadIdx.x < 2) {  // one thread a vector: the same order of terms as the CPU's sum
      const float* x = threadIdx.x ? kk : qq;
      float sum = 0.0f;
      for (int d = 0; d < DK; d++) sum += x[d] * x[d];
      norms[threadIdx.x] = 1.0f / sqrtf(fmaxf(sum, 1e-12f));
    }
    __syncthreads();
    const float qn = s.l2_norm ? norms[0] : 1.0f, kn = s.l2_norm ? norms[1] : 1.0f;
    if (m < s.d_v) {
      float u = ld(v + (row * s.v_heads + h) * s.d_v + m);
#pragma unroll
      for (int d = 0; d < DK; d++) S[d] *= gg[d];
      if (s.delta) {
        float rate = beta[row * s.v_heads + h], retrieved = 0.0f;
        if (s.beta_sigmoid) rate = 1.0f / (1.0f + expf(-rate));
#pragma unroll
        for (int d = 0; d < DK; d++) retrieved += S[d] * (kk[d] * kn);
        u = rate * (u - retrieved);
      }
      float o = 0.0f;
#pragma unroll
      for (int d = 0; d < DK; d++) {
        S[d] += (kk[d] * kn) * u;
        o += (qq[d] * qn) * S[d];
      }
      st(out + (row * s.v_heads + h) * s.d_v + m, s.scale * o);
    }
    __syncthreads();
  }
  if (m < s.d_v)
#pragma unroll
    for (int d = 0; d < DK; d++) state[base + d] = S[d];
}

}  // namespace gated_delta_net

#define GATED_DELTA_NET(S_, T, DK)                                                                                  \
  extern "C" __global__ void __launch_bounds__(GDN_THREADS) seamless_gated_delta_net_k##DK##_##S_(                \
      const T* q, const T* k, const T* v, const float* decay, const float* beta, const float* past,              \
      const float* a_log, const float* dt_bias, T* out, float* state, GatedDeltaNetShape s) {                    \
    dependent_launch();                                                                                          \
    gated_delta_net::run<T, DK>(q, k, v, decay, beta, past, a_log, dt_bias, out, state, s);                     \
  }
#define GATED_DELTA_NETS(S_, T) GATED_DELTA_NET(S_, T, 32) GATED_DELTA_NET(S_, T, 64) GATED_DELTA_NET(S_, T, 128)
FOR_FLOATS(GATED_DELTA_NETS)

// MRotaryEmbedding (com.microsoft): RotaryEmbedding's rotation with each rotary column j's cos/sin taken from the
// row of the position stream (T, H, W: pos [3, B * S]) that owns j: sections contiguous (layout 0) or interleaved
// (layout 1: H at j % 3 == 1 below 3 section_h, W at j % 3 == 2 below 3 section_w, T elsewhere); times scale. With
// caches C of float32 and x, y of float16 or bfloat16: the Casts around a float32 rotation (plan/fusion.py
// rotary_in_float), whose one rounding is y's.
__device__ __forceinline__ int mrope_stream(int j, const MRotaryShape& g) {
  if (g.layout == 0) return j < g.section_t ? 0 : j < g.section_t + g.section_h ? 1 : 2;
  return (j % 3 == 1 && j < 3 * g.section_h) ? 1 : (j % 3 == 2 && j < 3 * g.section_w) ? 2 : 0;
}

template <typename T, typename C>
__device__ void mrotary(int64_t n, const T* x, const int64_t* pos, const C* cos, const C* sin, T* y, MRotaryShape g) {
  const int64_t tokens = (int64_t)g.batch * g.seq;
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n; t += (int64_t)gridDim.x * blockDim.x) {
    int d = t % g.head_size;
    int64_t r = t / g.head_size;
    int64_t b = r / ((int64_t)g.seq * g.heads), s = g.bnsh ? r % g.seq : (r / g.heads) % g.seq;
    if (d >= 2 * g.rot_half) {
      st(y + t, ld(x + t));
      continue;
    }
    int j = g.interleaved ? d / 2 : d % g.rot_half;
    int64_t p = pos[mrope_stream(j, g) * tokens + b * g.seq + s];
    if (p < 0 || p >= g.cache_rows) report_bad(g.check, p);
    p = p < 0 ? 0 : p >= g.cache_rows ? g.cache_rows - 1 : p;
    st(y + t, g.scale * rotate(x + (t - d), d, cos + p * g.rot_half, sin + p * g.rot_half, g.rot_half,
                               g.interleaved));
  }
}

#define MROTARY(S, T)                                                                                              \
  extern "C" __global__ void seamless_mrotary_##S(int64_t n, const T* x, const int64_t* pos, const T* cos,         \
                                                  const T* sin, T* y, MRotaryShape g) { dependent_launch();       \
    mrotary(n, x, pos, cos, sin, y, g);                                                                            \
  }
FOR_FLOATS(MROTARY)
#define MROTARY_F32_CACHES(S, T)                                                                                   \
  extern "C" __global__ void seamless_mrotary_##S##_f32(int64_t n, const T* x, const int64_t* pos,                \
                                                        const float* cos, const float* sin, T* y, MRotaryShape g) { \
    dependent_launch();                                                                                            \
    mrotary(n, x, pos, cos, sin, y, g);                                                                            \
  }
MROTARY_F32_CACHES(f16, __half)
MROTARY_F32_CACHES(bf16, __nv_bfloat16)
