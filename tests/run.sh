#!/usr/bin/env bash
# The test command: installs what the tests need into a cached virtualenv (outside the repo),
# builds and installs this checkout, prepares offline test material, runs pytest.
# Usage: bash tests/run.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${SEAMLESS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/onnxruntime-ep-seamless}"
VENV="$CACHE/venv-$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
export SEAMLESS_CACHE="$CACHE"
mkdir -p "$CACHE"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
fi
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
# dependencies, ours included (its CPU variant only: this checkout's whole build comes next)
SEAMLESS_VARIANTS=cpu "${PIP[@]}" -r tests/requirements.txt .
"${PIP[@]}" --force-reinstall --no-deps .        # and always this checkout's build
# the CPU wheel, built and checked once per run (wheels/build.sh): installed in the runtime-matrix
# venvs below, and installed afresh by tests/wheels/test_wheel.py (wheels/smoke.sh)
SEAMLESS_WHEEL="$(PYTHON="$VENV/bin/python" bash wheels/build.sh "$CACHE/dist" | tail -n 1)"
export SEAMLESS_WHEEL
# the light runtime matrix (tests/abi/test_oldest_runtime.py): the oldest supported onnxruntime and
# the first with session-level graph capture, each in its own small venv; the newest is $VENV's
PYVER="$(basename "$VENV" | cut -d- -f2)"
for ORT in 1.23.2 1.26.0; do
  MATRIX="$CACHE/venv-$PYVER-ort${ORT%.*}"
  [ -x "$MATRIX/bin/python" ] || python3 -m venv "$MATRIX"
  "$MATRIX/bin/python" -m pip install -q --disable-pip-version-check "onnxruntime==$ORT" "$SEAMLESS_WHEEL"
  "$MATRIX/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$SEAMLESS_WHEEL"
done
export SEAMLESS_OLDEST_ORT_PYTHON="$CACHE/venv-$PYVER-ort1.23/bin/python"
export SEAMLESS_ORT126_PYTHON="$CACHE/venv-$PYVER-ort1.26/bin/python"
# nvcc for the cu13 wheel build, CI's one compilation of every kernel for every shipped architecture
# (tests/wheels/test_wheel.py), where the machine has none: CUDA 13.0 from NVIDIA's wheels, cached
if ! command -v nvcc >/dev/null; then
  NVCC_DIR="$CACHE/nvcc-$(sha256sum tests/requirements-nvcc.txt | cut -c1-12)"
  [ -x "$NVCC_DIR/nvidia/cu13/bin/nvcc" ] || "${PIP[@]}" --no-deps --target "$NVCC_DIR" -r tests/requirements-nvcc.txt
  export PATH="$NVCC_DIR/nvidia/cu13/bin:$PATH"
fi
"$VENV/bin/python" tests/material.py
cd tests  # import the installed package, not the source tree
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@" .
