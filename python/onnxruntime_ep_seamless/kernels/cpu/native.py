"""Native CPU kernels (native/cpu/*.c) behind numpy-shaped functions."""
import numpy as np

from .. import _native_cpu_module

ffi, lib = _native_cpu_module()

_ERF = {np.dtype(np.float32): ("float*", lib.seamless_erf_f32), np.dtype(np.float64): ("double*", lib.seamless_erf_f64)}


def erf(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype == np.float16:  # computed in float32 and rounded, as ORT does
        return erf(x.astype(np.float32)).astype(np.float16)
    ctype, fn = _ERF[x.dtype]
    x = np.ascontiguousarray(x)
    y = np.empty_like(x)
    fn(ffi.cast(ctype, ffi.from_buffer(x)), ffi.cast(ctype, ffi.from_buffer(y)), x.size)
    return y


def _ptr(a: np.ndarray):
    return ffi.cast("float*", ffi.from_buffer(a))


def softmax_last_axis(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis of a float32 array."""
    x = np.ascontiguousarray(x)
    y = np.empty_like(x)
    cols = x.shape[-1]
    lib.seamless_softmax_f32(_ptr(x), _ptr(y), x.size // cols, cols)
    return y


def layer_norm_trailing(x: np.ndarray, scale: np.ndarray, bias, cols: int, eps: float):
    """LayerNormalization over the trailing `cols` elements of float32 x; returns (y, mean, inv_std)."""
    x = np.ascontiguousarray(x)
    scale = np.ascontiguousarray(scale, dtype=np.float32)
    bias = None if bias is None else np.ascontiguousarray(bias, dtype=np.float32)
    rows = x.size // cols
    y = np.empty_like(x)
    mean, inv_std = np.empty(rows, np.float32), np.empty(rows, np.float32)
    lib.seamless_layernorm_f32(_ptr(x), _ptr(scale), ffi.NULL if bias is None else _ptr(bias), _ptr(y),
                               _ptr(mean), _ptr(inv_std), rows, cols, eps)
    return y, mean, inv_std
