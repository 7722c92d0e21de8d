"""The most GPU memory a run of a decoder's prompt holds, without a GPU: the CUDA executor over
test_cuda_host_path.py's CheckedGlue (kernels' launches recorded, addresses handed out and sized, any launch
given freed memory fails), with and without freeing each value after its last reader (exec/cuda_compute.py
run_steps), and for prompts a bucket captures (up to MAX_PROMPT tokens) what the bucket's segment keeps: its
capture's memory (runtime/cuda.py capture_pool), padding included. The weights and inputs are not counted;
cuBLASLt's workspace and the caching allocator's rounding neither.

    python tests/cuda/run_memory.py MODEL_DIR TOKENS [TOKENS ...]
"""
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent.parent)]

import onnx  # noqa: E402
import test_cuda_host_path as host_path  # noqa: E402
from onnxruntime_ep_seamless.exec import cuda_compute  # noqa: E402
from onnxruntime_ep_seamless.graph.onnx_import import import_model  # noqa: E402
from onnxruntime_ep_seamless.runtime import cuda as runtime_cuda  # noqa: E402
from onnxruntime_ep_seamless.tools.bench import kv_geometry  # noqa: E402


def main(model_dir: str, token_counts: list[int]) -> None:
    host_path.FakeGlue = host_path.CheckedGlue  # FakeNative makes its glue by this name
    runtime_cuda.FATBIN = host_path.__file__  # the module load is faked: any file will do
    graph = import_model(onnx.load(str(Path(model_dir) / "model.onnx")))
    ep = host_path.FakeEp({"capture": "off", "native_program": 0})
    kernel = cuda_compute.CudaKernel(ep, graph, list(graph.inputs), list(graph.outputs))
    glue, liveness = ep.native.lib, kernel.dead_after
    kv = kv_geometry(model_dir, graph.value("past_key_values.0.key").shape)  # KV heads, head size
    print(f"{model_dir}: constants on the GPU {glue.used / 1e9:.2f} GB")
    capturing_ep = host_path.FakeEp({"capture": "auto"})
    capturing_ep.native = ep.native  # one glue: its memory counted once
    captured = cuda_compute.CudaKernel(capturing_ep, graph, list(graph.inputs), list(graph.outputs))
    for tokens in token_counts:
        for kernel.dead_after in (liveness, None):
            peak = host_path.peak_of_a_run(kernel, graph, glue, tokens, 0, kv)
            held = "freed after their last readers" if kernel.dead_after else "held till the run's end"
            print(f"  a {tokens}-token prompt, values {held}: {peak / 1e9:.2f} GB at most")
        if tokens <= cuda_compute.MAX_PROMPT:
            kept = segment_memory(captured, graph, tokens, kv)
            print(f"  a {tokens}-token prompt's captured segment keeps {kept / 1e9:.2f} GB")


def segment_memory(kernel, graph, tokens: int, kv) -> int:
    """Bytes the capture of a first prompt of `tokens` (its bucket's third run) left allocated: the segment's."""
    glue = kernel.native.lib
    host_path.feed_decode_step(glue, graph, 0, 1 << 36, tokens, kv)
    kept = {}
    for run in range(3):
        before = glue.used
        kernel.compute(None)
        kept[run] = glue.used - before
    assert "segment" in glue.launches or kernel.segments, "the third run was not captured"
    return kept[2]


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], [int(a) for a in sys.argv[2:]])
