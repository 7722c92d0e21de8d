/* A C application's greedy decode loop (bench decode-gpu's growing-c mode): the loop the growing-device
 * mode runs in Python, with every ORT call a plain C call, so that its host cost is what a C or C++
 * application (onnxruntime-genai, a server) pays when it simply feeds each step's presents back as the
 * next step's pasts. No part of the EP, but compiled into the EP module of both variants
 * (ep_plugin/build_plugin.py): it drives the ORT that loaded this library (g_api, any ORT session: ours
 * or ORT's own EPs) through the application side of its C API (ep_plugin/host_slots.def).
 *
 * The model is a decoder as onnxruntime-genai's builder writes it, with `next_token` (int64 [1, n, 1],
 * the greedy token of each position) as its first bound output: inputs input_ids, attention_mask and
 * the pasts, outputs next_token and the presents. Each round: its prompt, then `steps` steps of one
 * token; pasts start empty on the host, every present is allocated by ORT where `kv_memory` says (the
 * EP's device for a GPU run) and bound as is as the next past; next_token comes back in host memory. */
#include <time.h>

#include "glue.h"
#include "host_decode.h"
#include "host_types.h"

#define ORT_API(slot, since, name, ret, params) \
  typedef ret (*host_##name##_fn) params; enum { HOST_SLOT_##name = slot };
#include "host_slots.def"
#undef ORT_API
#define HOST(name) ((host_##name##_fn)g_api[HOST_SLOT_##name])

static double host_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Copies the status' message (prefixed by what failed) into out; nonzero when there was one. */
static int host_failed(OrtStatus* st, const char* what, const SeamlessDecodeTimes* out) {
  if (!st) return 0;
  snprintf(out->error, out->error_len, "%s: %s", what, HOST(GetErrorMessage)(st));
  HOST(ReleaseStatus)(st);
  return 1;
}
#define HOST_TRY(name, ...) do { if (host_failed(HOST(name)(__VA_ARGS__), #name, out)) goto done; } while (0)

static OrtStatus* host_add_ep(const SeamlessDecodeLoop* loop, OrtEnv* env, OrtSessionOptions* so,
                              const OrtMemoryInfo** device_memory) {
  if (!loop->ep[0]) return NULL;
  if (!strcmp(loop->ep, "CUDAExecutionProvider")) {
    OrtCUDAProviderOptionsV2* cuda = NULL;
    OrtStatus* st = HOST(CreateCUDAProviderOptions)(&cuda);
    if (!st) st = HOST(UpdateCUDAProviderOptions)(cuda, loop->ep_keys, loop->ep_values, loop->ep_options);
    if (!st) st = HOST(SessionOptionsAppendExecutionProvider_CUDA_V2)(so, cuda);
    if (cuda) HOST(ReleaseCUDAProviderOptions)(cuda);
    return st;
  }
  const OrtEpDevice* const* devices = NULL;
  size_t n = 0;
  OrtStatus* st = HOST(GetEpDevices)(env, &devices, &n);
  for (size_t i = 0; !st && i < n; i++) {
    if (strcmp(HOST(EpDevice_EpName)(devices[i]), loop->ep)) continue;
    *device_memory = HOST(EpDevice_MemoryInfo)(devices[i], 0 /* OrtDeviceMemoryType_DEFAULT */);
    return HOST(SessionOptionsAppendExecutionProvider_V2)(so, env, &devices[i], 1, loop->ep_keys, loop->ep_values,
                                                          loop->ep_options);
  }
  if (st) return st;
  char msg[256];
  snprintf(msg, sizeof msg, "ORT lists no EP device of %s: register its library first, on a machine with its device",
           loop->ep);
  return seamless_status(2 /* INVALID_ARGUMENT */, msg);
}

/* Runs the loop; 0, or nonzero with out->error set. Never aborts the host. */
int seamless_host_decode(const SeamlessDecodeLoop* loop, const SeamlessDecodeTimes* out) {
  if (!g_api) {
    snprintf(out->error, out->error_len, "ORT has not loaded this library: register it first");
    return 1;
  }
  int failed = 1;
  const int64_t max_len = loop->prompt_len + loop->steps + 1;
  const size_t nkv = loop->kv_count;
  OrtEnv* env = NULL;
  OrtSessionOptions* so = NULL;
  OrtSession* session = NULL;
  OrtMemoryInfo* cpu = NULL;
  OrtMemoryInfo* cuda_memory = NULL;
  const OrtMemoryInfo* device_memory = NULL;
  OrtAllocator* host_allocator = NULL;
  OrtIoBinding* binding = NULL;
  OrtValue** pasts = calloc(nkv, sizeof *pasts);
  int64_t* ids = malloc((size_t)max_len * sizeof *ids);
  int64_t* mask = malloc((size_t)max_len * sizeof *mask);
  static char no_data;  /* an empty past's data pointer */
  if (!pasts || !ids || !mask) { snprintf(out->error, out->error_len, "out of host memory"); goto done; }
  for (int64_t i = 0; i < max_len; i++) mask[i] = 1;

  HOST_TRY(CreateEnv, 3 /* ERROR */, "seamless-host-decode", &env);  /* the process's env, counted */
  HOST_TRY(CreateSessionOptions, &so);
  for (size_t i = 0; i < loop->configs; i++)
    HOST_TRY(AddSessionConfigEntry, so, loop->config_keys[i], loop->config_values[i]);
  if (host_failed(host_add_ep(loop, env, so, &device_memory), "adding the EP", out)) goto done;
  HOST_TRY(CreateSessionFromArray, env, loop->model, loop->model_bytes, so, &session);
  HOST_TRY(CreateCpuMemoryInfo, 1 /* OrtArenaAllocator */, 0 /* OrtMemTypeDefault */, &cpu);
  if (loop->kv_on_device && !device_memory) {  /* ORT's CUDA EP: its device memory as Python's "cuda" names it */
    HOST_TRY(CreateMemoryInfo_V2, "Cuda", 1 /* GPU */, 0x10DE, 0, 0 /* DEFAULT */, 0, 0 /* device allocator */,
             &cuda_memory);
    device_memory = cuda_memory;
  }
  const OrtMemoryInfo* kv_memory = loop->kv_on_device ? device_memory : cpu;
  HOST_TRY(GetAllocatorWithDefaultOptions, &host_allocator);
  HOST_TRY(CreateIoBinding, session, &binding);

  for (int32_t round = 0; round < loop->rounds; round++) {
    int64_t* tokens = out->tokens + (size_t)round * (size_t)(loop->steps + 1);
    const int64_t empty[4] = {1, loop->kv_heads, 0, loop->head_size};
    for (size_t i = 0; i < nkv; i++) {
      if (pasts[i]) HOST(ReleaseValue)(pasts[i]);
      pasts[i] = NULL;
      HOST_TRY(CreateTensorWithDataAsOrtValue, cpu, &no_data, 0, empty, 4, loop->kv_type, &pasts[i]);
    }
    memcpy(ids, loop->prompts + (size_t)round * (size_t)loop->prompt_len, (size_t)loop->prompt_len * sizeof *ids);
    int64_t n = loop->prompt_len, total = loop->prompt_len;
    for (int32_t step = 0; step <= loop->steps; step++, total++) {
      double t0 = host_now();
      OrtValue *ids_value = NULL, *mask_value = NULL, **values = NULL;
      size_t count = 0;
      const int64_t ids_shape[2] = {1, n}, mask_shape[2] = {1, total};
      OrtStatus* st = HOST(CreateTensorWithDataAsOrtValue)(cpu, ids, (size_t)n * sizeof *ids, ids_shape, 2,
                                                           7 /* INT64 */, &ids_value);
      if (!st) st = HOST(CreateTensorWithDataAsOrtValue)(cpu, mask, (size_t)total * sizeof *mask, mask_shape, 2,
                                                         7, &mask_value);
      if (!st) st = HOST(BindInput)(binding, "input_ids", ids_value);  /* binding a name again replaces it */
      if (!st) st = HOST(BindInput)(binding, "attention_mask", mask_value);
      for (size_t i = 0; !st && i < nkv; i++) st = HOST(BindInput)(binding, loop->kv_names[i], pasts[i]);
      if (!st) st = HOST(BindOutputToDevice)(binding, "next_token", cpu);
      for (size_t i = 0; !st && i < nkv; i++)
        st = HOST(BindOutputToDevice)(binding, loop->kv_names[nkv + i], kv_memory);
      double t1 = host_now();
      if (!st) st = HOST(RunWithBinding)(session, NULL, binding);
      double t2 = host_now();
      if (!st) st = HOST(GetBoundOutputValues)(binding, host_allocator, &values, &count);
      if (ids_value) HOST(ReleaseValue)(ids_value);
      if (mask_value) HOST(ReleaseValue)(mask_value);
      if (!st && count != nkv + 1)
        st = seamless_status(1, "the binding did not give back next_token and every present");
      int64_t* token = NULL;
      if (!st) st = HOST(GetTensorMutableData)(values[0], (void**)&token);
      if (!st) {
        tokens[step] = ids[0] = token[n - 1];  /* the last position's greedy token, the next step's id */
        for (size_t i = 0; i < nkv; i++) {
          HOST(ReleaseValue)(pasts[i]);
          pasts[i] = values[1 + i];  /* this step's present, bound as it is as the next past */
          values[1 + i] = NULL;
        }
      }
      for (size_t i = 0; values && i < count; i++)
        if (values[i]) HOST(ReleaseValue)(values[i]);
      if (values) {
        OrtStatus* freed = HOST(AllocatorFree)(host_allocator, values);
        if (st && freed) HOST(ReleaseStatus)(freed);
        else if (freed) st = freed;
      }
      if (host_failed(st, "a decode step", out)) goto done;
      double t3 = host_now();
      if (step == 0) {
        out->prompt_s[round] = t3 - t0;
      } else {
        size_t at = (size_t)round * (size_t)loop->steps + (size_t)(step - 1);
        out->step_s[at] = t3 - t0;
        out->run_s[at] = t2 - t1;
      }
      n = 1;
    }
  }
  failed = 0;
done:
  if (binding) HOST(ReleaseIoBinding)(binding);
  for (size_t i = 0; pasts && i < nkv; i++)
    if (pasts[i]) HOST(ReleaseValue)(pasts[i]);
  if (session) HOST(ReleaseSession)(session);
  if (so) HOST(ReleaseSessionOptions)(so);
  if (cpu) HOST(ReleaseMemoryInfo)(cpu);
  if (cuda_memory) HOST(ReleaseMemoryInfo)(cuda_memory);
  if (env) HOST(ReleaseEnv)(env);
  free(pasts); free(ids); free(mask);
  return failed;
}
