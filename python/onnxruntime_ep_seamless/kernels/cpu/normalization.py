"""Normalization ops: BatchNormalization, InstanceNormalization, LayerNormalization, GroupNormalization, LRN,
LpNormalization, MeanVarianceNormalization (ONNX semantics, NCHW layout); the RMS and skip normalizations: ORT's
SimplifiedLayerNormalization (default domain), com.microsoft SkipSimplifiedLayerNormalization /
SkipLayerNormalization, com.microsoft GatedRMSNorm, ONNX RMSNormalization-23.

float16 inputs are computed in float32 and rounded once at the end, as ORT does. ORT's CPU kernels of the RMS
normalizations accumulate sum(x) and sum(x^2) in float32 and divide by the root (y = x / rms * scale); we do
the same division, so results agree to float rounding.
"""
from __future__ import annotations

import numpy as np

from .. import checks
from ..checks import InvalidArgument
from ..registry import FLOATS, FUSED_DOMAIN, kernel
from ...graph.ir import ONNX_TO_NUMPY
from . import native
from .spatial import compute_dtype, widen


def _channel(v, rank):
    """A per-channel vector shaped to broadcast against (N, C, *spatial)."""
    return v.reshape((-1,) + (1,) * (rank - 2)) if v.ndim == 1 else v


def _check_batch_norm(node, graph):
    if node.since_version < 14 and len([o for o in node.outputs if o]) > 1:
        return "BatchNormalization statistics outputs before opset 14 are not supported"
    if not node.attrs.get("training_mode", 0) and len([o for o in node.outputs if o]) > 1:
        return "BatchNormalization running statistics need training_mode=1"
    return None


@kernel("BatchNormalization", since=7, types=FLOATS, check=_check_batch_norm)
def batch_normalization(X, scale, B, input_mean, input_var, *, epsilon=1e-5, momentum=0.9, spatial=1,
                        training_mode=0):
    # spatial=0 (opset 7-8) gives scale etc. the shape (C, *spatial), which broadcasts the same way.
    if X.ndim < 2:
        raise InvalidArgument(f"Invalid input X: NumDimensions() < 2, shape {X.shape}")
    if spatial:
        _per_channel(X, scale=scale, B=B, mean=input_mean, var=input_var)
    ct = compute_dtype(X.dtype)
    if training_mode:  # normalize with the batch's statistics; also return the updated running ones
        axes = (0,) + tuple(range(2, X.ndim))
        mean, var = widen(X).mean(axis=axes), widen(X).var(axis=axes)
        running_mean = input_mean.astype(ct) * ct.type(momentum) + mean * ct.type(1 - momentum)
        running_var = input_var.astype(ct) * ct.type(momentum) + var * ct.type(1 - momentum)
        (y,) = batch_normalization(X, scale, B, mean, var, epsilon=epsilon)
        return y, running_mean.astype(input_mean.dtype), running_var.astype(input_var.dtype)
    a, b = inference_scale_shift(*(v.astype(ct) for v in (scale, B, input_mean, input_var)), epsilon)
    return ((widen(X) * _channel(a, X.ndim) + _channel(b, X.ndim)).astype(X.dtype, copy=False),)


def inference_scale_shift(scale, bias, mean, var, epsilon):
    """BatchNormalization's inference as x * a + b per channel: (a, b), in the parameters' type (the Python kernel,
    its native step and plan/fusion.py's ChannelAffine alike)."""
    a = scale / np.sqrt(var + scale.dtype.type(epsilon))
    return a, bias - mean * a


# the kernel of plan/fusion.py's ChannelAffine: an inference BatchNormalization with the per-channel Mul, Add and
# Relu after it, folded at Compile into one scale and shift a channel (float32)
@kernel("ChannelAffine", domain=FUSED_DOMAIN, types=frozenset([np.dtype(np.float32)]))
def channel_affine(X, scale, shift, *, relu=0):
    _per_channel(X, scale=scale, shift=shift)
    return (native.channel_affine(X, scale, shift, bool(relu)),)


def _per_channel(X, **params) -> None:
    """Per-channel parameters (scale, bias, statistics) hold one value per channel of X (N, C, ...)."""
    for name, v in params.items():
        if v is not None and (v.ndim != 1 or v.shape[0] != X.shape[1]):
            raise InvalidArgument(f"Invalid input {name}: shape {v.shape} != ({X.shape[1]},), the channels of X "
                                  f"{X.shape}")


