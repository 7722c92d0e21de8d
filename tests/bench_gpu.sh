#!/usr/bin/env bash
# The GPU decode benchmark on a GPU machine without network, from a checkout carried there with:
#   WHEELS    a folder with cp312 wheels of what the machine lacks (cffi, pycparser, onnxruntime-genai for the
#             model builder; see ../shared/tools/offline-wheels.sh), installed into /tmp/site
#   PEER      a folder with onnxruntime-gpu installed (`pip install --target PEER onnxruntime_gpu-*.whl`): ORT's
#             CUDA EP, run in its own processes with PEER first on PYTHONPATH
#   BUILD     int4-cuda or fp16-cuda: the decoder of shape $SHAPE (tests/material.py REAL_SHAPES; default
#             qwen2.5-0.5b; also llama-3.2-1b, qwen3-1.7b, phi-4-mini, llama-3.1-8b), random weights, built there
#             by tests/material.py into $SEAMLESS_CACHE (default /tmp/seamless-bench), once
# Usage there: [SHAPE=NAME] bash tests/bench_gpu.sh WHEELS PEER BUILD [bench decode-gpu arguments, e.g. --mode graph]
# With BENCH=genai: `bench genai --device cuda` instead, in one process with PEER first on PYTHONPATH (PEER then also
# holds onnxruntime-genai-cuda, genai's CUDA build: `pip install --target PEER --no-deps onnxruntime_genai_cuda-*.whl`),
# e.g. BENCH=genai bash tests/bench_gpu.sh WHEELS PEER int4-cuda --max-length 2048 --cuda-graph
# With --torch-checkpoint the float32 checkpoint the model is built from is kept too, for PyTorch eager: pass
# --torch-checkpoint /tmp/seamless-bench/material/qwen2.5-0.5b-shaped/checkpoint (under SEAMLESS_CACHE when set).
set -eo pipefail
wheels=$1 peer=$2 build=$3
shift 3 || { echo "usage: bash tests/bench_gpu.sh WHEELS PEER BUILD [bench decode-gpu args]" >&2; exit 2; }
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site "$wheels"/*.whl
export PYTHONPATH=/tmp/site
# our package: a cp312 cu13 wheel of it among WHEELS (`FLAVOR=cu13 PYTHON=python3.12 bash wheels/build.sh DIR` here)
# saves compiling its kernels there; without one, built from the checkout
ls "$wheels"/onnxruntime_ep_seamless*.whl > /dev/null 2>&1 || python3 -m pip install -q --no-build-isolation --no-deps .
export SEAMLESS_CACHE=${SEAMLESS_CACHE:-/tmp/seamless-bench}
keep=; [[ " $* " == *" --torch-checkpoint "* ]] && keep=checkpoint
shape=${SHAPE:-qwen2.5-0.5b}
PYTHONPATH=/tmp/site:tests python3 tests/material.py --real "$shape" "$build" $keep
# ORT's CUDA EP loads CUDA 13 and cuDNN from NVIDIA's wheels where the machine's Python has them
nvidia=$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__file__) if nvidia.__file__ else list(nvidia.__path__)[0])' 2>/dev/null || true)
for lib in "$nvidia"/cu13/lib "$nvidia"/cudnn/lib; do [ -d "$lib" ] && LD_LIBRARY_PATH=$lib:$LD_LIBRARY_PATH; done
export LD_LIBRARY_PATH
peer=$(cd "$peer" && pwd)
cd /tmp  # the installed package, not the checkout's python/
if [ "${BENCH:-decode-gpu}" = genai ]; then
  PYTHONPATH=$peer:$PYTHONPATH python3 -m onnxruntime_ep_seamless bench genai \
    "$SEAMLESS_CACHE/material/$shape-shaped/$build" --device cuda "$@"
else
  python3 -m onnxruntime_ep_seamless bench decode-gpu "$SEAMLESS_CACHE/material/$shape-shaped/$build" \
    --peer-pythonpath "$peer" "$@"
fi
