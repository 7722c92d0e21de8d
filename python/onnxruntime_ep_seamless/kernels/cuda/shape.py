"""Shape and data-movement ops on CUDA. Shape arguments are read on the host (constants and
values computed there are free; a value computed on the GPU costs a host seam). Reshape-like
ops and BitCast alias their input; Transpose, Concat, Slice and Expand are one strided-copy launch each."""
import math

import numpy as np

from ...graph.ir import attr_dtype
from ...runtime.cuda import DeviceTensor, contiguous_strides
from .. import checks
from ..checks import InvalidArgument
from ..cpu.elementwise import _check_bitcast
from ..cpu.shape import _check_perm, _slice, _squeeze, _unsqueeze, axis_slice
from ..registry import ALL, kernel


def _ints(rt, stream, t):
    return [int(v) for v in np.asarray(rt.to_host(t, stream)).reshape(-1)]


def stand_in(shape, dtype=np.bool_) -> np.ndarray:
    """An array of this shape that holds no memory (every element one zero): the CPU kernels' shape checks and
    view arithmetic run on it, so both devices refuse the same inputs with the same errors."""
    return np.broadcast_to(np.zeros((), dtype), tuple(shape))


@kernel("Reshape", since=5, device="cuda", host_inputs=(1,))
def reshape(rt, stream, data, shape, *, allowzero=0):
    dims = _ints(rt, stream, shape)
    if dims and min(dims) < -1:
        raise ValueError(f"A dimension cannot be less than -1, got {min(dims)}")
    dims = [data.shape[i] if d == 0 and not allowzero else d for i, d in enumerate(dims)]
    out = np.empty(data.shape, np.bool_).reshape(dims).shape  # numpy resolves -1 and checks the size
    return (DeviceTensor(data.ptr, out, data.dtype, None if data.host is None else data.host.reshape(out)),)


@kernel("BitCast", since=26, types=ALL, device="cuda", check=_check_bitcast)
def bit_cast(rt, stream, x, *, to):
    """The same bytes read as another type of the same width: an alias."""
    dtype = attr_dtype(to)
    return (DeviceTensor(x.ptr, x.shape, dtype, None if x.host is None else np.ascontiguousarray(x.host).view(dtype)),)


@kernel("Flatten", since=1, device="cuda")
def flatten(rt, stream, x, *, axis=1):
    axis = checks.axis(axis, len(x.shape) + 1)  # axis may equal the rank
    outer = math.prod(x.shape[:axis])
    inner = math.prod(x.shape[axis:])
    return (DeviceTensor(x.ptr, (outer, inner), x.dtype),)


def _unsqueezed(shape, axes):
    return _unsqueeze(stand_in(shape), axes)[0].shape


@kernel("Unsqueeze", since=13, device="cuda", host_inputs=(1,))
def unsqueeze(rt, stream, x, axes):
    return (DeviceTensor(x.ptr, _unsqueezed(x.shape, _ints(rt, stream, axes)), x.dtype),)


@kernel("Unsqueeze", since=1, until=12, device="cuda")
def unsqueeze_1(rt, stream, x, *, axes):
    return (DeviceTensor(x.ptr, _unsqueezed(x.shape, axes), x.dtype),)


def _squeezed(shape, axes):
    """The shape without `axes` (every 1 when none), refused where an axis is not 1: the view must keep the size."""
    return _squeeze(stand_in(shape), axes)[0].shape


@kernel("Squeeze", since=13, device="cuda", host_inputs=(1,))
def squeeze(rt, stream, x, axes=None):
    return (DeviceTensor(x.ptr, _squeezed(x.shape, _ints(rt, stream, axes) if axes is not None else []), x.dtype),)


@kernel("Squeeze", since=1, until=12, device="cuda")
def squeeze_1(rt, stream, x, *, axes=()):
    return (DeviceTensor(x.ptr, _squeezed(x.shape, list(axes)), x.dtype),)


def permuted(rt, stream, x, perm):
    """x with its axes in the order `perm` (a copy)."""
    y = rt.alloc(tuple(x.shape[p] for p in perm), x.dtype)
    src = contiguous_strides(x.shape)
    rt.strided_copy(stream, x, y, y.shape, [src[p] for p in perm], contiguous_strides(y.shape))
    return y


@kernel("Transpose", since=1, device="cuda", validate=_check_perm)
def transpose(rt, stream, x, *, perm=None):
    if perm is not None and len(perm) != len(x.shape):  # a permutation (validate) of x's axes
        raise InvalidArgument(f"perm size: {len(perm)} does not match input rank: {len(x.shape)}")
    return (permuted(rt, stream, x, list(perm) if perm is not None else list(range(len(x.shape)))[::-1]),)


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
    dims = tuple(_ints(rt, stream, shape))
    try:
        out = np.broadcast_shapes(x.shape, dims)
    except ValueError:
        raise InvalidArgument(f"invalid expand shape: {x.shape} to {dims}") from None
    return (broadcast_to(rt, stream, x, out),)


@kernel("Slice", since=10, device="cuda", host_inputs=(1, 2, 3, 4))
def slice_(rt, stream, x, starts, ends, axes=None, steps=None):
    rank = len(x.shape)
    starts, ends = _ints(rt, stream, starts), _ints(rt, stream, ends)
    axes = _ints(rt, stream, axes) if axes is not None else None
    steps = _ints(rt, stream, steps) if steps is not None else None
    _slice(stand_in(x.shape), starts, ends, axes, steps)  # the CPU kernel's checks
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
def gather(rt, stream, data, indices, *, axis=0):
    """An index outside [-n, n) fails where it is known on the host, else reads zeros (copy.cu)."""
    axis = checks.axis(axis, len(data.shape))
    n = data.shape[axis]
    if indices.host is not None:
        checks.index_range(indices.host, n)
    inner = math.prod(data.shape[axis + 1:])
    y = rt.alloc(data.shape[:axis] + indices.shape + data.shape[axis + 1:], data.dtype)
    m = indices.size
    if data.dtype.itemsize not in (1, 2, 4, 8):
        raise TypeError(f"CUDA Gather of {data.dtype}")
    rt.launch(f"seamless_gather_{data.dtype.itemsize}", y.size, stream, ("int64", y.size), ("ptr", data.ptr),
              ("ptr", indices.ptr), ("ptr", y.ptr), ("int64", n), ("int64", m), ("int64", inner))
    return (y,)


@kernel("Shape", since=1, device="cuda")
def shape(rt, stream, x, *, start=0, end=None):
    dims = np.array(x.shape[start:end], np.int64)  # known on the host: no device work
    return (DeviceTensor.on_host(dims),)


@kernel("Size", since=1, device="cuda")
def size(rt, stream, x):
    value = np.array(x.size, np.int64)
    return (DeviceTensor.on_host(value),)
