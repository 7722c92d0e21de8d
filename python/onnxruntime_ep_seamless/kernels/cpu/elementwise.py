"""Elementwise ops (ONNX semantics, numpy broadcasting), ORT's GELU-family activations (com.microsoft Gelu,
FastGelu, QuickGelu, BiasGelu) and plan/fusion.py's GeluErf.

numpy >= 2 follows NEP 50: a Python float/int scalar never widens an array's dtype, so
`alpha * x` stays float32/float16. Where a formula would still widen (integer inputs with
float attributes, mixed-type Pow), the result is cast back to the ONNX output type.
"""
import functools
import math

import numpy as np

from ..checks import InvalidArgument
from ..registry import ALL, BOOL, FLOATS, FUSED_DOMAIN, LOW_PRECISION, NUMERIC, SIGNED, kernel
from ...graph.ir import FLOAT8_TYPES, NUMPY_TO_ONNX, ONNX_TO_NUMPY, STRING, attr_dtype, exotic
from . import native

UNSIGNED = frozenset(map(np.dtype, (np.uint8, np.uint16, np.uint32, np.uint64)))
_quiet = np.errstate(all="ignore")  # nan/inf/overflow are the values ONNX asks for, not errors


def via_float32(fn):
    """float16 inputs are computed in float32 and rounded once at the end, as ORT's CPU kernels do;
    composite formulas would otherwise round after every step."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if getattr(args[0], "dtype", None) != np.float16:
            return fn(*args, **kwargs)
        wide = [a.astype(np.float32) if a is not None and a.dtype == np.float16 else a for a in args]
        return tuple(r.astype(np.float16) for r in fn(*wide, **kwargs))
    return wrapper


# ---------------------------------------------------------------- binary arithmetic

@kernel("Add", since=7, types=NUMERIC)
def add(a, b):
    return (a + b,)


@kernel("Sub", since=7, types=NUMERIC)
def sub(a, b):
    return (a - b,)


@kernel("Mul", since=7, types=NUMERIC)
def mul(a, b):
    return (a * b,)


@kernel("Div", since=7, types=NUMERIC)
@_quiet
def div(a, b):
    if a.dtype.kind in "iu":
        _no_integer_zero(b, "division")
        return (_trunc_divide(a, b),)
    return (a / b,)


def _no_integer_zero(b, what):
    if not b.all():  # stock ORT refuses what C would trap on
        raise ValueError(f"Integer {what} by zero")


def _trunc_divide(a, b):
    """Integer division rounding toward zero (C semantics), not numpy's floor."""
    q = np.floor_divide(a, b)
    inexact_negative = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
    return q + inexact_negative.astype(q.dtype)


def _check_pow(node, graph):
    exponent = graph.value(node.inputs[1]).dtype
    if exponent is not None and exponent not in NUMERIC:
        return f"exponent dtype {exponent} not supported"
    return None


def square_or_cube(x, y) -> int | None:
    """2 or 3 where Pow(x, y) is stock's x * x or (x * x) * x (a float base, an exponent of one element equal to
    2 or 3; ORT computes those by products, any other power by std::pow), else None."""
    if x.dtype.kind != "f" or y.size != 1:
        return None
    e = float(y.reshape(-1)[0])
    return int(e) if e in (2.0, 3.0) else None


@kernel("Pow", since=7, types=NUMERIC, check=_check_pow)
@_quiet
def pow_(x, y):
    # The output has the base's type (base and exponent may differ since opset 12).
    power = square_or_cube(x, y)
    if power:
        r = x * x if power == 2 else x * x * x
        return (r.reshape(np.broadcast_shapes(x.shape, y.shape)),)
    if x.dtype.kind in "iu":
        # Integer powers go through double and truncate back, like ORT's std::pow; numpy's
        # integer power would reject negative exponents.
        return (np.power(x.astype(np.float64), y.astype(np.float64)).astype(x.dtype),)
    return (np.power(x, y).astype(x.dtype, copy=False),)


def _check_mod(node, graph):
    dtype = graph.value(node.inputs[0]).dtype
    if dtype in FLOATS and not node.attrs.get("fmod", 0):
        return "Mod on floating-point inputs requires fmod=1"
    return None


