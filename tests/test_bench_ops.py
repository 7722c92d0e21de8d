"""`python -m onnxruntime_ep_seamless bench ops`: the single-op models (bench.op_cases) on both EPs, the table,
the JSON; one run a round, so it only shows the command works (docs/benchmarks/slow-ops.md has the numbers)."""
import json

from onnxruntime_ep_seamless.tools.cli import main


def test_bench_ops_command(tmp_path, capsys):
    out = tmp_path / "ops.json"
    assert main(["bench", "ops", "--runs", "1", "--rounds", "1", "--json", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    result = json.loads(out.read_text())
    titles = [c["case"] for c in result["cases"]]  # (op_cases() again would build its ~1.5 GB of models twice)
    ops = {"NonMaxSuppression", "TfIdfVectorizer", "LSTM", "TopK", "MatMulNBits", "Tanh", "Gelu", "Attention",
           "GroupQueryAttention", "QMoE"}
    assert ops == {t.split()[0] for t in titles}
    rows = [line for line in printed if line.split()[:1] and line.split()[0] in ops]
    assert len(rows) == len(titles) and all(row.endswith("x") for row in rows), printed
    assert result["benchmark"] == "ops"
    for case in result["cases"]:  # every node on our EP (fallback disabled), and timed on both
        assert case["fallback_nodes"] == 0 and case["claimed_nodes"] == 1
        assert case["ours_ms"] > 0 and case["stock_ms"] > 0


def test_bench_user_kernel_command(tmp_path, capsys):
    # a user's Python kernel against ours on one Tan node; the registry is left as it was
    from onnxruntime_ep_seamless.kernels import user
    out = tmp_path / "user.json"
    assert main(["bench", "user-kernel", "--runs", "2", "--rounds", "1", "--json", str(out)]) == 0
    assert "a user kernel (np.tan)" in capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["benchmark"] == "user-kernel" and result["ours_us"] > 0 and result["user_us"] > 0
    assert not user.registered_kernels()
