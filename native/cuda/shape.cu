// Strided copies: y[dst_offset + sum c_d * dst_strides[d]] = x[src_offset + sum c_d * src_strides[d]]
// over the box dims[0..rank). One kernel serves Transpose, Slice, Expand, Concat and Split,
// for any element type of 1, 2, 4 or 8 bytes, copied 16 bytes a thread where the box's rows allow it.
#include <stdint.h>

#include "common.cuh"

// I: the index type, int32_t where the host found every index of the copy below 2^30 (runtime/cuda.py
// strided_copy): 64-bit divisions are emulated, many instructions each, and bound small-element copies.
template <typename T, typename I>
__device__ void strided_copy(int64_t n, const T* x, T* y, const Strided& s) {
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < (I)n; i += (I)gridDim.x * blockDim.x) {
    I rest = i, src = (I)s.src_offset, dst = (I)s.dst_offset;
    for (int d = s.rank - 1; d >= 0; d--) {
      const I c = rest % (I)s.dims[d];
      rest /= (I)s.dims[d];
      src += c * (I)s.src_strides[d];
      dst += c * (I)s.dst_strides[d];
    }
    y[dst] = x[src];
  }
}

// BYTES a thread's element: the value's own size, or 16 where whole 16-byte units line up (runtime/cuda.py)
#define COPY_KERNEL(BYTES, T)                                                                                  \
  extern "C" __global__ void seamless_copy_##BYTES(int64_t n, const T* x, T* y, Strided s, int narrow) {       \
    dependent_launch();                                                                                        \
    if (narrow) strided_copy<T, int32_t>(n, x, y, s);                                                          \
    else strided_copy<T, int64_t>(n, x, y, s);                                                                 \
  }
COPY_KERNEL(1, uint8_t)
COPY_KERNEL(2, uint16_t)
COPY_KERNEL(4, uint32_t)
COPY_KERNEL(8, uint64_t)
COPY_KERNEL(16, uint4)
#undef COPY_KERNEL

// Gather along an axis: x viewed as [outer, n, inner], indices (int64, negative from the end)
// as [m]; y[o, j, i] = x[o, idx[j], i]. An index outside [-n, n) gives zeros and is reported (the host
// checks indices it holds itself).
template <typename T>
__device__ void gather(int64_t total, const T* x, const int64_t* idx, T* y, int64_t n, int64_t m, int64_t inner,
                       const GpuCheck& check) {
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
    int64_t i = t % inner, j = (t / inner) % m, o = t / (inner * m);
    int64_t k = idx[j];
    k = k < 0 ? k + n : k;
    bool inside = k >= 0 && k < n;
    if (!inside && t < m * inner && i == 0) report_bad(check, idx[j]);  // once per index
    y[t] = inside ? x[(o * n + k) * inner + i] : T(0);
  }
}

#define GATHER(S, T)                                                                                               \
  extern "C" __global__ void seamless_gather_##S(int64_t total, const T* x, const int64_t* idx, T* y, int64_t n,    \
                                                 int64_t m, int64_t inner, GpuCheck check) {                       \
    dependent_launch();                                                                                            \
    gather(total, x, idx, y, n, m, inner, check);                                                                  \
  }
GATHER(1, uint8_t)
GATHER(2, uint16_t)
GATHER(4, uint32_t)
GATHER(8, uint64_t)
#undef GATHER

// Staging of a captured segment (capture=auto): one block row (blockIdx.y) per table entry, each
// copying `rows` rows of `width` bytes from src (rows src_pitch apart) to dst (rows dst_pitch apart),
// `lead` bytes into each dst row, and zeroing the rest of each dst row (before and after). The table
// is rewritten before every launch, so a CUDA graph serves inputs and outputs at new addresses and
// KV lengths padded to the captured capacity (at the end, or with lead, at the start).

template <typename U>
__device__ void stage_rows(const StageCopy& c) {
  int64_t w = c.width / sizeof(U), dp = c.dst_pitch / sizeof(U), sp = c.src_pitch / sizeof(U), n = c.rows * dp;
  int64_t lead = c.lead / sizeof(U);
  const U* src = (const U*)c.src;
  U* dst = (U*)c.dst;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i / dp, j = i % dp - lead;
    if (j >= 0 && j < w) {
      dst[i] = src[r * sp + j];
    } else {
      dst[i] = U{};
    }
  }
}

