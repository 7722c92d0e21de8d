/* numpy's data allocator while our EP runs Python (runtime/numpy_memory.py sets it, context-locally): plain
 * malloc/calloc/realloc/free. numpy's own allocator advises huge pages (madvise MADV_HUGEPAGE) for arrays of 4 MB and
 * more; with the kernel's usual THP setting (defrag=madvise) each such fresh array then waits for a 2 MB page to be
 * found and zeroed: a 0.5B decoder's 243 MB prompt logits took 3.4 s instead of 1.0 on a VM, its session 1.4 s
 * instead of 0.6. Stock ORT's allocations give no such advice. */
#include "kernels.h"
#include <stdlib.h>

static void* np_malloc(void* ctx, size_t size) {
  (void)ctx;
  return malloc(size ? size : 1);
}

static void* np_calloc(void* ctx, size_t nelem, size_t elsize) {
  (void)ctx;
  return nelem && elsize ? calloc(nelem, elsize) : calloc(1, 1);
}

static void* np_realloc(void* ctx, void* ptr, size_t size) {
  (void)ctx;
  return realloc(ptr, size ? size : 1);
}

static void np_free(void* ctx, void* ptr, size_t size) {
  (void)ctx;
  (void)size;
  free(ptr);
}

static SeamlessNumpyHandler handler = {"onnxruntime_ep_seamless", 1,
                                       {NULL, np_malloc, np_calloc, np_realloc, np_free}};

SeamlessNumpyHandler* seamless_numpy_handler(void) { return &handler; }
