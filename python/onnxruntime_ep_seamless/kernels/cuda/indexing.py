"""Indexing, selection and constant-producing ops on CUDA (native/cuda/indexing.cu).

Data movement (Split, Tile, GatherElements, GatherND, ScatterND, ScatterElements, Trilu) copies raw
elements by size, so it takes every element type of whole bytes; arithmetic (CumSum, TopK,
ArgMax/ArgMin, scatter reductions) takes the GPU float types and int32/int64. Sizes, k, axes and
repeats are read on the host (rt.to_host: free for constants and host-computed values); Constant,
Range, EyeLike and Dropout's mask are computed on the host and returned as host values, uploaded by
the executor only if a GPU kernel or a graph output needs them; Compress reads its condition on the
host (the output's shape depends on it: a seam). Opset ranges, attributes and semantics
are the CPU kernels' (kernels/cpu/shape.py, reduction.py, elementwise.py), whose host-side helpers
(Split's part sizes, Constant, Range, the checks) are reused here."""
import math
import struct

import numpy as np

from ...graph.ir import ONNX_TO_NUMPY, PACKED_BITS
from ...runtime.cuda import MAX_DIMS, DeviceTensor, contiguous_strides
from .. import checks
from ..checks import InvalidArgument
from ..cpu.elementwise import _check_dropout_12
from ..cpu.reduction import Undefined, _k_input
from ..cpu.shape import _check_constant, _check_reduction, _nd_index_range, _split, check_axis_index, tiled_shape
from ..cpu.shape import constant as cpu_constant
from ..cpu.shape import eye_like as cpu_eye_like
from ..cpu.shape import range_ as cpu_range
from ..cpu.shape import range_27 as cpu_range_27
from ..registry import ALL, FLOATS, LOW_PRECISION, kernel
from .elementwise import SUFFIX
from .shape import _ints, gather, stand_in

# whole-byte element types (ORT packs the 4- and 2-bit ones two or four to a byte)
MOVABLE = frozenset((ALL | LOW_PRECISION).difference(PACKED_BITS))
# the types native/cuda/indexing.cu instantiates its arithmetic for
NUMBER_SUFFIX = {**{t: s for t, s in SUFFIX.items() if s in ("f32", "f16", "bf16")},
                 np.dtype(np.int32): "i32", np.dtype(np.int64): "i64"}
NUMBERS = frozenset(NUMBER_SUFFIX)
INDEX_SUFFIX = {np.dtype(np.int32): "i32", np.dtype(np.int64): "i64"}
_BF16 = frozenset([ONNX_TO_NUMPY[16]]) if 16 in ONNX_TO_NUMPY else frozenset()
HOST_FLOATS = FLOATS | _BF16  # Dropout and Range: no device arithmetic
REDUCTIONS = {"add": 1, "mul": 2, "max": 3, "min": 4}  # native/cuda/indexing.cu Reduction


def _axis_view(shape, axis):
    """(outer, n, inner): shape viewed as 3-D around `axis`."""
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])


def _padded(values):
    """Per-axis values for a native struct, padded to MAX_DIMS."""
    if len(values) > MAX_DIMS:
        raise ValueError(f"rank {len(values)} above the CUDA kernels' limit of {MAX_DIMS}")
    return [int(v) for v in values] + [0] * (MAX_DIMS - len(values))


# --- Split, Tile ------------------------------------------------------------------------


def _split_sizes(dim, split, n):
    """The parts' lengths by the CPU kernel's rule, read off a zero-width stand-in (no data)."""
    return [part.shape[0] for part in _split(np.empty((dim, 0), np.bool_), split, 0, n)]


def _split_copies(rt, stream, x, axis, split, n):
    axis = checks.axis(axis, len(x.shape))
    outer, dim, inner = _axis_view(x.shape, axis)
    outs, offset = [], 0
    for size in _split_sizes(dim, split, n):
        y = rt.alloc(x.shape[:axis] + (size,) + x.shape[axis + 1:], x.dtype)
        if y.size:  # x as [outer, dim, inner]: rows [offset, offset + size) of the middle axis
            rt.strided_copy(stream, x, y, (outer, size, inner), (dim * inner, inner, 1), (size * inner, inner, 1),
                            offset * inner)
        outs.append(y)
        offset += size
    return tuple(outs)


@kernel("Split", since=2, until=12, types=MOVABLE, device="cuda")
def split_2(rt, stream, x, *, axis=0, split=None, _num_outputs):
    return _split_copies(rt, stream, x, axis, split, _num_outputs)


