"""Every CUDA kernel compiles with nvcc for every architecture the package ships (no GPU needed:
CI runs this on a CPU machine with nvcc from NVIDIA's wheels, tests/run.sh). It uses the package
build's own step (ep_plugin/build_plugin.build_cuda_kernels), so what passes here is what ships."""
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None,
                                reason="nvcc not on PATH (tests/run.sh installs CUDA 13.0's from PyPI)")


def test_every_kernel_compiles_for_every_shipped_architecture(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "ep_plugin"))
    try:
        import build_plugin
    finally:
        sys.path.pop(0)
    monkeypatch.setenv("SEAMLESS_REQUIRE_NVCC", "1")
    fatbin = build_plugin.build_cuda_kernels(tmp_path).read_bytes()
    # the loader finds kernels by their unmangled names (extern "C"): each must be in the image
    sources = sorted((ROOT / "native" / "cuda").glob("*.cu"))
    kernels = {name for p in sources for name in re.findall(r'extern "C" __global__ void (\w+)', p.read_text())}
    assert len(kernels) >= 30, sorted(kernels)
    missing = sorted(k for k in kernels if k.encode() not in fatbin)
    assert not missing, f"kernels missing from the fatbin: {missing}"
    # one SASS image per shipped architecture: each names its "sm_NN" (a PTX-only target does not)
    for arch in build_plugin.CUDA_ARCHS:
        assert f"sm_{arch}".encode() in fatbin, f"no image for sm_{arch}"
