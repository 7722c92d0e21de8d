// Control flow inside a captured CUDA graph (ep_plugin/cuda_capture.c seamless_if_nodes): an If whose
// condition is a bool on the GPU runs as two conditional IF nodes, one per branch; this kernel, before
// them, sets their handles from the condition each time the graph runs.
#include "common.cuh"

extern "C" __global__ void seamless_if_branches(const uint8_t* cond, uint64_t then_handle, uint64_t else_handle) {
  dependent_launch();
  unsigned taken = *cond != 0;
  cudaGraphSetConditional(then_handle, taken);
  cudaGraphSetConditional(else_handle, !taken);
}

// A Loop as a WHILE node: before it, the counter i set to 0 and whether the first iteration runs; at the end of the
// body, i + 1 and whether the next one does (i < M and the body's condition, which the next iteration reads as its
// condition input). M: the trip count where the Loop has one (NULL: none); cond: NULL where the Loop has none.
__device__ bool loop_goes(const int64_t* m, int64_t i, const uint8_t* cond) {
  return (!m || i < *m) && (!cond || *cond != 0);
}

extern "C" __global__ void seamless_loop_start(const int64_t* m, const uint8_t* cond, int64_t* i, uint8_t* carried,
                                               uint64_t handle) {
  dependent_launch();
  *i = 0;
  *carried = !cond || *cond != 0;
  cudaGraphSetConditional(handle, loop_goes(m, 0, cond));
}

extern "C" __global__ void seamless_loop_next(const int64_t* m, const uint8_t* cond, int64_t* i, uint8_t* carried,
                                              uint64_t handle) {
  dependent_launch();
  int64_t next = *i + 1;
  *i = next;
  *carried = *cond != 0;
  cudaGraphSetConditional(handle, loop_goes(m, next, cond));
}

// An If branch whose nodes refused the captured binding's shapes (its capture raised): taken at a replay, it fails the
// run with that error (the check's tag), as an eager run taking it would.
extern "C" __global__ void seamless_branch_refused(GpuCheck check) {
  dependent_launch();
  report_bad(check, 0);
}
