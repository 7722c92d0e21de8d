// Reductions over any set of axes (ReduceSum/Mean/Max/Min/Prod/SumSquare/R_L1/R_L2/LogSum/LogSumExp).
// The host splits the input's axes into kept ones (which index the output) and reduced ones;
// each output element walks its reduced elements. Floats accumulate in float32 (one block per
// output when there are many elements to reduce); int32/int64 Max and Min in their own type, the
// others in double, saturating at the type's limits as stock's do.
//
// Max/Min with NaN give stock ORT's CPU answers: stock keeps "a unless b is strictly greater (less)", so a NaN
// sticks where it leads and is dropped, with what was combined into it, where it follows; which it does follows
// the order of stock's code path for the merged shape (kernels/cpu/reduction.py replays it, and says how). Here
// a first pass takes the best number and notes a NaN; only where there is one, a second pass takes the best
// number that survives (survives()), or NaN where the element stock starts from (lead()) is NaN.
#include "common.cuh"

// stock's path for the merged shape: one loop from the first element; rows (kept, then reduced) each reduced by
// Eigen's vectorised max; [kept, reduced, kept] by Eigen's partial max; [reduced, kept, reduced] by Eigen rows
// folded in a loop

__device__ __forceinline__ int64_t offset_of(int64_t i, const int64_t* dims, const int64_t* strides, int rank) {
  int64_t off = 0;
  for (int d = rank - 1; d >= 0; d--) {
    off += (i % dims[d]) * strides[d];
    i /= dims[d];
  }
  return off;
}

template <typename A>
__device__ __forceinline__ A identity_of(int op) {
  return op == R_MAX ? (A)-INFINITY : op == R_MIN ? (A)INFINITY : op == R_PROD ? (A)1 : (A)0;
}
__device__ __forceinline__ int64_t identity_int(int op, int64_t lo, int64_t hi) {
  return op == R_MAX ? lo : op == R_MIN ? hi : op == R_PROD ? 1 : 0;
}

template <typename A>
__device__ __forceinline__ A combine(int op, A acc, A v) {
  switch (op) {
    case R_MAX: return v > acc ? v : acc;  // a NaN is dropped: survives() decides where it counts
    case R_MIN: return v < acc ? v : acc;
    case R_PROD: return acc * v;
    default: return acc + v;  // the sums: the value was mapped first
  }
}

// v as it enters the sum (|v|, v^2, exp(v - shift)...)
__device__ __forceinline__ float mapped(int op, float v, float shift) {
  switch (op) {
    case R_SUM_SQUARE: case R_L2: return v * v;
    case R_L1: return fabsf(v);
    case R_LOG_SUM_EXP: return expf(v - shift);
    default: return v;
  }
}

__device__ __forceinline__ float finish(int op, float acc, int64_t count, float shift) {
  switch (op) {
    case R_MEAN: return count ? acc / count : acc;  // the mean of nothing is 0, as stock's
    case R_L2: return sqrtf(acc);
    case R_LOG_SUM: return logf(acc);
    case R_LOG_SUM_EXP: return logf(acc) + shift;
    default: return acc;
  }
}

// op over the block's values (32 floats of shared scratch); every thread gets the result.
__device__ float block_combine(int op, float v, float* shared) {
  for (int off = 16; off > 0; off >>= 1) v = combine(op, v, __shfl_xor_sync(0xffffffff, v, off));
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // a previous call's readers are done with shared[0]
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = threadIdx.x < ((blockDim.x + 31) >> 5) ? shared[threadIdx.x] : identity_of<float>(op);
  if (warp == 0)
    for (int off = 16; off > 0; off >>= 1) v = combine(op, v, __shfl_xor_sync(0xffffffff, v, off));
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  return shared[0];
}

template <typename T>
__device__ __forceinline__ bool nan_at(const T* base, const Reduce& r, int64_t j) {
  float v = ld(base + offset_of(j, r.reduced_dims, r.reduced_strides, r.reduced_rank));
  return v != v;
}

// Elements of a row before its first 16-byte boundary, the row starting `offset` elements into an aligned
// buffer (Eigen's first_aligned).
__device__ __forceinline__ int64_t aligned_start(int64_t offset, int lanes, int64_t n) {
  int64_t s = (lanes - offset % lanes) % lanes;
  return s < n ? s : n;
}

