/* A non-Python host: runs a model on SeamlessCPUExecutionProvider through ORT's C API only.
 *
 *   run_model LIBONNXRUNTIME PLUGIN_LIBRARY MODEL [RUNS]
 *
 * LIBONNXRUNTIME is the libonnxruntime.so.1.* of an onnxruntime wheel (dlopen'ed here, no
 * linking, no ORT headers: our own declarations by slot index in ep_plugin/host_slots.def, types from
 * ep_plugin/ort_types.h and host_types.h). MODEL is demo/add.onnx (z = x + y, float, one symbolic dim).
 * Creates an env, registers the plugin, picks its device, disables CPU fallback, creates a
 * session, runs it RUNS times on the main thread and RUNS times on a second thread at once,
 * checks every output exactly, releases everything, unregisters, prints OK.
 * Exit codes: 0 OK, 1 usage, 2 an ORT call returned an error (printed), 3 wrong results. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ort_types.h"
#include "host_types.h"

#define ORT_API(slot, since, name, ret, params) typedef ret (*name##_fn) params; enum { SLOT_##name = slot };
#include "host_slots.def"
#undef ORT_API

#define API_VERSION 23  /* our floor; every slot in host_slots.def exists there */
#define EP_NAME "SeamlessCPUExecutionProvider"
#define N 1000

static void* const* g_api;
#define ORT(name) ((name##_fn)g_api[SLOT_##name])

static int check(OrtStatus* st, const char* what) {
  if (!st) return 0;
  fprintf(stderr, "ERROR %s: [code %d] %s\n", what, ORT(GetErrorCode)(st), ORT(GetErrorMessage)(st));
  ORT(ReleaseStatus)(st);
  return 2;
}
#define CHECK(expr) do { int rc_ = check((expr), #expr); if (rc_) return rc_; } while (0)

typedef struct {
  OrtSession* session;
  const OrtMemoryInfo* cpu;
  int runs;
  float seed;
  int rc;
} Job;

/* runs times: z = x + y with fresh inputs each time, compared exactly */
static int run_many(OrtSession* session, const OrtMemoryInfo* cpu, int runs, float seed) {
  static const char* in_names[] = {"x", "y"};
  static const char* out_names[] = {"z"};
  float x[N], y[N];
  for (int r = 0; r < runs; r++) {
    int64_t n = 1 + (r * 37 + (int)seed) % N;  /* the symbolic dim changes between runs */
    for (int64_t i = 0; i < n; i++) { x[i] = seed + (float)(r * i % 101); y[i] = 0.5f * (float)i - (float)r; }
    OrtValue* inputs[2] = {NULL, NULL};
    OrtValue* z = NULL;
    CHECK(ORT(CreateTensorWithDataAsOrtValue)(cpu, x, (size_t)n * sizeof(float), &n, 1, 1, &inputs[0]));
    CHECK(ORT(CreateTensorWithDataAsOrtValue)(cpu, y, (size_t)n * sizeof(float), &n, 1, 1, &inputs[1]));
    CHECK(ORT(Run)(session, NULL, in_names, (const OrtValue* const*)inputs, 2, out_names, 1, &z));
    OrtTensorTypeAndShapeInfo* info = NULL;
    size_t count = 0;
    float* out = NULL;
    CHECK(ORT(GetTensorTypeAndShape)(z, &info));
    CHECK(ORT(GetTensorShapeElementCount)(info, &count));
    ORT(ReleaseTensorTypeAndShapeInfo)(info);
    CHECK(ORT(GetTensorMutableData)(z, (void**)&out));
    int bad = count != (size_t)n;
    for (int64_t i = 0; !bad && i < n; i++) bad = out[i] != x[i] + y[i];
    ORT(ReleaseValue)(z);
    ORT(ReleaseValue)(inputs[0]);
    ORT(ReleaseValue)(inputs[1]);
    if (bad) { fprintf(stderr, "ERROR: wrong result in run %d (n=%lld, %zu elements)\n", r, (long long)n, count); return 3; }
  }
  return 0;
}

static void* thread_main(void* arg) {
  Job* job = arg;
  job->rc = run_many(job->session, job->cpu, job->runs, job->seed);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s LIBONNXRUNTIME PLUGIN_LIBRARY MODEL [RUNS]\n", argv[0]);
    return 1;
  }
  int runs = argc > 4 ? atoi(argv[4]) : 100;
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) { fprintf(stderr, "ERROR dlopen: %s\n", dlerror()); return 1; }
  const OrtApiBase* (*get_api_base)(void) = (const OrtApiBase* (*)(void))dlsym(lib, "OrtGetApiBase");
  if (!get_api_base) { fprintf(stderr, "ERROR: no OrtGetApiBase in %s\n", argv[1]); return 1; }
  const OrtApiBase* base = get_api_base();
  printf("onnxruntime %s\n", base->GetVersionString());
  g_api = (void* const*)base->GetApi(API_VERSION);
  if (!g_api) { fprintf(stderr, "ERROR: onnxruntime does not offer API %d\n", API_VERSION); return 1; }

  OrtEnv* env = NULL;
  CHECK(ORT(CreateEnv)(2 /* WARNING */, "c_host", &env));
  CHECK(ORT(RegisterExecutionProviderLibrary)(env, "seamless", argv[2]));

  const OrtEpDevice* const* devices = NULL;
  size_t num_devices = 0;
  const OrtEpDevice* ours = NULL;
  CHECK(ORT(GetEpDevices)(env, &devices, &num_devices));
  for (size_t i = 0; i < num_devices && !ours; i++)
    if (strcmp(ORT(EpDevice_EpName)(devices[i]), EP_NAME) == 0) ours = devices[i];
  if (!ours) { fprintf(stderr, "ERROR: no device of %s among %zu\n", EP_NAME, num_devices); return 2; }

  OrtSessionOptions* options = NULL;
  OrtSession* session = NULL;
  OrtMemoryInfo* cpu = NULL;
  CHECK(ORT(CreateSessionOptions)(&options));
  CHECK(ORT(SetIntraOpNumThreads)(options, 1));
  CHECK(ORT(AddSessionConfigEntry)(options, "session.disable_cpu_ep_fallback", "1"));  /* every node on our EP */
  CHECK(ORT(SessionOptionsAppendExecutionProvider_V2)(options, env, &ours, 1, NULL, NULL, 0));
  CHECK(ORT(CreateSession)(env, argv[3], options, &session));
  CHECK(ORT(CreateCpuMemoryInfo)(1 /* arena */, 0 /* default */, &cpu));

  Job job = {session, cpu, runs, 7.0f, 0};
  pthread_t thread;
  if (pthread_create(&thread, NULL, thread_main, &job) != 0) { fprintf(stderr, "ERROR: pthread_create\n"); return 1; }
  int rc = run_many(session, cpu, runs, 1.0f);
  pthread_join(thread, NULL);
  if (rc || job.rc) return rc ? rc : job.rc;
  printf("%d runs on 2 threads: exact\n", 2 * runs);

  ORT(ReleaseMemoryInfo)(cpu);
  ORT(ReleaseSession)(session);
  ORT(ReleaseSessionOptions)(options);
  CHECK(ORT(UnregisterExecutionProviderLibrary)(env, "seamless"));
  ORT(ReleaseEnv)(env);
  printf("OK\n");
  return 0;
}
