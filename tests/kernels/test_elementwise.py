"""Parity of the elementwise kernels with stock ONNX Runtime (one-node models)."""
import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from onnx import TensorProto, numpy_helper

from kernels.test_normalization import F32, MS, data, model_of
from parity import Const, assert_native_without_python_steps, assert_parity, check_node

rng = np.random.default_rng(0)
F16_RTOL = 1e-3  # float16 has an 11-bit mantissa: one rounding is ~5e-4 relative


def parity(op, *args, out=None, attrs=None, opset=17, rtol=1e-5, atol=1e-6):
    """One-node parity (tests/parity.py check_node); out: output dtype(s), default the first input's."""
    return check_node(op, list(args), attrs, opset, out if isinstance(out, list) or out is None else [out],
                      rtol=rtol, atol=atol)


def rand(shape, dtype=np.float32, low=-3.0, high=3.0):
    if np.dtype(dtype).kind in "iu":
        return rng.integers(low, high, size=shape, endpoint=True).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)


def tol(dtype):
    return dict(rtol=F16_RTOL, atol=1e-3) if dtype == np.float16 else {}


# ---------------------------------------------------------------- binary arithmetic

@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int32, np.int64, np.int8, np.uint8])
def test_arithmetic_broadcast(op, dtype):
    a = rand((2, 3, 4), dtype, 1, 9)
    b = rand((3, 1), dtype, 1, 9)
    parity(op, a, b, **tol(dtype))


@pytest.mark.parametrize("opset", [7, 13, 14])
def test_arithmetic_opsets(opset):
    parity("Add", rand((3, 4)), rand((4,)), opset=opset)
    parity("Mul", rand((1, 4)), rand((3, 1)), opset=opset)


def test_arithmetic_scalars_and_empty():
    parity("Sub", np.array(2.5, np.float32), np.array(1.25, np.float32))
    parity("Add", rand((0, 3)), rand((3,)))
    parity("Mul", rand((2, 0, 3)), rand((1, 1, 3)))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8])
def test_div_integer_truncates_toward_zero(dtype):
    a = np.array([7, -7, 7, -7, 6, -6, 0, 1], dtype)
    b = np.array([2, 2, -2, -2, 3, -4, 5, -3], dtype)
    parity("Div", a, b)


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_integer_div_mod_any_broadcast(data):
    # C-truncating Div and Python-style Mod, over random broadcastable shapes and signs
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4)).input_shapes
    a = data.draw(hnp.arrays(np.int32, shapes[0], elements=st.integers(-1000, 1000)))
    b = data.draw(hnp.arrays(np.int32, shapes[1], elements=st.integers(-50, 50).filter(bool)))
    parity("Div", a, b)
    parity("Mod", a, b)
    parity("Mod", a, b, attrs={"fmod": 1})


def test_pow():
    parity("Pow", rand((3, 4), low=0.1, high=3), rand((3, 4)))
    parity("Pow", rand((3, 4)), np.array([2.0], np.float32))  # ORT special-cases x*x
    parity("Pow", rand((3, 4)), np.array(3.0, np.float32))
    parity("Pow", rand((3, 4), np.float16, 0.1, 2), rand((4,), np.float16), **tol(np.float16))
    parity("Pow", rand((2, 3), np.float64, 0.1, 2), rand((2, 3), np.float64), opset=7)


@pytest.mark.parametrize("exponent", [np.array([2.0], np.float32), np.array(3.0, np.float32),
                                      np.array([[[2]]], np.int64), Const(np.array(2.0, np.float32)),
                                      Const(np.array([3.0], np.float32))])
def test_pow_of_two_and_three_are_stocks_products(exponent):
    """Stock's CPU Pow computes x^2 and x^3 as x * x and (x * x) * x, not by pow: the same bits in the Python kernel's
    run and the native program's (an exponent fed or constant; of another type; of higher rank), NaN and infinities
    included."""
    x = rand((5, 67), low=-40, high=40)
    x.reshape(-1)[[3, 9, 20]] = [np.nan, np.inf, -np.inf]
    parity("Pow", x, exponent, opset=15, rtol=0, atol=0)