// Eigen's vectorised max of a row of n elements (reduced indices j0 ..), s of them before the boundary: its
// first packet's first lane leads (or the row's first element, without a whole packet).
__device__ __forceinline__ int64_t row_lead(int64_t j0, int64_t n, int64_t s, int lanes) {
  return (n - s) / lanes ? j0 + s : j0;
}

// Whether element i of that row, a number, survives: the packets go alternately into two accumulators, whose
// lane l is NaN where that of packet 0 (or 1) is, then lanes are halved (the upper half kept into the lower: lane
// 3 also needs lane 1), and the elements around the packets are taken one at a time.
template <typename T>
__device__ bool row_keeps(const T* base, const Reduce& r, int64_t j0, int64_t n, int64_t s, int lanes, int64_t i) {
  int64_t packets = (n - s) / lanes;
  if (packets == 0 || i < s || i >= s + packets * lanes) return true;
  int64_t p = (i - s) / lanes, first = j0 + s;
  int l = (int)((i - s) % lanes);
  if (l && nan_at(base, r, first + l)) return false;
  if (l == 3 && nan_at(base, r, first + 1)) return false;
  return !(p % 2 && p < packets / 2 * 2 && nan_at(base, r, first + lanes + l));
}

// Whether reduced element j of output o, a number, survives stock's order of combination (see NanLayout).
template <typename T>
__device__ bool survives(const T* base, const Reduce& r, int64_t o, int64_t j) {
  int lanes = r.lanes;
  if (r.nan_layout == NAN_ROWS)
    return row_keeps(base, r, 0, r.count, aligned_start(o * r.count, lanes, r.count), lanes, j);
  if (r.nan_layout == NAN_KRK) {
    // output columns from the output block's first boundary are vectorised: row 0 leads, rows 1.. go in groups of
    // 4 combined in pairs (a group drops with its first, its fourth with its third), the rest one at a time
    int64_t d2 = r.nan_dims[2], c = o % d2, s = aligned_start(o - c, lanes, d2);
    if (c < s || c >= s + (d2 - s) / lanes * lanes || j == 0 || j > (r.count - 1) / 4 * 4) return true;
    int64_t first = 1 + (j - 1) / 4 * 4;
    int q = (int)((j - 1) % 4);
    return !(q && nan_at(base, r, first)) && !(q == 3 && nan_at(base, r, first + 2));
  }
  if (r.nan_layout == NAN_RKR && j) {
    // the first element starts the loop over the Eigen rows; a row whose lead is NaN drops out whole
    int64_t d1 = r.nan_dims[1], d2 = r.nan_dims[2], row = j / d2 * d2;
    int64_t s = aligned_start((j / d2 * d1 + o) * d2, lanes, d2);
    return !nan_at(base, r, row_lead(row, d2, s, lanes)) && row_keeps(base, r, row, d2, s, lanes, j - row);
  }
  return true;
}

__device__ __forceinline__ int64_t lead(const Reduce& r, int64_t o) {
  return r.nan_layout == NAN_ROWS ? row_lead(0, r.count, aligned_start(o * r.count, r.lanes, r.count), r.lanes) : 0;
}

// All of this thread's share (start, start + step, ...) of one output's elements, combined; *nan set where a Max or
// Min meets a NaN (which the combination dropped).
template <typename T>
__device__ float partial(int op, const T* base, const Reduce& r, int64_t start, int64_t step, float shift, bool* nan) {
  int red_op = op == R_MAX || op == R_MIN || op == R_PROD ? op : R_SUM;
  float acc = identity_of<float>(red_op);
  for (int64_t j = start; j < r.count; j += step) {
    float v = ld(base + offset_of(j, r.reduced_dims, r.reduced_strides, r.reduced_rank));
    *nan |= v != v;
    acc = combine(red_op, acc, mapped(op, v, shift));
  }
  return acc;
}

// The second pass of a Max or Min of output o whose elements hold NaN: this thread's share of the numbers that
// survive.
template <typename T>
__device__ float surviving(int op, const T* base, const Reduce& r, int64_t o, int64_t start, int64_t step) {
  float acc = identity_of<float>(op);
  for (int64_t j = start; j < r.count; j += step) {
    float v = ld(base + offset_of(j, r.reduced_dims, r.reduced_strides, r.reduced_rank));
    if (v == v && survives(base, r, o, j)) acc = combine(op, acc, v);
  }
  return acc;
}