@kernel("LpNormalization", since=1, types=FLOATS)
@np.errstate(all="ignore")
def lp_normalization(x, *, axis=-1, p=2):
    wide = widen(x)
    norm = np.sum(np.abs(wide) if p == 1 else wide * wide, axis=axis, keepdims=True)
    norm = norm if p == 1 else np.sqrt(norm)
    return (np.where(norm == 0, 0, wide / norm).astype(x.dtype, copy=False),)  # a zero vector stays zero


@kernel("MeanVarianceNormalization", since=9, types=FLOATS)
def mean_variance_normalization(X, *, axes=(0, 2, 3)):
    # the spec's function body: (X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9)
    x = widen(X)
    axes = tuple(axes)
    mean = x.mean(axis=axes, keepdims=True)
    std = np.sqrt((x * x).mean(axis=axes, keepdims=True) - mean * mean)
    return (((x - mean) / (std + x.dtype.type(1e-9))).astype(X.dtype, copy=False),)


def _normalize(x, axes, epsilon):
    """(x - mean) / sqrt(var + eps) over `axes`, with the mean and 1/std (keepdims)."""
    mean = x.mean(axis=axes, keepdims=True)
    centered = x - mean
    inv_std = 1 / np.sqrt((centered * centered).mean(axis=axes, keepdims=True) + x.dtype.type(epsilon))
    return centered * inv_std, mean, inv_std


@kernel("InstanceNormalization", since=6, types=FLOATS)
def instance_normalization(X, scale, B, *, epsilon=1e-5):
    if X.ndim < 3:
        raise InvalidArgument(f"Invalid input data: number of dimensions is less than 3: {X.ndim}")
    _per_channel(X, scale=scale, B=B)
    y, _, _ = _normalize(widen(X), tuple(range(2, X.ndim)), epsilon)
    y = y * _channel(widen(scale), X.ndim) + _channel(widen(B), X.ndim)
    return (y.astype(X.dtype, copy=False),)


def _check_stash(node, graph):
    st = node.attrs.get("stash_type", 1)
    return None if st in (1, 11) else f"stash_type={st} not supported"


@kernel("LayerNormalization", since=17, types=FLOATS, check=_check_stash)
def layer_normalization(X, Scale, B=None, *, axis=-1, epsilon=1e-5, stash_type=1):
    st = ONNX_TO_NUMPY[stash_type]  # the type of Mean and InvStdDev
    ct = np.promote_types(st, X.dtype)  # float64 inputs keep float64 arithmetic, as in ORT
    axis = normalized_axis(X, axis, Scale, B)
    cols = int(np.prod(X.shape[axis:]))
    if (ct == np.float32 and X.size and Scale.size == cols and (B is None or B.size == cols)
            and Scale.dtype == np.float32 and (B is None or B.dtype == np.float32)):
        from .native import layer_norm_trailing  # one native pass instead of several numpy ones
        y, mean, inv_std = layer_norm_trailing(X, Scale, B, cols, epsilon)
        stats = X.shape[:axis] + (1,) * (X.ndim - axis)
        return y, mean.reshape(stats), inv_std.reshape(stats)
    y, mean, inv_std = _normalize(X.astype(ct), tuple(range(axis, X.ndim)), epsilon)
    y = y * Scale.astype(ct)
    if B is not None:
        y += B.astype(ct)
    return (y.astype(X.dtype, copy=False), mean.astype(st, copy=False), inv_std.astype(st, copy=False))


def normalized_axis(X, axis, scale, bias=None) -> int:
    """The first normalized axis of X, with stock ORT's checks of the scale and bias (LayerNormalization,
    SimplifiedLayerNormalization, RMSNormalization)."""
    axis = checks.axis(axis, X.ndim)
    normalized = X.shape[axis:]
    for v in (scale, bias):
        if v is not None and v.shape != normalized and (  # the common case first: per run, per node
                v.ndim > X.ndim - axis or _broadcasts_to(v.shape, normalized) is None):
            raise InvalidArgument(
                f"Scale and (optional) bias must match X.shape[axis:] or be NumPy-broadcastable to it. X.shape="
                f"{X.shape} scale.shape={scale.shape} bias.shape={None if bias is None else bias.shape} and axis={axis}")
    return axis


def _broadcasts_to(shape, target):
    try:
        return None if np.broadcast_shapes(shape, target) != tuple(target) else target
    except ValueError:
        return None


def _group_norm(X, num_groups, epsilon, stash):
    n = X.shape[0]
    grouped = X.astype(stash).reshape(n, num_groups, -1)
    y, _, _ = _normalize(grouped, (2,), epsilon)
    return y


@kernel("GroupNormalization", since=18, until=20, types=FLOATS)
def group_normalization_18(X, scale, bias, *, epsilon=1e-5, num_groups):
    y = _group_norm(X, num_groups, epsilon, compute_dtype(X.dtype))  # scale and bias are per group here
    y = y * widen(scale).reshape(-1, 1) + widen(bias).reshape(-1, 1)
    return (y.reshape(X.shape).astype(X.dtype, copy=False),)


