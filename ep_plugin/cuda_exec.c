/* onnxruntime-ep-seamless, CUDA variant: what our executor calls (runtime/cuda.py, exec/), on the
 * CUDA driver API loaded at run time (cuda_driver.c): device scratch memory, kernel modules and
 * launches, copies and syncs on a stream, and cuBLASLt's GEMMs (loaded at run time too). */
#include <dlfcn.h>
#include <pthread.h>

#include "cuda_ep.h"

/* Device scratch for the Python executor, from the same cache as ORT's outputs (cuda_ort.c). Addresses cross to
 * Python as integers (uintptr_t), which cffi passes without building pointer objects; 0: out of memory. */
uintptr_t seamless_cuda_alloc(int ordinal, size_t size) { return (uintptr_t)cuda_cached_alloc(ordinal, 0, size); }

void seamless_cuda_free(int ordinal, uintptr_t p) {
  if (capture_retain((void*)p, 0)) return;  /* a graph being captured keeps it */
  cuda_cached_free(ordinal, 0, (void*)p);
}

/* ---- kernels, copies, syncs ------------------------------------------------------------------ */
const char* seamless_cuda_problem_text(void) { return seamless_cuda_problem(); }

OrtStatus* seamless_compute_stream(const OrtKernelContext* ctx, void** stream) {
  return ORT(KernelContext_GetGPUComputeStream)(ctx, stream);
}

OrtStatus* seamless_cuda_load_module(int ordinal, const void* image, void** module) {
  TRY(seamless_cuda_use(ordinal));
  CU_TRY(cu.module_load_data((CUmodule*)module, image), "cuModuleLoadData");
  CUfunction stage = NULL;  /* for batched transfers (cuda_ort.c transfer_copy) */
  if (!cu.module_get_function(&stage, (CUmodule)*module, "seamless_stage")) transfer_use_stage(ordinal, stage);
  return NULL;
}

OrtStatus* seamless_cuda_function(void* module, const char* name, void** fn) {
  CU_TRY(cu.module_get_function((CUfunction*)fn, (CUmodule)module, name), "cuModuleGetFunction");
  return NULL;
}

/* Lets fn's launches take up to `bytes` of dynamic shared memory (without it, static and dynamic share 48 KiB). */
OrtStatus* seamless_cuda_allow_shared(void* fn, int bytes) {
  CU_TRY(cu.func_set_attribute((CUfunction)fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes),
         "cuFuncSetAttribute (dynamic shared memory)");
  return NULL;
}

/* A kernel on a (gx, gy) grid of 1-D blocks. Its `count` arguments arrive packed in one buffer of `nbytes`,
 * argument i at byte `offsets[i]`: Python packs them with one struct call instead of a cffi object each.
 * dependent: launched with programmatic dependent launch (sm_90+; runtime/cuda.py decides), so it
 * may start while the kernel before it finishes: every kernel waits for that at its start
 * (native/cuda/common.cuh dependent_launch) and lets the next one start right away. */
#define SEAMLESS_MAX_KERNEL_ARGS 32
OrtStatus* seamless_cuda_launch(void* fn, unsigned gx, unsigned gy, unsigned block, unsigned shared, void* stream,
                                const char* packed, size_t nbytes, const int32_t* offsets, int count, int dependent) {
  void* args[SEAMLESS_MAX_KERNEL_ARGS];
  if (count < 0 || count > SEAMLESS_MAX_KERNEL_ARGS)
    return seamless_status(1, "SeamlessCUDAExecutionProvider: a kernel launch with more than 32 arguments");
  if (capture_listing((CUstream)stream)) return list_launch(fn, gx, gy, block, shared, packed, nbytes, offsets, count,
                                                            dependent);
  for (int i = 0; i < count; i++) args[i] = (void*)(packed + offsets[i]);
  if (!dependent) {
    CU_TRY(cu.launch_kernel((CUfunction)fn, gx, gy, 1, block, 1, 1, shared, (CUstream)stream, args, NULL),
           "cuLaunchKernel");
    return NULL;
  }
  CUlaunchAttribute attribute = {.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION};
  attribute.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig config = {gx, gy, 1, block, 1, 1, shared, (CUstream)stream, &attribute, 1};
  CU_TRY(cu.launch_kernel_ex(&config, (CUfunction)fn, args, NULL), "cuLaunchKernelEx");
  return NULL;
}

