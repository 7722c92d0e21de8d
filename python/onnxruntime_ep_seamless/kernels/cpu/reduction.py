"""Reductions and axis-wise ops: Reduce*, ArgMax/ArgMin, Softmax family, CumSum, TopK.

float16 inputs are reduced in float32 and rounded once (ORT upcasts float16 nodes it has no
float16 kernel for, and its float16 kernels accumulate in float32).
"""
import numpy as np

from ..registry import BOOL, FLOATS, NUMERIC, kernel
from .elementwise import _via_float32

_quiet = np.errstate(all="ignore")  # log(0) = -inf etc. are the defined results


def _axes(data, axes):
    """ONNX axes (list attribute, int64 tensor or None) as a sorted tuple of non-negative axes;
    none or empty means every axis."""
    if axes is None or len(np.atleast_1d(axes)) == 0:
        return tuple(range(data.ndim))
    return tuple(sorted({int(a) % data.ndim for a in np.atleast_1d(axes)}))


def _accumulator(dtype):
    return np.float32 if dtype == np.float16 else dtype


# ---------------------------------------------------------------- the reductions proper
# each: (data, axes tuple, keepdims bool) -> array of data's dtype

@_quiet
def _sum(x, axes, keepdims):
    return np.sum(x, axis=axes, keepdims=keepdims, dtype=_accumulator(x.dtype)).astype(x.dtype, copy=False)


