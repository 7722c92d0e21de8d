"""Parity of the linear-quantization ops (kernels/cpu/quantization.py) with stock ORT, in the
shapes QDQ models use: constant scales and zero points, per tensor, per axis and blocked."""
import numpy as np
import pytest

from parity import S8_UNSATURATED, check_node

rng = np.random.default_rng(7)


def check(op, inputs, out_dtypes, attrs=None, opset=21, const=()):
    return check_node(op, inputs, attrs, opset, out_dtypes, const)


@pytest.mark.parametrize("zp_dtype", [np.uint8, np.int8, np.uint16, np.int16])
def test_quantize_per_tensor(zp_dtype):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32) * 50
    zp = np.array(3, zp_dtype)
    check("QuantizeLinear", [x, np.array(0.37, np.float32), zp], [zp_dtype], const=(1, 2))


def test_quantize_rounds_halves_to_even_and_saturates():
    x = np.array([-300, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 127.5, 300], np.float32)
    check("QuantizeLinear", [x, np.array(1, np.float32), np.array(0, np.int8)], [np.int8], const=(1, 2))
    check("QuantizeLinear", [x, np.array(1, np.float32)], [np.uint8], const=(1,), opset=13)  # default uint8


def test_quantize_and_dequantize_per_axis():
    x = rng.standard_normal((2, 4, 3)).astype(np.float32)
    scale = np.array([0.01, 0.02, 0.05, 0.1], np.float32)
    zp = np.array([0, 10, -5, 3], np.int8)
    check("QuantizeLinear", [x, scale, zp], [np.int8], attrs={"axis": 1}, const=(1, 2))
    q = rng.integers(-128, 127, (2, 4, 3)).astype(np.int8)
    check("DequantizeLinear", [q, scale, zp], [np.float32], attrs={"axis": 1}, const=(1, 2))
    check("DequantizeLinear", [q, scale, zp], [np.float32], attrs={"axis": -2}, const=(1, 2))


def test_blocked():
    x = rng.standard_normal((3, 8)).astype(np.float32)
    scale = rng.uniform(0.01, 0.1, (3, 2)).astype(np.float32)
    zp = rng.integers(-3, 3, (3, 2)).astype(np.int8)
    check("QuantizeLinear", [x, scale, zp], [np.int8], attrs={"axis": 1, "block_size": 4}, const=(1, 2))
    q = rng.integers(-128, 127, (3, 8)).astype(np.int8)
    check("DequantizeLinear", [q, scale, zp], [np.float32], attrs={"axis": 1, "block_size": 4}, const=(1, 2))


def test_dequantize_int32_and_float16_scale():
    q = rng.integers(-1000, 1000, (5,)).astype(np.int32)
    check("DequantizeLinear", [q, np.array(0.5, np.float32)], [np.float32], const=(1,))
    q8 = rng.integers(0, 255, (6,)).astype(np.uint8)
    check("DequantizeLinear", [q8, np.array(0.25, np.float16), np.array(128, np.uint8)], [np.float16],
          const=(1, 2))


def test_dynamic_quantize_linear():
    x = rng.standard_normal((3, 5)).astype(np.float32)
    check("DynamicQuantizeLinear", [x], [np.uint8, np.float32, np.uint8], opset=11)
    check("DynamicQuantizeLinear", [np.abs(x)], [np.uint8, np.float32, np.uint8], opset=11)  # min clamps to 0
    check("DynamicQuantizeLinear", [np.zeros((2, 3), np.float32)], [np.uint8, np.float32, np.uint8], opset=11)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_matmul(dtype):
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, (2, 3, 8)).astype(dtype)
    b = rng.integers(info.min, info.max, (8, 4)).astype(dtype)
    scalars = [np.array(0.02, np.float32), np.array(3, dtype), np.array(0.01, np.float32), np.array(2, dtype),
               np.array(0.5, np.float32), np.array(1, dtype)]
    check("QLinearMatMul", [a, scalars[0], scalars[1], b, scalars[2], scalars[3], scalars[4], scalars[5]], [dtype],
          const=(1, 2, 3, 4, 5, 6, 7), opset=10)


def test_qlinear_conv_and_conv_integer():
    x = rng.integers(0, 255, (1, 4, 6, 6)).astype(np.uint8)
    w = rng.integers(-128, 127, (6, 2, 3, 3)).astype(np.int8)
    attrs = {"group": 2, "pads": [1, 1, 1, 1], "strides": [2, 1]}
    check("ConvInteger", [x, w, np.array(128, np.uint8), np.array(0, np.int8)], [np.int32], attrs=attrs,
          const=(1, 2, 3), opset=10)
    w = rng.integers(*S8_UNSATURATED, (6, 2, 3, 3), endpoint=True).astype(np.int8)  # stock's AVX2 saturates beyond
    w_scale = rng.uniform(0.001, 0.01, 6).astype(np.float32)  # per output channel
    bias = rng.integers(-500, 500, 6).astype(np.int32)
    check("QLinearConv", [x, np.array(0.05, np.float32), np.array(128, np.uint8), w, w_scale,
                          np.zeros(6, np.int8), np.array(0.2, np.float32), np.array(120, np.uint8), bias],
          [np.uint8], attrs=attrs, const=(1, 2, 3, 4, 5, 6, 7, 8), opset=10)