// One block per output element.
template <typename T>
__device__ void reduce_block(int op, const T* x, T* y, Reduce r) {
  __shared__ float shared[32];
  const T* base = x + offset_of(blockIdx.x, r.kept_dims, r.kept_strides, r.kept_rank);
  float shift = 0.0f;
  bool nan = false;
  if (op == R_LOG_SUM_EXP) {  // the max first, for exp's range
    shift = block_combine(R_MAX, partial(R_MAX, base, r, threadIdx.x, blockDim.x, 0.0f, &nan), shared);
    if (isinf(shift)) shift = 0.0f;
  }
  int red_op = op == R_MAX || op == R_MIN || op == R_PROD ? op : R_SUM;
  float acc = block_combine(red_op, partial(op, base, r, threadIdx.x, blockDim.x, shift, &nan), shared);
  if ((op == R_MAX || op == R_MIN) && __syncthreads_or(nan)) {
    acc = block_combine(op, surviving(op, base, r, blockIdx.x, threadIdx.x, blockDim.x), shared);
    if (nan_at(base, r, lead(r, blockIdx.x))) acc = NAN;
  }
  if (threadIdx.x == 0) st(y + blockIdx.x, finish(op, acc, r.count, shift));
}

// One thread per output element.
template <typename T>
__device__ void reduce_thread(int op, int64_t n, const T* x, T* y, Reduce r) {
  GRID_LOOP(i, n) {
    const T* base = x + offset_of(i, r.kept_dims, r.kept_strides, r.kept_rank);
    float shift = 0.0f;
    bool nan = false;
    if (op == R_LOG_SUM_EXP) {
      shift = partial(R_MAX, base, r, 0, 1, 0.0f, &nan);
      if (isinf(shift)) shift = 0.0f;
    }
    float acc = partial(op, base, r, 0, 1, shift, &nan);
    if ((op == R_MAX || op == R_MIN) && nan)
      acc = nan_at(base, r, lead(r, i)) ? NAN : surviving(op, base, r, i, 0, 1);
    st(y + i, finish(op, acc, r.count, shift));
  }
}

#define REDUCE(S, T)                                                                                  \
  extern "C" __global__ void seamless_reduce_block_##S(int op, const T* x, T* y, Reduce r) { dependent_launch(); \
    reduce_block(op, x, y, r);                                                                        \
  }                                                                                                   \
  extern "C" __global__ void seamless_reduce_thread_##S(int op, int64_t n, const T* x, T* y, Reduce r) { dependent_launch(); \
    reduce_thread(op, n, x, y, r);                                                                    \
  }
FOR_FLOATS(REDUCE)

// int32/int64: Max and Min in the type; Sum, Mean, Prod, SumSquare and L1 accumulate in double (A) and saturate at
// the type's limits, truncating, as stock's do.
template <typename I, typename A>
__device__ A partial_int(int op, const I* base, const Reduce& r, int64_t start, int64_t step, I lo, I hi) {
  int red_op = op == R_MAX || op == R_MIN || op == R_PROD ? op : R_SUM;
  A acc = (A)identity_int(red_op, lo, hi);
  for (int64_t j = start; j < r.count; j += step) {
    A v = (A)base[offset_of(j, r.reduced_dims, r.reduced_strides, r.reduced_rank)];
    acc = combine<A>(red_op, acc, op == R_SUM_SQUARE ? v * v : op == R_L1 && v < 0 ? -v : v);
  }
  return acc;
}

template <typename I>
__device__ __forceinline__ I int_result(int, I acc, int64_t, I, I) { return acc; }
template <typename I>
__device__ __forceinline__ I int_result(int op, double acc, int64_t count, I lo, I hi) {
  if (op == R_MEAN && count) acc /= (double)count;
  return acc >= (double)hi ? hi : acc <= (double)lo ? lo : (I)acc;
}

