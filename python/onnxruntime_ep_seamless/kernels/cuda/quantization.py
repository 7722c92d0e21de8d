"""Quantization ops on CUDA: 8-bit QuantizeLinear / DequantizeLinear (per tensor, per axis, blocked),
DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv, composed of our other kernels
(exact integer sums, requantized in float64 by native/cuda/quantization.cu); com.microsoft MatMulNBits (and
plan/fusion.py's SwiGLU of two, fused) and GatherBlockQuantized (native/cuda/quantization.cu). Semantics and
run-time checks are shared with the CPU kernels (kernels/cpu/quantization.py)."""
import math
import threading

import numpy as np

from ...graph.ir import ONNX_TO_NUMPY, Node
from ...runtime.cuda import DeviceTensor
from ...runtime.cuda_args import struct_arg, lib as codes
from .. import checks
from ..cpu.quantization import validate_nbits_weights
from ..registry import FUSED_DOMAIN, kernel
from .elementwise import (ADD, CLIP, DIV, EQUAL, GPU_FLOATS, MAX, MIN, MUL, SUB, SUFFIX, UNARY, Scratch, binary, cast_to,
                          compare, device_scalar, unary, where)
from .matmul import SMALL_ROWS, after_norm, gemm_into, matmul, swiglu_of_product
from .reduction import MAX_OF, MIN_OF, reduce
from .shape import broadcast_to
from .spatial import check_spatial, conv

F32, F64, I32, U8 = (np.dtype(t) for t in (np.float32, np.float64, np.int32, np.uint8))

INT8S = frozenset(map(np.dtype, (np.int8, np.uint8)))
ROUND = UNARY["Round"][0]  # halves to even, as the spec


GEMV_WARPS = 4096  # column_split's `enough` for the 4-bit GEMV
# float16 batch rows on tensor cores (matmul_nbits4_mma_rows) from this many: on the H200 it was faster than the
# CUDA-core rows kernel at 4 and 16 rows on both the 0.5B and 1B widths, slower at 2 on the 0.5B's
# (docs/benchmarks/gpu.md, session 47)
MMA_ROWS_FROM = 4


# quantization.cu's one-matrix x32 kernel at its 44 registers: 5 blocks of 256 threads an SM; a grid of more blocks
# than 5 a wave but at most 6 takes its x32_r40 form (40 registers, 6 blocks an SM: one wave, not two)
X32_BLOCKS_AN_SM = 5


def x32_kernel(rt, blocks):
    """The one-matrix x32 kernel for a grid of `blocks` (quantization.cu x32_r40: measured on an H100, session 56)."""
    sms = rt.multiprocessors
    return "seamless_matmul_nbits4_x32_r40" if X32_BLOCKS_AN_SM * sms < blocks <= (X32_BLOCKS_AN_SM + 1) * sms \
        else "seamless_matmul_nbits4_x32"


def column_split(n, passes, enough):
    """Warps sharing each of n output columns in quantization.cu's 4-bit GEMV: a power of 2 up to 8, each warp left
    at least one of the `passes` a lone warp would make over K, and no more once n * split reaches `enough` warps -
    beyond that, smaller blocks only queue (measured on the H200: a 151936-column lm_head ran 2x faster with 1 warp
    a column than with 4; the 1B shape's 2048-column products 4 % faster a step with 2 than with 1, the 0.5B's
    896-column down projection (5 passes) slower with 8 than with 4; docs/benchmarks/gpu.md)."""
    split = 1
    while split < 8 and 2 * split <= passes and n * split < enough:
        split *= 2
    return split