@kernel("Mod", since=10, types=NUMERIC, check=_check_mod)
@_quiet
def mod(a, b, *, fmod=0):
    # fmod=1: C fmod, result has the dividend's sign; fmod=0: Python %, result has the divisor's sign.
    if a.dtype.kind in "iu":
        _no_integer_zero(b, "modulo")
    return (np.fmod(a, b) if fmod else np.mod(a, b),)


# ---------------------------------------------------------------- unary math

@kernel("Sqrt", since=6, types=FLOATS)
@_quiet
def sqrt(x):
    return (np.sqrt(x),)


@kernel("Reciprocal", since=6, types=FLOATS)
@_quiet
def reciprocal(x):
    return (np.reciprocal(x),)


@kernel("Neg", since=6, types=SIGNED)
def neg(x):
    return (np.negative(x),)


@kernel("Abs", since=6, types=NUMERIC)
def abs_(x):
    return (np.abs(x),)


@kernel("Exp", since=6, types=FLOATS)
@_quiet
def exp(x):
    return (np.exp(x),)


@kernel("Log", since=6, types=FLOATS)
@_quiet
def log(x):
    return (np.log(x),)


@kernel("Erf", since=9, types=FLOATS)
@via_float32
def erf(x):
    from .native import erf as native_erf  # numpy has no erf
    return (native_erf(x),)


@kernel("Tanh", since=6, types=FLOATS)
def tanh(x):
    return (np.tanh(x),)


@kernel("Sigmoid", since=6, types=FLOATS)
@via_float32
@_quiet
def sigmoid(x):
    # exp(-|x|) never overflows; pick the algebraically equal form per sign.
    e = np.exp(-np.abs(x))
    return (np.where(x >= 0, 1 / (1 + e), e / (1 + e)),)


@kernel("Sin", since=7, types=FLOATS)
def sin(x):
    return (np.sin(x),)


@kernel("Cos", since=7, types=FLOATS)
def cos(x):
    return (np.cos(x),)


@kernel("Tan", since=7, types=FLOATS)
def tan(x):
    return (np.tan(x),)


@kernel("Asin", since=7, types=FLOATS)
@_quiet
def asin(x):
    return (np.arcsin(x),)


@kernel("Acos", since=7, types=FLOATS)
@_quiet
def acos(x):
    return (np.arccos(x),)


@kernel("Atan", since=7, types=FLOATS)
def atan(x):
    return (np.arctan(x),)


@kernel("Sinh", since=9, types=FLOATS)
@_quiet
def sinh(x):
    return (np.sinh(x),)


@kernel("Cosh", since=9, types=FLOATS)
@_quiet
def cosh(x):
    return (np.cosh(x),)


@kernel("Asinh", since=9, types=FLOATS)
def asinh(x):
    return (np.arcsinh(x),)


@kernel("Acosh", since=9, types=FLOATS)
@_quiet
def acosh(x):
    return (np.arccosh(x),)


@kernel("Atanh", since=9, types=FLOATS)
@_quiet
def atanh(x):
    return (np.arctanh(x),)


@kernel("Floor", since=6, types=FLOATS)
def floor(x):
    return (np.floor(x),)


@kernel("Ceil", since=6, types=FLOATS)
def ceil(x):
    return (np.ceil(x),)


@kernel("Round", since=11, types=FLOATS)
def round_(x):
    return (np.round(x),)  # halves to even, as ONNX specifies


@kernel("Sign", since=9, types=NUMERIC)
def sign(x):
    return (np.sign(x),)


@kernel("IsNaN", since=9, types=FLOATS)
def isnan(x):
    return (np.isnan(x),)


@kernel("IsInf", since=10, types=FLOATS)
def isinf(x, *, detect_negative=1, detect_positive=1):
    return ((np.isposinf(x) & bool(detect_positive)) | (np.isneginf(x) & bool(detect_negative)),)


# ---------------------------------------------------------------- activations

@kernel("Relu", since=6, types=SIGNED)
def relu(x):
    return (np.maximum(x, 0),)


@kernel("LeakyRelu", since=6, types=FLOATS)
def leaky_relu(x, *, alpha=0.01):
    return (np.where(x >= 0, x, x * alpha),)


@kernel("PRelu", since=7, types=SIGNED)
def prelu(x, slope):
    # slope broadcasts unidirectionally to x
    return (np.where(x < 0, x * slope, x).astype(x.dtype, copy=False),)


@kernel("ThresholdedRelu", since=10, types=FLOATS)
def thresholded_relu(x, *, alpha=1.0):
    return (np.where(x > alpha, x, 0).astype(x.dtype, copy=False),)


