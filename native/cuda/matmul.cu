// Batched products with few rows (a decode step's attention scores and weighted values), float
// types with float32 sums: one warp per output, its lanes over k from the end of k, the lanes' sums
// combined in a fixed order. An output's summation order depends only on positions counted from
// the end of k and not on n, so a KV cache padded at its start with zeros (capture=auto's left
// padding of torch-exported decoders) gives the same bytes as the unpadded run: the padded terms
// are +0s added last.
#include "common.cuh"

template <typename T>
__device__ void product_rows(const T* a, const T* b, T* y, int64_t batch, int64_t m, int64_t n, int64_t k,
                             int64_t stride_a, int64_t stride_b, int trans_b, float alpha) {
  int lane = threadIdx.x & 31;
  int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32), total = batch * m * n;
  for (int64_t o = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32; o < total; o += warps) {
    int64_t col = o % n, row = (o / n) % m, z = o / (m * n);
    const T* ar = a + z * stride_a + row * k;
    const T* bz = b + z * stride_b;
    float sum = 0.0f;
    for (int64_t i = k - 1 - lane; i >= 0; i -= 32) sum += ld(ar + i) * ld(bz + (trans_b ? col * k + i : i * n + col));
    for (int off = 16; off; off >>= 1) sum += __shfl_xor_sync(0xffffffff, sum, off);
    if (lane == 0) st(y + o, alpha * sum);
  }
}

#define PRODUCT_ROWS(S, T)                                                                                      \
  extern "C" __global__ void seamless_product_rows_##S(const T* a, const T* b, T* y, int64_t batch, int64_t m,  \
                                                       int64_t n, int64_t k, int64_t stride_a, int64_t stride_b, \
                                                       int trans_b, float alpha) { dependent_launch();           \
    product_rows(a, b, y, batch, m, n, k, stride_a, stride_b, trans_b, alpha);                                 \
  }
FOR_FLOATS(PRODUCT_ROWS)

// Products of few rows (m <= 4: a decode step's projections) with a constant weight matrix stored
// transposed, as a linear layer stores it: w (n, k) row-major, plan/fusion.py's Linear and
// MatMulSwiGLU. y[r, j] = sum_i a[r, i] * w[j, i] (+ bias[j]), or in the _swiglu kernel (w holding 2n
// rows, the gate's, then the up projection's) y[r, j] = silu(a.w[j]) * a.w[n + j]. `split` warps (1, 2, 4
// or 8) share an output column: lanes take 8 consecutive k at a time (16-byte loads; k a multiple of
// 8), the warps every (split * 256)-th, summed in a fixed order (lanes by a butterfly, then the
// warps in order). A column's weights are constants: before waiting for the kernel before (a dependent
// launch overlaps that with its tail) each lane copies its own to shared memory (`staged`: linear_row, one
// row of 16-bit values over a short K), so that after the wait only the activations are read from memory;
// else it loads its first ones into registers (linear's stream). The _norm kernels take the rows
// RMS-normalised by each block first (args.h RowNorm: plan/fusion.py's NormedProduct), in shared memory.