def test_pow_mixed_types():
    # opset 12+: the exponent may have another type; the output has the base's type
    parity("Pow", rand((3, 4)), np.array([0, 1, 2, 3], np.int64), opset=13)
    parity("Pow", rand((3, 4), np.float32, 0.5, 2), rand((4,), np.float64), opset=15)
    parity("Pow", np.array([2, 3, -2, 5], np.int32), np.array([3, 2, 3, 0], np.int32), opset=13)
    parity("Pow", np.array([2, 3, 4, -2], np.int64), np.array([0.5, 2.0, 1.5, 3.0], np.float32), opset=13)
    parity("Pow", np.array([2, 1, 4, -1], np.int64), np.array([-1, -3, 2, -2], np.int64), opset=13)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8, np.uint8])
@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_integers(dtype, fmod):
    signed = np.dtype(dtype).kind == "i"
    a = np.array([7, -7, 7, -7, 5, 0, 9, -9] if signed else [7, 8, 9, 10, 5, 0, 200, 3], dtype)
    b = np.array([3, 3, -3, -3, 5, 2, 4, 4] if signed else [3, 3, 4, 7, 5, 2, 7, 4], dtype)
    parity("Mod", a, b, attrs={"fmod": fmod})


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_mod_float_fmod(dtype):
    a = rand((3, 4), dtype, -10, 10)
    b = np.array([3.0, -2.5, 1.5, 4.0], dtype)
    parity("Mod", a, b, attrs={"fmod": 1}, opset=13, **tol(dtype))


def test_mod_broadcast_opset10():
    parity("Mod", rand((2, 3), np.int32, -20, 20), np.array([7], np.int32), opset=10)


# ---------------------------------------------------------------- unary

UNARY = {  # op -> input range; the ops ORT has float16 for (it upcasts them to float32)
    "Sqrt": (0.0, 4.0), "Reciprocal": (0.5, 3.0), "Neg": None, "Abs": None, "Exp": None,
    "Log": (0.1, 5.0), "Tanh": None, "Sigmoid": (-20.0, 20.0), "Sin": None, "Cos": None, "Tan": (-1.2, 1.2),
    "Asin": (-0.99, 0.99), "Acos": (-0.99, 0.99), "Atan": None, "Sinh": None, "Cosh": None,
    "Floor": None, "Ceil": None, "Sign": None, "Softplus": (-30.0, 30.0), "Softsign": None,
    "Relu": None, "HardSwish": (-5.0, 5.0), "Mish": None,
}


@pytest.mark.parametrize("op", sorted(UNARY))
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_unary_float(op, dtype):
    low, high = UNARY[op] or (-3.0, 3.0)
    x = rand((2, 3, 5), dtype, low, high)
    opset = {"HardSwish": 14, "Mish": 18}.get(op, 17)
    parity(op, x, opset=opset, **tol(dtype))


@pytest.mark.parametrize("op", ["Sqrt", "Exp", "Tanh", "Sigmoid", "Abs", "Neg", "Floor", "Relu", "Sin"])
def test_unary_float64_and_old_opsets(op):
    x = rand((4, 3), np.float64, 0.0 if op == "Sqrt" else -3.0, 3.0)
    parity(op, x)
    opset = 9 if op == "Sin" else 6
    parity(op, rand((4, 3), low=0.0 if op == "Sqrt" else -3.0), opset=opset)


def test_unary_special_values():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e30, 88.0, -88.0], np.float32)
    for op in ["Abs", "Neg", "Exp", "Tanh", "Sigmoid", "Floor", "Ceil", "Softsign", "Relu", "Sign"]:
        parity(op, x)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_unary_signed_int(dtype):
    x = rand((3, 4), dtype, -50, 50)
    for op in ["Abs", "Neg", "Sign"]:
        parity(op, x, opset=13)
    if dtype != np.int64:  # ORT has Relu for int8/int32 only
        parity("Relu", x, opset=14)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint64])
