// Shared device helpers: float32 views of float32/float16 values, block-wide reductions.
#pragma once
#include <cuda_fp16.h>
#include <stdint.h>

__device__ __forceinline__ float ld(const float* p) { return *p; }
__device__ __forceinline__ float ld(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ void st(float* p, float v) { *p = v; }
__device__ __forceinline__ void st(__half* p, float v) { *p = __float2half(v); }

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
