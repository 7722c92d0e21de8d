"""Native contrib kernels (native/cpu/quant.c, attention.c, rmsnorm.c) behind numpy-shaped functions.

Native kernels split their work into tasks for ORT's intra-op thread pool when they run inside
the EP's Compute (runtime/parallel.py), and run serially when called directly.
"""
from __future__ import annotations

import numpy as np

from .. import _native_cpu_module

ffi, lib = _native_cpu_module()
F32 = np.dtype(np.float32)
U8 = np.dtype(np.uint8)
_NULL = ffi.NULL

try:
    from ...runtime import parallel as _parallel
except ImportError:  # a build without the thread-pool bridge: serial
    _parallel = None


def _pool():
    """(parallel_for, context) as void pointers: ORT's intra-op pool inside a Compute, else NULLs."""
    if _parallel is None:
        return _NULL, _NULL
    fn, ctx = _parallel.current()
    return ffi.cast("void*", fn), ffi.cast("void*", ctx)


def _f32(a):
    """A C-contiguous float32 array (a view when it already is one)."""
    return a if a.dtype is F32 and a.flags.c_contiguous else np.ascontiguousarray(a, dtype=F32)


def _fp(a):
    return ffi.cast("float*", ffi.from_buffer(a))


def _optional_fp(a):
    return _NULL if a is None else _fp(a)


# --- MatMulNBits ------------------------------------------------------------------------------

_HAS_MNB = hasattr(lib, "seamless_matmul_nbits_f32")


def matmul_nbits_supported(bits, zero_points) -> bool:
    return _HAS_MNB and bits in (4, 8) and (zero_points is None or zero_points.dtype in (U8, F32))


def matmul_nbits(a2d, B, scales, zero_points, bias, bits, block_size, K, N, int8: bool) -> np.ndarray:
    # every array handed to C is held in a local until the call returns
    a2d = _f32(a2d)
    m = a2d.shape[0]
    y = np.empty((m, N), F32)
    b = B if B.flags.c_contiguous else np.ascontiguousarray(B)
    scales = _f32(scales)
    zp = None if zero_points is None else (np.ascontiguousarray(zero_points) if zero_points.dtype == U8
                                           else _f32(zero_points))
    zp_u8 = ffi.from_buffer("uint8_t[]", zp) if zp is not None and zp.dtype == U8 else _NULL
    zp_f32 = _fp(zp) if zp is not None and zp.dtype == F32 else _NULL
    bias = None if bias is None else _f32(bias)
    rc = lib.seamless_matmul_nbits_f32(_fp(a2d), m, K, ffi.from_buffer("uint8_t[]", b), _fp(scales),
                                       zp_u8, zp_f32, _optional_fp(bias), _fp(y), N, bits, block_size, int(int8),
                                       *_pool())
    if rc:
        raise (MemoryError if rc == 2 else ValueError)(f"MatMulNBits native kernel failed (code {rc})")
    return y


# --- RMS normalization ------------------------------------------------------------------------


def has_rms_norm() -> bool:
    return False


# --- GroupQueryAttention ----------------------------------------------------------------------


def has_gqa() -> bool:
    return False