extern "C" __global__ void seamless_stage(const StageCopy* table) { dependent_launch();
  StageCopy c = table[blockIdx.y];
  if ((((uintptr_t)c.src | (uintptr_t)c.dst | c.width | c.src_pitch | c.dst_pitch | c.lead) & 15) == 0) {
    stage_rows<uint4>(c);
  } else {
    stage_rows<uint8_t>(c);
  }
}

// Indexing ops: Tile (ranks the strided copy cannot view), GatherElements, GatherND, ScatterND,
// ScatterElements, Trilu (CumSum and TopK / ArgMax / ArgMin: reduction.cu).
// Data movement works on raw element bits by size (1/2/4/8 bytes), so it serves every element
// type; arithmetic (scatter reductions) is per type: float types compute in
// float32 and round once, int32/int64 in their own type. Shapes travel as args.h structs of up to
// 8 dims. An index out of
// range reads a zero or is skipped instead of touching memory outside the tensor, and is reported
// (args.h GpuCheck: the run fails as stock's does).

namespace indexing {

using typed::load;
using typed::store;
using typed::is_nan;

__device__ __forceinline__ int64_t wrap_index(int64_t i, int64_t dim) { return i < 0 ? i + dim : i; }

// ---- Tile beyond what a strided copy can view: y[c] = x[c % in_dims], per axis

template <typename T>
__device__ void tile(int64_t n, const T* x, T* y, const TileShape& s) {
  GRID_LOOP(t, n) {
    int64_t rest = t, src = 0, in_stride = 1;
    for (int d = s.rank - 1; d >= 0; d--) {
      src += (rest % s.out_dims[d]) % s.in_dims[d] * in_stride;
      rest /= s.out_dims[d];
      in_stride *= s.in_dims[d];
    }
    y[t] = x[src];
  }
}

// ---- GatherElements / ScatterElements: the index tensor has the rank of the data; element c of it
// addresses data[c with c[axis] replaced by the index].

// Data offset addressed by element t of the index tensor; -1 when the index is out of range.
template <typename I>
__device__ __forceinline__ int64_t axis_index_offset(int64_t t, const I* idx, const AxisIndex& s) {
  int64_t rest = t, offset = 0;
  for (int d = s.rank - 1; d >= 0; d--) {
    int64_t c = rest % s.dims[d];
    rest /= s.dims[d];
    if (d == s.axis) {
      c = wrap_index((int64_t)idx[t], s.axis_dim);
      if (c < 0 || c >= s.axis_dim) {
        report_bad(s.check, idx[t]);
        return -1;
      }
    }
    offset += c * s.data_strides[d];
  }
  return offset;
}

template <typename T, typename I>
__device__ void gather_elements(int64_t n, const T* x, const I* idx, T* y, const AxisIndex& s) {
  GRID_LOOP(t, n) {
    int64_t src = axis_index_offset(t, idx, s);
    y[t] = src < 0 ? T(0) : x[src];
  }
}

// ---- GatherND / ScatterND: each index tuple (k values) addresses a slice of `slice` contiguous elements
// in data; for GatherND with batch_dims, tuple g belongs to batch g / per_batch.

// Data offset of element t of the gathered / scattered slices; -1 when an index is out of range.
__device__ __forceinline__ int64_t nd_offset(int64_t t, const int64_t* idx, const NdIndex& s) {
  int64_t g = t / s.slice;
  int64_t offset = g / s.per_batch * s.batch_stride + t % s.slice;
  const int64_t* tuple = idx + g * s.k;
  for (int j = 0; j < s.k; j++) {
    int64_t c = wrap_index(tuple[j], s.dims[j]);
    if (c < 0 || c >= s.dims[j]) {
      if (t % s.slice == 0) report_bad(s.check, tuple[j]);  // once per tuple
      return -1;
    }
    offset += c * s.strides[j];
  }
  return offset;
}

template <typename T>
__device__ void gather_nd(int64_t n, const T* x, const int64_t* idx, T* y, const NdIndex& s) {
  GRID_LOOP(t, n) {
    int64_t src = nd_offset(t, idx, s);
    y[t] = src < 0 ? T(0) : x[src];
  }
}

// ---- scatter reductions: y[offset] = y[offset] (op) update, atomically, since several updates may
// address one element (the order among them is open: float add/mul may round differently than ORT's
// sequential loop).

template <typename A>
__device__ __forceinline__ A reduce(int op, A a, A b) {
  switch (op) {
    case REDUCE_ADD: return a + b;
    case REDUCE_MUL: return a * b;
    case REDUCE_MAX: return a > b ? a : b;
    default: return a < b ? a : b;
  }
}

template <int Size> struct Bits;  // the unsigned type atomicCAS swaps for an element of Size bytes
template <> struct Bits<2> { using type = unsigned short; };
template <> struct Bits<4> { using type = unsigned int; };
template <> struct Bits<8> { using type = unsigned long long; };

template <typename T>
__device__ void atomic_reduce(T* p, const T* update, int op) {
  using U = typename Bits<sizeof(T)>::type;
  U* word = reinterpret_cast<U*>(p);
  U seen = *word, expected;
  do {
    expected = seen;
    T current, next;
    memcpy(&current, &expected, sizeof(T));
    store(&next, reduce(op, load(&current), load(update)));
    U bits;
    memcpy(&bits, &next, sizeof(T));
    seen = atomicCAS(word, expected, bits);
  } while (seen != expected);
}

template <typename T>
__device__ void scatter_nd(int64_t n, const T* updates, const int64_t* idx, T* y, const NdIndex& s) {
  GRID_LOOP(t, n) {
    int64_t dst = nd_offset(t, idx, s);
    if (dst >= 0) y[dst] = updates[t];
  }
}

template <typename T>
__device__ void scatter_nd_reduce(int64_t n, const T* updates, const int64_t* idx, T* y, const NdIndex& s, int op) {
  GRID_LOOP(t, n) {
    int64_t dst = nd_offset(t, idx, s);
    if (dst >= 0) atomic_reduce(y + dst, updates + t, op);
  }
}

template <typename T, typename I>
__device__ void scatter_elements(int64_t n, const T* updates, const I* idx, T* y, const AxisIndex& s) {
  GRID_LOOP(t, n) {
    int64_t dst = axis_index_offset(t, idx, s);
    if (dst >= 0) y[dst] = updates[t];
  }
}

template <typename T, typename I>
__device__ void scatter_elements_reduce(int64_t n, const T* updates, const I* idx, T* y, const AxisIndex& s, int op) {
  GRID_LOOP(t, n) {
    int64_t dst = axis_index_offset(t, idx, s);
    if (dst >= 0) atomic_reduce(y + dst, updates + t, op);
  }
}

// ---- Trilu over the last two axes [rows, cols]: keep element (i, j) when j - i >= k (upper) or
// j - i <= k (lower), else zero (all-zero bits are zero in every type).
template <typename T>
__device__ void trilu(int64_t n, const T* x, T* y, int64_t rows, int64_t cols, int64_t k, int upper) {
  GRID_LOOP(t, n) {
    int64_t j = t % cols, i = t / cols % rows;
    bool keep = upper ? j - i >= k : j - i <= k;
    y[t] = keep ? x[t] : T(0);
  }
}

}  // namespace indexing


