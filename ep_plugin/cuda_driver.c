/* onnxruntime-ep-seamless, CUDA variant: the NVIDIA driver (libcuda.so.1) loaded at run time, its
 * functions resolved into `cu` by our declarations (cuda_driver.h), and each GPU's primary context.
 * Nothing links against CUDA: a machine without a GPU or driver gets the reason as an error. */
#include <dlfcn.h>

#include "cuda_ep.h"

SeamlessCudaDriver cu;
int cu_device_count;
static char cu_problem[512];  /* why CUDA is unusable, or "" */
static CUcontext cu_contexts[SEAMLESS_MAX_GPUS];

/* Load libcuda.so.1 and start the driver once; "" when usable, else the reason. */
const char* seamless_cuda_problem(void) {
  static int tried;
  if (tried) return cu_problem;
  tried = 1;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(cu_problem, sizeof cu_problem, "the NVIDIA driver library libcuda.so.1 cannot be loaded (%s); "
             "install the NVIDIA driver on this machine", dlerror());
    return cu_problem;
  }
#define SEAMLESS_CUDA_RESOLVE(ret, symbol, field, params)                                            \
  if (!(cu.field = (ret(*) params)dlsym(lib, #symbol))) {                                          \
    snprintf(cu_problem, sizeof cu_problem, "libcuda.so.1 lacks %s: the NVIDIA driver is too old", #symbol); \
    return cu_problem;                                                                             \
  }
  SEAMLESS_CUDA_FUNCTIONS(SEAMLESS_CUDA_RESOLVE)
#undef SEAMLESS_CUDA_RESOLVE
#define SEAMLESS_CUDA_RESOLVE_IF_PRESENT(ret, symbol, field, params) cu.field = (ret(*) params)dlsym(lib, #symbol);
  SEAMLESS_CUDA_GRAPH_FUNCTIONS(SEAMLESS_CUDA_RESOLVE_IF_PRESENT)
#undef SEAMLESS_CUDA_RESOLVE_IF_PRESENT
  CUresult r = cu.init(0);
  if (!r) r = cu.device_count(&cu_device_count);
  if (r) {
    const char* text = "unknown error";
    cu.error_string(r, &text);
    snprintf(cu_problem, sizeof cu_problem, "the CUDA driver failed to start (error %d: %s)", r, text);
  } else if (cu_device_count == 0) {
    snprintf(cu_problem, sizeof cu_problem, "the CUDA driver reports no GPU");
  }
  if (cu_device_count > SEAMLESS_MAX_GPUS) cu_device_count = SEAMLESS_MAX_GPUS;
  return cu_problem;
}

OrtStatus* cuda_status(CUresult r, const char* what) {
  const char* text = "unknown error";
  char msg[512];
  if (cu.error_string) cu.error_string(r, &text);
  snprintf(msg, sizeof msg, "SeamlessCUDAExecutionProvider: %s failed: CUDA error %d (%s)", what, r, text);
  return seamless_status(1, msg);
}

/* Make GPU `ordinal`'s primary context current on this thread. */
OrtStatus* seamless_cuda_use(int ordinal) {
  if (*seamless_cuda_problem()) return seamless_status(1, cu_problem);
  if (ordinal < 0 || ordinal >= cu_device_count) return seamless_status(2, "SeamlessCUDAExecutionProvider: no such GPU");
  if (!cu_contexts[ordinal]) {
    CUdevice dev;
    CU_TRY(cu.device_get(&dev, ordinal), "cuDeviceGet");
    CU_TRY(cu.primary_ctx_retain(&cu_contexts[ordinal], dev), "cuDevicePrimaryCtxRetain");
  }
  CU_TRY(cu.ctx_set_current(cu_contexts[ordinal]), "cuCtxSetCurrent");
  return NULL;
}
