void seamless_erf_f32(const float* x, float* y, size_t n);
void seamless_erf_f64(const double* x, double* y, size_t n);