def test_unary_unsigned_int(dtype):
    x = rand((3, 4), dtype, 0, 50)
    parity("Abs", x)
    parity("Sign", x)


def test_round_half_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49, 2.51, -3.7, 1e7 + 0.5], np.float32)
    parity("Round", x, opset=11)
    parity("Round", x[:-1].astype(np.float16))
    parity("Round", x.astype(np.float64))


def test_isnan_isinf():
    x = np.array([1.0, np.nan, np.inf, -np.inf, 0.0, -2.0], np.float32)
    parity("IsNaN", x, out=np.bool_, opset=9)
    parity("IsNaN", x.astype(np.float16), out=np.bool_, opset=20)
    parity("IsInf", x, out=np.bool_, opset=10)
    parity("IsInf", x, out=np.bool_, attrs={"detect_negative": 0})
    parity("IsInf", x.astype(np.float64), out=np.bool_, attrs={"detect_positive": 0}, opset=20)


def test_erf():
    x = rand((3, 7), low=-4, high=4)
    parity("Erf", x, opset=9)
    parity("Erf", x)
    parity("Erf", x.astype(np.float16), **tol(np.float16))


# ---------------------------------------------------------------- activations with attributes

@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_activations_with_attributes(dtype):
    x = rand((2, 3, 4), dtype, -4, 4)
    t = tol(dtype)
    parity("LeakyRelu", x, **t)
    parity("LeakyRelu", x, attrs={"alpha": 0.3}, **t)
    parity("Elu", x, **t)
    parity("Elu", x, attrs={"alpha": 0.5}, **t)
    parity("Selu", x, **t)
    parity("Selu", x, attrs={"alpha": 1.5, "gamma": 2.0}, **t)
    parity("HardSigmoid", x, **t)
    parity("HardSigmoid", x, attrs={"alpha": 0.3, "beta": 0.4}, **t)
    parity("ThresholdedRelu", x, **t)
    parity("ThresholdedRelu", x, attrs={"alpha": 0.5}, **t)
    parity("Shrink", x, **t)
    parity("Shrink", x, attrs={"lambd": 1.0, "bias": 0.5}, **t)


def test_activations_old_opsets():
    x = rand((3, 4), low=-4, high=4)
    for op in ["LeakyRelu", "Elu", "Selu", "HardSigmoid"]:
        parity(op, x, opset=6)
    parity("ThresholdedRelu", x, opset=10)
    parity("LeakyRelu", x, attrs={"alpha": 0.2}, opset=16)


def test_celu():
    x = rand((3, 4), low=-4, high=4)
    parity("Celu", x, opset=12)
    parity("Celu", x, attrs={"alpha": 2.0})


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.int64])
def test_shrink_int(dtype):
    x = rand((3, 4), dtype, -6, 6)
    parity("Shrink", x, attrs={"lambd": 1.5, "bias": 1.0})


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate):
    x = rand((2, 3, 4), low=-5, high=5)
    parity("Gelu", x, attrs={"approximate": approximate}, opset=20)
    parity("Gelu", x.astype(np.float16), attrs={"approximate": approximate}, opset=20, **tol(np.float16))


def test_gelu_default_attribute():
    parity("Gelu", rand((4, 5)), opset=20)


