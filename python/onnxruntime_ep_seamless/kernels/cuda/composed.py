"""Ops on CUDA composed of our other kernels (no device code of their own but QLinear*'s requantization,
quant.cu's): IsNaN, IsInf, Swish,
Shrink, Hardmax, OneHot, DepthToSpace, SpaceToDepth, the normalisations GroupNormalization,
MeanVarianceNormalization, LpNormalization, GlobalLpPool, LpPool, 8-bit QuantizeLinear /
DequantizeLinear (per tensor, per axis, blocked), DynamicQuantizeLinear, MatMulInteger, ConvInteger,
QLinearMatMul and QLinearConv (exact integer sums, requantized in float64 by quant.cu), Einsum,
ReverseSequence, TensorScatter, MaxUnpool, AffineGrid, and ai.onnx.ml's Binarizer and ArrayFeatureExtractor.
Float16/bfloat16 normalisations compute in float32 and
round once at the end, as the CPU kernels do (kernels/cpu/nn.py)."""
import math

import numpy as np

from ...graph.ir import ONNX_TO_NUMPY
from ...runtime.cuda import MAX_DIMS, DeviceTensor, contiguous_strides
from .. import checks
from ..checks import InvalidArgument
from ..cpu.nn import pooled_from
from ..cpu.spatial import affine_base
from ..registry import kernel
from .elementwise import (ADD, CLIP, COMPARE, DIV, GPU_FLOATS, GPU_INTS, LOGIC, MAX, MIN, MOD, MUL, NOT, POW,
                          QUICK_GELU, SUB, UNARY, _activation, _logic, binary, cast_to, compare, device_scalar, unary,
                          where)
from .indexing import MOVABLE, _arg, gather_elements, scatter_elements
from .matmul import _product, batched_product, matmul
from .reduce import REDUCE, reduce
from .shape import broadcast_to, gather, permuted
from .spatial import POOL_SUM, _check_spatial, _pool, conv

F32, F64, I32, I64, U8 = (np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64, np.uint8))
EQUAL, LESS, GREATER = COMPARE["Equal"][0], COMPARE["Less"][0], COMPARE["Greater"][0]
SQRT, ABS = UNARY["Sqrt"][0], UNARY["Abs"][0]
MEAN, L1, L2, MIN_OF, MAX_OF = (REDUCE[op][0] for op in ("ReduceMean", "ReduceL1", "ReduceL2", "ReduceMin",
                                                         "ReduceMax"))


class Scratch:
    """Intermediate tensors of one composition, freed (stream-ordered) when it returns its results."""

    def __init__(self, rt, *inputs):
        self.rt, self.made, self.inputs = rt, [], {t.ptr for t in inputs if t is not None}

    def __call__(self, t):
        self.made.append(t)
        return t

    def done(self, *results):
        keep = {r.ptr for r in results} | self.inputs
        for t in {t.ptr: t for t in self.made}.values():
            if t.ptr not in keep:
                self.rt.free(t)
        return results


# ---------------------------------------------------------------- elementwise


@kernel("IsNaN", since=9, types=GPU_FLOATS, device="cuda")
def isnan(rt, stream, x):
    s = Scratch(rt, x)
    same = s(compare(rt, stream, EQUAL, x, x))  # false only for NaN
    return s.done(_logic(rt, stream, NOT, same, same)[0])


@kernel("IsInf", since=10, types=GPU_FLOATS, device="cuda")
def isinf(rt, stream, x, *, detect_negative=1, detect_positive=1):
    s = Scratch(rt, x)
    found = [s(compare(rt, stream, EQUAL, x, s(device_scalar(rt, stream, sign * np.inf, x.dtype))))
             for sign, wanted in ((1, detect_positive), (-1, detect_negative)) if wanted]
    if not found:
        y = rt.alloc(x.shape, np.bool_)
        rt.zero(y, stream)
        return s.done(y)
    return s.done(found[0] if len(found) == 1 else _logic(rt, stream, LOGIC["Or"], *found)[0])


@kernel("Swish", since=24, types=GPU_FLOATS, device="cuda")
def swish(rt, stream, x, *, alpha=1.0):
    return _activation(rt, stream, QUICK_GELU, x, alpha=alpha)  # x * sigmoid(alpha * x)


