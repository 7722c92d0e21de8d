"""Shape, indexing and data-movement ops (ONNX semantics).

Views of an input are returned where numpy gives them (Transpose, Reshape, Slice, ...);
nothing here writes into an input.
"""
import math

import numpy as np

from .. import checks
from ..checks import InvalidArgument
from ..registry import ALL, kernel
from ...graph.ir import ONNX_TO_NUMPY, attr_dtype

_INT64 = np.dtype(np.int64)

# the ops that only move or count elements take string tensors too
STRINGS = ("strings",)


def _ints(t):
    """A shape-like input (int64 tensor) as a list of Python ints."""
    return np.asarray(t).reshape(-1).tolist()


def _axis(axis, rank):
    return checks.axis(axis, rank)


# --- layout -----------------------------------------------------------------------------


def check_perm(node, graph):
    perm = node.attrs.get("perm")
    if perm is not None:
        seen = set()
        for p in perm:
            if not 0 <= p < len(perm) or p in seen:
                raise ValueError(f"Attribute perm of Transpose has an invalid value. Value {p} is "
                                 f"{'repeated' if p in seen else 'outside range'}.")
            seen.add(p)


@kernel("Transpose", validate=check_perm, takes=STRINGS)
def transpose(data, *, perm=None):
    if perm is not None and len(perm) != data.ndim:
        raise InvalidArgument(f"perm size: {len(perm)} does not match input rank: {data.ndim}")
    return (np.transpose(data, perm),)