def test_native_erf_and_gelu_accuracy():
    """The native erf and GELU (elementwise.c, erfc by a polynomial and one exponential) against float64 math: erf to
    2.5e-7 absolute; GELU to 3e-6 relative, on the negative side too, where 1 + erf(z) is small (computed as erfc(-z),
    not as a sum that cancels), down to x = -5.6, past which it is 0 as float32's 1 + erf gives."""
    import math
    from onnxruntime_ep_seamless.kernels.cpu import native
    x = np.concatenate([np.linspace(-5.6, 12, 200001), np.linspace(-1e-3, 1e-3, 2001)]).astype(F32)
    xd = x.astype(np.float64)
    np.testing.assert_allclose(native.erf(x), [math.erf(v) for v in xd], rtol=0, atol=2.5e-7)
    want = 0.5 * xd * np.array([math.erfc(-v / math.sqrt(2)) for v in xd])
    np.testing.assert_allclose(native.gelu(x), want, rtol=3e-6, atol=1e-37)
    far = np.array([-6.0, -100.0, -np.inf, np.inf, np.nan], F32)
    np.testing.assert_array_equal(native.gelu(far), [0.0, 0.0, np.nan, np.inf, np.nan])


@pytest.mark.parametrize("opset", [7, 9, 16])
def test_prelu(opset):
    x = rand((2, 3, 4, 5), low=-3, high=3)
    parity("PRelu", x, rand((3, 1, 1), low=0, high=1), opset=opset)   # per channel
    parity("PRelu", x, np.array([0.25], np.float32), opset=opset)     # shared
    parity("PRelu", x, rand((4, 5), low=0, high=1), opset=opset)


def test_prelu_int_and_half():
    parity("PRelu", rand((3, 4), np.int32, -9, 9), np.array([2, 3, 4, 5], np.int32))
    parity("PRelu", rand((3, 4), np.float16), rand((4,), np.float16, 0, 1), **tol(np.float16))


# ---------------------------------------------------------------- Clip

@pytest.mark.parametrize("opset", [6, 10])
def test_clip_attributes(opset):
    x = rand((3, 5))
    parity("Clip", x, attrs={"min": -1.0, "max": 0.5}, opset=opset)
    parity("Clip", x, attrs={"max": 0.5}, opset=opset)
    parity("Clip", x, attrs={"min": -0.5}, opset=opset)
    parity("Clip", x, opset=opset)


@pytest.mark.parametrize("opset", [11, 12, 13])
def test_clip_inputs(opset):
    x = rand((3, 5))
    lo, hi = np.array(-1.0, np.float32), np.array(0.5, np.float32)
    parity("Clip", x, lo, hi, opset=opset)
    parity("Clip", x, None, hi, opset=opset)
    parity("Clip", x, lo, opset=opset)
    parity("Clip", x, opset=opset)
    parity("Clip", x, Const(lo), Const(hi), opset=opset)
    parity("Clip", x, hi, lo, opset=opset)  # min > max: every value becomes max


def test_clip_types():
    parity("Clip", rand((4, 4), np.int32, -20, 20), np.array(-5, np.int32), np.array(7, np.int32), opset=12)
    parity("Clip", rand((4, 4), np.int64, -20, 20), None, np.array(7, np.int64), opset=13)
    parity("Clip", rand((4, 4), np.uint8, 0, 200), np.array(10, np.uint8), np.array(100, np.uint8), opset=13)
    parity("Clip", rand((4, 4), np.float16), np.array(-1, np.float16), np.array(1, np.float16),
           opset=13, **tol(np.float16))
    parity("Clip", rand((0, 4)), np.array(-1, np.float32), np.array(1, np.float32))


# ---------------------------------------------------------------- variadic

@pytest.mark.parametrize("op", ["Min", "Max", "Sum", "Mean"])
def test_variadic(op):
    a, b, c = rand((2, 3, 4)), rand((3, 1)), rand((4,))
    parity(op, a)
    parity(op, a, b)
    parity(op, a, b, c)
    parity(op, a.astype(np.float16), b.astype(np.float16), **tol(np.float16))
    parity(op, a, rand((2, 3, 4)), opset=6)  # no broadcasting before 8
    if op != "Mean":  # ORT has no double Mean
        parity(op, a.astype(np.float64), b.astype(np.float64), opset=13)


