"""Shape, indexing and data-movement ops on CUDA (native/cuda/shape.cu). Shape arguments are read on the host
(constants and values computed there are free; a value computed on the GPU costs a host seam). Reshape-like
ops alias their input; Transpose, Concat, Slice and Expand are one strided-copy launch each.

Data movement (Split, Tile, GatherElements, GatherND, ScatterND, ScatterElements, Trilu, Pad) copies raw
elements by size, so it takes every element type of whole bytes; scatter reductions take the GPU float types
and int32/int64. Sizes, axes and repeats are read on the host (rt.to_host: free for constants and
host-computed values); Constant, Range and EyeLike are computed on the host and returned as host values,
uploaded by the executor only if a GPU kernel or a graph output needs them; Compress reads its condition on the
host (the output's shape depends on it: a seam), and NonZero and Unique run their CPU kernels there. OneHot,
DepthToSpace, SpaceToDepth, ReverseSequence and TensorScatter are composed of our other kernels. Opset ranges,
attributes and semantics are the CPU kernels' (kernels/cpu/shape.py), whose host-side helpers (Split's part
sizes, Constant, Range, the checks) are reused here."""
import math

import numpy as np

from ...graph.ir import PACKED_BITS, exotic_dtypes
from ...runtime.cuda import MAX_DIMS, DeviceTensor, contiguous_strides
from ...runtime.cuda_args import struct_arg, lib as codes
from .. import checks
from ..checks import InvalidArgument, gpu_check_arg, gpu_check_fields
from ..cpu.shape import (axis_slice, check_axis_index, check_constant, check_perm, check_reduction, flattened_shape,
                         nd_index_range, non_zero, split_parts, tensor_scatter_geometry, tiled_shape, unique)
from ..cpu.shape import constant as cpu_constant
from ..cpu.shape import eye_like as cpu_eye_like
from ..cpu.shape import range_ as cpu_range
from ..cpu.shape import range_27 as cpu_range_27
from ..cpu.shape import slice_ as cpu_slice
from ..cpu.shape import squeeze as cpu_squeeze
from ..cpu.shape import unsqueeze as cpu_unsqueeze
from ..registry import ALL, kernel
from .elementwise import (ADD, EQUAL, GPU_INTS, HOST_FLOATS, LESS, MOD, SUB, SUFFIX, Scratch, binary, cast_to,
                          check_ints, compare, device_scalar, on_host, where)

F32, F16, I64 = (np.dtype(t) for t in (np.float32, np.float16, np.int64))


def host_ints(rt, stream, t):
    return [int(v) for v in np.asarray(rt.to_host(t, stream)).reshape(-1)]


def stand_in(shape, dtype=np.bool_) -> np.ndarray:
    """An array of this shape that holds no memory (every element one zero): the CPU kernels' shape checks and
    view arithmetic run on it, so both devices refuse the same inputs with the same errors."""
    return np.broadcast_to(np.zeros((), dtype), tuple(shape))


@kernel("Reshape", since=5, device="cuda", host_inputs=(1,))
def reshape(rt, stream, data, shape, *, allowzero=0):
    dims = host_ints(rt, stream, shape)
    if dims and min(dims) < -1:
        raise ValueError(f"A dimension cannot be less than -1, got {min(dims)}")
    dims = [data.shape[i] if d == 0 and not allowzero else d for i, d in enumerate(dims)]
    out = np.empty(data.shape, np.bool_).reshape(dims).shape  # numpy resolves -1 and checks the size
    return (DeviceTensor(data.ptr, out, data.dtype, None if data.host is None else data.host.reshape(out)),)


@kernel("Flatten", since=1, device="cuda")
def flatten(rt, stream, x, *, axis=1):
    return (DeviceTensor(x.ptr, flattened_shape(tuple(x.shape), axis), x.dtype),)


def _unsqueezed(shape, axes):
    return cpu_unsqueeze(stand_in(shape), axes)[0].shape


@kernel("Unsqueeze", since=13, device="cuda", host_inputs=(1,))
def unsqueeze(rt, stream, x, axes):
    return (DeviceTensor(x.ptr, _unsqueezed(x.shape, host_ints(rt, stream, axes)), x.dtype),)


@kernel("Unsqueeze", since=1, until=12, device="cuda")
def unsqueeze_1(rt, stream, x, *, axes):
    return (DeviceTensor(x.ptr, _unsqueezed(x.shape, axes), x.dtype),)


