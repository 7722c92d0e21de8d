"""Kernels of the nodes plan/fusion.py creates (never seen in a model; same math as the pattern)."""
import numpy as np

from ..registry import FUSED_DOMAIN, kernel
from .elementwise import _via_float32
from .matmul import _sgemm, check_inner_dims


@kernel("MatMulBias", domain=FUSED_DOMAIN)
@_via_float32
def matmul_bias(a, w, bias):
    # float16: the product and the bias added in float32, rounded once (ORT's fused Gemm)
    check_inner_dims(a, w)
    return (_sgemm(a, w, bias=np.ascontiguousarray(bias)),)


@kernel("GeluErf", domain=FUSED_DOMAIN)
def gelu_erf(x):
    from .native import gelu
    return (gelu(x),)