template <typename I, typename A>
__device__ void reduce_int_thread(int op, int64_t n, const I* x, I* y, Reduce r, I lo, I hi) {
  GRID_LOOP(i, n) {
    A acc = partial_int<I, A>(op, x + offset_of(i, r.kept_dims, r.kept_strides, r.kept_rank), r, 0, 1, lo, hi);
    y[i] = int_result<I>(op, acc, r.count, lo, hi);
  }
}

// One block per output element (a mask's sum over a long sequence: one thread alone took ~16 us).
template <typename I, typename A>
__device__ void reduce_int_block(int op, const I* x, I* y, Reduce r, I lo, I hi) {
  __shared__ A part[32];
  int red_op = op == R_MAX || op == R_MIN || op == R_PROD ? op : R_SUM;
  const I* base = x + offset_of(blockIdx.x, r.kept_dims, r.kept_strides, r.kept_rank);
  A acc = partial_int<I, A>(op, base, r, threadIdx.x, blockDim.x, lo, hi);
  for (int off = 16; off > 0; off >>= 1) acc = combine<A>(red_op, acc, __shfl_xor_sync(0xffffffff, acc, off));
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x) return;
  for (int w = 1; w < (int)(blockDim.x + 31) >> 5; w++) acc = combine<A>(red_op, acc, part[w]);
  y[blockIdx.x] = int_result<I>(op, acc, r.count, lo, hi);
}

#define REDUCE_INT(S, I, LO, HI)                                                                                  \
  extern "C" __global__ void seamless_reduce_thread_##S(int op, int64_t n, const I* x, I* y, Reduce r) {         \
    dependent_launch();                                                                                           \
    if (op == R_MAX || op == R_MIN) reduce_int_thread<I, I>(op, n, x, y, r, LO, HI);                              \
    else reduce_int_thread<I, double>(op, n, x, y, r, LO, HI);                                                    \
  }                                                                                                               \
  extern "C" __global__ void seamless_reduce_block_##S(int op, const I* x, I* y, Reduce r) {                     \
    dependent_launch();                                                                                           \
    if (op == R_MAX || op == R_MIN) reduce_int_block<I, I>(op, x, y, r, LO, HI);                                  \
    else reduce_int_block<I, double>(op, x, y, r, LO, HI);                                                        \
  }
REDUCE_INT(i32, int32_t, INT32_MIN, INT32_MAX)
REDUCE_INT(i64, int64_t, INT64_MIN, INT64_MAX)

// plan/fusion.py's ReduceSumSubCast: per row of x (its last axis), the sum less `offset` in x's type (wrapping),
// converted to y's type: a decoder's seqlens_k from its attention mask in one launch, not three. A block a row.
template <typename I, typename O>
__device__ void row_sum_sub(const I* x, O* y, int64_t n, I offset) {
  __shared__ I part[32];
  const I* row = x + blockIdx.x * n;
  I acc = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) acc += row[j];
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffff, acc, off);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x) return;
  for (int w = 1; w < (int)(blockDim.x + 31) >> 5; w++) acc += part[w];
  y[blockIdx.x] = (O)(I)(acc - offset);
}

#define ROW_SUM_SUB(S, I, SO, O)                                                                                \
  extern "C" __global__ void seamless_row_sum_sub_##S##_##SO(const I* x, O* y, int64_t n, I offset) {          \
    dependent_launch();                                                                                       \
    row_sum_sub<I, O>(x, y, n, offset);                                                                       \
  }
ROW_SUM_SUB(i32, int32_t, i32, int32_t)
ROW_SUM_SUB(i32, int32_t, i64, int64_t)
ROW_SUM_SUB(i64, int64_t, i32, int32_t)
ROW_SUM_SUB(i64, int64_t, i64, int64_t)
#undef ROW_SUM_SUB

// Softmax and LogSoftmax over the last axis, one block of 256 threads per row.
template <typename T>
__device__ void softmax_row(const T* x, T* y, int64_t cols, int flags) {  // args.h SoftmaxFlag bits
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
  bool zero = (flags & SOFTMAX_ZERO_MASKED_ROWS) && m == -INFINITY;  // every key masked: zeros (Attention), not NaN
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    st(yr + (c), zero ? 0.0f : (flags & SOFTMAX_LOG) ? ld(xr + (c)) - m - log_sum : expf(ld(xr + (c)) - m) * inv);
}

