"""Models on the CUDA EP (skipped without a GPU): every node on our EP, outputs within tolerance
of stock ORT's CPU EP. Models come from the test material cache, or from SEAMLESS_GPU_MODELS (a
folder with bert_small_op17.onnx and the tiny Llama exports, for machines without the cache)."""
import os
from pathlib import Path

import numpy as np
import pytest

import material
from parity import assert_close, stock_session
from test_cuda_ep import DEVICES, PROBLEM, run_on_cuda

pytestmark = pytest.mark.skipif(not DEVICES, reason=f"no NVIDIA GPU for the CUDA EP ({PROBLEM or 'none found'})")
FOLDER = Path(os.environ["SEAMLESS_GPU_MODELS"]) if os.environ.get("SEAMLESS_GPU_MODELS") else None


def model_path(name: str, default: Path) -> str:
    path = FOLDER / name if FOLDER else default
    if not path.exists():
        pytest.skip(f"{path} not prepared")
    return str(path)


# cuBLAS accumulates in another order than MLAS: float32 agrees to ~1e-5 of the values' scale
RTOL, ATOL = 1e-4, 1e-4


def test_bert_encoder():
    path = model_path("bert_small_op17.onnx", material.minilm_dir() / "minilm_op17.onnx")
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 1000, (3, 11)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, 7:] = 0
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    (ours,) = run_on_cuda(path, feeds)
    (ref,) = stock_session(path).run(None, feeds)
    keep = mask.astype(bool)
    assert_close(ours[keep], ref[keep], RTOL, ATOL, "last_hidden_state")


@pytest.mark.parametrize("export", ["llama_legacy_op17.onnx", "llama_dynamo.onnx"])
@pytest.mark.parametrize("batch,seq,past", [(2, 5, 3), (1, 1, 7), (1, 6, 0)])
def test_tiny_llama(export, batch, seq, past):
    from models.test_real_models import llama_feeds
    path = model_path(export, material.tiny_llama_dir() / export)
    feeds = llama_feeds(batch, seq, past)
    ours = run_on_cuda(path, feeds)
    ref = stock_session(path).run(None, feeds)
    for i, (o, r) in enumerate(zip(ours, ref)):
        assert_close(o, r, RTOL, ATOL, f"output {i}")


def decoder_session_feeds(path, dtype, steps=4, prompt=8):
    """Prefill `prompt` random tokens, then `steps` decode steps feeding present back as past;
    yields the feeds of each run (the same for our EP and stock ORT, from stock ORT's tokens)."""
    import onnx
    model = onnx.load(path, load_external_data=False)
    layers = sum(1 for i in model.graph.input if i.name.endswith(".key"))
    kv = next(i for i in model.graph.input if i.name.endswith(".key")).type.tensor_type.shape.dim
    heads, head_size = kv[1].dim_value, 64
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 1000, (1, prompt)).astype(np.int64)
    past = {f"past_key_values.{i}.{kv_}": np.zeros((1, heads, 0, head_size), dtype)
            for i in range(layers) for kv_ in ("key", "value")}
    return layers, ids, past


@pytest.mark.parametrize("precision", ["fp16", "int4"])
def test_builder_qwen2_cuda_decode(precision):
    """The model builder's `-e cuda` tiny Qwen2 (float16 activations and KV): prefill and decode
    steps on our CUDA EP, logits against stock ORT CPU running the same file."""
    path = model_path(f"qwen2-{precision}-cuda/model.onnx", Path("/nonexistent"))
    layers, ids, past = decoder_session_feeds(path, np.float16)
    stock = stock_session(path)
    import onnxruntime_ep_seamless as seamless
    from test_cuda_ep import cuda_session
    ours_sess = cuda_session(path)
    report = seamless.assert_ep_selected(ours_sess, device="cuda")
    assert not report.fallback_nodes, report
    tokens = ids
    total = ids.shape[1]
    for step in range(5):
        feeds = {"input_ids": tokens, "attention_mask": np.ones((1, total), np.int64), **past}
        ours = ours_sess.run(None, feeds)
        ref = stock.run(None, feeds)
        # float16 activations: differences of a few float16 ulps of the values' scale
        scale = float(np.max(np.abs(ref[0].astype(np.float32))))
        np.testing.assert_allclose(ours[0].astype(np.float32), ref[0].astype(np.float32), rtol=0, atol=2e-2 * scale)
        names = [o.name for o in stock.get_outputs()]
        past = {n.replace("present", "past_key_values"): v for n, v in zip(names[1:], ref[1:])}
        tokens = np.array([[int(np.argmax(ref[0][0, -1]))]], np.int64)
        total += 1
