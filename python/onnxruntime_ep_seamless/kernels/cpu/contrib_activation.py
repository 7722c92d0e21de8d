"""ORT's GELU-family activations (com.microsoft): FastGelu, QuickGelu, BiasGelu.

float16 is computed in float32 and rounded once, as ORT does.
"""
from __future__ import annotations

import numpy as np

from ..checks import InvalidArgument
from ..registry import kernel
from . import contrib_native, native

F32 = np.dtype(np.float32)
FLOATS = frozenset(map(np.dtype, (np.float16, np.float32)))


def _f32(x):
    return x.astype(F32, copy=False)


def _check_bias(x, bias) -> None:
    """A bias vector over x's last axis (stock's check)."""
    if bias is not None and (bias.ndim != 1 or x.ndim == 0 or bias.shape[0] != x.shape[-1]):
        raise InvalidArgument("Input 1 dimension 0 should have same length as the last dimension of input 0: "
                              f"{bias.shape} and {x.shape}")


@kernel("FastGelu", domain="com.microsoft", types=FLOATS)
def fast_gelu(X, bias=None):
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), with an optional bias added to x first."""
    _check_bias(X, bias)
    x = _f32(X) if bias is None else _f32(X) + _f32(bias)
    inner = x * (np.float32(0.035677408136300125) * x * x + np.float32(0.7978845608028654))
    y = np.float32(0.5) * x * (np.tanh(inner) + np.float32(1))
    return (y.astype(X.dtype, copy=False),)


@kernel("QuickGelu", domain="com.microsoft", types=FLOATS)
def quick_gelu(X, *, alpha=1.702):
    """x * sigmoid(alpha * x)."""
    if X.dtype == F32 and contrib_native.HAS_QUICK_GELU and X.size:
        return (contrib_native.quick_gelu(X, alpha),)
    x = _f32(X)
    z = x * np.float32(alpha)
    e = np.exp(-np.abs(z))  # never overflows: sigmoid(z) = 1 / (1 + e) for z >= 0, e / (1 + e) below
    y = x * np.where(z >= 0, np.float32(1), e) / (np.float32(1) + e)
    return (y.astype(X.dtype, copy=False),)


@kernel("BiasGelu", domain="com.microsoft", types=FLOATS)
def bias_gelu(A, B):
    """gelu(A + B) with the exact erf form: 0.5 x (1 + erf(x / sqrt(2)))."""
    _check_bias(A, B)
    x = _f32(A) + _f32(B)
    y = np.float32(0.5) * x * (native.erf(x * np.float32(0.7071067811865476)) + np.float32(1))
    return (y.astype(A.dtype, copy=False),)
