/* Types of the application side of ORT's C API (tests/c_host/run_model.c,
 * python/onnxruntime_ep_seamless/tools/host_decode.c) beyond ort_types.h. Our own declarations from
 * the interface facts, no header text copied.
 * Preprocessor-free so that tests/abi/test_declarations.py can parse it with cffi. */
typedef struct OrtEnv OrtEnv;
typedef struct OrtSession OrtSession;
typedef struct OrtIoBinding OrtIoBinding;
typedef struct OrtCUDAProviderOptionsV2 OrtCUDAProviderOptionsV2;
typedef int OrtMemType;                      /* OrtMemTypeDefault 0 */