def _squeezed(shape, axes):
    """The shape without `axes` (every 1 when none), refused where an axis is not 1: the view must keep the size."""
    return cpu_squeeze(stand_in(shape), axes)[0].shape


@kernel("Squeeze", since=13, device="cuda", host_inputs=(1,))
def squeeze(rt, stream, x, axes=None):
    return (DeviceTensor(x.ptr, _squeezed(x.shape, host_ints(rt, stream, axes) if axes is not None else []), x.dtype),)


@kernel("Squeeze", since=1, until=12, device="cuda")
def squeeze_1(rt, stream, x, *, axes=()):
    return (DeviceTensor(x.ptr, _squeezed(x.shape, list(axes)), x.dtype),)


def permuted(rt, stream, x, perm):
    """x with its axes in the order `perm` (a copy)."""
    y = rt.alloc(tuple(x.shape[p] for p in perm), x.dtype)
    src = contiguous_strides(x.shape)
    rt.strided_copy(stream, x, y, y.shape, [src[p] for p in perm], contiguous_strides(y.shape))
    return y


@kernel("Transpose", since=1, device="cuda", validate=check_perm)
def transpose(rt, stream, x, *, perm=None):
    if perm is not None and len(perm) != len(x.shape):  # a permutation (validate) of x's axes
        raise InvalidArgument(f"perm size: {len(perm)} does not match input rank: {len(x.shape)}")
    perm = list(perm) if perm is not None else list(range(len(x.shape)))[::-1]
    moved = [p for p in perm if x.shape[p] != 1]
    if moved == sorted(moved):  # only axes of length 1 move (a decode step's [1, 1, n] -> [1, n, 1]): the same bytes
        shape = tuple(x.shape[p] for p in perm)
        return (DeviceTensor(x.ptr, shape, x.dtype, None if x.host is None else x.host.reshape(shape)),)
    return (permuted(rt, stream, x, perm),)


@kernel("Concat", since=4, device="cuda")
def concat(rt, stream, *inputs, axis):
    rank = len(inputs[0].shape)
    axis = checks.axis(axis, rank)
    for i, t in enumerate(inputs[1:], 1):  # each input is copied by its own shape into y's
        if len(t.shape) != rank:
            raise ValueError(f"Ranks of input data are different, cannot concatenate them. expected rank: {rank} "
                             f"got: {len(t.shape)}")
        bad = [d for d in range(rank) if d != axis and t.shape[d] != inputs[0].shape[d]]
        if bad:
            raise ValueError(f"Non concat axis dimensions must match: Axis {bad[0]} has mismatched dimensions of "
                             f"{t.shape[bad[0]]} and {inputs[0].shape[bad[0]]} (input {i})")
    shape = list(inputs[0].shape)
    shape[axis] = sum(t.shape[axis] for t in inputs)
    y = rt.alloc(shape, inputs[0].dtype)
    dst, offset = contiguous_strides(y.shape), 0
    for t in inputs:
        if t.size:
            rt.strided_copy(stream, t, y, t.shape, contiguous_strides(t.shape), dst, 0, offset * dst[axis])
        offset += t.shape[axis]
    return (y,)


def broadcast_to(rt, stream, x, out):
    """x broadcast to the shape `out` (numpy's rules), a new contiguous tensor."""
    out = tuple(out)
    y = rt.alloc(out, x.dtype)
    aligned = (1,) * (len(out) - len(x.shape)) + tuple(x.shape)
    src = contiguous_strides(aligned)
    rt.strided_copy(stream, x, y, out, [0 if aligned[d] == 1 and out[d] != 1 else src[d] for d in range(len(out))],
                    contiguous_strides(out))
    return y


@kernel("Expand", since=8, device="cuda", host_inputs=(1,))
def expand(rt, stream, x, shape):
    dims = tuple(host_ints(rt, stream, shape))
    try:
        out = np.broadcast_shapes(x.shape, dims)
    except ValueError:
        raise InvalidArgument(f"invalid expand shape: {x.shape} to {dims}") from None
    return (broadcast_to(rt, stream, x, out),)