@kernel("Shrink", since=9, types=GPU_FLOATS, device="cuda")
def shrink(rt, stream, x, *, bias=0.0, lambd=0.5):
    s = Scratch(rt, x)
    const = lambda v: s(device_scalar(rt, stream, v, x.dtype))
    low, high = const(-lambd), const(lambd)
    inner = s(where(rt, stream, s(compare(rt, stream, GREATER, x, high)), s(binary(rt, stream, SUB, x, const(bias))),
                    const(0.0))[0])
    return s.done(where(rt, stream, s(compare(rt, stream, LESS, x, low)), s(binary(rt, stream, ADD, x, const(bias))),
                        inner)[0])


# ---------------------------------------------------------------- one-hot


def _hardmax(rt, stream, x, axis):
    """1 at the first maximum along `axis`, 0 elsewhere."""
    s = Scratch(rt, x)
    (index,) = _arg(rt, stream, x, axis, 1, 0, 1)
    s(index)
    n = x.shape[axis]
    classes = s(rt.device(DeviceTensor.on_host(np.arange(n, dtype=np.int64).reshape((n,) + (1,) * (len(x.shape) - axis - 1))),
                          stream))
    (y,) = s.done(cast_to(rt, stream, s(compare(rt, stream, EQUAL, index, classes)), x.dtype))
    return y


@kernel("Hardmax", since=13, types=GPU_FLOATS, device="cuda")
def hardmax_13(rt, stream, x, *, axis=-1):
    return (_hardmax(rt, stream, x, checks.axis(axis, len(x.shape))),)


