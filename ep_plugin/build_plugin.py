"""Build the plugin libraries and native kernels into the package directory.

Three shared objects, none linked against libpython:
- libonnxruntime_ep_seamless_cpu.so  the shim ORT loads (exports only the two entry points)
- _seamless_ep_cpu<EXT_SUFFIX>      the cffi embedding module: C glue + Python callbacks
- _native_cpu<EXT_SUFFIX>           native CPU kernels (an ordinary cffi extension)

Usage: python ep_plugin/build_plugin.py [OUTPUT_PACKAGE_DIR]   (default: python/onnxruntime_ep_seamless)
"""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import cffi

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
NATIVE_CPU = ROOT / "native" / "cpu"
EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
SHIM_NAME = "libonnxruntime_ep_seamless_cpu.so"
EP_MODULE = "_seamless_ep_cpu"
NATIVE_MODULE = "_native_cpu"

CFLAGS = ["-shared", "-fPIC", "-O2", "-fvisibility=hidden", "-Wall", "-Wno-unused-function", "-Wl,-z,nodelete"]

INIT_CODE = f"""
import os
from {EP_MODULE} import ffi, lib
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
bridge.attach(ffi, lib)
"""


def _gcc(args: list[str]) -> None:
    cmd = [os.environ.get("CC", "gcc"), *args]
    subprocess.run(cmd, check=True)


def _libpython_soname() -> str:
    name = sysconfig.get_config_var("INSTSONAME") or ""
    return name if name.endswith(".so") or ".so." in name else ""


def build_ep_module(out: Path, tmp: Path) -> None:
    ffi = cffi.FFI()
    ffi.embedding_api("")
    ffi.cdef((HERE / "python_api.h").read_text())
    ffi.embedding_init_code(INIT_CODE)
    ffi.set_source(EP_MODULE, '#include "glue.c"\n')
    c_file = tmp / f"{EP_MODULE}.c"
    ffi.emit_c_code(str(c_file))
    include = sysconfig.get_paths()["include"]
    _gcc([*CFLAGS, f"-I{HERE}", f"-I{include}", str(c_file), "-o", str(out / f"{EP_MODULE}{EXT_SUFFIX}"), "-ldl"])


def build_shim(out: Path) -> None:
    _gcc([*CFLAGS, f"-I{HERE}", f'-DSEAMLESS_MODULE_FILE="{EP_MODULE}{EXT_SUFFIX}"',
          f'-DSEAMLESS_LIBPYTHON="{_libpython_soname()}"', str(HERE / "shim.c"), "-o", str(out / SHIM_NAME), "-ldl"])


def build_native_cpu(out: Path, tmp: Path) -> None:
    ffi = cffi.FFI()
    ffi.cdef((NATIVE_CPU / "kernels.h").read_text())
    sources = "".join(f'#include "{p.name}"\n' for p in sorted(NATIVE_CPU.glob("*.c")))
    ffi.set_source(NATIVE_MODULE, sources)
    c_file = tmp / f"{NATIVE_MODULE}.c"
    ffi.emit_c_code(str(c_file))
    include = sysconfig.get_paths()["include"]
    flags = [f for f in CFLAGS if f != "-O2"] + ["-O3"]
    _gcc([*flags, f"-I{NATIVE_CPU}", f"-I{include}", str(c_file), "-o", str(out / f"{NATIVE_MODULE}{EXT_SUFFIX}"), "-lm"])


def build(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        build_ep_module(out, Path(tmp))
        build_native_cpu(out, Path(tmp))
    build_shim(out)
    return [out / SHIM_NAME, out / f"{EP_MODULE}{EXT_SUFFIX}", out / f"{NATIVE_MODULE}{EXT_SUFFIX}"]


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "python" / "onnxruntime_ep_seamless"
    for path in build(target):
        print(path)
