/* The CUDA variant's additional C functions (appended to python_api.h for that module). */
const char* seamless_cuda_problem_text(void);
OrtStatus* seamless_compute_stream(const OrtKernelContext* ctx, void** stream);
uintptr_t seamless_cuda_alloc(int ordinal, size_t size);
void seamless_cuda_free(int ordinal, uintptr_t p);
long long seamless_cuda_device_allocations(void);
long long seamless_cuda_device_bytes_in_use(void);
OrtStatus* seamless_cuda_load_module(int ordinal, const void* image, void** module);
OrtStatus* seamless_cuda_function(void* module, const char* name, void** fn);
OrtStatus* seamless_cuda_allow_shared(void* fn, int bytes);
OrtStatus* seamless_cuda_launch(void* fn, unsigned gx, unsigned gy, unsigned block, unsigned shared, void* stream,
                                const char* packed, const int32_t* offsets, int count, int dependent);
int seamless_cuda_dependent_launch(int ordinal);
OrtStatus* seamless_cuda_copy(uintptr_t dst, uintptr_t src, size_t nbytes, void* stream);
OrtStatus* seamless_cuda_zero(uintptr_t dst, size_t nbytes, void* stream);
OrtStatus* seamless_cuda_sync(void* stream);
OrtStatus* seamless_cuda_device_sync(int ordinal);
const char* seamless_cublas_problem_text(void);
OrtStatus* seamless_cublas_gemm(int ordinal, void* stream, int dtype, int trans_a, int trans_b, int m, int n, int k,
                                uintptr_t a, long long stride_a, uintptr_t b, long long stride_b, uintptr_t c,
                                long long stride_c, int batch, float alpha);
OrtStatus* seamless_cuda_upload(int ordinal, uintptr_t dst, const void* src, size_t nbytes, void* stream);
OrtStatus* seamless_capture_begin(void* stream);
int seamless_capturing(void);
OrtStatus* seamless_segment_begin(void* stream, void** out);
OrtStatus* seamless_segment_end(void* graph, int keep);
OrtStatus* seamless_segment_launch(void* graph, void* stream);
void seamless_segment_release(int ordinal, void* graph);
size_t seamless_replay_timing(int on);
size_t seamless_replay_times(float* out, size_t max);
