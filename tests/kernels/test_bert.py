"""Parity tests for com.microsoft EmbedLayerNormalization and Attention (kernels/cpu/bert.py)
against stock ORT's CPU EP.

Tolerances: float32 layer norms and attention reduce in a different order than ORT's MLAS
(rtol/atol 1e-5 of O(1) outputs). float16: ORT rounds intermediate results (the QKV projection,
scores or probabilities) to float16 where we keep float32 and round once, so outputs of magnitude
~1 differ by a few float16 ulp (2^-10 relative): rtol/atol 4e-3.
"""
import numpy as np
import pytest

from parity import (Const, assert_close, assert_native_without_python_steps, assert_parity, check_node, ep_session,
                    node_model, run_ours, stock_session)

rng = np.random.default_rng(7)
MS = "com.microsoft"
F32, F16, I32 = np.float32, np.float16, np.int32
TOL = {F32: dict(rtol=1e-5, atol=1e-5), F16: dict(rtol=4e-3, atol=4e-3)}


def data(*shape, scale=1.0, dtype=F32):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def embed_inputs(b, s, h=16, vocab=30, dtype=F32, segments=True, mask=True, position_ids=None):
    ids = rng.integers(0, vocab, (b, s)).astype(I32)
    seg = rng.integers(0, 2, (b, s)).astype(I32) if segments else None
    m = None
    if mask:
        m = np.ones((b, s), I32)
        m[0, s // 2:] = 0  # right padding in the first row
    return [ids, seg, Const(data(vocab, h, dtype=dtype)), Const(data(max(s, 8) + 2, h, dtype=dtype)),
            Const(data(2, h, dtype=dtype)) if segments else None, Const(1 + data(h, scale=0.1, dtype=dtype)),
            Const(data(h, scale=0.1, dtype=dtype)), m, position_ids]


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("b,s", [(2, 7), (1, 1), (3, 4)])
def test_embed_layer_normalization(dtype, b, s):
    check_node("EmbedLayerNormalization", embed_inputs(b, s, dtype=dtype), dict(epsilon=1e-12), domain=MS,
               outputs=[dtype, I32, dtype], **TOL[dtype])


def test_embed_layer_normalization_no_segment_no_mask():
    # without a mask, mask_index is all zeros
    check_node("EmbedLayerNormalization", embed_inputs(2, 5, segments=False, mask=False), dict(epsilon=1e-5),
               domain=MS, outputs=[F32, I32], **TOL[F32])


def test_embed_layer_normalization_position_ids():
    pos = np.array([[3, 1, 0, 2, 5], [0, 1, 2, 3, 4]], I32)
    check_node("EmbedLayerNormalization", embed_inputs(2, 5, position_ids=pos), domain=MS,
               outputs=[F32, I32, F32], **TOL[F32])


# float32 with constant tables: Gather, binary, LayerNormalization, and for mask_index Equal, Cast, ReduceSum and Cast
# steps (kernels/cpu/steps.py embed_layer_normalization); without a mask mask_index stays a Python step
@pytest.mark.parametrize("case", ["segments", "no_segments", "position_ids", "no_embedding_sum"])
def test_embed_layer_normalization_runs_natively(case, capfd):
    pos = np.array([[3, 1, 0, 2, 5], [0, 1, 2, 3, 4]], I32) if case == "position_ids" else None
    inputs = embed_inputs(2, 5, segments=case != "no_segments", position_ids=pos)
    model, feeds = node_model("EmbedLayerNormalization", inputs, dict(epsilon=1e-12), domain=MS,
                              outputs=[F32, I32] + ([] if case == "no_embedding_sum" else [F32]))
    assert_native_without_python_steps(model, feeds, capfd)


def test_embed_layer_normalization_native_lookups_refuse_negative_ids():
    """A negative id is out of range for stock (no wrap-around as Gather's): the native program's lookup says so too."""
    import onnxruntime as ort
    from parity import ep_session
    model, feeds = node_model("EmbedLayerNormalization", embed_inputs(2, 5), dict(epsilon=1e-12), domain=MS,
                              outputs=[F32, I32, F32])
    sess = ep_session(model)
    for _ in range(3):  # the Python plan, the recording, then the native program
        sess.run(None, feeds)
    bad = dict(feeds, in0=feeds["in0"].copy())
    bad["in0"][1, 2] = -1
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument, match="out of range"):
        sess.run(None, bad)


