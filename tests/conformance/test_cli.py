"""The conformance and coverage commands of `python -m onnxruntime_ep_seamless`."""
import subprocess
import sys

from onnxruntime_ep_seamless.tools.cli import main


def test_conformance_command_reports_totals_and_ops(capsys):
    assert main(["conformance", "--select", "^test_(abs|quantizelinear)$", "--list", "all"]) == 0
    out = capsys.readouterr().out
    assert "cases 2: claimed 2 (passed 2, failed 0)" in out
    assert "stock ORT CPU EP passes 2; we pass 2 of those (100.0%)" in out
    assert "QuantizeLinear" in out and "passed   test_abs (Abs)" in out


def test_conformance_command_names_declined_ops(capsys):
    main(["conformance", "--select", "^test_sequence_insert_at_back$", "--no-per-op"])
    out = capsys.readouterr().out
    assert "declined 1" in out and "SequenceInsert:" in out


def test_conformance_without_onnx_is_a_clear_error():
    code = ("import sys; sys.modules['onnx'] = None\n"
            "from onnxruntime_ep_seamless.tools.cli import main; sys.exit(main(['conformance']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "pip install onnx" in out.stderr


def test_coverage_command(capsys):
    assert main(["coverage"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:2] == ["op", "opsets"]
    assert main(["coverage", "--markdown"]) == 0
    assert capsys.readouterr().out.startswith("# Op coverage")