#define SOFTMAX(S, T)                                                                                     \
  extern "C" __global__ void seamless_softmax_##S(const T* x, T* y, int64_t cols, int flags) { dependent_launch(); \
    softmax_row(x, y, cols, flags);                                                                      \
  }
FOR_FLOATS(SOFTMAX)
#undef SOFTMAX

// CumSum / CumProd and TopK / ArgMax / ArgMin along one axis, per type (float types compute in float32, int32 and
// int64 in their own type).
namespace along_axis {

using typed::load;
using typed::store;
using typed::is_nan;

// ---- CumSum (or with product, CumProd) of x viewed as [outer, n, inner]: one thread per (outer,
// inner) lane runs along the axis.
template <typename T>
__device__ void cumulative(int64_t lanes, const T* x, T* y, int64_t n, int64_t inner, int exclusive, int reverse,
                           int product) {
  GRID_LOOP(lane, lanes) {
    int64_t base = lane / inner * n * inner + lane % inner;
    decltype(load(x)) acc = product ? 1 : 0;
    for (int64_t j = 0; j < n; j++) {
      int64_t at = base + (reverse ? n - 1 - j : j) * inner;
      decltype(acc) v = load(x + at);
      if (!exclusive) acc = product ? acc * v : acc + v;
      store(y + at, acc);
      if (exclusive) acc = product ? acc * v : acc + v;
    }
  }
}

// ---- TopK / ArgMax / ArgMin: x viewed as [outer, n, inner], one block of SELECT_THREADS threads
// per (outer, inner) lane. The output order is a total order: by value (descending when largest;
// NaN above every number, as stock's TopK), then by index (ascending; descending with prefer_last, ArgMax's
// select_last_index). Pass p picks the first element strictly after pass p-1's pick, so k passes
// give the first k elements in order without scratch memory. `order`: SELECT_LARGEST, and SELECT_ARG for
// stock's ArgMax/ArgMin rule (its loop keeps a value unless a strictly better one comes): NaN below every
// number, and a row whose first element is NaN answers 0.

template <typename K>
__device__ __forceinline__ bool comes_before(K a, int64_t ia, K b, int64_t ib, int order, bool prefer_last) {
  bool nan_a = is_nan(a), nan_b = is_nan(b), largest = order & SELECT_LARGEST;
  if (nan_a != nan_b) return largest && !(order & SELECT_ARG) ? nan_a : nan_b;
  if (!nan_a && a != b) return largest ? a > b : a < b;
  return prefer_last ? ia > ib : ia < ib;
}

// (value, index) becomes (v, i) where i comes first in the order (index -1: none yet).
template <typename K>
__device__ __forceinline__ void keep_first(K& value, int64_t& index, K v, int64_t i, int largest, bool prefer_last) {
  if (index < 0 || comes_before(v, i, value, index, largest, prefer_last)) {
    value = v;
    index = i;
  }
}

// The block's first (value, index) pair in the order; index -1 is "none". Every thread gets it. The order
// is total over valid indices, so the pick does not depend on the order of the merges: across each warp
// by shuffles, then across the warps' picks.
template <typename K>
__device__ void block_first(K& value, int64_t& index, int largest, bool prefer_last) {
  __shared__ K values[SELECT_THREADS / 32];
  __shared__ int64_t indices[SELECT_THREADS / 32];
  auto merge = [&](K other, int64_t other_index) {
    if (other_index >= 0) keep_first(value, index, other, other_index, largest, prefer_last);
  };
  for (int offset = 16; offset > 0; offset /= 2)
    merge(__shfl_xor_sync(0xffffffffu, value, offset), __shfl_xor_sync(0xffffffffu, index, offset));
  if ((threadIdx.x & 31) == 0) {
    values[threadIdx.x / 32] = value;
    indices[threadIdx.x / 32] = index;
  }
  __syncthreads();
  value = values[0];
  index = indices[0];
  for (int w = 1; w < SELECT_THREADS / 32; w++) merge(values[w], indices[w]);
  __syncthreads();  // everyone has read the result before the next call overwrites it
}

// The first (value, index) of row[begin, end) strictly after (previous, previous_index) in the order (index -1:
// no bound; best_index -1: none), over the block.
template <typename T, typename K>
__device__ void block_first_in(const T* row, int64_t inner, int64_t begin, int64_t end, K previous,
                               int64_t previous_index, int largest, bool prefer_last, K& best, int64_t& best_index) {
  best = 0;
  best_index = -1;
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    K v = load(row + j * inner);
    if (previous_index < 0 || comes_before(previous, previous_index, v, j, largest, prefer_last))
      keep_first(best, best_index, v, j, largest, prefer_last);
  }
  block_first(best, best_index, largest, prefer_last);
}