/* Attribute `attribute` of GPU `ordinal`, 0 where the driver does not tell. */
static int device_attribute(int ordinal, CUdevice_attribute attribute) {
  CUdevice dev;
  int value = 0;
  OrtStatus* st = seamless_cuda_use(ordinal);
  if (st) {
    ORT(ReleaseStatus)(st);
    return 0;
  }
  return !cu.device_get(&dev, ordinal) && !cu.device_attribute(&value, attribute, dev) ? value : 0;
}

/* Whether GPU `ordinal` takes programmatic dependent launches (compute capability 9.0 and up). */
int seamless_cuda_dependent_launch(int ordinal) {
  return device_attribute(ordinal, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) >= 9;
}

/* GPU `ordinal`'s streaming multiprocessors (0 where the driver does not tell): how many blocks a wave holds. */
int seamless_cuda_multiprocessors(int ordinal) {
  return device_attribute(ordinal, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
}

/* Every stream of GPU `ordinal` finished: a compiled node's release waits so before its memory is reused. */
OrtStatus* seamless_cuda_device_sync(int ordinal) {
  OrtStatus* st = seamless_cuda_use(ordinal);
  if (st) return st;
  CU_TRY(cu.ctx_synchronize(), "cuCtxSynchronize");
  return NULL;
}

OrtStatus* seamless_cuda_copy(uintptr_t dst, uintptr_t src, size_t nbytes, void* stream) {
  if (capture_listing((CUstream)stream)) return list_copy(dst, src, nbytes, 0);
  CU_TRY(cu.memcpy_async((CUdeviceptr)dst, (CUdeviceptr)src, nbytes, (CUstream)stream),
         "cuMemcpyAsync");
  return NULL;
}

OrtStatus* seamless_cuda_zero(uintptr_t dst, size_t nbytes, void* stream) {
  if (capture_listing((CUstream)stream)) return list_copy(dst, 0, nbytes, 1);
  CU_TRY(cu.memset_async((CUdeviceptr)dst, 0, nbytes, (CUstream)stream), "cuMemsetD8Async");
  return NULL;
}

OrtStatus* seamless_cuda_sync(void* stream) {
  CU_TRY(cu.stream_synchronize((CUstream)stream), "cuStreamSynchronize");
  return gpu_report_take(stream);
}

/* ---- bad values found on the GPU ------------------------------------------------------------
 * A kernel that finds an index, length or divisor out of range in the run's data (values only the GPU
 * holds) bounds its own access and writes {tag, value} to its stream's report: pinned host memory the
 * GPU writes through (native/cuda/common.cuh report_bad). The host reads the report whenever it has
 * waited for that stream (a value read back, the outputs' copy, the run's end) and fails the run with
 * the status and text registered for the tag (kernels/checks.py GpuCheck: the node and the cause). */
typedef struct { CUstream stream; volatile int64_t* report; } StreamReport;
typedef struct { char* text; int code; } CheckTag;
static pthread_mutex_t g_report_lock = PTHREAD_MUTEX_INITIALIZER;
static StreamReport* g_reports;  /* never freed: a captured graph keeps writing where it was captured */
static size_t g_n_reports;
static CheckTag* g_tags;
static size_t g_n_tags;

static volatile int64_t* report_of(CUstream stream) {  /* with g_report_lock held */
  for (size_t i = 0; i < g_n_reports; i++)
    if (g_reports[i].stream == stream) return g_reports[i].report;
  return NULL;
}

uintptr_t seamless_gpu_report(void* stream) {
  stream = capture_parent((CUstream)stream);  /* an If's branch reports where its segment's stream does */
  pthread_mutex_lock(&g_report_lock);
  volatile int64_t* report = report_of((CUstream)stream);
  StreamReport* slot = NULL;
  for (size_t i = 0; !report && !slot && i < g_n_reports; i++)
    if (!g_reports[i].stream) slot = &g_reports[i];  /* a released stream's: reused */
  if (!report && !slot) {
    void* p = NULL;
    StreamReport* grown = realloc(g_reports, (g_n_reports + 1) * sizeof *grown);
    if (grown) g_reports = grown;
    if (grown && !cu.mem_host_alloc(&p, 2 * sizeof(int64_t), CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP)) {
      slot = &g_reports[g_n_reports++];
      slot->report = p;
    }
  }
  if (slot) {
    slot->stream = (CUstream)stream;
    slot->report[0] = slot->report[1] = 0;
    report = slot->report;
  }
  pthread_mutex_unlock(&g_report_lock);
  return (uintptr_t)report;  /* unified addressing: the GPU writes it at its host address */
}

void gpu_report_forget(CUstream stream) {
  pthread_mutex_lock(&g_report_lock);
  for (size_t i = 0; i < g_n_reports; i++)
    if (g_reports[i].stream == stream) g_reports[i].stream = NULL;
  pthread_mutex_unlock(&g_report_lock);
}

int64_t seamless_gpu_check_tag(const char* text, int code) {
  int64_t tag = 0;
  pthread_mutex_lock(&g_report_lock);
  for (size_t i = 0; i < g_n_tags && !tag; i++)
    if (g_tags[i].code == code && !strcmp(g_tags[i].text, text)) tag = (int64_t)i + 1;
  CheckTag* grown = tag ? NULL : realloc(g_tags, (g_n_tags + 1) * sizeof *grown);
  char* copy = grown ? strdup(text) : NULL;
  if (grown) g_tags = grown;
  if (copy) {
    g_tags[g_n_tags++] = (CheckTag){copy, code};
    tag = (int64_t)g_n_tags;
  }
  pthread_mutex_unlock(&g_report_lock);
  return tag;  /* 0: out of memory (the value is then bounded, not reported) */
}

OrtStatus* gpu_report_take(void* stream) {
  pthread_mutex_lock(&g_report_lock);
  volatile int64_t* report = report_of((CUstream)stream);
  int64_t tag = report ? report[0] : 0, value = report ? report[1] : 0;
  if (tag) report[0] = 0;
  const CheckTag* t = tag > 0 && (size_t)tag <= g_n_tags ? &g_tags[tag - 1] : NULL;
  int code = t ? t->code : 0;
  char text[1024];
  if (t) {  /* the value where the text says {value} */
    const char* at = strstr(t->text, "{value}");
    if (at) snprintf(text, sizeof text, "%.*s%lld%s", (int)(at - t->text), t->text, (long long)value, at + 7);
    else snprintf(text, sizeof text, "%s", t->text);
  }
  pthread_mutex_unlock(&g_report_lock);
  return code ? seamless_status(code, text) : NULL;
}

/* ---- cuBLASLt ----------------------------------------------------------------------------- */
static struct {
#define SEAMLESS_CUBLASLT_FIELD(ret, symbol, field, params) ret (*field) params;
  SEAMLESS_CUBLASLT_FUNCTIONS(SEAMLESS_CUBLASLT_FIELD)
#undef SEAMLESS_CUBLASLT_FIELD
} lt;
static char cublas_problem[1024];

/* Load cuBLASLt once: SEAMLESS_CUBLASLT names the library, else the loader's search path (Python
 * preloads it from NVIDIA's wheel before registering; see runtime/cuda.py). */
static const char* seamless_cublas_problem(void) {
  static int tried;
  if (tried) return cublas_problem;
  tried = 1;
  const char* name = getenv("SEAMLESS_CUBLASLT");
  void* lib = dlopen(name && *name ? name : "libcublasLt.so.13", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(cublas_problem, sizeof cublas_problem, "cuBLASLt (libcublasLt.so.13) cannot be loaded (%s). Fix: pip "
             "install 'nvidia-cublas>=13,<14' (or install the CUDA 13 toolkit's libraries)", dlerror());
    return cublas_problem;
  }
#define SEAMLESS_CUBLASLT_RESOLVE(ret, symbol, field, params)                                        \
  if (!(lt.field = (ret(*) params)dlsym(lib, #symbol))) {                                          \
    snprintf(cublas_problem, sizeof cublas_problem, "libcublasLt.so.13 lacks %s", #symbol);        \
    return cublas_problem;                                                                         \
  }
  SEAMLESS_CUBLASLT_FUNCTIONS(SEAMLESS_CUBLASLT_RESOLVE)
#undef SEAMLESS_CUBLASLT_RESOLVE
  return cublas_problem;
}

const char* seamless_cublas_problem_text(void) { return seamless_cublas_problem(); }

/* One GEMM shape's cuBLASLt plan: descriptors and the heuristic's algorithm, made once. */
typedef struct {
  long long key[13];
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatmulAlgo_t algo;
} GemmPlan;

#define SEAMLESS_GEMM_PLANS 512                    /* per thread; the oldest is replaced beyond that */
#define SEAMLESS_GEMM_WORKSPACE (32u << 20)        /* bytes, per thread and GPU, allocated once */

static void gemm_plan_destroy(GemmPlan* p) {
  if (p->desc) lt.desc_destroy(p->desc);
  if (p->a) lt.layout_destroy(p->a);
  if (p->b) lt.layout_destroy(p->b);
  if (p->c) lt.layout_destroy(p->c);
  memset(p, 0, sizeof *p);
}

static cublasStatus_t layout(cublasLtMatrixLayout_t* out, int type, uint64_t rows, uint64_t cols, int batch,
                             long long stride) {
  cublasStatus_t st = lt.layout_create(out, type, rows, cols, (int64_t)rows);
  int32_t count = batch;
  int64_t offset = stride;
  if (!st && batch > 1) st = lt.layout_set(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count);
  if (!st && batch > 1) st = lt.layout_set(*out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &offset, sizeof offset);
  return st;
}

/* Row-major C[b] = alpha A[b] . B[b] (+ bias) (A: m x k, or k x m with trans_a; B: k x n, or n x k with
 * trans_b), float32, float16 or bfloat16 (dtype: ONNX numbering 1, 10, 16) with float32 accumulation,
 * or float64 (11) throughout (MatMulInteger's exact integer sums). c_dtype: C's type, dtype's or float32 (1).
 * bias: 0, or n values of C's type added to every row (batch 1) before C is rounded (cuBLASLt's bias epilogue;
 * its beta C with a 16-bit C rounds the product first).
 * In cuBLASLt's column-major terms that is C^T = B^T . A^T: B is the first operand. */
OrtStatus* seamless_cublas_gemm(int ordinal, void* stream, int dtype, int trans_a, int trans_b, int m, int n, int k,
                                uintptr_t a, long long stride_a, uintptr_t b, long long stride_b, uintptr_t c,
                                long long stride_c, int batch, float alpha, int c_dtype, uintptr_t bias) {
  GemmCall call = {ordinal, dtype, trans_a, trans_b, m, n, k, batch, c_dtype, a, b, c, bias, stride_a, stride_b,
                   stride_c, alpha};
  return capture_listing((CUstream)stream) ? list_gemm(&call) : gemm_run(&call, (CUstream)stream);
}

OrtStatus* gemm_run(const GemmCall* call, CUstream stream) {
  int ordinal = call->ordinal, dtype = call->dtype, trans_a = call->trans_a, trans_b = call->trans_b, m = call->m;
  int n = call->n, k = call->k, batch = call->batch, c_dtype = call->c_dtype;
  uintptr_t a = call->a, b = call->b, c = call->c, bias = call->bias;
  long long stride_a = call->stride_a, stride_b = call->stride_b, stride_c = call->stride_c;
  float alpha = call->alpha;
  static __thread cublasLtHandle_t handle;
  static __thread void* workspace[SEAMLESS_MAX_GPUS];
  static __thread GemmPlan plans[SEAMLESS_GEMM_PLANS];
  static __thread int next_victim;
  if (*seamless_cublas_problem()) return seamless_status(1, cublas_problem);
  TRY(seamless_cuda_use(ordinal));
  char msg[200];
  cublasStatus_t st = 0;
  if (!handle && (st = lt.create(&handle))) {
    snprintf(msg, sizeof msg, "SeamlessCUDAExecutionProvider: cublasLtCreate failed (status %d)", st);
    return seamless_status(1, msg);
  }
  if (!workspace[ordinal] && !(workspace[ordinal] = (void*)seamless_cuda_alloc(ordinal, SEAMLESS_GEMM_WORKSPACE)))
    return seamless_status(1, "SeamlessCUDAExecutionProvider: out of GPU memory (cuBLASLt's workspace)");
  if (bias && batch != 1) return seamless_status(1, "SeamlessCUDAExecutionProvider: a GEMM bias takes batch 1");
  long long key[13] = {ordinal + 1, dtype, trans_a, trans_b, m, n, k, stride_a, stride_b, stride_c, batch, c_dtype,
                       bias != 0};
  GemmPlan* plan = NULL;
  for (int i = 0; i < SEAMLESS_GEMM_PLANS && plans[i].desc; i++)
    if (!memcmp(plans[i].key, key, sizeof key)) { plan = &plans[i]; break; }
  if (!plan) {
    int free_slot = -1;
    for (int i = 0; i < SEAMLESS_GEMM_PLANS; i++)
      if (!plans[i].desc) { free_slot = i; break; }
    if (free_slot < 0) {
      free_slot = next_victim;
      next_victim = (next_victim + 1) % SEAMLESS_GEMM_PLANS;
      gemm_plan_destroy(&plans[free_slot]);
    }
    plan = &plans[free_slot];
    int type = dtype == 10 ? CUDA_R_16F : dtype == 16 ? CUDA_R_16BF : dtype == 11 ? CUDA_R_64F : CUDA_R_32F;
    int c_type = c_dtype == dtype ? type : CUDA_R_32F;
    int32_t op_first = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_second = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    uint64_t ws = SEAMLESS_GEMM_WORKSPACE;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t found;
    int returned = 0;
    if (!st) st = dtype == 11 ? lt.desc_create(&plan->desc, CUBLAS_COMPUTE_64F, CUDA_R_64F)
                              : lt.desc_create(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (!st) st = lt.desc_set(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first);
    if (!st) st = lt.desc_set(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second);
    uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    if (!st && bias) st = lt.desc_set(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
    if (!st && bias) st = lt.desc_set(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    /* column-major as stored: B^T is n x k (k x n when transposed), A^T k x m (m x k), C^T n x m */
    if (!st) st = layout(&plan->a, type, trans_b ? k : n, trans_b ? n : k, batch, stride_b);
    if (!st) st = layout(&plan->b, type, trans_a ? m : k, trans_a ? k : m, batch, stride_a);
    if (!st) st = layout(&plan->c, c_type, n, m, batch, stride_c);
    if (!st) st = lt.pref_create(&pref);
    if (!st) st = lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (!st) st = lt.heuristic(handle, plan->desc, plan->a, plan->b, plan->c, plan->c, pref, 1, &found, &returned);
    if (pref) lt.pref_destroy(pref);
    if (st || returned < 1) {
      gemm_plan_destroy(plan);
      snprintf(msg, sizeof msg, "SeamlessCUDAExecutionProvider: cuBLASLt has no algorithm for a %dx%dx%d GEMM "
               "(batch %d, ONNX type %d; status %d)", m, n, k, batch, dtype, st);
      return seamless_status(1, msg);
    }
    plan->algo = found.algo;
    memcpy(plan->key, key, sizeof key);
  }
  float beta = 0.0f;
  double alpha64 = alpha, beta64 = 0.0;  /* the scale type is the compute type's */
  if (bias && (st = lt.desc_set(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias))) {
    snprintf(msg, sizeof msg, "SeamlessCUDAExecutionProvider: cuBLASLt refused a bias (status %d)", st);
    return seamless_status(1, msg);
  }
  st = lt.matmul(handle, plan->desc, dtype == 11 ? (const void*)&alpha64 : &alpha, (const void*)b, plan->a,
                 (const void*)a, plan->b, dtype == 11 ? (const void*)&beta64 : &beta, (void*)c, plan->c, (void*)c,
                 plan->c, &plan->algo,
                 workspace[ordinal], SEAMLESS_GEMM_WORKSPACE, (CUstream)stream);
  if (st) {
    snprintf(msg, sizeof msg, "SeamlessCUDAExecutionProvider: cublasLtMatmul failed (status %d)", st);
    return seamless_status(1, msg);
  }
  return NULL;
}
