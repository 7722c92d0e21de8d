"""Real models, fully claimed by our EP (CPU fallback disabled), with parity to stock ORT's CPU EP."""
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import material
from parity import assert_close, assert_parity, run_ours, stock_session

import onnxruntime_ep_seamless as seamless


@pytest.mark.parametrize("name", material.LIGHT_MODELS)
def test_light_cnn(name):
    model_path, expected_path = material.light_model(name)
    model = onnx.load(str(model_path))
    expected = numpy_helper.to_array(onnx.load_tensor(str(expected_path)))
    # conv stacks accumulate rounding differently from MLAS: relative 1e-4 of the output scale
    (ours,) = assert_parity(model, _light_cnn_feeds(model), rtol=1e-4, atol=1e-5)
    assert ours.shape == expected.shape


def _light_cnn_feeds(model):
    """The deterministic dummy input of onnx's backend runner (generate_dummy_data, random=False)."""
    inits = {i.name for i in model.graph.initializer}
    (inp,) = [i for i in model.graph.input if i.name not in inits]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    return {inp.name: (np.arange(np.prod(shape)) % 255 / 255.0).astype(np.float32).reshape(shape)}


@pytest.mark.parametrize("name", material.LIGHT_MODELS + ["minilm_op17.onnx", "minilm_dynamo_op23.onnx",
                                                           "minilm_fused.onnx", "demo", "magika"]
                         + [d[0] for d in material.TINY_DECODERS])
def test_runs_as_a_native_program_without_python_steps(name, capfd):
    """Every node of these models has a native step (pooling, LRN, BatchNormalization and Sum; ONNX Attention,
    RotaryEmbedding, GatherND, Cos and Sin of the torch exports; the ORT-optimized MiniLM's com.microsoft Attention,
    EmbedLayerNormalization and BiasGelu; Magika's GlobalMaxPool, ReduceMax and Gemm): from its
    third run a binding is answered in C with no node run by its Python kernel (log_partition=1 names any op that
    would be such a Python step)."""
    from parity import assert_native_without_python_steps
    if name == "magika":
        from models.test_magika import features, samples
        path, feeds = material.magika_dir() / "model.onnx", {"bytes": features(samples())}
        if not path.exists():
            pytest.skip(f"{path} missing: run tests/material.py")
    elif name == "demo":
        path = Path(seamless.__file__).parent / "demo" / "demo_model.onnx"
        feeds = {"input_ids": np.random.default_rng(0).integers(0, 100, (2, 16)).astype(np.int64)}
    elif name.startswith("minilm"):
        path = material.minilm_dir() / name
        feeds = material.minilm_inputs(["A plugin execution provider runs this sentence.", "Short one."])
    elif name in LLAMA:
        path, feeds = material.tiny_llama_dir() / name, llama_feeds(1, 4, 3)
    else:
        path = material.light_model(name)[0]
        feeds = _light_cnn_feeds(onnx.load(str(path)))
    assert_native_without_python_steps(str(path), feeds, capfd)


# export -> (rtol, atol) of the last hidden state (values of magnitude ~1, 6 layers):
# float32: 1e-4, reduction order of 6 layers of matmuls and layer norms against MLAS.
# float16 (ORT's float16 conversion of the fused graph): ORT keeps some intermediates in float16
# inside its kernels (the QKV projection, attention probabilities) where ours compute in float32
# and round each op's output once, so an output can land one float16 ulp away; outputs reach ~6,
# where the ulp is 2^-8 = 3.9e-3 (observed max difference: 3.9e-3): atol 8e-3 (2 ulp) + rtol 4e-3.
MINILM = {"minilm_op17.onnx": (1e-4, 1e-4), "minilm_dynamo_op23.onnx": (1e-4, 1e-4),
          "minilm_fused.onnx": (1e-4, 1e-4), "minilm_fused_fp16.onnx": (4e-3, 8e-3)}


@pytest.mark.parametrize("export", list(MINILM))
def test_minilm_real_weights(export):
    path = str(material.minilm_dir() / export)
    feeds = material.minilm_inputs(["A plugin execution provider runs this sentence.",
                                    "Short one.", "Real weights, real tokenizer, real activations."])
    ref = stock_session(path).run(None, feeds)[0]
    (ours,) = run_ours(path, feeds)
    mask = feeds["attention_mask"].astype(bool)  # padded positions carry no meaning
    rtol, atol = MINILM[export]
    assert_close(ours[mask], ref[mask], rtol=rtol, atol=atol, name="last_hidden_state")


# the opset-23 exports use ONNX Attention, RMSNormalization and RotaryEmbedding (SDPA attention)
LLAMA = ["llama_legacy_op17.onnx", "llama_dynamo.onnx", "llama_dynamo_op23.onnx", "qwen2_dynamo_op23.onnx"]


def llama_feeds(batch, seq, past, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {"input_ids": rng.integers(0, 1024, (batch, seq)).astype(np.int64),
             "attention_mask": np.ones((batch, past + seq), np.int64),
             "position_ids": np.tile(np.arange(past, past + seq, dtype=np.int64), (batch, 1))}
    for i in range(material.LLAMA_LAYERS):
        for kv in ("key", "value"):
            feeds[f"past_{i}_{kv}"] = rng.standard_normal((batch, 2, past, 16)).astype(np.float32)
    return feeds


@pytest.mark.parametrize("export", LLAMA)
@pytest.mark.parametrize("batch,seq,past", [(2, 5, 3), (1, 1, 7), (1, 6, 0)])
def test_tiny_llama(export, batch, seq, past):
    path = str(material.tiny_llama_dir() / export)
    feeds = llama_feeds(batch, seq, past)
    ours = run_ours(path, feeds)
    ref = stock_session(path).run(None, feeds)
    for i, (o, r) in enumerate(zip(ours, ref)):
        assert_close(o, r, rtol=1e-4, atol=1e-5, name=f"output {i}")
