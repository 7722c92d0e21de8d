"""Reductions and axis-wise ops: Reduce*, ArgMax/ArgMin, Softmax family, CumSum, TopK.

float16 inputs are reduced in float32 and rounded once (ORT upcasts float16 nodes it has no
float16 kernel for, and its float16 kernels accumulate in float32). Integer sums, means, products and
norms accumulate in float64 and saturate at the type's limits, as stock ORT's do.

NaN: stock's ReduceMax/ReduceMin/ArgMax/ArgMin/Hardmax keep "a unless b is strictly better", so a NaN
sticks where it is the first operand and is dropped where it is the second; which one it is follows the
order each of stock's code paths combines in (Eigen's SSE2 reductions, whose packets start at a 16-byte
boundary of the row's address, or a plain loop). Without NaN every order gives the same answer; with NaN
the _stock_* helpers replay stock's order.
"""
import numpy as np

from .. import checks
from ..checks import InvalidArgument, Undefined
from ..registry import BOOL, FLOATS, NUMERIC, kernel
from .elementwise import via_float32

_quiet = np.errstate(all="ignore")  # log(0) = -inf etc. are the defined results


def reduced_axes(rank, axes):
    """ONNX axes (list attribute, int64 tensor or None) as a sorted tuple of non-negative axes; none or
    empty means every axis. Out of range fails as stock's HandleNegativeAxis does; a repeated axis counts once."""
    if axes is None or len(axes) == 0:
        return tuple(range(rank))
    return tuple(sorted(set(checks.axes(axes, rank, "axis", unique=False))))


def _accumulator(dtype):
    return np.float32 if dtype == np.float16 else dtype


def _saturated(wide, dtype):
    """float64 results as the integer dtype: beyond its range its limit, else truncated, as stock casts."""
    info = np.iinfo(dtype)
    wide = np.asarray(wide)
    out = np.full(wide.shape, info.min, dtype)
    out[wide >= info.max] = info.max
    inside = (wide > info.min) & (wide < info.max)
    out[inside] = wide[inside].astype(dtype)
    return out


# ---------------------------------------------------------------- stock's order of combination, with NaN

_PACKET_BYTES = 16  # stock's Eigen is built for SSE2: packets of 4 float32 or 2 float64


def _keep(a, b, greater):
    """Eigen's and ORT's max (min): a unless b is strictly greater (less); a NaN a stays, a NaN b is dropped."""
    return np.where(b > a if greater else b < a, b, a)


def _fold(first, rest, greater, axis=-1):
    """first, then each of rest along axis in turn, by _keep: NaN where first is, else the best non-NaN."""
    if rest.shape[axis] == 0:
        return first
    with np.errstate(all="ignore"):
        best = (np.fmax if greater else np.fmin).reduce(rest, axis=axis)
    return _keep(first, best, greater)


def _halved(packets, greater):
    """Eigen's predux: the lanes' upper half kept into the lower half until one lane is left."""
    while packets.shape[-1] > 1:
        half = packets.shape[-1] // 2
        packets = _keep(packets[..., :half], packets[..., half:], greater)
    return packets[..., 0]


