/* onnxruntime-ep-seamless, CUDA variant: what its units share, and what glue.c and the cffi module
 * (python_api_cuda.h) call of them. Compiled into the CUDA variant only:
 *   cuda_driver.c   the NVIDIA driver loaded at run time: its function table, GPUs, primary contexts
 *   cuda_ort.c      what ORT calls: the caching allocator, devices and memory infos, data transfer, streams
 *   cuda_exec.c     what our executor calls: device scratch, kernel modules and launches, copies, cuBLASLt
 *   cuda_capture.c  graph capture: ORT's session capture (enable_cuda_graph=1) and the executor's segments
 *   cuda_replay.c   level A's replays of captured segments (capture=auto) without Python
 * Hidden: shared between the units, never exported from the module. */
#pragma once
#include <stdint.h>

#include "args.h"  /* native/cuda: the kernels' argument structs (StageCopy: staging tables) */
#include "cuda_driver.h"
#include "glue.h"

#define SEAMLESS_VENDOR_NVIDIA 0x10DE
#define SEAMLESS_MAX_GPUS 64

#pragma GCC visibility push(hidden)

#include "python_api_cuda.h"  /* what the cffi module calls: declared once, there */

/* ---- cuda_driver.c ---------------------------------------------------------------------------- */
typedef struct {
#define SEAMLESS_CUDA_FIELD(ret, symbol, field, params) ret (*field) params;
  SEAMLESS_CUDA_FUNCTIONS(SEAMLESS_CUDA_FIELD)
  SEAMLESS_CUDA_GRAPH_FUNCTIONS(SEAMLESS_CUDA_FIELD)  /* NULL where the driver lacks them */
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

/* ---- cuda_exec.c: what python_api_cuda.h declares, and -------------------------------------- */
typedef struct {  /* seamless_cublas_gemm's arguments but the stream (a launch program keeps them) */
  int ordinal, dtype, trans_a, trans_b, m, n, k, batch, c_dtype;
  uintptr_t a, b, c, bias;
  long long stride_a, stride_b, stride_c;
  float alpha;
} GemmCall;
OrtStatus* gemm_run(const GemmCall* call, CUstream stream);
OrtStatus* gpu_report_take(void* stream);  /* after waiting for `stream`: the bad value it reported, as a status */
void gpu_report_forget(CUstream stream);   /* a released stream's report is free for another */

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
CUstream capture_parent(CUstream stream);      /* an If branch's body stream: the stream whose capture holds it */
OrtStatus* capture_launch(void* graph, CUstream stream);  /* a kept segment: its graph or its launch program */
/* recording a launch program (seamless_segment_begin with `listed`): this thread records on `stream` */
int capture_listing(CUstream stream);
OrtStatus* list_launch(void* fn, unsigned gx, unsigned gy, unsigned block, unsigned shared, const char* packed,
                       size_t nbytes, const int32_t* offsets, int count, int dependent);
OrtStatus* list_copy(uintptr_t dst, uintptr_t src, size_t nbytes, int zero);  /* zero: dst's bytes set to 0 */
OrtStatus* list_gemm(const GemmCall* call);

/* ---- cuda_replay.c (and python_api_cuda.h's seamless_replay*, seamless_segment*) ------------------ */
OrtStatus* replay_compute(SeamlessReplayer* r, OrtKernelContext* ctx, int* done);  /* glue.c's Compute */

#pragma GCC visibility pop