@kernel("Split", since=13, types=MOVABLE, device="cuda", host_inputs=(1,))
def split_13(rt, stream, x, split=None, *, axis=0, num_outputs=None, _num_outputs):
    return _split_copies(rt, stream, x, axis, None if split is None else _ints(rt, stream, split), _num_outputs)


@kernel("Tile", since=6, types=MOVABLE, device="cuda", host_inputs=(1,))
def tile(rt, stream, x, repeats):
    reps = _ints(rt, stream, repeats)
    y = rt.alloc(tiled_shape(x.shape, x.dtype.itemsize, reps), x.dtype)
    if not y.size:
        return (y,)
    # y is x broadcast: axis a of y, of length r_a * d_a, is the pair (r_a, d_a) read with stride 0 on r_a
    dims, strides = [], []
    for d, r, s in zip(x.shape, reps, contiguous_strides(x.shape)):
        if r != 1:
            dims.append(r)
            strides.append(0)
        dims.append(d)
        strides.append(s)
    if len(dims) <= MAX_DIMS:
        rt.strided_copy(stream, x, y, dims, strides, contiguous_strides(dims))
    else:  # too many axes for that view: a kernel taking each coordinate modulo x's dim
        shape = struct.pack(f"<{2 * MAX_DIMS}qi4x", *_padded(y.shape), *_padded(x.shape), len(x.shape))
        rt.launch(f"seamless_tile_{x.dtype.itemsize}", y.size, stream, ("int64", y.size), ("ptr", x.ptr),
                  ("ptr", y.ptr), ("bytes", shape))
    return (y,)


# --- GatherElements, GatherND, ScatterND, ScatterElements --------------------------------


def _axis_index(op, index_shape, data_shape, axis) -> bytes:
    """native/cuda/indexing.cu AxisIndex, once the index tensor's shape fits the data's: the same rank, and
    along every other axis no longer than the data (the kernels address the data by the index tensor's
    coordinates there: cpu/shape.py's check_axis_index)."""
    check_axis_index(op, index_shape, data_shape, axis)
    return struct.pack(f"<{2 * MAX_DIMS + 1}q2i", *_padded(index_shape), *_padded(contiguous_strides(data_shape)),
                       data_shape[axis], len(data_shape), axis)


def _nd_index(data_shape, first, k, per_batch, batch_stride) -> bytes:
    """native/cuda/indexing.cu NdIndex: k index values address data axes first .. first + k."""
    if first + k > len(data_shape):
        raise InvalidArgument(f"last dimension of indices ({k}) must not be larger than rank of input tensor "
                              f"({len(data_shape)}) minus batch_dims ({first})")
    slice_size = math.prod(data_shape[first + k:])
    return struct.pack(f"<{2 * MAX_DIMS + 3}qi4x", *_padded(data_shape[first:first + k]),
                       *_padded(contiguous_strides(data_shape)[first:first + k]), slice_size, max(per_batch, 1),
                       batch_stride, k)


@kernel("GatherElements", since=11, types=MOVABLE, device="cuda")
def gather_elements(rt, stream, data, indices, *, axis=0):
    """Indices out of range fail where known on the host, else read zeros (indexing.cu)."""
    axis = checks.axis(axis, len(data.shape))
    shape = _axis_index("GatherElements", indices.shape, data.shape, axis)
    if indices.host is not None:
        size = data.shape[axis]
        if checks.first_outside(indices.host, -size, size):
            raise ValueError("GatherElements op: Out of range value in index tensor")
    y = rt.alloc(indices.shape, data.dtype)
    rt.launch(f"seamless_gather_elements_{data.dtype.itemsize}_{INDEX_SUFFIX[indices.dtype]}", y.size, stream,
              ("int64", y.size), ("ptr", data.ptr), ("ptr", indices.ptr), ("ptr", y.ptr), ("bytes", shape))
    return (y,)


@kernel("GatherND", since=11, types=MOVABLE, device="cuda")
def gather_nd(rt, stream, data, indices, *, batch_dims=0):
    """Index tuples out of range fail where known on the host, else read zeros (indexing.cu)."""
    b, k = batch_dims, indices.shape[-1]
    if indices.shape[:b] != data.shape[:b]:  # tuple g reads batch g / per_batch of the data
        raise InvalidArgument(f"GatherND: the batch dims ({b}) of indices {indices.shape} and data {data.shape} "
                              "differ")
    # index tuples per batch, data elements per batch
    shape = _nd_index(data.shape, b, k, math.prod(indices.shape[b:-1]), math.prod(data.shape[b:]))
    if indices.host is not None:
        _nd_index_range(indices.host, data.shape[b:b + k], "index")
    y = rt.alloc(indices.shape[:-1] + data.shape[b + k:], data.dtype)
    if y.size:
        rt.launch(f"seamless_gather_nd_{data.dtype.itemsize}", y.size, stream, ("int64", y.size), ("ptr", data.ptr),
                  ("ptr", indices.ptr), ("ptr", y.ptr), ("bytes", shape))
    return (y,)


