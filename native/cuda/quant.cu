// MatMulNBits (com.microsoft) on CUDA: y[m, n] = sum_k a[m, k] * (q[n, k] - zp[n, k / block]) * scale[n, k / block]
// with 4- or 8-bit q packed per column in blocks along K (two 4-bit values a byte, low nibble
// first), uint8 zero points (4-bit ones packed two a byte; default 8 or 128). A warp per output
// element, 8 columns per 256-thread block: each lane takes 8 consecutive k at a time (one 32-bit
// word of 4-bit weights, two of 8-bit ones; a block of K holds whole groups of 8, block >= 16),
// dequantizes on the fly and the warp sums its lanes: a GEMV reads each weight once.
#include "common.cuh"

struct NBits {
  int32_t m, n, k, block, bits;
};

#define NBITS_COLUMNS 8  // warps, and output columns, per block

// The warp's dot product of a row of activations with column n of the weights (every lane gets it).
template <typename T>
__device__ float nbits_dot(const T* row, const uint8_t* b, const T* scales, const uint8_t* zp, int n, int lane,
                           const NBits& p) {
  int blocks = (p.k + p.block - 1) / p.block, blob = p.block * p.bits / 8;
  const uint8_t* column = b + (int64_t)n * blocks * blob;
  float acc = 0.0f;
  for (int k0 = lane * 8; k0 < p.k; k0 += 32 * 8) {
    int blk = k0 / p.block, at = k0 % p.block;
    int z = p.bits == 4 ? 8 : 128;
    if (zp) z = p.bits == 4 ? (zp[(int64_t)n * ((blocks + 1) / 2) + blk / 2] >> ((blk & 1) * 4)) & 15
                            : zp[(int64_t)n * blocks + blk];
    const uint8_t* packed = column + (int64_t)blk * blob + at * p.bits / 8;
    uint32_t words[2];
    words[0] = *(const uint32_t*)packed;
    words[1] = p.bits == 8 ? *(const uint32_t*)(packed + 4) : 0;
    int count = p.k - k0 < 8 ? p.k - k0 : 8;  // a last, partial group of K
    float dot = 0.0f, sum = 0.0f;
    for (int j = 0; j < count; j++) {
      int q = p.bits == 4 ? (words[0] >> (4 * j)) & 15 : (words[j >> 2] >> (8 * (j & 3))) & 255;
      float x = ld(row + k0 + j);
      dot += x * (float)q;
      sum += x;
    }
    acc += (dot - (float)z * sum) * ld(scales + (int64_t)n * blocks + blk);
  }
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffff, acc, off);
  return acc;
}

// The common case, 4 bits with K and block_size multiples of 32 (and 16-byte aligned rows): each
// lane takes 32 consecutive k at a time, one 16-byte load of weights and four of the activations,
// so a warp reads 512 bytes of a column per step and most columns in one or a few steps.
template <typename T>
__device__ float nbits4_x32_dot(const T* row, const uint8_t* b, const T* scales, const uint8_t* zp, int n, int lane,
                                const NBits& p) {
  int blocks = (p.k + p.block - 1) / p.block, blob = p.block / 2;  // the last block may be partial
  const uint8_t* column = b + (int64_t)n * blocks * blob;
  float acc = 0.0f;
  for (int k0 = lane * 32; k0 < p.k; k0 += 32 * 32) {
    int blk = k0 / p.block;
    uint4 w = *(const uint4*)(column + (int64_t)blk * blob + (k0 % p.block) / 2);
    float z = zp ? (float)((zp[(int64_t)n * ((blocks + 1) / 2) + blk / 2] >> ((blk & 1) * 4)) & 15) : 8.0f;
    float s = ld(scales + (int64_t)n * blocks + blk);
    const uint32_t* words = (const uint32_t*)&w;
    float dot = 0.0f, sum = 0.0f;
#pragma unroll
    for (int q = 0; q < 4; q++) {
      float x[8];
      load8(row + k0 + 8 * q, x);
#pragma unroll
      for (int j = 0; j < 8; j++) {
        dot += x[j] * (float)((words[q] >> (4 * j)) & 15);
        sum += x[j];
      }
    }
    acc += (dot - z * sum) * s;
  }
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffff, acc, off);
  return acc;
}

template <typename T, bool X32>
__device__ __forceinline__ float column_dot(const T* row, const uint8_t* b, const T* scales, const uint8_t* zp, int n,
                                            int lane, const NBits& p) {
  return X32 ? nbits4_x32_dot(row, b, scales, zp, n, lane, p) : nbits_dot(row, b, scales, zp, n, lane, p);
}

// y = a . W (+ bias): a warp per output element (m, n).
template <typename T, bool X32>
__device__ void matmul_nbits(const T* a, const uint8_t* b, const T* scales, const uint8_t* zp, const T* bias, T* y,
                             NBits p) {
  int col_blocks = (p.n + NBITS_COLUMNS - 1) / NBITS_COLUMNS;
  int m = blockIdx.x / col_blocks, lane = threadIdx.x & 31;
  int n = (blockIdx.x % col_blocks) * NBITS_COLUMNS + (threadIdx.x >> 5);
  if (n >= p.n) return;  // a whole warp: no shuffle is left half-done
  float acc = column_dot<T, X32>(a + (int64_t)m * p.k, b, scales, zp, n, lane, p);
  if (lane == 0) st(y + (int64_t)m * p.n + n, bias ? acc + ld(bias + n) : acc);
}