@kernel("Slice", since=10, device="cuda", host_inputs=(1, 2, 3, 4))
def slice_(rt, stream, x, starts, ends, axes=None, steps=None):
    rank = len(x.shape)
    starts, ends = host_ints(rt, stream, starts), host_ints(rt, stream, ends)
    axes = host_ints(rt, stream, axes) if axes is not None else None
    steps = host_ints(rt, stream, steps) if steps is not None else None
    cpu_slice(stand_in(x.shape), starts, ends, axes, steps)  # the CPU kernel's checks
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps if steps is not None else [1] * len(axes)
    begin, step, out = [0] * rank, [1] * rank, list(x.shape)
    for a, s, e, k in zip(axes, starts, ends, steps):
        a %= rank
        rng = range(x.shape[a])[axis_slice(s, e, k, x.shape[a])]
        begin[a], step[a], out[a] = (rng.start if len(rng) else 0), k, len(rng)
    y = rt.alloc(out, x.dtype)
    src = contiguous_strides(x.shape)
    if y.size:
        rt.strided_copy(stream, x, y, out, [src[d] * step[d] for d in range(rank)], contiguous_strides(out),
                        sum(begin[d] * src[d] for d in range(rank)))
    return (y,)


def _check_gather(node, graph):
    idx = graph.value(node.inputs[1]).dtype
    return None if idx == np.int64 else f"indices of type {idx}: the CUDA Gather takes int64"


@kernel("Gather", since=1, device="cuda", check=_check_gather)
def gather(rt, stream, data, indices, *, axis=0, _gpu_check=None):
    """An index outside [-n, n) fails where it is known on the host, else reads zeros and is reported (shape.cu)."""
    axis = checks.axis(axis, len(data.shape))
    n = data.shape[axis]
    if indices.host is not None:
        checks.index_range(indices.host, n)
    check = gpu_check_arg(_gpu_check, rt, stream, f"indices element out of data bounds, idx={{value}} must be within "
                          f"the inclusive range [{-n},{n - 1}]")
    inner = math.prod(data.shape[axis + 1:])
    y = rt.alloc(data.shape[:axis] + indices.shape + data.shape[axis + 1:], data.dtype)
    m = indices.size
    if data.dtype.itemsize not in (1, 2, 4, 8):
        raise TypeError(f"CUDA Gather of {data.dtype}")
    rt.launch(f"seamless_gather_{data.dtype.itemsize}", y.size, stream, ("int64", y.size), ("ptr", data.ptr),
              ("ptr", indices.ptr), ("ptr", y.ptr), ("int64", n), ("int64", m), ("int64", inner), check)
    return (y,)


@kernel("Shape", since=1, device="cuda")
def shape(rt, stream, x, *, start=0, end=None):
    dims = np.array(x.shape[start:end], np.int64)  # known on the host: no device work
    return (DeviceTensor.on_host(dims),)


@kernel("Size", since=1, device="cuda")
def size(rt, stream, x):
    value = np.array(x.size, np.int64)
    return (DeviceTensor.on_host(value),)


# --- indexing -----------------------------------------------------------------------------

MOVABLE = ALL | frozenset(t for t in exotic_dtypes() if t not in PACKED_BITS)
# the types native/cuda/shape.cu instantiates its arithmetic for
NUMBER_SUFFIX = {**{t: s for t, s in SUFFIX.items() if s in ("f32", "f16", "bf16")},
                 np.dtype(np.int32): "i32", np.dtype(np.int64): "i64"}
NUMBERS = frozenset(NUMBER_SUFFIX)
INDEX_SUFFIX = {np.dtype(np.int32): "i32", np.dtype(np.int64): "i64"}
REDUCTIONS = {"add": codes.REDUCE_ADD, "mul": codes.REDUCE_MUL, "max": codes.REDUCE_MAX, "min": codes.REDUCE_MIN}


def axis_view(shape, axis):
    """(outer, n, inner): shape viewed as 3-D around `axis`."""
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])


# --- Split, Tile ------------------------------------------------------------------------


def _split_sizes(dim, split, n):
    """The parts' lengths by the CPU kernel's rule, read off a zero-width stand-in (no data)."""
    return [part.shape[0] for part in split_parts(np.empty((dim, 0), np.bool_), split, 0, n)]


VIEW_ALIGN = 256  # cuMemAlloc's alignment, which kernels' vector loads may assume of an input