// One row of 16-bit activations from memory with staged weights (a decode step's down projection): the same
// products and sums as linear's below in straight-line code, every pass's activations loaded at once while the
// weights' copies land. Its blocks mostly start only as the kernel before ends (that one's blocks hold the shared
// memory), so all of a block's work is on the step's path. Up to 5 passes (46 registers; 8 took 60, so fewer of the
// next kernel's blocks fitted beside its own to stage early): the float16 Qwen2.5-0.5B step's GPU time 519 -> 493 us
// against linear's loops (H200, docs/benchmarks/gpu.md, twentieth session).
template <typename T, int W>
__device__ void linear_row(const T* a, const T* w, const T* bias, T* y, Linear p) {
  __shared__ float part[LINEAR_WARPS][W];
  extern __shared__ __align__(16) unsigned char dynamic[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, slice = warp % p.split;
  const int64_t n = (int64_t)blockIdx.x * (LINEAR_WARPS / p.split) + warp / p.split;
  const bool active = n < p.n;
  const int step = 256 * p.split, k0 = (lane + 32 * slice) * 8;
  uint4* own = (uint4*)dynamic + (int64_t)warp * ((p.k + step - 1) / step) * W * 32 + lane;
#pragma unroll
  for (int i = 0; i < LINEAR_ROW_PASSES; i++)
#pragma unroll
    for (int q = 0; q < W; q++)
      if (active && k0 + i * step < p.k)
        copy16_to_shared(own + (i * W + q) * 32, w + (n + q * p.n) * p.k + k0 + i * step);
  const float b0 = W == 1 && bias && active && !lane && !slice ? ld(bias + n) : 0.0f;
  wait_for_previous();
  uint4 x[LINEAR_ROW_PASSES];
#pragma unroll
  for (int i = 0; i < LINEAR_ROW_PASSES; i++)
    x[i] = k0 + i * step < p.k ? *(const uint4*)(a + k0 + i * step) : make_uint4(0, 0, 0, 0);
  wait_copies_to_shared();
  float acc[W] = {};
#pragma unroll
  for (int i = 0; i < LINEAR_ROW_PASSES; i++)
    if (active && k0 + i * step < p.k) {
      float xf[8], v[8];
      load8((const T*)&x[i], xf);
#pragma unroll
      for (int q = 0; q < W; q++) {
        load8((const T*)(own + (i * W + q) * 32), v);
#pragma unroll
        for (int j = 0; j < 8; j++) acc[q] += xf[j] * v[j];
      }
    }
#pragma unroll
  for (int q = 0; q < W; q++) {
    for (int off = 16; off > 0; off >>= 1) acc[q] += __shfl_xor_sync(0xffffffff, acc[q], off);
    if (lane == 0) part[warp][q] = acc[q];
  }
  if (p.split > 1) __syncthreads();
  if (lane || slice || !active) return;
  float s[W] = {};
  for (int q = 0; q < W; q++)
    for (int i = 0; i < p.split; i++) s[q] += part[warp + i][q];
  st(y + n, W == 2 ? s[0] / (1.0f + expf(-s[0])) * s[W - 1] : bias ? s[0] + b0 : s[0]);
}

// Eight values of T as one load (16 bytes, 32 for float32).
template <typename T>
struct Eight {
  uint4 v[sizeof(T) / 2];
};
// A constant's eight values (the weights: read once a step, so marked first to leave L2).
template <typename T>
__device__ __forceinline__ Eight<T> load_streaming(const T* p) {
  Eight<T> e;
#pragma unroll
  for (int i = 0; i < (int)(sizeof(T) / 2); i++) e.v[i] = __ldcs((const uint4*)p + i);
  return e;
}

// The products of `linear` below where linear_row does not take them: the weights streamed from memory into
// registers, LINEAR_STREAM passes at a time, the next passes' loads in flight while this pass's sums are made, the
// first ones issued before waiting for the kernel before (constants). Against the loop it replaces (weights
// prefetched to L2, then read a pass at a time) a float16 Llama-3.2-1B-shaped decode step's GPU time went 1.198 ->
// 0.816 ms on the H200, with matmul.py's split (docs/benchmarks/gpu.md, fortieth session).
#define LINEAR_STREAM 2
// W: 1, or 2 matrices (SwiGLU), compile-time so the sums stay in registers; NORM: the rows are `norm`'s
template <typename T, int W, bool NORM>
__device__ void linear(const T* a, const T* w, const T* bias, T* y, Linear p, RowNorm norm) {
  if constexpr (!NORM && sizeof(T) == 2)
    if (p.m == 1 && p.staged && p.k <= LINEAR_ROW_PASSES * 256 * p.split) return linear_row<T, W>(a, w, bias, y, p);
  __shared__ float part[LINEAR_WARPS][SMALL_ROWS][W];
  extern __shared__ __align__(16) unsigned char dynamic[];  // [normed rows]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, slice = warp % p.split;
  const int64_t n = (int64_t)blockIdx.x * (LINEAR_WARPS / p.split) + warp / p.split;
  const bool active = n < p.n;
  const int step = 256 * p.split, k0 = (lane + 32 * slice) * 8;
  Eight<T> now[LINEAR_STREAM][W], next[LINEAR_STREAM][W];
  const Eight<T> none = {};
#pragma unroll
  for (int u = 0; u < LINEAR_STREAM; u++)
#pragma unroll
    for (int q = 0; q < W; q++)
      now[u][q] = active && k0 + u * step < p.k ? load_streaming(w + (n + q * p.n) * p.k + k0 + u * step) : none;
  // the bias is a constant too (plan/fusion.py: an Add of an initializer): its load not after the sums
  const float b0 = W == 1 && bias && active && !lane && !slice ? ld(bias + n) : 0.0f;
  wait_for_previous();
  if (NORM) {  // the rows normalised into shared memory first
    norm_rows_to_shared(norm, 0, p.m, p.k, blockIdx.x == 0, (T*)dynamic);
    a = (const T*)dynamic;
  }
  float acc[SMALL_ROWS][W] = {};
  for (int base = k0; active && base < p.k; base += LINEAR_STREAM * step) {
#pragma unroll
    for (int u = 0; u < LINEAR_STREAM; u++)
#pragma unroll
      for (int q = 0; q < W; q++) {
        const int at = base + (LINEAR_STREAM + u) * step;
        next[u][q] = at < p.k ? load_streaming(w + (n + q * p.n) * p.k + at) : none;
      }
#pragma unroll
    for (int u = 0; u < LINEAR_STREAM; u++) {
      if (base + u * step >= p.k) break;
      float x[8], v[W][8];
#pragma unroll
      for (int q = 0; q < W; q++) load8((const T*)&now[u][q], v[q]);
#pragma unroll
      for (int r = 0; r < SMALL_ROWS; r++)
        if (r < p.m) {
          load8(a + (int64_t)r * p.k + base + u * step, x);
#pragma unroll
          for (int q = 0; q < W; q++)
#pragma unroll
            for (int j = 0; j < 8; j++) acc[r][q] += x[j] * v[q][j];
        }
    }
#pragma unroll
    for (int u = 0; u < LINEAR_STREAM; u++)
#pragma unroll
      for (int q = 0; q < W; q++) now[u][q] = next[u][q];
  }
#pragma unroll
  for (int r = 0; r < SMALL_ROWS; r++) {
    if (r == p.m) break;  // no sums of absent rows (a decode step's one row: 5 shuffles, not 20)
#pragma unroll
    for (int q = 0; q < W; q++) {
      for (int off = 16; off > 0; off >>= 1) acc[r][q] += __shfl_xor_sync(0xffffffff, acc[r][q], off);
      if (lane == 0) part[warp][r][q] = acc[r][q];
    }
  }
  if (p.split > 1) __syncthreads();
  if (lane || slice || !active) return;
  for (int r = 0; r < p.m; r++) {
    float s[W] = {};
    for (int q = 0; q < W; q++)
      for (int i = 0; i < p.split; i++) s[q] += part[warp + i][r][q];
    st(y + (int64_t)r * p.n + n, W == 2 ? s[0] / (1.0f + expf(-s[0])) * s[W - 1] : bias ? s[0] + b0 : s[0]);
  }
}

// The ArgMax of each row of a product's output, picked as the product is stored (plan/fusion.py's LinearArgMax: a
// greedy decoder's LM head and its next token, not a second pass over the logits after the product has drained).
// ArgMax's order (reduction.cu's comes_before with SELECT_ARG: the value as stored, NaN below every number, -0 equal
// to +0; ties to the lower index, the higher with prefer_last) as one 64-bit key, so each block raises a row's key by one atomicMax
// it does not wait for; the kernel after (seamless_linear_picked) turns the keys into indices and sets them back to
// zero (runtime/cuda.py's counters). A float16 Qwen2.5-0.5B step's GPU time on the H200: 494.8 -> 493.5 us against
// the ArgMax kernel after cuBLASLt's LM head; 496.8 -> 515.5 where each block counted itself done with a returning
// atomic (the last one writing the indices): blocks then wait on the atomics queued at one address.
struct Pick {
  unsigned long long* keys;
  int prefer_last;
};

__device__ __forceinline__ unsigned long long pick_key(float v, int64_t i, int prefer_last) {
  unsigned u = __float_as_uint(v == 0.0f ? 0.0f : v);
  u = v != v ? 0u : u >> 31 ? ~u : u | 0x80000000u;  // ordered as the floats are (NaN lowest); key 0 is "none"
  return (unsigned long long)u << 32 | (prefer_last ? (unsigned)i : ~(unsigned)i);
}

// Every thread of the block calls it, `key` that of its output (0: none); a row's 8 G outputs lie in 8 G
// consecutive lanes.
template <int G>
__device__ void pick_rows(Pick pick, int m, int r, int col, unsigned long long key) {
  for (int off = 4 * G; off > 0; off >>= 1) {
    unsigned long long other = __shfl_xor_sync(0xffffffffu, key, off);
    key = other > key ? other : key;
  }
  if (col == 0 && r < m && key > __ldcg(pick.keys + r)) atomicMax(pick.keys + r, key);  // keys only rise
}

// The same products of 16-bit types on tensor cores where K is short (kernels/cuda/matmul.py decides: K a multiple of
// 32 up to LINEAR_WARPS * 4 * 32; a decode layer's q|k|v, o and gate|up, not its down projection, whose long K
// makes each warp's chain of products long). A block takes G groups of 8 columns (of each of W matrices), its warps
// every LINEAR_WARPS-th chunk of 32 k. Lane t stages 16 bytes of column t / 4 of each group at k = chunk * 32 +
// (t % 4) * 8 (before the wait, as linear does) and holds row t / 4's activations at those k in A (rows >= m zero): two
// mma.sync m16n8k16 a chunk, group and matrix, float32 sums (a dot product's terms may be paired in any order; A and B
// agree). The warps' sums are added in order. Fewer instructions than a warp a column: 20.55 -> 19.61 us a float16
// decode layer of Qwen2.5-0.5B in a chain of dependent launches on the H200; 16 columns a block (G = 2) for gate|up
// leave SM slots for the next kernel to stage its weights early (that harness: 21.07 -> 19.25 us a layer with o at 16
// too, but by the real step's GPU time o is ~3 us faster at 8; docs/benchmarks/gpu.md, sixteenth, eighteenth and
// twenty-first sessions).
template <typename T, int W, bool NORM, int G, bool PICK = false>
__device__ void linear_tc(const T* a, const T* w, const T* bias, T* y, Linear p, RowNorm norm, Pick pick = {}) {
  __shared__ float part[LINEAR_WARPS][G][W][SMALL_ROWS][8];
  extern __shared__ __align__(16) unsigned char dynamic[];  // [normed rows] [staged weights]
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane & 3, row = lane >> 2;
  int64_t first = (int64_t)blockIdx.x * 8 * G;  // the block's first column
  int left = p.n - first;                       // columns from there on (matmul.py: n < 2^31)
  int chunks = p.k / 32, most = (chunks + LINEAR_WARPS - 1) / LINEAR_WARPS;
  uint4* own = (uint4*)(dynamic + (NORM ? (p.m * p.k * sizeof(T) + 15) / 16 * 16 : 0)) +
               (int64_t)warp * most * G * W * 32 + lane;
  for (int c = warp, i = 0; c < chunks; c += LINEAR_WARPS, i++)
#pragma unroll
    for (int e = 0; e < G; e++)
#pragma unroll
      for (int q = 0; q < W; q++)  // this lane's column of B in group e: first + e * 8 + row
        if (e * 8 + row < left)
          copy16_to_shared(own + ((i * G + e) * W + q) * 32,
                           w + (first + e * 8 + row + q * p.n) * p.k + c * 32 + g * 8);
  float b0 = 0.0f;  // the bias of the output this thread stores (below): a constant, loaded before the wait
  if (W == 1 && bias && threadIdx.x / (8 * G) < p.m && threadIdx.x % (8 * G) < left)
    b0 = ld(bias + first + threadIdx.x % (8 * G));
  wait_for_previous();
  if (NORM) {  // one matrix (q|k|v): gamma loaded with the rows (46 registers); two (gate|up): after the sums, in 48
    norm_rows_to_shared<T, W == 1>(norm, 0, p.m, p.k, blockIdx.x == 0, (T*)dynamic);
    a = (const T*)dynamic;
  }
  // the activations of all the warp's chunks at once, before the weights' copies are waited for, not a round trip a
  // chunk after them (q|k|v, o and gate|up together 0.4 us a float16 decode layer of Qwen2.5-0.5B, H200,
  // docs/benchmarks/gpu.md, nineteenth session)
  uint4 xs[LINEAR_TC_CHUNKS];
#pragma unroll
  for (int i = 0; i < LINEAR_TC_CHUNKS; i++) {
    int c = warp + i * LINEAR_WARPS;
    xs[i] = row < p.m && c < chunks ? *(const uint4*)(a + (int64_t)row * p.k + c * 32 + g * 8) : make_uint4(0, 0, 0, 0);
  }
  wait_copies_to_shared();  // a lane reads only its own copies
  float d[G][W][4] = {};
#pragma unroll
  for (int i = 0; i < LINEAR_TC_CHUNKS; i++) {
    if (warp + i * LINEAR_WARPS >= chunks) break;
    const uint4 x = xs[i];
    uint32_t a1[4] = {x.x, 0, x.y, 0}, a2[4] = {x.z, 0, x.w, 0};  // k 0-3 and 4-7 of the lane's 8
#pragma unroll
    for (int e = 0; e < G; e++)
#pragma unroll
      for (int q = 0; q < W; q++) {
        uint4 b = e * 8 + row < left ? own[((i * G + e) * W + q) * 32] : make_uint4(0, 0, 0, 0);
        uint32_t b1[2] = {b.x, b.y}, b2[2] = {b.z, b.w};
        mma_16816<T>(d[e][q], a1, b1);
        mma_16816<T>(d[e][q], a2, b2);
      }
  }
  if (row < p.m)  // D row t / 4, columns 2 (t % 4) and 2 (t % 4) + 1
#pragma unroll
    for (int e = 0; e < G; e++)
#pragma unroll
      for (int q = 0; q < W; q++) {
        part[warp][e][q][row][2 * g] = d[e][q][0];
        part[warp][e][q][row][2 * g + 1] = d[e][q][1];
      }
  __syncthreads();
  int r = threadIdx.x / (8 * G), col = threadIdx.x % (8 * G);
  unsigned long long key = 0;
  if (r < p.m && col < left) {
    float s[W] = {};
    for (int q = 0; q < W; q++)
      for (int v = 0; v < LINEAR_WARPS; v++) s[q] += part[v][col / 8][q][r][col % 8];
    T out;
    st(&out, W == 2 ? s[0] / (1.0f + expf(-s[0])) * s[W - 1] : bias ? s[0] + b0 : s[0]);
    y[(int64_t)r * p.n + first + col] = out;
    if (PICK) key = pick_key(ld(&out), first + col, pick.prefer_last);
  }
  if constexpr (PICK) pick_rows<G>(pick, p.m, r, col, key);
}

#define LINEAR(S, T)                                                                                               \
  extern "C" __global__ void seamless_linear_##S(const T* a, const T* w, const T* bias, T* y, Linear p) {           \
    let_next_launch();                                                                                             \
    linear<T, 1, false>(a, w, bias, y, p, RowNorm{});                                                           \
  }                                                                                                                \
  extern "C" __global__ void seamless_linear_swiglu_##S(const T* a, const T* w, const T* bias, T* y, Linear p) {    \
    let_next_launch();                                                                                             \
    linear<T, 2, false>(a, w, bias, y, p, RowNorm{});                                                           \
  }                                                                                                                \
  extern "C" __global__ void seamless_linear_norm_##S(const T* w, const T* bias, T* y, Linear p, RowNorm norm) { \
    let_next_launch();                                                                                             \
    linear<T, 1, true>(nullptr, w, bias, y, p, norm);                                                              \
  }                                                                                                                \
  extern "C" __global__ void seamless_linear_swiglu_norm_##S(const T* w, const T* bias, T* y, Linear p,            \
                                                             RowNorm norm) {                                    \
    let_next_launch();                                                                                             \
    linear<T, 2, true>(nullptr, w, bias, y, p, norm);                                                              \
  }
