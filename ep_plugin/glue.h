/* onnxruntime-ep-seamless: what glue.c shares with the other C units of the EP module (the CUDA
 * variant's cuda_*.c, bench's tools/host_decode.c): the ORT API tables it negotiated and helpers over
 * them. Hidden: shared between the units, never exported from the module. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ort_types.h"

#define ORT_API(slot, since, name, ret, params) typedef ret (*name##_fn) params; enum { SLOT_##name = slot };
#define ORT_EP_API(slot, since, name, ret, params) typedef ret (*name##_fn) params; enum { EP_SLOT_##name = slot };
#include "ort_slots.def"
#undef ORT_API
#undef ORT_EP_API

#define SEAMLESS_ORT_API_MAX 27   /* the struct layouts in ort_types.h (the floor: glue.c) */

/* The metadata key of every OrtEpDevice we create: which registration of the library made it, so that
 * onnxruntime_ep_seamless.get_devices() keeps one factory's devices when the library is registered twice. */
#define SEAMLESS_REGISTRATION_KEY "seamless_registration"

#pragma GCC visibility push(hidden)
#include "python_api_runner.h"  /* what the cffi module calls of cpu_runner.c: declared once, there */
extern void* const* g_api;      /* the OrtApi table of the negotiated version; NULL until ORT loads us */
extern void* const* g_ep_api;   /* its OrtEpApi table */

OrtStatus* seamless_status(int code, const char* msg);
int seamless_get_inputs(const OrtKernelContext* ctx, size_t n, void** data, size_t* nbytes, int32_t* types,
                        int32_t* ranks, int64_t* dims, size_t max_rank, uint8_t* changed, OrtStatus** status);
OrtStatus* seamless_get_outputs(OrtKernelContext* ctx, size_t n, const int32_t* ranks, const int64_t* dims,
                                size_t max_rank, void** data);
const char* factory_registration(const OrtEpFactory* f);  /* the registration name a factory tags its devices with */
void seamless_parallel_for(void* ctx, void (*fn)(void*, size_t), size_t n, void* user);
/* cpu_runner.c: a Compute answered from a native program (*done = 1), else left to Python */
OrtStatus* runner_compute(SeamlessRunner* r, OrtKernelContext* ctx, int* done);
#pragma GCC visibility pop

#define ORT(name) ((name##_fn)g_api[SLOT_##name])
#define ORT_EP(name) ((name##_fn)g_ep_api[EP_SLOT_##name])
#define TRY(expr) do { OrtStatus* st_ = (expr); if (st_) return st_; } while (0)