def _split(rt, stream, x, axis, split, n):
    axis = checks.axis(axis, len(x.shape))
    outer, dim, inner = axis_view(x.shape, axis)
    sizes = _split_sizes(dim, split, n)
    starts = [sum(sizes[:k]) * inner * x.dtype.itemsize for k in range(len(sizes))]
    if outer == 1 and x.ptr and x.dtype not in PACKED_BITS and all(s % VIEW_ALIGN == 0 for s in starts):
        # each piece is a contiguous range of x (a decode step's [1, 1, n] split on its last axis): views, no copy
        return tuple(DeviceTensor(x.ptr + start, x.shape[:axis] + (size,) + x.shape[axis + 1:], x.dtype,
                                  base=x.base or x) for start, size in zip(starts, sizes))
    outs, offset = [], 0
    for size in sizes:
        y = rt.alloc(x.shape[:axis] + (size,) + x.shape[axis + 1:], x.dtype)
        if y.size:  # x as [outer, dim, inner]: rows [offset, offset + size) of the middle axis
            rt.strided_copy(stream, x, y, (outer, size, inner), (dim * inner, inner, 1), (size * inner, inner, 1),
                            offset * inner)
        outs.append(y)
        offset += size
    return tuple(outs)


@kernel("Split", since=2, until=12, types=MOVABLE, device="cuda")
def split_2(rt, stream, x, *, axis=0, split=None, _num_outputs):
    return _split(rt, stream, x, axis, split, _num_outputs)


@kernel("Split", since=13, types=MOVABLE, device="cuda", host_inputs=(1,))
def split_13(rt, stream, x, split=None, *, axis=0, num_outputs=None, _num_outputs):
    return _split(rt, stream, x, axis, None if split is None else host_ints(rt, stream, split), _num_outputs)


@kernel("Tile", since=6, types=MOVABLE, device="cuda", host_inputs=(1,))
def tile(rt, stream, x, repeats):
    reps = host_ints(rt, stream, repeats)
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
        shape = struct_arg("TileShape", out_dims=list(y.shape), in_dims=list(x.shape), rank=len(x.shape))
        rt.launch(f"seamless_tile_{x.dtype.itemsize}", y.size, stream, ("int64", y.size), ("ptr", x.ptr),
                  ("ptr", y.ptr), shape)
    return (y,)


# --- GatherElements, GatherND, ScatterND, ScatterElements --------------------------------


def _axis_index(op, index_shape, data_shape, axis, check) -> tuple:
    """args.h AxisIndex, once the index tensor's shape fits the data's: the same rank, and along every other
    axis no longer than the data (the kernels address the data by the index tensor's coordinates there:
    cpu/shape.py's check_axis_index). check: gpu_check_fields', for an index out of range."""
    check_axis_index(op, index_shape, data_shape, axis)
    return struct_arg("AxisIndex", dims=list(index_shape), data_strides=contiguous_strides(data_shape),
                      axis_dim=data_shape[axis], rank=len(data_shape), axis=axis, check=check)


def _nd_index(data_shape, first, k, per_batch, batch_stride, check) -> tuple:
    """args.h NdIndex: k index values address data axes first .. first + k."""
    if first + k > len(data_shape):
        raise InvalidArgument(f"last dimension of indices ({k}) must not be larger than rank of input tensor "
                              f"({len(data_shape)}) minus batch_dims ({first})")
    slice_size = math.prod(data_shape[first + k:])
    return struct_arg("NdIndex", dims=list(data_shape[first:first + k]),
                      strides=contiguous_strides(data_shape)[first:first + k], slice=slice_size,
                      per_batch=max(per_batch, 1), batch_stride=batch_stride, k=k, check=check)


@kernel("GatherElements", since=11, types=MOVABLE, device="cuda")
def gather_elements(rt, stream, data, indices, *, axis=0, _gpu_check=None):
    """Indices out of range fail where known on the host, else read zeros and are reported (shape.cu)."""
    axis = checks.axis(axis, len(data.shape))
    shape = _axis_index("GatherElements", indices.shape, data.shape, axis,
                        gpu_check_fields(_gpu_check, rt, stream, "GatherElements op: Out of range value in index "
                                         "tensor ({value})", ValueError))
    if indices.host is not None:
        size = data.shape[axis]
        if checks.first_outside(indices.host, -size, size):
            raise ValueError("GatherElements op: Out of range value in index tensor")
    y = rt.alloc(indices.shape, data.dtype)
    rt.launch(f"seamless_gather_elements_{data.dtype.itemsize}_{INDEX_SUFFIX[indices.dtype]}", y.size, stream,
              ("int64", y.size), ("ptr", data.ptr), ("ptr", indices.ptr), ("ptr", y.ptr), shape)
    return (y,)


