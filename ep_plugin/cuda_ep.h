/* onnxruntime-ep-seamless, CUDA variant: what its units share, and what glue.c and the cffi module
 * (python_api_cuda.h) call of them. Compiled into the CUDA variant only:
 *   cuda_driver.c   the NVIDIA driver loaded at run time: its function table, GPUs, primary contexts
 *   cuda_ort.c      what ORT calls: the caching allocator, devices and memory infos, data transfer, streams
 *   cuda_exec.c     what our executor calls: device scratch, kernel modules and launches, copies, cuBLASLt
 *   cuda_capture.c  graph capture: ORT's session capture (enable_cuda_graph=1) and the executor's segments
 *   cuda_replay.c   level A's replays of captured segments (capture=auto) without Python
 * Hidden: shared between the units, never exported from the module. */
#pragma once
#include "cuda_driver.h"
#include "glue.h"

#define SEAMLESS_VENDOR_NVIDIA 0x10DE
#define SEAMLESS_MAX_GPUS 64

#pragma GCC visibility push(hidden)

/* ---- cuda_driver.c ---------------------------------------------------------------------------- */
typedef struct {
#define SEAMLESS_CUDA_FIELD(ret, symbol, field, params) ret (*field) params;
  SEAMLESS_CUDA_FUNCTIONS(SEAMLESS_CUDA_FIELD)
#undef SEAMLESS_CUDA_FIELD
} SeamlessCudaDriver;
extern SeamlessCudaDriver cu;  /* the driver's functions, once seamless_cuda_problem() returned "" */
extern int cu_device_count;

const char* seamless_cuda_problem(void);        /* loads the driver once: "" when usable, else the reason */
OrtStatus* cuda_status(CUresult r, const char* what);
OrtStatus* seamless_cuda_use(int ordinal);      /* GPU `ordinal`'s primary context current on this thread */
#define CU_TRY(call, what) do { CUresult r_ = (call); if (r_) return cuda_status(r_, what); } while (0)

/* ---- cuda_ort.c ------------------------------------------------------------------------------- */
/* the factory's device-facing members (glue.c's seamless_new_factory) */
OrtStatus* factory_cuda_devices(OrtEpFactory* f, const OrtHardwareDevice* const* devices, size_t n,
                                OrtEpDevice** ep_devices, size_t max, size_t* num);
OrtStatus* factory_create_allocator(OrtEpFactory* f, const OrtMemoryInfo* info, const OrtKeyValuePairs* options,
                                    OrtAllocator** out);
void factory_release_allocator(OrtEpFactory* f, OrtAllocator* a);
OrtStatus* factory_create_cuda_transfer(OrtEpFactory* f, OrtDataTransferImpl** out);
bool factory_cuda_stream_aware(const OrtEpFactory* f);
OrtStatus* factory_create_stream(OrtEpFactory* f, const OrtMemoryDevice* device, const OrtKeyValuePairs* options,
                                 OrtSyncStreamImpl** out);
/* The caching allocators' memory (pinned: host memory, else GPU `ordinal`'s): NULL when out of memory. */
void* cuda_cached_alloc(int ordinal, int pinned, size_t size);
void cuda_cached_free(int ordinal, int pinned, void* p);
void transfer_use_stage(int ordinal, CUfunction stage);  /* the staging kernel batched copies launch */
long long seamless_cuda_device_allocations(void);
long long seamless_cuda_device_bytes_in_use(void);

/* ---- cuda_exec.c ------------------------------------------------------------------------------ */
const char* seamless_cuda_problem_text(void);
OrtStatus* seamless_compute_stream(const OrtKernelContext* ctx, void** stream);
uintptr_t seamless_cuda_alloc(int ordinal, size_t size);
void seamless_cuda_free(int ordinal, uintptr_t p);
OrtStatus* seamless_cuda_load_module(int ordinal, const void* image, void** module);
OrtStatus* seamless_cuda_function(void* module, const char* name, void** fn);
OrtStatus* seamless_cuda_allow_shared(void* fn, int bytes);
OrtStatus* seamless_cuda_launch(void* fn, unsigned gx, unsigned gy, unsigned block, unsigned shared, void* stream,
                                const char* packed, const int32_t* offsets, int count, int dependent);
int seamless_cuda_dependent_launch(int ordinal);
OrtStatus* seamless_cuda_device_sync(int ordinal);
OrtStatus* seamless_cuda_copy(uintptr_t dst, uintptr_t src, size_t nbytes, void* stream);
OrtStatus* seamless_cuda_zero(uintptr_t dst, size_t nbytes, void* stream);
OrtStatus* seamless_cuda_sync(void* stream);
const char* seamless_cublas_problem_text(void);
OrtStatus* seamless_cublas_gemm(int ordinal, void* stream, int dtype, int trans_a, int trans_b, int m, int n, int k,
                                uintptr_t a, long long stride_a, uintptr_t b, long long stride_b, uintptr_t c,
                                long long stride_c, int batch, float alpha);