@pytest.mark.parametrize("op", ["Min", "Max"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
def test_min_max_int(op, dtype):
    parity(op, rand((3, 4), dtype, 0, 100), rand((4,), dtype, 0, 100), rand((3, 1), dtype, 0, 100), opset=13)


# ---------------------------------------------------------------- Where, comparisons, logic

@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32, np.uint8, np.float16])  # ORT: no bool Where
def test_where(dtype):
    cond = rng.random((3, 1, 4)) > 0.5
    x, y = rand((2, 4), dtype, 0, 9), rand((3, 2, 1), dtype, 0, 9)
    parity("Where", cond, x, y, out=np.dtype(dtype), opset=16)
    parity("Where", cond, x, y, out=np.dtype(dtype), opset=9)


@pytest.mark.parametrize("op,opset", [("Equal", 11), ("Less", 9), ("Greater", 13), ("LessOrEqual", 12),
                                      ("GreaterOrEqual", 16)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.float64])
def test_comparisons(op, opset, dtype):
    a = rand((3, 4), dtype, -3, 3)
    b = rand((4,), dtype, -3, 3)
    b[0] = a[0, 0]  # some equal pairs
    parity(op, a, b, out=np.bool_, opset=opset)


def test_comparisons_special():
    a = np.array([1.0, np.nan, np.inf, -0.0, 2.0], np.float32)
    b = np.array([1.0, np.nan, np.inf, 0.0, np.nan], np.float32)
    for op in ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]:
        parity(op, a, b, out=np.bool_)
    parity("Equal", rng.random((3, 4)) > 0.5, rng.random((4,)) > 0.5, out=np.bool_)
    parity("Less", rand((2, 3)), rand((2, 3)), out=np.bool_, opset=7)


def test_logic():
    a, b = rng.random((2, 3, 4)) > 0.5, rng.random((3, 1)) > 0.5
    parity("Not", a)
    for op in ["And", "Or", "Xor"]:
        parity(op, a, b)
        parity(op, a, np.array(True))
        parity(op, np.array(False), b)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint32, np.uint64])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift(dtype, direction):
    x = rand((3, 4), dtype, 0, 255)
    y = np.array([0, 1, 3, 7], dtype)
    parity("BitShift", x, y, attrs={"direction": direction}, opset=11)
    parity("BitShift", x, np.array(2, dtype), attrs={"direction": direction})


# ---------------------------------------------------------------- Cast, CastLike, Identity, Dropout

CAST_TYPES = [np.float32, np.float16, np.float64, np.int8, np.int16, np.int32, np.int64,
              np.uint8, np.uint16, np.uint32, np.uint64, np.bool_]
ONNX_TYPE = {np.dtype(t): TensorProto.DataType.Value(n) for t, n in [
    (np.float32, "FLOAT"), (np.float16, "FLOAT16"), (np.float64, "DOUBLE"), (np.int8, "INT8"),
    (np.int16, "INT16"), (np.int32, "INT32"), (np.int64, "INT64"), (np.uint8, "UINT8"), (np.uint16, "UINT16"),
    (np.uint32, "UINT32"), (np.uint64, "UINT64"), (np.bool_, "BOOL")]}


def _castable(dtype):
    """Values every target type represents: small non-negative, some fractional, a zero."""
    if dtype == np.bool_:
        return np.array([True, False, True, True, False, True])
    values = np.array([0, 1, 2.75, 100, 7.5, 126] if np.dtype(dtype).kind == "f" else [0, 1, 2, 100, 7, 126])
    return values.astype(dtype)


@pytest.mark.parametrize("src", CAST_TYPES)
@pytest.mark.parametrize("dst", CAST_TYPES)
def test_cast_matrix(src, dst):
    parity("Cast", _castable(src), out=np.dtype(dst), attrs={"to": ONNX_TYPE[np.dtype(dst)]}, opset=13)


