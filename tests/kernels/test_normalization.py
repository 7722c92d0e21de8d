"""Parity tests for the normalization ops (kernels/cpu/normalization.py) against stock ORT's CPU EP:
BatchNormalization, InstanceNormalization, LayerNormalization, GroupNormalization, LRN, LpNormalization,
MeanVarianceNormalization; the RMS and skip normalizations (native/cpu/normalization.c).

Tolerances: the normalizations reduce over the hidden axis in a different order than ORT
(sequential float32 sums there, pairwise or vectorized here): rtol 1e-5 / atol 1e-5 of O(1)
outputs (1e-4 where a variance is summed over more elements).
"""
import numpy as np
import pytest

from parity import assert_parity, check_node, named_node_model

tensor_rng = np.random.default_rng(1)
check = check_node
# float16: ORT accumulates in float32 and rounds once, as the kernels do; allow float16 rounding.
F16_TOL = {"rtol": 1e-3, "atol": 1e-3}


def tensor(shape, dtype=np.float32):
    return tensor_rng.standard_normal(shape).astype(dtype)


rng = np.random.default_rng(3)
MS = "com.microsoft"
F32 = np.float32


def data(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(F32)


def model_of(op, arrays, n_outputs, attrs=None, domain="", opset=17, const=(), out_dtypes=None):
    return named_node_model(op, arrays, out_dtypes or [F32] * n_outputs, attrs, opset, domain, const)


NORM_TOL = {"rtol": 1e-5, "atol": 1e-5}


def _bn_inputs(xs, dtype=np.float32):
    c = xs[1]
    return [tensor(xs, dtype), tensor(c, dtype), tensor(c, dtype), tensor(c, dtype), (tensor_rng.random(c) + 0.5).astype(dtype)]


@pytest.mark.parametrize("opset", [7, 9, 14, 15])
@pytest.mark.parametrize("xs", [(2, 3, 4, 5), (2, 3), (1, 3, 5)])
def test_batch_norm(opset, xs):
    check("BatchNormalization", _bn_inputs(xs), {"epsilon": 1e-3}, opset=opset)


def test_batch_norm_training_mode_0():
    check("BatchNormalization", _bn_inputs((2, 3, 4)), {"training_mode": 0, "momentum": 0.8}, opset=15)


def test_batch_norm_spatial_0():
    # Opset 7-8 spatial=0: statistics per (C, *spatial) element.
    c = (3, 2)
    ins = [tensor((2, 3, 2)), tensor(c), tensor(c), tensor(c), (tensor_rng.random(c) + 0.5).astype(np.float32)]
    check("BatchNormalization", ins, {"spatial": 0}, opset=7)


def test_batch_norm_f16():
    check("BatchNormalization", _bn_inputs((2, 3, 4), np.float16), opset=15, **F16_TOL)


@pytest.mark.parametrize("dtype,tol", [(np.float32, {"rtol": 1e-4, "atol": 1e-5}), (np.float16, F16_TOL)])
def test_instance_norm(dtype, tol):
    # float32: the variance is summed in a different order than ORT, hence 1e-4.
    check("InstanceNormalization", [tensor((2, 3, 4, 5), dtype), tensor(3, dtype), tensor(3, dtype)], {"epsilon": 1e-3},
          opset=6, **tol)


@pytest.mark.parametrize("axis", [-1, 1, -2])
@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_norm(axis, with_bias):
    xs = (2, 3, 4)
    norm = xs[axis:]
    ins = [tensor(xs), tensor(norm)] + ([tensor(norm)] if with_bias else [])
    check("LayerNormalization", ins, {"axis": axis}, outputs=[np.float32, np.float32, np.float32],
          rtol=1e-4, atol=1e-5)


def test_layer_norm_f16():
    # stash_type=1: statistics in float32, so Mean/InvStdDev are float32 while Y is float16.
    xs = (2, 3, 8)
    check("LayerNormalization", [tensor(xs, np.float16), tensor(8, np.float16), tensor(8, np.float16)], {},
          outputs=[np.float16, np.float32, np.float32], rtol=2e-3, atol=2e-3)


def test_layer_norm_f64():
    # Mean/InvStdDev take stash_type's float32 even for float64 inputs.
    check("LayerNormalization", [tensor((3, 5), np.float64), tensor(5, np.float64)], {},
          outputs=[np.float64, np.float32, np.float32])


def test_layer_norm_y_only():
    check("LayerNormalization", [tensor((4, 6)), tensor(6), tensor(6)], {"epsilon": 1e-3}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("opset", [18, 21])
def test_group_norm(opset):
    xs, groups = (2, 6, 3, 4), 3
    param = 6 if opset >= 21 else groups  # opset 18 scales per group, 21 per channel
    check("GroupNormalization", [tensor(xs), tensor(param), tensor(param)], {"num_groups": groups, "epsilon": 1e-3},
          opset=opset, rtol=1e-4, atol=1e-5)


def test_group_norm_f16():
    check("GroupNormalization", [tensor((1, 4, 5), np.float16), tensor(4, np.float16), tensor(4, np.float16)],
          {"num_groups": 2}, opset=21, **F16_TOL)


@pytest.mark.parametrize("size", [1, 3, 5])  # ORT rejects even sizes
def test_lrn(size):
    check("LRN", [tensor((2, 5, 3, 3))], {"size": size, "alpha": 0.01, "beta": 0.6, "bias": 2.0}, opset=13)


def test_lrn_f16():
    check("LRN", [tensor((1, 4, 3, 3), np.float16)], {"size": 3}, **F16_TOL)


@pytest.mark.parametrize("p,axis", [(2, -1), (1, 0), (2, 1)])
def test_lp_normalization(p, axis):
    x = tensor((3, 4))
    x[1] = 0  # a zero vector stays zero
    check("LpNormalization", [x], {"p": p, "axis": axis}, opset=1)


def test_mean_variance_normalization():
    check("MeanVarianceNormalization", [tensor((2, 3, 4, 5))], opset=13, rtol=1e-5, atol=1e-5)
    check("MeanVarianceNormalization", [tensor((2, 3, 4, 5))], {"axes": [1, 3]}, opset=13, rtol=1e-5, atol=1e-5)


def test_batch_normalization_training_mode():
    x, scale, bias = tensor((2, 3, 4, 5)), tensor((3,)), tensor((3,))
    mean, var = tensor((3,)), np.abs(tensor((3,))) + 0.5
    check("BatchNormalization", [x, scale, bias, mean, var], {"training_mode": 1, "momentum": 0.8}, opset=15,
          outputs=[np.float32] * 3, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape,axis", [((2, 5, 64), -1), ((3, 896), -1), ((2, 3, 4, 8), 2), ((1, 1, 256), -1)])
def test_simplified_layer_normalization(shape, axis):
    scale = data(*shape[axis:]) if axis != -1 else data(shape[-1])
    model, feeds = model_of("SimplifiedLayerNormalization", [("x", data(*shape)), ("scale", scale)], 2,
                            {"axis": axis, "epsilon": 1e-6}, const=("scale",))
    assert_parity(model, feeds, **NORM_TOL)


def test_simplified_layer_normalization_y_only():
    model, feeds = model_of("SimplifiedLayerNormalization", [("x", data(4, 32)), ("scale", data(32))], 1,
                            const=("scale",))
    assert_parity(model, feeds, **NORM_TOL)


@pytest.mark.parametrize("shape,axis", [((2, 5, 64), -1), ((2, 3, 4, 8), 1), ((7, 33), 0)])
def test_rms_normalization_23(shape, axis):
    scale = data(*shape[axis:])
    model, feeds = model_of("RMSNormalization", [("x", data(*shape)), ("scale", scale)], 1,
                            {"axis": axis, "epsilon": 1e-5}, opset=23)
    assert_parity(model, feeds, **NORM_TOL)


@pytest.mark.parametrize("skip_shape", ["full", "batch1", "2d"])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("outputs", ["all", "sum", "y"])
def test_skip_simplified_layer_normalization(skip_shape, bias, outputs):
    b, s, h = 2, 5, 64
    skip = {"full": data(b, s, h), "batch1": data(1, s, h), "2d": data(s, h)}[skip_shape]
    arrays = [("x", data(b, s, h)), ("skip", skip), ("gamma", data(h)), ("bias", data(h) if bias else None)]
    out_dtypes = {"all": [F32, None, F32, F32], "sum": [F32, None, None, F32], "y": [F32]}[outputs]
    model, feeds = model_of("SkipSimplifiedLayerNormalization", arrays, 4, {"epsilon": 1e-6}, domain=MS,
                            const=("gamma", "bias"), out_dtypes=out_dtypes)
    assert_parity(model, feeds, **NORM_TOL)


def test_skip_simplified_layer_normalization_2d_input():
    arrays = [("x", data(6, 128)), ("skip", data(6, 128)), ("gamma", data(128))]
    model, feeds = model_of("SkipSimplifiedLayerNormalization", arrays, 4, domain=MS,
                            out_dtypes=[F32, None, None, F32])
    assert_parity(model, feeds, **NORM_TOL)


@pytest.mark.parametrize("beta,bias", [(False, False), (True, False), (True, True), (False, True)])
@pytest.mark.parametrize("outputs", ["y", "sum"])
def test_skip_layer_normalization(beta, bias, outputs):
    b, s, h = 2, 4, 48
    arrays = [("x", data(b, s, h)), ("skip", data(b, s, h)), ("gamma", data(h)),
              ("beta", data(h) if beta else None), ("bias", data(h) if bias else None)]
    out_dtypes = {"y": [F32], "sum": [F32, None, None, F32]}[outputs]
    model, feeds = model_of("SkipLayerNormalization", arrays, 4, {"epsilon": 1e-5}, domain=MS,
                            out_dtypes=out_dtypes)
    assert_parity(model, feeds, **NORM_TOL)


@pytest.mark.parametrize("op", ["simplified", "skip", "skip_bias_broadcast", "rms23"])
def test_rms_numpy_reference_matches_native(op, monkeypatch):
    """The numpy paths (readable references, used for float16/float64 and odd shapes) agree with
    the native kernel; called directly, without ORT."""
    from onnxruntime_ep_seamless.kernels.cpu import native, normalization as norm
    x, g, g2 = data(3, 4, 96), data(96), data(4, 96)
    calls = {
        "simplified": lambda: norm.simplified_layer_normalization(x, g, epsilon=1e-6),
        "skip": lambda: norm.skip_simplified_layer_normalization(x, x[::-1].copy(), g, epsilon=1e-6),
        "skip_bias_broadcast": lambda: norm.skip_simplified_layer_normalization(x, skip_b, g, bias_b, epsilon=1e-6),
        "rms23": lambda: norm.rms_normalization(x, g2, axis=1, epsilon=1e-5),
    }
    skip_b, bias_b = data(4, 96), data(96)
    native_out = calls[op]()
    monkeypatch.setattr(native, "has_rms_norm", lambda: False)
    numpy_out = calls[op]()
    for i, (a, b) in enumerate(zip(native_out, numpy_out)):
        if i == 1 and op.startswith("skip"):
            continue  # the unused "mean" output
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_channel_affine_wrapper_refuses_extents_that_disagree():
    """native.channel_affine is the last check before seamless_channel_affine_f32, which reads one scale and shift
    per channel of axis 1: another count of them, or another type, is a ValueError, never a read past them."""
    from onnxruntime_ep_seamless.kernels.cpu import native
    x, c = data(2, 3, 4, 5), data(3)
    np.testing.assert_allclose(native.channel_affine(x, c, c, False), x * c[:, None, None] + c[:, None, None],
                               rtol=1e-6)
    for bad in [(x, data(4), data(4)), (x, c, data(2)), (x[0, 0, 0], c, c), (x.astype(np.float64), c, c),
                (x, c.astype(np.float16), c)]:
        with pytest.raises(ValueError, match="native kernel"):
            native.channel_affine(*bad, True)


@pytest.mark.parametrize("op", ["SkipSimplifiedLayerNormalization", "SkipLayerNormalization"])
def test_skip_normalization_float16(op):
    """float16 computes in float32 and rounds once: within a float16 ulp or two of stock."""
    h = 64
    arrays = [("x", data(2, 3, h).astype(np.float16)), ("skip", data(2, 3, h).astype(np.float16)),
              ("gamma", data(h).astype(np.float16))]
    model, feeds = model_of(op, arrays, 4, domain=MS, out_dtypes=[np.float16, None, None, np.float16])
    assert_parity(model, feeds, rtol=2e-3, atol=2e-3)