@kernel("Hardmax", since=1, until=12, types=GPU_FLOATS, device="cuda")
def hardmax_1(rt, stream, x, *, axis=1):
    axis = checks.axis(axis, len(x.shape))  # the input as a matrix of rows from `axis` on
    rows = math.prod(x.shape[:axis])
    y = _hardmax(rt, stream, DeviceTensor(x.ptr, (rows, x.size // max(rows, 1)), x.dtype), 1)
    return (DeviceTensor(y.ptr, x.shape, y.dtype),)


@kernel("OneHot", since=9, types=GPU_INTS, device="cuda", host_inputs=(1,))
def one_hot(rt, stream, indices, depth, values, *, axis=-1):
    depth = int(np.asarray(rt.to_host(depth, stream)).reshape(-1)[0])
    if depth < 0:
        raise InvalidArgument("Depth is negative.")
    if values.size != 2 or len(values.shape) > 1:
        raise InvalidArgument(f"Invalid argument for values; either it's rank is more than 1 or it has more than 2 "
                              f"elements: shape {values.shape}")
    s = Scratch(rt, indices, values)
    rank = len(indices.shape) + 1
    axis = checks.axis(axis, rank)
    idx = s(cast_to(rt, stream, indices, np.dtype(np.int64)))
    # negative indices count from the end; others out of range match no class ("off")
    idx = s(where(rt, stream, s(compare(rt, stream, LESS, idx, s(device_scalar(rt, stream, 0, idx.dtype)))),
                  s(binary(rt, stream, ADD, idx, s(device_scalar(rt, stream, depth, idx.dtype)))), idx)[0])
    shape = indices.shape[:axis] + (1,) + indices.shape[axis:]
    classes = np.arange(depth, dtype=np.int64).reshape((depth,) + (1,) * (rank - axis - 1))
    hot = s(compare(rt, stream, EQUAL, DeviceTensor(idx.ptr, shape, idx.dtype),
                    s(rt.device(DeviceTensor.on_host(classes), stream))))
    off = DeviceTensor(values.ptr, (), values.dtype)
    on = DeviceTensor(values.ptr + values.dtype.itemsize, (), values.dtype)
    return s.done(where(rt, stream, hot, on, off)[0])


# ---------------------------------------------------------------- data movement


@kernel("DepthToSpace", since=1, device="cuda")
def depth_to_space(rt, stream, x, *, blocksize, mode="DCR"):
    b, c, h, w = _blocks(x, blocksize, c_divisible=True)
    bs, rest = blocksize, c // blocksize ** 2
    view, perm = ((b, bs, bs, rest, h, w), (0, 3, 4, 1, 5, 2)) if mode == "DCR" else \
        ((b, rest, bs, bs, h, w), (0, 1, 4, 2, 5, 3))
    y = permuted(rt, stream, DeviceTensor(x.ptr, view, x.dtype), perm)
    return (DeviceTensor(y.ptr, (b, rest, h * bs, w * bs), x.dtype),)


@kernel("SpaceToDepth", since=1, device="cuda")
def space_to_depth(rt, stream, x, *, blocksize):
    b, c, h, w = _blocks(x, blocksize, c_divisible=False)
    bs = blocksize
    y = permuted(rt, stream, DeviceTensor(x.ptr, (b, c, h // bs, bs, w // bs, bs), x.dtype), (0, 3, 5, 1, 2, 4))
    return (DeviceTensor(y.ptr, (b, c * bs * bs, h // bs, w // bs), x.dtype),)


def _blocks(x, bs, c_divisible):
    if len(x.shape) != 4:
        raise InvalidArgument(f"SpaceDepth ops require a 4-D input. Provided rank: {len(x.shape)}")
    if bs < 1:
        raise ValueError(f"blocksize must be positive, got {bs}")
    b, c, h, w = x.shape
    if (c % (bs * bs) if c_divisible else h % bs or w % bs):
        raise InvalidArgument(f"shape {x.shape} does not divide into blocks of {bs}")
    return b, c, h, w


# ---------------------------------------------------------------- normalisations (float32 inside)


def _standardize(rt, stream, s, x, axes, epsilon):
    """(x - mean) / sqrt(var + epsilon) over `axes` of a float32 x."""
    mean = s(reduce(rt, stream, MEAN, x, axes, 1))
    centered = s(binary(rt, stream, SUB, x, mean))
    var = s(reduce(rt, stream, MEAN, s(binary(rt, stream, MUL, centered, centered)), axes, 1))
    std = s(unary(rt, stream, SQRT, s(binary(rt, stream, ADD, var, s(device_scalar(rt, stream, epsilon, F32))))))
    return s(binary(rt, stream, DIV, centered, std))


def _group_norm(rt, stream, x, scale, bias, epsilon, num_groups, per_channel):
    n, c = x.shape[0], x.shape[1]
    if c % num_groups:
        raise ValueError(f"GroupNormalization: {c} channels do not divide into {num_groups} groups")
    per = c if per_channel else num_groups
    if scale.size != per or bias.size != per:  # read as (per, 1) columns
        raise ValueError(f"GroupNormalization: scale {scale.shape} and bias {bias.shape} must have {per} values "
                         f"(one per {'channel' if per_channel else 'group'})")
    s = Scratch(rt, x, scale, bias)
    xf = s(cast_to(rt, stream, x, F32))
    y = _standardize(rt, stream, s, DeviceTensor(xf.ptr, (n, num_groups, x.size // max(n * num_groups, 1)), F32),
                     [2], epsilon)
    # scale and bias per group (opset 18) on the groups' view, or per channel (21) on the input's
    view = (n, num_groups, y.shape[2]) if not per_channel else (n, c, x.size // max(n * c, 1))
    y = DeviceTensor(y.ptr, view, F32)
    sc, bi = (DeviceTensor(s(cast_to(rt, stream, t, F32)).ptr, (view[1], 1), F32) for t in (scale, bias))
    y = s(binary(rt, stream, ADD, s(binary(rt, stream, MUL, y, sc)), bi))
    return s.done(cast_to(rt, stream, DeviceTensor(y.ptr, x.shape, F32), x.dtype))


@kernel("GroupNormalization", since=18, until=20, types=GPU_FLOATS, device="cuda")
def group_normalization_18(rt, stream, x, scale, bias, *, epsilon=1e-5, num_groups):
    return _group_norm(rt, stream, x, scale, bias, epsilon, num_groups, per_channel=False)


@kernel("GroupNormalization", since=21, types=GPU_FLOATS, device="cuda",
        check=lambda n, g: None if n.attrs.get("stash_type", 1) == 1 else "stash_type other than float32")
def group_normalization_21(rt, stream, x, scale, bias, *, epsilon=1e-5, num_groups, stash_type=1):
    return _group_norm(rt, stream, x, scale, bias, epsilon, num_groups, per_channel=True)


@kernel("MeanVarianceNormalization", since=9, types=GPU_FLOATS, device="cuda")
def mean_variance_normalization(rt, stream, x, *, axes=(0, 2, 3)):
    # the spec's function body: (X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9)
    s = Scratch(rt, x)
    xf = s(cast_to(rt, stream, x, F32))
    axes = [a % len(x.shape) for a in axes]
    mean = s(reduce(rt, stream, MEAN, xf, axes, 1))
    var = s(binary(rt, stream, SUB, s(reduce(rt, stream, MEAN, s(binary(rt, stream, MUL, xf, xf)), axes, 1)),
                   s(binary(rt, stream, MUL, mean, mean))))
    std = s(binary(rt, stream, ADD, s(unary(rt, stream, SQRT, var)), s(device_scalar(rt, stream, 1e-9, F32))))
    y = s(binary(rt, stream, DIV, s(binary(rt, stream, SUB, xf, mean)), std))
    return s.done(cast_to(rt, stream, y, x.dtype))


@kernel("LpNormalization", since=1, types=GPU_FLOATS, device="cuda",
        check=lambda n, g: None if n.attrs.get("p", 2) in (1, 2) else f"p={n.attrs.get('p')} (1 or 2)")
def lp_normalization(rt, stream, x, *, axis=-1, p=2):
    s = Scratch(rt, x)
    xf = s(cast_to(rt, stream, x, F32))
    norm = s(reduce(rt, stream, L1 if p == 1 else L2, xf, [checks.axis(axis, len(x.shape))], 1))
    zero = s(device_scalar(rt, stream, 0.0, F32))
    y = s(where(rt, stream, s(compare(rt, stream, EQUAL, norm, zero)), zero, s(binary(rt, stream, DIV, xf, norm)))[0])
    return s.done(cast_to(rt, stream, y, x.dtype))  # a zero vector stays zero


@kernel("GlobalLpPool", since=2, types=GPU_FLOATS, device="cuda",
        check=lambda n, g: None if n.attrs.get("p", 2) in (1, 2) else f"p={n.attrs.get('p')} (1 or 2)")
def global_lp_pool(rt, stream, x, *, p=2):
    s = Scratch(rt, x)
    y = s(reduce(rt, stream, L1 if p == 1 else L2, s(cast_to(rt, stream, x, F32)), list(range(2, len(x.shape))), 1))
    return s.done(cast_to(rt, stream, y, x.dtype))


@kernel("LpPool", since=2, types=GPU_FLOATS, device="cuda", check=_check_spatial)
def lp_pool(rt, stream, x, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape, p=2, pads=None,
            strides=None):
    """(sum of |x|^p over the window)^(1/p) in float32; padding adds nothing."""
    s = Scratch(rt, x)
    exponent, root = (s(device_scalar(rt, stream, v)) for v in (float(p), 1.0 / p))
    powered = s(binary(rt, stream, POW, s(unary(rt, stream, ABS, s(cast_to(rt, stream, x, F32)))), exponent))
    (total,) = _pool(rt, stream, powered, POOL_SUM, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    return s.done(cast_to(rt, stream, s(binary(rt, stream, POW, s(total), root)), x.dtype))


# ---------------------------------------------------------------- linear quantization (8-bit)

INT8S = frozenset(map(np.dtype, (np.int8, np.uint8)))
ROUND = UNARY["Round"][0]  # halves to even, as the spec


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


@kernel("ConvInteger", since=10, types=INT8S, device="cuda", check=_check_spatial)
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
    """quant.cu's requantization of the float64 sums acc by the float32 multiplier (broadcast to acc)."""
    if y_zero_point.size != 1:  # read as one value
        raise ValueError(f"result zero point must be a scalar or 1D tensor of size 1, got shape {y_zero_point.shape}")
    if bias is not None and bias.shape != (acc.shape[1],):  # read per output channel
        raise ValueError(f"bias shape invalid. bias must be a 1D tensor of size output_channels ({acc.shape[1]}), got "
                         f"{bias.shape}")
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
    along = lambda scale, axis: _broadcastable(rt, stream, s, scale, acc.shape, axis, 0)
    scales = s(binary(rt, stream, MUL, along(a_scale, -2), along(b_scale, -1)))
    multiplier = s(binary(rt, stream, DIV, scales, along(y_scale, -1)))
    return s.done(_requantize(rt, stream, s, acc, multiplier, y_zero_point))


@kernel("QLinearConv", since=10, types=INT8S, device="cuda", check=_check_spatial)
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


# ---------------------------------------------------------------- Einsum

ELLIPSIS_LABELS = "0123456789"  # internal labels of the dims "..." stands for (ONNX labels are letters)


def _einsum_labels(equation, ranks):
    """Each operand's labels (one character a dim, "..." spelled out) and the output's: with no "->",
    the ellipsis dims then the letters used once, sorted (numpy's implicit form)."""
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"Einsum equation {equation!r} names {len(terms)} operands, the node has {len(ranks)}")
    spans = [rank - (len(t) - 3) for t, rank in zip(terms, ranks) if "..." in t]
    dots = ELLIPSIS_LABELS[:max(spans, default=0)]
    labels = []
    for t, rank in zip(terms, ranks):
        lab = t.replace("...", dots[len(dots) - (rank - (len(t) - 3)):]) if "..." in t else t
        if len(lab) != rank or not all(c.isalpha() or c in dots for c in lab):
            raise ValueError(f"Einsum term {t!r} does not fit an operand of rank {rank}")
        labels.append(lab)
    if arrow:
        out = rhs.replace("...", dots)
    else:
        letters = "".join(labels)
        out = dots + "".join(sorted(c for c in set(letters) if c.isalpha() and letters.count(c) == 1))
    if set(out) - set("".join(labels)) or len(set(out)) != len(out):
        raise ValueError(f"Einsum output {out!r} names a label twice or one no operand has")
    return labels, out


def _check_einsum(node, graph):
    try:
        ranks = [len(graph.value(i).shape or ()) for i in node.inputs]
        labels, _ = _einsum_labels(node.attrs.get("equation", ""), ranks)
    except ValueError as e:
        return str(e)
    return None if all(len(lab) <= MAX_DIMS for lab in labels) else f"an operand of rank above {MAX_DIMS}"


@kernel("Einsum", since=12, types=GPU_FLOATS, device="cuda", check=_check_einsum)
def einsum(rt, stream, *inputs, equation):
    """Operands taken pairwise, left to right, in float32: a repeated label's diagonal taken by strides,
    labels used nowhere later summed out, the rest arranged as [batch, free, contracted] x
    [batch, contracted, free] for one batched GEMM; the result summed and ordered as the output."""
    labels, out = _einsum_labels(equation, [len(x.shape) for x in inputs])
    size = {}
    for lab, x in zip(labels, inputs):
        for c, d in zip(lab, x.shape):  # equal sizes, or 1 broadcast
            if size.get(c, 1) == 1:
                size[c] = d
            elif d not in (1, size[c]):
                raise InvalidArgument(f"Einsum operands could not be broadcast together: label {c!r} is {size[c]} in "
                                      f"one operand and {d} in another")
    s = Scratch(rt, *inputs)

    def arranged(x, lab, order):
        """x's dims in `order` at their full sizes (diagonals of repeated labels, broadcasting of 1s), a view
        when nothing moves."""
        strides = contiguous_strides(x.shape)
        step = {c: 0 for c in order}
        for c, d, st in zip(lab, x.shape, strides):
            step[c] += st if d != 1 else 0
        dims = [size[c] for c in order]
        if lab == "".join(order) and all(x.shape[i] == dims[i] for i in range(len(dims))):
            return x
        y = s(rt.alloc(tuple(dims), x.dtype))
        rt.strided_copy(stream, x, y, dims, [step[c] for c in order], contiguous_strides(dims))
        return y

    def summed(x, lab, keep):
        x = arranged(x, lab, list(dict.fromkeys(lab)))  # one dim a label
        lab = "".join(dict.fromkeys(lab))
        axes = [i for i, c in enumerate(lab) if c not in keep]
        if not axes:
            return x, lab
        return s(reduce(rt, stream, REDUCE["ReduceSum"][0], x, axes, 0)), "".join(c for c in lab if c in keep)

    operands = [(s(cast_to(rt, stream, x, F32)) if x.dtype != F32 else x, lab) for x, lab in zip(inputs, labels)]
    x, lab = operands[0]
    for i, (z, zlab) in enumerate(operands[1:], 1):
        later = set(out).union(*(set(l) for _, l in operands[i + 1:]))
        x, lab = summed(x, lab, later | set(zlab))
        z, zlab = summed(z, zlab, later | set(lab))
        batch = [c for c in lab if c in zlab and c in later]
        contracted = [c for c in lab if c in zlab and c not in later]
        left, right = [c for c in lab if c not in zlab], [c for c in zlab if c not in lab]
        a, b = arranged(x, lab, batch + left + contracted), arranged(z, zlab, batch + contracted + right)
        count, m, k, n = (math.prod([size[c] for c in g]) for g in (batch, left, contracted, right))
        y = s(rt.alloc(tuple(size[c] for c in batch + left + right), F32))
        if count == 1:
            _product(rt, stream, a, b, y, m, n, k)
        elif k == 0:
            rt.zero(y, stream)
        else:
            batched_product(rt, stream, a, b, y, m, n, k, count, m * k, k * n)
        x, lab = y, "".join(batch + left + right)
    x, lab = summed(x, lab, set(out))
    result = cast_to(rt, stream, arranged(x, lab, list(out)), inputs[0].dtype)
    if any(result is t for t in inputs):
        result = DeviceTensor(result.ptr, result.shape, result.dtype)  # an alias of the input
    return s.done(result)


# ---------------------------------------------------------------- data movement by index tensors


def _along(rt, stream, s, values, axis, rank):
    """A host int64 vector as a device tensor shaped to broadcast along `axis` of a rank-`rank` tensor."""
    shape = tuple(-1 if d == axis else 1 for d in range(rank))
    return s(rt.device(DeviceTensor.on_host(np.asarray(values, np.int64).reshape(shape)), stream))


@kernel("ReverseSequence", since=10, types=MOVABLE, device="cuda")
def reverse_sequence(rt, stream, x, sequence_lens, *, batch_axis=1, time_axis=0):
    """The first sequence_lens[b] steps along time_axis reversed for each batch entry b: a source step
    per element computed on the GPU (the lengths stay there), then GatherElements."""
    if sequence_lens.shape != (x.shape[batch_axis],):  # read as one length a batch entry
        raise InvalidArgument(f"sequence_lens shape must be {{batch_size}}. Got:{sequence_lens.shape}. "
                              f"batch_size={x.shape[batch_axis]}")
    s = Scratch(rt, x, sequence_lens)
    rank = len(x.shape)
    steps = _along(rt, stream, s, np.arange(x.shape[time_axis]), time_axis, rank)
    along_batch = tuple(x.shape[batch_axis] if d == batch_axis else 1 for d in range(rank))
    lens = s(cast_to(rt, stream, DeviceTensor(sequence_lens.ptr, along_batch, sequence_lens.dtype), I64))
    back = s(binary(rt, stream, SUB, s(binary(rt, stream, SUB, lens, s(device_scalar(rt, stream, 1, I64)))), steps))
    source = s(where(rt, stream, s(compare(rt, stream, LESS, steps, lens)), back, steps)[0])
    return s.done(*gather_elements(rt, stream, x, s(broadcast_to(rt, stream, source, x.shape)), axis=time_axis))


@kernel("TensorScatter", since=24, types=MOVABLE, device="cuda",
        check=lambda n, g: None if n.attrs.get("mode", "linear") in ("linear", "circular") else "mode not defined")
def tensor_scatter(rt, stream, past_cache, update, write_indices=None, *, axis=-2, mode="linear"):
    """update written into a copy of the cache along `axis` from write_indices[b] (0 without), wrapping
    in circular mode: positions computed on the GPU, then ScatterElements (positions past the cache
    are skipped, never written outside it)."""
    rank = len(past_cache.shape)
    axis = checks.axis(axis, rank)
    if write_indices is not None and write_indices.shape != (past_cache.shape[0],):  # one start a batch entry
        raise ValueError(f"TensorScatter: write_indices must have shape [batch_size] ({past_cache.shape[0]}), got "
                         f"{write_indices.shape}")
    s = Scratch(rt, past_cache, update, write_indices)
    steps = _along(rt, stream, s, np.arange(update.shape[axis]), axis, rank)
    if write_indices is not None:
        starts = s(cast_to(rt, stream, DeviceTensor(write_indices.ptr, (past_cache.shape[0],) + (1,) * (rank - 1),
                                                    write_indices.dtype), I64))
        steps = s(binary(rt, stream, ADD, steps, starts))
    if mode == "circular":
        steps = s(binary(rt, stream, MOD, steps, s(device_scalar(rt, stream, past_cache.shape[axis], I64))))
    return s.done(*scatter_elements(rt, stream, past_cache, s(broadcast_to(rt, stream, steps, update.shape)), update,
                                    axis=axis))


@kernel("MaxUnpool", since=9, types=MOVABLE, device="cuda", host_inputs=(2,))
def max_unpool(rt, stream, x, indices, output_shape=None, *, kernel_shape, pads=None, strides=None):
    """x scattered to the flat positions `indices` of the pooled-from shape (zeros elsewhere), then
    placed at the start of output_shape, as the spec's reference does (kernels/cpu/nn.py)."""
    if indices.shape != x.shape:  # an index per value
        raise ValueError(f"Index tensor shape should be same as that of the input data tensor to unpool: "
                         f"{indices.shape} and {x.shape}")
    inferred = pooled_from(x.shape, kernel_shape, strides, pads)
    s = Scratch(rt, x, indices)
    flat = s(rt.alloc((math.prod(inferred),), x.dtype))
    rt.zero(flat, stream)
    (y,) = scatter_elements(rt, stream, flat, DeviceTensor(indices.ptr, (indices.size,), indices.dtype),
                            DeviceTensor(x.ptr, (x.size,), x.dtype), axis=0)
    y = DeviceTensor(y.ptr, inferred, y.dtype)
    if output_shape is None:
        return s.done(y)
    s(y)
    shape = tuple(int(d) for d in rt.to_host(output_shape, stream).reshape(-1))
    if len(shape) != len(inferred) or any(o < i for o, i in zip(shape, inferred)):
        raise ValueError(f"MaxUnpool: output_shape {shape} is smaller than the unpooled shape {inferred}")
    out = rt.alloc(shape, x.dtype)
    rt.zero(out, stream)
    rt.strided_copy(stream, y, out, inferred, contiguous_strides(inferred), contiguous_strides(shape))
    return s.done(out)


@kernel("AffineGrid", since=20, types=GPU_FLOATS, device="cuda", host_inputs=(1,))
def affine_grid(rt, stream, theta, size, *, align_corners=0):
    """The base points (kernels/cpu/spatial.py's, made on the host for the size) times each batch's
    theta transposed: one batched product, the base shared by every batch (stride 0)."""
    dims = [int(d) for d in rt.to_host(size, stream).reshape(-1)[2:]]
    nd, batch = len(dims), theta.shape[0]
    if theta.shape[1:] != (nd, nd + 1):
        raise ValueError(f"AffineGrid: theta of shape {theta.shape} for a {nd}-D size: "
                         f"({batch}, {nd}, {nd + 1}) expected")
    s = Scratch(rt, theta, size)
    base = s(rt.device(DeviceTensor.on_host(affine_base(dims, align_corners).astype(theta.dtype)), stream))
    points = math.prod(dims)
    y = rt.alloc((batch,) + tuple(dims) + (nd,), theta.dtype)
    batched_product(rt, stream, base, theta, y, points, nd, nd + 1, batch, 0, nd * (nd + 1), trans_b=True)
    return s.done(y)


# ---------------------------------------------------------------- ai.onnx.ml

ML = "ai.onnx.ml"


@kernel("Binarizer", domain=ML, types=frozenset([np.dtype(np.float32)]), device="cuda")
def binarizer(rt, stream, x, *, threshold=0.0):
    """1 where x > threshold, else 0, in float32 (the schema's other types, double and integers, stay on
    the CPU EP; float16 is not in the schema)."""
    s = Scratch(rt, x)
    above = s(compare(rt, stream, GREATER, x, s(device_scalar(rt, stream, np.array(threshold, x.dtype), x.dtype))))
    return s.done(cast_to(rt, stream, above, x.dtype))


@kernel("ArrayFeatureExtractor", domain=ML, types=MOVABLE, device="cuda",
        check=lambda n, g: None if g.value(n.inputs[1]).dtype == I64 else "int64 indices only on CUDA")
def array_feature_extractor(rt, stream, x, indices):
    """The elements `indices` of x's last axis (Gather); a vector x gives a one-row matrix, as ORT."""
    flat = DeviceTensor(indices.ptr, (indices.size,), indices.dtype)
    (y,) = gather(rt, stream, x, flat, axis=len(x.shape) - 1)
    return (DeviceTensor(y.ptr, (1, indices.size) if len(x.shape) == 1 else y.shape, y.dtype),)
