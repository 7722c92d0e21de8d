#!/usr/bin/env bash
# Build both distributions (CPU and cu13) for every supported CPython found on PATH
# (python3.10 ... python3.13): one wheel per CPython minor, since the Python layer is a cffi
# embedding module compiled for one minor. The cu13 wheels need nvcc (CUDA 13).
#
#   bash wheels/build_all.sh [OUTDIR]       (default: dist/)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${1:-$ROOT/dist}"
built=0
for minor in 10 11 12 13; do
  py="$(command -v "python3.$minor" || true)"
  if [ -n "$py" ] && ! "$py" -c "import venv" 2>/dev/null; then  # e.g. a pyenv shim for another version
    py="$(ls -d "$(pyenv root 2>/dev/null || echo /nonexistent)"/versions/3."$minor".*/bin/python3."$minor" 2>/dev/null | tail -n 1)"
  fi
  if [ -z "$py" ] || ! "$py" -c "import venv" 2>/dev/null; then
    echo "build_all: python3.$minor not found: skipped" >&2
    continue
  fi
  for flavor in cpu cu13; do
    PYTHON="$py" FLAVOR="$flavor" bash "$ROOT/wheels/build.sh" "$OUT" | tail -n 1
    built=$((built + 1))
  done
done
[ "$built" -gt 0 ] || { echo "build_all: no supported CPython found" >&2; exit 1; }
