"""The GPU decode benchmark's PyTorch peer, exercised on the CPU with the small Qwen2 checkpoint the
CUDA test decoders are built from (the GPU runs use the same code with device "cuda")."""
import pytest

import material
from onnxruntime_ep_seamless.bench_gpu import run_torch


@pytest.mark.filterwarnings("ignore:.*past_key_values.*:FutureWarning")  # transformers renames it; both work
def test_torch_peer_decodes_greedily_and_reports_ms_per_token():
    checkpoint = material.genai_small_dir("fp16", "cuda").parent / "checkpoint-qwen2-small"
    if not (checkpoint / "model.safetensors").exists():
        pytest.skip(f"{checkpoint} not prepared (python tests/material.py)")
    result = run_torch(str(checkpoint), steps=3, prompt=4, rounds=2, dtype="float32", device="cpu")
    assert result["ep"] == "torch" and result["steps"] == 3 and result["rounds"] == 2
    assert 0 < result["ms_per_token"] and result["tokens_per_s"] == pytest.approx(1e3 / result["ms_per_token"])
