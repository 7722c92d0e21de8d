"""native/cuda/args.h is the one contract between the CUDA kernels and their Python side (issue: one contract between
Python, C and CUDA): every struct a kernel takes by value is declared there, Python fills them by field name through
cffi (runtime/cuda_args.py), and nothing re-types a layout by hand. No GPU needed."""
import re
from pathlib import Path

import numpy as np
import pytest

from cuda_sources import kernel_parameters

cuda_args = pytest.importorskip("onnxruntime_ep_seamless.runtime.cuda_args")  # the cuda variant (a CPU wheel lacks it)

ROOT = Path(__file__).resolve().parent.parent
CUDA_SOURCES = sorted((ROOT / "native" / "cuda").glob("*.cu")) + [ROOT / "native" / "cuda" / "common.cuh"]
PACKAGE = ROOT / "python" / "onnxruntime_ep_seamless"
SCALARS = {"int", "unsigned", "int32_t", "int64_t", "uint64_t", "float", "double", "bool"}


def _header_structs() -> set:
    return set(re.findall(r"\}\s*(\w+);", (ROOT / "native" / "cuda" / "args.h").read_text()))


def test_every_struct_a_kernel_takes_by_value_is_declared_in_args_h():
    structs, signatures = _header_structs(), kernel_parameters()
    assert len(signatures) > 400
    by_value = {t for types in signatures.values() for t in types if "*" not in t}
    # the types as instantiated (tests/cuda_sources.py expands the macros): a scalar or an args.h struct
    unknown = {t for t in by_value if t not in SCALARS and t not in structs}
    assert not unknown, f"kernel parameters of types not declared in native/cuda/args.h: {sorted(unknown)}"
    used = by_value | {t.replace("const ", "").rstrip("*") for types in signatures.values() for t in types}
    assert structs - used - {"GpuCheck", "Broadcast"} == set()  # nested in others (and GpuCheck a parameter too)


def test_no_cuda_source_defines_its_own_argument_struct():
    for path in CUDA_SOURCES:
        for name in re.findall(r"^struct (\w+) \{", path.read_text(), re.M):
            assert name not in _header_structs(), f"{path.name} defines args.h's {name} again"


def test_launch_geometry_is_defined_once():
    """args.h's #defines (the dims limit, the launch geometry the host must match) are neither defined again in a
    CUDA source nor re-typed as a number in Python: both read args.h."""
    names = set(re.findall(r"^#define (\w+) \d+", (ROOT / "native" / "cuda" / "args.h").read_text(), re.M))
    assert {"SEAMLESS_MAX_DIMS", "DECODE_THREADS", "NORM_MAX_K"} <= names
    for path in CUDA_SOURCES:
        again = names & set(re.findall(r"^\s*#define (\w+)", path.read_text(), re.M))
        assert not again, f"{path.name} defines args.h's {sorted(again)} again"
    for path in [*(PACKAGE / "kernels" / "cuda").glob("*.py"), PACKAGE / "runtime" / "cuda.py"]:
        typed = [n for n in re.findall(r"^(\w+) = \d", path.read_text(), re.M) if n in names]
        assert not typed, f"{path.name} re-types args.h's {typed}"


def test_python_packs_no_layout_by_hand_and_uses_every_struct():
    sources = {p: p.read_text() for p in [*(PACKAGE / "kernels" / "cuda").glob("*.py"), PACKAGE / "runtime" / "cuda.py",
                                          PACKAGE / "kernels" / "checks.py", PACKAGE / "exec" / "cuda_compute.py"]}
    for path, text in sources.items():
        assert "struct.pack(" not in text and '("bytes",' not in text, f"{path.name} packs a layout by hand"
    named = set(re.findall(r'struct_arg\("(\w+)"', "".join(sources.values())))
    assert _header_structs() - named == {"StageCopy"}  # the staging tables: a numpy dtype (cuda_args.STAGE_COPY)


def test_structs_fill_by_name_with_zeros_for_the_rest():
    raw = cuda_args.pack("GqaShape", batch=2, seq=3, check={"report": 1 << 40, "tag": 7})
    assert len(raw) == cuda_args.ffi.sizeof("GqaShape")
    fields = np.frombuffer(raw[:64], np.int32)
    assert list(fields[:3]) == [2, 3, 0] and not fields[3:].any()
    assert np.frombuffer(raw[64:], np.int64).tolist() == [1 << 40, 7]
    assert np.frombuffer(cuda_args.pack("Broadcast", dims=[4, 5], rank=2)[:16], np.int64).tolist() == [4, 5]


def test_more_dims_than_the_kernels_take_is_a_clear_error():
    with pytest.raises(ValueError, match="up to 8 dims"):
        cuda_args.pack("Strided", dims=[1] * 9, rank=9)


def test_staging_table_entries_are_args_h_stage_copy():
    t = cuda_args.ffi.typeof("StageCopy")
    assert cuda_args.STAGE_COPY.itemsize == cuda_args.ffi.sizeof(t)
    assert [cuda_args.STAGE_COPY.fields[name][1] for name, _ in t.fields] == [f.offset for _, f in t.fields]
    users = [ROOT / "ep_plugin" / "cuda_replay.c", ROOT / "ep_plugin" / "cuda_ort.c",
             PACKAGE / "exec" / "cuda_compute.py"]
    for path in users:
        assert "STAGE_ENTRY" not in path.read_text() and "} StageCopy;" not in path.read_text(), path.name
