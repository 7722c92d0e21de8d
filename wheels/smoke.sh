#!/usr/bin/env bash
# Clean-room test of a built wheel: a fresh venv (outside the checkout, no PYTHONPATH, run from an
# empty folder) installs the wheel with the OLDEST supported onnxruntime, then upgrades to the NEWEST;
# with each it runs
#   python -m onnxruntime_ep_seamless check            (exit 0, last line OK)
#   python -m onnxruntime_ep_seamless demo --runs 5    (every node on our EP)
#   python wheels/smoke_check.py                       (CPU fallback disabled, every node on our EP, = stock ORT)
#   tests/c_host/run_model.c, when a C compiler exists (a C program, no Python, no environment variables)
# and finally checks that nothing under the installed package was written or added.
#
#   bash wheels/smoke.sh WHEEL        ORT_VERSIONS="1.23.2 1.32.0" (default) picks the runtimes
# Exits non-zero on the first failure; the last line is "smoke: OK ..." on success.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
[ $# -eq 1 ] && [ -f "$1" ] || { echo "usage: bash wheels/smoke.sh WHEEL (an existing .whl)" >&2; exit 2; }
WHEEL="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
PYTHON="${PYTHON:-python3}"
ORT_VERSIONS="${ORT_VERSIONS:-1.23.2 1.32.0}"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/seamless-smoke.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
mkdir "$WORK/run"
cd "$WORK/run"  # nothing of the checkout is importable from here
unset PYTHONPATH PYTHONHOME SEAMLESS_PYTHON SEAMLESS_LIBPYTHON VIRTUAL_ENV
"$PYTHON" -m venv "$WORK/venv"
PY="$WORK/venv/bin/python"
PIP=("$PY" -m pip install -q --disable-pip-version-check)

CC_BIN="$(command -v cc || command -v gcc || true)"
if [ -n "$CC_BIN" ]; then
  "$CC_BIN" -O1 -Wall -I"$ROOT/ep_plugin" -I"$ROOT/tests/c_host" "$ROOT/tests/c_host/run_model.c" \
    -o "$WORK/run_model" -ldl -lpthread
fi

snapshot() {  # every file under the installed package with its size and mtime
  "$PY" - "$1" <<'EOF'
import os, sys
import importlib.util
root = os.path.dirname(importlib.util.find_spec("onnxruntime_ep_seamless").origin)
with open(sys.argv[1], "w") as f:
    for d, _, files in sorted(os.walk(root)):
        for name in sorted(files):
            st = os.lstat(os.path.join(d, name))
            f.write(f"{os.path.relpath(os.path.join(d, name), root)} {st.st_size} {st.st_mtime_ns}\n")
EOF
}

first=1
for ORT in $ORT_VERSIONS; do
  echo "== onnxruntime $ORT"
  if [ "$first" = 1 ]; then
    "${PIP[@]}" "$WHEEL" "onnxruntime==$ORT"
    snapshot "$WORK/before.txt"
    first=0
  else
    "${PIP[@]}" "onnxruntime==$ORT"
  fi
  got="$("$PY" -c 'import onnxruntime; print(onnxruntime.__version__)')"
  [ "$got" = "$ORT" ] || { echo "smoke: onnxruntime $got installed, wanted $ORT" >&2; exit 1; }

  "$PY" -m onnxruntime_ep_seamless check | tee "$WORK/check.txt"
  [ "$(tail -n 1 "$WORK/check.txt")" = "OK" ] || { echo "smoke: check did not end with OK" >&2; exit 1; }
  "$PY" -m onnxruntime_ep_seamless demo --runs 5 | tee "$WORK/demo.txt"
  grep -Eq '^SeamlessCPUExecutionProvider: ([0-9]+)/\1 nodes$' "$WORK/demo.txt" ||
    { echo "smoke: the demo did not run every node on SeamlessCPUExecutionProvider" >&2; exit 1; }
  "$PY" "$ROOT/wheels/smoke_check.py"
  if [ -n "$CC_BIN" ]; then
    read -r ORTLIB PLUGIN MODEL < <("$PY" -c '
import glob, os, onnxruntime, onnxruntime_ep_seamless as s
lib = sorted(glob.glob(os.path.join(os.path.dirname(onnxruntime.__file__), "capi", "libonnxruntime.so.1*")))[0]
print(lib, s.get_library_path(), os.path.join(os.path.dirname(s.DEMO_MODEL), "add.onnx"))')
    env -i PATH=/usr/bin:/bin HOME="$WORK" "$WORK/run_model" "$ORTLIB" "$PLUGIN" "$MODEL" 50 | tee "$WORK/c.txt"
    [ "$(tail -n 1 "$WORK/c.txt")" = "OK" ] || { echo "smoke: the C host failed" >&2; exit 1; }
  else
    echo "(no C compiler: C host skipped)"
  fi
done

snapshot "$WORK/after.txt"
if ! diff -u "$WORK/before.txt" "$WORK/after.txt"; then
  echo "smoke: files under the installed package changed while it ran (see diff above)" >&2
  exit 1
fi
echo "smoke: OK $(basename "$WHEEL") with onnxruntime ${ORT_VERSIONS// /, }"