def _check_scatter(node, graph):
    reason = _check_reduction(node, graph)
    dtype = graph.value(node.inputs[0]).dtype
    if reason is None and node.attrs.get("reduction", "none") != "none" and dtype not in NUMBERS:
        reason = f"CUDA scatter reductions of {dtype} are not supported"
    return reason


def _scatter_target(rt, stream, data, reduction):
    """A copy of data for the updates to go into, and the kernel variant (plain stores by element size,
    or atomic reductions per type) with its extra arguments."""
    y = rt.alloc(data.shape, data.dtype)
    rt.copy(y.ptr, data.ptr, data.nbytes, stream)
    if reduction == "none":
        return y, str(data.dtype.itemsize), ()
    return y, f"reduce_{NUMBER_SUFFIX[data.dtype]}", (("int", REDUCTIONS[reduction]),)


@kernel("ScatterND", since=11, types=MOVABLE, device="cuda", check=_check_scatter)
def scatter_nd(rt, stream, data, indices, updates, *, reduction="none"):
    """Index tuples out of range fail where known on the host, else are skipped (indexing.cu)."""
    k = indices.shape[-1]
    shape = _nd_index(data.shape, 0, k, math.prod(indices.shape[:-1]), 0)
    if updates.shape != indices.shape[:-1] + data.shape[k:]:  # the kernel reads a tuple per updates' slice
        raise InvalidArgument("updates tensor should have shape equal to indices.shape[:-1] + "
                              f"data.shape[indices.shape[-1]:]. updates shape: {updates.shape}, indices shape: "
                              f"{indices.shape}, data shape: {data.shape}")
    if indices.host is not None:
        _nd_index_range(indices.host, data.shape[:k], "indice")
    y, variant, extra = _scatter_target(rt, stream, data, reduction)
    rt.launch(f"seamless_scatter_nd_{variant}", updates.size, stream, ("int64", updates.size), ("ptr", updates.ptr),
              ("ptr", indices.ptr), ("ptr", y.ptr), ("bytes", shape), *extra)
    return (y,)


@kernel("ScatterElements", since=11, types=MOVABLE, device="cuda", check=_check_scatter)
def scatter_elements(rt, stream, data, indices, updates, *, axis=0, reduction="none"):
    """Indices out of range fail where known on the host, else are skipped (indexing.cu)."""
    axis = checks.axis(axis, len(data.shape))
    if indices.shape != updates.shape:  # the kernel reads an index per update
        raise InvalidArgument(f"Indices and updates must have the same shape: {indices.shape} and {updates.shape}")
    shape = _axis_index("ScatterElements", indices.shape, data.shape, axis)
    if indices.host is not None:
        checks.index_range(indices.host, data.shape[axis])
    y, variant, extra = _scatter_target(rt, stream, data, reduction)
    rt.launch(f"seamless_scatter_elements_{variant}_{INDEX_SUFFIX[indices.dtype]}", updates.size, stream,
              ("int64", updates.size), ("ptr", updates.ptr), ("ptr", indices.ptr), ("ptr", y.ptr), ("bytes", shape),
              *extra)
    return (y,)


@kernel("Scatter", since=9, until=10, types=MOVABLE, device="cuda")  # deprecated alias of ScatterElements
def scatter(rt, stream, data, indices, updates, *, axis=0):
    return scatter_elements(rt, stream, data, indices, updates, axis=axis)


# --- Trilu, CumSum ----------------------------------------------------------------------


@kernel("Trilu", since=14, types=MOVABLE, device="cuda", host_inputs=(1,))
def trilu(rt, stream, x, k=None, *, upper=1):
    if len(x.shape) < 2:
        raise InvalidArgument("Input tensor should have a rank of at least 2")
    if k is not None and k.size != 1:
        raise ValueError("k should be a 1-D or 0-D tensor.")
    k = 0 if k is None else _ints(rt, stream, k)[0]
    y = rt.alloc(x.shape, x.dtype)
    rows, cols = x.shape[-2:]
    rt.launch(f"seamless_trilu_{x.dtype.itemsize}", y.size, stream, ("int64", y.size), ("ptr", x.ptr),
              ("ptr", y.ptr), ("int64", rows), ("int64", cols), ("int64", k), ("int", int(bool(upper))))
    return (y,)