// The index a selection of k = 1 answers: with SELECT_ARG, 0 where the row's first element is NaN.
template <typename T>
__device__ __forceinline__ int64_t arg_index(const T* row, int64_t best_index, int order) {
  return (order & SELECT_ARG) && is_nan(load(row)) ? 0 : best_index;
}

// values may be null (ArgMax/ArgMin want only the indices).
template <typename T>
__device__ void select_row(const T* x, T* values, int64_t* indices, int64_t n, int64_t inner, int64_t k, int largest,
                           int prefer_last) {
  using K = decltype(load(x));
  int64_t lane = blockIdx.x, outer = lane / inner, in = lane % inner;
  const T* row = x + outer * n * inner + in;
  K previous = 0;
  int64_t previous_index = -1;
  for (int64_t p = 0; p < k; p++) {
    K best;
    int64_t best_index;
    block_first_in(row, inner, 0, n, previous, previous_index, largest, prefer_last, best, best_index);
    if (threadIdx.x == 0) {
      int64_t out = (outer * k + p) * inner + in;
      if (values) values[out] = row[best_index * inner];
      indices[out] = arg_index(row, best_index, largest);
    }
    previous = best;
    previous_index = best_index;
  }
}

// k = 1 over a long axis: block (c, lane) writes the index of the first of chunk c of its lane to the
// partials [lane, chunks]; the lane's last block to finish (counted in `counters`, which it sets back to
// zero) picks the first of those elements (the order is total, so the pick is the one-block kernel's).
template <typename T>
__device__ void select_chunk(const T* x, int64_t* partials, int64_t* indices, unsigned* counters, int64_t n,
                             int64_t inner, int64_t chunk, int largest, int prefer_last) {
  using K = decltype(load(x));
  __shared__ bool last;
  int64_t lane = blockIdx.y, outer = lane / inner, in = lane % inner, begin = blockIdx.x * chunk;
  const T* row = x + outer * n * inner + in;
  K best;
  int64_t best_index;
  block_first_in(row, inner, begin, begin + chunk < n ? begin + chunk : n, K(0), -1, largest, prefer_last, best,
                 best_index);
  int64_t chunks = gridDim.x, first = lane * chunks;
  if (threadIdx.x == 0) {
    partials[first + blockIdx.x] = best_index;
    __threadfence();
    last = atomicAdd(counters + lane, 1u) == (unsigned)chunks - 1;
    if (last) {
      counters[lane] = 0;  // every block of the lane has counted: ready for the next launch
      __threadfence();     // the other blocks' partials before our reads
    }
  }
  __syncthreads();
  if (!last) return;
  best_index = -1;
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
    int64_t i = __ldcg(partials + first + c);  // L2: written by other blocks
    if (i >= 0) keep_first(best, best_index, load(row + i * inner), i, largest, prefer_last);
  }
  block_first(best, best_index, largest, prefer_last);
  if (threadIdx.x == 0) indices[lane] = arg_index(row, best_index, largest);
}

// k = 1 over contiguous rows (inner 1) starting 16-byte aligned, n a multiple of 16 bytes: a block a row,
// 16-byte loads (a prompt's ArgMax over all its rows of logits, where the chunked kernel's blocks cost more
// than their reads).
template <typename T>
__device__ void select_rows16(const T* x, int64_t* indices, int64_t n, int largest, int prefer_last) {
  constexpr int PER = 16 / sizeof(T);
  using K = decltype(load(x));
  const T* row = x + blockIdx.x * n;
  K best = 0;
  int64_t best_index = -1;
#pragma unroll 2
  for (int64_t j = threadIdx.x * PER; j < n; j += SELECT_THREADS * PER) {
    uint4 v = *(const uint4*)(row + j);
    const T* e = (const T*)&v;
#pragma unroll
    for (int i = 0; i < PER; i++) keep_first(best, best_index, load(e + i), j + i, largest, prefer_last);
  }
  block_first(best, best_index, largest, prefer_last);
  if (threadIdx.x == 0) indices[blockIdx.x] = arg_index(row, best_index, largest);
}