@_quiet
def _mean(x, axes, keepdims):
    n = int(np.prod([x.shape[a] for a in axes]))
    total = np.sum(x, axis=axes, keepdims=keepdims, dtype=_accumulator(x.dtype))
    if n == 0:
        return total.astype(x.dtype)  # the spec leaves it undefined; ORT gives 0, not NaN
    if x.dtype.kind in "iu":
        # C integer division truncates toward zero, as ORT's integer mean does
        return (np.sign(total) * (np.abs(total) // n)).astype(x.dtype)
    return (total / n).astype(x.dtype, copy=False)


def _extreme(ufunc, x, axes, keepdims, lowest):
    """Max (lowest=True: the empty result is the lowest value) or min. Over an empty set ONNX asks
    for -inf/+inf, or the type's limit where there is no infinity."""
    if not any(x.shape[a] == 0 for a in axes):
        return ufunc.reduce(x, axis=axes, keepdims=keepdims)
    if x.dtype == np.bool_:
        identity = not lowest
    elif x.dtype.kind == "f":
        identity = -np.inf if lowest else np.inf
    else:
        identity = np.iinfo(x.dtype).min if lowest else np.iinfo(x.dtype).max
    return ufunc.reduce(x, axis=axes, keepdims=keepdims, initial=identity)


def _max(x, axes, keepdims):
    return _extreme(np.maximum, x, axes, keepdims, lowest=True)


def _min(x, axes, keepdims):
    return _extreme(np.minimum, x, axes, keepdims, lowest=False)


@_quiet
def _prod(x, axes, keepdims):
    return np.prod(x, axis=axes, keepdims=keepdims, dtype=_accumulator(x.dtype)).astype(x.dtype, copy=False)


def _l1(x, axes, keepdims):
    return _sum(np.abs(x), axes, keepdims)


@_quiet
def _sum_square(x, axes, keepdims):
    wide = x.astype(_accumulator(x.dtype), copy=False)
    return np.sum(wide * wide, axis=axes, keepdims=keepdims).astype(x.dtype, copy=False)


@_quiet
def _l2(x, axes, keepdims):
    wide = x.astype(_accumulator(x.dtype), copy=False)
    return np.sqrt(np.sum(wide * wide, axis=axes, keepdims=keepdims)).astype(x.dtype)


@_quiet
def _log_sum(x, axes, keepdims):
    total = np.sum(x, axis=axes, keepdims=keepdims, dtype=_accumulator(x.dtype))
    return np.log(total).astype(x.dtype, copy=False)


@_quiet
def _log_sum_exp(x, axes, keepdims):
    wide = x.astype(_accumulator(x.dtype), copy=False)
    # subtract the max so exp cannot overflow; a non-finite max (all -inf, or empty) shifts by 0
    peak = _max(wide, axes, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0)
    total = np.sum(np.exp(wide - peak), axis=axes, keepdims=True)
    result = np.log(total) + peak
    if not keepdims:
        result = np.squeeze(result, axis=axes)
    return result.astype(x.dtype, copy=False)


def _register_reduce(op_type, fn, axes_input_since, types=NUMERIC):
    """Register op_type twice: axes as an attribute before `axes_input_since`, as an input after."""
    @kernel(op_type, since=1, until=axes_input_since - 1, types=types)
    def reduce_with_axes_attribute(data, *, axes=None, keepdims=1):
        return (fn(data, _axes(data, axes), bool(keepdims)),)

    @kernel(op_type, since=axes_input_since, types=types)
    def reduce_with_axes_input(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
        if noop_with_empty_axes and (axes is None or axes.size == 0):
            # Reduce over no axis: the sum is a no-op, but the op's elementwise parts remain
            # (ReduceLogSum gives log(x), ReduceSumSquare x*x), as in the spec's function bodies.
            return (fn(data, (), bool(keepdims)),)
        return (fn(data, _axes(data, axes), bool(keepdims)),)


_register_reduce("ReduceSum", _sum, axes_input_since=13)
_register_reduce("ReduceMean", _mean, axes_input_since=18)
_register_reduce("ReduceMax", _max, axes_input_since=18, types=NUMERIC | BOOL)
_register_reduce("ReduceMin", _min, axes_input_since=18, types=NUMERIC | BOOL)
_register_reduce("ReduceProd", _prod, axes_input_since=18)
_register_reduce("ReduceL1", _l1, axes_input_since=18)
_register_reduce("ReduceL2", _l2, axes_input_since=18)
_register_reduce("ReduceLogSum", _log_sum, axes_input_since=18)
_register_reduce("ReduceLogSumExp", _log_sum_exp, axes_input_since=18)
_register_reduce("ReduceSumSquare", _sum_square, axes_input_since=18)


# ---------------------------------------------------------------- ArgMax, ArgMin

def _arg(fn, data, axis, keepdims, select_last_index):
    if select_last_index:
        # search the reversed axis, then map the position back
        index = data.shape[axis] - 1 - fn(np.flip(data, axis), axis=axis, keepdims=bool(keepdims))
    else:
        index = fn(data, axis=axis, keepdims=bool(keepdims))
    return index.astype(np.int64, copy=False)


@kernel("ArgMax", since=1, types=NUMERIC)
def argmax(data, *, axis=0, keepdims=1, select_last_index=0):
    return (_arg(np.argmax, data, axis, keepdims, select_last_index),)


@kernel("ArgMin", since=1, types=NUMERIC)
def argmin(data, *, axis=0, keepdims=1, select_last_index=0):
    return (_arg(np.argmin, data, axis, keepdims, select_last_index),)


# ---------------------------------------------------------------- Softmax, LogSoftmax, Hardmax

@_quiet
def _softmax(x, axis):
    if x.dtype == np.float32 and axis == x.ndim - 1 and x.size:
        from .native import softmax_last_axis
        return softmax_last_axis(x)
    shifted = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


@_quiet
def _log_softmax(x, axis):
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _hardmax(x, axis):
    # 1 at the first maximum along the axis, 0 elsewhere
    out = np.zeros_like(x)
    np.put_along_axis(out, np.expand_dims(np.argmax(x, axis=axis), axis), 1, axis=axis)
    return out


def _along_axis(fn, x, axis):
    """Opset 13+: fn along the one axis."""
    if x.size == 0:
        return x.copy()
    return fn(x, axis % x.ndim)


def _coerced_2d(fn, x, axis):
    """Before opset 13: x is viewed as 2-D [prod(shape[:axis]), prod(shape[axis:])] and fn runs over
    each row, i.e. over all the trailing axes at once."""
    axis %= max(x.ndim, 1)
    if x.size == 0:
        return x.copy()
    rows = int(np.prod(x.shape[:axis]))
    return fn(x.reshape(rows, -1), 1).reshape(x.shape)


@kernel("Softmax", since=1, until=12, types=FLOATS)
@_via_float32
def softmax_1(x, *, axis=1):
    return (_coerced_2d(_softmax, x, axis),)


@kernel("Softmax", since=13, types=FLOATS)
@_via_float32
def softmax_13(x, *, axis=-1):
    return (_along_axis(_softmax, x, axis),)


@kernel("LogSoftmax", since=1, until=12, types=FLOATS)
@_via_float32
def log_softmax_1(x, *, axis=1):
    return (_coerced_2d(_log_softmax, x, axis),)


@kernel("LogSoftmax", since=13, types=FLOATS)
@_via_float32
def log_softmax_13(x, *, axis=-1):
    return (_along_axis(_log_softmax, x, axis),)


@kernel("Hardmax", since=1, until=12, types=FLOATS)
def hardmax_1(x, *, axis=1):
    return (_coerced_2d(_hardmax, x, axis),)


@kernel("Hardmax", since=13, types=FLOATS)
def hardmax_13(x, *, axis=-1):
    return (_along_axis(_hardmax, x, axis),)


# ---------------------------------------------------------------- CumSum, CumProd

def _cumulative(fn, identity, x, axis, exclusive, reverse):
    """Running sum or product along the axis, in the data type (like ORT); exclusive: element i
    holds the result of the elements before i (the identity for the first)."""
    axis = int(np.asarray(axis).reshape(-1)[0]) % x.ndim
    y = np.flip(x, axis) if reverse else x
    out = fn(y, axis=axis, dtype=x.dtype)
    if exclusive:  # shift by one along the axis
        shifted = np.full_like(out, identity)
        dst = [slice(None)] * x.ndim
        src = [slice(None)] * x.ndim
        dst[axis], src[axis] = slice(1, None), slice(None, -1)
        shifted[tuple(dst)] = out[tuple(src)]
        out = shifted
    return np.flip(out, axis) if reverse else out


@kernel("CumSum", since=11, types=NUMERIC)
@_quiet
def cumsum(x, axis, *, exclusive=0, reverse=0):
    return (_cumulative(np.cumsum, 0, x, axis, exclusive, reverse),)


@kernel("CumProd", since=26, types=NUMERIC)
@_quiet
def cumprod(x, axis, *, exclusive=0, reverse=0):
    return (_cumulative(np.cumprod, 1, x, axis, exclusive, reverse),)


# ---------------------------------------------------------------- TopK

def _top_k(x, k, axis, largest, sorted):
    axis %= x.ndim
    if not 0 <= k <= x.shape[axis]:
        raise ValueError(f"TopK: k={k} is outside [0, {x.shape[axis]}] for axis {axis}")
    # Stable sorts keep equal values in index order (the spec's tie-break: lower index first).
    # sorted=0 leaves the order open; we return sorted order too.
    if largest:
        # sort the reversed axis ascending, stably, then read it backwards: descending values,
        # and among equal values the original indices ascend
        n = x.shape[axis]
        order = np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
        order = n - 1 - order
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    indices = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, indices, axis=axis), indices.astype(np.int64, copy=False)


@kernel("TopK", since=1, until=9, types=NUMERIC)
def top_k_1(x, *, k, axis=-1):
    return _top_k(x, k, axis, largest=True, sorted=True)


@kernel("TopK", since=10, until=10, types=NUMERIC)
def top_k_10(x, k, *, axis=-1):
    return _top_k(x, int(np.asarray(k).reshape(-1)[0]), axis, largest=True, sorted=True)


@kernel("TopK", since=11, types=NUMERIC)
def top_k_11(x, k, *, axis=-1, largest=1, sorted=1):
    return _top_k(x, int(np.asarray(k).reshape(-1)[0]), axis, bool(largest), bool(sorted))
