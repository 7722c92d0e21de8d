/* The CPU runner's C functions (ep_plugin/cpu_runner.c): appended to python_api.h for the cffi cdef and
 * included by glue.h, so the C units and the cffi module read one declaration. */
typedef struct SeamlessRunner SeamlessRunner;
SeamlessRunner* seamless_runner_new(int n_in, int n_out, void* run_fn, const char* prefix);
void seamless_runner_free(SeamlessRunner* r);
size_t seamless_runner_key_capacity(const SeamlessRunner* r);
/* the input's value (at most 64 bytes; more: no key, (size_t)-1) joins its binding's key */
void seamless_runner_key_by_value(SeamlessRunner* r, int input);
size_t seamless_runner_key(const SeamlessRunner* r, const int64_t* dims, const int32_t* ranks, const int32_t* types,
                           size_t max_rank, void* const* data, const size_t* nbytes, uint8_t* key);
int seamless_runner_add(SeamlessRunner* r, const uint8_t* key, size_t key_len, const void* program,
                        const int32_t* out_ranks, const int64_t* out_dims, size_t max_rank);
void seamless_runner_remove(SeamlessRunner* r, int slot);
long long seamless_native_runs(void);
int seamless_runner_add_family(SeamlessRunner* r, const void* family);
void seamless_runner_remove_family(SeamlessRunner* r, int slot);
long long seamless_family_runs(void);
