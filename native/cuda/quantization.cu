// MatMulNBits (com.microsoft) on CUDA: y[m, n] = sum_k a[m, k] * (q[n, k] - zp[n, k / block]) * scale[n, k / block]
// with 4- or 8-bit q packed per column in blocks along K (two 4-bit values a byte, low nibble
// first), uint8 zero points (4-bit ones packed two a byte; default 8 or 128); and the SwiGLU of two
// of them over one input, y = silu(a . Wg) * (a . Wu) (plan/fusion.py's MatMulNBitsSwiGLU). Weights
// are dequantized on the fly and read once: a GEMV. 256-thread blocks; the generic path gives each
// output column a warp (lanes take 8 consecutive k at a time), the 4-bit path below takes 32, and for
// many float16 columns (an LM head) a 4-bit path on tensor cores takes 8 columns a warp.
#include "common.cuh"

// The zero point of row (or column) r's block blk: uint8, 4-bit ones packed two a byte (low nibble first);
// without them the middle of the range (8, or 128 for 8 bits).
__device__ __forceinline__ int zero_point(const uint8_t* zp, int64_t r, int64_t blk, int64_t blocks, int bits) {
  if (!zp) return bits == 4 ? 8 : 128;
  return bits == 4 ? (zp[r * ((blocks + 1) / 2) + blk / 2] >> ((blk & 1) * 4)) & 15 : zp[r * blocks + blk];
}