@kernel("Reshape", since=5, takes=STRINGS)
def reshape(data, shape, *, allowzero=0):
    shape = _ints(shape)
    if shape and min(shape) < -1:
        raise ValueError(f"A dimension cannot be less than -1, got {min(shape)}")
    if not allowzero:  # 0 copies the input's dim (allowzero=1 keeps a literal 0)
        shape = [data.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return (np.reshape(data, shape),)


def flattened_shape(shape: tuple, axis: int) -> tuple[int, int]:
    """Flatten's output shape (the CUDA kernel's too): a negative axis counts from the rank, which it may equal."""
    rank = len(shape)
    if not -rank <= axis <= rank:
        raise ValueError(f"axis {axis} is not in valid range [{-rank},{rank}]")
    axis = axis + rank if axis < 0 else axis
    return math.prod(shape[:axis]), math.prod(shape[axis:])


@kernel("Flatten", takes=STRINGS)
def flatten(data, *, axis=1):
    return (np.reshape(data, flattened_shape(data.shape, axis)),)


def squeeze(data, axes):
    if not axes:  # absent, or empty as ORT reads it: drop every 1
        return (np.squeeze(data),)
    axes = set(checks.axes(axes, data.ndim, unique=False))  # a repeated axis is one axis, as in ORT
    bad = [a for a in sorted(axes) if data.shape[a] != 1]
    if bad:
        raise ValueError(f"Dimension of input {bad[0]} must be 1 instead of {data.shape[bad[0]]}. shape={data.shape}")
    return (np.squeeze(data, axis=tuple(axes)),)


@kernel("Squeeze", until=12, takes=STRINGS)
def squeeze_1(data, *, axes=None):
    return squeeze(data, axes)


@kernel("Squeeze", since=13, takes=STRINGS)
def squeeze_13(data, axes=None):
    return squeeze(data, None if axes is None else _ints(axes))


@kernel("Unsqueeze", until=12, takes=STRINGS)
def unsqueeze_1(data, *, axes):
    return unsqueeze(data, axes)


def unsqueeze(data, axes):
    # negative axes count from the end of the output
    checks.axes(axes, data.ndim + len(axes), error=InvalidArgument)
    return (np.expand_dims(data, tuple(axes)),)


@kernel("Unsqueeze", since=13, takes=STRINGS)
def unsqueeze_13(data, axes):
    return unsqueeze(data, _ints(axes))


@kernel("Concat", takes=STRINGS)
def concat(*inputs, axis=1):  # axis defaulted to 1 in opset 1 only; required since 4
    return (np.concatenate(inputs, axis=checks.axis(axis, inputs[0].ndim)),)


def split_parts(data, split, axis, n):
    axis = _axis(axis, data.ndim)
    if split is not None:
        if any(v < 0 for v in split):
            raise ValueError("Invalid value in 'split' input. All values must be >= 0.")
        if len(split) != n or sum(split) != data.shape[axis]:
            raise ValueError(f"Cannot split using values in 'split' attribute. Axis={axis} Input shape={data.shape} "
                             f"NumOutputs={n} Num entries in 'split' (must equal number of outputs) was {len(split)} "
                             f"Sum of sizes in 'split' (must equal size of selected axis) was {sum(split)}")
    if split is None:  # equal parts; the last one is smaller when not divisible (num_outputs, opset 18)
        size = -(-data.shape[axis] // n)
        split = [min(size, max(data.shape[axis] - i * size, 0)) for i in range(n)]
    bounds = np.cumsum(split)[:-1].tolist()
    return tuple(np.split(data, bounds, axis=axis))


@kernel("Split", since=2, until=12, takes=STRINGS)
def split_2(data, *, axis=0, split=None, _num_outputs):
    return split_parts(data, split, axis, _num_outputs)


@kernel("Split", since=13, takes=STRINGS)
def split_13(data, split=None, *, axis=0, num_outputs=None, _num_outputs):
    return split_parts(data, None if split is None else _ints(split), axis, _num_outputs)


_END_OF_AXIS = (2**31 - 1, 2**63 - 1)  # INT32_MAX, INT64_MAX


def axis_slice(start: int, end: int, step: int, dim: int) -> slice:
    """ONNX Slice's start/end/step on an axis of length dim, clamped as ORT does, as a Python slice."""
    start = start + dim if start < 0 else start
    if end in _END_OF_AXIS:  # as ORT: "to the end" in the step's direction (numpy's None),
        end = dim if step > 0 else -dim - 1  # also when counting down
    end = end + dim if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    else:  # counting down: clamp to [-1, dim-1], where -1 means "through index 0"
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        end = None if end < 0 else end
    return slice(start, end, step)


def slice_(data, starts, ends, axes, steps):
    index = [slice(None)] * data.ndim
    if len(starts) != len(ends):
        raise ValueError("Starts and ends shape mismatch")
    if axes is not None and len(axes) != len(starts):
        raise ValueError("Starts and axes shape mismatch")
    if steps is not None and len(steps) != len(starts):
        raise ValueError("Starts and steps shape mismatch")
    axes = range(len(starts)) if axes is None else axes
    if any(not -data.ndim <= a < data.ndim for a in axes):
        raise InvalidArgument("'axes' has an axis outside of the tensor dimension count")
    axes = [a + data.ndim if a < 0 else a for a in axes]
    if len(set(axes)) != len(axes):
        raise InvalidArgument("'axes' has duplicates")
    steps = [1] * len(starts) if steps is None else steps
    if 0 in steps:
        raise InvalidArgument("'step' value cannot be 0")
    for start, end, axis, step in zip(starts, ends, axes, steps):
        index[axis] = axis_slice(start, end, step, data.shape[axis])
    return (data[tuple(index)],)


@kernel("Slice", until=9, takes=STRINGS)
def slice_1(data, *, starts, ends, axes=None):
    return slice_(data, starts, ends, axes, None)


@kernel("Slice", since=10, takes=STRINGS)
def slice_10(data, starts, ends, axes=None, steps=None):
    return slice_(data, _ints(starts), _ints(ends), None if axes is None else _ints(axes),
                  None if steps is None else _ints(steps))


@kernel("Expand", since=8, takes=STRINGS)
def expand(data, shape):
    try:
        target = np.broadcast_shapes(data.shape, tuple(_ints(shape)))
    except ValueError:
        raise InvalidArgument(f"invalid expand shape: {data.shape} to {_ints(shape)}") from None
    checks.allocation(target, data.itemsize, "Expand's output")
    return (np.broadcast_to(data, target),)


_TILE_MAX_BYTES = 1 << 32  # stock ORT's limit on Tile's output


def tiled_shape(shape, itemsize: int, repeats: list) -> tuple:
    """Tile's output shape, with stock ORT's checks (the CUDA kernel's too)."""
    if len(repeats) != len(shape):
        raise InvalidArgument("'repeat' input tensor must have the same length as the 'input' tensor")
    if any(r < 0 for r in repeats):
        raise InvalidArgument(f"Tile repeat value must be non-negative, got: {min(repeats)}")
    out = tuple(d * r for d, r in zip(shape, repeats))
    if math.prod(out) * itemsize > _TILE_MAX_BYTES:
        raise InvalidArgument(f"Tile output tensor would require more than {_TILE_MAX_BYTES} bytes, which exceeds the "
                              f"supported maximum of {_TILE_MAX_BYTES} bytes.")
    return out


@kernel("Tile", since=6, takes=STRINGS)
def tile(data, repeats):
    repeats = _ints(repeats)
    tiled_shape(data.shape, data.itemsize, repeats)
    return (np.tile(data, repeats),)


@kernel("DepthToSpace")
def depth_to_space(data, *, blocksize, mode="DCR"):
    _check_4d(data, "DepthToSpace")
    b, c, h, w = data.shape
    bs = blocksize
    if c % (bs * bs):
        raise InvalidArgument("DepthToSpace requires input depth to be a multiple of (block_size * block_size)")
    if mode == "DCR":
        tmp = data.reshape(b, bs, bs, c // bs**2, h, w).transpose(0, 3, 4, 1, 5, 2)
    else:  # CRD
        tmp = data.reshape(b, c // bs**2, bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
    return (tmp.reshape(b, c // bs**2, h * bs, w * bs),)


@kernel("SpaceToDepth")
def space_to_depth(data, *, blocksize):
    _check_4d(data, "SpaceToDepth")
    b, c, h, w = data.shape
    bs = blocksize
    if h % bs:
        raise InvalidArgument("SpaceToDepth requires input height to be a multiple of block_size")
    if w % bs:
        raise InvalidArgument("SpaceToDepth requires input width to be a multiple of block_size")
    tmp = data.reshape(b, c, h // bs, bs, w // bs, bs).transpose(0, 3, 5, 1, 2, 4)
    return (tmp.reshape(b, c * bs * bs, h // bs, w // bs),)


def _check_4d(data, op):
    if data.ndim != 4:
        raise InvalidArgument(f"{op} requires a 4-D input, got shape {data.shape}")


# --- shape queries and constants --------------------------------------------------------


@kernel("Shape", takes=STRINGS)
def shape(data, *, start=0, end=None):
    return (np.array(data.shape[start:end], dtype=_INT64),)  # python slicing clamps like the spec


@kernel("Size", takes=STRINGS)
def size(data):
    return (np.array(data.size, dtype=_INT64),)


def check_constant(node, graph):
    value = node.attrs.get("value")
    if value is not None and np.asarray(value).dtype not in ALL:
        return f"Constant of element type {np.asarray(value).dtype} is not supported"
    return None


@kernel("Constant", check=check_constant)
def constant(*, value=None, value_float=None, value_floats=None, value_int=None, value_ints=None):
    if value is not None:
        return (np.asarray(value),)
    if value_float is not None:
        return (np.array(value_float, dtype=np.float32),)
    if value_floats is not None:
        return (np.array(value_floats, dtype=np.float32),)
    if value_int is not None:
        return (np.array(value_int, dtype=_INT64),)
    return (np.array(value_ints, dtype=_INT64),)


@kernel("ConstantOfShape", since=9)
def constant_of_shape(shape, *, value=None):
    value = np.zeros(1, np.float32) if value is None else np.asarray(value)
    checks.allocation(_ints(shape), value.itemsize, "ConstantOfShape")
    return (np.full(_ints(shape), value.reshape(-1)[0], dtype=value.dtype),)


@kernel("Range", since=27)
def range_27(start, limit, delta, *, stash_type=1):
    # float16 and bfloat16 ranges are computed in stash_type (float32 or float64) and rounded once
    if start.dtype.itemsize == 2 and start.dtype.kind not in "iu":
        wide = attr_dtype(stash_type)
        return (range_(start.astype(wide), limit.astype(wide), delta.astype(wide))[0].astype(start.dtype),)
    return range_(start, limit, delta)


@kernel("Range", since=11, until=26)
def range_(start, limit, delta):
    start, limit, delta = (np.asarray(v).reshape(()) for v in (start, limit, delta))
    if delta == 0:
        raise InvalidArgument("delta in Range operator can not be zero!")
    if start.dtype.kind == "f":
        n = max(math.ceil((float(limit) - float(start)) / float(delta)), 0)
    else:  # in Python integers: limit - start may overflow the element type
        n = max(-((int(start) - int(limit)) // int(delta)), 0)
    checks.allocation([n], start.itemsize, "Range")
    if start.dtype.kind == "f":  # value i is start + delta added i times in T, as the spec's loop does
        steps = np.full(n, delta, dtype=start.dtype)
        if n:
            steps[0] = start
        return (np.cumsum(steps, dtype=start.dtype),)
    return (start + np.arange(n, dtype=start.dtype) * delta,)


@kernel("EyeLike", since=9)
def eye_like(data, *, dtype=None, k=0):
    if data.ndim != 2:
        raise InvalidArgument("EyeLike : Input tensor dimension is not 2")
    out_dtype = data.dtype if dtype is None else ONNX_TO_NUMPY[dtype]
    return (np.eye(data.shape[0], data.shape[1], k=k, dtype=out_dtype),)


@kernel("Trilu", since=14)
def trilu(data, k=None, *, upper=1):
    k = 0 if k is None else int(np.asarray(k).reshape(()))
    return ((np.triu if upper else np.tril)(data, k),)


@kernel("OneHot", since=9)
def one_hot(indices, depth, values, *, axis=-1):
    depth = int(np.asarray(depth).reshape(-1)[0])
    if depth < 0:
        raise InvalidArgument("Depth is negative.")
    idx = np.asarray(indices).astype(np.int64)
    idx = np.where(idx < 0, idx + depth, idx)  # negative indices count from the end; others out of range stay "off"
    axis = _axis(axis, idx.ndim + 1)
    checks.allocation(idx.shape + (depth,), max(values.itemsize, 8), "OneHot's output")
    classes = np.arange(depth).reshape((-1,) + (1,) * (idx.ndim - axis))
    hot = np.expand_dims(idx, axis) == classes
    return (np.where(hot, values[1], values[0]).astype(values.dtype, copy=False),)


@kernel("NonZero", since=9)
def non_zero(data):
    return (np.array(np.nonzero(np.atleast_1d(data)), dtype=_INT64).reshape(max(data.ndim, 1), -1),)


# --- gather / scatter -------------------------------------------------------------------


@kernel("Gather", takes=STRINGS)
def gather(data, indices, *, axis=0):
    axis = _axis(axis, data.ndim)
    checks.index_range(indices, data.shape[axis])
    return (np.take(data, indices, axis=axis),)


@kernel("GatherElements", since=11, takes=STRINGS)
def gather_elements(data, indices, *, axis=0):
    axis = _axis(axis, data.ndim)
    check_axis_index("GatherElements", indices.shape, data.shape, axis)
    size = data.shape[axis]
    if checks.first_outside(indices, -size, size):
        raise ValueError("GatherElements op: Out of range value in index tensor")
    # the output takes the indices' shape: data restricted to it on the other axes
    data = data[tuple(slice(None) if a == axis else slice(0, n) for a, n in enumerate(indices.shape))]
    return (np.take_along_axis(data, np.where(indices < 0, indices + size, indices), axis=axis),)


@kernel("GatherND", since=11, takes=STRINGS)
def gather_nd(data, indices, *, batch_dims=0):
    batch = data.shape[:batch_dims]
    nb = math.prod(batch)
    k = indices.shape[-1]
    if indices.shape[:batch_dims] != batch:
        raise InvalidArgument(f"GatherND: indices batch dims {indices.shape[:batch_dims]} differ from the input's "
                              f"{batch}")
    if k > data.ndim - batch_dims:
        raise InvalidArgument(f"last dimension of indices ({k}) must not be larger than the rank of data "
                              f"({data.ndim}) minus batch_dims ({batch_dims})")
    nd_index_range(indices, data.shape[batch_dims:batch_dims + k], "index")
    flat_data = data.reshape((nb,) + data.shape[batch_dims:])
    flat_idx = indices.reshape(nb, -1, k)
    b = np.arange(nb).reshape(nb, 1)
    out = flat_data[(b,) + tuple(flat_idx[..., j] for j in range(k))]
    return (out.reshape(batch + indices.shape[batch_dims:-1] + data.shape[batch_dims + k:]),)


def check_axis_index(op, index_shape, data_shape, axis) -> None:
    """GatherElements/ScatterElements: indices of the data's rank, along every other axis no longer than the data
    (the kernels address the data by the index tensor's coordinates there); the CUDA kernels' check too."""
    if len(index_shape) != len(data_shape):
        raise InvalidArgument(f"{op} op: Rank of input 'data' needs to be equal to rank of input 'indices'")
    for d, (i, n) in enumerate(zip(index_shape, data_shape)):
        if d != axis and i > n:
            raise InvalidArgument(f"{op} op: 'indices' shape should have values within bounds of 'data' shape. "
                                  f"Indices dim={i} at pos={d} is greater than input dim={n}")


def nd_index_range(indices, dims, word):
    """Each index tuple (last axis of indices) within dims, negative ones counting from the end."""
    for j, size in enumerate(dims):
        bad = checks.first_outside(indices[..., j], -size, size)
        if bad:
            raise InvalidArgument(f"invalid {word} found, {word} = {bad[1]}")


_SCATTER_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter(data, index, updates, reduction):
    out = data.copy()
    if reduction == "none":
        out[index] = updates
    else:  # ufunc.at applies duplicates one after another
        _SCATTER_UFUNCS[reduction].at(out, index, updates)
    return (out,)


def check_reduction(node, graph):
    reduction = node.attrs.get("reduction", "none")
    return None if reduction in ("none", *_SCATTER_UFUNCS) else f"reduction={reduction!r} not supported"


@kernel("ScatterND", since=11, check=check_reduction)
def scatter_nd(data, indices, updates, *, reduction="none"):
    k = indices.shape[-1]
    if k > data.ndim:
        raise InvalidArgument(f"last dimension of indices ({k}) must not be larger than the rank of data "
                              f"({data.ndim})")
    if updates.shape != indices.shape[:-1] + data.shape[k:]:
        raise InvalidArgument("updates tensor should have shape equal to indices.shape[:-1] + "
                              f"data.shape[indices.shape[-1]:]. updates shape: {updates.shape}, indices shape: "
                              f"{indices.shape}, data shape: {data.shape}")
    nd_index_range(indices, data.shape[:k], "indice")
    index = tuple(np.moveaxis(indices, -1, 0)[:k])
    return _scatter(data, index, updates, reduction)


@kernel("ScatterElements", since=11, check=check_reduction)
def scatter_elements(data, indices, updates, *, axis=0, reduction="none"):
    axis = _axis(axis, data.ndim)
    if indices.shape != updates.shape:
        raise InvalidArgument(f"Indices and updates must have the same shape: {indices.shape} and {updates.shape}")
    check_axis_index("ScatterElements", indices.shape, data.shape, axis)
    checks.index_range(indices, data.shape[axis])
    index = list(np.indices(indices.shape, sparse=True))
    index[axis] = np.where(indices < 0, indices + data.shape[axis], indices)
    return _scatter(data, tuple(index), updates, reduction)


@kernel("Scatter", since=9, until=10)  # deprecated alias of ScatterElements
def scatter(data, indices, updates, *, axis=0):
    return scatter_elements(data, indices, updates, axis=axis)


@kernel("Compress", since=9, takes=STRINGS)
def compress(data, condition, *, axis=None):
    length = data.size if axis is None else data.shape[axis]
    condition = np.asarray(condition).reshape(-1)[:length]  # ORT ignores entries past the axis' end
    return (np.compress(condition, data, axis=axis),)


# --- Pad --------------------------------------------------------------------------------


def pad_geometry(data, pads, mode, axes=None) -> tuple[list[int], list[int]]:
    """Pad's pads per axis (begin, end; negative: a crop), checked as stock checks them."""
    rank = data.ndim
    axes = list(range(rank)) if axes is None else [_axis(a, rank) for a in axes]
    if len(pads) != 2 * len(axes):
        raise ValueError(f"Pads tensor size should be equal to twice the input dimension count: {len(pads)} pads "
                         f"for {len(axes)} axes")
    begin, end = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        begin[a], end[a] = pads[i], pads[i + len(axes)]
    for a in range(rank):
        if data.shape[a] + begin[a] + end[a] < 0:
            raise ValueError(f"Pads {begin[a]}, {end[a]} crop more than the {data.shape[a]} entries of axis {a}")
        if mode == "reflect" and max(begin[a], end[a]) > 0 and max(begin[a], end[a]) >= data.shape[a]:
            side, width = ("pre", begin[a]) if begin[a] >= data.shape[a] else ("post", end[a])
            raise InvalidArgument(f"Pad reflect: {side}-pad ({width}) exceeds maximum allowed "
                                  f"({data.shape[a] - 1}) for axis {a}. Input shape:{data.shape}")
        if mode in ("edge", "wrap") and data.shape[a] == 0 and (begin[a] > 0 or end[a] > 0):
            raise InvalidArgument(f"Pad {mode}: cannot pad axis {a} of length 0")
    return begin, end


def pad_value(data, constant_value):
    """Pad-11's constant (an optional one-element input) in data's type."""
    value = 0 if constant_value is None or constant_value.size == 0 else constant_value.reshape(-1)[0]
    return np.array(value, dtype=data.dtype)


def _pad(data, pads, mode, value, axes=None):
    begin, end = pad_geometry(data, pads, mode, axes)
    # Negative pads crop, applied before padding (as ORT does).
    crop = tuple(slice(-min(b, 0), data.shape[a] - (-min(e, 0))) for a, (b, e) in enumerate(zip(begin, end)))
    data = data[crop]
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(begin, end)]
    if not any(b or e for b, e in widths):
        return (data,)
    checks.allocation([n + b + e for n, (b, e) in zip(data.shape, widths)], data.itemsize, "Pad's output")
    if mode == "constant":
        return (np.pad(data, widths, mode="constant", constant_values=np.array(value, dtype=data.dtype)),)
    return (np.pad(data, widths, mode=mode),)  # numpy's reflect/edge/wrap match ONNX's


def _check_pad_mode(node, graph):
    mode = node.attrs.get("mode", "constant")
    return None if mode in ("constant", "reflect", "edge", "wrap") else f"mode={mode!r} not supported"


@kernel("Pad", since=2, until=10, check=_check_pad_mode)
def pad_2(data, *, pads, mode="constant", value=0.0):
    return _pad(data, pads, mode, value)


@kernel("Pad", since=11, check=_check_pad_mode)
def pad_11(data, pads, constant_value=None, axes=None, *, mode="constant"):
    return _pad(data, _ints(pads), mode, pad_value(data, constant_value), None if axes is None else _ints(axes))


# --- Unique, ReverseSequence, TensorScatter ----------------------------------------------


@kernel("Unique", since=11)
def unique(X, *, axis=None, sorted=1, _num_outputs=1):
    # Y, the first index of each unique value (or slice along axis), each input's index into Y, counts
    flat = axis is None
    values = X.reshape(-1) if flat else X
    y, first, inverse, counts = np.unique(values, return_index=True, return_inverse=True, return_counts=True,
                                          axis=None if flat else axis)
    inverse = inverse.reshape(-1)
    if not sorted:  # order of first occurrence
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        first, counts, inverse = first[order], counts[order], rank[inverse]
        y = np.take(values, first, axis=0 if flat else axis)
    return (y, first.astype(_INT64), inverse.astype(_INT64), counts.astype(_INT64))[:_num_outputs]


@kernel("ReverseSequence", since=10)
def reverse_sequence(input, sequence_lens, *, batch_axis=1, time_axis=0):
    # reverse the first sequence_lens[b] steps along time_axis of every batch entry b
    seq = input.shape[time_axis]
    bad = checks.first_outside(sequence_lens, 0, seq + 1)
    if bad:
        raise ValueError(f"Invalid sequence length: {bad[1]}. Value must be in range [0,{seq}]")
    steps = np.arange(seq).reshape([-1 if a == time_axis else 1 for a in range(input.ndim)])
    lens = sequence_lens.astype(_INT64).reshape([-1 if a == batch_axis else 1 for a in range(input.ndim)])
    source = np.where(steps < lens, lens - 1 - steps, steps)
    return (np.take_along_axis(input, np.broadcast_to(source, input.shape), axis=time_axis),)


def _check_tensor_scatter(node, graph):
    mode = node.attrs.get("mode", "linear")
    return None if mode in ("linear", "circular") else f"TensorScatter mode={mode!r} is not defined"


def tensor_scatter_geometry(cache_shape, update_shape, axis, indices_shape, mode) -> tuple:
    """(axis, the largest write index allowed) after stock's checks of TensorScatter's shapes (failures are FAIL,
    as its ORT_ENFORCE); the CUDA kernel's too."""
    rank = len(cache_shape)
    if rank < 2:
        raise ValueError("TensorScatter: past_cache must have at least 2 dimensions")
    if len(update_shape) != rank:
        raise ValueError("TensorScatter: past_cache and update must have the same number of dimensions")
    axis = axis + rank if axis < 0 else axis
    if not 0 < axis < rank:
        raise ValueError(f"TensorScatter: axis must be in [1, ndim-1] after normalization, got {axis}")
    longest, length = cache_shape[axis], update_shape[axis]
    if length > longest:
        raise ValueError(f"TensorScatter: update sequence_length ({length}) exceeds max_sequence_length ({longest})")
    for d, (c, u) in enumerate(zip(cache_shape, update_shape)):
        if d != axis and c != u:
            raise ValueError(f"TensorScatter: shape mismatch in dimension {d}: past_cache={c} vs update={u}")
    if indices_shape is not None and tuple(indices_shape) != (cache_shape[0],):
        raise ValueError("TensorScatter: write_indices must have shape [batch_size]")
    return axis, longest - length if mode == "linear" else np.iinfo(np.int64).max


@kernel("TensorScatter", since=24, check=_check_tensor_scatter)
def tensor_scatter(past_cache, update, write_indices=None, *, axis=-2, mode="linear"):
    # write `update` into a copy of the cache along `axis`, at write_indices[b] for batch entry b
    # (0 when absent); circular mode wraps around the cache length
    axis, highest = tensor_scatter_geometry(past_cache.shape, update.shape, axis,
                                            None if write_indices is None else write_indices.shape, mode)
    out = past_cache.copy()
    starts = np.zeros(past_cache.shape[0], _INT64) if write_indices is None else write_indices.astype(_INT64)
    length, count = past_cache.shape[axis], update.shape[axis]
    for b, start in enumerate(starts.tolist()):
        if start < 0:
            raise ValueError(f"TensorScatter: write_indices[{b}] = {start} is negative")
        if start > highest:
            raise ValueError(f"TensorScatter linear mode: write_indices[{b}] + sequence_length ({start} + {count}) "
                             f"exceeds max_sequence_length ({length})")
        positions = start + np.arange(count)
        if mode == "circular":
            positions %= length
        np.moveaxis(out[b], axis - 1, 0)[positions] = np.moveaxis(update[b], axis - 1, 0)  # views of out
    return (out,)
