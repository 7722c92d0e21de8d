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
