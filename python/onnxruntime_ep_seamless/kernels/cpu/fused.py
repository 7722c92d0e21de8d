"""Kernels of the nodes plan/fusion.py creates (never seen in a model; same math as the pattern)."""
import numpy as np

from ...plan.fusion import FUSED_DOMAIN
from ..registry import kernel


@kernel("MatMulBias", domain=FUSED_DOMAIN)
def matmul_bias(a, w, bias):
    from .matmul import _sgemm
    return (_sgemm(a, w, bias=np.ascontiguousarray(bias)),)


@kernel("GeluErf", domain=FUSED_DOMAIN)
def gelu_erf(x):
    from .native import gelu
    return (gelu(x),)
