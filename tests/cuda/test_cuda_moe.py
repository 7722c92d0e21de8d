"""com.microsoft MoE and QMoE on the CUDA EP (native/cuda/moe.cu) against stock ORT's CPU EP: routing on the GPU,
the activations, biases, 4- and 8-bit experts with block- or row-wise scales and zero points, float16. The inputs
and the CPU kernels' parity cases are tests/kernels/test_moe.py's."""
import numpy as np
import pytest

from kernels.test_moe import moe_inputs, qmoe_inputs
from test_cuda_ep import DEVICES, PROBLEM

needs_gpu = pytest.mark.skipif(not DEVICES, reason=f"no NVIDIA GPU for the CUDA EP ({PROBLEM or 'none found'})")
F16 = np.dtype(np.float16)
TOL = {np.dtype(np.float32): {"rtol": 1e-4, "atol": 1e-5}, F16: {"rtol": 2e-3, "atol": 2e-3}}


def _check(op, inputs, attrs, dtype):
    from onnxruntime_ep_seamless.graph.onnx_import import import_model
    from onnxruntime_ep_seamless.kernels.registry import lookup
    from parity import node_model
    from test_cuda_ops import check
    model, _ = node_model(op, inputs, attrs, 21, [dtype], domain="com.microsoft")
    graph = import_model(model)
    assert lookup(graph.nodes[0], graph, "cuda", host_rule=False)[0].device == "cuda"  # its CUDA kernel
    check(op, inputs, attrs, 21, [dtype], domain="com.microsoft", **TOL[np.dtype(dtype)])


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("act,k,normalize,extra", [
    ("swiglu", 2, 1, {"swiglu_limit": 7.0, "activation_alpha": 1.702, "activation_beta": 1.0}), ("relu", 1, 0, {}),
    ("silu", 3, 1, {}), ("identity", 4, 0, {})])
def test_moe(act, k, normalize, extra, dtype):
    attrs = dict(k=k, activation_type=act, normalize_routing_weights=normalize, **extra)
    if act == "swiglu":
        attrs["swiglu_fusion"] = 1
    _check("MoE", moe_inputs(19, 48, 4, 24, act, dtype=dtype), attrs, dtype)


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("act,bits,block,zero_points", [
    ("swiglu", 4, 32, False), ("gelu", 4, 16, True), ("silu", 4, 0, True), ("relu", 2, 0, False),
    ("identity", 4, 32, True)])
def test_qmoe(act, bits, block, zero_points, dtype):
    attrs = dict(k=2, activation_type=act, expert_weight_bits=bits)
    if block:
        attrs["block_size"] = block
    if act == "swiglu":
        attrs.update(swiglu_fusion=1, swiglu_limit=7.0)
    _check("QMoE", qmoe_inputs(11, 64, 4, 32, act, bits, block, zero_points, dtype=dtype), attrs, dtype)


@needs_gpu
def test_qmoe_8_bit(monkeypatch):
    monkeypatch.setenv("ORT_QMOE_CPU_QNBIT_GEMM", "fp32")  # stock's exact path (tests/kernels/test_moe.py)
    attrs = dict(k=3, activation_type="swiglu", swiglu_fusion=1, expert_weight_bits=8, block_size=32)
    _check("QMoE", qmoe_inputs(9, 64, 5, 32, "swiglu", 8, 32), attrs, np.float32)


def greedy(sess, steps=24, prompt=16, head_size=64, window=0):
    """Greedy tokens and each step's last logits of a builder decoder with states (LFM2's convolution states,
    Qwen3.5's conv and recurrent states, fed back like the KV caches; Qwen3.5's 3-D position_ids; window: the
    capacity of the window-sized KV caches of local layers, as onnxruntime-genai allocates them)."""
    past = {}
    names = {i.name for i in sess.get_inputs()}
    for i in sess.get_inputs():
        if i.name.startswith("past_key_values"):
            rows = window if i.shape[2] == "past_sliding_length" else 0
            past[i.name] = np.zeros((1, i.shape[1], rows, head_size), np.float32)
        elif i.name.startswith("past."):
            past[i.name] = np.zeros((1, *i.shape[1:]), np.float32)
    ids = np.random.default_rng(0).integers(0, 1000, (1, prompt)).astype(np.int64)
    tokens, logits, total = [], [], prompt
    for _ in range(steps):
        feeds = {"input_ids": ids, "attention_mask": np.ones((1, total), np.int64), **past}
        if "position_ids" in names:  # the T, H and W streams of text tokens: one position each
            feeds["position_ids"] = np.ascontiguousarray(np.broadcast_to(np.arange(total - ids.shape[1], total),
                                                                         (3, 1, ids.shape[1])))
        out = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        logits.append(out["logits"][0, -1])
        tokens.append(int(np.argmax(logits[-1])))
        for name, value in out.items():
            if name.startswith("present."):
                kv = name.endswith(("key", "value"))
                past[name.replace("present.", "past_key_values." if kv else "past.")] = value
        ids, total = np.array([[tokens[-1]]], np.int64), total + 1
    return tokens, logits


def decodes_as_stock_in_one_segment(family, precision, capfd, **how):
    """A builder decoder of tests/material.py greedy on our CUDA EP under capture=auto: stock's tokens (and logits
    within float32 rounding), every decode step one captured segment. how: greedy's arguments."""
    import onnx

    import material
    from parity import stock_session
    from test_cuda_ep import cuda_session
    path = material.genai_model_dir(family, precision) / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} missing: run tests/material.py")
    model = onnx.load(str(path))
    for node in model.graph.node:  # stock's CPU MatMulNBits multiplies int8-quantized activations at level 4
        for a in node.attribute:
            if node.op_type == "MatMulNBits" and a.name == "accuracy_level":
                a.i = 0
    ours = cuda_session(model, capture="auto", log_capture="1")
    tokens, logits = greedy(ours, **how)
    ref_tokens, ref_logits = greedy(stock_session(model), **how)
    assert tokens == ref_tokens
    for step, (o, r) in enumerate(zip(logits, ref_logits)):
        np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-4, err_msg=f"step {step}")
    assert "1 segment(s), 0 seam(s)" in capfd.readouterr().err


@needs_gpu
@pytest.mark.parametrize("precision", ["fp32", "int4"])
def test_builder_lfm2moe_decodes_as_one_captured_segment(precision, capfd):
    decodes_as_stock_in_one_segment("lfm2moe", precision, capfd)
