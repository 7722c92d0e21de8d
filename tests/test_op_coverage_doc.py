"""docs/op-coverage.md is generated from the kernel registry; this fails when it is stale."""
from pathlib import Path

from onnxruntime_ep_seamless.tools.coverage import render

DOC = Path(__file__).resolve().parent.parent / "docs" / "op-coverage.md"
REGENERATE = "python -m onnxruntime_ep_seamless coverage --markdown > docs/op-coverage.md"


def test_op_coverage_doc_is_current():
    assert DOC.read_text() == render(markdown=True), f"docs/op-coverage.md is stale; regenerate it: {REGENERATE}"


def test_plain_table_lists_every_op():
    text = render()
    for op in ("Add", "Cast", "QuantizeLinear", "GridSample", "LSTM", "ai.onnx.ml::TreeEnsemble"):
        assert any(line.split()[0] == op for line in text.splitlines() if line.strip()), op