// y = silu(a . Wg) * (a . Wu), the SwiGLU of two MatMulNBits of one input (plan/fusion.py's
// MatMulNBitsSwiGLU): the warp computes both columns n, rounded once.
template <typename T, bool X32>
__device__ void matmul_nbits_swiglu(const T* a, const uint8_t* bg, const T* sg, const uint8_t* zg, const uint8_t* bu,
                                    const T* su, const uint8_t* zu, T* y, NBits p) {
  int col_blocks = (p.n + NBITS_COLUMNS - 1) / NBITS_COLUMNS;
  int m = blockIdx.x / col_blocks, lane = threadIdx.x & 31;
  int n = (blockIdx.x % col_blocks) * NBITS_COLUMNS + (threadIdx.x >> 5);
  if (n >= p.n) return;
  const T* row = a + (int64_t)m * p.k;
  float g = column_dot<T, X32>(row, bg, sg, zg, n, lane, p), u = column_dot<T, X32>(row, bu, su, zu, n, lane, p);
  if (lane == 0) st(y + (int64_t)m * p.n + n, g / (1.0f + expf(-g)) * u);
}

#define NBITS(S, T)                                                                                            \
  extern "C" __global__ void seamless_matmul_nbits_##S(const T* a, const uint8_t* b, const T* s, const uint8_t* zp,   \
                                                       const T* bias, T* y, NBits p) {                                 \
    matmul_nbits<T, false>(a, b, s, zp, bias, y, p);                                                                   \
  }                                                                                                                    \
  extern "C" __global__ void seamless_matmul_nbits4_x32_##S(const T* a, const uint8_t* b, const T* s,                \
                                                            const uint8_t* zp, const T* bias, T* y, NBits p) {        \
    matmul_nbits<T, true>(a, b, s, zp, bias, y, p);                                                                    \
  }                                                                                                                    \
  extern "C" __global__ void seamless_matmul_nbits_swiglu_##S(const T* a, const uint8_t* bg, const T* sg,            \
                                                              const uint8_t* zg, const uint8_t* bu, const T* su,      \
                                                              const uint8_t* zu, T* y, NBits p) {                     \
    matmul_nbits_swiglu<T, false>(a, bg, sg, zg, bu, su, zu, y, p);                                                    \
  }                                                                                                                    \
  extern "C" __global__ void seamless_matmul_nbits4_x32_swiglu_##S(const T* a, const uint8_t* bg, const T* sg,       \
                                                                   const uint8_t* zg, const uint8_t* bu, const T* su, \
                                                                   const uint8_t* zu, T* y, NBits p) {                \
    matmul_nbits_swiglu<T, true>(a, bg, sg, zg, bu, su, zu, y, p);                                                     \
  }
FOR_FLOATS(NBITS)

// GatherBlockQuantized (com.microsoft), 2-D data of packed 4- or 8-bit values quantized along
// its rows in blocks: y[i, j] = (q[idx[i], j] - zp[idx[i], j / block]) * scale[idx[i], j / block];
// an index out of range gives a row of zeros.
struct GatherQ {
  int64_t rows, width, indices;  // data rows, unpacked row length, number of indices
  int32_t block, bits;
};

template <typename T>
__device__ void gather_block_quantized(const uint8_t* data, const int64_t* idx, const T* scales, const uint8_t* zp,
                                       T* y, GatherQ g) {
  int64_t n = g.indices * g.width, blocks = (g.width + g.block - 1) / g.block;
  int64_t packed = g.width * g.bits / 8;
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n; t += (int64_t)gridDim.x * blockDim.x) {
    int64_t i = t / g.width, j = t % g.width, r = idx[i];
    r = r < 0 ? r + g.rows : r;
    if (r < 0 || r >= g.rows) { st(y + t, 0.0f); continue; }
    int q = g.bits == 4 ? (data[r * packed + j / 2] >> ((j & 1) * 4)) & 15 : data[r * packed + j];
    int64_t blk = j / g.block;
    int z = g.bits == 4 ? 8 : 128;
    if (zp) z = g.bits == 4 ? (zp[r * ((blocks + 1) / 2) + blk / 2] >> ((blk & 1) * 4)) & 15 : zp[r * blocks + blk];
    st(y + t, (float)(q - z) * ld(scales + r * blocks + blk));
  }
}

#define GATHER_BLOCK_QUANTIZED(S, T)                                                                        \
  extern "C" __global__ void seamless_gather_block_quantized_##S(const uint8_t* d, const int64_t* idx, const T* s, \
                                                                 const uint8_t* zp, T* y, GatherQ g) {              \
    gather_block_quantized(d, idx, s, zp, y, g);                                                                    \
  }
FOR_FLOATS(GATHER_BLOCK_QUANTIZED)
