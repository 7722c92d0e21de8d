"""Build the plugin libraries and native kernels into the package directory.

Shared objects, none linked against libpython, per variant V (cpu, cuda):
- libonnxruntime_ep_seamless_V.so  the shim ORT loads (exports only the two entry points)
- _seamless_ep_V<EXT_SUFFIX>      the cffi embedding module: C glue + Python callbacks (glue.c, and
                                  cuda_*.c for cuda; bench's C decode loop, tools/host_decode.c, in both)
and
- _native_cpu<EXT_SUFFIX>         native CPU kernels (an ordinary cffi extension)
- _cuda_args<EXT_SUFFIX>          the CUDA kernels' argument structs and codes (native/cuda/args.h), for their
                                  Python side (an ordinary cffi extension, with the cuda variant; no CUDA needed)
- _kernels_cuda.fatbin            CUDA kernels (native/cuda/*.cu) for sm_80, sm_90, sm_100 + PTX,
                                  when nvcc is on PATH (SEAMLESS_REQUIRE_NVCC=1 makes it required)
The CUDA variant's C glue loads the NVIDIA driver at run time: building it needs no CUDA.

Usage: python ep_plugin/build_plugin.py [OUTPUT_PACKAGE_DIR]   (default: python/onnxruntime_ep_seamless)
"""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import cffi

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
NATIVE_CPU = ROOT / "native" / "cpu"
NATIVE_CUDA = ROOT / "native" / "cuda"
TOOLS = ROOT / "python" / "onnxruntime_ep_seamless" / "tools"
EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
VARIANTS = ("cpu", "cuda")
NATIVE_MODULE = "_native_cpu"
CUDA_ARGS_MODULE = "_cuda_args"
CUDA_FATBIN = "_kernels_cuda.fatbin"
CUDA_ARCHS = ("80", "90", "100")
# The EP module's C units besides cffi's own (whose source is glue.c), linked into one shared object:
# what they share is declared in glue.h / cuda_ep.h and hidden (-fvisibility=hidden), never exported.
HOST_DECODE = TOOLS / "host_decode.c"  # bench decode-gpu's growing-c loop: no part of the EP, uses its OrtApi
CPU_RUNNER = HERE / "cpu_runner.c"  # answers a CPU node's Computes with its native programs (native/cpu/program.h)
CUDA_UNITS = tuple(HERE / f"cuda_{name}.c" for name in ("driver", "ort", "exec", "capture", "replay"))


def shim_name(variant: str) -> str:
    return f"libonnxruntime_ep_seamless_{variant}.so"


def ep_module(variant: str) -> str:
    return f"_seamless_ep_{variant}"

CFLAGS = ["-shared", "-fPIC", "-O2", "-fvisibility=hidden", "-Wall", "-Wno-unused-function", "-Wl,-z,nodelete"]


def _glibc_x86_64() -> bool:
    return platform.system() == "Linux" and platform.machine() == "x86_64" and platform.libc_ver()[0] == "glibc"


# On glibc x86-64 every object is built to load on glibc 2.28 (the wheel's manylinux_2_28 tag):
# old symbol versions (glibc_compat.h), and libdl/libpthread named explicitly because a glibc
# older than 2.34 keeps dl* and pthread_* there. wheels/check_wheel.py verifies the result.
COMPAT = [f"-include{HERE / 'glibc_compat.h'}"] if _glibc_x86_64() else []
SYSLIBS = ["-Wl,--no-as-needed", "-l:libdl.so.2", "-l:libpthread.so.0", "-Wl,--as-needed"] if COMPAT else ["-ldl"]


def _soname(name: str) -> str:
    return f"-Wl,-soname,{name}"


INIT_CODE = """
import os
from {module} import ffi, lib
here = os.path.dirname(ffi.string(lib.seamless_module_path()).decode())
try:
    import onnxruntime_ep_seamless as pkg
except ImportError:  # a host without the package on sys.path (e.g. a C program): add its site dir
    import site
    site.addsitedir(os.path.dirname(here))
    import onnxruntime_ep_seamless as pkg
if os.path.realpath(os.path.dirname(pkg.__file__)) != os.path.realpath(here):
    raise ImportError(f"onnxruntime_ep_seamless resolves to {{pkg.__file__}} but its plugin library is in {{here}}; "
                      "use one installation (check sys.path / PYTHONPATH)")
from onnxruntime_ep_seamless.abi import bridge
bridge.attach(ffi, lib, "{variant}")
"""


def _gcc(args: list[str]) -> None:
    cmd = [os.environ.get("CC", "gcc"), *args]
    subprocess.run(cmd, check=True)


def _libpython_soname() -> str:
    name = sysconfig.get_config_var("INSTSONAME") or ""
    return name if name.endswith(".so") or ".so." in name else ""