@kernel("Elu", since=6, types=FLOATS)
@via_float32
@_quiet
def elu(x, *, alpha=1.0):
    return (np.where(x >= 0, x, alpha * np.expm1(x)),)


@kernel("Selu", since=6, types=FLOATS)
@via_float32
@_quiet
def selu(x, *, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875):
    return (gamma * np.where(x > 0, x, alpha * np.expm1(x)),)


@kernel("Celu", since=12, types=FLOATS)
@via_float32
@_quiet
def celu(x, *, alpha=1.0):
    return (np.maximum(x, 0) + np.minimum(0, alpha * np.expm1(x / alpha)),)


def _check_gelu(node, graph):
    approximate = node.attrs.get("approximate", "none")
    return None if approximate in ("none", "tanh") else f"Gelu approximate={approximate!r} is not defined"


@kernel("Gelu", since=20, types=FLOATS, check=_check_gelu)
@via_float32
def gelu(x, *, approximate="none"):
    # Python-float constants: a numpy float64 scalar would widen float32 math to float64.
    if approximate == "tanh":
        inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
        return (0.5 * x * (1 + np.tanh(inner)),)
    if x.dtype == F32:  # the native step's arithmetic (elementwise.c seamless_gelu_f32), in every run alike
        return (native.gelu(x),)
    from .native import erf as native_erf  # numpy has no erf
    return (0.5 * x * (1 + native_erf(x * math.sqrt(0.5))),)


@kernel("HardSigmoid", since=6, types=FLOATS)
@via_float32
def hard_sigmoid(x, *, alpha=0.2, beta=0.5):
    return (np.clip(alpha * x + beta, 0, 1),)


@kernel("HardSwish", since=14, types=FLOATS)
@via_float32
def hard_swish(x):
    return (x * np.clip(x / 6 + 0.5, 0, 1),)


@kernel("Softplus", since=1, types=FLOATS)
@via_float32
@_quiet
def softplus(x):
    return (np.logaddexp(x, 0),)  # log(exp(x) + 1) without overflow


@kernel("Softsign", since=1, types=FLOATS)
@via_float32
@_quiet
def softsign(x):
    return (x / (1 + np.abs(x)),)


@kernel("Shrink", since=9, types=NUMERIC)
def shrink(x, *, bias=0.0, lambd=0.5):
    y = np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0))
    return (y.astype(x.dtype, copy=False),)  # integer x with float bias computes wider


@kernel("Swish", since=24, types=FLOATS)
@via_float32
@_quiet
def swish(x, *, alpha=1.0):
    return (x * sigmoid(alpha * x)[0],)


@kernel("Mish", since=18, types=FLOATS)
@via_float32
@_quiet
def mish(x):
    return (x * np.tanh(np.logaddexp(x, 0)),)


# ---------------------------------------------------------------- Clip

@kernel("Clip", since=6, until=10, types=FLOATS)
def clip_6(x, *, min=-np.inf, max=np.inf):
    return (np.minimum(np.maximum(x, min), max),)


@kernel("Clip", since=11, types=NUMERIC)
def clip_11(x, min=None, max=None):
    # min > max yields max everywhere, as the spec says: min is applied first.
    if min is not None:
        x = np.maximum(x, min)
    if max is not None:
        x = np.minimum(x, max)
    return (x,)


# ---------------------------------------------------------------- variadic

@kernel("Min", since=6, types=NUMERIC)
def min_(*inputs):
    return (functools.reduce(np.minimum, inputs),)


@kernel("Max", since=6, types=NUMERIC)
def max_(*inputs):
    return (functools.reduce(np.maximum, inputs),)


@kernel("Sum", since=6, types=FLOATS)
@via_float32
def sum_(*inputs):
    return (functools.reduce(np.add, inputs),)


@kernel("Mean", since=6, types=FLOATS)
@via_float32
def mean(*inputs):
    return (functools.reduce(np.add, inputs) / len(inputs),)


# ---------------------------------------------------------------- selection, comparison, logic

@kernel("Where", since=9, types=ALL | {STRING}, type_input=1, takes=("strings",))
def where(condition, x, y):
    return (np.where(condition, x, y),)


@kernel("Equal", since=7, types=ALL | {STRING}, takes=("strings",))  # strings from opset 19 (ORT's schema says)
def equal(a, b):
    return (np.equal(a, b),)