// The warp's dot product of a row of activations with column n of the weights (every lane gets it).
template <typename T>
__device__ float nbits_dot(const T* row, const uint8_t* b, const T* scales, const uint8_t* zp, int n, int lane,
                           const NBits& p) {
  int blocks = (p.k + p.block - 1) / p.block, blob = p.block * p.bits / 8;
  const uint8_t* column = b + (int64_t)n * blocks * blob;
  float acc = 0.0f;
  for (int k0 = lane * 8; k0 < p.k; k0 += 32 * 8) {
    int blk = k0 / p.block, at = k0 % p.block;
    int z = zero_point(zp, n, blk, blocks, p.bits);
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
// The 4-bit values become floats without a conversion instruction (common.cuh nibble_dot8; the SwiGLU kernels were
// bound by the 32 conversions a pass per matrix). On the H200 (a replayed step, in place):
// Llama-3.2-1B-shaped int4 gate|up 216.5 -> 191.2 us, the whole step 0.637 -> 0.608 ms of GPU time, the
// Qwen2.5-0.5B-shaped one 0.425 -> 0.413 (docs/benchmarks/gpu.md, session 42). More passes in flight (the next
// ones' loads before this one's sums, as matmul.cu's linear) was slower on both: fewer blocks fit.
// The _norm kernels take the row RMS-normalised by each block first (args.h RowNorm).
template <typename T, int W, bool NORM>  // NORM: the activations are `norm`'s rows (`a` unused)
__device__ void matmul_nbits4_x32(const T* a, const uint8_t* b0, const T* s0, const uint8_t* z0, const uint8_t* b1,
                                  const T* s1, const uint8_t* z1, const T* bias, T* y, NBits p, RowNorm norm) {
  __shared__ float part[NBITS_COLUMNS][W];
  // block_size and split are powers of 2: shifts and masks, not divisions (the set-up is a good part of a
  // warp's instructions when it makes one pass)
  int block_shift = __ffs(p.block) - 1, split_shift = __ffs(p.split) - 1;
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, cols = NBITS_COLUMNS >> split_shift;
  int col_blocks = (p.n + cols - 1) / cols;
  int m = blockIdx.x / col_blocks, slice = warp & (p.split - 1);
  int n = (blockIdx.x - m * col_blocks) * cols + (warp >> split_shift);
  const uint8_t* b[2] = {b0, b1};
  const T* scales[2] = {s0, s1};
  const uint8_t* zp[2] = {z0, z1};
  float acc[W] = {};
  int blocks = (p.k + p.block - 1) >> block_shift;  // the last block may be partial
  int64_t column = (int64_t)n * blocks * (p.block / 2);  // byte k / 2 of a column is k's (a block is p.block / 2 bytes)
  const int first = (lane + 32 * slice) * 32, stride = 32 * 32 * p.split;
  struct Pass {  // a pass's constants, of each matrix: 32 weights, their zero point, their scale
    uint4 packed[W];
    float zero[W], scale[W];
  };
  auto constants = [&](int k0, Pass& c) {
    if (k0 >= p.k) return;
    int blk = k0 >> block_shift;
#pragma unroll
    for (int w = 0; w < W; w++) {
      c.packed[w] = __ldcs((const uint4*)(b[w] + column + k0 / 2));  // read once a step: first to leave L2
      c.zero[w] = (float)zero_point(zp[w], n, blk, blocks, 4);
      c.scale[w] = ld(scales[w] + (int64_t)n * blocks + blk);
    }
  };
  // The weights are constants: the first pass's loaded before waiting for the kernel before (a dependent launch
  // overlaps that with its tail), each later one's as the pass before ends
  Pass c;
  if (n < p.n) constants(first, c);
  // the bias (plan/fusion.py: an initializer) of the output this lane stores (below), a constant as well; in
  // the _norm kernels (a decode layer's q|k|v), whose prologue leaves the registers (the plain ones took 4 more)
  const float bias0 = NORM && W == 1 && bias && !lane && !slice && n < p.n ? ld(bias + n) : 0.0f;
  wait_for_previous();
  const T* row = a + (int64_t)m * p.k;
  if (NORM) {  // the block's row normalised into shared memory first
    extern __shared__ __align__(16) unsigned char normed[];
    norm_rows_to_shared<T, true>(norm, m, 1, p.k, blockIdx.x == m * col_blocks, (T*)normed);
    row = (const T*)normed;
  }
  if (n < p.n) {
    // (as a lambda, and the offset 2^23 + zero made here: the form measured; with the pass's code in the loop and
    // the offset made by `constants` the 1B step took 0.617 ms of GPU time, not 0.607)
    auto pass = [&](int k0, const Pass& c) {
      float dot[W] = {};
#pragma unroll
      for (int q = 0; q < 4; q++) {  // 8 k at a time: one word of each matrix
        float x[8];
        load8(row + k0 + 8 * q, x);
#pragma unroll
        for (int w = 0; w < W; w++) nibble_dot8(((const uint32_t*)&c.packed[w])[q], 8388608.0f + c.zero[w], x, dot[w]);
      }
#pragma unroll
      for (int w = 0; w < W; w++) acc[w] += dot[w] * c.scale[w];
    };
    for (int k0 = first; k0 < p.k; k0 += stride) {
      pass(k0, c);
      constants(k0 + stride, c);
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
  float v = W == 2 ? acc[0] / (1.0f + expf(-acc[0])) * acc[W - 1]
            : NORM ? acc[0] + bias0 : bias ? acc[0] + ld(bias + n) : acc[0];
  st(y + (int64_t)m * p.n + n, v);
}

// The 4-bit x32 kernel for 2 to NBITS_ROWS rows of activations a block (a batch's decode step): each pass's
// weights dequantized once (nibbles8) and dotted with every row, so a block reads them once for all its rows
// (a block a row read them once a row, and the prompt's path dequantizes the whole matrix every run): the one-row
// kernel's arithmetic (a float32 row batched vs alone was not bitwise equal on the H200 for 9 rows: unexplained).
template <typename T, int W>
__device__ void matmul_nbits4_rows(const T* a, const uint8_t* b0, const T* s0, const uint8_t* z0, const uint8_t* b1,
                                   const T* s1, const uint8_t* z1, const T* bias, T* y, NBits p) {
  __shared__ float part[NBITS_COLUMNS][NBITS_ROWS][W];
  int block_shift = __ffs(p.block) - 1, split_shift = __ffs(p.split) - 1;
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, cols = NBITS_COLUMNS >> split_shift;
  int col_blocks = (p.n + cols - 1) / cols;
  int row_block = blockIdx.x / col_blocks, slice = warp & (p.split - 1);
  int n = (blockIdx.x - row_block * col_blocks) * cols + (warp >> split_shift);
  int m0 = row_block * NBITS_ROWS, rows = min(NBITS_ROWS, p.m - m0);
  const uint8_t* b[2] = {b0, b1};
  const T* scales[2] = {s0, s1};
  const uint8_t* zp[2] = {z0, z1};
  float acc[NBITS_ROWS][W] = {};
  int blocks = (p.k + p.block - 1) >> block_shift;
  int64_t column = (int64_t)n * blocks * (p.block / 2);
  const int first = (lane + 32 * slice) * 32, stride = 32 * 32 * p.split;
  uint4 packed[W];
  float zero[W], scale[W];
  auto constants = [&](int k0) {
    if (k0 >= p.k) return;
    int blk = k0 >> block_shift;
#pragma unroll
    for (int w = 0; w < W; w++) {
      packed[w] = __ldcs((const uint4*)(b[w] + column + k0 / 2));
      zero[w] = (float)zero_point(zp[w], n, blk, blocks, 4);
      scale[w] = ld(scales[w] + (int64_t)n * blocks + blk);
    }
  };
  if (n < p.n) constants(first);  // constants: before waiting for the kernel before
  wait_for_previous();
  const T* rows_a = a + (int64_t)m0 * p.k;
  if (n < p.n) {
    for (int k0 = first; k0 < p.k; k0 += stride) {
      float dot[NBITS_ROWS][W] = {};
#pragma unroll
      for (int q = 0; q < 4; q++) {
        float wq[W][8];
#pragma unroll
        for (int w = 0; w < W; w++) nibbles8(((const uint32_t*)&packed[w])[q], 8388608.0f + zero[w], wq[w]);
#pragma unroll
        for (int r = 0; r < NBITS_ROWS; r++) {
          if (r >= rows) break;
          float x[8];
          load8(rows_a + (int64_t)r * p.k + k0 + 8 * q, x);
#pragma unroll
          for (int w = 0; w < W; w++)
#pragma unroll
            for (int j = 0; j < 8; j++) dot[r][w] += x[j] * wq[w][j];
        }
      }
#pragma unroll
      for (int r = 0; r < NBITS_ROWS; r++)
#pragma unroll
        for (int w = 0; w < W; w++) acc[r][w] += dot[r][w] * scale[w];
      constants(k0 + stride);
    }
#pragma unroll
    for (int r = 0; r < NBITS_ROWS; r++)
#pragma unroll
      for (int w = 0; w < W; w++)
        for (int off = 16; off > 0; off >>= 1) acc[r][w] += __shfl_xor_sync(0xffffffff, acc[r][w], off);
  }
  if (p.split > 1) {  // the column's warps add up their parts, in warp order
    if (lane == 0)
      for (int r = 0; r < rows; r++)
        for (int w = 0; w < W; w++) part[warp][r][w] = acc[r][w];
    __syncthreads();
    if (slice) return;
#pragma unroll
    for (int r = 0; r < NBITS_ROWS; r++) {
      if (r >= rows) break;
      for (int w = 0; w < W; w++) {
        acc[r][w] = part[warp][r][w];
        for (int s = 1; s < p.split; s++) acc[r][w] += part[warp + s][r][w];
      }
    }
  }
  if (lane || n >= p.n) return;
#pragma unroll
  for (int r = 0; r < NBITS_ROWS; r++) {
    if (r >= rows) break;
    float v = W == 2 ? acc[r][0] / (1.0f + expf(-acc[r][0])) * acc[r][W - 1] : bias ? acc[r][0] + ld(bias + n) : acc[r][0];
    st(y + (int64_t)(m0 + r) * p.n + n, v);
  }
}

// Float16 4-bit products with many columns (an LM head) on tensor cores (K and block_size multiples of
// 32, 16-byte aligned rows, constant weights, sm_90): mma.sync m16n8k16, float32 accumulation, a warp per
// 8 output columns (a tile), 128 k (4 groups of 32) a step (a chunk). Lane l takes group g = l % 4's 32 k of
// column l / 4 (16 bytes) as the mma's B, (q - z) in half: exact, 1024 + q from the 0x6400 exponent (x16
// for the odd nibbles, undone by the fma). A holds the activations of group g in row g only (lanes 0, 5,
// 10, 15 load them), so D[g][c] is column c's dot over group g's 32 k alone, inside one quantization
// block: scaled apart, as the dequantized product. The pairs of A and B hold the same k (nibbles j and
// j + 4 of a word): the order of a dot product's terms is free.
// The weights are laid out once by quantization.py's nbits4_tiles, tile by tile, chunk by chunk, matrix by
// matrix (TILE_CHUNK bytes: the 32 lanes' 16 bytes of weights, 16 lanes' two scales, 32 zero points), so a
// warp's chunks are one run of memory: it streams its tiles (every stride-th) by TMA bulk copies into a
// ring of two slots in shared memory, the next copy in flight while it computes (the H200's int4 LM head:
// 46.8 -> 36 us against 16-byte loads into registers).
#define MMA_CHUNK 128  // k a warp takes a step

template <int W>
__device__ void matmul_nbits4_tiles(const __half* a, const uint8_t* tiles, const __half* bias, __half* y,
                                    NBitsTiles p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ uint64_t bars[TILE_WARPS][2];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane & 3;
  const int per_copy = 8 / W, copies = (p.chunks + per_copy - 1) / per_copy;  // a tile's copies
  const int64_t record = (int64_t)p.chunks * W * TILE_CHUNK;
  const int count = (p.n + 7) / 8, stride = gridDim.x * TILE_WARPS, t0 = blockIdx.x * TILE_WARPS + warp;
  const int items = t0 < count ? ((count - 1 - t0) / stride + 1) * copies : 0;  // (tile, copy) pairs
  unsigned char* slots = ring + warp * 2 * TILE_SLOT;
  uint64_t* bar = bars[warp];
  auto fetch = [&](int i) {  // lane 0: item i into slot i % 2, its barrier told the bytes
    int t = t0 + i / copies * stride, c0 = i % copies * per_copy;
    unsigned bytes = min(per_copy, p.chunks - c0) * W * TILE_CHUNK;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(&bar[i & 1])),
                 "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(shared_address(slots + (i & 1) * TILE_SLOT)), "l"(tiles + t * record + (int64_t)c0 * W * TILE_CHUNK),
                 "r"(bytes), "r"(shared_address(&bar[i & 1])) : "memory");
  };
  if (lane == 0) {  // the weights are constants: the first copies start before waiting for the kernel before
    for (int i = 0; i < 2; i++)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(&bar[i])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    for (int i = 0; i < 2 && i < items; i++) fetch(i);
  }
  __syncwarp();
  wait_for_previous();
  const bool row_lane = (lane >> 2) == g;
  float acc[SMALL_ROWS][W][2] = {};
  for (int i = 0; i < items; i++) {
    asm volatile("{\n .reg .pred done;\n WAIT%=:\n mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 " @!done bra WAIT%=;\n}" ::"r"(shared_address(&bar[i & 1])), "r"((i >> 1) & 1) : "memory");
    const unsigned char* slot = slots + (i & 1) * TILE_SLOT;
    const int t = t0 + i / copies * stride, c0 = i % copies * per_copy;
    for (int cc = 0; cc < min(per_copy, p.chunks - c0); cc++) {
      const int c = c0 + cc, k0 = c * MMA_CHUNK + g * 32;
      uint32_t wb[W][16];
      float scale[W][2];
      for (int w = 0; w < W; w++) {
        const unsigned char* at = slot + (cc * W + w) * TILE_CHUNK;
        uint4 v = ((const uint4*)at)[lane];
        __half2 s2 = ((const __half2*)(at + 512))[lane & 15];
        float z = at[576 + lane];
        __half2 minus_low = __float2half2_rn(-1024.0f - z), minus_high = __float2half2_rn(-64.0f - z);
        for (int q = 0; q < 4; q++) nibble_pairs(((const uint32_t*)&v)[q], minus_low, minus_high, wb[w] + 4 * q);
        scale[w][0] = lane < 16 ? __low2float(s2) : 0.0f;  // lanes 16..31 hold rows of D that A leaves empty
        scale[w][1] = lane < 16 ? __high2float(s2) : 0.0f;
      }
#pragma unroll
      for (int r = 0; r < SMALL_ROWS; r++) {
        if (r >= p.m) break;
        uint4 x[4];
        const bool mine = row_lane && k0 < p.k;
        for (int q = 0; q < 4; q++) x[q] = mine ? ((const uint4*)(a + (int64_t)r * p.k + k0))[q] : make_uint4(0, 0, 0, 0);
        uint32_t xa[16];
        for (int q = 0; q < 4; q++) half_pairs((const uint32_t*)&x[q], xa + 4 * q);
        for (int w = 0; w < W; w++) {
          float d[2][4] = {};  // two chains of mmas, for their latency
          for (int j = 0; j < 8; j++) {
            uint32_t fa[4] = {xa[2 * j], 0u, xa[2 * j + 1], 0u}, fb[2] = {wb[w][2 * j], wb[w][2 * j + 1]};
            mma_16816<__half>(d[j & 1], fa, fb);
          }
          for (int j = 0; j < 2; j++) acc[r][w][j] += (d[0][j] + d[1][j]) * scale[w][j];
        }
      }
    }
    __syncwarp();  // every lane has read the slot: the item after next may go into it
    if (lane == 0 && i + 2 < items) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      fetch(i + 2);
    }
    if (i % copies != copies - 1) continue;
#pragma unroll
    for (int r = 0; r < SMALL_ROWS; r++) {  // the tile's last chunk: its outputs, row by row
      if (r >= p.m) break;
      for (int w = 0; w < W; w++)  // the four groups' lanes (g, g + 4, g + 8, g + 12), in a fixed order
        for (int j = 0; j < 2; j++) {
          for (int off = 4; off < 16; off <<= 1) acc[r][w][j] += __shfl_xor_sync(0xffffffff, acc[r][w][j], off);
        }
      for (int j = 0; lane < 4 && j < 2; j++) {
        int col = t * 8 + 2 * lane + j;
        float v = W == 2 ? acc[r][0][j] / (1.0f + expf(-acc[r][0][j])) * acc[r][W - 1][j]
                         : bias ? acc[r][0][j] + __half2float(bias[col]) : acc[r][0][j];
        if (col < p.n) y[(int64_t)r * p.n + col] = __float2half(v);
      }
      for (int w = 0; w < W; w++) acc[r][w][0] = acc[r][w][1] = 0.0f;
    }
  }
#endif
}

// Float16 4-bit products of 2 to NBITS_GEMV_ROWS rows (a batch's decode step) on tensor cores, from the weights'
// own layout: a warp per 8 output columns (a tile) and every row at once, mma.sync m16n8k16 with float32 sums.
// Per group of 32 k (inside one quantization block), lane l = 4 c + g takes k 8g..8g+7 of column c (one word) as
// B, (q - z) in half (exact, nibble_pairs), and rows c and c + 8 of the activations at the same k as A (in
// nibble_pairs' order, half_pairs); two mmas give the group's dot products, which each lane scales by its two
// D columns' (2g, 2g + 1) scales in float32 and adds to its sums: the one-row kernel's arithmetic (weights
// never rounded), summed in another order. Rows past m are zeros in A. A long K is spread over `split` warps a
// tile (strided groups), their sums added in warp order. The CUDA-core rows kernel above read the weights once
// for 8 rows but made 16 FMAs a weight a lane for 16 rows: compute-bound (the 1B shape's 16-row step 4.9 ms).
// Groups of 32 k a lane loads before it computes any (their loads in flight together): with one group at a time the
// kernel's time hardly grew with its rows (memory latency: 4 bytes a lane in flight); on the H200 4 ahead made the 1B
// shape's 16-row step 1.87 -> 1.41 ms of GPU time and the 0.5B's 1.66 -> 1.11; 8 ahead: 1.93 on the 1B (registers)
#define MMA_ROWS_AHEAD 4

template <int W>
__device__ void matmul_nbits4_mma_rows(const __half* a, const uint8_t* b0, const __half* s0, const uint8_t* z0,
                                       const uint8_t* b1, const __half* s1, const uint8_t* z1, const __half* bias,
                                       __half* y, NBits p) {
  __shared__ float part[NBITS_COLUMNS][W][4][32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane & 3, c = lane >> 2;
  const int split_shift = __ffs(p.split) - 1, block_shift = __ffs(p.block) - 1, slice = warp & (p.split - 1);
  const int tile = blockIdx.x * (NBITS_COLUMNS >> split_shift) + (warp >> split_shift);
  const int nb = tile * 8 + c, nd = tile * 8 + 2 * g;  // B's column; D's first column
  const int blocks = (p.k + p.block - 1) >> block_shift, groups = p.k >> 5;
  const uint8_t* b[2] = {b0, b1};
  const __half* scales[2] = {s0, s1};
  const uint8_t* zp[2] = {z0, z1};
  float acc[W][4] = {};
  const int r0 = c, r1 = c + 8;
  const __half* row0 = a + (int64_t)r0 * p.k + 8 * g;
  const __half* row1 = a + (int64_t)r1 * p.k + 8 * g;
  wait_for_previous();
  for (int first = slice; first < groups; first += MMA_ROWS_AHEAD * p.split) {
    uint4 x0[MMA_ROWS_AHEAD], x1[MMA_ROWS_AHEAD];
    uint32_t word[MMA_ROWS_AHEAD][W];
    __half sc[MMA_ROWS_AHEAD][W][2];
    int z[MMA_ROWS_AHEAD][W];
#pragma unroll
    for (int u = 0; u < MMA_ROWS_AHEAD; u++) {
      const int grp = first + u * p.split, k0 = grp * 32, blk = k0 >> block_shift;
      const bool live = grp < groups;
      x0[u] = live && r0 < p.m ? *(const uint4*)(row0 + k0) : make_uint4(0, 0, 0, 0);
      x1[u] = live && r1 < p.m ? *(const uint4*)(row1 + k0) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int w = 0; w < W; w++) {
        const bool col = live && nb < p.n;
        word[u][w] = col ? __ldg((const uint32_t*)(b[w] + (int64_t)nb * blocks * (p.block / 2) + k0 / 2 + 4 * g)) : 0;
        z[u][w] = col ? zero_point(zp[w], nb, blk, blocks, 4) : 0;
        sc[u][w][0] = live && nd < p.n ? scales[w][(int64_t)nd * blocks + blk] : __float2half(0.0f);
        sc[u][w][1] = live && nd + 1 < p.n ? scales[w][(int64_t)(nd + 1) * blocks + blk] : __float2half(0.0f);
      }
    }
#pragma unroll
    for (int u = 0; u < MMA_ROWS_AHEAD; u++) {
      if (first + u * p.split >= groups) break;  // the same for the whole warp
      uint32_t xa0[4], xa1[4];
      half_pairs((const uint32_t*)&x0[u], xa0);
      half_pairs((const uint32_t*)&x1[u], xa1);
#pragma unroll
      for (int w = 0; w < W; w++) {
        uint32_t wb[4];
        const float zf = (float)z[u][w];
        nibble_pairs(word[u][w], __float2half2_rn(-1024.0f - zf), __float2half2_rn(-64.0f - zf), wb);
        float d[4] = {};
        uint32_t fa[4] = {xa0[0], xa1[0], xa0[1], xa1[1]}, fb[2] = {wb[0], wb[1]};
        mma_16816<__half>(d, fa, fb);
        uint32_t fa2[4] = {xa0[2], xa1[2], xa0[3], xa1[3]}, fb2[2] = {wb[2], wb[3]};
        mma_16816<__half>(d, fa2, fb2);
        const float sc0 = __half2float(sc[u][w][0]), sc1 = __half2float(sc[u][w][1]);
        acc[w][0] += d[0] * sc0;
        acc[w][1] += d[1] * sc1;
        acc[w][2] += d[2] * sc0;
        acc[w][3] += d[3] * sc1;
      }
    }
  }
  if (p.split > 1) {  // the tile's warps add up their parts, in warp order
    for (int w = 0; w < W; w++)
      for (int i = 0; i < 4; i++) part[warp][w][i][lane] = acc[w][i];
    __syncthreads();
    if (slice) return;
    for (int w = 0; w < W; w++)
      for (int i = 0; i < 4; i++) {
        acc[w][i] = part[warp][w][i][lane];
        for (int s = 1; s < p.split; s++) acc[w][i] += part[warp + s][w][i][lane];
      }
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {  // D: rows c (i < 2) and c + 8, columns nd + i % 2
    const int r = i < 2 ? r0 : r1, n = nd + (i & 1);
    if (r >= p.m || n >= p.n) continue;
    float v = W == 2 ? acc[0][i] / (1.0f + expf(-acc[0][i])) * acc[W - 1][i]
                     : bias ? acc[0][i] + __half2float(bias[n]) : acc[0][i];
    y[(int64_t)r * p.n + n] = __float2half(v);
  }
}

extern "C" __global__ void seamless_matmul_nbits4_mma_rows_f16(const __half* a, const uint8_t* b, const __half* s,
                                                               const uint8_t* zp, const __half* bias, __half* y,
                                                               NBits p) {
  let_next_launch();
  matmul_nbits4_mma_rows<1>(a, b, s, zp, nullptr, nullptr, nullptr, bias, y, p);
}
extern "C" __global__ void seamless_matmul_nbits4_mma_rows_swiglu_f16(const __half* a, const uint8_t* bg,
                                                                      const __half* sg, const uint8_t* zg,
                                                                      const uint8_t* bu, const __half* su,
                                                                      const uint8_t* zu, __half* y, NBits p) {
  let_next_launch();
  matmul_nbits4_mma_rows<2>(a, bg, sg, zg, bu, su, zu, nullptr, y, p);
}

extern "C" __global__ void __launch_bounds__(TILE_WARPS * 32) seamless_matmul_nbits4_tiles_f16(
    const __half* a, const uint8_t* tiles, const __half* bias, __half* y, NBitsTiles p) {
  let_next_launch();
  matmul_nbits4_tiles<1>(a, tiles, bias, y, p);
}
extern "C" __global__ void __launch_bounds__(TILE_WARPS * 32) seamless_matmul_nbits4_tiles_swiglu_f16(
    const __half* a, const uint8_t* tiles, __half* y, NBitsTiles p) {
  let_next_launch();
  matmul_nbits4_tiles<2>(a, tiles, nullptr, y, p);
}

#define NBITS(S, T)                                                                                                   \
  extern "C" __global__ void seamless_matmul_nbits_##S(const T* a, const uint8_t* b, const T* s, const uint8_t* zp,   \
                                                       const T* bias, T* y, NBits p) { dependent_launch();            \
    matmul_nbits<T>(a, b, s, zp, nullptr, nullptr, nullptr, bias, y, p);                                              \
  }                                                                                                                   \
  extern "C" __global__ void seamless_matmul_nbits_swiglu_##S(const T* a, const uint8_t* bg, const T* sg,             \
                                                              const uint8_t* zg, const uint8_t* bu, const T* su,      \
                                                              const uint8_t* zu, T* y, NBits p) { dependent_launch(); \
    matmul_nbits<T>(a, bg, sg, zg, bu, su, zu, nullptr, y, p);                                                        \
  }
