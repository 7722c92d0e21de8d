"""Native contrib kernels (native/cpu/quant.c, attention.c, rmsnorm.c) behind numpy-shaped functions.

Native kernels split their work into tasks for ORT's intra-op thread pool when they run inside
the EP's Compute (runtime/parallel.py), and run serially when called directly.
"""
from __future__ import annotations

import weakref

import numpy as np

from .. import _native_cpu_module

ffi, lib = _native_cpu_module()
F32 = np.dtype(np.float32)
U8 = np.dtype(np.uint8)
_NULL = ffi.NULL

from .native import _pool  # ORT's intra-op pool inside a Compute, serial otherwise


def _f32(a):
    """A C-contiguous float32 array (a view when it already is one)."""
    return a if a.dtype is F32 and a.flags.c_contiguous else np.ascontiguousarray(a, dtype=F32)


def _fp(a):
    if a.dtype != F32:  # the C kernels read float32 elements: any other size would be out of bounds
        raise TypeError(f"native kernel: float32 expected, got {a.dtype}")
    return ffi.cast("float*", ffi.from_buffer(a))


def _optional_fp(a):
    return _NULL if a is None else _fp(a)


# --- MatMulNBits ------------------------------------------------------------------------------

HAS_MATMUL_NBITS = hasattr(lib, "seamless_matmul_nbits_f32")  # 4- and 8-bit weights


class _Weights:
    """Raw pointers to a MatMulNBits node's weight-side inputs (B, scales, zero points, bias),
    resolved once per set of arrays. Holds weak references only: the plan owns the arrays."""
    __slots__ = ("refs", "args")

    def __init__(self, arrays, args):
        self.refs = [weakref.ref(a) if a is not None else None for a in arrays]
        self.args = args

    def valid(self, arrays) -> bool:
        return all((r is None and a is None) or (r is not None and r() is a) for r, a in zip(self.refs, arrays))


_WEIGHTS: dict = {}


def _address(a, ctype):
    return ffi.cast(ctype, a.__array_interface__["data"][0])


