"""Reductions on CUDA (native/cuda/reduce.cu) over any axes; the axes are read on the host."""
import math
import struct

import numpy as np

from ...graph.ir import ONNX_TO_NUMPY
from ...runtime.cuda import MAX_DIMS, DeviceTensor, contiguous_strides
from ..cpu.reduction import reduced_axes, stock_path
from ..registry import FUSED_DOMAIN, kernel
from .elementwise import GPU_FLOATS, GPU_INTS, SUFFIX
from .shape import _ints

# op -> (ReduceOp code, opset where axes became an input, whether int32/int64 are supported)
REDUCE = {"ReduceSum": (0, 13, True), "ReduceMean": (1, 18, True), "ReduceMax": (2, 18, True),
          "ReduceMin": (3, 18, True), "ReduceProd": (4, 18, True), "ReduceSumSquare": (5, 18, True),
          "ReduceL1": (6, 18, True), "ReduceL2": (7, 18, False), "ReduceLogSum": (8, 18, False),
          "ReduceLogSumExp": (9, 18, False)}
NAN_LAYOUT = {"loop": 0, "rows": 1, "krk": 2, "rkr": 3}  # native/cuda/reduce.cu's NanLayout
BLOCK_FROM = 64  # a block of threads per output from this many elements on (from 8 for at most 1024 outputs:
#                   a mask summed over a sequence of 48, one thread alone, took 16 us)


def reduce(rt, stream, code, x, axes, keepdims):
    """x reduced over `axes` (empty: all; a scalar over none, whatever they say, as stock) with ReduceOp `code`.
    Max and Min with NaN follow stock's order of combination for the shape, as if x lay in an aligned buffer
    (float16 and bfloat16 as stock's float32 copy)."""
    rank = len(x.shape)
    if rank > MAX_DIMS:
        raise ValueError(f"rank {rank} above the CUDA kernels' limit of {MAX_DIMS}")
    axes = list(reduced_axes(rank, axes)) if rank else []
    strides = contiguous_strides(x.shape)
    kept = [d for d in range(rank) if d not in axes]
    out_shape = tuple(1 if d in axes else x.shape[d] for d in range(rank)) if keepdims else \
        tuple(x.shape[d] for d in kept)
    y = rt.alloc(out_shape, x.dtype)
    count = math.prod([x.shape[a] for a in axes])  # 0: each output is the op's value for no element

    def dims_strides(ds):
        pad = [0] * (MAX_DIMS - len(ds))
        return [x.shape[d] for d in ds] + pad, [strides[d] for d in ds] + pad

    kd, ks = dims_strides(kept)
    rd, rs = dims_strides(axes)
    path, merged = stock_path(x.shape, axes) if axes and count else ("loop", [])
    nan_dims = (list(merged) + [1, 1, 1])[:3]
    r = struct.pack(f"<{4 * MAX_DIMS + 1}q2i3q2i", *kd, *ks, *rd, *rs, count, len(kept), len(axes), *nan_dims,
                    NAN_LAYOUT[path], 4)
    suffix = SUFFIX[x.dtype]
    if count >= BLOCK_FROM or (count >= 8 and y.size <= 1024):
        rt.launch_rows(f"seamless_reduce_block_{suffix}", y.size, stream, ("int", code), ("ptr", x.ptr),
                       ("ptr", y.ptr), ("bytes", r))
    else:
        rt.launch(f"seamless_reduce_thread_{suffix}", y.size, stream, ("int", code), ("int64", y.size),
                  ("ptr", x.ptr), ("ptr", y.ptr), ("bytes", r))
    return y


def _register(op, code, axes_input_since, ints):
    types = GPU_FLOATS | GPU_INTS if ints else GPU_FLOATS

    @kernel(op, since=1, until=axes_input_since - 1, types=types, device="cuda")
    def with_axes_attribute(rt, stream, x, *, axes=(), keepdims=1):
        return (reduce(rt, stream, code, x, list(axes or ()), keepdims),)

    @kernel(op, since=axes_input_since, types=types, device="cuda",
            check=lambda n, g: None if n.attrs.get("noop_with_empty_axes", 0) == 0 or op in ("ReduceSum", "ReduceMean",
                                                                                             "ReduceMax", "ReduceMin")
            else "noop_with_empty_axes on an op with an elementwise part", host_inputs=(1,))
    def with_axes_input(rt, stream, x, axes=None, *, keepdims=1, noop_with_empty_axes=0):
        if axes is not None and len(axes.shape) != 1:
            raise ValueError("An axes tensor must be a vector tensor.")
        axes = _ints(rt, stream, axes) if axes is not None else []
        if noop_with_empty_axes and not axes:  # a copy of the input
            return (DeviceTensor(x.ptr, x.shape, x.dtype, x.host),)
        return (reduce(rt, stream, code, x, axes, keepdims),)


for _op, (_code, _since, _ints_too) in REDUCE.items():
    _register(_op, _code, _since, _ints_too)


@kernel("ReduceSumSubCast", domain=FUSED_DOMAIN, types=GPU_INTS, device="cuda",
        check=lambda n, g: None if n.attrs.get("to") in (6, 7) else "a cast to int32 or int64 only")
def reduce_sum_sub_cast(rt, stream, x, *, offset, to, keepdims):
    """plan/fusion.py's Cast(ReduceSum(x over its last axis) - offset, to) in one launch (a decoder's seqlens_k
    from its attention mask), the sum and difference wrapping in x's type as the three ops do."""
    dtype = ONNX_TO_NUMPY[to]
    y = rt.alloc(x.shape[:-1] + (1,) * bool(keepdims), dtype)
    rt.launch_rows(f"seamless_row_sum_sub_{SUFFIX[x.dtype]}_{SUFFIX[dtype]}", y.size, stream, ("ptr", x.ptr),
                   ("ptr", y.ptr), ("int64", x.shape[-1]), ("int64" if x.dtype == np.int64 else "int", offset))
    return (y,)


def _global_pool(code):
    def run(rt, stream, x):
        return (reduce(rt, stream, code, x, list(range(2, len(x.shape))), True),)
    return run


kernel("GlobalAveragePool", since=1, types=GPU_FLOATS, device="cuda")(_global_pool(REDUCE["ReduceMean"][0]))
kernel("GlobalMaxPool", since=1, types=GPU_FLOATS, device="cuda")(_global_pool(REDUCE["ReduceMax"][0]))
