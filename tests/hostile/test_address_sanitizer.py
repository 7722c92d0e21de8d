"""The native CPU kernels under AddressSanitizer: the package's native library rebuilt by its own build step
(ep_plugin/build_plugin.build_native_cpu) with -fsanitize=address into a copy of the installed package, then the
kernel and model tests (tests/kernels, tests/models: the native programs of real models, onnxruntime-genai's
decoders) run against that copy in a subprocess (libasan preloaded: the Python binary is not instrumented). A read
or write one float past a buffer that the tests' comparisons would not notice (a spill into memory nobody checks)
ends the run with ASan's report. Skipped where gcc has no libasan."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"


def _gcc_file(name: str):
    if not shutil.which("gcc"):
        return None
    path = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
    return path if os.path.isabs(path) and os.path.exists(path) else None


@pytest.mark.skipif(not (_gcc_file("libasan.so") and _gcc_file("libstdc++.so")), reason="gcc without libasan")
def test_cpu_kernels_under_address_sanitizer(tmp_path, monkeypatch):
    import onnxruntime_ep_seamless
    sys.path.insert(0, str(ROOT / "ep_plugin"))
    try:
        import build_plugin
    finally:
        sys.path.pop(0)
    package = tmp_path / "site" / "onnxruntime_ep_seamless"
    shutil.copytree(Path(onnxruntime_ep_seamless.__file__).parent, package,
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(build_plugin, "CFLAGS",
                        build_plugin.CFLAGS + ["-fsanitize=address", "-fno-omit-frame-pointer"])
    (tmp_path / "build").mkdir()
    build_plugin.build_native_cpu(package, tmp_path / "build")
    # libstdc++ preloaded too: ASan's interceptor of C++ throws needs it resolved first (ORT throws for bad inputs)
    env = {**os.environ, "LD_PRELOAD": f"{_gcc_file('libasan.so')} {_gcc_file('libstdc++.so')}",
           "ASAN_OPTIONS": "detect_leaks=0", "PYTHONPATH": str(tmp_path / "site")}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-x", "-p", "no:cacheprovider", "kernels",
                          "models"], cwd=TESTS, env=env, capture_output=True, text=True, timeout=1200)
    out = run.stdout + run.stderr
    assert f"{tmp_path}/site/onnxruntime_ep_seamless" in subprocess.run(
        [sys.executable, "-c", "import onnxruntime_ep_seamless.kernels.cpu.native as n; print(n.__file__)"],
        env=env, capture_output=True, text=True).stdout, "the kernel tests did not import the sanitized copy"
    assert "AddressSanitizer" not in out and run.returncode == 0, out[-6000:]
