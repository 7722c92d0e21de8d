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
