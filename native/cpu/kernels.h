void seamless_erf_f32(const float* x, float* y, size_t n);
void seamless_erf_f64(const double* x, double* y, size_t n);
void seamless_softmax_f32(const float* x, float* y, size_t rows, size_t cols);
void seamless_layernorm_f32(const float* x, const float* scale, const float* bias, float* y, float* mean,
                            float* inv_std, size_t rows, size_t cols, float eps);