FOR_FLOATS(NBITS)

// x32_r40: the same at most 40 registers (44 unbounded), so 6 blocks fit an SM, not 5: for a grid that then fits one
// wave, not two (kernels/cuda/quantization.py X32_BLOCKS_AN_SM). H100, harness .dev/mb/gemv.cu, outputs bit-identical:
// 768 blocks (4096 x 6144, 8192 x 3072) 14.5 -> 10.8 and 14.8 -> 10.9 us; grids of one wave either way gained nothing
// (14336 x 4096 20.8 -> 21.5, a 1B step +0.9 % with every x32 so bound: docs/benchmarks/gpu.md, session 56).
#define NBITS4_X32(S, T)                                                                                              \
  extern "C" __global__ void seamless_matmul_nbits4_x32_##S(const T* a, const uint8_t* b, const T* s,                 \
                                                            const uint8_t* zp, const T* bias, T* y, NBits p) { let_next_launch(); \
    matmul_nbits4_x32<T, 1, false>(a, b, s, zp, nullptr, nullptr, nullptr, bias, y, p, RowNorm{});                 \
  }                                                                                                                   \
  extern "C" __global__ void __launch_bounds__(256, 6) seamless_matmul_nbits4_x32_r40_##S(                            \
      const T* a, const uint8_t* b, const T* s, const uint8_t* zp, const T* bias, T* y, NBits p) { let_next_launch(); \
    matmul_nbits4_x32<T, 1, false>(a, b, s, zp, nullptr, nullptr, nullptr, bias, y, p, RowNorm{});                 \
  }                                                                                                                   \
  extern "C" __global__ void seamless_matmul_nbits4_x32_swiglu_##S(const T* a, const uint8_t* bg, const T* sg,        \
                                                                   const uint8_t* zg, const uint8_t* bu, const T* su, \
                                                                   const uint8_t* zu, T* y, NBits p) { let_next_launch(); \
    matmul_nbits4_x32<T, 2, false>(a, bg, sg, zg, bu, su, zu, nullptr, y, p, RowNorm{});                           \
  }                                                                                                                   \
  extern "C" __global__ void seamless_matmul_nbits4_x32_norm_##S(const uint8_t* b, const T* s, const uint8_t* zp,     \
                                                                 const T* bias, T* y, NBits p, RowNorm norm) { let_next_launch(); \
    matmul_nbits4_x32<T, 1, true>(nullptr, b, s, zp, nullptr, nullptr, nullptr, bias, y, p, norm);                   \
  }                                                                                                                   \
  /* 48 registers: 5 blocks an SM, the 608 of a Qwen2.5-0.5B MLP in one wave */                                      \
  extern "C" __global__ void __launch_bounds__(256, 5) seamless_matmul_nbits4_x32_swiglu_norm_##S(                   \
      const uint8_t* bg, const T* sg, const uint8_t* zg, const uint8_t* bu, const T* su, const uint8_t* zu, T* y,     \
      NBits p, RowNorm norm) {                                                                                     \
    let_next_launch();                                                                                                \
    matmul_nbits4_x32<T, 2, true>(nullptr, bg, sg, zg, bu, su, zu, nullptr, y, p, norm);                              \
  }                                                                                                                   \
  extern "C" __global__ void seamless_matmul_nbits4_rows_##S(const T* a, const uint8_t* b, const T* s,                \
                                                             const uint8_t* zp, const T* bias, T* y, NBits p) { let_next_launch(); \
    matmul_nbits4_rows<T, 1>(a, b, s, zp, nullptr, nullptr, nullptr, bias, y, p);                                    \
  }                                                                                                                   \
  extern "C" __global__ void seamless_matmul_nbits4_rows_swiglu_##S(const T* a, const uint8_t* bg, const T* sg,       \
                                                                    const uint8_t* zg, const uint8_t* bu, const T* su, \
                                                                    const uint8_t* zu, T* y, NBits p) { let_next_launch(); \
    matmul_nbits4_rows<T, 2>(a, bg, sg, zg, bu, su, zu, nullptr, y, p);                                              \
  }