def check_nbits_weights(B, scales, zero_points, bias, bits, block_size, K, N):
    """Sizes the kernel will read (a wrong shape must be an error, never an out-of-bounds read)."""
    nb = -(-K // block_size)
    want = {"B": (B, N * nb * block_size * bits // 8), "scales": (scales, N * nb),
            "zero_points": (zero_points, N * (-(-nb * bits // 8)) if zero_points is not None and
                            zero_points.dtype == U8 else N * nb),
            "bias": (bias, N)}
    for name, (a, size) in want.items():
        if a is not None and a.size != size:
            raise ValueError(f"MatMulNBits: {name} has {a.size} elements, expected {size} (K={K}, N={N}, "
                             f"bits={bits}, block_size={block_size})")


def _weights(B, scales, zero_points, bias, bits, block_size, K, N):
    arrays = (B, scales, zero_points, bias)
    key = (*map(id, arrays), bits, block_size, K, N)
    w = _WEIGHTS.get(key)
    if w is not None and w.valid(arrays):
        return w.args
    check_nbits_weights(B, scales, zero_points, bias, bits, block_size, K, N)
    fixed = [B if B.flags.c_contiguous else np.ascontiguousarray(B), _f32(scales),
             None if zero_points is None else (np.ascontiguousarray(zero_points) if zero_points.dtype == U8
                                               else _f32(zero_points)),
             None if bias is None else _f32(bias)]
    zp = fixed[2]
    args = (_address(fixed[0], "uint8_t*"), _address(fixed[1], "float*"),
            _address(zp, "uint8_t*") if zp is not None and zp.dtype == U8 else _NULL,
            _address(zp, "float*") if zp is not None and zp.dtype == F32 else _NULL,
            _NULL if fixed[3] is None else _address(fixed[3], "float*"))
    if any(f is not a for f, a in zip(fixed, arrays)):
        return args + (fixed,)  # converted copies: not cacheable, the caller keeps them alive
    if len(_WEIGHTS) > 4096:
        _WEIGHTS.clear()
    _WEIGHTS[key] = _Weights(arrays, args)
    return args


def matmul_nbits(a2d, B, scales, zero_points, bias, bits, block_size, K, N, int8: bool) -> np.ndarray:
    a2d = _f32(a2d)
    m = a2d.shape[0]
    if a2d.ndim != 2 or a2d.shape[1] != K:
        raise ValueError(f"MatMul dimension mismatch: A {a2d.shape}, K={K}")
    y = np.empty((m, N), F32)
    w = _weights(B, scales, zero_points, bias, bits, block_size, K, N)  # pointers[, arrays to keep alive]
    rc = lib.seamless_matmul_nbits_f32(ffi.from_buffer("float[]", a2d), m, K, w[0], w[1], w[2], w[3], w[4],
                                       ffi.from_buffer("float[]", y), N, bits, block_size, int8, *_pool())
    if rc:
        raise (MemoryError if rc == 2 else ValueError)(f"MatMulNBits native kernel failed (code {rc})")
    return y


HAS_GATHER_BLOCK_QUANTIZED = hasattr(lib, "seamless_gather_block_quantized_f32")


def gather_block_quantized(data, indices, scales, zero_points, bits, block_size) -> np.ndarray:
    """Rows of a 2-D uint8 table quantized along its rows (gather_axis 0, quantize_axis 1)."""
    rows = data.shape[0]
    cols = data.shape[1] * (8 // bits)
    nb = -(-cols // block_size)  # the C kernel's block count: a partial last block has a scale too
    if scales.size != rows * nb or (zero_points is not None and zero_points.size != rows * (-(-nb * bits // 8))):
        raise ValueError(f"GatherBlockQuantized: scales {scales.shape} / zero points do not match data {data.shape}")
    idx = np.ascontiguousarray(indices, dtype=np.int64)
    out = np.empty((*idx.shape, cols), F32)
    data = np.ascontiguousarray(data)
    scales = _f32(scales)
    zp = None if zero_points is None else np.ascontiguousarray(zero_points)
    lib.seamless_gather_block_quantized_f32(ffi.from_buffer("uint8_t[]", data), rows, cols,
                                            ffi.from_buffer("int64_t[]", idx), idx.size, _fp(scales),
                                            _NULL if zp is None else ffi.from_buffer("uint8_t[]", zp), bits,
                                            block_size, _fp(out))
    return out


HAS_QUICK_GELU = hasattr(lib, "seamless_quick_gelu_f32")


def quick_gelu(x, alpha: float) -> np.ndarray:
    x = _f32(x)
    y = np.empty(x.shape, F32)
    lib.seamless_quick_gelu_f32(_fp(x), _fp(y), x.size, float(alpha), *_pool())
    return y


# --- RMS normalization ------------------------------------------------------------------------


_HAS_RMS = hasattr(lib, "seamless_skip_rmsnorm_f32")


def has_rms_norm() -> bool:
    return _HAS_RMS


def skip_rms_norm(x, skip, bias, gamma, eps, cols, want_sum=False):
    """RMS norm over the trailing `cols` elements of float32 x (after adding skip and bias):
    returns (y, inv_rms per row) or, with want_sum, (y, inv_rms, x + skip + bias)."""
    x = _f32(x)
    rows = x.size // cols
    y = np.empty(x.shape, F32)
    inv = np.empty(rows, F32)
    s = np.empty(x.shape, F32) if want_sum else None
    skip = None if skip is None else _f32(skip)
    bias = None if bias is None else _f32(bias)
    # the extents the C kernel reads: whole rows of x and skip (skip broadcast over x's rows), one gamma/bias row
    if (cols <= 0 or x.size % cols or gamma.size != cols or (bias is not None and bias.size != cols) or
            (skip is not None and (skip.size == 0 or skip.size % cols or x.size % skip.size))):
        raise ValueError(f"RMS norm over {cols}: x {x.shape}, skip {None if skip is None else skip.shape}, gamma "
                         f"{gamma.shape}, bias {None if bias is None else bias.shape} do not fit")
    gamma = _f32(gamma)
    lib.seamless_skip_rmsnorm_f32(_fp(x), _optional_fp(skip), 0 if skip is None else skip.size // cols,
                                  _optional_fp(bias), _fp(gamma), _fp(y), _optional_fp(s), _fp(inv), rows, cols,
                                  float(eps), *_pool())
    return (y, inv, s) if want_sum else (y, inv)


# --- GroupQueryAttention ----------------------------------------------------------------------

_HAS_GQA = hasattr(lib, "seamless_gqa_f32")
I32 = np.dtype(np.int32)


def has_gqa() -> bool:
    return _HAS_GQA


def gqa(query, key, value, past_key, past_value, seqlens_k, first_prompt, present_len, num_heads, kv_num_heads, h,
        scale, softcap, window, causal, sink, cos_cache, sin_cache, interleaved):
    """Native GroupQueryAttention. query: (B, S, N*H), or packed (B, S, (N + 2 Nkv) H) with key None;
    cos_cache None: no rotary (positions follow GQA's rule, computed in C).
    Returns (output, present_key, present_value)."""
    query = _f32(query)
    b, s = query.shape[:2]
    if key is None:
        if query.shape[2] < (num_heads + 2 * kv_num_heads) * h:
            raise ValueError(f"GroupQueryAttention: packed QKV width {query.shape[2]} too small")
        q_row = k_row = v_row = query.shape[2]
        base = ffi.from_buffer("float[]", query)
        qp, kp, vp = base, base + num_heads * h, base + (num_heads + kv_num_heads) * h
    else:
        key, value = _f32(key), _f32(value)
        if key.shape[:2] != (b, s) or value.shape[:2] != (b, s) or min(key.shape[2], value.shape[2]) < kv_num_heads * h:
            raise ValueError(f"GroupQueryAttention: key {key.shape} / value {value.shape} do not match query "
                             f"{query.shape} with {kv_num_heads} KV heads of size {h}")
        q_row, k_row, v_row = query.shape[2], key.shape[2], value.shape[2]
        qp, kp, vp = _fp(query), _fp(key), _fp(value)
    past_len = 0
    pk = pv = _NULL
    if past_key is not None:
        past_key, past_value = _f32(past_key), _f32(past_value)
        past_len = past_key.shape[2]
        want = (b, kv_num_heads, past_len, h)
        if past_key.shape != want or past_value.shape != want:
            raise ValueError(f"GroupQueryAttention: past_key {past_key.shape} / past_value {past_value.shape}, "
                             f"expected {want}")
        pk, pv = _fp(past_key), _fp(past_value)
    out = np.empty((b, s, num_heads * h), F32)
    present_k = np.empty((b, kv_num_heads, present_len, h), F32)
    present_v = np.empty((b, kv_num_heads, present_len, h), F32)
    seqlens = seqlens_k if seqlens_k.dtype == I32 and seqlens_k.flags.c_contiguous else \
        np.ascontiguousarray(seqlens_k, dtype=I32)
    cos = sin = _NULL
    half = 0
    if cos_cache is not None:
        cos_cache, sin_cache = _f32(cos_cache), _f32(sin_cache)
        if cos_cache.ndim != 2 or sin_cache.shape != cos_cache.shape:
            raise ValueError(f"GroupQueryAttention: cos_cache {cos_cache.shape} / sin_cache {sin_cache.shape}")
        cos, sin = _fp(cos_cache), _fp(sin_cache)
        half = cos_cache.shape[1]
    sink = None if sink is None else _f32(sink)
    rc = lib.seamless_gqa_f32(qp, kp, vp, q_row, k_row, v_row, pk, pv, past_len, _fp(present_k), _fp(present_v),
                              present_len, _fp(out), ffi.from_buffer("int32_t[]", seqlens), int(first_prompt), b, s,
                              num_heads, kv_num_heads, h, cos, sin, half, int(interleaved), _NULL, scale,
                              float(softcap), int(window), int(causal), _optional_fp(sink), *_pool())
    if rc:
        raise (MemoryError if rc == 2 else ValueError)(f"GroupQueryAttention native kernel failed (code {rc}: "
                                                       f"{'out of memory' if rc == 2 else 'seqlens_k out of range'})")
    return out, present_k, present_v