@kernel("GroupNormalization", since=21, types=FLOATS, check=_check_stash)
def group_normalization_21(X, scale, bias, *, epsilon=1e-5, num_groups, stash_type=1):
    st = ONNX_TO_NUMPY[stash_type]
    y = _group_norm(X, num_groups, epsilon, st).reshape(X.shape)
    y = y * _channel(scale.astype(st), X.ndim) + _channel(bias.astype(st), X.ndim)
    return (y.astype(X.dtype, copy=False),)


@kernel("LRN", types=FLOATS)
def lrn(X, *, alpha=1e-4, beta=0.75, bias=1.0, size):
    x = widen(X)
    c = x.shape[1]
    # Sum of squares over channels [c - floor((size-1)/2), c + ceil((size-1)/2)].
    lo = (size - 1) // 2
    sq = np.pad(x * x, [(0, 0), (lo, size - 1 - lo)] + [(0, 0)] * (x.ndim - 2))
    total = sum(sq[:, i:i + c] for i in range(size))
    y = x / (x.dtype.type(bias) + x.dtype.type(alpha / size) * total) ** x.dtype.type(beta)
    return (y.astype(X.dtype, copy=False),)


# --- RMS and skip normalizations ----------------------------------------------------------

F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)
F64 = np.dtype(np.float64)
FLOAT_TYPES = frozenset([F16, F32, F64])


def _rms(x, axes, eps):
    """sqrt(mean(x^2) + eps) over `axes`, keeping dims."""
    return np.sqrt(np.mean(np.square(x), axis=axes, keepdims=True) + x.dtype.type(eps))


def _check_rms_stash(node, graph):
    st = node.attrs.get("stash_type", 1)
    if st not in (1, 11):
        return f"stash_type={st} not supported (1 float32 or 11 float64)"
    return None


