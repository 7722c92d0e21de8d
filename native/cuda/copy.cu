// Strided copies: y[dst_offset + sum c_d * dst_strides[d]] = x[src_offset + sum c_d * src_strides[d]]
// over the box dims[0..rank). One kernel serves Transpose, Slice, Expand, Concat and Split,
// for any element type of 1, 2, 4 or 8 bytes.
#include <stdint.h>

struct Strided {
  int64_t dims[8];
  int64_t src_strides[8];
  int64_t dst_strides[8];
  int64_t src_offset, dst_offset;
  int32_t rank;
};

template <typename T>
__device__ void strided_copy(int64_t n, const T* x, T* y, const Strided& s) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t rest = i, src = s.src_offset, dst = s.dst_offset;
    for (int d = s.rank - 1; d >= 0; d--) {
      int64_t c = rest % s.dims[d];
      rest /= s.dims[d];
      src += c * s.src_strides[d];
      dst += c * s.dst_strides[d];
    }
    y[dst] = x[src];
  }
}

extern "C" __global__ void seamless_copy_1(int64_t n, const uint8_t* x, uint8_t* y, Strided s) { dependent_launch(); strided_copy(n, x, y, s); }
extern "C" __global__ void seamless_copy_2(int64_t n, const uint16_t* x, uint16_t* y, Strided s) { dependent_launch(); strided_copy(n, x, y, s); }
extern "C" __global__ void seamless_copy_4(int64_t n, const uint32_t* x, uint32_t* y, Strided s) { dependent_launch(); strided_copy(n, x, y, s); }
extern "C" __global__ void seamless_copy_8(int64_t n, const uint64_t* x, uint64_t* y, Strided s) { dependent_launch(); strided_copy(n, x, y, s); }

// Gather along an axis: x viewed as [outer, n, inner], indices (int64, negative from the end)
// as [m]; y[o, j, i] = x[o, idx[j], i]. An index outside [-n, n) gives zeros: x is never read outside
// itself (the host checks indices it knows; GPU values would need a synchronisation).
template <typename T>
__device__ void gather(int64_t total, const T* x, const int64_t* idx, T* y, int64_t n, int64_t m, int64_t inner) {
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
    int64_t i = t % inner, j = (t / inner) % m, o = t / (inner * m);
    int64_t k = idx[j];
    k = k < 0 ? k + n : k;
    y[t] = k >= 0 && k < n ? x[(o * n + k) * inner + i] : T(0);
  }
}

extern "C" __global__ void seamless_gather_1(int64_t total, const uint8_t* x, const int64_t* idx, uint8_t* y, int64_t n,
                                             int64_t m, int64_t inner) { dependent_launch(); gather(total, x, idx, y, n, m, inner); }
extern "C" __global__ void seamless_gather_2(int64_t total, const uint16_t* x, const int64_t* idx, uint16_t* y, int64_t n,
                                             int64_t m, int64_t inner) { dependent_launch(); gather(total, x, idx, y, n, m, inner); }
extern "C" __global__ void seamless_gather_4(int64_t total, const uint32_t* x, const int64_t* idx, uint32_t* y, int64_t n,
                                             int64_t m, int64_t inner) { dependent_launch(); gather(total, x, idx, y, n, m, inner); }
extern "C" __global__ void seamless_gather_8(int64_t total, const uint64_t* x, const int64_t* idx, uint64_t* y, int64_t n,
                                             int64_t m, int64_t inner) { dependent_launch(); gather(total, x, idx, y, n, m, inner); }

// Staging of a captured segment (capture=auto): one block row (blockIdx.y) per table entry, each
// copying `rows` rows of `width` bytes from src (rows src_pitch apart) to dst (rows dst_pitch apart),
// `lead` bytes into each dst row, and zeroing the rest of each dst row (before and after). The table
// is rewritten before every launch, so a CUDA graph serves inputs and outputs at new addresses and
// KV lengths padded to the captured capacity (at the end, or with lead, at the start).
struct StageCopy {
  const uint8_t* src;
  uint8_t* dst;
  int64_t rows, width, src_pitch, dst_pitch, lead;
};

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
