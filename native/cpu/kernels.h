void seamless_erf_f32(const float* x, float* y, size_t n, void* par_fn, void* par_ctx);
void seamless_erf_f64(const double* x, double* y, size_t n);
void seamless_gelu_f32(const float* x, float* y, size_t n, void* par_fn, void* par_ctx);
void seamless_softmax_f32(const float* x, float* y, size_t rows, size_t cols, void* par_fn, void* par_ctx);
void seamless_layernorm_f32(const float* x, const float* scale, const float* bias, float* y, float* mean,
                            float* inv_std, size_t rows, size_t cols, float eps, void* par_fn, void* par_ctx);
size_t seamless_sgemm_packed_size(size_t K, size_t N);
void seamless_sgemm_pack_b(const float* B, size_t K, size_t N, size_t ldb, int trans_b, float* packed);
void seamless_sgemm(size_t M, size_t N, size_t K, const float* A, size_t lda, const float* packed,
                    const float* bias, float* C, size_t ldc, void* par_fn, void* par_ctx);
int seamless_sgemm_batched(size_t batch, size_t M, size_t N, size_t K, const float* A, size_t lda, size_t stride_a,
                           const float* B, size_t ldb, size_t stride_b, int trans_b, float* C, size_t ldc,
                           size_t stride_c, void* par_fn, void* par_ctx);
/* quant.c: MatMulNBits; returns 0, or 1 (unsupported configuration), 2 (out of memory) */
int seamless_matmul_nbits_f32(const float* a, size_t m, size_t k, const uint8_t* b, const float* scales,
                              const uint8_t* zp_u8, const float* zp_f32, const float* bias, float* y, size_t n,
                              size_t bits, size_t bs, int int8, void* par_fn, void* par_ctx);
void seamless_matmul_nbits_set_isa(int level);
