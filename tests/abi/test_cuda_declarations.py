"""Our declarations of the CUDA driver API subset (ep_plugin/cuda_driver.h) against NVIDIA's cuda.h,
where nvcc (which brings it) is on PATH (tests/run.sh installs it from PyPI): every function of
SEAMLESS_CUDA_FUNCTIONS has the official type (result and parameters; cuda.h's enums we declare as
int under their official names), every CU_ constant our header #defines has the official value, our
scalar and handle typedefs are the official ones, and our structs and unions have the official size
and every member the official offset. Checked by nvcc compiling a host C++ file of
static_asserts made from our header here; nothing from cuda.h enters the repository."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

HEADER = Path(__file__).resolve().parents[2] / "ep_plugin" / "cuda_driver.h"
pytestmark = [pytest.mark.skipif(shutil.which("nvcc") is None,
                                 reason="nvcc (and its cuda.h) not on PATH (tests/run.sh installs CUDA 13.0's from PyPI)"),
              pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ for nvcc's host compilation")]


MACROS = ("SEAMLESS_CUDA_FUNCTIONS", "SEAMLESS_CUDA_GRAPH_FUNCTIONS")  # the driver's functions we resolve


def functions_macro(text: str, macro: str = MACROS[0]) -> str:
    """A function list's definition (SEAMLESS_CUDA_FUNCTIONS(X) …), as written in our header."""
    start = text.index(f"#define {macro}(X)")
    lines = []
    for line in text[start:].splitlines():
        lines.append(line)
        if not line.rstrip().endswith("\\"):
            return "\n".join(lines)
    raise AssertionError("SEAMLESS_CUDA_FUNCTIONS does not end")


def checks(text: str) -> str:
    """A C++ file of static_asserts of our declarations against cuda.h."""
    lines = ["#include <cuda.h>", "#include <cstddef>", "#include <type_traits>",
             *[functions_macro(text, m) for m in MACROS],
             "#define SEAMLESS_CHECK(ret, symbol, field, params) static_assert(std::is_same<decltype(symbol), "
             "ret params>::value, #symbol \" differs from cuda.h\");",
             *[f"{m}(SEAMLESS_CHECK)" for m in MACROS]]
    for name, value in re.findall(r"^#define (CU_\w+) (\S+)", text, re.M):
        lines.append(f'static_assert({name} == {value}, "{name} differs from cuda.h");')
    for typed, name in re.findall(r"^typedef ([\w ]+\*?) (CU\w+);", text, re.M):
        lines.append(f"static_assert(std::is_same<{name}, {typed}>::value || (std::is_enum<{name}>::value && "
                     f'sizeof({name}) == sizeof({typed})), "{name} differs from cuda.h");')
    for kind, body, name in re.findall(r"^typedef (struct|union) \{(.*?)\} (CU\w+);", text, re.M | re.S):
        ours = f"Ours_{name}"  # our layout under another name, its member types cuda.h's
        lines.append(f"{kind} {ours} {{{body}}};")
        lines.append(f'static_assert(sizeof({ours}) == sizeof({name}), "{name} size differs from cuda.h");')
        for member in members(body):
            lines.append(f"static_assert(offsetof({ours}, {member}) == offsetof({name}, {member}), "
                         f'"{name}::{member} differs from cuda.h");')
    return "\n".join(lines) + "\n"


def members(body: str) -> list[str]:
    """The member names of a struct or union body (declarations separated by ';', names by ','; the members of an
    anonymous union among them)."""
    names = []
    for declaration in body.split(";"):
        declaration = re.sub(r"\[.*?\]|\b(union|struct)\s*\{|\}", "", declaration).strip()
        if declaration:
            names += [re.findall(r"\w+", part)[-1] for part in declaration.split(",")]
    return names


def compile_checks(source: str, tmp_path: Path) -> subprocess.CompletedProcess:
    path = tmp_path / "cuda_declarations.cu"
    path.write_text(source)
    return subprocess.run(["nvcc", "-std=c++17", "-c", str(path), "-o", str(tmp_path / "out.o")],
                          capture_output=True, text=True)


def test_our_cuda_driver_declarations_match_cuda_h(tmp_path):
    text = HEADER.read_text()
    source = checks(text)
    # every function (by the macro), constant and typedef
    assert functions_macro(text).count("X(CUresult") >= 30 and source.count("static_assert(") >= 17, source
    assert functions_macro(text, MACROS[1]).count("X(CUresult") == 5 and "CUgraphNodeParams::conditional" in source
    result = compile_checks(source, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]


def test_a_wrong_declaration_fails_the_check(tmp_path):
    """The check can fail: a parameter declared int where cuda.h has unsigned int, and a wrong
    constant, are each reported by name."""
    text = HEADER.read_text().replace("cuInit, init, (unsigned int flags)", "cuInit, init, (int flags)")
    text = text.replace("#define CU_EVENT_DISABLE_TIMING 2", "#define CU_EVENT_DISABLE_TIMING 4")
    text = text.replace("  CUstream hStream;\n  CUlaunchAttribute* attrs;", "  CUlaunchAttribute* attrs;\n  CUstream hStream;")
    result = compile_checks(checks(text), tmp_path)
    assert result.returncode != 0
    for problem in ("cuInit differs from cuda.h", "CU_EVENT_DISABLE_TIMING differs", "CUlaunchConfig::hStream differs"):
        assert problem in result.stderr, problem
