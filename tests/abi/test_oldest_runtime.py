"""The light runtime matrix: the EP on older supported onnxruntime releases, each in its own venv.

- 1.23 (SEAMLESS_OLDEST_ORT_PYTHON): the oldest supported release (the floor, docs/versioning.md);
- 1.26 (SEAMLESS_ORT126_PYTHON): the first with session-level graph-capture hooks (used by the CUDA
  variant; the CPU EP must simply keep working there).
The newest release (1.32) is the main test venv, where every other test runs.
tests/run.sh prepares both venvs (with the wheel built by wheels/build.sh) and sets the variables.
"""
import os
import subprocess

import pytest

RUNTIMES = {"1.23": "SEAMLESS_OLDEST_ORT_PYTHON", "1.26": "SEAMLESS_ORT126_PYTHON"}


@pytest.fixture(params=sorted(RUNTIMES), ids=lambda v: f"ort{v}")
def runtime(request):
    """(expected onnxruntime major.minor, that venv's python)"""
    python = os.environ.get(RUNTIMES[request.param])
    if not python:
        pytest.skip(f"{RUNTIMES[request.param]} not set (tests/run.sh sets it)")
    return request.param, python


def run(python, *args):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # that venv's installed package only
    return subprocess.run([python, *args], capture_output=True, text=True, timeout=300, cwd="/", env=env)


def test_runtime_is_the_expected_release(runtime):
    version, python = runtime
    out = run(python, "-c", "import onnxruntime; print(onnxruntime.__version__)")
    assert out.stdout.strip().startswith(version + "."), out.stdout + out.stderr


def test_check_and_demo_pass(runtime):
    _, python = runtime
    check = run(python, "-m", "onnxruntime_ep_seamless", "check")
    assert check.returncode == 0 and check.stdout.rstrip().endswith("OK"), check.stdout + check.stderr
    demo = run(python, "-m", "onnxruntime_ep_seamless", "demo", "--runs", "5")
    assert demo.returncode == 0, demo.stderr
    assert "SeamlessCPUExecutionProvider: 29/29 nodes" in demo.stdout
    diff = float(demo.stdout.split("max |diff| vs stock ORT CPU = ")[1].split()[0])
    assert diff < 1e-4


def test_a_model_with_an_if_runs(runtime, tmp_path):
    """Before 1.27 ORT hands a fused node no outer values its subgraphs read: the If is declined (with fallback, ORT
    runs it) and on 1.23, whose fused nodes of different subgraphs share names, its branches' nodes are left to ORT
    too (claiming them failed the session: "Conflicting with a registered kernel")."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels"))
    from test_control import _if_on_input
    model = _if_on_input()
    model.ir_version = 8  # what 1.23 reads
    path = tmp_path / "if.onnx"
    path.write_bytes(model.SerializeToString())
    _, python = runtime
    code = ("import sys, numpy as np, onnxruntime as ort, onnxruntime_ep_seamless as s\n"
            "sess = ort.InferenceSession(sys.argv[1], s.session_options())\n"
            "stock = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])\n"
            "for c in (True, False):\n"
            "    f = {'c': np.array(c), 'a': np.ones((3, 4), np.float32) * 2, 'z': np.ones((3, 4), np.float32)}\n"
            "    assert (sess.run(None, f)[0] == stock.run(None, f)[0]).all()\n"
            "print('ok', [op for _, op in s.partition_report(sess).ep_nodes])\n")
    out = run(python, "-c", code, str(path))
    assert out.returncode == 0 and out.stdout.startswith("ok"), out.stdout + out.stderr
    assert "'If'" not in out.stdout and "'Relu'" in out.stdout and "'Neg'" in out.stdout, out.stdout


def test_a_custom_domain_op_from_a_python_kernel(runtime, tmp_path):
    """ORT >= 1.24 takes the custom ops' schemas from the EP's factory: on 1.26 a custom-domain model runs on the EP
    with fallback disabled; 1.23 has no such call, and registering the kernel says so."""
    from onnx import TensorProto, helper
    version, python = runtime
    graph = helper.make_graph([helper.make_node("Twice", ["x"], ["y"], domain="my.domain")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.domain", 1)],
                              ir_version=8)
    path = tmp_path / "custom.onnx"
    path.write_bytes(model.SerializeToString())
    code = ("import sys, numpy as np, onnxruntime as ort, onnxruntime_ep_seamless as s\n"
            "try:\n"
            "    s.register_kernel('Twice', lambda x: x + x, domain='my.domain', inputs=[None], outputs=[None])\n"
            "except ValueError as exc:\n"
            "    print('refused', exc)\n"
            "    sys.exit(0)\n"
            "so = s.session_options()\n"
            "so.add_session_config_entry('session.disable_cpu_ep_fallback', '1')\n"
            "sess = ort.InferenceSession(sys.argv[1], so)\n"
            "print('ok', sess.run(None, {'x': np.arange(3, dtype=np.float32)})[0].tolist())\n")
    out = run(python, "-c", code, str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    if version == "1.23":
        assert out.stdout.startswith("refused") and "needs onnxruntime >= 1.24" in out.stdout, out.stdout
    else:
        assert out.stdout.strip() == "ok [0.0, 2.0, 4.0]", out.stdout + out.stderr