FOR_FLOATS(NBITS4_X32)

// A prompt's MatMulNBits weights dequantized into w (n, k) of the activations' type, 8 k a thread (a block_size
// of 16 or more never splits them), each (q - zp) * scale rounded once: the product is then one GEMM (the
// GEMVs above, a grid row per row of activations, would read the weights once a row). Where k is a multiple of 8
// and the buffers aligned (the usual case), a thread's 8 values are one 4- or 8-byte load and one 16-byte store
// (two for float32): byte loads and 2-byte stores made this kernel ~6x slower than its memory traffic (a 1000-token
// prompt of the Qwen2.5-0.5B shape spent ~3 of its 7.3 ms here, H100, session 51).
template <typename T>
__device__ void dequantize_nbits(const uint8_t* b, const T* scales, const uint8_t* zp, T* w, NBits p) {
  int blocks = (p.k + p.block - 1) / p.block, blob = p.block * p.bits / 8, groups = (p.k + 7) / 8;
  bool whole = p.k % 8 == 0 && p.block % 8 == 0 && (p.bits == 4 || p.bits == 8) && ((uintptr_t)w & 15) == 0 &&
               ((uintptr_t)b & 7) == 0;
  GRID_LOOP(i, (int64_t)p.n * groups) {
    int64_t n = i / groups;
    int k0 = (int)(i - n * groups) * 8, blk = k0 / p.block, at = k0 % p.block;
    int z = zero_point(zp, n, blk, blocks, p.bits);
    float scale = ld(scales + n * blocks + blk);
    const uint8_t* packed = b + (n * blocks + blk) * blob + at * p.bits / 8;
    if (whole) {  // packed is 4-byte (4 bits) or 8-byte (8 bits) aligned: blob and at * bits / 8 are multiples
      float v[8];
      if (p.bits == 4) {
        nibbles8(*(const uint32_t*)packed, 8388608.0f + z, v);  // q - z exactly (common.cuh)
      } else {
        uint2 word = *(const uint2*)packed;
        for (int j = 0; j < 8; j++) v[j] = (float)((int)(((j < 4 ? word.x : word.y) >> (8 * (j & 3))) & 255) - z);
      }
      for (int j = 0; j < 8; j++) v[j] *= scale;
      store8(w + n * p.k + k0, v);
      continue;
    }
    for (int j = 0; j < 8 && k0 + j < p.k; j++) {
      int q = p.bits == 4 ? (packed[j / 2] >> ((j & 1) * 4)) & 15 : packed[j];
      st(w + n * p.k + k0 + j, (float)(q - z) * scale);
    }
  }
}

