"""Every CUDA kernel compiles with nvcc for every architecture the package ships (no GPU needed:
CI runs this on a CPU machine with nvcc from NVIDIA's wheels, tests/run.sh). It uses the package
build's own step (ep_plugin/build_plugin.build_cuda_kernels), so what passes here is what ships."""
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "native" / "cuda").glob("*.cu"))
KERNEL = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)')


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH (tests/run.sh installs CUDA 13.0's from PyPI)")
def test_every_kernel_compiles_for_every_shipped_architecture(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "ep_plugin"))
    try:
        import build_plugin
    finally:
        sys.path.pop(0)
    monkeypatch.setenv("SEAMLESS_REQUIRE_NVCC", "1")
    # uncompressed (nvcc compresses the images it finds large, which would hide the names looked for below);
    # the same compilation as the shipped, compressed build
    fatbin = build_plugin.build_cuda_kernels(tmp_path, compress=False).read_bytes()
    # the loader finds kernels by their unmangled names (extern "C"): each must be in the image
    kernels = {name for p in SOURCES for name in KERNEL.findall(p.read_text())}
    assert len(kernels) >= 30, sorted(kernels)
    missing = sorted(k for k in kernels if k.encode() not in fatbin)
    assert not missing, f"kernels missing from the fatbin: {missing}"
    # one SASS image per shipped architecture: each names its "sm_NN" (a PTX-only target does not)
    for arch in build_plugin.CUDA_ARCHS:
        assert f"sm_{arch}".encode() in fatbin, f"no image for sm_{arch}"


def test_every_kernel_first_waits_for_the_kernel_before_it():
    """On sm_90 and up every kernel is launched with programmatic dependent launch (it may start
    while the kernel before it runs): its first statement must be common.cuh's dependent_launch(),
    or (after let_next_launch()) a call of a device function that waits (wait_for_previous) itself."""
    missing = []
    for path in SOURCES:
        text = path.read_text()
        for match in KERNEL.finditer(text):
            body = text[text.index("{", match.end()) + 1:].lstrip(" \\\n")
            if body.startswith("dependent_launch();"):
                continue
            callee = re.match(r"(?:let_next_launch\(\);[\s\\]*)?(\w+)", body)
            definition = callee and re.search(r"__device__ [^;{]*\b" + callee.group(1) + r"\(", text)
            if not definition or "wait_for_previous();" not in text[definition.end():text.find("\n}", definition.end())]:
                missing.append(f"{path.name}: {match.group(1)}")
    assert len(missing) == 0 and sum(len(KERNEL.findall(p.read_text())) for p in SOURCES) >= 30, missing
