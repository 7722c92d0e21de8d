/* The CUDA variant's additional C functions (appended to python_api.h for that module's cdef; also
 * included by cuda_ep.h, so the C units and the cffi module read one declaration). */
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
                                const char* packed, size_t nbytes, const int32_t* offsets, int count, int dependent);
int seamless_cuda_dependent_launch(int ordinal);
int seamless_cuda_multiprocessors(int ordinal);  /* its SMs (0: unknown) */
OrtStatus* seamless_cuda_copy(uintptr_t dst, uintptr_t src, size_t nbytes, void* stream);
OrtStatus* seamless_cuda_zero(uintptr_t dst, size_t nbytes, void* stream);
OrtStatus* seamless_cuda_sync(void* stream);  /* then the stream's report taken (gpu_report_take) */
uintptr_t seamless_gpu_report(void* stream);  /* where kernels on `stream` report bad values (0: nowhere) */
int64_t seamless_gpu_check_tag(const char* text, int code);  /* a report's tag: its status and text */
OrtStatus* seamless_cuda_device_sync(int ordinal);
long long seamless_ep_syncs(void);  /* how many times ORT called a CUDA EP's Sync (glue.c) */
const char* seamless_cublas_problem_text(void);
OrtStatus* seamless_cublas_gemm(int ordinal, void* stream, int dtype, int trans_a, int trans_b, int m, int n, int k,
                                uintptr_t a, long long stride_a, uintptr_t b, long long stride_b, uintptr_t c,
                                long long stride_c, int batch, float alpha, int c_dtype, uintptr_t bias);
OrtStatus* seamless_cuda_upload(int ordinal, uintptr_t dst, const void* src, size_t nbytes, void* stream);
OrtStatus* seamless_capture_begin(void* stream);
int seamless_capturing(void);
OrtStatus* seamless_segment_begin(void* stream, int listed, void** out);  /* listed: a launch program */
OrtStatus* seamless_segment_end(void* graph, int keep);
void seamless_segment_release(int ordinal, void* graph);
size_t seamless_segment_steps(const void* graph);  /* a launch program's launches, copies and GEMMs */
/* control flow decided on the GPU inside a capture (cuda_capture.c): conditional graph nodes (an If's two IF nodes, a
 * Loop's WHILE node), a body captured for each */
OrtStatus* seamless_conditional_handles(void* stream, uint64_t* handles, int n);
OrtStatus* seamless_conditional_nodes(void* stream, const uint64_t* handles, int n, int loop, void** bodies);
OrtStatus* seamless_body_begin(void* body, void** stream);
OrtStatus* seamless_body_end(void* stream);
size_t seamless_replay_timing(int on);
size_t seamless_replay_times(float* out, size_t max);
typedef struct SeamlessReplayer SeamlessReplayer;
/* One captured segment's plan: exec/cuda_compute.py Segment, field by field (its docstring says what
 * each holds). A length index equal to n_dims stands for a length of 1. */
typedef struct {
  void* graph;                    /* CapturedGraph* (cuda_capture.c): a CUDA graph or a launch program */
  void* stream;                   /* replayed only on the stream it was captured on */
  int64_t capacity, n_dims;       /* n_dims: inputs * max_rank, the size of a run's dims */
  int32_t n_in, n_out, k, n_axis, n_grow, max_rank;
  void* host;                     /* the table's host copy: n_in + n_out StageCopy (native/cuda/args.h) */
  uint64_t table;                 /* its device copy */
  const int64_t *in_pos, *in_length, *in_unit, *in_lead;  /* in_lead NULL: not padded at the start */
  const int64_t *out_length, *out_unit, *out_full, *out_src, *out_axis, *out_padded, *grow_at;
  const int32_t* out_ranks;
  int64_t *out_dims, *lengths;    /* rewritten per run: the outputs' dims, their lengths */
  void** out_data;                /* ORT's outputs of this run */
  void* fn;                       /* the outputs' staging launch (NULL: no outputs) */
  uint32_t gx, gy, block, shared;
  const char* packed;
  size_t packed_size;
  const int32_t* offsets;
  int32_t count, dependent;
  const uint8_t* key;             /* the binding (seamless_replay_key) */
  uint64_t used;                  /* when it was last launched: least recently used goes first */
} SeamlessSegment;
SeamlessReplayer* seamless_replayer_new(int n_in, int max_rank, const int64_t* grow_at, int n_grow, int left,
                                        int64_t min_capacity);
void seamless_replayer_free(SeamlessReplayer* r);
size_t seamless_replay_key_size(const SeamlessReplayer* r);
int seamless_replayer_prompts(SeamlessReplayer* r, const int64_t* prompt_at, int n_prompt, const int64_t* past_at,
                              int n_past, int64_t min_capacity, int64_t max_capacity);
int64_t seamless_replay_key(const SeamlessReplayer* r, const int64_t* dims, const int32_t* ranks, const int32_t* types,
                            uint8_t* key, int32_t* prompt);
int seamless_replay_add(SeamlessReplayer* r, SeamlessSegment* s);
void seamless_replay_remove(SeamlessReplayer* r, SeamlessSegment* s);
int seamless_segment_inputs(SeamlessSegment* s, const int64_t* dims, void* const* data);
void seamless_segment_outputs(SeamlessSegment* s);
OrtStatus* seamless_segment_replay(SeamlessReplayer* r, SeamlessSegment* s, OrtKernelContext* ctx, void* stream,
                                   const int64_t* dims, void* const* data);
long long seamless_segment_replays(void);
