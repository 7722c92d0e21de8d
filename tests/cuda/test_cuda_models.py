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


GREEDY_STEPS = 32


@pytest.mark.parametrize("precision", ["fp16", "int4"])
def test_builder_qwen2_cuda_greedy_tokens(precision):
    """The model builder's `-e cuda` Qwen2 (float16 activations and KV, fp16 or int4 weights): 32 greedy
    steps on our CUDA EP give stock ORT CPU's tokens running the same file. Where the two first differ,
    the fp32 build of the same checkpoint, fed the shared prefix, must see a near-tie between them."""
    import onnxruntime_ep_seamless as seamless
    from models.test_llm_decoders import greedy
    from test_cuda_ep import cuda_session
    name = f"qwen2-small-{precision}-cuda"
    path = model_path(f"{name}/model.onnx", material.genai_small_dir(precision, "cuda") / "model.onnx")
    ids = np.random.default_rng(0).integers(0, 1000, 8)
    ours_session = cuda_session(path)
    report = seamless.assert_ep_selected(ours_session, device="cuda")
    assert not report.fallback_nodes, report
    ours, ours_logits = greedy(ours_session, ids, GREEDY_STEPS)
    ref, ref_logits = greedy(stock_session(path), ids, GREEDY_STEPS)
    ours_logits, ref_logits = ([v.astype(np.float32) for v in logits] for logits in (ours_logits, ref_logits))
    same = next((k for k in range(GREEDY_STEPS) if ours[k] != ref[k]), GREEDY_STEPS)
    for k in range(min(same + 1, GREEDY_STEPS)):  # same context up to the first difference
        # float16 activations: the two EPs differ by a few float16 ulps of the logits' scale
        scale = float(np.max(np.abs(ref_logits[k])))
        np.testing.assert_allclose(ours_logits[k], ref_logits[k], rtol=0, atol=2e-2 * scale, err_msg=f"step {k}")
    if same == GREEDY_STEPS:
        return
    oracle_path = model_path("qwen2-small-fp32-cpu/model.onnx", material.genai_small_dir("fp32", "cpu") / "model.onnx")
    oracle = greedy(stock_session(oracle_path), np.concatenate([ids, ref[:same]]), 0)[1][0]
    a, b = ours[same], ref[same]
    # the reduced-precision model moves logits away from fp32 by `drift`; a tie is a gap within that
    drift = float(np.max(np.abs(ref_logits[same][[a, b]] - oracle[[a, b]])))
    scale = float(np.max(np.abs(ref_logits[same])))
    assert abs(oracle[a] - oracle[b]) <= 2 * drift + 2e-2 * scale, (
        f"step {same}: ours {a}, stock {b}; fp32 logits {oracle[a]:.4f} vs {oracle[b]:.4f} (not a near-tie)")
