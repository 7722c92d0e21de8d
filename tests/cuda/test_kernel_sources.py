"""Rules every CUDA kernel's source keeps (no GPU, no nvcc). That every kernel compiles for every shipped
architecture is checked on the cu13 wheel's fatbin (tests/wheels/test_wheel.py)."""
import re

from cuda_sources import KERNEL, SOURCES, expanded


def test_every_kernel_first_waits_for_the_kernel_before_it():
    """On sm_90 and up every kernel is launched with programmatic dependent launch (it may start
    while the kernel before it runs): its first statement must be common.cuh's dependent_launch(),
    or (after let_next_launch()) a call of a device function that waits (wait_for_previous) itself."""
    missing, kernels = [], 0
    for path in SOURCES:
        text = expanded(path)
        for match in KERNEL.finditer(text):
            kernels += 1
            body = text[text.index("{", match.end()) + 1:].lstrip(" \\\n")
            if body.startswith("dependent_launch();"):
                continue
            callee = re.match(r"(?:let_next_launch\(\);[\s\\]*)?(\w+)", body)
            definition = callee and re.search(r"__device__ [^;{]*\b" + callee.group(1) + r"\(", text)
            if not definition or "wait_for_previous();" not in text[definition.end():text.find("\n}", definition.end())]:
                missing.append(f"{path.name}: {match.group(1)}")
    assert len(missing) == 0 and kernels >= 300, (kernels, missing)