#define DEQUANTIZE_NBITS(S, T)                                                                             \
  extern "C" __global__ void seamless_dequantize_nbits_##S(const uint8_t* b, const T* s, const uint8_t* zp, \
                                                           T* w, NBits p) { dependent_launch();             \
    dequantize_nbits(b, s, zp, w, p);                                                                       \
  }
FOR_FLOATS(DEQUANTIZE_NBITS)

// GatherBlockQuantized (com.microsoft), 2-D data of packed 4- or 8-bit values quantized along
// its rows in blocks: y[i, j] = (q[idx[i], j] - zp[idx[i], j / block]) * scale[idx[i], j / block];
// an index out of range gives a row of zeros.

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
    int z = zero_point(zp, r, blk, blocks, g.bits);
    st(y + t, (float)(q - z) * ld(scales + r * blocks + blk));
  }
}

#define GATHER_BLOCK_QUANTIZED(S, T)                                                                        \
  extern "C" __global__ void seamless_gather_block_quantized_##S(const uint8_t* d, const int64_t* idx, const T* s, \
                                                                 const uint8_t* zp, T* y, GatherQ g) { dependent_launch(); \
    gather_block_quantized(d, idx, s, zp, y, g);                                                                    \
  }
FOR_FLOATS(GATHER_BLOCK_QUANTIZED)