def test_cast_signed_and_truncation():
    x = np.array([-2.75, -1.5, -0.5, 0.5, 1.5, 2.75, -120.9, 65504.0], np.float32)
    for dst in [np.int8, np.int32, np.int64, np.float16, np.float64, np.bool_]:
        parity("Cast", x if dst != np.int8 else x[:-1], out=np.dtype(dst), attrs={"to": ONNX_TYPE[np.dtype(dst)]})
    big = np.array([-(2**40) - 3, 2**40 + 1, -1, 123456789], np.int64)
    for dst in [np.int32, np.float32, np.float64, np.int16, np.bool_]:
        parity("Cast", big, out=np.dtype(dst), attrs={"to": ONNX_TYPE[np.dtype(dst)]})
    parity("Cast", np.array([0.1, 1e-8, 3.14159, 70000.0, -70000.0], np.float64), out=np.float16,
           attrs={"to": TensorProto.FLOAT16})


SUB_BYTE_INTS = [TensorProto.INT4, TensorProto.UINT4, TensorProto.INT2, TensorProto.UINT2]


@pytest.mark.parametrize("to", SUB_BYTE_INTS)
@pytest.mark.parametrize("src", [np.float32, np.float16, np.int32, np.int64])
def test_cast_to_sub_byte_integers_wraps_as_stock(src, to):
    """Out-of-range values keep their low bits; floats round half away from zero first (non-finite: 0)."""
    from onnx import helper
    from parity import assert_parity
    values = [2.5, -2.5, 3.5, -3.7, 7.6, 8.2, -8.6, 100.4, 1e10, np.nan, np.inf, -np.inf, 0.5, -0.5]
    with np.errstate(over="ignore"):  # 1e10 is inf in float16: that case too
        x = (np.array(values, src) if np.dtype(src).kind == "f" else
             np.array([7, 8, 15, 16, -9, -17, 100000, -2**31 if src == np.int32 else -2**40], src))
    nodes = [helper.make_node("Cast", ["x"], ["y"], to=to), helper.make_node("Cast", ["y"], ["z"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", ONNX_TYPE[np.dtype(src)], ["n"])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    with np.errstate(invalid="ignore"):
        assert_parity(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)], ir_version=11), {"x": x})


@pytest.mark.parametrize("opset", [6, 9, 19, 21])
def test_cast_opsets(opset):
    attrs = {"to": TensorProto.INT32}
    if opset >= 19:
        attrs["saturate"] = 1
    parity("Cast", rand((2, 3)), out=np.int32, attrs=attrs, opset=opset)
    parity("Cast", rand((0, 3)), out=np.float64, attrs={"to": TensorProto.DOUBLE}, opset=opset)


def test_castlike():
    parity("CastLike", rand((2, 3)), np.zeros(1, np.int64), out=np.int64, opset=15)
    parity("CastLike", rand((2, 3), np.int32), np.zeros((), np.float16), out=np.float16, opset=19)
    parity("CastLike", rand((2, 3), np.float64), Const(np.zeros(1, np.float32)), out=np.float32, opset=21)


@pytest.mark.parametrize("opset", [1, 13, 14, 16, 21])
def test_identity(opset):
    parity("Identity", rand((2, 3)), opset=opset)
    parity("Identity", rand((2, 3), np.int64), opset=opset)
    parity("Identity", np.array(True), opset=opset)


def test_dropout_inference():
    x = rand((2, 3, 4))
    # Before opset 12 the spec leaves the inference mask unspecified; ORT writes zeros.
    parity("Dropout", x, opset=7, out=[np.float32, np.float32])
    parity("Dropout", x, opset=10, out=[np.float32, np.bool_])
    parity("Dropout", x, opset=7)
    parity("Dropout", x, attrs={"ratio": 0.3}, opset=10)
    parity("Dropout", x, opset=12, out=[np.float32, np.bool_])
    parity("Dropout", x, Const(np.array(0.4, np.float32)), opset=13)
    parity("Dropout", x, np.array(0.4, np.float32), Const(np.array(False)), opset=13,
           out=[np.float32, np.bool_])
    parity("Dropout", x, None, Const(np.array(False)), attrs={"seed": 3}, opset=13)
    parity("Dropout", x.astype(np.float16), opset=13, out=[np.float16, np.bool_])
    # training_mode fed per run: False, or True with a ratio of 0, pass the data through
    parity("Dropout", x, np.array(0.4, np.float32), np.array(False), opset=13, out=[np.float32, np.bool_])
    parity("Dropout", x, np.array(0.0, np.float32), np.array(True), opset=13, out=[np.float32, np.bool_])


