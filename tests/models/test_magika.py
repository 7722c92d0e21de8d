"""Magika, the file-type classifier, from its PyPI wheel (tests/material.py prepare_magika): every node on our EP (CPU
fallback disabled), stock's scores and labels for real files' bytes, and from its third run a native program without
Python steps (its Conv over [N, C, L, 1], Tanh, GlobalMaxPool, ReduceMax and the Gemm with a [1, N] bias)."""
import json
from pathlib import Path

import numpy as np
import pytest

import material
from parity import assert_close, ep_session, stock_session


def _model():
    path = material.magika_dir() / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} missing: run tests/material.py")
    return str(path)


def features(contents: list[bytes]) -> np.ndarray:
    """The model's input for each file as Magika reads one (its config: the first and the last `beg_size` /
    `end_size` bytes, the padding token where a file is shorter); Magika's stripping of whitespace is left out."""
    config = json.loads((material.magika_dir() / "config.min.json").read_text())
    begin, end, pad = config["beg_size"], config["end_size"], config["padding_token"]
    rows = []
    for data in contents:
        head = list(data[:begin]) + [pad] * (begin - len(data[:begin]))
        tail_bytes = data[-end:] if data else b""
        tail = [pad] * (end - len(tail_bytes)) + list(tail_bytes)
        rows.append(head + tail)
    return np.array(rows, np.int32)


def samples() -> list[bytes]:
    """Files of at least 2 KB: the model's input is mostly their bytes (see test_magika_short_files)."""
    rng = np.random.default_rng(0)
    png = b"\x89PNG\r\n\x1a\n" + bytes(rng.integers(0, 256, 3000, dtype=np.uint8))
    text = b"".join(b'{"id": %d, "name": "item %d", "tags": ["a", "b"]}\n' % (i, i) for i in range(60))
    return [Path(__file__).read_bytes(), png, text, bytes(rng.integers(0, 256, 5000, dtype=np.uint8))]


def _scores(path, feeds):
    want = stock_session(path).run(None, feeds)[0]
    ours = ep_session(path)
    return want, [ours.run(None, feeds)[0] for _ in range(3)]  # the Python plan's run, the recording, the program


def test_magika_scores_files_as_stock():
    path = _model()
    want, runs = _scores(path, {"bytes": features(samples())})
    for got in runs:
        # a softmax over 214 types after a 5-tap conv of 256 channels, layer norms and two dense layers: float32
        # sums in another order than MLAS's, and Tanh exact (the Python plan) or our polynomial (relative error
        # ~2e-7) against MLAS's own approximation; observed up to 2.3e-4 relative in a score
        assert_close(got, want, rtol=1e-3, atol=1e-7, name="scores")
        assert (got.argmax(1) == want.argmax(1)).all()


def test_magika_short_files():
    """Files shorter than the model's window: mostly padding tokens, whose features the layer norms divide by a tiny
    spread, so every rounding difference grows (observed up to 1.2e-2 in a log score, in stock's order of sums and
    in ours alike): the same label, and log scores within 5e-2."""
    path = _model()
    want, runs = _scores(path, {"bytes": features([b"", b'{"a": [1, 2, 3], "b": "text"}\n', b"#!/bin/sh\necho hi\n"])})
    for got in runs:
        assert (got.argmax(1) == want.argmax(1)).all()
        assert_close(np.log(got), np.log(want), rtol=0, atol=5e-2, name="log scores")
