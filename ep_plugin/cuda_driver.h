/* onnxruntime-ep-seamless: our declarations of the CUDA driver API subset the CUDA variant
 * uses, resolved at run time from the driver's libcuda.so.1 (nothing links against CUDA, so
 * a machine without a GPU or driver gets a clear error, not a loader failure). */
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef int CUresult;               /* 0 = CUDA_SUCCESS */
typedef int CUdevice;
typedef int CUdevice_attribute;     /* enums in cuda.h, of int's size (tests/abi/test_cuda_declarations.py) */
typedef int CUstreamCaptureMode;
typedef int CUfunction_attribute;
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef unsigned long long CUdeviceptr;
typedef struct CUgraph_st* CUgraph;
typedef struct CUgraphExec_st* CUgraphExec;
typedef struct CUgraphNode_st* CUgraphNode;
typedef uint64_t CUgraphConditionalHandle;
typedef int CUstreamCaptureStatus;
typedef int CUgraphNodeType;
typedef int CUgraphConditionalNodeType;

#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define CU_STREAM_NON_BLOCKING 1
#define CU_EVENT_DISABLE_TIMING 2
#define CU_MEMHOSTALLOC_PORTABLE 1
#define CU_MEMHOSTALLOC_DEVICEMAP 2
#define CU_STREAM_CAPTURE_MODE_RELAXED 2  /* the capturing thread may still call cuMemAlloc */
#define CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION 6
#define CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES 8  /* static + dynamic above 48 KiB: opt in */
#define CU_STREAM_CAPTURE_STATUS_ACTIVE 1
#define CU_STREAM_SET_CAPTURE_DEPENDENCIES 1
#define CU_GRAPH_NODE_TYPE_CONDITIONAL 13
#define CU_GRAPH_COND_TYPE_IF 0
#define CU_GRAPH_COND_TYPE_WHILE 1

/* A conditional graph node (an If or a Loop inside a captured segment: cuda_capture.c) */
typedef struct CUgraphEdgeData_st CUgraphEdgeData;  /* opaque to us: passed through as the driver gave it */
typedef struct {
  CUgraphConditionalHandle handle;
  CUgraphConditionalNodeType type;
  unsigned int size;
  CUgraph* phGraph_out;
  CUcontext ctx;
} CUDA_CONDITIONAL_NODE_PARAMS;
typedef struct {
  CUgraphNodeType type;
  int reserved0[3];
  union {
    long long reserved1[29];
    CUDA_CONDITIONAL_NODE_PARAMS conditional;
  };
  long long reserved2;
} CUgraphNodeParams;

/* cuLaunchKernelEx's configuration, with the one attribute we set (programmatic dependent launch) */
typedef int CUlaunchAttributeID;
typedef union {
  char pad[64];
  int programmaticStreamSerializationAllowed;
} CUlaunchAttributeValue;
typedef struct {
  CUlaunchAttributeID id;
  char pad[8 - sizeof(CUlaunchAttributeID)];
  CUlaunchAttributeValue value;
} CUlaunchAttribute;
typedef struct {
  unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute* attrs;
  unsigned int numAttrs;
} CUlaunchConfig;

