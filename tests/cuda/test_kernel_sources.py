"""Rules every CUDA kernel's source keeps (no GPU, no nvcc). That every kernel compiles for every shipped
architecture is checked on the cu13 wheel's fatbin (tests/wheels/test_wheel.py)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "native" / "cuda").glob("*.cu"))
KERNEL = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)')


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