/* ---- cuda_capture.c --------------------------------------------------------------------------- */
typedef struct SeamlessCapture SeamlessCapture;  /* an EP's session capture state */
SeamlessCapture* capture_of(const OrtEp* ep);   /* glue.c: the EP's */
SeamlessCapture* capture_new(int ordinal);
void capture_release(SeamlessCapture* c);
/* the EP's capture members (glue.c's factory_create_ep) */
OrtStatus* capture_on_run_start(OrtEp* ep, const OrtRunOptions* options);
OrtStatus* capture_on_run_end(OrtEp* ep, const OrtRunOptions* options, bool sync_stream);
bool capture_enabled(const OrtEp* ep);
bool capture_is_captured(const OrtEp* ep, int id);
OrtStatus* capture_replay(OrtEp* ep, int id);
OrtGraphCaptureNodeAssignmentPolicy capture_policy(const OrtEp* ep);
OrtStatus* capture_release_graph(OrtEp* ep, int id);
void capture_abort(void);                      /* a Compute failed: end this thread's capture, if any */
int capture_retain(void* ptr, int pinned);     /* 1: memory freed while capturing, kept by the graph */
int capture_under_way(void);                   /* this thread's run warms up or captures a session graph */
int capture_on_stream(CUstream stream);        /* this thread captures on `stream` */
CUgraphExec capture_exec(void* graph);         /* a captured segment's (seamless_segment_end's) executable */
OrtStatus* seamless_cuda_upload(int ordinal, uintptr_t dst, const void* src, size_t nbytes, void* stream);
OrtStatus* seamless_capture_begin(void* stream);
int seamless_capturing(void);
OrtStatus* seamless_segment_begin(void* stream, void** out);
OrtStatus* seamless_segment_end(void* graph, int keep);
void seamless_segment_release(int ordinal, void* graph);
size_t seamless_replay_timing(int on);
size_t seamless_replay_times(float* out, size_t max);

/* ---- cuda_replay.c ---------------------------------------------------------------------------- */
typedef struct SeamlessReplayer SeamlessReplayer;  /* a compiled node's registered segments */

/* One captured segment's plan: exec/cuda_compute.py Segment, field by field (its docstring says what
 * each holds). A length index equal to n_dims stands for a length of 1. */
typedef struct {
  void* graph;                    /* CapturedGraph* (cuda_capture.c) */
  void* stream;                   /* replayed only on the stream it was captured on */
  int64_t capacity, n_dims;       /* n_dims: inputs * max_rank, the size of a run's dims */
  int32_t n_in, n_out, k, n_axis, n_grow, max_rank;
  int64_t* host;                  /* [(n_in + n_out) * STAGE_ENTRY]: the table's host copy */
  uint64_t table;                 /* its device copy */
  const int64_t *in_pos, *in_length, *in_unit, *in_lead;  /* in_lead NULL: not padded at the start */
  const int64_t *out_length, *out_unit, *out_full, *out_src, *out_axis, *out_padded, *grow_at;
  const int32_t* out_ranks;
  int64_t *out_dims, *lengths;    /* rewritten per run: the outputs' dims, their lengths */
  void** out_data;                /* ORT's outputs of this run */
  void* fn;                       /* the outputs' staging launch (NULL: no outputs) */
  uint32_t gx, gy, block, shared;
  const char* packed;
  const int32_t* offsets;
  int32_t count, dependent;
  const uint8_t* key;             /* the binding (seamless_replay_key) */
  uint64_t used;                  /* when it was last launched: least recently used goes first */
} SeamlessSegment;

OrtStatus* replay_compute(SeamlessReplayer* r, OrtKernelContext* ctx, int* done);  /* glue.c's Compute */
SeamlessReplayer* seamless_replayer_new(int n_in, int max_rank, const int64_t* grow_at, int n_grow, int left,
                                        int64_t min_capacity);
void seamless_replayer_free(SeamlessReplayer* r);
size_t seamless_replay_key_size(const SeamlessReplayer* r);
int64_t seamless_replay_key(const SeamlessReplayer* r, const int64_t* dims, const int32_t* ranks, const int32_t* types,
                            uint8_t* key);
int seamless_replay_add(SeamlessReplayer* r, SeamlessSegment* s);
void seamless_replay_remove(SeamlessReplayer* r, SeamlessSegment* s);
int seamless_segment_inputs(SeamlessSegment* s, const int64_t* dims, void* const* data);
void seamless_segment_outputs(SeamlessSegment* s);
OrtStatus* seamless_segment_replay(SeamlessReplayer* r, SeamlessSegment* s, OrtKernelContext* ctx, void* stream,
                                   const int64_t* dims, void* const* data);
long long seamless_segment_replays(void);

#pragma GCC visibility pop
