"""Reductions and axis-wise ops on CUDA (native/cuda/reduction.cu): Reduce* over any axes (the axes are read on
the host), plan/fusion.py's ReduceSumSubCast; ArgMax, ArgMin and TopK (one row-selection kernel), CumSum and
CumProd; Softmax and LogSoftmax (the row kernel) and Hardmax (composed of ArgMax and a comparison). Opset ranges
and semantics are the CPU kernels' (kernels/cpu/reduction.py)."""
import math

import numpy as np

from ...graph.ir import ONNX_TO_NUMPY
from ...runtime.cuda import MAX_DIMS, DeviceTensor, contiguous_strides
from ...runtime.cuda_args import struct_arg, lib as codes
from .. import checks
from ..checks import InvalidArgument, Undefined
from ..cpu.reduction import k_input, reduced_axes, stock_path
from ..registry import FUSED_DOMAIN, kernel
from .elementwise import EQUAL, GPU_FLOATS, GPU_INTS, MUL, SUFFIX, Scratch, binary, cast_to, compare
from .shape import NUMBER_SUFFIX, NUMBERS, axis_view, host_ints, permuted

# op -> (ReduceOp code, opset where axes became an input, whether int32/int64 are supported)
REDUCE = {"ReduceSum": (codes.R_SUM, 13, True), "ReduceMean": (codes.R_MEAN, 18, True),
          "ReduceMax": (codes.R_MAX, 18, True), "ReduceMin": (codes.R_MIN, 18, True),
          "ReduceProd": (codes.R_PROD, 18, True), "ReduceSumSquare": (codes.R_SUM_SQUARE, 18, True),
          "ReduceL1": (codes.R_L1, 18, True), "ReduceL2": (codes.R_L2, 18, False),
          "ReduceLogSum": (codes.R_LOG_SUM, 18, False), "ReduceLogSumExp": (codes.R_LOG_SUM_EXP, 18, False)}
NAN_LAYOUT = {"loop": codes.NAN_LOOP, "rows": codes.NAN_ROWS, "krk": codes.NAN_KRK, "rkr": codes.NAN_RKR}
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

    path, merged = stock_path(x.shape, axes) if axes and count else ("loop", [])
    r = struct_arg("Reduce", kept_dims=[x.shape[d] for d in kept], kept_strides=[strides[d] for d in kept],
                   reduced_dims=[x.shape[d] for d in axes], reduced_strides=[strides[d] for d in axes], count=count,
                   kept_rank=len(kept), reduced_rank=len(axes), nan_dims=(list(merged) + [1, 1, 1])[:3],
                   nan_layout=NAN_LAYOUT[path], lanes=4)
    suffix = SUFFIX[x.dtype]
    if count >= BLOCK_FROM or (count >= 8 and y.size <= 1024):
        rt.launch_rows(f"seamless_reduce_block_{suffix}", y.size, stream, ("int", code), ("ptr", x.ptr),
                       ("ptr", y.ptr), r)
    else:
        rt.launch(f"seamless_reduce_thread_{suffix}", y.size, stream, ("int", code), ("int64", y.size),
                  ("ptr", x.ptr), ("ptr", y.ptr), r)
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
        axes = host_ints(rt, stream, axes) if axes is not None else []
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


# the ReduceOp codes other modules compose with
MEAN, L1, L2, MIN_OF, MAX_OF = (REDUCE[op][0] for op in ("ReduceMean", "ReduceL1", "ReduceL2", "ReduceMin",
                                                         "ReduceMax"))


# --- TopK, ArgMax, ArgMin: one selection kernel, a block per lane along the axis (a long axis of
# ArgMax/ArgMin: a block per chunk, the lane's last to finish combining; many contiguous rows: a block a
# row with 16-byte loads) ---------


SELECT_CHUNK = 1024  # ArgMax/ArgMin over a long axis: elements a block (4 a thread), e.g. a vocabulary's logits
ROWS16_LANES = 256   # ArgMax/ArgMin over this many contiguous rows and more: enough blocks to fill the GPU by rows


SELECT_LARGEST, SELECT_ARG = codes.SELECT_LARGEST, codes.SELECT_ARG


