#!/usr/bin/env bash
# The CUDA tests on a GPU machine without network, from a checkout carried there with:
#   WHEELS  a folder with cp312 wheels of what the machine lacks (cffi, pycparser; see
#           ../shared/tools/offline-wheels.sh), installed into /tmp/site; add the onnxruntime wheel CI uses
#           (1.32) so that the parity tests compare against the same stock ORT as CI (the machine has 1.30,
#           which refuses IR 14 models; 10 NaN ArgMax/ArgMin, MoE and gated-norm cases fail against it; against
#           1.32 the whole suite passed on an H200 in session 50, docs/benchmarks/gpu.md)
#   MATERIAL  a folder made here by `python tests/gpu_material.py pack DIR` (under 64 MiB)
# Usage there: bash tests/run_gpu.sh WHEELS MATERIAL [pytest arguments, default: tests/cuda]
set -eo pipefail
wheels=$1 material=$2
shift 2 || { echo "usage: bash tests/run_gpu.sh WHEELS MATERIAL [pytest args]" >&2; exit 2; }
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site "$wheels"/*.whl
export PYTHONPATH=/tmp/site
# our package: a cp312 cu13 wheel of it among WHEELS (`FLAVOR=cu13 PYTHON=python3.12 bash wheels/build.sh DIR` here)
# saves compiling its kernels there; without one, built from the checkout
ls "$wheels"/onnxruntime_ep_seamless*.whl > /dev/null 2>&1 || python3 -m pip install -q --no-build-isolation --no-deps .
PYTHONPATH=/tmp/site:tests python3 tests/gpu_material.py unpack "$material"
export SEAMLESS_CACHE=$(cd "$material" && pwd) PYTHONUNBUFFERED=1
cd tests
python3 -m pytest -q -p no:cacheprovider --tb=short -rf "${@:-cuda}"