/* X(return, symbol, field, parameters) */
#define SEAMLESS_CUDA_FUNCTIONS(X)                                                                  \
  X(CUresult, cuInit, init, (unsigned int flags))                                                   \
  X(CUresult, cuGetErrorString, error_string, (CUresult error, const char** text))                  \
  X(CUresult, cuDeviceGetCount, device_count, (int* count))                                         \
  X(CUresult, cuDeviceGet, device_get, (CUdevice* device, int ordinal))                             \
  X(CUresult, cuDeviceGetName, device_name, (char* name, int len, CUdevice device))                 \
  X(CUresult, cuDeviceGetAttribute, device_attribute, (int* value, CUdevice_attribute attribute, CUdevice device)) \
  X(CUresult, cuDevicePrimaryCtxRetain, primary_ctx_retain, (CUcontext* ctx, CUdevice device))      \
  X(CUresult, cuCtxSetCurrent, ctx_set_current, (CUcontext ctx))                                    \
  X(CUresult, cuCtxSynchronize, ctx_synchronize, (void))                                            \
  X(CUresult, cuCtxGetCurrent, ctx_get_current, (CUcontext* ctx))                                   \
  X(CUresult, cuMemAlloc_v2, mem_alloc, (CUdeviceptr* ptr, size_t size))                            \
  X(CUresult, cuMemFree_v2, mem_free, (CUdeviceptr ptr))                                            \
  X(CUresult, cuMemHostAlloc, mem_host_alloc, (void** ptr, size_t size, unsigned int flags))        \
  X(CUresult, cuMemFreeHost, mem_free_host, (void* ptr))                                            \
  X(CUresult, cuMemcpy, memcpy, (CUdeviceptr dst, CUdeviceptr src, size_t size))                    \
  X(CUresult, cuMemcpyAsync, memcpy_async, (CUdeviceptr dst, CUdeviceptr src, size_t size, CUstream stream)) \
  X(CUresult, cuMemsetD8Async, memset_async, (CUdeviceptr dst, unsigned char value, size_t size, CUstream stream)) \
  X(CUresult, cuStreamCreate, stream_create, (CUstream* stream, unsigned int flags))                \
  X(CUresult, cuStreamDestroy_v2, stream_destroy, (CUstream stream))                                \
  X(CUresult, cuStreamSynchronize, stream_synchronize, (CUstream stream))                           \
  X(CUresult, cuStreamWaitEvent, stream_wait_event, (CUstream stream, CUevent event, unsigned int flags)) \
  X(CUresult, cuEventCreate, event_create, (CUevent* event, unsigned int flags))                    \
  X(CUresult, cuEventRecord, event_record, (CUevent event, CUstream stream))                        \
  X(CUresult, cuEventSynchronize, event_synchronize, (CUevent event))                               \
  X(CUresult, cuEventDestroy_v2, event_destroy, (CUevent event))                                    \
  X(CUresult, cuEventElapsedTime, event_elapsed, (float* ms, CUevent start, CUevent end))           \
  X(CUresult, cuModuleLoadData, module_load_data, (CUmodule* module, const void* image))            \
  X(CUresult, cuModuleGetFunction, module_get_function, (CUfunction* fn, CUmodule module, const char* name)) \
  X(CUresult, cuFuncSetAttribute, func_set_attribute, (CUfunction fn, CUfunction_attribute attribute, int value)) \
  X(CUresult, cuLaunchKernel, launch_kernel, (CUfunction fn, unsigned int gx, unsigned int gy, unsigned int gz, \
    unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared, CUstream stream, void** params, void** extra)) \
  X(CUresult, cuLaunchKernelEx, launch_kernel_ex, (const CUlaunchConfig* config, CUfunction fn, void** params,       \
    void** extra))                                                                                  \
  X(CUresult, cuStreamBeginCapture_v2, stream_begin_capture, (CUstream stream, CUstreamCaptureMode mode))             \
  X(CUresult, cuStreamEndCapture, stream_end_capture, (CUstream stream, CUgraph* graph))            \
  X(CUresult, cuGraphInstantiateWithFlags, graph_instantiate, (CUgraphExec* exec, CUgraph graph, unsigned long long flags)) \
  X(CUresult, cuGraphLaunch, graph_launch, (CUgraphExec exec, CUstream stream))                     \
  X(CUresult, cuGraphExecDestroy, graph_exec_destroy, (CUgraphExec exec))                           \
  X(CUresult, cuGraphDestroy, graph_destroy, (CUgraph graph))

/* Conditional graph nodes (drivers for CUDA 12.4 and newer): resolved when the driver has them; without them an If
 * on the GPU is not captured (cuda_capture.c seamless_if_nodes says why). */
#define SEAMLESS_CUDA_GRAPH_FUNCTIONS(X)                                                            \
  X(CUresult, cuGraphConditionalHandleCreate, conditional_handle_create, (CUgraphConditionalHandle* handle, \
    CUgraph graph, CUcontext ctx, unsigned int default_value, unsigned int flags))                  \
  X(CUresult, cuStreamGetCaptureInfo_v3, stream_capture_info, (CUstream stream, CUstreamCaptureStatus* status, \
    uint64_t* id, CUgraph* graph, const CUgraphNode** dependencies, const CUgraphEdgeData** edges, size_t* n)) \
  X(CUresult, cuGraphAddNode_v2, graph_add_node, (CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies, \
    const CUgraphEdgeData* edges, size_t n, CUgraphNodeParams* params))                             \
  X(CUresult, cuStreamUpdateCaptureDependencies_v2, stream_update_capture_dependencies, (CUstream stream, \
    CUgraphNode* dependencies, const CUgraphEdgeData* edges, size_t n, unsigned int flags))         \
  X(CUresult, cuStreamBeginCaptureToGraph, stream_begin_capture_to_graph, (CUstream stream, CUgraph graph, \
    const CUgraphNode* dependencies, const CUgraphEdgeData* edges, size_t n, CUstreamCaptureMode mode))

