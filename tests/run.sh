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
"${PIP[@]}" -r tests/requirements.txt .          # dependencies, ours included
"${PIP[@]}" --force-reinstall --no-deps .        # and always this checkout's build
# the oldest onnxruntime we support, in its own small venv (tests/abi/test_oldest_runtime.py)
OLD="$CACHE/venv-$(basename "$VENV" | cut -d- -f2)-ort1.23"
[ -x "$OLD/bin/python" ] || python3 -m venv "$OLD"
"$OLD/bin/python" -m pip install -q --disable-pip-version-check onnxruntime==1.23.2 .
"$OLD/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps .
export SEAMLESS_OLDEST_ORT_PYTHON="$OLD/bin/python"
"$VENV/bin/python" tests/material.py
cd tests  # import the installed package, not the source tree
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@" .