def _start(address, itemsize, n):
    """Elements of a row at `address` before its first 16-byte boundary (Eigen's first_aligned)."""
    if address % itemsize:
        return n
    lanes = _PACKET_BYTES // itemsize
    return min((lanes - address // itemsize % lanes) % lanes, n)


def _redux(rows, start, greater):
    """Eigen's vectorised maxCoeff (minCoeff) of each row (m, n) with `start` elements before the boundary:
    whole packets from there, alternately into two accumulators, combined, an odd last packet added, the
    lanes halved; then the elements before and after the packets in turn."""
    m, n = rows.shape
    lanes = _PACKET_BYTES // rows.itemsize
    count = (n - start) // lanes
    if count == 0:
        return _fold(rows[:, 0], rows[:, 1:], greater)
    packets = rows[:, start:start + count * lanes].reshape(m, count, lanes)
    acc = packets[:, 0]
    if count > 1:
        even = count // 2 * 2
        acc = _keep(_fold(acc, packets[:, 2:even:2], greater, axis=1),
                    _fold(packets[:, 1], packets[:, 3:even:2], greater, axis=1), greater)
        if count % 2:
            acc = _keep(acc, packets[:, -1], greater)
    rest = np.concatenate([rows[:, :start], rows[:, start + count * lanes:]], axis=1)
    return _fold(_halved(acc, greater), rest, greater)


def _redux_rows(rows, address, greater):
    """_redux of each row of a C-contiguous (m, n) block at `address`; row r starts as row r % lanes does."""
    m, n = rows.shape
    lanes = _PACKET_BYTES // rows.itemsize
    out = np.empty(m, rows.dtype)
    for phase in range(min(m, lanes)):
        start = _start(address + phase * n * rows.itemsize, rows.itemsize, n)
        out[phase::lanes] = _redux(rows[phase::lanes], start, greater)
    return out


def _partial_redux(blocks, greater):
    """Eigen's rowwise maxCoeff of each (d1, d2) block, stock's ReduceMax over the middle of [kept, reduced,
    kept] (into an aligned output): output columns from its first 16-byte boundary on are vectorised (the
    first row, then groups of 4 rows combined in pairs, then the rest), the others one loop each."""
    d0, d1, d2 = blocks.shape
    lanes = _PACKET_BYTES // blocks.itemsize
    out = np.empty((d0, d2), blocks.dtype)
    for phase in range(min(d0, lanes)):
        b = blocks[phase::lanes]
        start = _start(phase * d2 * blocks.itemsize, blocks.itemsize, d2)
        end = start + (d2 - start) // lanes * lanes
        loop = np.r_[0:start, end:d2]
        out[phase::lanes, loop] = _fold(b[:, 0, loop], b[:, 1:, loop], greater, axis=1)
        if end > start:
            v = b[:, :, start:end]
            quads = (d1 - 1) // 4 * 4  # rows 1 .. quads in groups of 4
            g = v[:, 1:1 + quads].reshape(len(b), quads // 4, 4, end - start)
            grouped = _keep(_keep(g[:, :, 0], g[:, :, 1], greater), _keep(g[:, :, 2], g[:, :, 3], greater), greater)
            acc = _fold(v[:, 0], grouped, greater, axis=1)
            out[phase::lanes, start:end] = _fold(acc, v[:, 1 + quads:], greater, axis=1)
    return out


def stock_path(shape, axes):
    """The path stock's ReduceMax/ReduceMin takes (with one intra-op thread, or two) for a shape and its sorted
    reduced axes, none of length 0: runs of kept and of reduced axes merged into dims, then "rows" (all
    reduced, or [kept, reduced]: Eigen's redux of each row), "krk" ([kept, reduced, kept]: Eigen's partial
    redux), "rkr" ([reduced, kept, reduced]: a loop over Eigen rows) or "loop" (one loop from the first
    element, as for [reduced, kept])."""
    dims, reduced = [], []
    for d, n in enumerate(shape):
        if reduced and reduced[-1] == (d in axes):
            dims[-1] *= n
        else:
            dims.append(n)
            reduced.append(d in axes)
    if len(dims) == 1 or (len(dims) == 2 and not reduced[0]):
        return "rows", dims
    if len(dims) == 3 and not reduced[0] and dims[0] >= 2:
        return "krk", dims
    if len(dims) == 3 and reduced[0] and dims[1] >= 2:
        return "rkr", dims
    return "loop", dims


def _stock_extreme(x, axes, greater):
    """ReduceMax (greater) or ReduceMin of x (holding NaN) over sorted non-empty axes, keepdims=0, combined
    in the order of stock's path (stock_path)."""
    if x.dtype == np.float16:  # stock runs it in a new (aligned) float32 buffer
        return _stock_extreme(np.array(x, np.float32), axes, greater).astype(np.float16)
    address = x.ctypes.data if x.flags.c_contiguous else 0  # graph inputs are read where they lie
    x = np.ascontiguousarray(x)
    out_shape = tuple(n for d, n in enumerate(x.shape) if d not in axes)
    path, dims = stock_path(x.shape, axes)
    flat = x.reshape(-1)
    if path == "rows":
        return _redux_rows(flat.reshape(-1, dims[-1]), address, greater).reshape(out_shape)
    if path == "krk":
        return _partial_redux(flat.reshape(dims), greater).reshape(out_shape)
    if path == "rkr":  # Eigen over each [d2] row, folded from the first element
        d0, d1, d2 = dims
        rows = flat.reshape(d0, d1 * d2)
        reduced = np.stack([_redux_rows(rows[i].reshape(d1, d2), address + i * d1 * d2 * x.itemsize, greater)
                            for i in range(d0)])
        return _fold(rows[0, ::d2], reduced, greater, axis=0).reshape(out_shape)
    # a loop over the reduced elements in order, from the first of them
    kept = [d for d in range(x.ndim) if d not in axes]
    rows = np.transpose(x, kept + list(axes)).reshape(int(np.prod(out_shape)), -1)
    return _fold(rows[:, 0], rows[:, 1:], greater).reshape(out_shape)


def _stock_arg(rows, greater, last):
    """ArgMax/ArgMin along the last axis of rows holding NaN: stock's loop from the first element, taking a
    strictly better value (or an equal one, select_last_index): 0 where the first is NaN, else the first
    (last) index of the best non-NaN value."""
    with np.errstate(all="ignore"):
        best = (np.fmax if greater else np.fmin).reduce(rows, axis=-1)
    hit = rows == best[..., None]
    if last:
        index = rows.shape[-1] - 1 - np.argmax(hit[..., ::-1], axis=-1)
    else:
        index = np.argmax(hit, axis=-1)
    return np.where(np.isnan(rows[..., 0]), 0, index)


def _stock_arg_vector(x, greater):
    """ArgMax/ArgMin of a 1-D x holding NaN (select_last_index=0): stock's Eigen maxCoeff(&index), packets
    from the start. A packet is taken when its best non-NaN lane beats the running value, which becomes its
    halved lanes (NaN where its first lane is) and the index that of its first NaN or first best lane."""
    if x.dtype == np.float16:
        x = x.astype(np.float32)
    lanes = _PACKET_BYTES // x.itemsize
    count = len(x) // lanes
    if count == 0:
        return int(_stock_arg(x, greater, False))
    packets = x[:count * lanes].reshape(count, lanes)
    with np.errstate(all="ignore"):
        best = (np.fmax if greater else np.fmin).reduce(packets, axis=1)
    kept = _halved(packets, greater)
    beats = (lambda v, r: v > r) if greater else (lambda v, r: v < r)

    def taken(j):
        lane = 0 if np.isnan(kept[j]) else int(np.argmax(packets[j] == best[j]))
        return float(kept[j]), j * lanes + lane

    value, index = taken(0)
    for j, b in enumerate(best.tolist()):
        if j and beats(b, value):
            value, index = taken(j)
    for i in range(count * lanes, len(x)):
        if beats(float(x[i]), value):
            value, index = float(x[i]), i
    return index


# ---------------------------------------------------------------- the reductions proper
# each: (data, axes tuple, keepdims bool) -> array of data's dtype

def _shape(x, axes, keepdims):
    return tuple(1 if d in axes else n for d, n in enumerate(x.shape) if keepdims or d not in axes)


@_quiet
def _sum(x, axes, keepdims):
    if x.dtype.kind in "iu":
        return _saturated(np.sum(x, axis=axes, keepdims=keepdims, dtype=np.float64), x.dtype)
    return np.sum(x, axis=axes, keepdims=keepdims, dtype=_accumulator(x.dtype)).astype(x.dtype, copy=False)


@_quiet
def _mean(x, axes, keepdims):
    n = int(np.prod([x.shape[a] for a in axes]))
    if x.dtype.kind in "iu":
        total = np.sum(x, axis=axes, keepdims=keepdims, dtype=np.float64)
        return _saturated(total / n if n else total, x.dtype)
    total = np.sum(x, axis=axes, keepdims=keepdims, dtype=_accumulator(x.dtype))
    if n == 0:
        return total.astype(x.dtype)  # the spec leaves it undefined; ORT gives 0, not NaN
    return (total / n).astype(x.dtype, copy=False)


def _extreme(x, axes, keepdims, greater):
    """Max (greater) or min. Over an empty set ONNX asks for -inf/+inf, or the type's limit where there is no
    infinity; for bool stock leaves it undefined."""
    if any(x.shape[a] == 0 for a in axes):
        shape = _shape(x, axes, keepdims)
        if x.dtype == np.bool_:
            if np.prod(shape):
                op = "ReduceMax" if greater else "ReduceMin"
                raise Undefined(f"{op} is not defined for empty set with bool type")
            return np.zeros(shape, np.bool_)
        if x.dtype.kind == "f":
            identity = -np.inf if greater else np.inf
        else:
            identity = np.iinfo(x.dtype).min if greater else np.iinfo(x.dtype).max
        return np.full(shape, identity, x.dtype)
    if axes and x.dtype.kind == "f" and np.isnan(x).any():
        return _stock_extreme(x, axes, greater).reshape(_shape(x, axes, keepdims))
    return (np.maximum if greater else np.minimum).reduce(x, axis=axes, keepdims=keepdims)


def _max(x, axes, keepdims):
    return _extreme(x, axes, keepdims, greater=True)


def _min(x, axes, keepdims):
    return _extreme(x, axes, keepdims, greater=False)


@_quiet
def _prod(x, axes, keepdims):
    if x.dtype.kind in "iu":
        return _saturated(np.prod(x, axis=axes, keepdims=keepdims, dtype=np.float64), x.dtype)
    return np.prod(x, axis=axes, keepdims=keepdims, dtype=_accumulator(x.dtype)).astype(x.dtype, copy=False)


def _l1(x, axes, keepdims):
    if x.dtype.kind in "iu":
        return _sum_of(np.abs(x.astype(np.float64)), x.dtype, axes, keepdims)
    return _sum(np.abs(x), axes, keepdims)


def _sum_of(wide, dtype, axes, keepdims, finish=None):
    """An integer reduction's float64 terms summed (and finished, e.g. sqrt), saturated into dtype."""
    total = np.sum(wide, axis=axes, keepdims=keepdims)
    return _saturated(finish(total) if finish else total, dtype)


@_quiet
def _sum_square(x, axes, keepdims):
    if x.dtype.kind in "iu":
        wide = x.astype(np.float64)
        return _sum_of(wide * wide, x.dtype, axes, keepdims)
    wide = x.astype(_accumulator(x.dtype), copy=False)
    return np.sum(wide * wide, axis=axes, keepdims=keepdims).astype(x.dtype, copy=False)


@_quiet
def _l2(x, axes, keepdims):
    if x.dtype.kind in "iu":
        wide = x.astype(np.float64)
        return _sum_of(wide * wide, x.dtype, axes, keepdims, np.sqrt)
    wide = x.astype(_accumulator(x.dtype), copy=False)
    return np.sqrt(np.sum(wide * wide, axis=axes, keepdims=keepdims)).astype(x.dtype)


@_quiet
def _log_sum(x, axes, keepdims):
    if x.dtype.kind in "iu":  # the log of a sum <= 0 is the type's minimum
        total = np.sum(x, axis=axes, keepdims=keepdims, dtype=np.float64)
        return _saturated(np.where(total > 0, np.log(np.maximum(total, 1)), -np.inf), x.dtype)
    total = np.sum(x, axis=axes, keepdims=keepdims, dtype=_accumulator(x.dtype))
    return np.log(total).astype(x.dtype, copy=False)


@_quiet
def _log_sum_exp(x, axes, keepdims):
    wide = x.astype(_accumulator(x.dtype), copy=False)
    # subtract the max so exp cannot overflow; a non-finite max (all -inf, NaN or empty) shifts by 0
    peak = np.max(wide, axis=axes, keepdims=True, initial=-np.inf)
    peak = np.where(np.isfinite(peak), peak, 0)
    total = np.sum(np.exp(wide - peak), axis=axes, keepdims=True)
    result = np.log(total) + peak
    if not keepdims:
        result = np.squeeze(result, axis=axes)
    return result.astype(x.dtype, copy=False)


def _reduce(fn, data, axes, keepdims, noop=False):
    if axes is not None and np.ndim(axes) != 1:
        raise ValueError("An axes tensor must be a vector tensor.")
    if data.ndim == 0 or (noop and (axes is None or len(axes) == 0)):
        # over no axis the op's elementwise parts remain (ReduceLogSum gives log(x), ReduceSumSquare x*x), as in
        # the spec's function bodies; stock reduces a scalar over no axis whatever its axes say
        return fn(data, (), keepdims)
    return fn(data, reduced_axes(data.ndim, axes), keepdims)


def _register_reduce(op_type, fn, axes_input_since, types=NUMERIC):
    """Register op_type twice: axes as an attribute before `axes_input_since`, as an input after."""
    @kernel(op_type, since=1, until=axes_input_since - 1, types=types)
    def reduce_with_axes_attribute(data, *, axes=None, keepdims=1):
        return (_reduce(fn, data, axes, bool(keepdims)),)

    @kernel(op_type, since=axes_input_since, types=types)
    def reduce_with_axes_input(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
        return (_reduce(fn, data, axes, bool(keepdims), bool(noop_with_empty_axes)),)


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

def _arg(data, axis, keepdims, select_last_index, greater):
    if data.ndim == 0:  # stock answers 0 for a scalar
        return np.zeros((), np.int64)
    axis = checks.axis(axis, data.ndim)
    rows = np.moveaxis(data, axis, -1)
    shape = rows.shape[:-1]
    if rows.shape[-1] == 0:
        if np.prod(shape):
            raise Undefined(f"{'ArgMax' if greater else 'ArgMin'} over the empty axis {axis} is not defined")
        index = np.zeros(shape, np.int64)
    elif data.dtype.kind == "f" and np.isnan(data).any():
        if data.ndim == 1 and not select_last_index:
            index = np.array(_stock_arg_vector(data, greater))
        else:
            index = _stock_arg(rows, greater, bool(select_last_index))
    else:
        fn = np.argmax if greater else np.argmin
        if select_last_index:  # search the reversed axis, then map the position back
            index = rows.shape[-1] - 1 - fn(rows[..., ::-1], axis=-1)
        else:
            index = fn(rows, axis=-1)
    index = np.asarray(index, np.int64)
    return np.expand_dims(index, axis) if keepdims else index


@kernel("ArgMax", since=1, types=NUMERIC)
def argmax(data, *, axis=0, keepdims=1, select_last_index=0):
    return (_arg(data, axis, keepdims, select_last_index, greater=True),)


@kernel("ArgMin", since=1, types=NUMERIC)
def argmin(data, *, axis=0, keepdims=1, select_last_index=0):
    return (_arg(data, axis, keepdims, select_last_index, greater=False),)


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
    """1 at the first maximum along the axis, 0 elsewhere. With NaN, stock's rule: 1 at the first occurrence of
    the row's maximum as Eigen reduces it (from the row's address; another axis is swapped with the last into a
    new, aligned, copy), none where that is NaN."""
    rows = np.swapaxes(x, axis, -1)
    flat = rows.reshape(-1, rows.shape[-1])
    out = np.zeros(flat.shape, x.dtype)
    if x.dtype.kind == "f" and np.isnan(x).any():
        in_place = axis == x.ndim - 1 and x.flags.c_contiguous and x.dtype != np.float16
        peak = _redux_rows(np.array(flat, np.float32 if x.dtype == np.float16 else x.dtype),
                           x.ctypes.data if in_place else 0, True)
        hit = flat == peak[:, None]
        found = np.flatnonzero(hit.any(axis=1))
        out[found, np.argmax(hit[found], axis=1)] = 1
    else:
        out[np.arange(len(flat)), np.argmax(flat, axis=1)] = 1
    return np.ascontiguousarray(np.swapaxes(out.reshape(rows.shape), axis, -1))


def _along_axis(fn, x, axis):
    """Opset 13+: fn along the one axis."""
    axis = checks.axis(axis, x.ndim)
    if x.size == 0:
        return x.copy()
    return fn(x, axis)


def _coerced_2d(fn, x, axis):
    """Before opset 13: x is viewed as 2-D [prod(shape[:axis]), prod(shape[axis:])] and fn runs over
    each row, i.e. over all the trailing axes at once."""
    axis = checks.axis(axis, x.ndim)
    if x.size == 0:
        return x.copy()
    rows = int(np.prod(x.shape[:axis]))
    return fn(x.reshape(rows, -1), 1).reshape(x.shape)


@kernel("Softmax", since=1, until=12, types=FLOATS)
@via_float32
def softmax_1(x, *, axis=1):
    return (_coerced_2d(_softmax, x, axis),)


@kernel("Softmax", since=13, types=FLOATS)
@via_float32
def softmax_13(x, *, axis=-1):
    return (_along_axis(_softmax, x, axis),)


@kernel("LogSoftmax", since=1, until=12, types=FLOATS)
@via_float32
def log_softmax_1(x, *, axis=1):
    return (_coerced_2d(_log_softmax, x, axis),)


@kernel("LogSoftmax", since=13, types=FLOATS)
@via_float32
def log_softmax_13(x, *, axis=-1):
    return (_along_axis(_log_softmax, x, axis),)


@kernel("Hardmax", since=1, until=12, types=FLOATS)
def hardmax_1(x, *, axis=1):
    return (_coerced_2d(_hardmax, x, axis),)


@kernel("Hardmax", since=13, types=FLOATS)
def hardmax_13(x, *, axis=-1):
    return (_along_axis(_hardmax, x, axis),)


# ---------------------------------------------------------------- CumSum, CumProd

def _cumulative(op, fn, identity, x, axis, exclusive, reverse):
    """Running sum or product along the axis, in the data type (like ORT; float16 in float32, rounded once: stock
    has no float16 kernel and runs the node in float32); exclusive: element i holds the result of the elements
    before i (the identity for the first)."""
    if x.ndim == 0:
        raise InvalidArgument(f"Cannot apply {op} operator on a scalar")
    axis = np.asarray(axis)
    if axis.ndim > 1:
        raise InvalidArgument("Axis tensor should be 0D or 1D")
    if axis.size != 1:
        raise InvalidArgument("Axis tensor must contain exactly one element")
    axis = checks.axis(axis.reshape(-1)[0], x.ndim)
    y = np.flip(x, axis) if reverse else x
    out = fn(y, axis=axis, dtype=np.float32 if x.dtype == np.float16 else x.dtype).astype(x.dtype, copy=False)
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
    return (_cumulative("CumSum", np.cumsum, 0, x, axis, exclusive, reverse),)


@kernel("CumProd", since=26, types=NUMERIC)
@_quiet
def cumprod(x, axis, *, exclusive=0, reverse=0):
    return (_cumulative("CumProd", np.cumprod, 1, x, axis, exclusive, reverse),)


# ---------------------------------------------------------------- TopK
# Stock's order: larger (smaller) values first, NaN above every number, equal values by lower index.

def _sorted_order(rows, largest):
    """Every index of each row (m, n) in that order, by a stable sort."""
    if not largest:
        return np.argsort(rows, axis=1, kind="stable")
    # sort the reversed rows ascending, stably, then read them backwards: descending values,
    # and among equal values the original indices ascend
    return rows.shape[1] - 1 - np.argsort(rows[:, ::-1], axis=1, kind="stable")[:, ::-1]


def _ascending(values, largest):
    """Keys whose ascending order is stock's order of these numbers."""
    if not largest:
        return values
    return ~values if values.dtype.kind in "iu" else -values


def _packed(keys, cols):
    """(key, col) pairs as uint64s that sort as the pairs do, for keys of 32 bits or fewer (else None)."""
    if keys.dtype.kind == "f" and keys.itemsize <= 4:
        bits = (keys.astype(np.float32) + np.float32(0)).view(np.uint32)  # + 0 makes -0 equal to 0
        bits = np.where(bits >> np.uint32(31), ~bits, bits | np.uint32(1 << 31))
    elif keys.dtype.kind in "iu" and keys.itemsize <= 4:
        bits = (keys.astype(np.int64) - np.iinfo(keys.dtype).min).astype(np.uint32)
    else:
        return None
    return bits.astype(np.uint64) << np.uint64(32) | cols.astype(np.uint64)


def _first(keys, cols, k):
    """The cols of the k least keys of each row (m, c), equal keys by lower col."""
    packed = _packed(keys, cols)
    if packed is not None:  # one sort of distinct values
        return (np.sort(packed, axis=1)[:, :k] & np.uint64(0xFFFFFFFF)).astype(np.int64)
    order = np.lexsort((cols, keys), axis=1)[:, :k]
    return np.take_along_axis(cols, order, axis=1)


def _candidates(rows, k, largest):
    """The top k of each row (m, n), 4k <= n; None where a row holds NaN. The rows' elements fall into at least
    4k groups; the k-th best of the groups' best values is a threshold at least k elements reach, so the top k
    are among those that reach it, and only those are sorted."""
    m, n = rows.shape
    size = n // (4 * k)
    count = n // size
    reduce = np.max if largest else np.min
    head = rows[:, :count * size]
    # groups of consecutive elements, or of every count-th one: whichever reduces along the longer run
    if size > count:
        best = reduce(head.reshape(m, count, size), axis=2)
    else:
        best = reduce(head.reshape(m, size, count), axis=1)
    if count * size < n:
        best = np.concatenate([best, reduce(rows[:, count * size:], axis=1, keepdims=True)], axis=1)
    if best.dtype.kind == "f" and np.isnan(best).any():  # a group's best is NaN where the group holds one
        return None
    nth = best.shape[1] - k if largest else k - 1
    threshold = np.partition(best, nth, axis=1)[:, nth:nth + 1]
    where = np.flatnonzero(rows >= threshold if largest else rows <= threshold)
    row, col = np.divmod(where, n)
    # the candidates row by row into a (m, most) table, padded with the worst key at column n, after them all
    counts = np.bincount(row, minlength=m)
    slot = np.arange(len(where)) - (np.cumsum(counts) - counts)[row]
    keys = _ascending(rows.reshape(-1)[where], largest)
    worst = np.iinfo(keys.dtype).max if keys.dtype.kind in "iu" else np.inf
    table = np.full((m, counts.max()), worst, keys.dtype)
    cols = np.full((m, counts.max()), n, np.int64)
    table[row, slot] = keys
    cols[row, slot] = col
    return _first(table, cols, k)


def _top_k_order(rows, k, largest):
    """The indices of the top k of each row (m, n), in stock's order."""
    m, n = rows.shape
    if k == 0 or m == 0:
        return np.zeros((m, k), np.int64)
    floats = rows.dtype.kind == "f"
    if k == 1:  # argmax takes the first NaN, else the first maximum, as stock; argmin takes the first NaN too
        index = (np.argmax if largest else np.argmin)(rows, axis=1)
        if largest or not floats or not np.isnan(rows[np.arange(m), index]).any():
            return index[:, None]
    elif 4 * k <= n and n >= 128:  # else a sort of whole rows is as quick
        order = _candidates(rows, k, largest)
        if order is not None:
            return order
    elif not (floats and np.isnan(rows).any()):
        return _first(_ascending(rows, largest), np.broadcast_to(np.arange(n), (m, n)), k)
    return _sorted_order(rows, largest)[:, :k]


def _top_k(x, k, axis, largest):
    """sorted=0 leaves the order open: we give the sorted order (stock gives its heap's or selection's order)."""
    if k < 0:
        raise ValueError("value of k must not be negative")
    axis = checks.axis(axis, x.ndim)
    n = x.shape[axis]
    if k > n:
        raise ValueError(f"k argument [{k}] should not be greater than specified axis dim value [{n}]")
    rows = np.moveaxis(x, axis, -1)
    order = _top_k_order(np.ascontiguousarray(rows).reshape(-1, n), k, largest).astype(np.int64, copy=False)
    order = order.reshape(rows.shape[:-1] + (k,))
    values = np.take_along_axis(rows, order, axis=-1)
    return np.moveaxis(values, -1, axis), np.moveaxis(order, -1, axis)


def k_input(k):
    k = np.asarray(k)
    if k.ndim != 1 or k.size != 1:
        raise ValueError("k tensor should be a 1D tensor of size 1")
    return int(k[0])


@kernel("TopK", since=1, until=9, types=NUMERIC)
def top_k_1(x, *, k, axis=-1):
    return _top_k(x, k, axis, largest=True)


@kernel("TopK", since=10, until=10, types=NUMERIC)
def top_k_10(x, k, *, axis=-1):
    return _top_k(x, k_input(k), axis, largest=True)


@kernel("TopK", since=11, types=NUMERIC)
def top_k_11(x, k, *, axis=-1, largest=1, sorted=1):
    return _top_k(x, k_input(k), axis, bool(largest))
