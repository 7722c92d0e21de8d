"""Convolution, pooling, Resize and sampling ops on (N, C, *spatial) images (ONNX semantics, NCHW layout):
Conv, ConvTranspose, the pools, MaxUnpool, Resize, Upsample, GridSample, AffineGrid, Col2Im, DeformConv.

float16 inputs are computed in float32 and rounded once at the end, as ORT does. Resize and GridSample
coordinates are float32, as in ORT and the spec's reference, so that nearest-neighbour rounding agrees.
"""
import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .. import checks
from ..checks import InvalidArgument
from ..registry import FLOATS, FUSED_DOMAIN, NUMERIC, kernel

_F16 = np.dtype(np.float16)
_F32 = np.float32


def compute_dtype(dtype):
    """The dtype arithmetic runs in: float16 widens to float32."""
    return np.dtype(np.float32) if dtype == _F16 else dtype


def widen(x):
    return x.astype(compute_dtype(x.dtype), copy=False)


# --- window geometry shared by Conv and the pools -------------------------------------------


def geometry(in_shape, kernel, strides, dilations, pads, auto_pad, ceil_mode=0):
    """(pads_begin, pads_end, out_shape) for a sliding window over the spatial dims."""
    nd = len(in_shape)
    strides = strides or [1] * nd
    dilations = dilations or [1] * nd
    begin, end, out = [], [], []
    for i, (n, k, s, d) in enumerate(zip(in_shape, kernel, strides, dilations)):
        span = (k - 1) * d + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-n // s)
            total = max((o - 1) * s + span - n, 0)
            b = total - total // 2 if auto_pad == "SAME_LOWER" else total // 2  # UPPER: odd unit at the end
            e = total - b
        elif auto_pad == "VALID":
            b = e = 0
            o = (n - span) // s + 1
        else:  # NOTSET: explicit pads
            b, e = (pads[i], pads[i + nd]) if pads else (0, 0)
            o = (n + b + e - span) // s + 1
            if ceil_mode:
                o = -(-(n + b + e - span) // s) + 1
                if (o - 1) * s >= n + b:  # the last window must start inside the input or the leading padding
                    o -= 1
        begin.append(b)
        end.append(e)
        out.append(max(o, 0))
    return begin, end, out


def _pad_spatial(x, begin, end, fill):
    """x padded on its spatial dims (negative pads crop)."""
    if not any(begin) and not any(end):
        return x
    crop = (Ellipsis,) + tuple(slice(-min(b, 0), n + min(e, 0)) for n, b, e in zip(x.shape[2:], begin, end))
    widths = [(0, 0), (0, 0)] + [(max(b, 0), max(e, 0)) for b, e in zip(begin, end)]
    return np.pad(x[crop], widths, constant_values=fill)


def _tap(xp, offset, out, strides, dilations):
    """The strided view xp[..., o*s + k*d] over all output positions o, for one kernel offset k."""
    return xp[(Ellipsis,) + tuple(slice(k * d, k * d + (o - 1) * s + 1, s)
                                  for k, o, s, d in zip(offset, out, strides, dilations))]


def _window_input(x, kernel, strides, dilations, pads, auto_pad, ceil_mode, fill):
    """Pads x for pooling; returns the padded input and the geometry."""
    nd = x.ndim - 2
    strides, dilations = strides or [1] * nd, dilations or [1] * nd
    begin, end, out = geometry(x.shape[2:], kernel, strides, dilations, pads, auto_pad, ceil_mode)
    # ceil_mode's last window may run past the end padding: pad further with `fill`.
    need = [(o - 1) * s + (k - 1) * d + 1 - n - b for o, s, k, d, n, b in
            zip(out, strides, kernel, dilations, x.shape[2:], begin)]
    xp = _pad_spatial(x, begin, [max(e, q) for e, q in zip(end, need)], fill)
    return xp, begin, end, out, strides, dilations


# --- Conv / ConvTranspose -----------------------------------------------------------------


def native_conv(x, w, b, group) -> bool:
    """Whether seamless_conv_f32 computes this Conv: float32 (float16 widened), 1-3 spatial dims, no empty extent,
    and shapes that agree (the numpy path gives stock's errors for the others)."""
    return (x.dtype == np.float32 and w.dtype == np.float32 and 3 <= x.ndim <= 5 and w.ndim == x.ndim
            and x.size > 0 and w.size > 0 and group >= 1 and w.shape[1] * group == x.shape[1]
            and w.shape[0] % group == 0 and (b is None or (b.dtype == np.float32 and b.size == w.shape[0])))


@kernel("Conv", types=FLOATS)
def conv(X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    return (_conv(X, W, B, auto_pad, dilations, group, pads, strides, relu=False),)


# the kernel of plan/fusion.py's FusedConv: Conv(X, W, B), plus Z (an Add's other operand) where given, then Relu
# where relu=1, each block of the output finished as the convolution writes it
@kernel("FusedConv", domain=FUSED_DOMAIN, types=FLOATS)
def fused_conv(X, W, B=None, Z=None, *, relu=0, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
               pads=None, strides=None):
    return (_conv(X, W, B, auto_pad, dilations, group, pads, strides, relu=bool(relu), Z=Z),)


def _conv(X, W, B, auto_pad, dilations, group, pads, strides, relu, Z=None):
    dtype = X.dtype
    X, W = widen(X), widen(W)
    nd = X.ndim - 2
    kernel = W.shape[2:]
    strides, dilations = strides or [1] * nd, dilations or [1] * nd
    begin, end, out = geometry(X.shape[2:], kernel, strides, dilations, pads, auto_pad)
    n, c = X.shape[:2]
    m = W.shape[0]
    cg, mg = c // group, m // group
    if native_conv(X, W, B, group) and math.prod(out) > 0:  # else numpy below (its errors for shapes that disagree)
        from .native import conv as run, conv_args
        in_place = Z is None or (Z.dtype == np.float32 and Z.shape == (n, m) + tuple(out))  # else Add's broadcast
        args, _kept = conv_args(X.shape, W, B, group, strides, dilations, begin, out, relu=relu and in_place)
        y = run(X, args, Z if in_place else None).reshape((n, m) + tuple(out)).astype(dtype, copy=False)
        return y if in_place else _add_relu(y, Z, relu)
    weights = W.reshape(group, mg, -1)
    length = math.prod(out)
    if all(k == 1 for k in kernel) and all(s == 1 for s in strides) and not any(begin) and not any(end):
        y = np.matmul(weights, X.reshape(n, group, cg, length))  # 1x1 conv: a plain matmul
    else:
        y = np.empty((n, group, mg, length), dtype=X.dtype)
        xp = _pad_spatial(X, begin, end, 0)
        span = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
        windows = sliding_window_view(xp, span, axis=tuple(range(2, 2 + nd)))
        windows = windows[(slice(None), slice(None))
                          + tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(out, strides))
                          + tuple(slice(None, None, d) for d in dilations)]   # (N, C, *out, *kernel)
        # im2col laid out (C, *kernel, *out) so W @ cols gives (M, *out) without a transpose; one image
        # at a time bounds the column buffer.
        order = (0,) + tuple(range(1 + nd, 1 + 2 * nd)) + tuple(range(1, 1 + nd))
        for i in range(n):
            cols = windows[i].transpose(order).reshape(group, cg * math.prod(kernel), length)
            np.matmul(weights, cols, out=y[i])
    y = y.reshape((n, m) + tuple(out))
    if B is not None:
        y += B.reshape((m,) + (1,) * nd)
    return _add_relu(y.astype(dtype, copy=False), Z, relu)


def _add_relu(y, Z, relu):
    """FusedConv's finish on the convolution's output y: + Z (the Add's broadcast), then the Relu kernel's (NaN
    stays)."""
    if Z is not None:
        y = np.add(y, Z)
    return np.maximum(y, 0, out=y) if relu else y


def conv_transpose_geometry(in_shape, kernel, strides, dilations, pads, auto_pad, output_padding, output_shape):
    """(pads_begin, out_shape) of ConvTranspose."""
    nd = len(in_shape)
    output_padding = output_padding or [0] * nd
    begin, out = [], []
    for i, (n, k, s, d, a) in enumerate(zip(in_shape, kernel, strides, dilations, output_padding)):
        full = (n - 1) * s + a + (k - 1) * d + 1
        if output_shape or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            # Pads come from the target size (explicit pads are ignored); the odd unit goes to the end for
            # SAME_UPPER, to the start otherwise. Like ORT, a target past `full` pads nothing: SAME then
            # yields `full` instead of n * s.
            target = output_shape[-nd:][i] if output_shape else n * s
            total = max(full - target, 0)
            b = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            o = target if output_shape else full - total
        elif auto_pad == "VALID":
            b, o = 0, full
        else:
            b, e = (pads[i], pads[i + nd]) if pads else (0, 0)
            o = full - b - e
        begin.append(b)
        out.append(o)
    return begin, out


@kernel("ConvTranspose", types=FLOATS)
def conv_transpose(X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                   output_padding=None, output_shape=None, pads=None, strides=None):
    dtype = X.dtype
    X, W = widen(X), widen(W)
    nd = X.ndim - 2
    n, c = X.shape[:2]
    in_shape, kernel = X.shape[2:], W.shape[2:]
    cg, mg = c // group, W.shape[1]
    m = mg * group
    strides, dilations = strides or [1] * nd, dilations or [1] * nd
    begin, out = conv_transpose_geometry(in_shape, kernel, strides, dilations, pads, auto_pad,
                                          output_padding, output_shape)
    # cols[n, g, (mg, *kernel), pixel] = W_g^T @ x: each input pixel's contribution to a kernel-sized patch.
    wt = W.reshape(group, cg, -1).transpose(0, 2, 1)
    cols = np.matmul(wt, X.reshape(n, group, cg, -1)).reshape((n, m) + tuple(kernel) + tuple(in_shape))
    # col2im: add each kernel tap into the (uncropped) output, then crop the padding.
    size = [max((i - 1) * s + (k - 1) * d + 1, b + o) for i, s, k, d, b, o in
            zip(in_shape, strides, kernel, dilations, begin, out)]
    full = np.zeros((n, m) + tuple(size), dtype=X.dtype)
    for offset in np.ndindex(*kernel):
        _tap(full, offset, in_shape, strides, dilations)[...] += cols[(slice(None), slice(None)) + offset]
    y = full[(Ellipsis,) + tuple(slice(b, b + o) for b, o in zip(begin, out))]
    if B is not None:
        y = y + B.reshape((m,) + (1,) * nd)
    return (np.ascontiguousarray(y).astype(dtype, copy=False),)


# --- pooling ----------------------------------------------------------------------------


@kernel("MaxPool", types=FLOATS | {np.dtype(np.int8), np.dtype(np.uint8)})
def max_pool(X, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape, pads=None, storage_order=0,
             strides=None, _num_outputs=1):
    lowest = -np.inf if X.dtype.kind == "f" else np.iinfo(X.dtype).min
    xp, begin, end, out, strides, dilations = _window_input(X, kernel_shape, strides, dilations, pads, auto_pad,
                                                            ceil_mode, lowest)
    special = X.dtype.kind == "f" and not np.isfinite(X).all()  # NaN or -inf: stock's code paths differ there
    path = stock_max_pool_path(X.dtype, X.shape[2:], kernel_shape, strides, dilations, begin, end, storage_order,
                               _num_outputs > 1)
    if special and path != "loop":  # stock: MLAS (float16 computed in float32)
        with np.errstate(over="ignore"):  # the lowest float32 is -inf in float16, as stock rounds it
            return (_mlas_max_pool(X.astype(_F32), kernel_shape, strides, begin, end, out, path).astype(X.dtype),)
    y = np.full(X.shape[:2] + tuple(out), lowest, dtype=X.dtype)
    if _num_outputs == 1 and not special:
        for offset in np.ndindex(*kernel_shape):
            np.maximum(y, _tap(xp, offset, out, strides, dilations), out=y)
        return (y,)
    # stock's own loop: each window from its first element inside the input, taking a strictly greater one (a NaN
    # first stays; a later NaN is dropped); the index of the value taken
    inside = _window_input(np.ones((1, 1) + X.shape[2:], bool), kernel_shape, strides, dilations, pads, auto_pad,
                           ceil_mode, False)[0]  # where xp holds X
    seen = np.zeros(y.shape, bool)
    arg = np.zeros(y.shape, dtype=np.int64)
    for offset in np.ndindex(*kernel_shape):
        tap = _tap(xp, offset, out, strides, dilations)
        here = np.broadcast_to(_tap(inside, offset, out, strides, dilations), y.shape)
        take = here & (~seen | (tap > y))
        y = np.where(take, tap, y)
        seen |= here
        if _num_outputs > 1:
            arg = np.where(take, _flat_spatial_index(offset, begin, out, strides, dilations, X.shape[2:],
                                                     storage_order), arg)
    if _num_outputs == 1:
        return (y,)
    # Indices count over the whole tensor: add the (n, c) plane offsets.
    plane = math.prod(X.shape[2:])
    arg += (np.arange(X.shape[0] * X.shape[1], dtype=np.int64) * plane).reshape(X.shape[:2] + (1,) * len(out))
    return (y, arg)


# Stock pools float32 (and float16, computed in float32) with MLAS, whose paths each treat NaN, and -inf against its
# starting value (the lowest finite float), their own way; with neither, every path gives the plain maximum. SSE's
# maxps(a, v) keeps a only where a > v (a NaN in either gives v); std::max(a, v) takes v only where a < v (a NaN v is
# dropped). _mlas_max_pool follows MLAS's choice of path and order; tests/kernels/test_spatial.py compares it with
# stock on random shapes holding NaN and -inf.
LOWEST32 = np.finfo(np.float32).min


def _fold_maxps(seq, start=None):
    """maxps folded along the last axis, from `start` (else from the first element): the maximum of what follows
    the last NaN, NaN where the last element is NaN."""
    n = seq.shape[-1]
    if n == 0:
        return np.full(seq.shape[:-1], np.nan if start is None else start, _F32)
    at = np.arange(n)
    last = np.where(np.isnan(seq), at, -1).max(axis=-1)
    after = np.where(at > last[..., None], seq, -np.inf).max(axis=-1)
    if start is not None:
        after = np.where(last < 0, np.maximum(after, start), after)
    return np.where(last == n - 1, np.float32(np.nan), after).astype(_F32)


def _fold_std_max(seq, start=None):
    """std::max folded along the last axis from `start` (else from the first element, which stays if NaN): NaN
    dropped."""
    if start is not None:
        return np.fmax(np.fmax.reduce(seq, axis=-1, initial=-np.inf), start).astype(_F32)
    head, rest = seq[..., 0], np.fmax.reduce(seq[..., 1:], axis=-1, initial=-np.inf)
    return np.where(np.isnan(head), head, np.fmax(head, rest)).astype(_F32)


def stock_max_pool_path(dtype, spatial, kernel, strides, dilations, begin, end, storage_order=0, indices=False):
    """Which of stock's code paths pools: MLAS's (float32 and float16, one output, no dilation) "global" kernel
    (windows the whole input), its "vector" kernels (2-D and 3-D, last stride at most 2, kernels up to 32, rows
    that fit its buffer) or its "scalar" loop; else stock's own "loop" (each window from its first element inside
    the input). The CUDA EP's MaxPool follows the same paths (native/cuda/spatial.cu)."""
    if np.dtype(dtype) not in (_F32, _F16) or indices or storage_order or any(d != 1 for d in dilations):
        return "loop"
    nd = len(spatial)
    if list(kernel) == list(spatial) and all(s == 1 for s in strides) and not any(begin) and not any(end):
        return "global"
    if nd >= 2 and strides[-1] <= 2 and max(kernel) <= 32 and max(begin[-1], 0) + max(end[-1], 0) + spatial[-1] <= 2045:
        return "vector"
    return "scalar"


def _mlas_max_pool(x, kernel, strides, begin, end, out, path):
    """Stock's float32 MaxPool and GlobalMaxPool of x (N, C, *spatial) by MLAS's `path` (stock_max_pool_path's),
    where NaN or -inf decide; the scalar loop starts from the lowest float and drops NaN."""
    nd = x.ndim - 2
    spatial = x.shape[2:]
    planes = x.reshape((-1,) + spatial)
    if path == "global":
        flat = planes.reshape(len(planes), -1)
        full = flat.shape[1] // 4 * 4  # vectors of 4 by maxps, their lanes combined (0 with 2, 1 with 3, then the
        lanes = _fold_maxps(flat[:, :full].reshape(len(flat), -1, 4).transpose(0, 2, 1), LOWEST32)  # two), the rest
        pairs = np.where(lanes[:, :2] > lanes[:, 2:], lanes[:, :2], lanes[:, 2:])                 # by std::max
        value = np.where(pairs[:, 0] > pairs[:, 1], pairs[:, 0], pairs[:, 1])
        value = _fold_std_max(np.concatenate([value[:, None], flat[:, full:]], axis=1))
        return value.reshape(x.shape[:2] + (1,) * nd)
    if path == "vector":
        return _mlas_vector_pool(planes, kernel, strides, begin, end, out).reshape(x.shape[:2] + tuple(out))
    y = np.empty((len(planes),) + tuple(out), _F32)
    for o in np.ndindex(*out):
        window = tuple(slice(max(p * s - b, 0), max(min(p * s - b + k, n), 0))
                       for p, s, b, k, n in zip(o, strides, begin, kernel, spatial))
        y[(slice(None),) + o] = _fold_std_max(planes[(slice(None),) + window].reshape(len(planes), -1), LOWEST32)
    return y.reshape(x.shape[:2] + tuple(out))


def _mlas_vector_pool(planes, kernel, strides, begin, end, out):
    """MLAS's 2-D / 3-D vector kernel: per output row, the kernel's rows (and planes) folded column by column into a
    buffer (columns in whole vectors of 4 by maxps, the rest by std::max; 2-D from the first row, 3-D from the
    lowest float) with the lowest float as padding, then each output the maxps fold of its kernel width of it."""
    *outer, width = planes.shape[1:]
    count, vector_cols = len(planes), width // 4 * 4
    start = None if len(kernel) == 2 else LOWEST32
    k, s, b = kernel[-1], strides[-1], max(begin[-1], 0)
    y = np.empty((count,) + tuple(out), _F32)
    for o in np.ndindex(*out[:-1]):
        rows = []
        for p, st, pad, kk, n in zip(o, strides, begin, kernel, outer):  # as MLAS's unsigned arithmetic gives them
            first = (p * st - pad) % 2 ** 64
            rows.append(slice(0 if first >= n else first, min((first + kk) % 2 ** 64, n)))
        seq = planes[(slice(None),) + tuple(rows)].reshape(count, -1, width).transpose(0, 2, 1)
        folded = np.concatenate([_fold_maxps(seq[:, :vector_cols], start), _fold_std_max(seq[:, vector_cols:], start)],
                                axis=1)
        buffer = np.full((count, b + width + (out[-1] - 1) * s + k + 4), LOWEST32, _F32)
        buffer[:, b:b + width] = folded
        taps = np.stack([buffer[:, j:j + (out[-1] - 1) * s + 1:s] for j in range(k)], axis=-1)
        y[(slice(None),) + o] = _fold_maxps(taps)
    return y


def _flat_spatial_index(offset, begin, out, strides, dilations, in_shape, storage_order):
    """Flat index within one (n, c) plane of the input element each output position reads at `offset`."""
    index = np.zeros(tuple(out), dtype=np.int64)
    dims = list(range(len(out)))
    # storage_order=1 (column major) numbers the first spatial dim fastest.
    unit = 1
    for i in (dims if storage_order else reversed(dims)):
        coord = np.arange(out[i], dtype=np.int64) * strides[i] - begin[i] + offset[i] * dilations[i]
        index += (coord * unit).reshape([-1 if j == i else 1 for j in dims])
        unit *= in_shape[i]
    return index


@kernel("AveragePool", types=FLOATS)
def average_pool(X, *, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None, kernel_shape,
                 pads=None, strides=None):
    dtype = X.dtype
    X = widen(X)
    xp, begin, end, out, strides, dilations = _window_input(X, kernel_shape, strides, dilations, pads, auto_pad,
                                                            ceil_mode, 0)
    total = np.zeros(X.shape[:2] + tuple(out), dtype=X.dtype)
    for offset in np.ndindex(*kernel_shape):
        total += _tap(xp, offset, out, strides, dilations)
    # The divisor counts the window's cells inside the input (count_include_pad=0) or inside the input and
    # its pads (count_include_pad=1); cells past the pads, added by ceil_mode, never count. The counted
    # region is a box, so the divisor is an outer product of per-axis counts.
    divisor = np.ones((), dtype=X.dtype)
    for i, (n, b, e, o, s, k, d) in enumerate(zip(X.shape[2:], begin, end, out, strides, kernel_shape, dilations)):
        inside = np.zeros(xp.shape[2 + i], dtype=X.dtype)
        inside[slice(0, b + n + e) if count_include_pad else slice(b, b + n)] = 1
        divisor = np.multiply.outer(divisor, sum(inside[j * d:j * d + (o - 1) * s + 1:s] for j in range(k)))
    return ((total / divisor).astype(dtype, copy=False),)


@kernel("LpPool", since=2, types=FLOATS)
def lp_pool(X, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape, p=2, pads=None, strides=None):
    # (sum of |x|^p over the window)^(1/p); padding adds nothing
    x = np.abs(widen(X)) ** compute_dtype(X.dtype).type(p)
    xp, _, _, out, strides, dilations = _window_input(x, kernel_shape, strides, dilations, pads, auto_pad,
                                                      ceil_mode, 0)
    total = np.zeros(X.shape[:2] + tuple(out), dtype=x.dtype)
    for offset in np.ndindex(*kernel_shape):
        total += _tap(xp, offset, out, strides, dilations)
    return ((total ** x.dtype.type(1 / p)).astype(X.dtype, copy=False),)


@kernel("GlobalLpPool", since=2, types=FLOATS)
def global_lp_pool(X, *, p=2):
    x = np.abs(widen(X)) ** compute_dtype(X.dtype).type(p)
    total = x.sum(axis=tuple(range(2, X.ndim)), keepdims=True)
    return ((total ** x.dtype.type(1 / p)).astype(X.dtype, copy=False),)


def pooled_from(x_shape, kernel_shape, strides, pads):
    """The shape a pooling with these attributes made x_shape from (MaxUnpool's output without output_shape)."""
    nd = len(kernel_shape)
    strides, pads = strides or [1] * nd, pads or [0] * (2 * nd)
    return tuple(x_shape[:2]) + tuple((n - 1) * s - (pads[i] + pads[i + nd]) + k for i, (n, s, k) in
                                      enumerate(zip(x_shape[2:], strides, kernel_shape)))


@kernel("MaxUnpool", since=9, types=FLOATS)
def max_unpool(X, I, output_shape=None, *, kernel_shape, pads=None, strides=None):
    # Scatter X to the flat positions I of the pooled-from shape, then pad to output_shape, as the
    # spec's reference and ONNX's node test do (stock ORT reads I in output_shape's flat layout and
    # fails that test: docs/user-guide.md)
    inferred = pooled_from(X.shape, kernel_shape, strides, pads)
    y = np.zeros(math.prod(inferred), dtype=X.dtype)
    flat = I.reshape(-1)
    bad = checks.first_outside(flat, 0, y.size)
    if bad:
        raise InvalidArgument(f"Index value out of bounds. Got: {bad[1]}. Valid range is [0, {y.size}).")
    y[flat] = X.reshape(-1)
    y = y.reshape(inferred)
    if output_shape is None:
        return (y,)
    out = np.zeros([int(d) for d in output_shape.reshape(-1)], dtype=X.dtype)
    out[tuple(slice(0, d) for d in inferred)] = y
    return (out,)


@kernel("GlobalAveragePool", types=FLOATS)
def global_average_pool(X):
    axes = tuple(range(2, X.ndim))
    return (X.mean(axis=axes, keepdims=True, dtype=compute_dtype(X.dtype)).astype(X.dtype, copy=False),)


@kernel("GlobalMaxPool", types=FLOATS)
def global_max_pool(X):
    if X.dtype in (_F32, _F16) and not np.isfinite(X).all():  # NaN or -inf: stock's MLAS path (_mlas_max_pool)
        nd = X.ndim - 2
        spatial = list(X.shape[2:])
        with np.errstate(over="ignore"):
            return (_mlas_max_pool(X.astype(_F32), spatial, [1] * nd, [0] * nd, [0] * nd, [1] * nd, "global")
                    .astype(X.dtype),)
    return (X.max(axis=tuple(range(2, X.ndim)), keepdims=True),)


# --- Resize / Upsample ------------------------------------------------------------------
#
# Coordinates are computed in float32, as ORT does, so that nearest-neighbour ties round the same way.


def original_coords(mode, out_len, in_len, scale, roi_start, roi_end):
    """x_original for every output index along one axis (float32)."""
    x = np.arange(out_len, dtype=_F32)
    scale, half = _F32(scale), _F32(0.5)
    if mode == "half_pixel":
        return (x + half) / scale - half
    if mode == "half_pixel_symmetric":
        adjustment = _F32(out_len) / (scale * _F32(in_len))
        offset = _F32(in_len) / _F32(2) * (_F32(1) - adjustment)
        # ORT finishes this one in double before rounding to float, which decides floor() near integers.
        return (np.float64(offset) + (x.astype(np.float64) + 0.5) / np.float64(scale) - 0.5).astype(_F32)
    if mode == "pytorch_half_pixel":
        return (x + half) / scale - half if out_len > 1 else np.zeros(out_len, _F32)
    if mode == "tf_half_pixel_for_nn":  # opset 11 only
        return (x + half) / scale
    if mode == "align_corners":
        return np.zeros(out_len, _F32) if out_len == 1 else x * _F32(in_len - 1) / _F32(out_len - 1)
    if mode == "asymmetric":
        return x / scale
    # tf_crop_and_resize
    start, end, last = _F32(roi_start), _F32(roi_end), _F32(in_len - 1)
    if out_len == 1:
        return np.full(out_len, 0.5 * np.float64(start + end) * np.float64(last), dtype=_F32)  # double, as ORT
    return start * last + x * (end - start) * last / _F32(out_len - 1)


def nearest_index(coords, nearest_mode, scale):
    if nearest_mode == "round_prefer_floor":
        return np.where(coords == np.trunc(coords) + _F32(0.5), np.floor(coords), np.round(coords))
    if nearest_mode == "round_prefer_ceil":  # std::round: halves away from zero
        return np.where(np.abs(coords - np.trunc(coords)) == _F32(0.5), coords + np.copysign(_F32(0.5), coords),
                        np.round(coords))
    if nearest_mode == "floor":
        return np.floor(coords)
    if nearest_mode == "ceil":
        return np.ceil(coords)
    # "simple" (Resize-10, Upsample): ceil when downsampling, floor (truncate) when upsampling
    return np.ceil(coords) if scale < 1 else np.trunc(coords)


def _cubic(d, a):
    """The cubic convolution kernel (Keys) with coefficient a, at distances d."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _filter_taps(coords, in_len, mode, scale, cubic_coeff_a, exclude_outside):
    """(indices, weights), each [out_len, taps], of a linear or cubic filter centred on each coordinate.

    With antialiasing (scale < 1 here) the filter is stretched by 1/scale, so that every input pixel
    contributes; weights are normalized to sum to 1. Taps outside the input read the edge pixel, or
    get weight 0 with exclude_outside."""
    coords = coords.astype(np.float64)
    support = (2 if mode == "cubic" else 1) / scale   # the filter's half-width in input pixels
    start = int(np.floor(-support)) + 1
    base = np.ceil(coords) - 1                       # the tap left of the coordinate (strictly)
    taps = base[:, None] + start + np.arange(2 - 2 * start)
    d = (taps - coords[:, None]) * scale
    weights = _cubic(d, cubic_coeff_a) if mode == "cubic" else np.clip(1 - np.abs(d), 0, 1)
    if exclude_outside:
        weights = np.where((taps < 0) | (taps >= in_len), 0.0, weights)
    total = weights.sum(axis=1, keepdims=True)
    weights = weights / np.where(total == 0, 1, total)
    return np.clip(taps, 0, in_len - 1).astype(np.intp), weights


def _resize_axis(x, axis, out_len, scale, mode, coordinate_mode, nearest_mode, roi, extrapolation_value,
                 antialias=0, cubic_coeff_a=-0.75, exclude_outside=0):
    in_len = x.shape[axis]
    coords = original_coords(coordinate_mode, out_len, in_len, scale, *roi)
    if out_len == in_len and np.array_equal(coords, np.arange(in_len)):
        return x  # identity along this axis
    outside = (coords < 0) | (coords > in_len - 1) if coordinate_mode == "tf_crop_and_resize" else None
    if mode == "nearest":
        idx = np.clip(nearest_index(coords, nearest_mode, scale), 0, in_len - 1).astype(np.intp)
        y = np.take(x, idx, axis=axis)
    elif mode == "cubic" or antialias and scale < 1:
        idx, weights = _filter_taps(coords, in_len, mode, min(float(scale), 1.0) if antialias else 1.0,
                                    cubic_coeff_a, exclude_outside)
        shape = [-1 if i == axis else 1 for i in range(x.ndim)]
        y = sum(np.take(x, idx[:, j], axis=axis) * weights[:, j].reshape(shape) for j in range(idx.shape[1]))
    else:  # linear: blend the two neighbours of the clamped coordinate
        c = np.clip(coords, 0, in_len - 1)
        lo = c.astype(np.intp)
        hi = np.minimum(lo + 1, in_len - 1)
        w = (c - lo).astype(x.dtype).reshape([-1 if i == axis else 1 for i in range(x.ndim)])
        y = np.take(x, lo, axis=axis) * (1 - w) + np.take(x, hi, axis=axis) * w
    if outside is not None and outside.any():
        shape = [-1 if i == axis else 1 for i in range(x.ndim)]
        y = np.where(outside.reshape(shape), np.asarray(extrapolation_value, dtype=y.dtype), y)
    return y


def _resize(X, roi, scales, sizes, *, axes=None, mode="nearest", coordinate_transformation_mode="half_pixel",
            nearest_mode="round_prefer_floor", extrapolation_value=0.0, keep_aspect_ratio_policy="stretch",
            **filter_options):
    rank = X.ndim
    axes = list(range(rank)) if axes is None else [a + rank if a < 0 else a for a in axes]
    in_shape = [X.shape[a] for a in axes]
    if sizes is not None:
        out_shape = [int(s) for s in sizes]
        if keep_aspect_ratio_policy == "stretch":
            scale = [_F32(o) / _F32(i) for o, i in zip(out_shape, in_shape)]
        else:
            ratios = [_F32(o) / _F32(i) for o, i in zip(out_shape, in_shape)]
            common = min(ratios) if keep_aspect_ratio_policy == "not_larger" else max(ratios)
            scale = [common] * len(axes)
            out_shape = [int(np.floor(common * _F32(i) + _F32(0.5))) for i in in_shape]  # round half up
    else:
        scale = [_F32(s) for s in scales]
        out_shape = [int(np.floor(s * _F32(i))) for s, i in zip(scale, in_shape)]
    if roi is None or len(roi) == 0:
        roi = [0.0] * len(axes) + [1.0] * len(axes)
    roi = np.asarray(roi, dtype=_F32).reshape(-1)
    if len(roi) == 2 * rank and len(axes) < rank:
        roi = np.concatenate([roi[:rank][axes], roi[rank:][axes]])
    out_full = list(X.shape)
    for j, a in enumerate(axes):
        out_full[a] = out_shape[j]
    checks.allocation(out_full, 8, "Resize's output")  # computed in float64 before it is narrowed
    y = X if mode == "nearest" else widen(X)
    for j, a in enumerate(axes):
        y = _resize_axis(y, a, out_shape[j], scale[j], mode, coordinate_transformation_mode, nearest_mode,
                         (roi[j], roi[j + len(axes)]), extrapolation_value, **filter_options)
    return (y.astype(X.dtype, copy=False),)


def _check_resize(node, graph):
    mode = node.attrs.get("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        return f"Resize mode={mode!r} not supported"
    dtype = graph.value(node.inputs[0]).dtype
    if mode != "nearest" and dtype is not None and dtype not in FLOATS:
        return f"Resize {mode} mode supports float inputs only"
    return None


@kernel("Resize", since=10, until=10, types=NUMERIC, check=_check_resize)
def resize_10(X, scales, *, mode="nearest"):
    # Resize-10 is Upsample-9 generalized: asymmetric coordinates, ORT's "simple" nearest rounding.
    return _resize(X, None, scales.tolist(), None, mode=mode, coordinate_transformation_mode="asymmetric",
                   nearest_mode="simple")


@kernel("Resize", since=11, types=NUMERIC, check=_check_resize)
def resize_11(X, roi=None, scales=None, sizes=None, *, antialias=0, axes=None,
              coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.75, exclude_outside=0,
              extrapolation_value=0.0, keep_aspect_ratio_policy="stretch", mode="nearest",
              nearest_mode="round_prefer_floor"):
    if scales is not None and scales.size == 0:  # an empty tensor stands for an absent input
        scales = None
    return _resize(X, None if roi is None else roi.tolist(), None if scales is None else scales.tolist(),
                   None if sizes is None else sizes.tolist(), axes=axes, mode=mode,
                   coordinate_transformation_mode=coordinate_transformation_mode, nearest_mode=nearest_mode,
                   extrapolation_value=extrapolation_value, keep_aspect_ratio_policy=keep_aspect_ratio_policy,
                   antialias=antialias, cubic_coeff_a=cubic_coeff_a, exclude_outside=exclude_outside)


@kernel("Upsample", since=7, until=8, types=NUMERIC, check=_check_resize)
def upsample_7(X, *, mode="nearest", scales):
    return _resize(X, None, scales, None, mode=mode, coordinate_transformation_mode="asymmetric",
                   nearest_mode="simple")


@kernel("Upsample", since=9, until=9, types=NUMERIC, check=_check_resize)
def upsample_9(X, scales, *, mode="nearest"):
    return resize_10(X, scales, mode=mode)


# --- GridSample ---------------------------------------------------------------------------

def _denormalize(n, length, align_corners):
    """Grid coordinate in [-1, 1] -> pixel coordinate along an axis of `length` pixels."""
    if align_corners:
        return (n + _F32(1)) / _F32(2) * _F32(length - 1)
    return ((n + _F32(1)) * _F32(length) - _F32(1)) / _F32(2)


def _reflect(x, low, high):
    """x reflected off the borders [low, high] until inside (any number of bounces)."""
    span = high - low
    if span <= 0:
        return np.full_like(x, low)
    below, above = x < low, x > high
    dx = np.where(below, low - x, np.where(above, x - high, 0))
    bounces = np.floor(dx / span)
    r = dx - bounces * span
    even = bounces % 2 == 0
    return np.where(below, np.where(even, low + r, high - r),
                    np.where(above, np.where(even, high - r, low + r), x)).astype(x.dtype)


def _taps(x, length, mode, padding_mode, low, high):
    """(indices, weights, inside) per output position for one axis, each [..., taps]."""
    if mode == "nearest":
        index = np.rint(x)[..., None]       # halves to even, as PyTorch
        weights = np.ones_like(index)
    elif mode == "linear":
        x0 = np.floor(x)
        t = (x - x0)[..., None]
        index = x0[..., None] + np.arange(2)
        weights = np.concatenate([1 - t, t], axis=-1)
    else:  # cubic
        x0 = np.floor(x)
        index = x0[..., None] + np.arange(-1, 3)
        weights = _cubic(index - x[..., None], -0.75).astype(x.dtype)
    if padding_mode == "zeros":
        inside = (index >= 0) & (index < length)
    else:
        if padding_mode == "reflection":
            index = np.trunc(_reflect(index, low, high))
        inside = np.ones(index.shape, bool)
    return np.clip(index, 0, length - 1).astype(np.intp), weights, inside


def check_grid_sample(node, graph):
    mode = node.attrs.get("mode", "linear" if node.since_version >= 20 else "bilinear")
    if mode not in ("nearest", "linear", "bilinear", "cubic", "bicubic"):
        return f"GridSample mode={mode!r} not supported"
    if node.attrs.get("padding_mode", "zeros") not in ("zeros", "border", "reflection"):
        return f"GridSample padding_mode={node.attrs['padding_mode']!r} not supported"
    return None


@kernel("GridSample", since=16, types=FLOATS, check=check_grid_sample)
def grid_sample(X, grid, *, align_corners=0, mode="linear", padding_mode="zeros"):
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)  # opset 16 names
    x = widen(X)
    n, c, *dims = x.shape
    nd = len(dims)
    out = grid.shape[1:-1]
    g = grid.astype(_F32)
    per_axis = []
    for i, length in enumerate(dims):
        coord = _denormalize(g[..., nd - 1 - i], length, align_corners)  # the grid lists x (innermost) first
        low, high = (_F32(0), _F32(length - 1)) if align_corners else (_F32(-0.5), _F32(length - 0.5))
        if mode == "nearest":
            coord = np.rint(coord)
        if padding_mode == "border" and mode != "cubic":  # cubic clamps each tap's index instead, as ORT
            coord = np.clip(coord, 0, length - 1)
        elif padding_mode == "reflection":
            coord = _reflect(coord, low, high)
        per_axis.append(_taps(coord, length, mode, padding_mode, low, high))
    batch = np.arange(n).reshape((n,) + (1,) * len(out))
    y = np.zeros((n,) + tuple(out) + (c,), dtype=x.dtype)
    for combo in np.ndindex(*[t[0].shape[-1] for t in per_axis]):
        index = tuple(t[0][..., k] for t, k in zip(per_axis, combo))
        weight = math.prod(t[1][..., k] for t, k in zip(per_axis, combo))
        inside = np.logical_and.reduce([t[2][..., k] for t, k in zip(per_axis, combo)])
        values = np.moveaxis(x, 1, -1)[(batch,) + index]          # (N, *out, C)
        y += (weight * inside)[..., None] * values
    return (np.moveaxis(y, -1, 1).astype(X.dtype, copy=False),)


# --- AffineGrid ---------------------------------------------------------------------------

def affine_base(dims, align_corners):
    """AffineGrid's points before the transform, (prod(dims), nd + 1) float64: the normalized pixel
    centres (or corners) x, y[, z] (the last axis first), then 1. With align_corners an axis of length
    1 is at 1, as stock ORT places it (undefined in the spec: its reference divides by zero and lands
    at -1; PyTorch says 0)."""
    axes = []
    for length in dims:
        if align_corners:
            axes.append(np.linspace(-1, 1, length) if length > 1 else np.ones(1))
        else:
            axes.append((np.arange(length) * 2 + 1) / length - 1)
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack(list(mesh[::-1]) + [np.ones(dims)], axis=-1).reshape(-1, len(dims) + 1)


@kernel("AffineGrid", since=20, types=FLOATS)
def affine_grid(theta, size, *, align_corners=0):
    dims = [int(d) for d in size.reshape(-1)[2:]]
    grid = affine_base(dims, align_corners) @ np.swapaxes(theta.astype(np.float64), 1, 2)
    return (grid.reshape((theta.shape[0],) + tuple(dims) + (len(dims),)).astype(theta.dtype),)


# --- Col2Im -------------------------------------------------------------------------------

@kernel("Col2Im", since=18, types=FLOATS)
def col2im(input, image_shape, block_shape, *, dilations=None, pads=None, strides=None):
    image = [int(d) for d in image_shape.reshape(-1)]
    block = [int(d) for d in block_shape.reshape(-1)]
    nd = len(image)
    dilations, strides = dilations or [1] * nd, strides or [1] * nd
    pads = pads or [0] * (2 * nd)
    n = input.shape[0]
    c = input.shape[1] // math.prod(block)
    blocks = [(i + pads[k] + pads[k + nd] - d * (b - 1) - 1) // s + 1
              for k, (i, b, d, s) in enumerate(zip(image, block, dilations, strides))]
    cols = input.reshape((n, c) + tuple(block) + tuple(blocks))
    # add every block element at its place in the padded image, then crop the padding
    padded = np.zeros((n, c) + tuple(i + pads[k] + pads[k + nd] for k, i in enumerate(image)), dtype=input.dtype)
    for offset in np.ndindex(*block):
        window = tuple(slice(o * d, o * d + (m - 1) * s + 1, s) for o, d, m, s in
                       zip(offset, dilations, blocks, strides))
        padded[(Ellipsis,) + window] += cols[(slice(None), slice(None)) + offset]
    return (padded[(Ellipsis,) + tuple(slice(pads[k], pads[k] + i) for k, i in enumerate(image))],)


# --- DeformConv ---------------------------------------------------------------------------

def check_deform_conv(node, graph):
    rank = graph.value(node.inputs[0]).shape
    if rank is not None and len(rank) != 4:
        return "DeformConv is implemented for 2-D images (N, C, H, W) only"
    return None


@kernel("DeformConv", since=19, types=FLOATS, check=check_deform_conv)
def deform_conv(X, W, offset, B=None, mask=None, *, dilations=None, group=1, kernel_shape=None, offset_group=1,
                pads=None, strides=None):
    # A convolution whose taps are displaced by `offset` (per output position and tap), sampled
    # bilinearly (zero outside the image), and weighted by `mask`.
    x = widen(X)
    n, c, height, width = x.shape
    kh, kw = W.shape[2:]
    sh, sw = strides or (1, 1)
    dh, dw = dilations or (1, 1)
    top, left = (pads or (0, 0, 0, 0))[:2]
    oh, ow = offset.shape[2:]
    off = offset.astype(x.dtype).reshape(n, offset_group, kh, kw, 2, oh, ow)
    weight = np.ones((n, offset_group, kh, kw, oh, ow), x.dtype) if mask is None \
        else mask.astype(x.dtype).reshape(n, offset_group, kh, kw, oh, ow)
    # sampling positions [n, offset_group, kh, kw, oh, ow]
    rows = (np.arange(oh) * sh - top)[:, None] + (np.arange(kh) * dh)[:, None, None, None]
    cols = (np.arange(ow) * sw - left)[None, :] + (np.arange(kw) * dw)[None, :, None, None]
    py, px = rows + off[:, :, :, :, 0], cols + off[:, :, :, :, 1]
    per_group = c // offset_group
    samples = np.zeros((n, offset_group, per_group, kh, kw, oh, ow), x.dtype)
    planes = x.reshape(n, offset_group, per_group, height * width)
    y0, x0 = np.floor(py), np.floor(px)
    for dy in (0, 1):
        for dx in (0, 1):
            yi, xi = y0 + dy, x0 + dx
            w = (1 - np.abs(py - yi)) * (1 - np.abs(px - xi))
            inside = (yi >= 0) & (yi < height) & (xi >= 0) & (xi < width)
            flat = (np.clip(yi, 0, height - 1) * width + np.clip(xi, 0, width - 1)).astype(np.intp)
            # gather each channel of the offset group at the flat positions
            values = np.take_along_axis(planes, flat.reshape(n, offset_group, 1, -1), axis=3)
            samples += values.reshape(samples.shape) * (w * inside * weight)[:, :, None]
    columns = samples.reshape(n, group, (c // group) * kh * kw, oh * ow)
    y = np.matmul(W.astype(x.dtype).reshape(group, W.shape[0] // group, -1), columns)
    y = y.reshape(n, W.shape[0], oh, ow)
    if B is not None:
        y = y + B.astype(x.dtype).reshape(-1, 1, 1)
    return (y.astype(X.dtype, copy=False),)


# --- CausalConvWithState ------------------------------------------------------------------------------------------
# A depthwise causal 1-D convolution carrying its last (k - 1) * dilation inputs as a state (LFM2's short
# convolutions, Gated DeltaNet's and Mamba's): the ONNX op (opset 27) and com.microsoft's (with a channels-last
# layout). com.microsoft's CUDA-only extensions (state windows, state-update capture, channel slices) are declined.

_CAUSAL_CONV_DEFAULTS = {"ndim": 1, "state_window": 0, "state_update_capacity": 0, "state_length": 0,
                         "state_channels_last": -1, "input_channel_offset": 0, "input_channels": 0}


def check_causal_conv(node, graph):
    for name, default in _CAUSAL_CONV_DEFAULTS.items():
        if node.attrs.get(name, default) != default:
            return f"{name}={node.attrs[name]} is not supported (only {name}={default})"
    if node.attrs.get("activation", "none") not in ("none", "silu", "swish"):
        return f"activation {node.attrs['activation']!r} is not none, silu or swish"
    if len(node.outputs) > 2 and node.outputs[2]:
        return "the state_update output is CUDA's"
    return None


def causal_conv_geometry(x_shape, weight_shape, bias_shape, past_shape, dilation: int, channels_last: int):
    """CausalConvWithState's (batch, channels, length, k, state shape) with stock's checks (the CUDA kernel's too):
    its enforcements FAIL (ValueError), a state of the wrong shape is INVALID_ARGUMENT."""
    rank = len(x_shape)
    if rank < 3 if channels_last else rank != 3:
        raise ValueError(f"input must have {'at least ' if channels_last else ''}3 dimensions, got shape {x_shape}")
    if dilation < 1:
        raise ValueError(f"dilation must be >= 1, got {dilation}")
    batch, lead = x_shape[0], tuple(x_shape[2:] if channels_last else x_shape[1:2])
    channels, length = math.prod(lead), x_shape[1] if channels_last else x_shape[2]
    if len(weight_shape) != 3:
        raise ValueError(f"weight must have 3 dimensions, got shape {weight_shape}")
    if weight_shape[0] != channels:
        raise ValueError(f"weight channels must match input channels ({weight_shape[0]} vs {channels})")
    if weight_shape[1] != 1 or weight_shape[2] < 1:
        raise ValueError(f"weight must be depthwise, shape (channels, 1, k), got {weight_shape}")
    k = weight_shape[2]
    span = (k - 1) * dilation
    if bias_shape is not None and tuple(bias_shape) != (channels,):
        raise ValueError(f"bias must be 1D with size {channels}, got shape {bias_shape}")
    state_shape = (batch, span) + lead if channels_last else (batch, channels, span)
    if past_shape is not None and tuple(past_shape) != state_shape:
        raise InvalidArgument(f"past_state must have shape {state_shape}, got {past_shape}")
    return batch, channels, length, k, state_shape


def causal_conv_with_state(x, weight, bias=None, past_state=None, *, activation="none", dilation=1,
                           channels_last=0):
    """output[b, c, t] = bias[c] + sum_j weight[c, 0, j] * v[b, c, t + j * dilation], v = past_state ++ x along the
    sequence; present_state = v's last (k - 1) * dilation positions. Float16 is computed in float32, rounded once."""
    batch, channels, length, k, state_shape = causal_conv_geometry(
        x.shape, weight.shape, None if bias is None else bias.shape, None if past_state is None else past_state.shape,
        dilation, channels_last)
    span = (k - 1) * dilation
    data = x.reshape(batch, length, channels).transpose(0, 2, 1) if channels_last else x  # (B, C, L)
    f32 = np.float32 if x.dtype != np.float64 else np.float64
    past = (np.zeros((batch, channels, span), f32) if past_state is None else
            past_state.reshape(batch, span, channels).transpose(0, 2, 1).astype(f32) if channels_last else
            past_state.astype(f32))
    v = np.concatenate([past, data.astype(f32)], axis=2)  # (B, C, span + L)
    w = weight[:, 0, :].astype(f32)
    y = np.zeros((batch, channels, length), f32) if bias is None else np.broadcast_to(
        bias.astype(f32)[None, :, None], (batch, channels, length)).copy()
    for j in range(k):
        y += w[None, :, j:j + 1] * v[:, :, j * dilation:j * dilation + length]
    if activation in ("silu", "swish"):
        y = y / (1 + np.exp(-y))
    present = v[:, :, v.shape[2] - span:]
    if channels_last:
        y = y.transpose(0, 2, 1).reshape(x.shape)
        present = present.transpose(0, 2, 1).reshape(state_shape)
    return y.astype(x.dtype), present.astype(x.dtype)


@kernel("CausalConvWithState", since=27, types=FLOATS, check=check_causal_conv)
def causal_conv_with_state_27(x, weight, bias=None, past_state=None, *, activation="none"):
    return causal_conv_with_state(x, weight, bias, past_state, activation=activation)


@kernel("CausalConvWithState", domain="com.microsoft", types=FLOATS, check=check_causal_conv)
def causal_conv_with_state_ms(x, weight, bias=None, past_state=None, *, activation="none", dilation=1,
                              channels_last=0, ndim=1, state_window=0, state_update_capacity=0, state_length=0,
                              state_channels_last=-1, input_channel_offset=0, input_channels=0):
    # (the extension attributes are checked at their defaults by check_causal_conv)
    return causal_conv_with_state(x, weight, bias, past_state, activation=activation, dilation=dilation,
                                  channels_last=channels_last)