@kernel("Less", since=7, types=NUMERIC)
def less(a, b):
    return (np.less(a, b),)


@kernel("Greater", since=7, types=NUMERIC)
def greater(a, b):
    return (np.greater(a, b),)


@kernel("LessOrEqual", since=12, types=NUMERIC)
def less_or_equal(a, b):
    return (np.less_equal(a, b),)


@kernel("GreaterOrEqual", since=12, types=NUMERIC)
def greater_or_equal(a, b):
    return (np.greater_equal(a, b),)


@kernel("Not", since=1, types=BOOL)
def not_(x):
    return (np.logical_not(x),)


@kernel("And", since=7, types=BOOL)
def and_(a, b):
    return (np.logical_and(a, b),)


@kernel("Or", since=7, types=BOOL)
def or_(a, b):
    return (np.logical_or(a, b),)


@kernel("Xor", since=7, types=BOOL)
def xor(a, b):
    return (np.logical_xor(a, b),)


def check_bitshift(node, graph):
    direction = node.attrs.get("direction")
    return None if direction in ("LEFT", "RIGHT") else f"BitShift direction={direction!r} is not defined"


@kernel("BitShift", since=11, types=UNSIGNED, check=check_bitshift)
def bit_shift(x, y, *, direction):
    return ((np.left_shift if direction == "LEFT" else np.right_shift)(x, y),)


INTEGERS = frozenset(t for t in NUMERIC if t.kind in "iu")


@kernel("BitwiseAnd", since=18, types=INTEGERS)
def bitwise_and(a, b):
    return (np.bitwise_and(a, b),)


@kernel("BitwiseOr", since=18, types=INTEGERS)
def bitwise_or(a, b):
    return (np.bitwise_or(a, b),)


@kernel("BitwiseXor", since=18, types=INTEGERS)
def bitwise_xor(a, b):
    return (np.bitwise_xor(a, b),)


@kernel("BitwiseNot", since=18, types=INTEGERS)
def bitwise_not(x):
    return (np.invert(x),)


# ---------------------------------------------------------------- casts and pass-through

def _check_cast(node, graph):
    to = node.attrs.get("to")
    if attr_dtype(to) is None:
        return f"Cast to ONNX type {to} is not supported (complex numbers are not held)"
    if attr_dtype(to) == STRING:
        return "Cast to strings is not supported (stock's number formatting)"
    return None


# by ORT's element type (graph/ir.py ONNX_TO_NUMPY: no ml_dtypes import for models without them)
_E8M0 = 26
_SUB_BYTE_INTS = {21: (4, False), 22: (4, True), 24: (2, False), 25: (2, True)}  # 2-/4-bit integers: bits, signed


def _to_sub_byte_int(x, dtype):
    """As stock ORT casts to a 2-/4-bit integer: floats rounded half away from zero (0 where not finite or
    beyond 32 bits), then the low bits kept (wrapping around), as the ONNX node tests expect."""
    bits, signed = _SUB_BYTE_INTS[NUMPY_TO_ONNX[dtype]]
    if x.dtype.kind in "iub":
        v = x.astype(np.int64)
    else:
        w = x.astype(np.float64)
        r = np.trunc(w + np.copysign(0.5, w))
        v = np.where(np.isfinite(r) & (np.abs(r) < 2.0**31), r, 0).astype(np.int64)
    v &= (1 << bits) - 1
    if signed:
        v = np.where(v >= 1 << (bits - 1), v - (1 << bits), v)
    return v.astype(np.int8).astype(dtype)


def cast_array(x, dtype, saturate=1, round_mode="up"):
    """x as `dtype`, with ONNX's rules for the float8 types (saturate, round_mode)."""
    if x.dtype == dtype:
        return x
    code = NUMPY_TO_ONNX.get(dtype)
    if code in FLOAT8_TYPES and saturate:
        # out-of-range values (infinities too) become the type's largest finite value, with their sign
        import ml_dtypes
        info = ml_dtypes.finfo(dtype)
        wide = x.astype(np.float64 if x.dtype == np.float64 else np.float32)
        return np.clip(wide, float(info.min), float(info.max)).astype(dtype)
    if code == _E8M0:
        return _to_e8m0(x.astype(np.float32), saturate, round_mode)
    if code in _SUB_BYTE_INTS:
        return _to_sub_byte_int(x, dtype)
    if exotic(x.dtype) and exotic(dtype):
        return x.astype(np.float32).astype(dtype)  # between two ml_dtypes types, through float32
    return x.astype(dtype)


