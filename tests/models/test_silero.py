"""silero-vad, the voice activity detector, from its PyPI wheel (tests/material.py prepare_silero): every export
fully claimed by our EP (CPU fallback disabled: its Ifs included) and stock's answers chunk after chunk, the state
fed back as an application does."""
import numpy as np
import pytest

import onnxruntime_ep_seamless as seamless
from onnxruntime_ep_seamless.runtime.native import NATIVES
import material
from parity import assert_close, ep_session, stock_session

EXPORTS = ["silero_vad.onnx", "silero_vad_16k_op15.onnx", "silero_vad_half.onnx", "silero_vad_op18_ifless.onnx",
           "silero_vad_16k_sequence.onnx", "silero_vad_openvino_16k.onnx"]


def _audio(n, seed):
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 16000
    return (0.3 * np.sin(2 * np.pi * 220 * t) * rng.uniform(0, 1) + 0.05 * rng.standard_normal(n)).astype(np.float32)


def _path(export):
    path = material.silero_dir() / export
    if not path.exists():
        pytest.skip(f"{path} missing: run tests/material.py")
    return str(path)


def run_chunks(ours, stock, export, rate, chunks, atol=1e-5, before=None):
    """`chunks` chunks of audio through both sessions, each session's state fed back as an application does (ours
    from ours), our outputs checked against stock's; skips a rate the export does not take. before(k) runs before
    chunk k (a test's counters)."""
    names = [i.name for i in stock.get_inputs()]
    if rate == 8000 and "sr" not in names:
        pytest.skip("a 16 kHz export")
    fixed = stock.get_inputs()[0].shape[-1]
    chunk = fixed if isinstance(fixed, int) else (512 if rate == 16000 else 256)
    states = {i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape], np.float32)
              for i in stock.get_inputs() if i.name not in ("input", "sr")}
    for k in range(chunks):
        feeds = {"input": _audio(chunk, k).reshape(1, chunk), **states}
        if "sr" in names:
            feeds["sr"] = np.array(rate, np.int64)
        if before:
            before(k)
        got, want = ours.run(None, feeds), stock.run(None, feeds)
        for j, (o, r) in enumerate(zip(got, want)):
            # 5 conv layers and an LSTM over 512 samples: float32 sums in another order than MLAS's; the half
            # export computes in float16, its intermediates rounded where stock's kernels round them, or not
            # (one float16 ulp of the outputs' scale, ~1: 1e-3)
            rtol, tol = (4e-3, 1e-3) if "half" in export else (1e-4, atol)
            assert_close(o, r, rtol, tol, f"chunk {k}, output {j}")
        states = {n: got[j + 1] for j, n in enumerate(states)}


@pytest.mark.parametrize("export", EXPORTS)
@pytest.mark.parametrize("rate", [16000, 8000])
def test_silero_chunks_as_stock(export, rate):
    path = _path(export)
    ours, stock = ep_session(path), stock_session(path)
    report = seamless.assert_ep_selected(ours)
    assert not report.fallback_nodes, report
    runs = []  # native runs before each chunk; 6 chunks: the first two through Python, then the binding's program
    run_chunks(ours, stock, export, rate, 6, before=lambda k: runs.append(NATIVES["cpu"].lib.seamless_native_runs()))
    runs.append(NATIVES["cpu"].lib.seamless_native_runs())
    in_c = [b - a for a, b in zip(runs, runs[1:])]
    # the sample rate's If recorded per binding (sr keyed by value): every later chunk answered in C
    assert all(in_c[2:]), in_c
