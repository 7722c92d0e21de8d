"""A non-Python host: tests/c_host/run_model.c (ORT's C API only, libonnxruntime dlopen'ed from the
onnxruntime wheel) registers our library, which starts an embedded interpreter.

An installed package needs nothing from the host's environment: the library finds its venv from its
own path (docs/user-guide.md "Non-Python hosts"), so these runs get an empty environment. A source
tree (PYTHONPATH=python) is not an installation: there the test names the interpreter with
SEAMLESS_PYTHON and puts the tree on PYTHONPATH, as a developer would.
"""
import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import onnxruntime_ep_seamless as seamless

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tests" / "c_host" / "run_model.c"
MATRIX = {"1.23": "SEAMLESS_OLDEST_ORT_PYTHON", "1.26": "SEAMLESS_ORT126_PYTHON"}

LOCATE = """
import glob, os, onnxruntime, onnxruntime_ep_seamless as s
lib = sorted(glob.glob(os.path.join(os.path.dirname(onnxruntime.__file__), "capi", "libonnxruntime.so.1*")))[0]
print(lib); print(s.get_library_path()); print(onnxruntime.__version__)
"""


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = tmp_path_factory.mktemp("c_host") / "run_model"
    subprocess.run([cc, "-O1", "-Wall", "-Werror", f"-I{ROOT / 'ep_plugin'}",
                    str(SOURCE), "-o", str(exe), "-ldl", "-lpthread"], check=True, timeout=120)
    return str(exe)


def installation(python: str) -> tuple[str, str, str, dict]:
    """(libonnxruntime, our library, onnxruntime version, environment for the host) of `python`'s env."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([python, "-c", LOCATE], capture_output=True, text=True, timeout=120, env=env, cwd="/")
    assert out.returncode == 0, out.stderr
    ortlib, plugin, version = out.stdout.split()
    host_env = {"PATH": "/usr/bin:/bin"}  # nothing Python-related
    if "site-packages" not in plugin:  # a source tree, not an installation
        host_env.update(SEAMLESS_PYTHON=python, PYTHONPATH=str(Path(plugin).parent.parent))
    return ortlib, plugin, version, host_env


def this_installation():
    ortlib = sorted(glob.glob(os.path.join(os.path.dirname(__import__("onnxruntime").__file__), "capi",
                                           "libonnxruntime.so.1*")))[0]
    plugin = seamless.get_library_path()
    host_env = {"PATH": "/usr/bin:/bin"}
    if "site-packages" not in plugin:
        host_env.update(SEAMLESS_PYTHON=sys.executable, PYTHONPATH=str(Path(plugin).parent.parent))
    return ortlib, plugin, host_env


MODEL = str(Path(seamless.DEMO_MODEL).parent / "add.onnx")


def run_host(host, ortlib, plugin, env, runs=200):
    return subprocess.run([host, ortlib, plugin, MODEL, str(runs)], capture_output=True, text=True, timeout=120,
                          env=env, cwd="/")


@pytest.mark.parametrize("runtime", ["main", *sorted(MATRIX)])
def test_c_host_runs_a_model_on_our_ep(host, runtime):
    if runtime == "main":
        ortlib, plugin, env = this_installation()
        version = __import__("onnxruntime").__version__
    else:
        python = os.environ.get(MATRIX[runtime])
        if not python:
            pytest.skip(f"{MATRIX[runtime]} not set (tests/run.sh sets it)")
        ortlib, plugin, version, env = installation(python)
    out = run_host(host, ortlib, plugin, env)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"onnxruntime {version}"
    assert "400 runs on 2 threads: exact" in lines and lines[-1] == "OK", out.stdout
    assert "Traceback" not in out.stderr, out.stderr


def test_c_host_without_libpython_gets_an_error_not_a_crash(host):
    ortlib, plugin, env = this_installation()
    out = run_host(host, ortlib, plugin, {**env, "SEAMLESS_LIBPYTHON": "/nonexistent/libpython3.so"})
    assert out.returncode == 2, (out.returncode, out.stderr)  # an OrtStatus from RegisterExecutionProviderLibrary
    assert "RegisterExecutionProviderLibrary" in out.stderr
    assert "shared libpython" in out.stderr and "/nonexistent/libpython3.so" in out.stderr
    assert "SEAMLESS_LIBPYTHON" in out.stderr


def test_c_host_with_a_broken_python_home_gets_an_error_not_an_abort(host):
    # cffi's own start-up would abort the process here ("Fatal Python error: init_fs_encoding")
    ortlib, plugin, env = this_installation()
    out = run_host(host, ortlib, plugin, {**env, "PYTHONHOME": "/nonexistent"})
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "starting the embedded Python" in out.stderr and "init_fs_encoding" in out.stderr
    assert "SEAMLESS_PYTHON" in out.stderr