def _broadcastable(rt, stream, s, value, shape, axis, block_size):
    """A scale or zero point (on the GPU) shaped to broadcast against x: a scalar, a vector along `axis`, or
    with block_size a tensor of x's shape whose `axis` is in blocks, each value repeated over its block."""
    value = s(rt.device(value, stream))
    if len(value.shape) == 0 or value.size == 1 and not block_size:
        return DeviceTensor(value.ptr, (), value.dtype)
    axis = checks.axis(axis, len(shape))
    if not block_size:
        return DeviceTensor(value.ptr, tuple(value.size if d == axis else 1 for d in range(len(shape))), value.dtype)
    if len(value.shape) != len(shape) or any(v != x for d, (v, x) in enumerate(zip(value.shape, shape)) if d != axis) \
            or value.shape[axis] != -(-shape[axis] // block_size):
        raise ValueError(f"blocked quantization parameters of shape {value.shape} for x {shape}, block_size "
                         f"{block_size}: x's shape with {-(-shape[axis] // block_size)} blocks along axis {axis} "
                         "expected")
    blocks = value.shape[axis]
    outer, inner = math.prod(value.shape[:axis]), math.prod(value.shape[axis + 1:])
    repeated = s(rt.alloc((outer, blocks, block_size, inner), value.dtype))  # each value over its block
    rt.strided_copy(stream, value, repeated, repeated.shape, (blocks * inner, inner, 0, 1),
                    (blocks * block_size * inner, block_size * inner, inner, 1))
    y = s(rt.alloc(tuple(shape[axis] if d == axis else value.shape[d] for d in range(len(shape))), value.dtype))
    rt.strided_copy(stream, repeated, y, (outer, shape[axis], inner), (blocks * block_size * inner, inner, 1),
                    (shape[axis] * inner, inner, 1))
    return y


def _check_quantize(node, graph):
    if node.attrs.get("precision", 0) not in (0, 1):
        return f"precision={node.attrs['precision']} not supported (float32 arithmetic only)"
    out = graph.value(node.outputs[0]).dtype
    return None if out in INT8S else f"quantizing to {out} on CUDA (int8 and uint8 are)"


@kernel("QuantizeLinear", since=10, types=GPU_FLOATS, device="cuda", check=_check_quantize)
def quantize_linear(rt, stream, x, y_scale, y_zero_point=None, *, axis=1, block_size=0, output_dtype=0, precision=0,
                    saturate=1):
    """round_half_even(x / scale) + zero point, saturated to the 8-bit type, in float32."""
    out = y_zero_point.dtype if y_zero_point is not None else \
        (ONNX_TO_NUMPY[output_dtype] if output_dtype else np.dtype(np.uint8))
    s = Scratch(rt, x, y_scale, y_zero_point)
    scale = s(cast_to(rt, stream, _broadcastable(rt, stream, s, y_scale, x.shape, axis, block_size), F32))
    q = s(unary(rt, stream, ROUND, s(binary(rt, stream, DIV, s(cast_to(rt, stream, x, F32)), scale))))
    if y_zero_point is not None:
        zero = _broadcastable(rt, stream, s, y_zero_point, x.shape, axis, block_size)
        q = s(binary(rt, stream, ADD, q, s(cast_to(rt, stream, zero, F32))))
    info = np.iinfo(out)
    return s.done(cast_to(rt, stream, s(unary(rt, stream, CLIP, q, float(info.min), float(info.max))), out))


@kernel("DequantizeLinear", since=10, types=INT8S | {np.dtype(np.int32)}, device="cuda",
        check=lambda n, g: None if g.value(n.inputs[1]).dtype in GPU_FLOATS else "scale of a type CUDA lacks")
def dequantize_linear(rt, stream, x, x_scale, x_zero_point=None, *, axis=1, block_size=0, output_dtype=0):
    """(x - zero point) * scale in float32, as the scale's type (or output_dtype)."""
    s = Scratch(rt, x, x_scale, x_zero_point)
    wide = s(cast_to(rt, stream, x, F32))
    if x_zero_point is not None:
        zero = _broadcastable(rt, stream, s, x_zero_point, x.shape, axis, block_size)
        wide = s(binary(rt, stream, SUB, wide, s(cast_to(rt, stream, zero, F32))))
    scale = s(cast_to(rt, stream, _broadcastable(rt, stream, s, x_scale, x.shape, axis, block_size), F32))
    y = s(binary(rt, stream, MUL, wide, scale))
    return s.done(cast_to(rt, stream, y, ONNX_TO_NUMPY[output_dtype] if output_dtype else x_scale.dtype))


@kernel("DynamicQuantizeLinear", since=11, types=frozenset([F32]), device="cuda")
def dynamic_quantize_linear(rt, stream, x):
    """uint8 over [min(x, 0), max(x, 0)], scale (high - low) / 255 and zero point round(-low / scale),
    all on the GPU (an all-zero x gets scale 1, stock ORT's choice, zero point 0 and zeros)."""
    s = Scratch(rt, x)
    everything = list(range(len(x.shape)))
    zero = s(device_scalar(rt, stream, 0.0))
    low = s(binary(rt, stream, MIN, s(reduce(rt, stream, MIN_OF, x, everything, 0)), zero))
    high = s(binary(rt, stream, MAX, s(reduce(rt, stream, MAX_OF, x, everything, 0)), zero))
    spread = s(binary(rt, stream, DIV, s(binary(rt, stream, SUB, high, low)), s(device_scalar(rt, stream, 255.0))))
    scale = where(rt, stream, s(compare(rt, stream, EQUAL, high, low)), s(device_scalar(rt, stream, 1.0)), spread)[0]
    point = s(unary(rt, stream, ROUND, s(binary(rt, stream, DIV, s(binary(rt, stream, SUB, zero, low)), scale))))
    point = cast_to(rt, stream, s(unary(rt, stream, CLIP, point, 0.0, 255.0)), U8)
    (y,) = quantize_linear(rt, stream, x, scale, point)
    return s.done(y, scale, point)



def _check_integer_product(operands, a_zero):
    """MatMulInteger's and QLinearMatMul's check, given the positions of A, B and A's zero point."""
    def check(node, graph):
        if any(len(graph.value(node.inputs[i]).shape or ()) < 2 for i in operands):
            return "1-D operands"
        zero = node.inputs[a_zero] if len(node.inputs) > a_zero else ""
        shape = graph.value(zero).shape if zero else ()
        return None if shape is None or len(shape) <= 1 else \
            "a zero point of rank above 1 (the spec's are scalars or vectors)"
    return check


@kernel("MatMulInteger", since=10, types=INT8S, device="cuda", check=_check_integer_product((0, 1), 2))
def matmul_integer(rt, stream, a, b, a_zero_point=None, b_zero_point=None):
    """(a - a_zero_point) . (b - b_zero_point) as int32 (a's zero point per row or one, b's per column or
    one), by a float64 GEMM: the products are below 2^16, so the sums are exact."""
    s = Scratch(rt, a, b, a_zero_point, b_zero_point)
    rows = None if a_zero_point is None else (a_zero_point.size, 1)
    a, b = _centered(rt, stream, s, a, a_zero_point, rows), _centered(rt, stream, s, b, b_zero_point)
    (y,) = matmul(rt, stream, a, b)
    return s.done(cast_to(rt, stream, s(y), I32))


def _centered(rt, stream, s, x, zero, vector_shape=None):
    """x - zero as float64 (exact for 8-bit integers); a zero point of several values viewed as
    vector_shape (when given) to broadcast along its axis."""
    wide = s(cast_to(rt, stream, x, I32))
    if zero is not None:
        if zero.size > 1 and vector_shape:
            zero = DeviceTensor(zero.ptr, vector_shape, zero.dtype)
        wide = s(binary(rt, stream, SUB, wide, s(cast_to(rt, stream, zero, I32))))
    return s(cast_to(rt, stream, wide, F64))


@kernel("ConvInteger", since=10, types=INT8S, device="cuda", check=check_spatial)
def conv_integer(rt, stream, x, w, x_zero_point=None, w_zero_point=None, *, auto_pad="NOTSET", dilations=None,
                 group=1, kernel_shape=None, pads=None, strides=None):
    """(x - x_zero_point) * (w - w_zero_point) convolved as int32 (w's zero point one or per output
    channel), by the float64 Conv (im2col and a cuBLASLt GEMM): exact; padding adds zeros after
    centering, as padding x with its zero point."""
    s = Scratch(rt, x, w, x_zero_point, w_zero_point)
    channels = None if w_zero_point is None else (w_zero_point.size,) + (1,) * (len(w.shape) - 1)
    x, w = _centered(rt, stream, s, x, x_zero_point), _centered(rt, stream, s, w, w_zero_point, channels)
    (y,) = conv(rt, stream, x, w, auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape,
                pads=pads, strides=strides)
    return s.done(cast_to(rt, stream, s(y), I32))


def _requantize(rt, stream, s, acc, multiplier, y_zero_point, bias=None):
    """quantization.cu's requantization of the float64 sums acc by the float32 multiplier (broadcast to acc)."""
    if y_zero_point.size != 1:  # read as one value
        raise ValueError(f"result zero point must be a scalar or 1D tensor of size 1, got shape {y_zero_point.shape}")
    if bias is not None and bias.shape != (acc.shape[1],):  # read per output channel
        raise ValueError(f"bias shape invalid. bias must be a 1D tensor of size output_channels ({acc.shape[1]}), got "
                         f"{bias.shape}")
    if multiplier.dtype != F32:  # (the kernel reads float32)
        raise TypeError(f"requantization multiplier of {multiplier.dtype}")
    multiplier = s(broadcast_to(rt, stream, multiplier, acc.shape)) if multiplier.shape != acc.shape else multiplier
    y_zero_point = s(rt.device(y_zero_point, stream))
    bias = None if bias is None else s(rt.device(bias, stream))
    y = rt.alloc(acc.shape, y_zero_point.dtype)
    channels, spatial = (acc.shape[1], math.prod(acc.shape[2:])) if bias is not None else (1, 1)
    rt.launch(f"seamless_requantize_{'u8' if y_zero_point.dtype == U8 else 'i8'}", y.size, stream, ("int64", y.size),
              ("ptr", acc.ptr), ("ptr", multiplier.ptr), ("ptr", bias.ptr if bias is not None else 0),
              ("int64", channels), ("int64", spatial), ("ptr", y_zero_point.ptr), ("ptr", y.ptr))
    return y


@kernel("QLinearMatMul", since=10, types=INT8S, device="cuda", check=_check_integer_product((0, 3), 2))
def qlinear_matmul(rt, stream, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    """MatMulInteger's exact sums, requantized in float64 by a_scale * b_scale / y_scale (float32, a's
    scale per row or one, b's per column or one), as the CPU kernel."""
    s = Scratch(rt, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point)
    rows = None if a_zero_point is None else (a_zero_point.size, 1)
    a2, b2 = _centered(rt, stream, s, a, a_zero_point, rows), _centered(rt, stream, s, b, b_zero_point)
    (acc,) = matmul(rt, stream, a2, b2)
    s(acc)
    wide = lambda scale: scale if scale.dtype == F32 else s(cast_to(rt, stream, scale, F32))  # as stock: float32
    along = lambda scale, axis: wide(_broadcastable(rt, stream, s, scale, acc.shape, axis, 0))
    scales = s(binary(rt, stream, MUL, along(a_scale, -2), along(b_scale, -1)))
    multiplier = s(binary(rt, stream, DIV, scales, along(y_scale, -1)))
    return s.done(_requantize(rt, stream, s, acc, multiplier, y_zero_point))


@kernel("QLinearConv", since=10, types=INT8S, device="cuda", check=check_spatial)
def qlinear_conv(rt, stream, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B=None, *,
                 auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    """ConvInteger's exact sums plus the int32 bias, requantized in float64 by x_scale * w_scale / y_scale
    (float32, w's scale per output channel or one), as the CPU kernel."""
    s = Scratch(rt, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B)
    channels = None if w_zero_point is None else (w_zero_point.size,) + (1,) * (len(w.shape) - 1)
    x2, w2 = _centered(rt, stream, s, x, x_zero_point), _centered(rt, stream, s, w, w_zero_point, channels)
    (acc,) = conv(rt, stream, x2, w2, auto_pad=auto_pad, dilations=dilations, group=group,
                  kernel_shape=kernel_shape, pads=pads, strides=strides)
    s(acc)
    along = lambda scale: _broadcastable(rt, stream, s, scale, acc.shape, 1, 0)  # per output channel, or one
    scales = s(binary(rt, stream, MUL, along(x_scale), along(w_scale)))
    multiplier = s(binary(rt, stream, DIV, scales, along(y_scale)))
    return s.done(_requantize(rt, stream, s, acc, multiplier, y_zero_point, B))


# --- MatMulNBits --------------------------------------------------------------------------


def _check_nbits(node, graph):
    a = node.attrs
    if a.get("bits", 4) not in (4, 8):
        return f"bits={a.get('bits')}: 4 and 8 only"
    if len(node.inputs) > 3 and node.inputs[3] and graph.value(node.inputs[3]).dtype != np.uint8:
        return "zero points of a float type: uint8 only on CUDA"
    if len(node.inputs) > 4 and node.inputs[4]:
        return "g_idx not supported"
    if a.get("weight_prepacked", 0):
        return "prepacked weights not supported"
    block = a.get("block_size", 0)
    if block < 16 or block & (block - 1):
        return f"block_size={block}: a power of 2 of at least 16 (the spec's)"
    return None


@kernel("MatMulNBits", domain="com.microsoft", types=GPU_FLOATS, device="cuda", check=_check_nbits,
        validate=validate_nbits_weights)
def matmul_nbits(rt, stream, a, b, scales, zero_points=None, g_idx=None, bias=None, *, K, N, block_size, bits=4,
                 accuracy_level=0, weight_prepacked=0, _norm=None, _output_buffer=None):
    return (_nbits(rt, stream, "", a, [b, scales, zero_points, bias], K, N, block_size, bits, _norm, _output_buffer),)


def _check_swiglu(node, graph):
    """The gate's MatMulNBits must pass MatMulNBits' check (plan/fusion.py makes both alike)."""
    return _check_nbits(Node(node.name, "MatMulNBits", "com.microsoft", 1, node.inputs[:4], node.outputs,
                             node.attrs), graph)


@kernel("MatMulNBitsSwiGLU", domain=FUSED_DOMAIN, types=GPU_FLOATS, device="cuda", check=_check_swiglu)
def matmul_nbits_swiglu(rt, stream, a, gate, gate_scales, gate_zero_points, up, up_scales, up_zero_points, *, K, N,
                        block_size, bits=4, accuracy_level=0, _norm=None):
    """silu(MatMulNBits(a, gate...)) * MatMulNBits(a, up...) in one pass (plan/fusion.py)."""
    return (_nbits(rt, stream, "_swiglu", a, [gate, gate_scales, gate_zero_points, up, up_scales, up_zero_points],
                   K, N, block_size, bits, _norm),)


# Columns from which float16 4-bit products take the tensor-core kernel: measured on the H200 with its first
# version (docs/benchmarks/gpu.md), it ran a 151936-column LM head in 63 us against 90, but the decoder's
# 896..9728-column projections 1.6-2x slower than a warp a column (fewer warps resident: 110 registers).
MMA_COLUMNS = 16384
TILE_WARPS, TILE_SLOT, TILE_CHUNK = codes.TILE_WARPS, codes.TILE_SLOT, codes.TILE_CHUNK
TILE_BLOCKS = 528  # the tensor-core kernel's grid: its warps stride over the tiles (the H200: 4 blocks an SM)


def nbits4_tiles(weights, K, N, block_size) -> np.ndarray:
    """quantization.cu's tensor-core layout of 4-bit weights (one matrix: packed, scales, zero points; or a SwiGLU's
    two): per tile of 8 columns, per chunk of 128 k, per matrix TILE_CHUNK bytes: lane l's 16 bytes (column l / 4,
    k group l % 4), then lane l < 16's two scales (columns 2 (l % 4) + 0 / 1, group l / 4), then lane l's zero
    point (8 without them). Columns past N and k past K are zeros (scale 0: they add nothing)."""
    tiles, chunks, blocks = -(-N // 8), -(-K // 128), -(-K // block_size)
    groups = np.arange(chunks * 4) * 32  # the first k of each group of 32
    in_k = groups < K
    block_of = np.minimum(groups, K - 1) // block_size
    matrices = [weights[i:i + 3] for i in range(0, len(weights), 3)]
    out = np.empty((tiles, chunks, len(weights) // 3, TILE_CHUNK), np.uint8)
    for m, (packed, scales, zero_points) in enumerate(matrices):
        w = np.zeros((tiles * 8, chunks * 64), np.uint8)
        w[:N, :K // 2] = packed.reshape(N, -1)[:, :K // 2]
        # a lane's 16 bytes moved as two 8-byte words (numpy moves bytes one by one: 6x slower for an 8B LM head)
        out[:, :, m, :512].view(np.uint64).reshape(tiles, chunks, 8, 4, 2)[...] = \
            w.view(np.uint64).reshape(tiles, 8, chunks, 4, 2).transpose(0, 2, 1, 3, 4)
        sc = np.zeros((tiles * 8, chunks * 4), np.float16)
        sc[:N] = np.where(in_k, scales.reshape(N, blocks)[:, block_of], 0)
        out[:, :, m, 512:576].view(np.float16).reshape(tiles, chunks, 4, 4, 2)[...] = \
            sc.reshape(tiles, 4, 2, chunks, 4).transpose(0, 3, 4, 1, 2)
        z = np.full((tiles * 8, chunks * 4), 8, np.uint8)
        if zero_points is not None:
            zp = zero_points.reshape(N, -1)
            z[:N] = (zp[:, block_of // 2] >> ((block_of % 2) * 4).astype(np.uint8)) & 15
        out[:, :, m, 576:].reshape(tiles, chunks, 8, 4)[...] = z.reshape(tiles, 8, chunks, 4).transpose(0, 2, 1, 3)
    return out.reshape(-1)


_TILES_LOCK = threading.Lock()


def _tiles(rt, weights, K, N, block_size):
    """The weights in nbits4_tiles' layout on the GPU, made once (on the host, from the constants' host
    copies) and kept with the first of them; None where they are not all constants, or while a CUDA graph is
    captured (an upload waits for the GPU)."""
    packed = weights[::3]
    key = ("nbits4_tiles", K, N, block_size) + tuple(t.ptr for t in packed[1:])
    cached = (packed[0].derived or {}).get(key)
    if cached is not None:
        return cached
    if any(t is not None and t.host is None for t in weights) or rt.lib.seamless_capturing():
        return None
    with _TILES_LOCK:  # two threads' first runs: one layout
        cached = (packed[0].derived or {}).get(key)
        if cached is None:
            cached = rt.upload(nbits4_tiles([None if t is None else t.host for t in weights], K, N, block_size))
            packed[0].derived = {**(packed[0].derived or {}), key: cached}
    return cached


def _nbits(rt, stream, variant, a, weights, K, N, block_size, bits, norm=None, output_buffer=None):
    """native/cuda/quantization.cu's MatMulNBits kernels, 256-thread blocks, a block row per row of activations:
    4-bit (K, the block size and the addresses allowing) a warp per column, `split` warps sharing a long K,
    or in float16 with columns enough and constant weights on sm_90, 8 columns a warp on tensor cores
    (TILE_BLOCKS blocks of TILE_WARPS warps, every row at once, the weights in nbits4_tiles' layout); else
    the generic path. 2 to NBITS_GEMV_ROWS rows (a batch's decode step) in 4 bits: from MMA_ROWS_FROM rows in float16
    on tensor cores, 8 columns a warp and every row (matmul_nbits4_mma_rows), else the x32 kernel's passes for
    NBITS_ROWS rows a block (matmul_nbits4_rows), the weights read once for those rows. More rows (a prompt; past
    SMALL_ROWS off the 4-bit path): one GEMM on the dequantized weights (_nbits_gemm).
    `norm` (a RowNorm) is applied to a first: by the warp-a-column kernel itself where it fits, else before.
    output_buffer: the kernel's _output_buffer, where its GEMVs may write (rt.output)."""
    _nbits_shapes(a, weights, K, N, block_size, bits)
    m = a.size // K if K else 0
    packed = [weights[0]] + ([weights[3]] if variant else [])
    fast = bits == 4 and K % 32 == 0 and block_size % 32 == 0 and all(t.ptr % 16 == 0 for t in [a] + packed)
    prompt = m > (codes.NBITS_GEMV_ROWS if fast else SMALL_ROWS)  # the GEMVs' weights read too often: one GEMM
    matrices = weights if variant else weights[:3]
    mma = (fast and a.dtype == np.float16 and N >= MMA_COLUMNS and rt.hopper and m <= SMALL_ROWS
           and all(t is None or t.host is not None for t in matrices))  # constants: laid out once for it
    rows = fast and 1 < m and not prompt and not mma
    split = column_split(N, -(-K // 1024), GEMV_WARPS) if fast else 1  # 1024 k: a warp's one pass
    columns = codes.NBITS_COLUMNS // split  # warps a block
    if norm is not None and (prompt or mma or rows or not fast or not norm.fits(K, m * -(-N // columns))):
        return after_norm(lambda rt, stream, normed: _nbits(rt, stream, variant, normed, weights, K, N, block_size,
                                                             bits, output_buffer=output_buffer), rt, stream, norm)
    if prompt:
        return _nbits_gemm(rt, stream, variant, a, weights, K, N, block_size, bits)
    y = rt.output(output_buffer, 0, a.shape[:-1] + (N,), a.dtype)
    tiles = _tiles(rt, matrices, K, N, block_size) if mma else None
    if tiles is not None:
        bias = [] if variant else [("ptr", weights[3].ptr if weights[3] is not None else 0)]
        rt.launch_rows("seamless_matmul_nbits4_tiles" + variant + "_f16", min(-(-N // (8 * TILE_WARPS)), TILE_BLOCKS),
                       stream, ("ptr", a.ptr), ("ptr", tiles.ptr), *bias, ("ptr", y.ptr),
                       struct_arg("NBitsTiles", m=m, n=N, k=K, chunks=-(-K // 128)), threads=TILE_WARPS * 32,
                       shared=2 * TILE_WARPS * TILE_SLOT)
        return y
    tensors = [("ptr", a.ptr), *[("ptr", t.ptr if t is not None else 0) for t in weights], ("ptr", y.ptr)]
    if rows and a.dtype == np.float16 and m >= MMA_ROWS_FROM:  # on tensor cores: 8 columns a warp, every row
        tiles = -(-N // 8)
        tile_split = column_split(tiles, K // 32, GEMV_WARPS)  # a warp's pass: a group of 32 k
        rt.launch_rows(f"seamless_matmul_nbits4_mma_rows{variant}_f16",
                       -(-tiles // (codes.NBITS_COLUMNS // tile_split)), stream, *tensors,
                       struct_arg("NBits", m=m, n=N, k=K, block=block_size, bits=bits, split=tile_split))
        return y
    shape = struct_arg("NBits", m=m, n=N, k=K, block=block_size, bits=bits, split=split)
    if rows:
        rt.launch_rows(f"seamless_matmul_nbits4_rows{variant}_{SUFFIX[a.dtype]}",
                       -(-m // codes.NBITS_ROWS) * -(-N // columns), stream, *tensors, shape)
        return y
    if fast and not variant and not norm:
        name = x32_kernel(rt, m * -(-N // columns))
    else:
        name = ("seamless_matmul_nbits4_x32" if fast else "seamless_matmul_nbits") + variant + ("_norm" if norm else "")
    if norm:  # the activations are the norm's (its x is in its argument)
        rt.launch_rows(name + "_" + SUFFIX[a.dtype], m * -(-N // columns), stream, *tensors[1:], shape,
                       norm.argument(rt), shared=K * a.dtype.itemsize)
    else:
        rt.launch_rows(name + "_" + SUFFIX[a.dtype], m * -(-N // columns), stream, *tensors, shape)
    return y


def _nbits_shapes(a, weights, K, N, block_size, bits):
    """a's rows of K and each matrix's packed weights, scales and zero points of the sizes K, N, block_size and
    bits make (the kernels address them by those), as ORT checks them."""
    if not a.shape or a.shape[-1] != K:
        raise ValueError(f"MatMul dimension mismatch: A {a.shape}, K={K}")
    blocks = -(-K // block_size)
    sizes = {"B": N * blocks * block_size * bits // 8, "scales": N * blocks, "zero_points": N * -(-blocks * bits // 8),
             "bias": N}
    names = ("B", "scales", "zero_points", "bias") if len(weights) == 4 else ("B", "scales", "zero_points") * 2
    for name, t in zip(names, weights):
        if t is not None and t.size != sizes[name]:
            raise ValueError(f"MatMulNBits: {name} of shape {t.shape} does not match the attribute-derived size "
                             f"{sizes[name]} (N={N}, K={K}, bits={bits}, block_size={block_size})")


def _nbits_gemm(rt, stream, variant, a, weights, K, N, block_size, bits):
    """A prompt's MatMulNBits (or the SwiGLU of two): the weights dequantized into one (N, or 2N: gate then up,
    K) matrix of a's type by quantization.cu, one cuBLASLt GEMM, then the SwiGLU or the bias. Each weight is rounded
    once to a's type (as ORT's CUDA EP does for prompts); the matrix is scratch, freed stream-ordered."""
    mats = 2 if variant else 1
    w = rt.alloc((mats * N, K), a.dtype)
    shape = struct_arg("NBits", m=0, n=N, k=K, block=block_size, bits=bits, split=1)
    for i in range(mats):
        packed, scales, zero_points = weights[3 * i:3 * i + 3]
        rt.launch(f"seamless_dequantize_nbits_{SUFFIX[a.dtype]}", N * -(-K // 8), stream, ("ptr", packed.ptr),
                  ("ptr", scales.ptr), ("ptr", zero_points.ptr if zero_points is not None else 0),
                  ("ptr", w.ptr + i * N * K * a.dtype.itemsize), shape)
    m = a.size // K
    product = rt.alloc(a.shape[:-1] + (mats * N,), a.dtype)
    gemm_into(rt, stream, a, w, product, m, mats * N, K, trans_b=True)
    rt.free(w)  # stream-ordered
    if variant:
        y = rt.alloc(a.shape[:-1] + (N,), a.dtype)
        swiglu_of_product(rt, stream, product, y)
    elif weights[3] is not None:  # the bias
        y = binary(rt, stream, ADD, product, weights[3])
    else:
        return product
    rt.free(product)  # stream-ordered
    return y


def _check_gather_bq(node, graph):
    data, a = graph.value(node.inputs[0]), node.attrs
    if data.dtype != np.uint8 or data.shape is None or len(data.shape) != 2:
        return "2-D uint8 data only on CUDA"
    if a.get("bits", 4) not in (4, 8) or a.get("gather_axis", 0) not in (0, -2) or a.get("quantize_axis", 1) not in (1, -1):
        return "bits 4/8, gather_axis 0 and quantize_axis 1 only on CUDA"
    if graph.value(node.inputs[2]).dtype not in GPU_FLOATS:
        return "float16/float32 scales only on CUDA"
    if len(node.inputs) > 3 and node.inputs[3] and graph.value(node.inputs[3]).dtype != np.uint8:
        return "uint8 zero points only on CUDA"
    if graph.value(node.inputs[1]).dtype != np.int64:
        return "int64 indices only on CUDA"
    return None


@kernel("GatherBlockQuantized", domain="com.microsoft", types=frozenset([np.dtype(np.uint8)]), device="cuda",
        check=_check_gather_bq)
def gather_block_quantized(rt, stream, data, indices, scales, zero_points=None, *, bits=4, block_size=128,
                           quantize_axis=1, gather_axis=0):
    """An index out of range gives a row of zeros (quantization.cu), as stock ORT answers too."""
    width = data.shape[1] * 8 // bits
    blocks = -(-width // block_size)
    if scales.shape != (data.shape[0], blocks) or (zero_points is not None and
                                                  zero_points.shape != (data.shape[0], -(-blocks * bits // 8))):
        raise ValueError(f"GatherBlockQuantized: data shape {data.shape} and scales shape {scales.shape} (zero points "
                         f"{None if zero_points is None else zero_points.shape}) do not match: ({data.shape[0]}, "
                         f"{blocks}) scales for blocks of {block_size} expected")
    y = rt.alloc(indices.shape + (width,), scales.dtype)
    rt.launch(f"seamless_gather_block_quantized_{SUFFIX[scales.dtype]}", y.size, stream, ("ptr", data.ptr),
              ("ptr", indices.ptr), ("ptr", scales.ptr), ("ptr", zero_points.ptr if zero_points is not None else 0),
              ("ptr", y.ptr), struct_arg("GatherQ", rows=data.shape[0], width=width, indices=indices.size,
                                         block=block_size, bits=bits))
    return (y,)
