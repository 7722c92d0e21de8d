/* What the Python side of the EP sees of the C glue (cffi cdef; no preprocessor). */
typedef struct OrtStatus OrtStatus;
typedef struct OrtLogger OrtLogger;
typedef struct OrtEpFactory OrtEpFactory;
typedef struct OrtGraph OrtGraph;
typedef struct OrtNode OrtNode;
typedef struct OrtEpGraphSupportInfo OrtEpGraphSupportInfo;
typedef struct OrtKernelContext OrtKernelContext;

extern "Python" {
  int py_ready(void);
  OrtStatus* py_create_factories(const char* registered_name, const OrtLogger* logger, OrtEpFactory** factories,
                                 size_t max_factories, size_t* num_factories);
  void py_release_handle(void* handle);
  OrtStatus* py_create_ep(void* factory_handle, const char* const* keys, const char* const* values, size_t n,
                          int device_ordinal, const OrtLogger* logger, void** ep_handle, int* graph_capture);
  OrtStatus* py_get_capability(void* ep_handle, const OrtGraph* graph, OrtEpGraphSupportInfo* info);
  OrtStatus* py_compile(void* ep_handle, const OrtGraph* graph, const OrtNode* fused_node, void** kernel_handle,
                        void** native);
  OrtStatus* py_compute(void* kernel_handle, OrtKernelContext* ctx);
  OrtStatus* py_custom_ops(void* factory_handle, OrtEpFactory* factory);
  int py_infer_shapes(void* factory_handle, int32_t op, size_t n, const int32_t* types, const int32_t* ranks,
                      const int64_t* dims, size_t max_rank, size_t n_out, int32_t* out_types, int32_t* out_ranks,
                      int64_t* out_dims);
}

OrtStatus* seamless_status(int code, const char* msg);
void seamless_release_status(OrtStatus* status);
const char* seamless_status_message(OrtStatus* status);
int seamless_status_code(OrtStatus* status);
uint32_t seamless_api_version(void);
OrtStatus* seamless_set_custom_ops(OrtEpFactory* factory, size_t n, const char* const* domains,
                                   const char* const* names, const int32_t* since, const int32_t* until,
                                   const int32_t* n_in, const int32_t* required_in, const int32_t* n_out,
                                   const int32_t* types, const int32_t* ids, const int32_t* infers);
OrtEpFactory* seamless_new_factory(void* handle, const char* name, const char* vendor, const char* version, int hw_type);
OrtStatus* seamless_dump_graph(const OrtGraph* graph, const OrtNode* fused, size_t const_limit, char** out, size_t* out_len);
OrtStatus* seamless_fuse_nodes(const OrtGraph* graph, OrtEpGraphSupportInfo* info, const int32_t* idx, size_t count);
int seamless_get_inputs(const OrtKernelContext* ctx, size_t n, void** data, size_t* nbytes, int32_t* types,
                        int32_t* ranks, int64_t* dims, size_t max_rank, uint8_t* changed, OrtStatus** status);
OrtStatus* seamless_read_input(const OrtKernelContext* ctx, size_t i, char** out, size_t* out_len);
OrtStatus* seamless_write_strings(OrtKernelContext* ctx, size_t i, const int64_t* dims, size_t rank,
                                  const char* const* strings, size_t n);
void seamless_inputs_on_host(const OrtKernelContext* ctx, size_t n, uint8_t* on_host);
OrtStatus* seamless_get_outputs(OrtKernelContext* ctx, size_t n, const int32_t* ranks, const int64_t* dims,
                                size_t max_rank, void** data);
void seamless_parallel_for(void* ctx, void (*fn)(void*, size_t), size_t n, void* user);
void seamless_log(const OrtLogger* logger, int level, const char* msg);
void seamless_free(void* p);
const char* seamless_module_path(void);

/* bench's C decode loop (python/onnxruntime_ep_seamless/tools/host_decode.c, host_decode.h) */
typedef struct {
  const char* ep;
  const char* const* ep_keys;
  const char* const* ep_values;
  size_t ep_options;
  const char* const* config_keys;
  const char* const* config_values;
  size_t configs;
  const void* model;
  size_t model_bytes;
  const char* const* kv_names;
  size_t kv_count;
  int32_t kv_type;
  int64_t kv_heads, head_size;
  int kv_on_device;
  const int64_t* prompts;
  int64_t prompt_len;
  int32_t steps, rounds;
} SeamlessDecodeLoop;
typedef struct {
  int64_t* tokens;
  double* prompt_s;
  double* step_s;
  double* run_s;
  char* error;
  size_t error_len;
} SeamlessDecodeTimes;
int seamless_host_decode(const SeamlessDecodeLoop* loop, const SeamlessDecodeTimes* out);
