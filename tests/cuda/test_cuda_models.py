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
