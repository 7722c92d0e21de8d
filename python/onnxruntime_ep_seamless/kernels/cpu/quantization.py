"""Linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, QLinearMatMul,
QLinearConv, ConvInteger (ONNX semantics).

Scale and zero point are a scalar (per tensor), a vector along `axis` (per axis), or, with
`block_size`, a tensor of x's shape with that axis divided into blocks (blocked). Quantized
integers round half to even and saturate to the type's range; as ORT does, arithmetic is float32.
"""
import numpy as np

from .. import checks
from ..registry import FLOATS, LOW_PRECISION, NUMERIC, kernel
from ...graph.ir import attr_dtype
from .elementwise import _cast
from .nn import conv

_F32 = np.dtype(np.float32)
_FLOAT8 = frozenset(attr_dtype(t) for t in (17, 18, 19, 20)) - {None}
_FLOAT4 = attr_dtype(23)


def _range(dtype):
    """(min, max) of an integer quantized type (ml_dtypes' 4- and 2-bit types included)."""
    try:
        info = np.iinfo(dtype)
    except ValueError:
        import ml_dtypes
        info = ml_dtypes.iinfo(dtype)
    return int(info.min), int(info.max)


def _broadcastable(value, shape, axis, block_size):
    """Scale or zero point shaped to broadcast against x (see the module docstring)."""
    if value.ndim == 0 or value.size == 1 and not block_size:
        return value.reshape(())
    axis = checks.axis(axis, len(shape))
    if not block_size:
        if value.ndim != 1 or value.size != shape[axis]:
            raise ValueError(f"For per axis quantization, scale must be 1D tensor with size {shape[axis]}, got "
                             f"shape {value.shape}")
        dims = [1] * len(shape)
        dims[axis] = value.size
        return value.reshape(dims)
    blocks = -(-shape[axis] // block_size)
    if value.shape != tuple(blocks if a == axis else d for a, d in enumerate(shape)):
        raise ValueError(f"x_scale must be ceil(Di/block_size) on the quantize axis i for blocked quantization: "
                         f"scale {value.shape}, x {tuple(shape)}, axis {axis}, block_size {block_size}")
    return np.repeat(value, block_size, axis=axis).take(range(shape[axis]), axis=axis)


def _quantize(x, scale, zero_point, out_dtype, saturate=1):
    """x / scale (+ zero point), as out_dtype."""
    q = x.astype(_F32) / scale.astype(_F32)
    if out_dtype in _FLOAT8:
        return _cast(q, out_dtype, saturate)  # a float8 zero point must be 0
    if out_dtype == _FLOAT4:
        return (q + (0 if zero_point is None else zero_point.astype(_F32))).astype(out_dtype)
    q = np.rint(q)
    if zero_point is not None:
        q += zero_point.astype(_F32)
    low, high = _range(out_dtype)
    return np.clip(q, low, high).astype(out_dtype)


def _dequantize(x, scale, zero_point):
    wide = x.astype(_F32)
    if zero_point is not None and x.dtype not in _FLOAT8 and x.dtype != _FLOAT4:
        wide = wide - zero_point.astype(_F32)
    return wide * scale.astype(_F32)


def _check_quantize(node, graph):
    if node.attrs.get("precision", 0) not in (0, 1):
        return f"precision={node.attrs['precision']} not supported (float32 arithmetic only)"
    out = graph.value(node.outputs[0]).dtype
    if out is not None and out not in NUMERIC and out not in LOW_PRECISION:
        return f"quantizing to {out} is not supported"
    return None


@kernel("QuantizeLinear", since=10, types=FLOATS | LOW_PRECISION | {np.dtype(np.int32)}, check=_check_quantize)
def quantize_linear(x, y_scale, y_zero_point=None, *, axis=1, block_size=0, output_dtype=0, precision=0,
                    saturate=1):
    if y_zero_point is not None:
        out_dtype = y_zero_point.dtype
    elif output_dtype:
        out_dtype = attr_dtype(output_dtype)
    else:
        out_dtype = np.dtype(np.uint8)
    scale = _broadcastable(y_scale, x.shape, axis, block_size)
    zero = None if y_zero_point is None else _broadcastable(y_zero_point, x.shape, axis, block_size)
    return (_quantize(x, scale, zero, out_dtype, saturate),)


@kernel("DequantizeLinear", since=10, types=NUMERIC | LOW_PRECISION)
def dequantize_linear(x, x_scale, x_zero_point=None, *, axis=1, block_size=0, output_dtype=0):
    scale = _broadcastable(x_scale, x.shape, axis, block_size)
    zero = None if x_zero_point is None else _broadcastable(x_zero_point, x.shape, axis, block_size)
    out_dtype = attr_dtype(output_dtype) if output_dtype else x_scale.dtype
    return (_dequantize(x, scale, zero).astype(out_dtype, copy=False),)


@kernel("DynamicQuantizeLinear", since=11, types={_F32})
def dynamic_quantize_linear(x):
    # uint8 over [min(x, 0), max(x, 0)]: the range always includes 0, so 0 is exactly representable;
    # an all-zero x gets scale 1 (stock ORT's choice; the spec's formula would divide by 0)
    low, high = x.min(initial=0), x.max(initial=0)
    scale = (high - low) / np.float32(255) if high != low else np.float32(1)
    zero_point = np.clip(np.rint(-low / scale), 0, 255)
    y = _quantize(x, scale, zero_point, np.dtype(np.uint8))
    return y, np.asarray(scale, _F32), np.asarray(zero_point, np.uint8)


# --- integer matmul and conv --------------------------------------------------------------

def _centered(q, zero_point, per_row=False):
    """q - zero_point as float64 (exact for 8- and 16-bit integers), a vector zero point per row of
    A (per_row) or per column of B."""
    wide = q.astype(np.float64)
    if zero_point is None:
        return wide
    z = zero_point.astype(np.float64)
    if z.ndim == 1 and z.size > 1 and per_row:
        z = z.reshape(-1, 1)
    return wide - z


def _requantize(acc, multiplier, y_zero_point):
    """Round acc * multiplier to y_zero_point's type, shifted by it. The product is float64, as in
    the spec's reference (ORT's float32 product rounds some halves the other way)."""
    y = np.rint(acc * multiplier.astype(np.float64)) + y_zero_point.astype(np.float64)
    low, high = _range(y_zero_point.dtype)
    return np.clip(y, low, high).astype(y_zero_point.dtype)


_INT8S = frozenset(map(np.dtype, (np.int8, np.uint8)))


@kernel("QLinearMatMul", since=10, types=_INT8S)
def qlinear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    acc = np.matmul(_centered(a, a_zero_point, per_row=True), _centered(b, b_zero_point))
    a_s = a_scale.reshape(-1, 1) if a_scale.size > 1 else a_scale
    multiplier = a_s * b_scale / y_scale  # in the scales' type, as the reference
    return (_requantize(acc, multiplier, y_zero_point),)


def _conv_accumulate(x, x_zero_point, w, w_zero_point, attrs):
    """The int32 accumulator of an integer convolution, through float64 (exact)."""
    x = _centered(x, x_zero_point)
    w = w.astype(np.float64)
    if w_zero_point is not None:
        z = w_zero_point.astype(np.float64)
        w = w - (z.reshape((-1,) + (1,) * (w.ndim - 1)) if z.size > 1 else z)
    (acc,) = conv(x, w, **attrs)
    return acc


@kernel("ConvInteger", since=10, types=_INT8S)
def conv_integer(x, w, x_zero_point=None, w_zero_point=None, *, auto_pad="NOTSET", dilations=None, group=1,
                 kernel_shape=None, pads=None, strides=None):
    attrs = dict(auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads,
                 strides=strides)
    return (np.rint(_conv_accumulate(x, x_zero_point, w, w_zero_point, attrs)).astype(np.int32),)


@kernel("QLinearConv", since=10, types=_INT8S)
def qlinear_conv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B=None, *,
                 auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    attrs = dict(auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads,
                 strides=strides)
    acc = _conv_accumulate(x, x_zero_point, w, w_zero_point, attrs)
    spatial = (1,) * (acc.ndim - 2)
    if B is not None:
        acc = acc + B.astype(np.float64).reshape((-1,) + spatial)
    w_s = w_scale.astype(_F32)
    multiplier = x_scale.astype(_F32) * (w_s.reshape((-1,) + spatial) if w_s.size > 1 else w_s) \
        / y_scale.astype(_F32)
    return (_requantize(acc, multiplier, y_zero_point),)
