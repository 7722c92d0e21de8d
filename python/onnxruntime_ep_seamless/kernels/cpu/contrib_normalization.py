"""RMS and skip normalizations: ORT's SimplifiedLayerNormalization (default domain),
com.microsoft SkipSimplifiedLayerNormalization / SkipLayerNormalization, ONNX RMSNormalization-23.

ORT's CPU kernels accumulate sum(x) and sum(x^2) in float32 and divide by the root
(y = x / rms * scale); we do the same division, so results agree to float rounding.
"""
from __future__ import annotations

import numpy as np

from ..checks import InvalidArgument
from ..registry import kernel
from ...graph.ir import ONNX_TO_NUMPY
from . import contrib_native as native
from .nn import normalized_axis

F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)
F64 = np.dtype(np.float64)
FLOAT_TYPES = frozenset([F16, F32, F64])


def _rms(x, axes, eps):
    """sqrt(mean(x^2) + eps) over `axes`, keeping dims."""
    return np.sqrt(np.mean(np.square(x), axis=axes, keepdims=True) + x.dtype.type(eps))


def _check_stash(node, graph):
    st = node.attrs.get("stash_type", 1)
    if st not in (1, 11):
        return f"stash_type={st} not supported (1 float32 or 11 float64)"
    return None


@kernel("SimplifiedLayerNormalization", types=FLOAT_TYPES, check=_check_stash)
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


@kernel("RMSNormalization", since=23, types=FLOAT_TYPES, check=_check_stash)
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
