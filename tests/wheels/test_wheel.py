"""The PyPI wheel (CPU distribution): built and checked by wheels/build.sh, installed in a clean room by
wheels/smoke.sh with the oldest (1.23.2) and the newest (1.32.0) onnxruntime.

tests/run.sh builds the wheel once per run and sets SEAMLESS_WHEEL; without it (a plain pytest run)
the wheel is built here into a temporary folder. Needs the package index (pip installs numpy, cffi
and onnxruntime into the fresh venv; pip's cache keeps that fast).
"""
import os
import shutil
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
CP = "cp%d%d" % sys.version_info[:2]


def _env():
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SEAMLESS_PYTHON", "SEAMLESS_LIBPYTHON")}
    env["PYTHON"] = sys.executable  # the wheel is for this CPython
    return env


def _tail(proc, n=4000):
    return (proc.stdout + "\n" + proc.stderr)[-n:]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    given = os.environ.get("SEAMLESS_WHEEL")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(["bash", str(ROOT / "wheels" / "build.sh"), str(out)], capture_output=True, text=True,
                          timeout=900, env=_env())
    assert proc.returncode == 0, _tail(proc)
    assert "check_wheel: OK" in proc.stdout, _tail(proc)
    return Path(proc.stdout.strip().splitlines()[-1])


def _tools_python() -> Path:
    cache = os.environ.get("SEAMLESS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "onnxruntime-ep-seamless")
    return Path(cache) / ("wheel-tools-%d.%d" % sys.version_info[:2]) / "bin" / "python"


def test_wheel_name_and_contents(wheel):
    assert re.fullmatch(rf"onnxruntime_ep_seamless-[0-9.]+-{CP}-{CP}-manylinux_2_28_x86_64\.whl", wheel.name)
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        wheel_meta = zf.read(next(n for n in names if n.endswith(".dist-info/WHEEL"))).decode()
    assert f"Tag: {CP}-{CP}-manylinux_2_28_x86_64" in wheel_meta
    assert "onnxruntime_ep_seamless/libonnxruntime_ep_seamless_cpu.so" in names
    assert "onnxruntime_ep_seamless/demo/add.onnx" in names
    # the checks build.sh ran, again, here (tools venv from build.sh: pyelftools)
    tools = _tools_python()
    if not tools.exists():
        pytest.skip(f"{tools} missing (made by wheels/build.sh)")
    proc = subprocess.run([str(tools), str(ROOT / "wheels" / "check_wheel.py"), str(wheel)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, _tail(proc)


def test_check_wheel_catches_a_symlink_and_a_wrong_tag(wheel, tmp_path):
    tools = _tools_python()
    if not tools.exists():
        pytest.skip(f"{tools} missing (made by wheels/build.sh)")
    bad = tmp_path / wheel.name.replace("manylinux_2_28_x86_64", "linux_x86_64")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(bad, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, src.read(info))
        link = zipfile.ZipInfo("onnxruntime_ep_seamless/libonnxruntime_ep_seamless_cpu.so.1")
        link.external_attr = (0o120777 << 16)  # a symlink entry
        dst.writestr(link, "libonnxruntime_ep_seamless_cpu.so")
    proc = subprocess.run([str(tools), str(ROOT / "wheels" / "check_wheel.py"), str(bad)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1
    assert "is a symlink" in proc.stderr and "file name" in proc.stderr, proc.stderr


def test_clean_room_install_oldest_and_newest_onnxruntime(wheel):
    proc = subprocess.run(["bash", str(ROOT / "wheels" / "smoke.sh"), str(wheel)], capture_output=True, text=True,
                          timeout=900, env=_env())
    assert proc.returncode == 0, _tail(proc)
    out = proc.stdout
    assert out.strip().splitlines()[-1].startswith("smoke: OK"), _tail(proc)
    for version in ("1.23.2", "1.32.0"):
        section = out.split(f"== onnxruntime {version}")[1].split("== onnxruntime")[0]
        assert f"smoke_check: onnxruntime {version}" in section
        assert "SeamlessCPUExecutionProvider: 29/29 nodes" in section  # the demo, fallback disabled
        assert section.count("\nOK\n") >= 1  # `check`
        if "C host skipped" not in section:
            assert "runs on 2 threads: exact" in section  # the C program, with no environment at all


@pytest.fixture(scope="module")
def cu13_wheel(tmp_path_factory) -> Path:
    """The CUDA distribution, built once: CI's only compilation of native/cuda (nvcc from PyPI, tests/run.sh)."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc (CUDA 13) not on PATH: the cu13 wheel needs it")
    proc = subprocess.run(["bash", str(ROOT / "wheels" / "build.sh"), str(tmp_path_factory.mktemp("cu13"))],
                          capture_output=True, text=True, timeout=900, env={**_env(), "FLAVOR": "cu13"})
    assert proc.returncode == 0, _tail(proc)
    assert "check_wheel: OK" in proc.stdout, _tail(proc)
    return Path(proc.stdout.strip().splitlines()[-1])


def test_cu13_wheel_builds_with_both_variants(cu13_wheel):
    """CPU and CUDA libraries, the CUDA kernels, a dependency on cuBLAS's wheel, the same checks as the
    CPU wheel (wheels/check_wheel.py --flavor cu13)."""
    assert re.fullmatch(rf"onnxruntime_ep_seamless_cu13-[0-9.]+-{CP}-{CP}-manylinux_2_28_x86_64\.whl", cu13_wheel.name)
    with zipfile.ZipFile(cu13_wheel) as zf:
        names = set(zf.namelist())
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert {"onnxruntime_ep_seamless/libonnxruntime_ep_seamless_cuda.so",
            "onnxruntime_ep_seamless/_kernels_cuda.fatbin"} <= names
    assert "Requires-Dist: nvidia-cublas" in metadata


def _fatbin_images(fatbin: bytes) -> bytes:
    """The fatbin's images as text: nvcc compresses large ones with zstd (each a zstd frame), the rest are plain."""
    import zstandard
    magic, parts, at = b"\x28\xb5\x2f\xfd", [], 0
    while (start := fatbin.find(magic, at)) >= 0:
        parts.append(fatbin[at:start])
        frame = zstandard.ZstdDecompressor().decompressobj()
        parts.append(frame.decompress(fatbin[start:]))
        at = len(fatbin) - len(frame.unused_data)
    parts.append(fatbin[at:])
    return b"".join(parts)


def test_cu13_wheel_has_every_kernel_for_every_shipped_architecture(cu13_wheel):
    sys.path.insert(0, str(ROOT / "ep_plugin"))
    try:
        import build_plugin
    finally:
        sys.path.pop(0)
    with zipfile.ZipFile(cu13_wheel) as zf:
        images = _fatbin_images(zf.read("onnxruntime_ep_seamless/_kernels_cuda.fatbin"))
    # the loader finds kernels by their unmangled names (extern "C"): each must be in the image
    from cuda_sources import kernel_names
    kernels = kernel_names()
    assert len(kernels) >= 300, sorted(kernels)
    missing = sorted(k for k in kernels if k.encode() not in images)
    assert not missing, f"kernels missing from the fatbin: {missing}"
    # one SASS image per shipped architecture: each names its "sm_NN" (a PTX-only target does not)
    for arch in build_plugin.CUDA_ARCHS:
        assert f"sm_{arch}".encode() in images, f"no image for sm_{arch}"
