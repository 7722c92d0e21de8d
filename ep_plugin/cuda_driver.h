/* onnxruntime-ep-seamless: our declarations of the CUDA driver API subset the CUDA variant
 * uses, resolved at run time from the driver's libcuda.so.1 (nothing links against CUDA, so
 * a machine without a GPU or driver gets a clear error, not a loader failure). */
#pragma once
#include <stddef.h>

typedef int CUresult;               /* 0 = CUDA_SUCCESS */
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef unsigned long long CUdeviceptr;

#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define CU_STREAM_NON_BLOCKING 1
#define CU_EVENT_DISABLE_TIMING 2

/* X(return, symbol, field, parameters) */
#define SEAMLESS_CUDA_FUNCTIONS(X)                                                                  \
  X(CUresult, cuInit, init, (unsigned int flags))                                                   \
  X(CUresult, cuGetErrorString, error_string, (CUresult error, const char** text))                  \
  X(CUresult, cuDeviceGetCount, device_count, (int* count))                                         \
  X(CUresult, cuDeviceGet, device_get, (CUdevice* device, int ordinal))                             \
  X(CUresult, cuDeviceGetName, device_name, (char* name, int len, CUdevice device))                 \
  X(CUresult, cuDeviceGetAttribute, device_attribute, (int* value, int attribute, CUdevice device)) \
  X(CUresult, cuDevicePrimaryCtxRetain, primary_ctx_retain, (CUcontext* ctx, CUdevice device))      \
  X(CUresult, cuCtxSetCurrent, ctx_set_current, (CUcontext ctx))                                    \
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
  X(CUresult, cuModuleLoadData, module_load_data, (CUmodule* module, const void* image))            \
  X(CUresult, cuModuleGetFunction, module_get_function, (CUfunction* fn, CUmodule module, const char* name)) \
  X(CUresult, cuLaunchKernel, launch_kernel, (CUfunction fn, unsigned int gx, unsigned int gy, unsigned int gz, \
    unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared, CUstream stream, void** params, void** extra))

/* cuBLAS (libcublas.so.13, from NVIDIA's runtime wheel or the CUDA toolkit), our declarations. */
typedef struct cublasContext* cublasHandle_t;
typedef int cublasStatus_t;          /* 0 = CUBLAS_STATUS_SUCCESS */
#define CUBLAS_OP_N 0
#define CUBLAS_OP_T 1
#define CUDA_R_32F 0
#define CUDA_R_16F 2
#define CUDA_R_16BF 14
#define CUBLAS_COMPUTE_32F 68
#define CUBLAS_GEMM_DEFAULT (-1)

#define SEAMLESS_CUBLAS_FUNCTIONS(X)                                                                 \
  X(cublasStatus_t, cublasCreate_v2, create, (cublasHandle_t* handle))                               \
  X(cublasStatus_t, cublasSetStream_v2, set_stream, (cublasHandle_t handle, CUstream stream))        \
  X(cublasStatus_t, cublasGemmStridedBatchedEx, gemm_strided_batched,                               \
    (cublasHandle_t handle, int transa, int transb, int m, int n, int k, const void* alpha, const void* A, \
     int a_type, int lda, long long stride_a, const void* B, int b_type, int ldb, long long stride_b, \
     const void* beta, void* C, int c_type, int ldc, long long stride_c, int batch, int compute_type, int algo))