def build_ep_module(out: Path, tmp: Path, variant: str) -> None:
    module = ep_module(variant)
    ffi = cffi.FFI()
    ffi.embedding_api("")
    cdef = (HERE / "python_api.h").read_text() + (HERE / "python_api_runner.h").read_text()
    if variant == "cuda":
        cdef += (HERE / "python_api_cuda.h").read_text()
    ffi.cdef(cdef)
    ffi.embedding_init_code(INIT_CODE.format(module=module, variant=variant))
    # glue.c in cffi's unit (its extern "Python" callbacks are static there); host_decode.h: the cdef's decode loop
    ffi.set_source(module, ("#define SEAMLESS_CUDA 1\n" if variant == "cuda" else "") +
                   '#include "glue.c"\n#include "host_decode.h"\n')
    c_file = tmp / f"{module}.c"
    ffi.emit_c_code(str(c_file))
    include = sysconfig.get_paths()["include"]
    name = f"{module}{EXT_SUFFIX}"
    units = [c_file, HOST_DECODE, CPU_RUNNER, *(CUDA_UNITS if variant == "cuda" else ())]
    _gcc([*CFLAGS, *COMPAT, _soname(name), f"-I{HERE}", f"-I{TOOLS}", f"-I{NATIVE_CPU}", f"-I{NATIVE_CUDA}",
          f"-I{include}", *map(str, units), "-o", str(out / name), *SYSLIBS])


def build_shim(out: Path, variant: str) -> None:
    _gcc([*CFLAGS, *COMPAT, _soname(shim_name(variant)), f"-I{HERE}",
          f'-DSEAMLESS_MODULE_FILE="{ep_module(variant)}{EXT_SUFFIX}"',
          f'-DSEAMLESS_LIBPYTHON="{_libpython_soname()}"', f'-DSEAMLESS_PY_VERSION="{sysconfig.get_python_version()}"',
          str(HERE / "shim.c"), "-o", str(out / shim_name(variant)), *SYSLIBS])


def build_cuda_kernels(out: Path) -> Path | None:
    """native/cuda/*.cu into one fatbin (nvcc compresses its large images); None (and a note) when nvcc is
    missing and not required."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        if os.environ.get("SEAMLESS_REQUIRE_NVCC") == "1":
            raise RuntimeError("nvcc not found, but SEAMLESS_REQUIRE_NVCC=1")
        print("note: nvcc not found: the CUDA kernels are not built (the CUDA EP will say so)", file=sys.stderr)
        return None
    sources = sorted(NATIVE_CUDA.glob("*.cu"))
    with tempfile.TemporaryDirectory() as tmp:
        unit = Path(tmp) / "kernels.cu"
        unit.write_text("".join(f'#include "{p}"\n' for p in sources))
        gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in CUDA_ARCHS]
        gencode.append(f"-gencode=arch=compute_{CUDA_ARCHS[-1]},code=compute_{CUDA_ARCHS[-1]}")
        target = out / CUDA_FATBIN
        # --threads 0: the architectures compiled in parallel, one job a core (the same fatbin)
        subprocess.run([nvcc, "-fatbin", "-O3", "--threads", "0",
                        f"-I{NATIVE_CUDA}", *gencode, str(unit), "-o", str(target)], check=True)
    return target


def build_native_cpu(out: Path, tmp: Path) -> None:
    ffi = cffi.FFI()
    # cdef takes no preprocessor lines but integer #defines: kernels.h's include guard is C's alone
    ffi.cdef("".join((NATIVE_CPU / h).read_text().replace("#pragma once\n", "")
                     for h in ("kernels.h", "program.h", "python_step.h")))
    sources = "".join(f'#include "{p.name}"\n' for p in sorted(NATIVE_CPU.glob("*.c")))
    ffi.set_source(NATIVE_MODULE, sources)
    c_file = tmp / f"{NATIVE_MODULE}.c"
    ffi.emit_c_code(str(c_file))
    include = sysconfig.get_paths()["include"]
    flags = [f for f in CFLAGS if f != "-O2"] + ["-O3"]
    name = f"{NATIVE_MODULE}{EXT_SUFFIX}"
    _gcc([*flags, *COMPAT, _soname(name), f"-I{NATIVE_CPU}", f"-I{include}", str(c_file), "-o", str(out / name), "-lm"])


def build_cuda_args(out: Path, tmp: Path) -> None:
    """args.h as a cffi module: cffi checks at import that its layouts are the C compiler's (nvcc's for the
    kernels: the same plain C structs)."""
    ffi = cffi.FFI()
    ffi.cdef((NATIVE_CUDA / "args.h").read_text())
    ffi.set_source(CUDA_ARGS_MODULE, '#include <stdint.h>\n#include "args.h"\n')
    c_file = tmp / f"{CUDA_ARGS_MODULE}.c"
    ffi.emit_c_code(str(c_file))
    include = sysconfig.get_paths()["include"]
    name = f"{CUDA_ARGS_MODULE}{EXT_SUFFIX}"
    _gcc([*CFLAGS, *COMPAT, _soname(name), f"-I{NATIVE_CUDA}", f"-I{include}", str(c_file), "-o", str(out / name)])


def build(out: Path, variants=VARIANTS) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    built = []
    with tempfile.TemporaryDirectory() as tmp:
        for variant in variants:
            build_ep_module(out, Path(tmp), variant)
            build_shim(out, variant)
            built += [out / shim_name(variant), out / f"{ep_module(variant)}{EXT_SUFFIX}"]
        build_native_cpu(out, Path(tmp))
        if "cuda" in variants:
            build_cuda_args(out, Path(tmp))
            built.append(out / f"{CUDA_ARGS_MODULE}{EXT_SUFFIX}")
    built.append(out / f"{NATIVE_MODULE}{EXT_SUFFIX}")
    if "cuda" in variants:
        fatbin = build_cuda_kernels(out)
        if fatbin:
            built.append(fatbin)
    return built


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "python" / "onnxruntime_ep_seamless"
    for path in build(target):
        print(path)
