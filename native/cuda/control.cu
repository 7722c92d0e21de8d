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
