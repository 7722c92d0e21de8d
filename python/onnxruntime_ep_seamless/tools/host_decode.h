/* bench decode-gpu's growing-c loop in C (host_decode.c): what the EP module's cffi unit sees of it
 * (python_api.h declares the same for Python). */
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct {
  const char* ep;                  /* an EP device's EP name; "CUDAExecutionProvider": ORT's, by its CUDA
                                      options; "": ORT's CPU EP */
  const char* const* ep_keys;      /* the EP's options */
  const char* const* ep_values;
  size_t ep_options;
  const char* const* config_keys;  /* session config entries */
  const char* const* config_values;
  size_t configs;
  const void* model;               /* the model's bytes */
  size_t model_bytes;
  const char* const* kv_names;     /* the pasts' names, then the presents' in the same order */
  size_t kv_count;
  int32_t kv_type;                 /* ONNX element type of the KV cache */
  int64_t kv_heads, head_size;
  int kv_on_device;                /* presents on the EP's device (1) or in host memory (0) */
  const int64_t* prompts;          /* rounds * prompt_len: each round's prompt */
  int64_t prompt_len;
  int32_t steps, rounds;
} SeamlessDecodeLoop;

typedef struct {
  int64_t* tokens;                 /* rounds * (steps + 1): each round's greedy tokens */
  double* prompt_s;                /* rounds: each prompt's step (its run and token) */
  double* step_s;                  /* rounds * steps: each decode step (bindings, run, token) */
  double* run_s;                   /* rounds * steps: the run call alone */
  char* error;                     /* a message when the call returns nonzero */
  size_t error_len;
} SeamlessDecodeTimes;

#pragma GCC visibility push(hidden)  /* the module's Python calls it through cffi: not exported */
/* Runs the loop; 0, or nonzero with out->error set. Never aborts the host. */
int seamless_host_decode(const SeamlessDecodeLoop* loop, const SeamlessDecodeTimes* out);
#pragma GCC visibility pop