def test_dropout_training_mask_scales_what_it_keeps():
    from parity import node_model, run_ours
    x = rand((64, 64), low=1.0, high=2.0)
    model, feeds = node_model("Dropout", [x, np.array(0.25, np.float32), np.array(True)], opset=13,
                              outputs=[np.float32, np.bool_])
    y, mask = run_ours(model, feeds)
    np.testing.assert_allclose(y[mask], x[mask] / np.float32(0.75), rtol=1e-6)
    assert not y[~mask].any()
    assert 0.2 < 1 - mask.mean() < 0.3  # about a quarter dropped


# ---------------------------------------------------------------- declined nodes

def _lookup(op, attrs=None, in_types=(1,), opset=17, consts=None):
    from onnxruntime_ep_seamless.graph.ir import Graph, Node, Value
    from onnxruntime_ep_seamless.kernels.registry import lookup
    names = [f"x{i}" if t else "" for i, t in enumerate(in_types)]
    values = {n: Value(n, t, (2,), (consts or {}).get(i)) for i, (n, t) in enumerate(zip(names, in_types)) if n}
    values["y"] = Value("y", 1, (2,))
    node = Node("n", op, "", opset, names, ["y"], attrs or {})
    return lookup(node, Graph([node], values, [n for n in names if n], ["y"]))


def test_declines():
    assert _lookup("Cast", {"to": TensorProto.BFLOAT16})[0] is not None  # ml_dtypes arrays (conformance tests)
    assert _lookup("Cast", {"to": TensorProto.COMPLEX64})[0] is None
    assert _lookup("Cast", {"to": TensorProto.STRING})[0] is None
    assert _lookup("Cast", {"to": TensorProto.INT8})[0] is not None
    assert _lookup("Mod", {"fmod": 0}, (1, 1))[0] is None           # float Mod needs fmod=1
    assert _lookup("Mod", {"fmod": 0}, (6, 6))[0] is not None
    assert _lookup("Dropout", {}, (1, 1, 9))[0] is not None         # training_mode known per run
    assert _lookup("Dropout", {}, (1, 1, 9), consts={2: np.array(True)})[0] is not None
    assert _lookup("Gelu", {"approximate": "erf"}, opset=20)[0] is None
    assert _lookup("Relu", {"unknown": 1})[0] is None
    assert _lookup("Sqrt", {}, (6,))[0] is None                     # integer Sqrt is not ONNX
    assert _lookup("Add", {}, (1, 1), opset=6)[0] is None           # legacy broadcast attribute era


# ---------------------------------------------------------------- inverse hyperbolics, Swish, bitwise, BitCast

def test_inverse_hyperbolic():
    parity("Asinh", rand((3, 4)), opset=9)
    parity("Acosh", rand((3, 4), low=1.0, high=5.0), opset=9)
    parity("Atanh", rand((3, 4), low=-0.99, high=0.99), opset=9)


def test_swish():
    parity("Swish", rand((3, 5)), opset=24)
    parity("Swish", rand((3, 5)), attrs={"alpha": 1.702}, opset=24)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64, np.uint64])
def test_bitwise(dtype):
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, (2, 3, 4), endpoint=True, dtype=dtype)
    b = rng.integers(info.min, info.max, (3, 4), endpoint=True, dtype=dtype)
    for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
        parity(op, a, b, opset=18)
    parity("BitwiseNot", a, opset=18)


@pytest.mark.parametrize("src,to", [(np.float32, TensorProto.INT32), (np.int64, TensorProto.DOUBLE),
                                    (np.uint16, TensorProto.INT16), (np.float16, TensorProto.UINT16)])
