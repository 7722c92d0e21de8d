"""The version policy (docs/versioning.md) holds in every place that states it.

The onnxruntime floor is MIN_ONNXRUNTIME_VERSION in python/onnxruntime_ep_seamless/__init__.py; the C
library enforces the same floor (SEAMLESS_ORT_API_MIN in ep_plugin/glue.c), the declaration test uses
it as the highest `since` a slot may have without a gate, and the oldest runtime the tests and the wheel
smoke test install is a release of it.
"""
import re
from pathlib import Path

import pytest

import onnxruntime_ep_seamless as seamless

ROOT = Path(__file__).resolve().parents[2]


def floor() -> tuple[int, int]:
    major, minor = seamless.MIN_ONNXRUNTIME_VERSION.split(".")
    return int(major), int(minor)


def test_python_and_c_floors_agree():
    glue = (ROOT / "ep_plugin" / "glue.c").read_text()
    (api_min,) = re.findall(r"^#define\s+SEAMLESS_ORT_API_MIN\s+(\d+)\s*$", glue, flags=re.M)
    assert floor() == (1, int(api_min)), (seamless.MIN_ONNXRUNTIME_VERSION, api_min)
    declarations = (ROOT / "tests" / "abi" / "test_declarations.py").read_text()
    (api_floor,) = re.findall(r"^API_FLOOR\s*=\s*(\d+)", declarations, flags=re.M)
    assert int(api_floor) == floor()[1]


def test_oldest_tested_runtime_is_the_floor():
    prefix = "%d.%d." % floor()
    run_sh = (ROOT / "tests" / "run.sh").read_text()
    (matrix,) = re.findall(r"^for ORT in ([0-9. ]+); do", run_sh, flags=re.M)
    assert min(matrix.split(), key=lambda v: tuple(map(int, v.split(".")))).startswith(prefix), matrix
    smoke = (ROOT / "wheels" / "smoke.sh").read_text()
    (versions,) = re.findall(r'ORT_VERSIONS="\$\{ORT_VERSIONS:-([0-9. ]+)\}"', smoke)
    assert versions.split()[0].startswith(prefix), versions


def test_docs_state_the_floor():
    text = "%d.%d" % floor()
    for doc in ("README.md", "docs/versioning.md"):
        assert f"onnxruntime {text}" in (ROOT / doc).read_text(), f"{doc} does not state the floor {text}"


def test_package_version_is_semver_and_single_sourced():
    assert re.fullmatch(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:(?:a|b|rc)\d+)?(?:\.dev\d+)?",
                        seamless.__version__), seamless.__version__
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^dynamic\s*=\s*\[[^]]*"version"', pyproject, flags=re.M)
    assert 'version = { attr = "onnxruntime_ep_seamless.__version__" }' in pyproject
    assert not re.search(r'^version\s*=\s*"', pyproject, flags=re.M), "a second, static version in pyproject.toml"


def test_register_refuses_a_runtime_below_the_floor(monkeypatch):
    import onnxruntime as ort
    below = "%d.%d.0" % (floor()[0], floor()[1] - 1)
    monkeypatch.setattr(ort, "__version__", below)
    with pytest.raises(RuntimeError, match=rf"needs onnxruntime >= {re.escape(seamless.MIN_ONNXRUNTIME_VERSION)}.*"
                                           rf"{re.escape(below)}.*pip install"):
        seamless.register()
