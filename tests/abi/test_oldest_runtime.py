"""The oldest supported onnxruntime (1.23) runs the EP: `check` and the demo in a venv that has it.

tests/run.sh prepares that venv and sets SEAMLESS_OLDEST_ORT_PYTHON to its interpreter.
"""
import os
import subprocess

import pytest

PYTHON = os.environ.get("SEAMLESS_OLDEST_ORT_PYTHON")
pytestmark = pytest.mark.skipif(not PYTHON, reason="SEAMLESS_OLDEST_ORT_PYTHON not set (tests/run.sh sets it)")


def run(*args):
    return subprocess.run([PYTHON, *args], capture_output=True, text=True, timeout=300, cwd="/")


def test_runtime_is_the_oldest_supported():
    out = run("-c", "import onnxruntime; print(onnxruntime.__version__)")
    assert out.stdout.strip().startswith("1.23."), out.stdout + out.stderr


def test_check_and_demo_pass_on_oldest_runtime():
    check = run("-m", "onnxruntime_ep_seamless", "check")
    assert check.returncode == 0 and check.stdout.rstrip().endswith("OK"), check.stdout + check.stderr
    demo = run("-m", "onnxruntime_ep_seamless", "demo", "--runs", "5")
    assert demo.returncode == 0, demo.stderr
    assert "SeamlessCPUExecutionProvider: 29/29 nodes" in demo.stdout
    diff = float(demo.stdout.split("max |diff| vs stock ORT CPU = ")[1].split()[0])
    assert diff < 1e-4