FOR_FLOATS(LINEAR)
// linear_tc's kernels as matmul.py takes them: 8 columns a block for one matrix (q|k|v with its norm, o), 16 for
// gate|up and LinearArgMax's (_tc16)
#define LINEAR_TC(S, T)                                                                                            \
  extern "C" __global__ void seamless_linear_tc_norm_##S(const T* w, const T* bias, T* y, Linear p,                \
                                                         RowNorm norm) {                                        \
    let_next_launch();                                                                                             \
    linear_tc<T, 1, true, 1>(nullptr, w, bias, y, p, norm);                                                        \
  }                                                                                                                \
  extern "C" __global__ void seamless_linear_tc_##S(const T* a, const T* w, const T* bias, T* y, Linear p) {       \
    let_next_launch();                                                                                             \
    linear_tc<T, 1, false, 1>(a, w, bias, y, p, RowNorm{});                                                     \
  }                                                                                                                \
  extern "C" __global__ void seamless_linear_tc16_argmax_##S(const T* a, const T* w, const T* bias, T* y, Linear p,\
                                                             unsigned long long* keys, int prefer_last) {          \
    let_next_launch();                                                                                             \
    linear_tc<T, 1, false, 2, true>(a, w, bias, y, p, RowNorm{}, Pick{keys, prefer_last});                      \
  }                                                                                                                \
  extern "C" __global__ void seamless_linear_tc16_swiglu_##S(const T* a, const T* w, const T* bias, T* y,          \
                                                             Linear p) {                                           \
    let_next_launch();                                                                                             \
    linear_tc<T, 2, false, 2>(a, w, bias, y, p, RowNorm{});                                                     \
  }                                                                                                                \
  extern "C" __global__ void seamless_linear_tc16_swiglu_norm_##S(const T* w, const T* bias, T* y, Linear p,       \
                                                                  RowNorm norm) {                               \
    let_next_launch();                                                                                             \
    linear_tc<T, 2, true, 2>(nullptr, w, bias, y, p, norm);                                                        \
  }