@kernel("GatherND", since=11, types=MOVABLE, device="cuda")
def gather_nd(rt, stream, data, indices, *, batch_dims=0, _gpu_check=None):
    """Index tuples out of range fail where known on the host, else read zeros and are reported (shape.cu)."""
    b, k = batch_dims, indices.shape[-1]
    if indices.shape[:b] != data.shape[:b]:  # tuple g reads batch g / per_batch of the data
        raise InvalidArgument(f"GatherND: the batch dims ({b}) of indices {indices.shape} and data {data.shape} "
                              "differ")
    # index tuples per batch, data elements per batch
    shape = _nd_index(data.shape, b, k, math.prod(indices.shape[b:-1]), math.prod(data.shape[b:]),
                      gpu_check_fields(_gpu_check, rt, stream, "invalid index found, index = {value}"))
    if indices.host is not None:
        nd_index_range(indices.host, data.shape[b:b + k], "index")
    y = rt.alloc(indices.shape[:-1] + data.shape[b + k:], data.dtype)
    if y.size:
        rt.launch(f"seamless_gather_nd_{data.dtype.itemsize}", y.size, stream, ("int64", y.size), ("ptr", data.ptr),
                  ("ptr", indices.ptr), ("ptr", y.ptr), shape)
    return (y,)


def _check_scatter(node, graph):
    reason = check_reduction(node, graph)
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
def scatter_nd(rt, stream, data, indices, updates, *, reduction="none", _gpu_check=None):
    """Index tuples out of range fail where known on the host, else are skipped and reported (shape.cu)."""
    k = indices.shape[-1]
    shape = _nd_index(data.shape, 0, k, math.prod(indices.shape[:-1]), 0,
                      gpu_check_fields(_gpu_check, rt, stream, "invalid indice found, indice = {value}"))
    if updates.shape != indices.shape[:-1] + data.shape[k:]:  # the kernel reads a tuple per updates' slice
        raise InvalidArgument("updates tensor should have shape equal to indices.shape[:-1] + "
                              f"data.shape[indices.shape[-1]:]. updates shape: {updates.shape}, indices shape: "
                              f"{indices.shape}, data shape: {data.shape}")
    if indices.host is not None:
        nd_index_range(indices.host, data.shape[:k], "indice")
    y, variant, extra = _scatter_target(rt, stream, data, reduction)
    rt.launch(f"seamless_scatter_nd_{variant}", updates.size, stream, ("int64", updates.size), ("ptr", updates.ptr),
              ("ptr", indices.ptr), ("ptr", y.ptr), shape, *extra)
    return (y,)


@kernel("ScatterElements", since=11, types=MOVABLE, device="cuda", check=_check_scatter)
def scatter_elements(rt, stream, data, indices, updates, *, axis=0, reduction="none", _gpu_check=None):
    """Indices out of range fail where known on the host, else are skipped and reported (shape.cu)."""
    axis = checks.axis(axis, len(data.shape))
    if indices.shape != updates.shape:  # the kernel reads an index per update
        raise InvalidArgument(f"Indices and updates must have the same shape: {indices.shape} and {updates.shape}")
    size = data.shape[axis]
    shape = _axis_index("ScatterElements", indices.shape, data.shape, axis,
                        gpu_check_fields(_gpu_check, rt, stream, f"indices element out of data bounds, idx={{value}} "
                                         f"must be within the inclusive range [{-size},{size - 1}]"))
    if indices.host is not None:
        checks.index_range(indices.host, data.shape[axis])
    y, variant, extra = _scatter_target(rt, stream, data, reduction)
    rt.launch(f"seamless_scatter_elements_{variant}_{INDEX_SUFFIX[indices.dtype]}", updates.size, stream,
              ("int64", updates.size), ("ptr", updates.ptr), ("ptr", indices.ptr), ("ptr", y.ptr), shape, *extra)
    return (y,)


@kernel("Scatter", since=9, until=10, types=MOVABLE, device="cuda")  # deprecated alias of ScatterElements
def scatter(rt, stream, data, indices, updates, *, axis=0, _gpu_check=None):
    return scatter_elements(rt, stream, data, indices, updates, axis=axis, _gpu_check=_gpu_check)