// ---- the kernels (helpers qualified: every native/cuda/*.cu shares one translation unit)
// data movement by element size (raw bits), arithmetic per type
#define INDEXING_FOR_SIZES(M) M(1, uint8_t) M(2, uint16_t) M(4, uint32_t) M(8, uint64_t)
#define INDEXING_FOR_NUMBERS(M) FOR_FLOATS(M) M(i32, int32_t) M(i64, int64_t)

#define INDEXING_MOVE(S, T)                                                                                    \
  extern "C" __global__ void seamless_tile_##S(int64_t n, const T* x, T* y, TileShape s) { dependent_launch(); \
    indexing::tile(n, x, y, s);                                                                                \
  }                                                                                                            \
  extern "C" __global__ void seamless_gather_elements_##S##_i32(int64_t n, const T* x, const int32_t* idx, T* y, \
                                                                AxisIndex s) { dependent_launch();   \
    indexing::gather_elements(n, x, idx, y, s);                                                                \
  }                                                                                                            \
  extern "C" __global__ void seamless_gather_elements_##S##_i64(int64_t n, const T* x, const int64_t* idx, T* y, \
                                                                AxisIndex s) { dependent_launch();   \
    indexing::gather_elements(n, x, idx, y, s);                                                                \
  }                                                                                                            \
  extern "C" __global__ void seamless_gather_nd_##S(int64_t n, const T* x, const int64_t* idx, T* y,           \
                                                    NdIndex s) { dependent_launch();                 \
    indexing::gather_nd(n, x, idx, y, s);                                                                      \
  }                                                                                                            \
  extern "C" __global__ void seamless_scatter_nd_##S(int64_t n, const T* updates, const int64_t* idx, T* y,    \
                                                     NdIndex s) { dependent_launch();                \
    indexing::scatter_nd(n, updates, idx, y, s);                                                               \
  }                                                                                                            \
  extern "C" __global__ void seamless_scatter_elements_##S##_i32(int64_t n, const T* updates, const int32_t* idx, \
                                                                 T* y, AxisIndex s) { dependent_launch(); \
    indexing::scatter_elements(n, updates, idx, y, s);                                                         \
  }                                                                                                            \
  extern "C" __global__ void seamless_scatter_elements_##S##_i64(int64_t n, const T* updates, const int64_t* idx, \
                                                                 T* y, AxisIndex s) { dependent_launch(); \
    indexing::scatter_elements(n, updates, idx, y, s);                                                         \
  }                                                                                                            \
  extern "C" __global__ void seamless_trilu_##S(int64_t n, const T* x, T* y, int64_t rows, int64_t cols,       \
                                                int64_t k, int upper) { dependent_launch();                    \
    indexing::trilu(n, x, y, rows, cols, k, upper);                                                            \
  }
