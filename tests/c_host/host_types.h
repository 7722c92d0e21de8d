/* Types the C host (run_model.c) needs beyond ep_plugin/ort_types.h: the application side of
 * ORT's C API. Our own declarations from the interface facts, no header text copied.
 * Preprocessor-free so that tests/abi/test_declarations.py can parse it with cffi. */
typedef struct OrtEnv OrtEnv;
typedef struct OrtSession OrtSession;
typedef int OrtMemType;                      /* OrtMemTypeDefault 0 */