# --- Trilu --------------------------------------------------------------------------------


@kernel("Trilu", since=14, types=MOVABLE, device="cuda", host_inputs=(1,))
def trilu(rt, stream, x, k=None, *, upper=1):
    if len(x.shape) < 2:
        raise InvalidArgument("Input tensor should have a rank of at least 2")
    if k is not None and k.size != 1:
        raise ValueError("k should be a 1-D or 0-D tensor.")
    k = 0 if k is None else host_ints(rt, stream, k)[0]
    y = rt.alloc(x.shape, x.dtype)
    rows, cols = x.shape[-2:]
    rt.launch(f"seamless_trilu_{x.dtype.itemsize}", y.size, stream, ("int64", y.size), ("ptr", x.ptr),
              ("ptr", y.ptr), ("int64", rows), ("int64", cols), ("int64", k), ("int", int(bool(upper))))
    return (y,)


# --- Constant, Range, EyeLike (no device work), Compress ----------------------------------


@kernel("Constant", device="cuda", check=check_constant)
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


# --- OneHot, DepthToSpace, SpaceToDepth: composed of the kernels above --------------------


@kernel("OneHot", since=9, types=GPU_INTS, device="cuda", host_inputs=(1,))
def one_hot(rt, stream, indices, depth, values, *, axis=-1):
    depth = int(np.asarray(rt.to_host(depth, stream)).reshape(-1)[0])
    if depth < 0:
        raise InvalidArgument("Depth is negative.")
    if values.size != 2 or len(values.shape) > 1:
        raise InvalidArgument(f"Invalid argument for values; either it's rank is more than 1 or it has more than 2 "
                              f"elements: shape {values.shape}")
    s = Scratch(rt, indices, values)
    rank = len(indices.shape) + 1
    axis = checks.axis(axis, rank)
    idx = s(cast_to(rt, stream, indices, np.dtype(np.int64)))
    # negative indices count from the end; others out of range match no class ("off")
    idx = s(where(rt, stream, s(compare(rt, stream, LESS, idx, s(device_scalar(rt, stream, 0, idx.dtype)))),
                  s(binary(rt, stream, ADD, idx, s(device_scalar(rt, stream, depth, idx.dtype)))), idx)[0])
    shape = indices.shape[:axis] + (1,) + indices.shape[axis:]
    checks.allocation((depth,), 8, "OneHot's classes")
    classes = np.arange(depth, dtype=np.int64).reshape((depth,) + (1,) * (rank - axis - 1))
    hot = s(compare(rt, stream, EQUAL, DeviceTensor(idx.ptr, shape, idx.dtype),
                    s(rt.device(DeviceTensor.on_host(classes), stream))))
    off = DeviceTensor(values.ptr, (), values.dtype)
    on = DeviceTensor(values.ptr + values.dtype.itemsize, (), values.dtype)
    return s.done(where(rt, stream, hot, on, off)[0])


@kernel("DepthToSpace", since=1, device="cuda")
def depth_to_space(rt, stream, x, *, blocksize, mode="DCR"):
    b, c, h, w = _blocks(x, blocksize, c_divisible=True)
    bs, rest = blocksize, c // blocksize ** 2
    view, perm = ((b, bs, bs, rest, h, w), (0, 3, 4, 1, 5, 2)) if mode == "DCR" else \
        ((b, rest, bs, bs, h, w), (0, 1, 4, 2, 5, 3))
    y = permuted(rt, stream, DeviceTensor(x.ptr, view, x.dtype), perm)
    return (DeviceTensor(y.ptr, (b, rest, h * bs, w * bs), x.dtype),)


