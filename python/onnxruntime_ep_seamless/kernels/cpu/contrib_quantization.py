"""ORT's block-quantized weight ops (com.microsoft): MatMulNBits, GatherBlockQuantized.

Semantics follow ORT's docs/ContribOperators.md; numerics follow ORT's CPU EP (MLAS):
- MatMulNBits with accuracy_level 4, uint8 (or default) zero points and constant weights
  (which ORT prepacks) runs MLAS's "CompInt8" path: each row of A is quantized to int8 per block of `block_size` along K
  (scale = max|a| / 127, q = round-half-even(a * 127 / max|a|)), the block dot products are
  exact integers, and each is scaled by scale_a * scale_b. We compute exactly that, so our
  result differs from stock ORT only by float summation order (~1e-7 relative), where a float
  dequantization would differ by the int8 rounding of A (~1e-3 relative).
- Every other configuration (accuracy_level 0-3, float zero points, weights fed as graph
  inputs) is "CompFp32": weights
  dequantized to float32, (q - zero_point) * scale, then an ordinary float GEMM.

float32 A only; the native kernels (native/cpu/quant.c) cover 4- and 8-bit weights, a numpy
path covers the rest (2-bit, odd shapes) with the same arithmetic.
"""
from __future__ import annotations

import numpy as np

from ..registry import kernel
from . import contrib_native as native

F32 = np.dtype(np.float32)


# --- MatMulNBits ------------------------------------------------------------------------------


def _check_matmul_nbits(node, graph):
    bits = node.attrs.get("bits", 4)
    bs = node.attrs.get("block_size")
    K, N = node.attrs.get("K"), node.attrs.get("N")
    if bits not in (2, 4, 8):
        return f"bits={bits} not supported (2, 4 or 8)"
    if bs is None or bs < 16 or bs & (bs - 1):
        return f"block_size={bs} must be a power of two >= 16"
    if K is None or N is None:
        return "attributes K and N are required"
    if node.attrs.get("weight_prepacked", 0):
        return f"weight_prepacked={node.attrs['weight_prepacked']} (an EP-specific CUDA layout) not supported"
    a = graph.value(node.inputs[0]).dtype
    if a is not None and a != F32:
        return f"A of dtype {a} not supported (float32 only)"
    inputs = node.inputs + [""] * (6 - len(node.inputs))
    if inputs[4]:
        return "g_idx (deprecated input) not supported"
    zp = graph.value(inputs[3]).dtype if inputs[3] else None
    if zp is not None and zp not in (np.dtype(np.uint8), F32):
        return f"zero_points of dtype {zp} not supported (uint8 or float32)"
    if node.attrs.get("accuracy_level", 0) == 4 and not all(_is_constant(graph, n) for n in inputs[1:4] if n):
        # Stock ORT quantizes A to int8 only for weights it could prepack (constant initializers);
        # otherwise it dequantizes to float32. Record the compute type ORT will really use.
        node.attrs["accuracy_level"] = 0
    return None


def _is_constant(graph, name: str) -> bool:
    return name in graph.initializers or graph.value(name).const is not None