// QLinearMatMul / QLinearConv's requantization, as the CPU kernels (the spec's reference) do it in float64:
// y = saturate(round_half_even((acc + bias[channel]) * multiplier) + zero point), acc the exact integer
// sums (float64), the multiplier float32 (one per element), an optional int32 bias per channel
// ((i / spatial) % channels) and a one-value zero point, both read on the GPU.
template <typename T, int LOW, int HIGH>
__device__ void requantize(int64_t n, const double* acc, const float* multiplier, const int32_t* bias,
                           int64_t channels, int64_t spatial, const T* zp, T* y) {
  double z = zp ? (double)zp[0] : 0.0;
  GRID_LOOP(i, n) {
    double sum = acc[i] + (bias ? (double)bias[(i / spatial) % channels] : 0.0);
    y[i] = (T)fmin(fmax(rint(sum * (double)multiplier[i]) + z, (double)LOW), (double)HIGH);
  }
}

#define REQUANTIZE(S, T, LOW, HIGH)                                                                           \
  extern "C" __global__ void seamless_requantize_##S(int64_t n, const double* acc, const float* multiplier,    \
                                                     const int32_t* bias, int64_t channels, int64_t spatial,    \
                                                     const T* zp, T* y) {                                       \
    dependent_launch();                                                                                       \
    requantize<T, LOW, HIGH>(n, acc, multiplier, bias, channels, spatial, zp, y);                              \
  }
REQUANTIZE(i8, int8_t, -128, 127)
REQUANTIZE(u8, uint8_t, 0, 255)
