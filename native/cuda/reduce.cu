// Reductions over any set of axes (ReduceSum/Mean/Max/Min/Prod/SumSquare/R_L1/R_L2/LogSum/LogSumExp).
// The host splits the input's axes into kept ones (which index the output) and reduced ones;
// each output element walks its reduced elements. Floats accumulate in float32 (one block per
// output when there are many elements to reduce); int32/int64 in their own type.
#include "common.cuh"

struct Reduce {
  int64_t kept_dims[8], kept_strides[8];      // output dims and the input stride of each
  int64_t reduced_dims[8], reduced_strides[8];
  int64_t count;                              // elements reduced into each output
  int32_t kept_rank, reduced_rank;
};

enum ReduceOp { R_SUM = 0, R_MEAN = 1, R_MAX = 2, R_MIN = 3, R_PROD = 4, R_SUM_SQUARE = 5, R_L1 = 6, R_L2 = 7, R_LOG_SUM = 8,
                R_LOG_SUM_EXP = 9 };

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
    case R_MAX: return v > acc || v != v ? v : acc;  // NaN wins, as ORT
    case R_MIN: return v < acc || v != v ? v : acc;
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
    case R_MEAN: return acc / count;
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

// All of this thread's share (start, start + step, ...) of one output's elements, combined.
template <typename T>
__device__ float partial(int op, const T* base, const Reduce& r, int64_t start, int64_t step, float shift) {
  int red_op = op == R_MAX || op == R_MIN || op == R_PROD ? op : R_SUM;
  float acc = identity_of<float>(red_op);
  for (int64_t j = start; j < r.count; j += step)
    acc = combine(red_op, acc, mapped(op, ld(base + offset_of(j, r.reduced_dims, r.reduced_strides, r.reduced_rank)), shift));
  return acc;
}

// One block per output element.
template <typename T>
__device__ void reduce_block(int op, const T* x, T* y, Reduce r) {
  __shared__ float shared[32];
  const T* base = x + offset_of(blockIdx.x, r.kept_dims, r.kept_strides, r.kept_rank);
  float shift = 0.0f;
  if (op == R_LOG_SUM_EXP) {  // the max first, for exp's range
    shift = block_combine(R_MAX, partial(R_MAX, base, r, threadIdx.x, blockDim.x, 0.0f), shared);
    if (isinf(shift)) shift = 0.0f;
  }
  int red_op = op == R_MAX || op == R_MIN || op == R_PROD ? op : R_SUM;
  float acc = block_combine(red_op, partial(op, base, r, threadIdx.x, blockDim.x, shift), shared);
  if (threadIdx.x == 0) st(y + blockIdx.x, finish(op, acc, r.count, shift));
}

// One thread per output element.
template <typename T>
__device__ void reduce_thread(int op, int64_t n, const T* x, T* y, Reduce r) {
  GRID_LOOP(i, n) {
    const T* base = x + offset_of(i, r.kept_dims, r.kept_strides, r.kept_rank);
    float shift = 0.0f;
    if (op == R_LOG_SUM_EXP) {
      shift = partial(R_MAX, base, r, 0, 1, 0.0f);
      if (isinf(shift)) shift = 0.0f;
    }
    st(y + i, finish(op, partial(op, base, r, 0, 1, shift), r.count, shift));
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

// int32/int64: Sum, Mean (truncating), Max, Min, Prod, SumSquare, R_L1, in the type itself (wrapping:
// any order of the partial results gives the same value).
template <typename I>
__device__ I partial_int(int op, const I* base, const Reduce& r, int64_t start, int64_t step, I lo, I hi) {
  int red_op = op == R_MAX || op == R_MIN || op == R_PROD ? op : R_SUM;
  I acc = (I)identity_int(red_op, lo, hi);
  for (int64_t j = start; j < r.count; j += step) {
    I v = base[offset_of(j, r.reduced_dims, r.reduced_strides, r.reduced_rank)];
    acc = combine<I>(red_op, acc, op == R_SUM_SQUARE ? v * v : op == R_L1 && v < 0 ? -v : v);
  }
  return acc;
}

template <typename I>
__device__ void reduce_int_thread(int op, int64_t n, const I* x, I* y, Reduce r, I lo, I hi) {
  GRID_LOOP(i, n) {
    I acc = partial_int(op, x + offset_of(i, r.kept_dims, r.kept_strides, r.kept_rank), r, 0, 1, lo, hi);
    y[i] = op == R_MEAN && r.count ? acc / (I)r.count : acc;
  }
}

// One block per output element (a mask's sum over a long sequence: one thread alone took ~16 us).
template <typename I>
__device__ void reduce_int_block(int op, const I* x, I* y, Reduce r, I lo, I hi) {
  __shared__ I part[32];
  int red_op = op == R_MAX || op == R_MIN || op == R_PROD ? op : R_SUM;
  const I* base = x + offset_of(blockIdx.x, r.kept_dims, r.kept_strides, r.kept_rank);
  I acc = partial_int(op, base, r, threadIdx.x, blockDim.x, lo, hi);
  for (int off = 16; off > 0; off >>= 1) acc = combine<I>(red_op, acc, __shfl_xor_sync(0xffffffff, acc, off));
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x) return;
  for (int w = 1; w < (int)(blockDim.x + 31) >> 5; w++) acc = combine<I>(red_op, acc, part[w]);
  y[blockIdx.x] = op == R_MEAN && r.count ? acc / (I)r.count : acc;
}

#define REDUCE_INT(S, I, LO, HI)                                                                                  \
  extern "C" __global__ void seamless_reduce_thread_##S(int op, int64_t n, const I* x, I* y, Reduce r) {         \
    dependent_launch();                                                                                           \
    reduce_int_thread<I>(op, n, x, y, r, LO, HI);                                                                 \
  }                                                                                                               \
  extern "C" __global__ void seamless_reduce_block_##S(int op, const I* x, I* y, Reduce r) {                     \
    dependent_launch();                                                                                           \
    reduce_int_block<I>(op, x, y, r, LO, HI);                                                                     \
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