def _cumulative(rt, stream, x, axis, exclusive, reverse, product):
    if axis.size != 1:
        raise InvalidArgument("Axis tensor must contain exactly one element")
    axis = checks.axis(_ints(rt, stream, axis)[0], len(x.shape))
    outer, n, inner = _axis_view(x.shape, axis)
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


# --- TopK, ArgMax, ArgMin: one selection kernel, a block per lane along the axis (a long axis of
# ArgMax/ArgMin: a block per chunk, the lane's last to finish combining; many contiguous rows: a block a
# row with 16-byte loads) ---------


SELECT_CHUNK = 1024  # ArgMax/ArgMin over a long axis: elements a block (4 a thread), e.g. a vocabulary's logits
ROWS16_LANES = 256   # ArgMax/ArgMin over this many contiguous rows and more: enough blocks to fill the GPU by rows


def _select(rt, stream, x, axis, k, largest, prefer_last, values: bool, indices=None):
    """The first k elements along the axis in the order (value, descending when largest; then index,
    ascending unless prefer_last): (values or None, int64 indices), the axis of length k (written into
    `indices` when given)."""
    axis = checks.axis(axis, len(x.shape))
    outer, n, inner = _axis_view(x.shape, axis)
    if k < 0:
        raise ValueError(f"value of k must not be negative, got {k}")
    if k > n:
        raise ValueError(f"k argument [{k}] should not be greater than specified axis dim value [{n}]")
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1:]
    out = rt.alloc(shape, x.dtype) if values else None
    indices = rt.alloc(shape, np.int64) if indices is None else indices
    lanes = outer * inner
    row_bytes = n * x.dtype.itemsize
    if k == 1 and not values and inner == 1 and lanes >= ROWS16_LANES and row_bytes % 16 == 0 and x.ptr % 16 == 0:
        rt.launch_rows(f"seamless_select_rows16_{NUMBER_SUFFIX[x.dtype]}", lanes, stream, ("ptr", x.ptr),
                       ("ptr", indices.ptr), ("int64", n), ("int", int(bool(largest))), ("int", int(bool(prefer_last))))
    elif k == 1 and not values and n >= 2 * SELECT_CHUNK and lanes <= 65535:  # a long axis: a block a chunk
        chunks = -(-n // SELECT_CHUNK)
        partials = rt.alloc((lanes * chunks,), np.int64)
        rt.launch_rows(f"seamless_select_chunk_{NUMBER_SUFFIX[x.dtype]}", (chunks, lanes), stream, ("ptr", x.ptr),
                       ("ptr", partials.ptr), ("ptr", indices.ptr), ("ptr", rt.counters(lanes, stream).ptr),
                       ("int64", n), ("int64", inner), ("int64", SELECT_CHUNK), ("int", int(bool(largest))),
                       ("int", int(bool(prefer_last))))
        rt.free(partials)  # stream-ordered: reused only by later work on this stream
    elif indices.size:
        rt.launch_rows(f"seamless_select_{NUMBER_SUFFIX[x.dtype]}", lanes, stream, ("ptr", x.ptr),
                       ("ptr", out.ptr if values else 0), ("ptr", indices.ptr), ("int64", n), ("int64", inner),
                       ("int64", k), ("int", int(bool(largest))), ("int", int(bool(prefer_last))))
    return out, indices


def _top_k(rt, stream, x, k, axis, largest):
    # sorted=0 leaves the order open: sorted order is returned either way, as on the CPU
    return _select(rt, stream, x, axis, k, largest, prefer_last=False, values=True)


@kernel("TopK", since=1, until=9, types=NUMBERS, device="cuda")
def top_k_1(rt, stream, x, *, k, axis=-1):
    return _top_k(rt, stream, x, k, axis, largest=True)


@kernel("TopK", since=10, until=10, types=NUMBERS, device="cuda", host_inputs=(1,))
def top_k_10(rt, stream, x, k, *, axis=-1):
    return _top_k(rt, stream, x, _k_input(rt.to_host(k, stream)), axis, largest=True)


@kernel("TopK", since=11, types=NUMBERS, device="cuda", host_inputs=(1,))
def top_k_11(rt, stream, x, k, *, axis=-1, largest=1, sorted=1):
    return _top_k(rt, stream, x, _k_input(rt.to_host(k, stream)), axis, largest)


def _arg(rt, stream, x, axis, keepdims, select_last_index, largest, output_buffer=None):
    axis = checks.axis(axis, len(x.shape))
    if x.shape[axis] == 0:
        raise Undefined(f"ArgMax/ArgMin over an empty axis {axis} of shape {x.shape}")
    indices = rt.output(output_buffer, 0, x.shape[:axis] + (1,) * bool(keepdims) + x.shape[axis + 1:], np.int64)
    _select(rt, stream, x, axis, 1, largest, select_last_index, values=False, indices=indices)
    return (indices,)


@kernel("ArgMax", since=1, types=NUMBERS, device="cuda")
def argmax(rt, stream, x, *, axis=0, keepdims=1, select_last_index=0, _output_buffer=None):
    return _arg(rt, stream, x, axis, keepdims, select_last_index, True, _output_buffer)


@kernel("ArgMin", since=1, types=NUMBERS, device="cuda")
def argmin(rt, stream, x, *, axis=0, keepdims=1, select_last_index=0, _output_buffer=None):
    return _arg(rt, stream, x, axis, keepdims, select_last_index, False, _output_buffer)


# --- Dropout (inference), Constant, Range: no device work ---------------------------------


def _same(x):
    return DeviceTensor(x.ptr, x.shape, x.dtype, x.host)


@kernel("Dropout", since=7, until=9, types=HOST_FLOATS, device="cuda")
def dropout_7(rt, stream, x, *, ratio=0.5, _num_outputs=1):
    # inference: y is x; the mask (of x's type before opset 10) is zeros, as ORT and the CPU kernel write
    return (_same(x), DeviceTensor.on_host(np.zeros(x.shape, x.dtype)))[:_num_outputs]


@kernel("Dropout", since=10, until=11, types=HOST_FLOATS, device="cuda")
def dropout_10(rt, stream, x, *, ratio=0.5, _num_outputs=1):
    return (_same(x), DeviceTensor.on_host(np.zeros(x.shape, np.bool_)))[:_num_outputs]


@kernel("Dropout", since=12, types=HOST_FLOATS, device="cuda", check=_check_dropout_12, host_inputs=(1, 2))
def dropout_12(rt, stream, x, ratio=None, training_mode=None, *, seed=0, _num_outputs=1):
    # training_mode is a constant False (see the check): y is x, the mask all True
    return (_same(x), DeviceTensor.on_host(np.ones(x.shape, np.bool_)))[:_num_outputs]


@kernel("Constant", device="cuda", check=_check_constant)
def constant(rt, stream, *, value=None, value_float=None, value_floats=None, value_int=None, value_ints=None):
    (array,) = cpu_constant(value=value, value_float=value_float, value_floats=value_floats, value_int=value_int,
                            value_ints=value_ints)
    return (DeviceTensor.on_host(array),)


@kernel("Range", since=11, until=26, types=HOST_FLOATS, device="cuda", host_inputs=(0, 1, 2))
def range_11(rt, stream, start, limit, delta):
    (array,) = cpu_range(*(rt.to_host(t, stream) for t in (start, limit, delta)))
    return (DeviceTensor.on_host(array),)


@kernel("Range", since=27, types=HOST_FLOATS, device="cuda", host_inputs=(0, 1, 2))
def range_27(rt, stream, start, limit, delta, *, stash_type=1):
    (array,) = cpu_range_27(*(rt.to_host(t, stream) for t in (start, limit, delta)), stash_type=stash_type)
    return (DeviceTensor.on_host(array),)


@kernel("EyeLike", since=9, types=MOVABLE, device="cuda")
def eye_like(rt, stream, x, *, dtype=None, k=0):
    # a function of x's shape alone: computed on the host (uploaded only where a GPU kernel reads it)
    (array,) = cpu_eye_like(stand_in(x.shape, x.dtype), dtype=dtype, k=k)
    return (DeviceTensor.on_host(array),)


@kernel("Compress", since=9, types=MOVABLE, device="cuda", host_inputs=(1,))
def compress(rt, stream, x, condition, *, axis=None):
    """The condition is read on the host (the output's shape depends on it), then one Gather."""
    data = x if axis is not None else DeviceTensor(x.ptr, (x.size,), x.dtype)
    axis = 0 if axis is None else checks.axis(axis, len(x.shape))
    keep = np.asarray(rt.to_host(condition, stream)).reshape(-1)[:data.shape[axis]]  # as ORT: entries past the end ignored
    index = rt.device(DeviceTensor.on_host(np.flatnonzero(keep).astype(np.int64)), stream)
    (y,) = gather(rt, stream, data, index, axis=axis)
    if index.ptr:
        rt.free(index)  # stream-ordered
    return (y,)