def _to_e8m0(x, saturate, round_mode):
    """float32 -> float8e8m0 (a biased power-of-two exponent): the float32 exponent, rounded by the
    mantissa as round_mode says ("up", "down", "nearest"); NaN and infinities become NaN (0xFF)."""
    bits = x.view(np.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(np.uint16)
    special = exponent == 0xFF
    if round_mode == "nearest":
        guard, rest = (bits & 0x400000) > 0, (bits & 0x3FFFFF) > 0
        up = guard & (rest | (exponent > 0))
    elif round_mode == "up":
        up = (bits & 0x7FFFFF) > 0
    else:  # "down"
        up = np.zeros(x.shape, bool)
    up &= ~special
    if saturate:
        up &= exponent != 0xFE  # never round past the largest value
    exponent = np.where(special, 0xFF, exponent + up).astype(np.uint8)
    return exponent.view(ONNX_TO_NUMPY[_E8M0])


def _check_round_mode(node, graph):
    mode = node.attrs.get("round_mode", "up")
    return None if mode in ("up", "down", "nearest") else f"round_mode={mode!r} is not defined"


def _check_cast_all(node, graph):
    return _check_cast(node, graph) or _check_round_mode(node, graph)


@kernel("Cast", since=6, types=ALL | LOW_PRECISION, check=_check_cast_all)
@_quiet
def cast(x, *, to, saturate=1, round_mode="up"):
    # saturate and round_mode only affect the float8 targets
    return (cast_array(x, attr_dtype(to), saturate, round_mode),)


@kernel("CastLike", since=15, types=ALL | LOW_PRECISION, check=_check_round_mode)
@_quiet
def cast_like(x, target_type, *, saturate=1, round_mode="up"):
    return (cast_array(x, target_type.dtype, saturate, round_mode),)


def check_bitcast(node, graph):
    src, dst = graph.value(node.inputs[0]).dtype, attr_dtype(node.attrs.get("to"))
    if dst is None or exotic(dst) or exotic(src):
        return f"BitCast to ONNX type {node.attrs.get('to')} is not supported"
    if src is not None and src.itemsize != dst.itemsize:
        return f"BitCast between {src} and {dst}: the bit widths differ"
    return None


@kernel("BitCast", since=26, types=ALL, check=check_bitcast)
def bit_cast(x, *, to):
    # the same bits, read as another type of the same width
    return ((x if x.flags.c_contiguous else x.copy()).view(attr_dtype(to)),)


@kernel("Identity", since=1, types=ALL | LOW_PRECISION | {STRING}, takes=("strings", "sequences", "optionals"))
def identity(x):
    return (x,)


@kernel("Dropout", since=7, until=9, types=FLOATS)
def dropout_7(x, *, ratio=0.5, _num_outputs=1):
    # Inference: a pass-through. The spec leaves the mask's values open before opset 12;
    # ORT writes zeros, so do we. Before opset 10 the mask has the data's type.
    return (x, np.zeros_like(x))[:_num_outputs]


@kernel("Dropout", since=10, until=11, types=FLOATS)
def dropout_10(x, *, ratio=0.5, _num_outputs=1):
    return (x, np.zeros(x.shape, dtype=np.bool_))[:_num_outputs]


@kernel("Dropout", since=12, types=FLOATS)
def dropout_12(x, ratio=None, training_mode=None, *, seed=None, _num_outputs=1):
    # inference (no training_mode, or False) and a ratio of 0: output = data, mask = all True
    training = training_mode is not None and bool(np.asarray(training_mode).reshape(-1)[0])
    rate = 0.5 if ratio is None else float(np.asarray(ratio).reshape(-1)[0])
    if not 0 <= rate < 1:  # checked in inference too, as stock does (FAIL: its enforcement)
        raise ValueError("ratio must be in the range [0, 1)")
    if not training or rate == 0:
        return (x, np.ones(x.shape, dtype=np.bool_))[:_num_outputs]
    # training: a random mask (as stock's, never the same numbers), the kept values scaled by 1 / (1 - ratio)
    mask = np.random.default_rng(seed).random(x.shape) >= rate
    return (np.where(mask, x / x.dtype.type(1 - rate), x.dtype.type(0)).astype(x.dtype), mask)[:_num_outputs]


# ---------------------------------------------------------------- ORT's GELU-family activations (com.microsoft)
#
# float16 is computed in float32 and rounded once, as ORT does.

F32 = np.dtype(np.float32)
GELU_FLOATS = frozenset(map(np.dtype, (np.float16, np.float32)))


def _f32(x):
    return x.astype(F32, copy=False)


def check_bias(x, bias) -> None:
    """A bias vector over x's last axis (stock's check; the CUDA kernels' too)."""
    if bias is not None and (len(bias.shape) != 1 or not x.shape or bias.shape[0] != x.shape[-1]):
        raise InvalidArgument("Input 1 dimension 0 should have same length as the last dimension of input 0: "
                              f"{bias.shape} and {x.shape}")


@kernel("FastGelu", domain="com.microsoft", types=GELU_FLOATS)
def fast_gelu(X, bias=None):
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), with an optional bias added to x first."""
    check_bias(X, bias)
    x = _f32(X) if bias is None else _f32(X) + _f32(bias)
    inner = x * (np.float32(0.035677408136300125) * x * x + np.float32(0.7978845608028654))
    y = np.float32(0.5) * x * (np.tanh(inner) + np.float32(1))
    return (y.astype(X.dtype, copy=False),)


@kernel("QuickGelu", domain="com.microsoft", types=GELU_FLOATS)
def quick_gelu(X, *, alpha=1.702):
    """x * sigmoid(alpha * x)."""
    if X.dtype == F32 and native.HAS_QUICK_GELU and X.size:
        return (native.quick_gelu(X, alpha),)
    x = _f32(X)
    z = x * np.float32(alpha)
    e = np.exp(-np.abs(z))  # never overflows: sigmoid(z) = 1 / (1 + e) for z >= 0, e / (1 + e) below
    y = x * np.where(z >= 0, np.float32(1), e) / (np.float32(1) + e)
    return (y.astype(X.dtype, copy=False),)


@kernel("Gelu", domain="com.microsoft", types=GELU_FLOATS)
def ms_gelu(X):
    """com.microsoft Gelu (ORT's fusion of the erf form, for models before opset 20's Gelu): BiasGelu without B."""
    return (native.gelu(_f32(X)).astype(X.dtype, copy=False),)


@kernel("BiasGelu", domain="com.microsoft", types=GELU_FLOATS)
def bias_gelu(A, B):
    """gelu(A + B) with the exact erf form: 0.5 x (1 + erf(x / sqrt(2)))."""
    check_bias(A, B)
    return (native.gelu(_f32(A) + _f32(B)).astype(A.dtype, copy=False),)


def _check_gated_add(node, graph):
    if len(node.inputs) > 3 and node.inputs[3]:
        return "gate_weight (projected mode: stock implements it only on CUDA for bfloat16)"
    return None


def gated_add_shapes(x_shape, y_shape, gate_shape) -> None:
    """GatedAdd's plain mode: Y as X, a gate of one per row of X's last axis; stock's failures."""
    if len(x_shape) < 1:
        raise ValueError("X must have rank >= 1")
    if tuple(y_shape) != tuple(x_shape):
        raise ValueError("Y must have the same shape as X")
    if len(gate_shape) != len(x_shape):
        raise ValueError("gate must have the same rank as X")
    if x_shape[-1] <= 0:
        raise ValueError("X last dimension must be positive")
    if gate_shape[-1] != 1:
        raise ValueError("gate last dimension must be 1")
    for axis in range(len(x_shape) - 1):
        if gate_shape[axis] != x_shape[axis]:
            raise ValueError(f"gate dimension {axis} must match X")


@kernel("GatedAdd", domain="com.microsoft", types=GELU_FLOATS, check=_check_gated_add)
def gated_add(X, Y, gate, gate_weight=None):
    """X + Y * gate (the gate one per row), the product rounded to X's type before the add, as stock does."""
    gated_add_shapes(X.shape, Y.shape, gate.shape)
    return (X + (Y * gate).astype(X.dtype, copy=False),)


# the kernel of plan/fusion.py's GeluErf (never seen in a model; same math as the pattern)
@kernel("GeluErf", domain=FUSED_DOMAIN)
def gelu_erf(x):
    from .native import gelu
    return (gelu(x),)