LINEAR_TC(f16, __half)
LINEAR_TC(bf16, __nv_bfloat16)

// LinearArgMax's indices from the keys its product raised (pick_rows), the keys back to zero; a row whose first
// value (of y's rows of n float16 or bfloat16 values) is NaN answers 0, as stock's ArgMax loop.
extern "C" __global__ void seamless_linear_picked(unsigned long long* keys, int64_t* indices, int m, int prefer_last,
                                                  const uint16_t* y, int64_t n, int bf16) {
  dependent_launch();
  if (threadIdx.x < m) {
    unsigned low = (unsigned)keys[threadIdx.x];
    keys[threadIdx.x] = 0;
    unsigned first = y[threadIdx.x * n] & 0x7fffu;
    bool nan = first > (bf16 ? 0x7f80u : 0x7c00u);
    indices[threadIdx.x] = nan ? 0 : prefer_last ? low : ~low;
  }
}

// Det: the determinant of each trailing n x n matrix by LU with partial pivoting in float64, a thread
// per matrix, in place in `work` (batch * n * n doubles, filled here from x).
template <typename T>
__device__ void determinant(int64_t batch, int n, const T* x, double* work, T* y) {
  GRID_LOOP(b, batch) {
    double* a = work + b * n * n;
    for (int i = 0; i < n * n; i++) a[i] = ld(x + b * n * n + i);
    double d = 1.0;
    for (int c = 0; c < n && d != 0.0; c++) {
      int p = c;
      for (int r = c + 1; r < n; r++)
        if (fabs(a[r * n + c]) > fabs(a[p * n + c])) p = r;
      if (p != c) {
        for (int k = c; k < n; k++) {
          double t = a[c * n + k];
          a[c * n + k] = a[p * n + k];
          a[p * n + k] = t;
        }
        d = -d;
      }
      double pivot = a[c * n + c];
      d *= pivot;
      if (pivot == 0.0) break;  // singular
      for (int r = c + 1; r < n; r++) {
        double f = a[r * n + c] / pivot;
        for (int k = c + 1; k < n; k++) a[r * n + k] -= f * a[c * n + k];
      }
    }
    st(y + b, (float)d);
  }
}

#define DETERMINANT(S, T)                                                                                 \
  extern "C" __global__ void seamless_det_##S(int64_t batch, int n, const T* x, double* work, T* y) {   \
    dependent_launch();                                                                                   \
    determinant<T>(batch, n, x, work, y);                                                                 \
  }
FOR_FLOATS(DETERMINANT)