/* cuBLASLt (libcublasLt.so.13, from NVIDIA's cuBLAS wheel or the CUDA toolkit), our declarations. */
typedef struct cublasLtContext* cublasLtHandle_t;
typedef struct cublasLtMatmulDescOpaque* cublasLtMatmulDesc_t;         /* opaque to us */
typedef struct cublasLtMatrixLayoutOpaque* cublasLtMatrixLayout_t;
typedef struct cublasLtMatmulPreferenceOpaque* cublasLtMatmulPreference_t;
typedef int cublasStatus_t;          /* 0 = CUBLAS_STATUS_SUCCESS */
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t;
typedef struct {
  cublasLtMatmulAlgo_t algo;
  size_t workspace_size;
  cublasStatus_t state;
  float waves_count;
  int reserved[4];
} cublasLtMatmulHeuristicResult_t;
#define CUBLAS_OP_N 0
#define CUBLAS_OP_T 1
#define CUDA_R_32F 0
#define CUDA_R_64F 1
#define CUDA_R_16F 2
#define CUDA_R_16BF 14
#define CUBLAS_COMPUTE_32F 68
#define CUBLAS_COMPUTE_64F 70
#define CUBLASLT_MATMUL_DESC_TRANSA 3                 /* int32 */
#define CUBLASLT_MATMUL_DESC_TRANSB 4                 /* int32 */
#define CUBLASLT_MATMUL_DESC_EPILOGUE 7               /* uint32 */
#define CUBLASLT_MATMUL_DESC_BIAS_POINTER 8           /* const void*, of D's type */
#define CUBLASLT_EPILOGUE_BIAS 4                      /* D = alpha A.B + beta C + bias, per row of D^T */
#define CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT 5          /* int32 */
#define CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET 6 /* int64, in elements */
#define CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES 1    /* uint64 */

#define SEAMLESS_CUBLASLT_FUNCTIONS(X)                                                               \
  X(cublasStatus_t, cublasLtCreate, create, (cublasLtHandle_t* handle))                              \
  X(cublasStatus_t, cublasLtMatmulDescCreate, desc_create, (cublasLtMatmulDesc_t* desc, int compute, int scale)) \
  X(cublasStatus_t, cublasLtMatmulDescSetAttribute, desc_set,                                        \
    (cublasLtMatmulDesc_t desc, int attr, const void* buf, size_t size))                            \
  X(cublasStatus_t, cublasLtMatmulDescDestroy, desc_destroy, (cublasLtMatmulDesc_t desc))            \
  X(cublasStatus_t, cublasLtMatrixLayoutCreate, layout_create,                                       \
    (cublasLtMatrixLayout_t* layout, int type, uint64_t rows, uint64_t cols, int64_t ld))            \
  X(cublasStatus_t, cublasLtMatrixLayoutSetAttribute, layout_set,                                    \
    (cublasLtMatrixLayout_t layout, int attr, const void* buf, size_t size))                        \
  X(cublasStatus_t, cublasLtMatrixLayoutDestroy, layout_destroy, (cublasLtMatrixLayout_t layout))    \
  X(cublasStatus_t, cublasLtMatmulPreferenceCreate, pref_create, (cublasLtMatmulPreference_t* pref)) \
  X(cublasStatus_t, cublasLtMatmulPreferenceSetAttribute, pref_set,                                  \
    (cublasLtMatmulPreference_t pref, int attr, const void* buf, size_t size))                      \
  X(cublasStatus_t, cublasLtMatmulPreferenceDestroy, pref_destroy, (cublasLtMatmulPreference_t pref)) \
  X(cublasStatus_t, cublasLtMatmulAlgoGetHeuristic, heuristic,                                       \
    (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b, \
     cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, int requested,     \
     cublasLtMatmulHeuristicResult_t* results, int* returned))                                        \
  X(cublasStatus_t, cublasLtMatmul, matmul,                                                          \
    (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A, cublasLtMatrixLayout_t a, \
     const void* B, cublasLtMatrixLayout_t b, const void* beta, const void* C, cublasLtMatrixLayout_t c, void* D,   \
     cublasLtMatrixLayout_t d, const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_size,          \
     CUstream stream))