def attention_inputs(b, s, hidden=32, dtype=F32, mask=None, past=0, heads=4, bias=True):
    x = data(b, s, hidden, dtype=dtype)
    w = Const(data(hidden, 3 * hidden, scale=hidden ** -0.5, dtype=dtype))
    bb = Const(data(3 * hidden, scale=0.1, dtype=dtype)) if bias else None
    pst = data(2, b, heads, past, hidden // heads, dtype=dtype) if past else None
    return [x, w, bb, mask, pst]


@pytest.mark.parametrize("dtype", [F32, F16])
def test_attention_mask_end_positions(dtype):
    # the ORT optimizer's BERT form: 1-D mask_index (B,) of valid lengths, from EmbedLayerNormalization
    check_node("Attention", attention_inputs(3, 6, dtype=dtype, mask=np.array([6, 2, 4], I32)),
               dict(num_heads=4), domain=MS, **TOL[dtype])


def attention_without_bias():
    """(model without a bias, the same with a zero bias, feeds): stock ORT's CPU Attention crashes the
    process without a bias in some releases (1.30; microsoft/onnxruntime#25005), so its reference
    runs with zeros added - the same sums, x @ W + 0 == x @ W exactly."""
    inputs, attrs = attention_inputs(2, 5, bias=False)[:2], dict(num_heads=2)
    model, feeds = node_model("Attention", inputs, attrs, domain=MS)
    zero_bias, _ = node_model("Attention", inputs + [Const(np.zeros(3 * inputs[0].shape[-1], F32))], attrs, domain=MS)
    return model, zero_bias, feeds


def test_attention_no_mask_no_bias():
    model, zero_bias, feeds = attention_without_bias()
    (ref,) = stock_session(zero_bias).run(None, feeds)
    for run, (ours,) in enumerate(run_ours(model, feeds, 3)):  # the Python plan, the recording, the native program
        assert_close(ours, ref, **TOL[F32], name=f"run {run + 1}")


def test_attention_mask_end_and_start():
    check_node("Attention", attention_inputs(2, 6, mask=np.array([5, 6, 1, 0], I32)), dict(num_heads=4),
               domain=MS, **TOL[F32])


@pytest.mark.parametrize("shape", ["2d", "3d"])
def test_attention_raw_mask(shape):
    b, s = 2, 5
    m = (rng.random((b, s, s) if shape == "3d" else (b, s)) > 0.3).astype(I32)
    m[..., 0] = 1
    check_node("Attention", attention_inputs(b, s, mask=m), dict(num_heads=4, mask_filter_value=-1e4), domain=MS,
               **TOL[F32])


@pytest.mark.parametrize("dtype", [F32, F16])
def test_attention_past_unidirectional(dtype):
    # GPT-2 form: causal with a past state; present = past + new keys/values
    check_node("Attention", attention_inputs(2, 3, dtype=dtype, past=4), dict(num_heads=4, unidirectional=1),
               domain=MS, outputs=[dtype, dtype], **TOL[dtype])


def test_attention_qkv_hidden_sizes_and_scale():
    hidden = 32
    x = data(2, 4, hidden)
    w = Const(data(hidden, 16 + 16 + 24, scale=0.2))
    check_node("Attention", [x, w, Const(data(56, scale=0.1))],
               dict(num_heads=4, qkv_hidden_sizes=[16, 16, 24], scale=0.3), domain=MS, **TOL[F32])


def test_attention_bias_input():
    b, s, n = 2, 4, 4
    inputs = attention_inputs(b, s, heads=n) + [data(b, n, s, s)]
    check_node("Attention", inputs, dict(num_heads=n), domain=MS, **TOL[F32])


def test_attention_unidirectional_prompt_with_a_mask():
    # GPT-2's prompt without past: the future keys' fill added to the padding's (a row's padded future keys: twice)
    m = np.ones((2, 5), I32)
    m[1, 3:] = 0
    check_node("Attention", attention_inputs(2, 5, mask=m), dict(num_heads=4, unidirectional=1), domain=MS,
               **TOL[F32])


# float32: three GEMM steps (q|k|v), the masks as one float mask, ONNX Attention's step, a past's halves copied out
# and the present stacked (kernels/cpu/steps.py ms_attention); float16 or the (2B,) end-and-start mask: the Python
# kernel
@pytest.mark.parametrize("case", ["end", "raw2d", "raw3d", "no_bias", "sizes", "bias_input", "unidirectional",
                                  "past", "past_decode"])
def test_attention_runs_natively(case, capfd):
    b, s, attrs = 2, 1 if case == "past_decode" else 5, dict(num_heads=4)
    inputs = attention_inputs(b, s, bias=case != "no_bias", past=6 if case.startswith("past") else 0)
    outputs = [F32, F32] if case.startswith("past") else None
    if case.startswith("past"):  # GPT-2's: causal, a raw (B, P + S) mask with a padded key
        attrs["unidirectional"] = 1
        inputs[3] = np.ones((b, 6 + s), I32)
        inputs[3][1, 2] = 0
    if case == "end":
        inputs[3] = np.array([5, 2], I32)
    elif case in ("raw2d", "raw3d", "unidirectional"):
        inputs[3] = (rng.random((b, s, s) if case == "raw3d" else (b, s)) > 0.3).astype(I32)
        attrs["unidirectional"] = int(case == "unidirectional")
    elif case == "sizes":
        inputs[1:3] = [Const(data(32, 56, scale=0.2)), Const(data(56, scale=0.1))]
        attrs.update(qkv_hidden_sizes=[16, 16, 24], scale=0.3)
    elif case == "bias_input":
        inputs += [data(b, 4, s, s)]
    model, feeds = node_model("Attention", inputs, attrs, domain=MS, outputs=outputs)
    assert_native_without_python_steps(model, feeds, capfd)
    if case.startswith("past"):
        assert_parity(model, feeds, **TOL[F32])


def test_attention_decode_steps_form_a_native_family():
    """GPT-2's decode loop (one token a step, the past one longer each step, present fed back): stock's outputs every
    step, and from the family's forming on each new past length is answered in C."""
    from onnxruntime_ep_seamless.runtime.native import NATIVES
    b, hidden, n = 1, 32, 4
    x0, w, bias = attention_inputs(b, 1, hidden=hidden, heads=n)[:3]
    model, _ = node_model("Attention", [x0, w, bias, np.ones((b, 5), I32), data(2, b, n, 4, hidden // n)],
                          dict(num_heads=n, unidirectional=1), domain=MS, outputs=[F32, F32], symbolic=True)
    ours, ref = ep_session(model), stock_session(model)
    past = data(2, b, n, 4, hidden // n)
    native = NATIVES["cpu"].lib.seamless_native_runs
    answered = 0
    for step in range(12):
        feeds = {"in0": data(b, 1, hidden), "in3": np.ones((b, past.shape[3] + 1), I32), "in4": past}
        before = native()
        got = ours.run(None, feeds)
        answered += native() > before
        want = ref.run(None, feeds)
        for i, (o, r) in enumerate(zip(got, want)):
            assert_close(o, r, **TOL[F32], name=f"step {step}, output {i}")
        past = want[1]
    assert answered >= 6, f"{answered} of 12 steps answered in C"