def test_bitcast(src, to):
    x = rand((2, 3), src, -100, 100)
    parity("BitCast", x, attrs={"to": to}, out=numpy_helper.helper.tensor_dtype_to_np_dtype(to), opset=26)
    parity("BitCast", np.asarray(x[0, 0]), attrs={"to": to}, out=numpy_helper.helper.tensor_dtype_to_np_dtype(to), opset=26)


# ---------------------------------------------------------------- ORT's GELU-family activations (com.microsoft)
#
# FastGelu and QuickGelu go through MLAS's tanh/logistic approximations on stock ORT (a few ulp), numpy's libm
# here: rtol 1e-5, atol 1e-6. BiasGelu uses erf: same tolerance.

ACT_TOL = {"rtol": 1e-5, "atol": 1e-6}


@pytest.mark.parametrize("bias", [False, True])
def test_fast_gelu(bias, capfd):
    arrays = [("x", data(2, 7, 64, scale=3.0)), ("bias", data(64) if bias else None)]
    model, feeds = model_of("FastGelu", arrays, 1, domain=MS)
    assert_parity(model, feeds, **ACT_TOL)
    assert_native_without_python_steps(model, feeds, capfd)  # Gelu approximate="tanh"'s step (after the sum's)


@pytest.mark.parametrize("alpha", [None, 1.0, 1.702])
def test_quick_gelu(alpha):
    attrs = {} if alpha is None else {"alpha": alpha}
    model, feeds = model_of("QuickGelu", [("x", data(3, 100, scale=4.0))], 1, attrs, domain=MS)
    assert_parity(model, feeds, **ACT_TOL)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_ms_gelu(dtype, capfd):
    # com.microsoft Gelu: ORT's fused erf GELU in models optimized before opset 20
    x = data(2, 5, 96, scale=3.0).astype(dtype)
    model, feeds = model_of("Gelu", [("x", x)], 1, domain=MS, out_dtypes=[dtype])
    assert_parity(model, feeds, **(ACT_TOL if dtype == np.float32 else dict(rtol=1e-3, atol=1e-3)))
    if dtype == np.float32:
        assert_native_without_python_steps(model, feeds, capfd)  # the GELU step


def test_bias_gelu(capfd):
    model, feeds = model_of("BiasGelu", [("a", data(2, 5, 96, scale=3.0)), ("b", data(96))], 1, domain=MS)
    assert_parity(model, feeds, **ACT_TOL)
    assert_native_without_python_steps(model, feeds, capfd)  # the sum's step, then GELU's in place


@pytest.mark.parametrize("op", ["FastGelu", "QuickGelu"])
def test_gelu_float16(op):
    x = data(4, 64, scale=3.0).astype(np.float16)
    model, feeds = model_of(op, [("x", x)], 1, domain=MS, out_dtypes=[np.float16])
    assert_parity(model, feeds, rtol=1e-3, atol=1e-3)  # one float16 rounding of the float32 result


def test_quick_gelu_native_accuracy(monkeypatch):
    """The native QuickGelu (polynomial exp) against float64 math and the numpy path, over a wide range."""
    from onnxruntime_ep_seamless.kernels.cpu import elementwise as ew, native
    x = np.concatenate([np.linspace(-120, 120, 20001), data(1000, scale=3.0).astype(np.float64)]).astype(F32)
    (y,) = ew.quick_gelu(x, alpha=1.702)
    z = (np.float32(1.702) * x).astype(np.float64)  # alpha * x rounds to float32 on every path
    ref = x.astype(np.float64) / (1 + np.exp(-z))
    np.testing.assert_allclose(y, ref, rtol=5e-7, atol=1e-30)  # below 1e-30 the exp argument is clamped
    monkeypatch.setattr(native, "HAS_QUICK_GELU", False)
    (y_numpy,) = ew.quick_gelu(x, alpha=1.702)
    np.testing.assert_allclose(y, y_numpy, rtol=1e-6, atol=1e-30)
