"""The GPU decode benchmark's host pieces, exercised on the CPU: the greedy token of float16 logits,
and the PyTorch peer with the small Qwen2 checkpoint the CUDA test decoders are built from (the GPU
runs use the same code with device "cuda")."""
import numpy as np
import pytest

import material
from onnxruntime_ep_seamless.bench_gpu import greedy_token, run_torch


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_greedy_token_is_numpys_argmax(dtype):
    rng = np.random.default_rng(0)
    rows = [rng.standard_normal(151936) * 8, -rng.random(1000) - 1, np.array([-np.inf, -3.0, np.inf, np.inf]),
            np.array([-2.0, 5.0, 1.0, 5.0, -7.0]), np.full(7, -1.5), np.array([-65504.0, -1.0])]
    for row in rows:
        row = row.astype(dtype)
        assert greedy_token(row) == int(np.argmax(row)), row[:8]


@pytest.mark.filterwarnings("ignore:.*past_key_values.*:FutureWarning")  # transformers renames it; both work
def test_torch_peer_decodes_greedily_and_reports_ms_per_token():
    checkpoint = material.genai_small_dir("fp16", "cuda").parent / "checkpoint-qwen2-small"
    if not (checkpoint / "model.safetensors").exists():
        pytest.skip(f"{checkpoint} not prepared (python tests/material.py)")
    result = run_torch(str(checkpoint), steps=3, prompt=4, rounds=2, dtype="float32", device="cpu")
    assert result["ep"] == "torch" and result["steps"] == 3 and result["rounds"] == 2
    assert 0 < result["ms_per_token"] and result["tokens_per_s"] == pytest.approx(1e3 / result["ms_per_token"])
