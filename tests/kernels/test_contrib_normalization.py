"""Parity tests for RMS/skip normalizations and GELU-family activations
(kernels/cpu/contrib_normalization.py, contrib_activation.py) against stock ORT's CPU EP.

Tolerances: the normalizations reduce over the hidden axis in a different order than ORT
(sequential float32 sums there, pairwise or vectorized here): rtol 1e-5 / atol 1e-5 of O(1)
outputs. FastGelu and QuickGelu go through MLAS's tanh/logistic approximations on stock ORT
(a few ulp), numpy's libm here: rtol 1e-5, atol 1e-6. BiasGelu uses erf: same tolerance.
"""
import numpy as np
import pytest

from parity import assert_parity, named_node_model

rng = np.random.default_rng(3)
MS = "com.microsoft"
F32 = np.float32


def data(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(F32)


def model_of(op, arrays, n_outputs, attrs=None, domain="", opset=17, const=(), out_dtypes=None):
    return named_node_model(op, arrays, out_dtypes or [F32] * n_outputs, attrs, opset, domain, const)


NORM_TOL = {"rtol": 1e-5, "atol": 1e-5}


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


ACT_TOL = {"rtol": 1e-5, "atol": 1e-6}


@pytest.mark.parametrize("bias", [False, True])
def test_fast_gelu(bias):
    arrays = [("x", data(2, 7, 64, scale=3.0)), ("bias", data(64) if bias else None)]
    model, feeds = model_of("FastGelu", arrays, 1, domain=MS)
    assert_parity(model, feeds, **ACT_TOL)


@pytest.mark.parametrize("alpha", [None, 1.0, 1.702])
def test_quick_gelu(alpha):
    attrs = {} if alpha is None else {"alpha": alpha}
    model, feeds = model_of("QuickGelu", [("x", data(3, 100, scale=4.0))], 1, attrs, domain=MS)
    assert_parity(model, feeds, **ACT_TOL)


def test_bias_gelu():
    model, feeds = model_of("BiasGelu", [("a", data(2, 5, 96, scale=3.0)), ("b", data(96))], 1, domain=MS)
    assert_parity(model, feeds, **ACT_TOL)


@pytest.mark.parametrize("op", ["FastGelu", "QuickGelu"])
def test_gelu_float16(op):
    x = data(4, 64, scale=3.0).astype(np.float16)
    model, feeds = model_of(op, [("x", x)], 1, domain=MS, out_dtypes=[np.float16])
    assert_parity(model, feeds, rtol=1e-3, atol=1e-3)  # one float16 rounding of the float32 result


@pytest.mark.parametrize("op", ["simplified", "skip", "skip_bias_broadcast", "rms23"])
def test_rms_numpy_reference_matches_native(op, monkeypatch):
    """The numpy paths (readable references, used for float16/float64 and odd shapes) agree with
    the native kernel; called directly, without ORT."""
    from onnxruntime_ep_seamless.kernels.cpu import contrib_native, contrib_normalization as cn
    x, g, g2 = data(3, 4, 96), data(96), data(4, 96)
    calls = {
        "simplified": lambda: cn.simplified_layer_normalization(x, g, epsilon=1e-6),
        "skip": lambda: cn.skip_simplified_layer_normalization(x, x[::-1].copy(), g, epsilon=1e-6),
        "skip_bias_broadcast": lambda: cn.skip_simplified_layer_normalization(x, skip_b, g, bias_b, epsilon=1e-6),
        "rms23": lambda: cn.rms_normalization(x, g2, axis=1, epsilon=1e-5),
    }
    skip_b, bias_b = data(4, 96), data(96)
    native_out = calls[op]()
    monkeypatch.setattr(contrib_native, "has_rms_norm", lambda: False)
    numpy_out = calls[op]()
    for i, (a, b) in enumerate(zip(native_out, numpy_out)):
        if i == 1 and op.startswith("skip"):
            continue  # the unused "mean" output
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["SkipSimplifiedLayerNormalization", "SkipLayerNormalization"])
def test_skip_normalization_float16(op):
    """float16 computes in float32 and rounds once: within a float16 ulp or two of stock."""
    h = 64
    arrays = [("x", data(2, 3, h).astype(np.float16)), ("skip", data(2, 3, h).astype(np.float16)),
              ("gamma", data(h).astype(np.float16))]
    model, feeds = model_of(op, arrays, 4, domain=MS, out_dtypes=[np.float16, None, None, np.float16])
    assert_parity(model, feeds, rtol=2e-3, atol=2e-3)


def test_quick_gelu_native_accuracy(monkeypatch):
    """The native QuickGelu (polynomial exp) against float64 math and the numpy path, over a wide range."""
    from onnxruntime_ep_seamless.kernels.cpu import contrib_activation as ca, contrib_native
    x = np.concatenate([np.linspace(-120, 120, 20001), data(1000, scale=3.0).astype(np.float64)]).astype(F32)
    (y,) = ca.quick_gelu(x, alpha=1.702)
    z = (np.float32(1.702) * x).astype(np.float64)  # alpha * x rounds to float32 on every path
    ref = x.astype(np.float64) / (1 + np.exp(-z))
    np.testing.assert_allclose(y, ref, rtol=5e-7, atol=1e-30)  # below 1e-30 the exp argument is clamped
    monkeypatch.setattr(contrib_native, "HAS_QUICK_GELU", False)
    (y_numpy,) = ca.quick_gelu(x, alpha=1.702)
    np.testing.assert_allclose(y, y_numpy, rtol=1e-6, atol=1e-30)