def _unpack(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """Low-bits-first unpacking along the last axis: [..., n] uint8 -> [..., count] uint8."""
    if bits == 8:
        return packed[..., :count]
    per = 8 // bits
    mask = (1 << bits) - 1
    parts = [(packed >> (bits * i)) & mask for i in range(per)]
    return np.stack(parts, axis=-1).reshape(*packed.shape[:-1], -1)[..., :count]


def _zero_points(zero_points, bits: int, N: int, nb: int) -> np.ndarray | None:
    """Zero points as float32 [N, nb] (None: the default 2^(bits-1))."""
    if zero_points is None:
        return None
    if zero_points.dtype == np.uint8:
        return _unpack(zero_points.reshape(N, -1), bits, nb).astype(np.float32)
    return zero_points.reshape(N, nb).astype(np.float32)


def dequantize_nbits(B, scales, zero_points, bits, block_size, K, N) -> np.ndarray:
    """The float32 weight matrix [K, N] that MatMulNBits multiplies by."""
    nb = (K + block_size - 1) // block_size
    q = _unpack(B.reshape(N, nb, -1), bits, block_size).astype(np.float32)
    zp = _zero_points(zero_points, bits, N, nb)
    zp = np.float32(2 ** (bits - 1)) if zp is None else zp[..., None]
    w = (q - zp) * scales.reshape(N, nb, 1).astype(np.float32)
    return w.reshape(N, nb * block_size)[:, :K].T


def quantize_a_int8(a2d: np.ndarray, block_size: int, nb: int):
    """MLAS's int8 quantization of A (CompInt8): per block, scale = amax/127, q = rint(a * 127/amax)."""
    m, k = a2d.shape
    ap = np.zeros((m, nb * block_size), np.float32)
    ap[:, :k] = a2d
    ab = ap.reshape(m, nb, block_size)
    amax = np.abs(ab).max(axis=-1)
    scale = amax / np.float32(127)
    inv = np.divide(np.float32(127), amax, out=np.zeros_like(amax), where=amax != 0)
    qa = np.rint(ab * inv[..., None])
    return qa, scale


def _matmul_nbits_numpy(a2d, B, scales, zero_points, bits, block_size, K, N, int8: bool):
    if not int8:
        return a2d @ dequantize_nbits(B, scales, zero_points, bits, block_size, K, N)
    nb = (K + block_size - 1) // block_size
    qa, sa = quantize_a_int8(a2d, block_size, nb)
    qb = _unpack(B.reshape(N, nb, -1), bits, block_size).astype(np.float32)
    zp = _zero_points(zero_points, bits, N, nb)
    qb -= np.float32(2 ** (bits - 1)) if zp is None else zp[..., None]
    # integer block dot products, exact in float32 (|sum| <= 127 * 255 * 256 < 2^24)
    dots = np.einsum("mbk,nbk->mnb", qa, qb)
    return np.einsum("mnb,mb,nb->mn", dots, sa, scales.reshape(N, nb).astype(np.float32), dtype=np.float32)


def validate_nbits_weights(node, graph):
    """Constant weights whose sizes the attributes contradict: stock ORT refuses them when it pre-packs them at
    load (the CUDA kernel validates with this too)."""
    a = node.attrs
    const = [graph.value(n).const if n else None for n in (node.inputs + [""] * 6)[1:6]]
    B, scales, zero_points, bias = const[0], const[1], const[2], const[4]
    if B is not None and B.size and scales is not None:
        native.check_nbits_weights(B, scales, zero_points, bias, a.get("bits", 4), a["block_size"], a["K"], a["N"])


@kernel("MatMulNBits", domain="com.microsoft", check=_check_matmul_nbits, validate=validate_nbits_weights)
def matmul_nbits(A, B, scales, zero_points=None, g_idx=None, bias=None, *, K, N, bits=4, block_size,
                 accuracy_level=0, weight_prepacked=0):
    lead = A.shape[:-1]
    if B.size == 0:  # an omitted projection: zeros, or the broadcast bias
        y = np.zeros((*lead, N), np.float32)
        return (y + bias if bias is not None else y,)
    if A.shape[-1] != K:
        raise ValueError(f"A has {A.shape[-1]} columns, K={K}")
    # stock ORT's compute type: MLAS CompInt8 or CompFp32 (see the module docstring)
    int8 = accuracy_level == 4 and (zero_points is None or zero_points.dtype == np.uint8)
    if bits != 2 and native.HAS_MATMUL_NBITS:
        y = native.matmul_nbits(A.reshape(-1, K), B, scales, zero_points, bias, bits, block_size, K, N, int8)
        return (y.reshape(*lead, N),)
    a2d = A.reshape(-1, K)
    y = _matmul_nbits_numpy(a2d, B, scales, zero_points, bits, block_size, K, N, int8)
    if bias is not None:
        y = y + bias
    return (y.astype(np.float32, copy=False).reshape(*lead, N),)


# --- GatherBlockQuantized ---------------------------------------------------------------------


def _check_gather_block_quantized(node, graph):
    data = graph.value(node.inputs[0])
    bits = node.attrs.get("bits", 4)
    bs = node.attrs.get("block_size", 128)
    if data.dtype != np.uint8:
        return f"data of element type {data.type_name} not supported (uint8 only)"
    if bits not in (2, 4, 8):
        return f"bits={bits} not supported for uint8 data (2, 4 or 8)"
    if bs < 16 or bs & (bs - 1):
        return f"block_size={bs} must be a power of two >= 16"
    scales = graph.value(node.inputs[2]).dtype
    if scales is not None and scales != F32:
        return f"scales of dtype {scales} not supported (float32 only)"
    rank = len(data.shape) if data.shape is not None else None
    if rank is None:
        return "data of unknown rank"
    g = node.attrs.get("gather_axis", 0)
    q = node.attrs.get("quantize_axis", 1)
    g, q = g + rank if g < 0 else g, q + rank if q < 0 else q
    if g != 0:
        return f"gather_axis={g} not supported for uint8 data (must be 0)"
    if q != rank - 1:
        return f"quantize_axis={q} not supported for uint8 data (must be the last axis, as in ORT)"
    return None


@kernel("GatherBlockQuantized", domain="com.microsoft", check=_check_gather_block_quantized)
def gather_block_quantized(data, indices, scales, zero_points=None, *, bits=4, block_size=128, quantize_axis=1,
                           gather_axis=0):
    rank = data.ndim
    qaxis = quantize_axis + rank if quantize_axis < 0 else quantize_axis
    if rank == 2 and qaxis == 1 and native.HAS_GATHER_BLOCK_QUANTIZED and scales.dtype == F32 and \
            (data.shape[1] * (8 // bits)) % block_size == 0:
        return (native.gather_block_quantized(data, indices, scales, zero_points, bits, block_size),)
    per = 8 // bits
    shape = list(data.shape)
    shape[-1] *= per  # the logical (unpacked) shape
    rows = data.shape[0]
    idx = np.asarray(indices).astype(np.int64)
    idx = np.where(idx < 0, idx + rows, idx)
    valid = (idx >= 0) & (idx < rows)  # out-of-range indices produce zeros
    picked = data[np.where(valid, idx, 0)]                            # [*idx, ...packed]
    q = _unpack(picked, bits, shape[-1]).astype(np.float32) if bits < 8 else picked.astype(np.float32)
    sc = scales[np.where(valid, idx, 0)].astype(np.float32)
    if zero_points is not None:
        zp = zero_points[np.where(valid, idx, 0)]
        zp = _unpack(zp, bits, sc.shape[-1]) if bits < 8 and qaxis == rank - 1 else zp
        zp = zp.astype(np.float32)
    else:
        zp = np.float32(2 ** (bits - 1))
    # expand per-block parameters along the quantized axis (shifted by the gathered index dims)
    ax = idx.ndim + qaxis - 1
    n = q.shape[ax]

    def expand(p):
        if np.ndim(p) == 0:
            return p
        return np.repeat(p, block_size, axis=ax).take(np.arange(n), axis=ax)

    y = (q - expand(zp)) * expand(sc)
    y = np.where(valid.reshape(valid.shape + (1,) * (y.ndim - valid.ndim)), y, np.float32(0))
    return (y.astype(np.float32, copy=False),)
