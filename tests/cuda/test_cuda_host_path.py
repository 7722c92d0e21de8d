"""The CUDA executor's Python without a GPU: every call into the CUDA plugin's C glue (`lib.seamless_*`) is
faked, so CI (CPU only) plans and runs onnxruntime-genai's CUDA decoders through abi/cuda_compute.py and every
kernel's host side (shapes, kernel choices, argument packing, scratch memory) for a prompt and a decode step.
What the kernels compute is the GPU tests' (tests/cuda/test_cuda_models.py)."""
import cffi
import onnx
import pytest

from material import genai_small_dir
from onnxruntime_ep_seamless.abi import cuda_compute
from onnxruntime_ep_seamless.graph.onnx_import import import_model
from onnxruntime_ep_seamless.runtime import cuda as runtime_cuda

ffi = cffi.FFI()


class FakeGlue:
    """The C glue's CUDA calls: addresses handed out in order, kernels known by name, every launch recorded."""

    def __init__(self):
        self.top, self.live, self.names, self.launches = 1 << 32, set(), {}, []

    def seamless_cuda_alloc(self, ordinal, size):
        ptr, self.top = self.top, self.top + (size + 255) // 256 * 256
        self.live.add(ptr)
        return ptr

    def seamless_cuda_free(self, ordinal, ptr):
        self.live.discard(ptr)

    def seamless_cuda_function(self, module, name, out):
        self.names[len(self.names) + 1] = ffi.string(name).decode() if not isinstance(name, bytes) else name.decode()
        out[0] = ffi.cast("void*", len(self.names))
        return ffi.NULL

    def seamless_cuda_launch(self, fn, gx, gy, block, shared, stream, packed, offsets, count, dependent):
        self.launches.append(self.names[int(ffi.cast("uintptr_t", fn))])
        return ffi.NULL

    def seamless_cuda_dependent_launch(self, ordinal):
        return 1  # sm_90: the kernels a Hopper GPU gets

    def seamless_capturing(self):
        return 0

    def __getattr__(self, name):  # module loads, copies, zeroing, syncs, cuBLASLt: nothing to do
        if not name.startswith("seamless_"):
            raise AttributeError(name)
        return lambda *args: ffi.NULL


class FakeNative:
    def __init__(self):
        self.ffi, self.lib, self.variant = ffi, FakeGlue(), "cuda"

    def check(self, status):
        assert status == ffi.NULL


class FakeEp:
    def __init__(self, options):
        self.native, self.name, self.logger, self.device_ordinal, self.options = FakeNative(), "fake", None, 0, options

    def log(self, level, message):
        pass


def inputs(kernel, graph, tokens, past, kv_heads_and_size):
    rt, out = kernel.rt, {}
    for name in graph.inputs:
        shape = {"input_ids": (1, tokens), "attention_mask": (1, past + tokens)}.get(name)
        if shape is None:  # past_key_values.*
            shape = (1, kv_heads_and_size[0], past, kv_heads_and_size[1])
        t = rt.alloc(shape, graph.value(name).dtype)
        t.settled = True
        out[name] = t
    return out


@pytest.mark.parametrize("precision", ["fp16", "int4"])
def test_a_builder_decoder_runs_its_prompt_and_a_decode_step_through_the_cuda_executor(precision, monkeypatch):
    model_dir = genai_small_dir(precision, "cuda")
    graph = import_model(onnx.load(str(model_dir / "model.onnx")))
    monkeypatch.setattr(runtime_cuda, "FATBIN", __file__)  # the module load is faked: any file will do
    monkeypatch.setattr(runtime_cuda.CudaRuntime, "_instances", {})
    ep = FakeEp({"capture": "auto", "enable_cuda_graph": 1})
    kernel = cuda_compute.CudaKernel(ep, graph, list(graph.inputs), list(graph.outputs))
    glue, rt = ep.native.lib, kernel.rt
    past_shape = graph.value("past_key_values.0.key").shape
    kv = (past_shape[1], 64)  # the small decoders: 2 KV heads of head size 64
    vocab = graph.value("logits").shape[-1]
    for tokens, past, attention in [(8, 0, "seamless_gqa_attend_tiles_h64_f16"), (1, 8, "seamless_gqa_decode_p4_h64_f16")]:
        glue.launches.clear()
        values = inputs(kernel, graph, tokens, past, kv)
        scratch = []
        results = kernel._run(dict(kernel.constants, **values), ffi.cast("void*", 7), scratch)
        shapes = dict(zip(graph.outputs, (t.shape for t in results)))
        assert shapes["logits"] == (1, tokens, vocab)
        assert shapes["present.0.key"] == (1, kv[0], past + tokens, kv[1])
        assert attention in glue.launches and len(glue.launches) > 5 * 2  # each of the 2 layers' kernels, and more
        cuda_compute._release(rt, scratch, list(values.values()), kernel.constants)
        for t in list(values.values()) + results:
            rt.free(t)
        assert glue.live == _kept(kernel)  # what a run allocates is freed after it
    assert rt.host_reads == 0  # no GPU value was read back on the host


def _kept(kernel) -> set:
    """Addresses that outlive a run: the constants, the layouts kernels made of them (DeviceTensor.derived) and
    each stream's counters (CudaRuntime.counters)."""
    constants = kernel.constants.values()
    return ({t.ptr for t in constants if t.ptr} | {d.ptr for t in constants for d in (t.derived or {}).values()}
            | {entry[0].ptr for entry in kernel.rt._counters.values()})