def _select(rt, stream, x, axis, k, largest, prefer_last, values: bool, indices=None, arg=False):
    """The first k elements along the axis in the order (value, descending when largest; then index,
    ascending unless prefer_last): (values or None, int64 indices), the axis of length k (written into
    `indices` when given). NaN ranks above every number (stock's TopK); with arg, below (stock's ArgMax/ArgMin
    loop), and a row starting with NaN answers 0."""
    axis = checks.axis(axis, len(x.shape))
    outer, n, inner = axis_view(x.shape, axis)
    if k < 0:
        raise ValueError(f"value of k must not be negative, got {k}")
    if k > n:
        raise ValueError(f"k argument [{k}] should not be greater than specified axis dim value [{n}]")
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1:]
    out = rt.alloc(shape, x.dtype) if values else None
    indices = rt.alloc(shape, np.int64) if indices is None else indices
    lanes = outer * inner
    row_bytes = n * x.dtype.itemsize
    order = (SELECT_LARGEST if largest else 0) | (SELECT_ARG if arg else 0)
    if k == 1 and not values and inner == 1 and lanes >= ROWS16_LANES and row_bytes % 16 == 0 and x.ptr % 16 == 0:
        rt.launch_rows(f"seamless_select_rows16_{NUMBER_SUFFIX[x.dtype]}", lanes, stream, ("ptr", x.ptr),
                       ("ptr", indices.ptr), ("int64", n), ("int", order), ("int", int(bool(prefer_last))),
                       threads=codes.SELECT_THREADS)
    elif k == 1 and not values and n >= 2 * SELECT_CHUNK and lanes <= 65535:  # a long axis: a block a chunk
        chunks = -(-n // SELECT_CHUNK)
        partials = rt.alloc((lanes * chunks,), np.int64)
        rt.launch_rows(f"seamless_select_chunk_{NUMBER_SUFFIX[x.dtype]}", (chunks, lanes), stream, ("ptr", x.ptr),
                       ("ptr", partials.ptr), ("ptr", indices.ptr), ("ptr", rt.counters(lanes, stream).ptr),
                       ("int64", n), ("int64", inner), ("int64", SELECT_CHUNK), ("int", order),
                       ("int", int(bool(prefer_last))), threads=codes.SELECT_THREADS)
        rt.free(partials)  # stream-ordered: reused only by later work on this stream
    elif indices.size:
        rt.launch_rows(f"seamless_select_{NUMBER_SUFFIX[x.dtype]}", lanes, stream, ("ptr", x.ptr),
                       ("ptr", out.ptr if values else 0), ("ptr", indices.ptr), ("int64", n), ("int64", inner),
                       ("int64", k), ("int", order), ("int", int(bool(prefer_last))), threads=codes.SELECT_THREADS)
    return out, indices


def _top_k(rt, stream, x, k, axis, largest):
    # sorted=0 leaves the order open: sorted order is returned either way, as on the CPU
    return _select(rt, stream, x, axis, k, largest, prefer_last=False, values=True)


@kernel("TopK", since=1, until=9, types=NUMBERS, device="cuda")
def top_k_1(rt, stream, x, *, k, axis=-1):
    return _top_k(rt, stream, x, k, axis, largest=True)


@kernel("TopK", since=10, until=10, types=NUMBERS, device="cuda", host_inputs=(1,))
def top_k_10(rt, stream, x, k, *, axis=-1):
    return _top_k(rt, stream, x, k_input(rt.to_host(k, stream)), axis, largest=True)


@kernel("TopK", since=11, types=NUMBERS, device="cuda", host_inputs=(1,))
def top_k_11(rt, stream, x, k, *, axis=-1, largest=1, sorted=1):
    return _top_k(rt, stream, x, k_input(rt.to_host(k, stream)), axis, largest)


def arg(rt, stream, x, axis, keepdims, select_last_index, largest, output_buffer=None):
    axis = checks.axis(axis, len(x.shape))
    if x.shape[axis] == 0:
        raise Undefined(f"ArgMax/ArgMin over an empty axis {axis} of shape {x.shape}")
    indices = rt.output(output_buffer, 0, x.shape[:axis] + (1,) * bool(keepdims) + x.shape[axis + 1:], np.int64)
    _select(rt, stream, x, axis, 1, largest, select_last_index, values=False, indices=indices, arg=True)
    if len(x.shape) == 1 and x.dtype in GPU_FLOATS and not select_last_index:  # stock's vectorised search with NaN
        rt.launch_rows(f"seamless_arg_vector_nan_{SUFFIX[x.dtype]}", 1, stream, ("ptr", x.ptr), ("int64", x.size),
                       ("int", int(largest)), ("ptr", indices.ptr))
    return (indices,)


@kernel("ArgMax", since=1, types=NUMBERS, device="cuda")
def argmax(rt, stream, x, *, axis=0, keepdims=1, select_last_index=0, _output_buffer=None):
    return arg(rt, stream, x, axis, keepdims, select_last_index, True, _output_buffer)


@kernel("ArgMin", since=1, types=NUMBERS, device="cuda")
def argmin(rt, stream, x, *, axis=0, keepdims=1, select_last_index=0, _output_buffer=None):
    return arg(rt, stream, x, axis, keepdims, select_last_index, False, _output_buffer)


# --- Softmax, LogSoftmax: the row kernel --------------------------------------------------

LOG, ZERO_MASKED_ROWS = codes.SOFTMAX_LOG, codes.SOFTMAX_ZERO_MASKED_ROWS


def softmax_rows(rt, stream, x, rows, cols, flags):
    y = rt.alloc(x.shape, x.dtype)
    rt.launch_rows(f"seamless_softmax_{SUFFIX[x.dtype]}", rows if cols else 0, stream, ("ptr", x.ptr), ("ptr", y.ptr),
                   ("int64", cols), ("int", flags))
    return y


def _softmax_13(flags):
    def run(rt, stream, x, *, axis=-1):
        """Softmax along one axis: the row kernel, with the axis moved last and back when it is not."""
        rank = len(x.shape)
        axis = checks.axis(axis, max(rank, 1))
        cols = x.shape[axis] if rank else 1
        if rank == 0 or axis == rank - 1:
            return (softmax_rows(rt, stream, x, x.size // cols if cols else 0, cols, flags),)
        perm = [d for d in range(rank) if d != axis] + [axis]
        inverse = list(np.argsort(perm))
        moved = permuted(rt, stream, x, perm)
        out = softmax_rows(rt, stream, moved, moved.size // cols if cols else 0, cols, flags)
        y = permuted(rt, stream, out, inverse)
        rt.free(moved)
        rt.free(out)
        return (y,)
    return run


def _softmax_1(flags):
    def run(rt, stream, x, *, axis=1):
        """Opsets 1-12: the input as 2-D [prod(shape[:axis]), prod(shape[axis:])], rows normalised."""
        axis = checks.axis(axis, max(len(x.shape), 1))
        cols = math.prod(x.shape[axis:])
        return (softmax_rows(rt, stream, x, x.size // cols if cols else 0, cols, flags),)
    return run


for _op, _flags in (("Softmax", 0), ("LogSoftmax", LOG)):
    kernel(_op, since=1, until=12, types=GPU_FLOATS, device="cuda")(_softmax_1(_flags))
    kernel(_op, since=13, types=GPU_FLOATS, device="cuda")(_softmax_13(_flags))


# --- Hardmax ------------------------------------------------------------------------------


def _hardmax(rt, stream, x, axis):
    """1 at the first element equal to the maximum along `axis` as stock takes it (Eigen's vectorised max of each
    row, the rows moved last: no 1 where that is NaN), 0 elsewhere."""
    s = Scratch(rt, x)
    last = len(x.shape) - 1
    order = [d for d in range(len(x.shape)) if d != axis] + [axis]
    rows = x if axis == last else s(permuted(rt, stream, x, order))
    peak = s(reduce(rt, stream, MAX_OF, rows, [last], True))  # stock_path "rows": Eigen's order, NaN included
    hit = s(cast_to(rt, stream, s(compare(rt, stream, EQUAL, rows, peak)), x.dtype))
    (index,) = arg(rt, stream, hit, last, 1, 0, 1)
    s(index)
    n = x.shape[axis]
    classes = s(rt.device(DeviceTensor.on_host(np.arange(n, dtype=np.int64)), stream))
    y = s(binary(rt, stream, MUL, hit, s(cast_to(rt, stream, s(compare(rt, stream, EQUAL, index, classes)), x.dtype))))
    if axis != last:
        y = s(permuted(rt, stream, y, [order.index(d) for d in range(len(x.shape))]))
    (y,) = s.done(y)
    return y


@kernel("Hardmax", since=13, types=GPU_FLOATS, device="cuda")
def hardmax_13(rt, stream, x, *, axis=-1):
    return (_hardmax(rt, stream, x, checks.axis(axis, len(x.shape))),)


@kernel("Hardmax", since=1, until=12, types=GPU_FLOATS, device="cuda")
def hardmax_1(rt, stream, x, *, axis=1):
    axis = checks.axis(axis, len(x.shape))  # the input as a matrix of rows from `axis` on
    rows = math.prod(x.shape[:axis])
    y = _hardmax(rt, stream, DeviceTensor(x.ptr, (rows, x.size // max(rows, 1)), x.dtype), 1)
    return (DeviceTensor(y.ptr, x.shape, y.dtype),)


# --- CumSum, CumProd ----------------------------------------------------------------------


def _cumulative(rt, stream, x, axis, exclusive, reverse, product):
    if axis.size != 1:
        raise InvalidArgument("Axis tensor must contain exactly one element")
    axis = checks.axis(host_ints(rt, stream, axis)[0], len(x.shape))
    outer, n, inner = axis_view(x.shape, axis)
    y = rt.alloc(x.shape, x.dtype)
    if y.size:
        lanes = outer * inner
        rt.launch(f"seamless_cumulative_{NUMBER_SUFFIX[x.dtype]}", lanes, stream, ("int64", lanes), ("ptr", x.ptr),
                  ("ptr", y.ptr), ("int64", n), ("int64", inner), ("int", int(bool(exclusive))),
                  ("int", int(bool(reverse))), ("int", int(product)))
    return (y,)


@kernel("CumSum", since=11, types=NUMBERS, device="cuda", host_inputs=(1,))
def cumsum(rt, stream, x, axis, *, exclusive=0, reverse=0):
    return _cumulative(rt, stream, x, axis, exclusive, reverse, product=False)


@kernel("CumProd", since=26, types=NUMBERS, device="cuda", host_inputs=(1,))
def cumprod(rt, stream, x, axis, *, exclusive=0, reverse=0):
    return _cumulative(rt, stream, x, axis, exclusive, reverse, product=True)
