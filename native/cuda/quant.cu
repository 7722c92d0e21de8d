// MatMulNBits (com.microsoft) on CUDA: y[m, n] = sum_k a[m, k] * (q[n, k] - zp[n, k / block]) * scale[n, k / block]
// with 4- or 8-bit q packed per column in blocks along K (two 4-bit values a byte, low nibble
// first), uint8 zero points (4-bit ones packed two a byte; default 8 or 128); and the SwiGLU of two
// of them over one input, y = silu(a . Wg) * (a . Wu) (plan/fusion.py's MatMulNBitsSwiGLU). Weights
// are dequantized on the fly and read once: a GEMV. 256-thread blocks; the generic path gives each
// output column a warp (lanes take 8 consecutive k at a time), the 4-bit path below takes 32.
#include "common.cuh"

struct NBits {
  int32_t m, n, k, block, bits;
  int32_t split;  // 4-bit path: warps per output column, a power of 2 up to 8 (1 on the generic path)
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

// y = a . W (+ bias), or with a second matrix silu(a . W) * (a . W2): a warp per output element (m, n).
template <typename T>
__device__ void matmul_nbits(const T* a, const uint8_t* b, const T* scales, const uint8_t* zp, const uint8_t* b2,
                             const T* scales2, const uint8_t* zp2, const T* bias, T* y, NBits p) {
  int col_blocks = (p.n + NBITS_COLUMNS - 1) / NBITS_COLUMNS;
  int m = blockIdx.x / col_blocks, lane = threadIdx.x & 31;
  int n = (blockIdx.x % col_blocks) * NBITS_COLUMNS + (threadIdx.x >> 5);
  if (n >= p.n) return;  // a whole warp: no shuffle is left half-done
  const T* row = a + (int64_t)m * p.k;
  float acc = nbits_dot(row, b, scales, zp, n, lane, p);
  if (b2) acc = acc / (1.0f + expf(-acc)) * nbits_dot(row, b2, scales2, zp2, n, lane, p);
  if (lane == 0) st(y + (int64_t)m * p.n + n, bias ? acc + ld(bias + n) : acc);
}

// The common case, 4 bits with K and block_size multiples of 32 (and 16-byte aligned rows): lanes
// take chunks of 32 consecutive k (one 16-byte load of weights per matrix, four of activations
// shared by the W matrices), chunk c by lane c % 32 of warp (c / 32) % split of the column's
// warps; a long K is so spread over up to 8 warps, summed in a fixed order.
template <typename T, int W>
__device__ void matmul_nbits4_x32(const T* a, const uint8_t* b0, const T* s0, const uint8_t* z0, const uint8_t* b1,
                                  const T* s1, const uint8_t* z1, const T* bias, T* y, NBits p) {
  __shared__ float part[NBITS_COLUMNS][W];
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, cols = NBITS_COLUMNS / p.split;
  int col_blocks = (p.n + cols - 1) / cols;
  int m = blockIdx.x / col_blocks, n = (blockIdx.x % col_blocks) * cols + warp / p.split, slice = warp % p.split;
  const uint8_t* b[2] = {b0, b1};
  const T* scales[2] = {s0, s1};
  const uint8_t* zp[2] = {z0, z1};
  float acc[W] = {};
  int blocks = (p.k + p.block - 1) / p.block, blob = p.block / 2;  // the last block may be partial
  // The weights are constants: this lane's go to L2 before waiting for the kernel before (with a
  // dependent launch that overlaps its tail), so the loop below finds them there.
  for (int k0 = (lane + 32 * slice) * 32; n < p.n && k0 < p.k; k0 += 32 * 32 * p.split)
    for (int w = 0; w < W; w++) {
      int blk = k0 / p.block;
      prefetch_l2(b[w] + ((int64_t)n * blocks + blk) * blob + (k0 % p.block) / 2);
      prefetch_l2(scales[w] + (int64_t)n * blocks + blk);
    }
  wait_for_previous();
  if (n < p.n) {
    const T* row = a + (int64_t)m * p.k;
    for (int k0 = (lane + 32 * slice) * 32; k0 < p.k; k0 += 32 * 32 * p.split) {
      int blk = k0 / p.block;
      float x[32], sum = 0.0f;
#pragma unroll
      for (int q = 0; q < 4; q++) load8(row + k0 + 8 * q, x + 8 * q);
#pragma unroll
      for (int j = 0; j < 32; j++) sum += x[j];
#pragma unroll
      for (int w = 0; w < W; w++) {
        uint4 packed = *(const uint4*)(b[w] + ((int64_t)n * blocks + blk) * blob + (k0 % p.block) / 2);
        float z = zp[w] ? (float)((zp[w][(int64_t)n * ((blocks + 1) / 2) + blk / 2] >> ((blk & 1) * 4)) & 15) : 8.0f;
        const uint32_t* words = (const uint32_t*)&packed;
        float dot = 0.0f;
#pragma unroll
        for (int j = 0; j < 32; j++) dot += x[j] * (float)((words[j / 8] >> (4 * (j % 8))) & 15);
        acc[w] += (dot - z * sum) * ld(scales[w] + (int64_t)n * blocks + blk);
      }
    }
#pragma unroll
    for (int w = 0; w < W; w++)
      for (int off = 16; off > 0; off >>= 1) acc[w] += __shfl_xor_sync(0xffffffff, acc[w], off);
  }
  if (p.split > 1) {  // the column's warps add up their parts, in warp order
    if (lane == 0)
      for (int w = 0; w < W; w++) part[warp][w] = acc[w];
    __syncthreads();
    if (slice) return;
    for (int w = 0; w < W; w++) {
      acc[w] = part[warp][w];
      for (int r = 1; r < p.split; r++) acc[w] += part[warp + r][w];
    }
  }
  if (lane || n >= p.n) return;
  float v = W == 2 ? acc[0] / (1.0f + expf(-acc[0])) * acc[W - 1] : bias ? acc[0] + ld(bias + n) : acc[0];
  st(y + (int64_t)m * p.n + n, v);
}

#define NBITS(S, T)                                                                                                   \
  extern "C" __global__ void seamless_matmul_nbits_##S(const T* a, const uint8_t* b, const T* s, const uint8_t* zp,   \
                                                       const T* bias, T* y, NBits p) { dependent_launch();            \
    matmul_nbits<T>(a, b, s, zp, nullptr, nullptr, nullptr, bias, y, p);                                              \
  }                                                                                                                   \
  extern "C" __global__ void seamless_matmul_nbits4_x32_##S(const T* a, const uint8_t* b, const T* s,                 \
                                                            const uint8_t* zp, const T* bias, T* y, NBits p) { let_next_launch(); \
    matmul_nbits4_x32<T, 1>(a, b, s, zp, nullptr, nullptr, nullptr, bias, y, p);                                      \
  }                                                                                                                   \
  extern "C" __global__ void seamless_matmul_nbits_swiglu_##S(const T* a, const uint8_t* bg, const T* sg,             \
                                                              const uint8_t* zg, const uint8_t* bu, const T* su,      \
                                                              const uint8_t* zu, T* y, NBits p) { dependent_launch(); \
    matmul_nbits<T>(a, bg, sg, zg, bu, su, zu, nullptr, y, p);                                                        \
  }                                                                                                                   \
  extern "C" __global__ void seamless_matmul_nbits4_x32_swiglu_##S(const T* a, const uint8_t* bg, const T* sg,        \
                                                                   const uint8_t* zg, const uint8_t* bu, const T* su, \
                                                                   const uint8_t* zu, T* y, NBits p) { let_next_launch(); \
    matmul_nbits4_x32<T, 2>(a, bg, sg, zg, bu, su, zu, nullptr, y, p);                                                \
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
                                                                 const uint8_t* zp, T* y, GatherQ g) { dependent_launch(); \
    gather_block_quantized(d, idx, s, zp, y, g);                                                                    \
  }
FOR_FLOATS(GATHER_BLOCK_QUANTIZED)