@kernel("SpaceToDepth", since=1, device="cuda")
def space_to_depth(rt, stream, x, *, blocksize):
    b, c, h, w = _blocks(x, blocksize, c_divisible=False)
    bs = blocksize
    y = permuted(rt, stream, DeviceTensor(x.ptr, (b, c, h // bs, bs, w // bs, bs), x.dtype), (0, 3, 5, 1, 2, 4))
    return (DeviceTensor(y.ptr, (b, c * bs * bs, h // bs, w // bs), x.dtype),)


def _blocks(x, bs, c_divisible):
    if len(x.shape) != 4:
        raise InvalidArgument(f"SpaceDepth ops require a 4-D input. Provided rank: {len(x.shape)}")
    if bs < 1:
        raise ValueError(f"blocksize must be positive, got {bs}")
    b, c, h, w = x.shape
    if (c % (bs * bs) if c_divisible else h % bs or w % bs):
        raise InvalidArgument(f"shape {x.shape} does not divide into blocks of {bs}")
    return b, c, h, w


# --- ReverseSequence, TensorScatter: composed of the kernels above ------------------------


def _along(rt, stream, s, values, axis, rank):
    """A host int64 vector as a device tensor shaped to broadcast along `axis` of a rank-`rank` tensor."""
    shape = tuple(-1 if d == axis else 1 for d in range(rank))
    return s(rt.device(DeviceTensor.on_host(np.asarray(values, np.int64).reshape(shape)), stream))


@kernel("ReverseSequence", since=10, types=MOVABLE, device="cuda")
def reverse_sequence(rt, stream, x, sequence_lens, *, batch_axis=1, time_axis=0, _gpu_check=None):
    """The first sequence_lens[b] steps along time_axis reversed for each batch entry b: a source step
    per element computed on the GPU (the lengths stay there, checked there), then GatherElements."""
    if sequence_lens.shape != (x.shape[batch_axis],):  # read as one length a batch entry
        raise InvalidArgument(f"sequence_lens shape must be {{batch_size}}. Got:{sequence_lens.shape}. "
                              f"batch_size={x.shape[batch_axis]}")
    seq = x.shape[time_axis]
    check_ints(rt, stream, sequence_lens, 0, seq, _gpu_check,
               f"Invalid sequence length: {{value}}. Value must be in range [0,{seq}]", ValueError)
    s = Scratch(rt, x, sequence_lens)
    rank = len(x.shape)
    steps = _along(rt, stream, s, np.arange(x.shape[time_axis]), time_axis, rank)
    along_batch = tuple(x.shape[batch_axis] if d == batch_axis else 1 for d in range(rank))
    lens = s(cast_to(rt, stream, DeviceTensor(sequence_lens.ptr, along_batch, sequence_lens.dtype), I64))
    back = s(binary(rt, stream, SUB, s(binary(rt, stream, SUB, lens, s(device_scalar(rt, stream, 1, I64)))), steps))
    source = s(where(rt, stream, s(compare(rt, stream, LESS, steps, lens)), back, steps)[0])
    return s.done(*gather_elements(rt, stream, x, s(broadcast_to(rt, stream, source, x.shape)), axis=time_axis))


@kernel("TensorScatter", since=24, types=MOVABLE, device="cuda",
        check=lambda n, g: None if n.attrs.get("mode", "linear") in ("linear", "circular") else "mode not defined")
def tensor_scatter(rt, stream, past_cache, update, write_indices=None, *, axis=-2, mode="linear", _gpu_check=None):
    """update written into a copy of the cache along `axis` from write_indices[b] (0 without), wrapping
    in circular mode: positions computed on the GPU, then ScatterElements. write_indices are checked first
    (stock's FAIL for a negative one, or one whose update would pass the cache's end in linear mode)."""
    rank = len(past_cache.shape)
    axis, highest = tensor_scatter_geometry(past_cache.shape, update.shape, axis,
                                            None if write_indices is None else write_indices.shape, mode)
    if write_indices is not None:
        check_ints(rt, stream, write_indices, 0, highest, _gpu_check,
                   f"TensorScatter: write_indices value {{value}} is negative, or its update of {update.shape[axis]} "
                   f"positions would pass max_sequence_length ({past_cache.shape[axis]}) in linear mode", ValueError)
    s = Scratch(rt, past_cache, update, write_indices)
    steps = _along(rt, stream, s, np.arange(update.shape[axis]), axis, rank)
    if write_indices is not None:
        starts = s(cast_to(rt, stream, DeviceTensor(write_indices.ptr, (past_cache.shape[0],) + (1,) * (rank - 1),
                                                    write_indices.dtype), I64))
        steps = s(binary(rt, stream, ADD, steps, starts))
    if mode == "circular":
        steps = s(binary(rt, stream, MOD, steps, s(device_scalar(rt, stream, past_cache.shape[axis], I64))))
    return s.done(*scatter_elements(rt, stream, past_cache, s(broadcast_to(rt, stream, steps, update.shape)), update,
                                    axis=axis))


# --- Pad ----------------------------------------------------------------------------------

PAD_MODES = {"constant": codes.PAD_CONSTANT, "reflect": codes.PAD_REFLECT, "edge": codes.PAD_EDGE,
             "wrap": codes.PAD_WRAP}


def _check_pad(node, graph):
    mode = node.attrs.get("mode", "constant")
    if mode not in PAD_MODES:
        return f"Pad mode={mode!r} not supported"
    dtype = graph.value(node.inputs[0]).dtype
    if dtype in PACKED_BITS or dtype.kind == "O" or dtype.itemsize not in (1, 2, 4, 8):
        return f"Pad of {dtype} elements not supported on CUDA"
    shape = graph.value(node.inputs[0]).shape
    if shape is not None and len(shape) > MAX_DIMS:
        return f"rank {len(shape)} above the CUDA kernels' limit of {MAX_DIMS}"
    return None


def _pad(rt, stream, x, pads, mode, value, axes=None):
    rank = len(x.shape)
    if rank > MAX_DIMS:
        raise ValueError(f"rank {rank} above the CUDA kernels' limit of {MAX_DIMS}")
    axes = list(range(rank)) if axes is None else [checks.axis(a, rank) for a in axes]
    if len(pads) != 2 * len(axes):
        raise ValueError(f"Pad with {len(pads)} pads for {len(axes)} axes")
    begin, end = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        begin[a], end[a] = pads[i], pads[i + len(axes)]
    out = [d + b + e for d, b, e in zip(x.shape, begin, end)]
    if any(o < 0 for o in out):
        raise ValueError(f"Pad of shape {x.shape} by {pads} crops past the input")
    # negative pads crop first: the cropped input starts at `lo` and has `length` elements per axis
    lo = [max(-b, 0) for b in begin]
    length = [d - max(-b, 0) - max(-e, 0) for d, b, e in zip(x.shape, begin, end)]
    if mode != "constant" and any(n <= 0 < o for n, o in zip(length, out)):
        raise ValueError(f"Pad mode={mode!r} cannot pad an empty axis (shape {x.shape}, pads {pads})")
    if mode == "reflect":  # one mirror image at most (the kernel would bounce on; stock refuses)
        for a, (n, b, e) in enumerate(zip(length, begin, end)):
            for side, p in (("pre", b), ("post", e)):
                if p > max(n - 1, 0):
                    raise InvalidArgument(f"Pad reflect: {side}-pad ({p}) exceeds maximum allowed ({n - 1}) for axis "
                                          f"{a}. Input shape:{x.shape}")
    y = rt.alloc(out, x.dtype)
    size = x.dtype.itemsize
    bits = int(np.asarray([value]).astype(x.dtype).view(f"<u{size}")[0])  # the constant's bytes, as int64
    bits = bits - (1 << 64) if bits >= 1 << 63 else bits
    geometry = struct_arg("PadGeometry", out_dims=out, in_strides=contiguous_strides(x.shape),
                          shift=[max(b, 0) for b in begin], lo=lo, len=length, rank=rank, mode=PAD_MODES[mode])
    rt.launch(f"seamless_pad_{size}", y.size, stream, ("int64", y.size), ("ptr", x.ptr), ("ptr", y.ptr),
              ("int64", bits), geometry)
    return (y,)


@kernel("Pad", since=2, until=10, device="cuda", check=_check_pad)
def pad_2(rt, stream, data, *, pads, mode="constant", value=0.0):
    return _pad(rt, stream, data, list(pads), mode, value)


@kernel("Pad", since=11, device="cuda", check=_check_pad, host_inputs=(1, 2, 3))
def pad_11(rt, stream, data, pads, constant_value=None, axes=None, *, mode="constant"):
    value = 0
    if constant_value is not None and constant_value.size:
        value = np.asarray(rt.to_host(constant_value, stream)).reshape(-1)[0]
    return _pad(rt, stream, data, host_ints(rt, stream, pads), mode, value,
                None if axes is None else host_ints(rt, stream, axes))


# ops whose output shape depends on the data, run on the host (on_host)
# integer and bool inputs already run on the host by the registry's host rule; capture class "host":
# exec/cuda_capture.py takes their outputs as host values
kernel("NonZero", since=9, types=frozenset([F32, F16]), device="cuda", host_inputs=(0,), capture="host")(
    on_host(non_zero))
kernel("Unique", since=11, types=frozenset([F32]), device="cuda", host_inputs=(0,), capture="host")(on_host(unique))
