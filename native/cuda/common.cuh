// Shared device helpers: float32 views of float32/float16/bfloat16 values, block-wide reductions,
// the grid-stride loop.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "args.h"  // the kernels' argument structs and codes (the contract with their Python side)

// Programmatic dependent launch (sm_90 and up; runtime/cuda.py launches every kernel with it there):
// the next kernel may launch as soon as this one has started (let_next_launch), and this one waits
// for the kernel before it to finish, and its writes to be visible (wait_for_previous), before it
// reads or writes any tensor. Every kernel's first statement is dependent_launch(), both at once,
// or let_next_launch() when the device function it calls waits itself after fetching constants
// (tests/cuda/test_kernel_sources.py checks).
__device__ __forceinline__ void let_next_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_previous() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void dependent_launch() {
  let_next_launch();
  wait_for_previous();
}
// 16 bytes from global to shared memory without holding registers (sm_80 and up), and the wait for this thread's
// own such copies.
__device__ __forceinline__ void copy16_to_shared(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src)
               : "memory");
}
__device__ __forceinline__ void wait_copies_to_shared() { asm volatile("cp.async.wait_all;" ::: "memory"); }
// For a pipeline of such copies: the copies issued since the last commit made one group, and the wait until at most
// N groups are still in flight (the older ones landed).
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait_copies_but() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
__device__ __forceinline__ unsigned shared_address(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// Tensor cores (sm_80 and up): d += a . b for one m16n8k16 tile of 16-bit operands (a: 4 registers of pairs,
// b: 2), float32 sums, in the PTX ISA's fragment layouts.
template <typename T>
__device__ __forceinline__ void mma_16816(float* d, const uint32_t* a, const uint32_t* b);
#define SEAMLESS_MMA_16816(T, TYPE)                                                                       \
  template <>                                                                                             \
  __device__ __forceinline__ void mma_16816<T>(float* d, const uint32_t* a, const uint32_t* b) {          \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TYPE "." TYPE ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, " \
                 "{%8,%9}, {%0,%1,%2,%3};"                                                                \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                         \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));                   \
  }
SEAMLESS_MMA_16816(__half, "f16")
SEAMLESS_MMA_16816(__nv_bfloat16, "bf16")
#undef SEAMLESS_MMA_16816
// Four 8x8 matrices of 16-bit values from shared memory, transposed: lanes 8m..8m+7 give the row addresses of
// matrix m (16 bytes each), and lane t gets rows 2 (t % 4) and 2 (t % 4) + 1 of column t / 4 of matrix m in r[m].
__device__ __forceinline__ void load_matrices_transposed(uint32_t* r, const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

__device__ __forceinline__ float ld(const float* p) { return *p; }
__device__ __forceinline__ float ld(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ float ld(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void st(float* p, float v) { *p = v; }
__device__ __forceinline__ void st(__half* p, float v) { *p = __float2half(v); }
__device__ __forceinline__ void st(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }
// v rounded to T, as a tensor of T holds it.
template <typename T>
__device__ __forceinline__ float rounded(float v) {
  T r;
  st(&r, v);
  return ld(&r);
}

// Per-type arithmetic of kernels over float and integer types: the float types through the float32 views
// above, int32/int64 as they are (the non-template overloads win for them).
namespace typed {
template <typename T>
__device__ __forceinline__ float load(const T* p) { return ld(p); }
__device__ __forceinline__ int32_t load(const int32_t* p) { return *p; }
__device__ __forceinline__ int64_t load(const int64_t* p) { return *p; }
template <typename T>
__device__ __forceinline__ void store(T* p, float v) { st(p, v); }
__device__ __forceinline__ void store(int32_t* p, int32_t v) { *p = v; }
__device__ __forceinline__ void store(int64_t* p, int64_t v) { *p = v; }

__device__ __forceinline__ bool is_nan(float v) { return v != v; }
__device__ __forceinline__ bool is_nan(int64_t) { return false; }
__device__ __forceinline__ bool is_nan(int32_t) { return false; }
}  // namespace typed

// Eight consecutive values as float32 from one 16-byte load (two for float32); p 16-byte aligned.
__device__ __forceinline__ void load8(const float* p, float* x) {
  float4 a = ((const float4*)p)[0], b = ((const float4*)p)[1];
  x[0] = a.x; x[1] = a.y; x[2] = a.z; x[3] = a.w; x[4] = b.x; x[5] = b.y; x[6] = b.z; x[7] = b.w;
}
__device__ __forceinline__ float2 pair(__half2 h) { return __half22float2(h); }
__device__ __forceinline__ float2 pair(__nv_bfloat162 h) { return __bfloat1622float2(h); }
template <typename P>  // __half2 or __nv_bfloat162
__device__ __forceinline__ void load8_pairs(const void* p, float* x) {
  uint4 v = *(const uint4*)p;
  const P* h = (const P*)&v;
  for (int i = 0; i < 4; i++) {
    float2 f = pair(h[i]);
    x[2 * i] = f.x;
    x[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void load8(const __half* p, float* x) { load8_pairs<__half2>(p, x); }
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float* x) { load8_pairs<__nv_bfloat162>(p, x); }

// dot += x[0..7] . (q - zero) for the 8 4-bit values q of a word (the lowest nibble first), offset = 2^23 + zero:
// a byte permute puts each nibble into the mantissa of 2^23 (0x4B000000), so the float is exactly 2^23 + q, and
// one subtraction leaves q - zero, without an int-to-float conversion (a quarter-rate instruction, which bound
// the 4-bit GEMVs: quantization.cu). Byte j of (word & 0x0F0F0F0F) is nibble 2j, of (word >> 4) nibble 2j + 1.
__device__ __forceinline__ void nibble_dot8(uint32_t word, float offset, const float* x, float& dot) {
  const uint32_t even = word & 0x0F0F0F0Fu, odd = (word >> 4) & 0x0F0F0F0Fu;
#pragma unroll
  for (int j = 0; j < 4; j++) {
    dot += x[2 * j] * (__uint_as_float(__byte_perm(even, 0x4B000000u, 0x7440 + j)) - offset);
    dot += x[2 * j + 1] * (__uint_as_float(__byte_perm(odd, 0x4B000000u, 0x7440 + j)) - offset);
  }
}

// The 8 weights of nibble_dot8, w[j] = q_j - zero (offset = 2^23 + zero), made once for several rows' dots: the
// same values in the same order (x[j] * w[j], j = 0..7, is nibble_dot8's sum term by term).
__device__ __forceinline__ void nibbles8(uint32_t word, float offset, float* w) {
  const uint32_t even = word & 0x0F0F0F0Fu, odd = (word >> 4) & 0x0F0F0F0Fu;
#pragma unroll
  for (int j = 0; j < 4; j++) {
    w[2 * j] = __uint_as_float(__byte_perm(even, 0x4B000000u, 0x7440 + j)) - offset;
    w[2 * j + 1] = __uint_as_float(__byte_perm(odd, 0x4B000000u, 0x7440 + j)) - offset;
  }
}

__device__ __forceinline__ uint32_t h2_bits(__half2 h) { return *(uint32_t*)&h; }
__device__ __forceinline__ __half2 bits_h2(uint32_t u) { return *(__half2*)&u; }

// 4-bit weights as an mma's float16 B (quantization.cu, moe.cu): eight nibbles (k 0..7 of a word, low first) as four
// half2 of q - z, exact (1024 + q from the 0x6400 exponent, x16 for the odd nibbles, undone by the fma; minus_low =
// -1024 - z, minus_high = -64 - z), in the pairs (0, 4), (1, 5), (2, 6), (3, 7).
__device__ __forceinline__ void nibble_pairs(uint32_t w, __half2 minus_low, __half2 minus_high, uint32_t* out) {
  const uint32_t magic = 0x64006400;  // half 1024: its unit is 1, so 1024 + q is exact
  const __half2 sixteenth = __float2half2_rn(0.0625f);
  uint32_t w8 = w >> 8;
  out[0] = h2_bits(__hadd2(bits_h2((w & 0x000F000F) | magic), minus_low));
  out[1] = h2_bits(__hfma2(bits_h2((w & 0x00F000F0) | magic), sixteenth, minus_high));
  out[2] = h2_bits(__hadd2(bits_h2((w8 & 0x000F000F) | magic), minus_low));
  out[3] = h2_bits(__hfma2(bits_h2((w8 & 0x00F000F0) | magic), sixteenth, minus_high));
}

// Eight halves (k 0..7) as the pairs nibble_pairs makes: (0, 4), (1, 5), (2, 6), (3, 7).
__device__ __forceinline__ void half_pairs(const uint32_t* x, uint32_t* out) {
  out[0] = __byte_perm(x[0], x[2], 0x5410);
  out[1] = __byte_perm(x[0], x[2], 0x7632);
  out[2] = __byte_perm(x[1], x[3], 0x5410);
  out[3] = __byte_perm(x[1], x[3], 0x7632);
}

// Eight float32 values stored with one 16-byte store (two for float32), rounded to the type; p 16-byte aligned.
__device__ __forceinline__ void store8(float* p, const float* x) {
  ((float4*)p)[0] = make_float4(x[0], x[1], x[2], x[3]);
  ((float4*)p)[1] = make_float4(x[4], x[5], x[6], x[7]);
}
__device__ __forceinline__ __half2 to_pair(float a, float b, __half2*) { return __floats2half2_rn(a, b); }
__device__ __forceinline__ __nv_bfloat162 to_pair(float a, float b, __nv_bfloat162*) {
  return __floats2bfloat162_rn(a, b);
}
template <typename P>
__device__ __forceinline__ void store8_pairs(void* p, const float* x) {
  uint4 v;
  P* h = (P*)&v;
  for (int i = 0; i < 4; i++) h[i] = to_pair(x[2 * i], x[2 * i + 1], (P*)nullptr);
  *(uint4*)p = v;
}
__device__ __forceinline__ void store8(__half* p, const float* x) { store8_pairs<__half2>(p, x); }
__device__ __forceinline__ void store8(__nv_bfloat16* p, const float* x) { store8_pairs<__nv_bfloat162>(p, x); }

// for (i over [0, n)) spread over the whole grid
#define GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

// A bad value in the run's data (an index, length or position out of range, an integer divisor of zero), which
// only the GPU sees: the kernel bounds its own access (zeros read, a write skipped, a length clamped) and reports
// the value to its stream's report (args.h GpuCheck), which the host reads once it has waited for the stream and
// fails the run with the tag's status and text. A null report: nothing reported.
__device__ __noinline__ void report_bad(const GpuCheck& c, long long value) {
  volatile long long* r = (volatile long long*)c.report;
  if (r && r[0] == 0) {  // the first report stands (racing threads may each write one: any is a true one)
    r[1] = value;
    __threadfence_system();
    r[0] = c.tag;
  }
}

// X-macro over the float types with their kernel-name suffixes: define M(S, T) to emit one
// extern "C" kernel named ..._##S for element type T, then FOR_FLOATS(M).
#define FOR_FLOATS(M) M(f32, float) M(f16, __half) M(bf16, __nv_bfloat16)

// Sum or max of one value per thread over the block; every thread gets the result.
__device__ __forceinline__ float block_reduce(float v, bool is_max) {
  __shared__ float partial[32];
  for (int off = 16; off > 0; off >>= 1) {
    float o = __shfl_xor_sync(0xffffffff, v, off);
    v = is_max ? fmaxf(v, o) : v + o;
  }
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  int warps = (blockDim.x + 31) >> 5;
  v = threadIdx.x < warps ? partial[threadIdx.x] : (is_max ? -INFINITY : 0.0f);
  if (warp == 0)
    for (int off = 16; off > 0; off >>= 1) {
      float o = __shfl_xor_sync(0xffffffff, v, off);
      v = is_max ? fmaxf(v, o) : v + o;
    }
  if (threadIdx.x == 0) partial[0] = v;
  __syncthreads();
  return partial[0];
}

// Layer or RMS normalisation (`simplified`: mean 0) of the 8 values of a row at column c (`at` in x),
// the row of `cols` values spread over a block's threads by eights (normalization.cu's skip_norm_row8, and the
// GEMVs' norm prologue below: the same arithmetic, so the same bits): v = x (+ skip) (+ bias), written
// to sum_out when given; then (v - mean) * rsqrt(mean((v - mean)^2) + eps) * scale (+ beta) into v.
// Every thread of the block calls it; whether this one's values lie in the row. EARLY_SCALE: the scale is
// loaded with the row (8 values as stored: 4 or 8 more registers), so its wait is not added after the
// reductions (the 4-bit GEMVs' prologue: a layer 0.5 us faster; the float16 ones' were slower for it).
template <typename T, bool EARLY_SCALE = false>
__device__ bool norm8(const T* x, const T* skip, const T* bias, const T* scale, const T* beta, T* sum_out,
                      int64_t at, int64_t c, int64_t cols, float eps, bool simplified, float* v) {
  const bool live = c < cols;
  float t[8];
  uint4 early[EARLY_SCALE ? sizeof(T) / 2 : 1];
  for (int i = 0; i < 8; i++) v[i] = 0.0f;
  if (live) {
    if (EARLY_SCALE)
      for (int i = 0; i < (int)(sizeof(T) / 2); i++) early[i] = ((const uint4*)(scale + c))[i];
    load8(x + at, v);
    if (skip) { load8(skip + at, t); for (int i = 0; i < 8; i++) v[i] += t[i]; }
    if (bias) { load8(bias + c, t); for (int i = 0; i < 8; i++) v[i] += t[i]; }
    if (sum_out) store8(sum_out + at, v);
  }
  float sum = 0.0f;
  for (int i = 0; i < 8; i++) sum += v[i];
  float mean = simplified ? 0.0f : block_reduce(sum, false) / cols;
  float sq = 0.0f;
  if (live)
    for (int i = 0; i < 8; i++) sq += (v[i] - mean) * (v[i] - mean);
  float inv = rsqrtf(block_reduce(sq, false) / cols + eps);
  if (!live) return false;
  load8(EARLY_SCALE ? (const T*)early : scale + c, t);
  for (int i = 0; i < 8; i++) v[i] = (v[i] - mean) * inv * t[i];
  if (beta) { load8(beta + c, t); for (int i = 0; i < 8; i++) v[i] += t[i]; }
  return true;
}

// An RMS normalisation the GEMVs apply to their activations first (plan/fusion.py's NormedProduct; args.h RowNorm,
// of T values): x [rows, k]; `sum` is written by the first block of the grid's row.

// Rows [first, first + count) of the normalised activations into shared memory `out` (count * k values, in
// T as the norm's own output), then a barrier. k % 8 == 0, k <= NORM_MAX_K; every thread calls it.
template <typename T, bool EARLY_SCALE = false>
__device__ void norm_rows_to_shared(const RowNorm& r, int64_t first, int count, int k, bool write_sum, T* out) {
  for (int i = 0; i < count; i++) {
    float v[8];
    int64_t c = threadIdx.x * 8, at = (first + i) * k + c;
    if (norm8<T, EARLY_SCALE>((const T*)r.x, (const T*)r.skip, (const T*)r.bias, (const T*)r.gamma, (const T*)nullptr,
                              write_sum ? (T*)r.sum : nullptr, at, c, k, r.eps, true, v))
      store8(out + i * k + c, v);
  }
  __syncthreads();
}