// ArgMax/ArgMin of a 1-D x holding NaN (select_last_index 0) as stock's Eigen maxCoeff(&index) finds it
// (kernels/cpu/reduction.py _stock_arg_vector): packets of 4 from the start (float16 as float32); a packet is taken
// where its best number beats the running value, which becomes the packet's halved lanes (NaN where its first
// lane is) and the index that of its first best lane (its first lane where the halved value is NaN); then the
// rest one at a time. One block; without a NaN the index already written (the loop's, the same there) stands.
template <typename T>
__device__ void arg_vector_nan(const T* x, int64_t n, int largest, int64_t* index) {
  int found = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) found |= isnan((float)ld(x + i));
  if (!__syncthreads_or(found) || threadIdx.x) return;
  auto better = [largest](float v, float r) { return largest ? v > r : v < r; };
  auto keep = [&](float a, float b) { return better(b, a) ? b : a; };  // a NaN a stays, a NaN b is dropped
  const int64_t packets = n / 4;
  float value = ld(x);
  int64_t at = 0;
  for (int64_t j = 0; j < packets; j++) {
    float l[4], best = NAN;
    for (int k = 0; k < 4; k++) {
      l[k] = ld(x + 4 * j + k);
      best = largest ? fmaxf(best, l[k]) : fminf(best, l[k]);  // NaN only where every lane is
    }
    if (j && !better(best, value)) continue;
    value = keep(keep(l[0], l[2]), keep(l[1], l[3]));
    int lane = 0;
    if (!isnan(value))
      while (l[lane] != best) lane++;
    at = 4 * j + lane;
  }
  for (int64_t i = packets ? 4 * packets : 1; i < n; i++) {  // without a whole packet: stock's loop
    const float v = ld(x + i);
    if (better(v, value)) value = v, at = i;
  }
  *index = at;
}

}  // namespace along_axis

#define ALONG_AXIS(S, T)                                                                                       \
  extern "C" __global__ void seamless_cumulative_##S(int64_t lanes, const T* x, T* y, int64_t n, int64_t inner,\
                                                     int exclusive, int reverse, int product) { dependent_launch(); \
    along_axis::cumulative(lanes, x, y, n, inner, exclusive, reverse, product);                                  \
  }                                                                                                            \
  extern "C" __global__ void seamless_select_##S(const T* x, T* values, int64_t* indices, int64_t n,           \
                                                 int64_t inner, int64_t k, int largest, int prefer_last) { dependent_launch(); \
    along_axis::select_row(x, values, indices, n, inner, k, largest, prefer_last);                               \
  }                                                                                                            \
  extern "C" __global__ void seamless_select_chunk_##S(const T* x, int64_t* partials, int64_t* indices,          \
                                                       unsigned* counters, int64_t n, int64_t inner, int64_t chunk, \
                                                       int largest, int prefer_last) { dependent_launch();     \
    along_axis::select_chunk(x, partials, indices, counters, n, inner, chunk, largest, prefer_last);             \
  }                                                                                                            \
  extern "C" __global__ void seamless_select_rows16_##S(const T* x, int64_t* indices, int64_t n, int largest,    \
                                                        int prefer_last) { dependent_launch();                  \
    along_axis::select_rows16(x, indices, n, largest, prefer_last);                                              \
  }
FOR_FLOATS(ALONG_AXIS)
#define ARG_VECTOR(S, T)                                                                                       \
  extern "C" __global__ void seamless_arg_vector_nan_##S(const T* x, int64_t n, int largest, int64_t* index) {  \
    dependent_launch();                                                                                        \
    along_axis::arg_vector_nan(x, n, largest, index);                                                            \
  }
FOR_FLOATS(ARG_VECTOR)
#undef ARG_VECTOR
ALONG_AXIS(i32, int32_t)
ALONG_AXIS(i64, int64_t)
#undef ALONG_AXIS