INDEXING_FOR_SIZES(INDEXING_MOVE)
#undef INDEXING_MOVE

#define INDEXING_ARITH(S, T)                                                                                   \
  extern "C" __global__ void seamless_scatter_nd_reduce_##S(int64_t n, const T* updates, const int64_t* idx,   \
                                                            T* y, NdIndex s, int op) { dependent_launch(); \
    indexing::scatter_nd_reduce(n, updates, idx, y, s, op);                                                    \
  }                                                                                                            \
  extern "C" __global__ void seamless_scatter_elements_reduce_##S##_i32(                                       \
      int64_t n, const T* updates, const int32_t* idx, T* y, AxisIndex s, int op) { dependent_launch(); \
    indexing::scatter_elements_reduce(n, updates, idx, y, s, op);                                              \
  }                                                                                                            \
  extern "C" __global__ void seamless_scatter_elements_reduce_##S##_i64(                                       \
      int64_t n, const T* updates, const int64_t* idx, T* y, AxisIndex s, int op) { dependent_launch(); \
    indexing::scatter_elements_reduce(n, updates, idx, y, s, op);                                              \
  }
INDEXING_FOR_NUMBERS(INDEXING_ARITH)
#undef INDEXING_ARITH
#undef INDEXING_FOR_SIZES
#undef INDEXING_FOR_NUMBERS

// Pad: constant, reflect, edge and wrap, on raw element bits by size (any element type).
namespace pad {


// Negative pads crop first (as ORT): along axis d the cropped input is x[lo[d], lo[d] + len[d]), and
// output coordinate o maps to r = o - shift[d] in it (shift = the positive begin pad); r outside
// [0, len) is padding, filled by `mode`.

// `value` carries the constant's bit pattern in its low bytes.
template <typename T>
__device__ void pad(int64_t n, const T* x, T* y, int64_t value, PadGeometry g) {
  GRID_LOOP(i, n) {
    int64_t rest = i, src = 0;
    bool fill = false;
    for (int d = g.rank - 1; d >= 0; d--) {
      const int64_t len = g.len[d];
      int64_t r = rest % g.out_dims[d] - g.shift[d];
      rest /= g.out_dims[d];
      if (r < 0 || r >= len) {
        if (g.mode == PAD_CONSTANT) {
          fill = true;
          break;
        } else if (g.mode == PAD_EDGE) {
          r = r < 0 ? 0 : len - 1;
        } else if (g.mode == PAD_WRAP) {
          r = ((r % len) + len) % len;
        } else {  // reflect (mirror without repeating the edge), any number of bounces; one element repeats
          const int64_t period = 2 * (len - 1);
          if (period == 0) {
            r = 0;
          } else {
            r = ((r % period) + period) % period;
            if (r >= len) r = period - r;
          }
        }
      }
      src += (g.lo[d] + r) * g.in_strides[d];
    }
    y[i] = fill ? (T)value : x[src];
  }
}

}  // namespace pad

// by element size: any element type
#define PAD_KERNELS(B, U)                                                                                              \
  extern "C" __global__ void seamless_pad_##B(int64_t n, const U* x, U* y, int64_t value, PadGeometry g) { dependent_launch(); \
    pad::pad(n, x, y, value, g);                                                                                   \
  }
PAD_KERNELS(1, uint8_t)
PAD_KERNELS(2, uint16_t)
PAD_KERNELS(4, uint32_t)
PAD_KERNELS(8, uint64_t)
#undef PAD_KERNELS