@kernel("SimplifiedLayerNormalization", types=FLOAT_TYPES, check=_check_rms_stash)
def simplified_layer_normalization(X, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    axis = normalized_axis(X, axis, scale)
    cols = int(np.prod(X.shape[axis:]))
    if X.dtype == F32 and scale.dtype == F32 and scale.size == cols and X.size and native.has_rms_norm():
        y, inv = native.skip_rms_norm(X, None, None, scale, epsilon, cols)
        return y, inv.reshape(X.shape[:axis] + (1,) * (X.ndim - axis))
    ct = np.promote_types(ONNX_TO_NUMPY[stash_type], X.dtype)  # float16 computes in float32
    x = X.astype(ct)
    rms = _rms(x, tuple(range(axis, X.ndim)), epsilon)
    y = x / rms * scale.astype(ct)
    return y.astype(scale.dtype, copy=False), (1 / rms).astype(ONNX_TO_NUMPY[stash_type], copy=False)


@kernel("RMSNormalization", since=23, types=FLOAT_TYPES, check=_check_rms_stash)
def rms_normalization(X, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    axis = normalized_axis(X, axis, scale)
    cols = int(np.prod(X.shape[axis:]))
    if X.dtype == F32 and scale.dtype == F32 and scale.size == cols and X.size and native.has_rms_norm():
        y, _ = native.skip_rms_norm(X, None, None, scale, epsilon, cols)
        return (y,)
    ct = np.promote_types(ONNX_TO_NUMPY[stash_type], X.dtype)
    x = X.astype(ct)
    y = x / _rms(x, tuple(range(axis, X.ndim)), epsilon) * scale.astype(ct)
    return (y.astype(X.dtype, copy=False),)


def _check_skip(node, graph):
    x = graph.value(node.inputs[0])
    if x.dtype not in (F32, F16):
        return f"dtype {x.dtype} not supported (float32, float16)"
    return None


def _check_skip_shapes(input, skip, **vectors) -> None:
    """Stock's checks: input (B, S, H) or (S, H); skip as input, or (1, S, H) / (S, H); gamma, beta, bias (H,)."""
    if input.ndim not in (2, 3):
        raise InvalidArgument(f"input is expected to have 3 or 2 dimensions, got {input.ndim}")
    if skip.shape != input.shape and (skip.ndim < 2 or skip.shape[-2:] != input.shape[-2:] or
                                      (skip.ndim == 3 and skip.shape[0] != 1) or skip.ndim > 3):
        raise InvalidArgument(f"last two dimensions of skip needs to be same as input: skip {skip.shape}, input "
                              f"{input.shape}")
    for name, v in vectors.items():
        if v is not None and (v.ndim != 1 or v.shape[0] != input.shape[-1]):
            raise InvalidArgument(f"{name} is expected to have 1 dimension of the input's hidden size "
                                  f"{input.shape[-1]}, got {v.shape}")


def _skip_sum(input, skip, bias, ct):
    s = input.astype(ct) + skip.astype(ct)  # skip broadcasts: (B, S, H), (1, S, H) or (S, H)
    if bias is not None:
        s = s + bias.astype(ct)
    return s


@kernel("SkipSimplifiedLayerNormalization", domain="com.microsoft", check=_check_skip)
def skip_simplified_layer_normalization(input, skip, gamma, bias=None, *, epsilon=1e-12):
    _check_skip_shapes(input, skip, gamma=gamma, bias=bias)
    hidden = input.shape[-1]
    if (input.dtype == F32 and native.has_rms_norm() and input.size and skip.dtype == F32 and skip.shape[-1] == hidden
            and input.size % skip.size == 0 and gamma.size == hidden and (bias is None or bias.size == hidden)):
        y, inv, s = native.skip_rms_norm(input, skip, bias, gamma, epsilon, hidden, want_sum=True)
        lead = input.shape[:-1] + (1,)
        return y, np.zeros(lead, F32), inv.reshape(lead), s
    s = _skip_sum(input, skip, bias, np.float32)
    rms = _rms(s, (-1,), epsilon)
    y = s / rms * gamma.astype(np.float32)
    return (y.astype(input.dtype), np.zeros(rms.shape, F32), (1 / rms).astype(F32), s.astype(input.dtype))


@kernel("SkipLayerNormalization", domain="com.microsoft", check=_check_skip)
def skip_layer_normalization(input, skip, gamma, beta=None, bias=None, *, epsilon=1e-12):
    _check_skip_shapes(input, skip, gamma=gamma, beta=beta, bias=bias)
    s = _skip_sum(input, skip, bias, np.float32)
    hidden = s.shape[-1]
    mean = s.sum(axis=-1, keepdims=True) / np.float32(hidden)
    var = np.square(s).sum(axis=-1, keepdims=True) / np.float32(hidden) - mean * mean
    std = np.sqrt(var + np.float32(epsilon))
    y = (s - mean) / std * gamma.astype(np.float32)
    if beta is not None:
        y = y + beta.astype(np.float32)
    return (y.astype(input.dtype), mean.astype(F32), (1 / std).astype(F32), s.astype(input.dtype))


GATED_RMS_ACTIVATIONS = {"silu": 1, "swish": 1, "sigmoid": 0}  # 1: z * sigmoid(z) (native/cpu/program.h)


def _check_gated_rms(node, graph):
    act = node.attrs.get("activation", "silu")
    if act not in GATED_RMS_ACTIVATIONS:
        return f"activation={act!r} (stock refuses the model: silu, swish or sigmoid)"
    return None


def gated_rms_rows(shape, gate_shape, scale_size: int) -> int:
    """The rows of scale_size a GatedRMSNorm normalizes, or stock's failure."""
    if len(shape) < 1:
        raise ValueError("X must have rank >= 1")
    if tuple(gate_shape) != tuple(shape):
        raise ValueError("gate must have the same shape as X")
    if scale_size <= 0:
        raise ValueError("scale must not be empty")
    if shape[-1] % scale_size:
        raise ValueError(f"X last dimension ({shape[-1]}) must be a multiple of the scale length ({scale_size})")
    return int(np.prod(shape)) // scale_size


@kernel("GatedRMSNorm", domain="com.microsoft", types=frozenset(map(np.dtype, (np.float16, np.float32))),
        check=_check_gated_rms)
@np.errstate(over="ignore")
def gated_rms_norm(X, scale, gate, *, activation="silu", epsilon=1e-5):
    """Y = X / sqrt(mean(X^2) + epsilon) * scale * act(gate) over each group of len(scale) trailing elements,
    float32 inside (act: silu z * sigmoid(z) or sigmoid)."""
    c = scale.size
    rows = gated_rms_rows(X.shape, gate.shape, c)
    x = X.astype(np.float32).reshape(rows, c)
    z = gate.astype(np.float32).reshape(rows, c)
    inv = np.float32(1) / np.sqrt(np.einsum("rc,rc->r", x, x)[:, None] / np.float32(c) + np.float32(epsilon))
    sig = np.float32(1) / (np.float32(1) + np.exp(-z))
    y = x * inv * scale.astype(np.float32).reshape(c) * (z * sig if GATED_RMS_ACTIVATIONS[activation] else sig)
    return (y.reshape(X.shape).astype(X.dtype),)
