"""The CUDA executor's Python without a GPU: every call into the CUDA plugin's C glue (`lib.seamless_*`) is
faked, so CI (CPU only) plans and runs onnxruntime-genai's CUDA decoders through exec/cuda_compute.py and every
kernel's host side (shapes, kernel choices, argument packing, scratch memory) for a prompt and a decode step,
and level A's capture and replays with their staging tables. What the kernels compute is the GPU tests'
(tests/cuda/test_cuda_models.py, test_cuda_capture.py). The arithmetic of level A's replay plans is the real
glue's (ep_plugin/cuda_replay.c: the CUDA plugin loads without a GPU)."""
import contextlib
import struct
import sys

import numpy as np
import onnx
import pytest

import onnxruntime_ep_seamless as seamless
from material import genai_small_dir
from onnxruntime_ep_seamless.exec import cuda_compute
from onnxruntime_ep_seamless.runtime.native import NATIVES
from onnxruntime_ep_seamless.graph.onnx_import import import_model
from onnxruntime_ep_seamless.runtime import cuda as runtime_cuda
from onnxruntime_ep_seamless.runtime.cuda_args import STAGE_COPY

seamless.register("cuda")
ffi, REAL = NATIVES["cuda"].ffi, NATIVES["cuda"].lib
PLAN = ("seamless_replayer_new", "seamless_replayer_free", "seamless_replayer_prompts", "seamless_replay_key_size",
        "seamless_replay_key", "seamless_replay_add", "seamless_replay_remove")  # no driver calls: the real glue's
ONNX_TYPES = {np.dtype(np.int64): 7, np.dtype(np.float16): 10}


class FakeGlue:
    """The C glue's CUDA calls: addresses handed out in order, kernels known by name, every launch recorded."""

    def __init__(self):
        self.top, self.live, self.names, self.launches = 1 << 32, set(), {}, []
        self.capturing, self.feed, self.outputs, self.copies, self.replays = 0, None, None, [], 0
        self.listed = None  # how the last segment was made: 1 a launch program, 0 a CUDA graph

    def seamless_cuda_alloc(self, ordinal, size):
        ptr, self.top = self.top, self.top + (size + 255) // 256 * 256
        self.live.add(ptr)
        return ptr

    def seamless_cuda_free(self, ordinal, ptr):
        self.live.discard(ptr)

    def seamless_cuda_function(self, module, name, out):
        self.names[len(self.names) + 1] = name.decode()  # runtime/cuda.py passes the name's bytes
        out[0] = ffi.cast("void*", len(self.names))
        return ffi.NULL

    def seamless_cuda_launch(self, fn, gx, gy, block, shared, stream, packed, nbytes, offsets, count, dependent):
        self.launches.append(self.names[int(ffi.cast("uintptr_t", fn))])
        return ffi.NULL

    def seamless_cuda_allow_shared(self, fn, nbytes):
        self.launches.append(("allow_shared", self.names[int(ffi.cast("uintptr_t", fn))], nbytes))
        return ffi.NULL

    def seamless_cuda_dependent_launch(self, ordinal):
        return 1  # sm_90: the kernels a Hopper GPU gets

    def seamless_cuda_multiprocessors(self, ordinal):
        return 132  # an H100's or H200's

    def seamless_capturing(self):
        return self.capturing

    def seamless_segment_begin(self, stream, listed, handle):
        self.capturing, self.listed, handle[0] = 1, listed, ffi.cast("void*", 99)
        return ffi.NULL

    def seamless_segment_end(self, graph, keep):
        self.capturing = 0
        return ffi.NULL

    def seamless_segment_replay(self, replayer, s, ctx, stream, dims, data):
        """cuda_replay.c's replay_locked with its driver calls recorded; the table's arithmetic is the real glue's."""
        assert REAL.seamless_segment_inputs(s, dims, data) == 0
        row, host = STAGE_COPY.itemsize, int(ffi.cast("uintptr_t", s.host))
        self.seamless_cuda_copy(s.table, host, s.n_in * row, stream)
        self.launches.append("segment")
        self.replays += 1
        self.seamless_get_outputs(ctx, s.n_out, s.out_ranks, s.out_dims, s.max_rank, s.out_data)
        REAL.seamless_segment_outputs(s)
        self.seamless_cuda_copy(s.table + s.n_in * row, host + s.n_in * row, s.n_out * row, stream)
        return self.seamless_cuda_launch(s.fn, s.gx, s.gy, s.block, s.shared, stream, s.packed, s.packed_size,
                                         s.offsets, s.count, s.dependent)

    def seamless_compute_stream(self, ctx, out):
        out[0] = ffi.cast("void*", 7)
        return ffi.NULL

    def seamless_get_inputs(self, ctx, n, data, nbytes, types, ranks, dims, max_rank, changed, status):
        for i, (ptr, shape, dtype) in enumerate(self.feed):  # what ORT's inputs would be
            data[i], types[i], ranks[i] = ffi.cast("void*", ptr), ONNX_TYPES[dtype], len(shape)
            for axis, size in enumerate(shape):
                dims[i * max_rank + axis] = size
        return 0

    def seamless_get_outputs(self, ctx, n, ranks, dims, max_rank, data):
        for i in range(n):  # ORT's output tensors: their shapes recorded, an address each
            if ranks[i] >= 0:
                self.outputs[i] = tuple(dims[i * max_rank + a] for a in range(ranks[i]))
                data[i] = ffi.cast("void*", (1 << 44) + (i << 24))
        return ffi.NULL

    def device(self, address) -> bool:
        """A fake device address: our allocations, ORT's inputs (`feed`) or its outputs (seamless_get_outputs)."""
        return 1 << 32 <= address < self.top or 1 << 36 <= address < 1 << 37 or 1 << 44 <= address < 1 << 45

    def seamless_cuda_copy(self, dst, src, nbytes, stream):
        # host memory into our allocation: a staging table's rows (a host address may lie anywhere outside the
        # fake ranges: below 4 GiB where Python's heap is not position-independent, as on the H200's host)
        if 1 << 32 <= dst < self.top and not self.device(src):
            self.copies.append(bytes(ffi.buffer(ffi.cast("char*", src), nbytes)))
        return ffi.NULL

    def seamless_gpu_report(self, stream):
        return 0  # where kernels report bad values: nowhere

    def seamless_gpu_check_tag(self, text, code):
        return 1

    def __getattr__(self, name):  # module loads, copies, zeroing, syncs, cuBLASLt: nothing to do
        if name in PLAN:
            return getattr(REAL, name)
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


def fake_kernel(monkeypatch, options, precision="fp16"):
    """The builder's small CUDA decoder as one fused node over the fake glue: (graph, kernel, glue)."""
    path = genai_small_dir(precision, "cuda") / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} missing: run tests/material.py")
    graph = import_model(onnx.load(str(path)))
    monkeypatch.setattr(runtime_cuda, "FATBIN", __file__)  # the module load is faked: any file will do
    monkeypatch.setattr(runtime_cuda.CudaRuntime, "_instances", {})
    ep = FakeEp(options)
    return graph, cuda_compute.CudaKernel(ep, graph, list(graph.inputs), list(graph.outputs)), ep.native.lib


def feed_decode_step(glue, graph, past, base, tokens=1, kv=(2, 64)):
    """ORT's inputs of a decode step of `tokens` new tokens (a prompt where past is 0) after `past` tokens (kv: KV
    heads and head size), at addresses from `base`, 4 KiB apart; what the last run recorded cleared."""
    glue.feed = [(base + i * 4096, {"input_ids": (1, tokens), "attention_mask": (1, past + tokens)}.get(
                  n, (1, kv[0], past, kv[1])), np.dtype(graph.value(n).dtype)) for i, n in enumerate(graph.inputs)]
    glue.outputs, glue.launches, glue.copies = [None] * len(graph.outputs), [], []


@pytest.mark.parametrize("precision", ["fp16", "int4"])
def test_a_builder_decoder_runs_its_prompt_and_a_decode_step_through_the_cuda_executor(precision, monkeypatch):
    graph, kernel, glue = fake_kernel(monkeypatch, {"capture": "auto", "enable_cuda_graph": 1}, precision)
    rt = kernel.rt
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
        cuda_compute._release(rt, scratch, list(values.values()), kernel.held_addresses)
        for t in list(values.values()) + results:
            rt.free(t)
        assert glue.live == _kept(kernel)  # what a run allocates is freed after it
    assert rt.host_reads == 0  # no GPU value was read back on the host


class CheckedGlue(FakeGlue):
    """FakeGlue that knows each allocation's size (addresses are never reused): every pointer a launch, a copy or a
    GEMM is given must lie in memory not yet freed; `peak`: the most bytes allocated and not freed at once (memory
    freed while a segment is captured stays in use: the graph keeps it, cuda_capture.c capture_retain)."""

    def __init__(self):
        super().__init__()
        self.sizes, self.freed, self.used, self.peak = {}, [], 0, 0

    def seamless_cuda_alloc(self, ordinal, size):
        ptr = super().seamless_cuda_alloc(ordinal, size)
        self.sizes[ptr] = size
        self.used += size
        self.peak = max(self.peak, self.used)
        return ptr

    def seamless_cuda_free(self, ordinal, ptr):
        if ptr in self.sizes:
            self.freed.append((ptr, ptr + self.sizes.pop(ptr)))
            if not self.capturing:
                self.used -= self.freed[-1][1] - ptr
        super().seamless_cuda_free(ordinal, ptr)

    def check(self, *addresses):
        for a in addresses:
            assert not any(lo <= a < hi for lo, hi in self.freed), f"{self.launches[-1:]} reads freed memory"

    def seamless_cuda_launch(self, fn, gx, gy, block, shared, stream, packed, nbytes, offsets, count, dependent):
        ends = [offsets[i] for i in range(1, count)] + [nbytes]
        raw = packed if isinstance(packed, bytes) else bytes(ffi.buffer(packed, nbytes))  # a segment's: cffi's
        words = [struct.unpack_from("<Q", raw, offsets[i])[0] for i in range(count)
                 if offsets[i] % 8 == 0 and ends[i] - offsets[i] == 8]  # pointers and int64s
        result = super().seamless_cuda_launch(fn, gx, gy, block, shared, stream, packed, nbytes, offsets, count,
                                              dependent)
        self.check(*words)
        return result

    def seamless_cuda_copy(self, dst, src, nbytes, stream):
        self.check(dst, src)
        return super().seamless_cuda_copy(dst, src, nbytes, stream)

    def seamless_cublas_gemm(self, ordinal, stream, dtype, trans_a, trans_b, m, n, k, a, stride_a, b, stride_b, c,
                             *rest):
        self.check(a, b, c, rest[-1])
        return ffi.NULL


@pytest.mark.parametrize("precision", ["fp16", "int4"])
def test_a_run_frees_each_value_after_its_last_reader(precision, monkeypatch):
    # run_steps gives memory back to the cache once no value still to be read lies in it (a 32000-token prompt of
    # the 1B shape held 40 GB of values till the run's end): no kernel, copy or GEMM is given freed memory, and the
    # prompt's peak is below what a run holding every value takes (here 2 layers, the logits a large share of it)
    monkeypatch.setattr(sys.modules[__name__], "FakeGlue", CheckedGlue)
    graph, kernel, glue = fake_kernel(monkeypatch, {"capture": "off", "native_program": 0}, precision)
    kv = (graph.value("past_key_values.0.key").shape[1], 64)
    peaks = {}
    for dead_after in (kernel.dead_after, None):
        kernel.dead_after = dead_after
        for tokens, past in [(40, 0), (1, 40)]:
            peaks[dead_after is None, tokens] = peak_of_a_run(kernel, graph, glue, tokens, past, kv)
            assert glue.live == _kept(kernel)  # what a run allocates is freed after it, once
    assert peaks[False, 40] < 0.8 * peaks[True, 40], peaks


def peak_of_a_run(kernel, graph, glue, tokens, past, kv) -> int:
    """A run of `tokens` new tokens after `past` through the executor over a CheckedGlue (its outputs, too, in memory
    not freed), then what it allocated freed: the most bytes the run itself held at once (not its inputs)."""
    values = inputs(kernel, graph, tokens, past, kv)
    glue.peak = before = glue.used
    scratch = []
    results = kernel._run(dict(kernel.constants, **values), ffi.cast("void*", 7), scratch)
    glue.check(*(t.ptr for t in results))
    cuda_compute._release(kernel.rt, scratch, list(values.values()), kernel.held_addresses)
    for t in list(values.values()) + results:
        kernel.rt.free(t)
    return glue.peak - before


def test_a_kernel_opts_in_to_its_dynamic_shared_memory_once(monkeypatch):
    """Without opting in (cuFuncSetAttribute) a kernel's static and dynamic shared memory share 48 KiB: matmul.cu's
    linear with 48 KiB of weights staged beside its static partials failed to launch. The runtime allows a kernel's
    dynamic shared memory at its first launch with some, and again only for more (the 16-column linear_tc's 67 KiB)."""
    monkeypatch.setattr(runtime_cuda, "FATBIN", __file__)
    rt = runtime_cuda.CudaRuntime(FakeNative(), 0)
    for name, shared in [("a", 48 * 1024), ("b", 67 * 1024), ("b", 67 * 1024), ("b", 60 * 1024), ("b", 70 * 1024),
                         ("c", 0)]:
        rt.launch_rows(name, 1, ffi.cast("void*", 7), shared=shared)
    assert rt.native.lib.launches == [("allow_shared", "a", 48 * 1024), "a", ("allow_shared", "b", 67 * 1024), "b",
                                      "b", "b", ("allow_shared", "b", 70 * 1024), "b", "c"]


@pytest.mark.parametrize("capture", ["auto", "off"])
def test_level_a_captures_a_decode_step_and_replays_it_with_this_runs_addresses_and_lengths(capture, monkeypatch):
    # capture=auto: two eager runs of a binding, then its capture; every later run of the binding only rewrites the
    # staging table (exec/cuda_compute.py _launch): the inputs' addresses and lengths, the outputs' where ORT holds them.
    # capture=off (native_program=1, the default) records the same run as a launch program instead of a CUDA graph.
    graph, kernel, glue = fake_kernel(monkeypatch, {"capture": capture})
    assert kernel.padding is not None and not kernel.padding.left  # the KV axes padded at their end
    key, present = graph.inputs.index("past_key_values.0.key"), graph.outputs.index("present.0.key")
    for past in range(8, 14):
        fed = 1 << 36 | past << 20  # another address every run
        feed_decode_step(glue, graph, past, fed)
        kernel.compute(None)
        assert glue.outputs[present] == (1, 2, past + 1, 64)  # ORT's present tensor: this run's length, not 64
        if past < 10:  # warm-up: every kernel launched from Python
            assert "segment" not in glue.launches and len(glue.launches) > 10
            continue
        # captured at the third run, replayed after: one graph launch and the outputs' staging
        if past > 10:
            assert glue.launches == ["segment", "seamless_stage"]
        assert glue.launches[-2:] == ["segment", "seamless_stage"]
        inputs, outputs = (np.frombuffer(rows, STAGE_COPY) for rows in glue.copies)
        unit = 64 * 2  # bytes a position of a KV row (head size 64, float16)
        fields = lambda entry, names: [int(entry[name]) for name in names]
        # this run's past into the graph's buffer of capacity 64
        assert fields(inputs[key], ("src", "rows", "width", "src_pitch", "dst_pitch")) == [
            fed + key * 4096, 2, unit * past, unit * past, unit * 64]
        # the graph's present (capacity 64) into ORT's tensor of this run's length
        assert fields(outputs[present], ("dst", "rows", "width", "src_pitch", "dst_pitch")) == [
            (1 << 44) + (present << 24), 2, unit * (past + 1), unit * 64, unit * (past + 1)]
    assert glue.replays == 4  # runs 3-6
    assert glue.listed == (capture == "off")


@pytest.mark.parametrize("capture", ["auto", "off"])
def test_first_prompts_of_every_length_up_to_a_bucket_share_one_padded_segment(capture, monkeypatch):
    # exec/cuda_capture.prompt_padding: a first prompt (every past KV empty) runs padded at its end to a power of two
    # from 16, so the bucket's third prompt is captured (or recorded) and every later prompt length up to 16 replays
    # it; a decode step is another binding (the KV cache's padding)
    graph, kernel, glue = fake_kernel(monkeypatch, {"capture": capture})
    assert kernel.prompt is not None and set(kernel.prompt.inputs) == {"input_ids", "attention_mask"}
    ids, logits, present = graph.inputs.index("input_ids"), graph.outputs.index("logits"), \
        graph.outputs.index("present.0.key")
    vocab = graph.value("logits").shape[-1]
    for run, tokens in enumerate([5, 9, 16, 7, 12, 1]):
        fed = 1 << 36 | run << 20
        feed_decode_step(glue, graph, 0, fed, tokens)
        kernel.compute(None)
        assert glue.outputs[logits] == (1, tokens, vocab) and glue.outputs[present] == (1, 2, tokens, 64)
        if run < 2:
            assert "segment" not in glue.launches
            continue
        assert glue.launches[-2:] == ["segment", "seamless_stage"] and (run == 2 or len(glue.launches) == 2)
        inputs, outputs = (np.frombuffer(rows, STAGE_COPY) for rows in glue.copies)
        fields = lambda entry, names: [int(entry[name]) for name in names]
        # this run's ids into the segment's buffer of 16 (zeros after them), its logits and present rows back
        assert fields(inputs[ids], ("src", "rows", "width", "dst_pitch")) == [fed + ids * 4096, 1, 8 * tokens, 8 * 16]
        assert fields(outputs[logits], ("rows", "width", "src_pitch")) == [1, 2 * vocab * tokens, 2 * vocab * 16]
        assert fields(outputs[present], ("rows", "width", "src_pitch")) == [2, 128 * tokens, 128 * 16]
    assert glue.replays == 4 and len(kernel.segments) == 1
    feed_decode_step(glue, graph, 12, 1 << 36, 1)  # a decode step: not the prompt's segment
    kernel.compute(None)
    assert "segment" not in glue.launches and glue.replays == 4
    feed_decode_step(glue, graph, 0, 1 << 36, 17)  # longer than the bucket: the next one, warmed up anew
    kernel.compute(None)
    assert "segment" not in glue.launches and glue.outputs[logits] == (1, 17, vocab)


@pytest.mark.parametrize("capture", ["auto", "off"])
def test_a_capture_reuses_the_memory_its_run_frees(capture, monkeypatch):
    # runtime/cuda.py capture_pool: while a prompt's segment is captured (or recorded), a value's memory serves the
    # run's later values once no step still reads it, as the cache serves an eager run; the segment keeps the pool's
    # blocks. Checked: no launch, copy or GEMM of the capture is given a block that is free in the pool (or freed),
    # the capture holds less than without the pool, the glue gets every block back once, and later prompts replay
    monkeypatch.setattr(sys.modules[__name__], "FakeGlue", CheckedGlue)
    footprint = {}
    for pooled in (True, False):
        graph, kernel, glue = fake_kernel(monkeypatch, {"capture": capture}, "int4")
        pools = []
        if not pooled:
            monkeypatch.setattr(kernel.rt, "capture_pool", contextlib.nullcontext)
        put, take = runtime_cuda._CapturePool.put, runtime_cuda._CapturePool.take

        def put_checked(pool, ptr, nbytes):  # a block free in the pool reads as freed memory till it is taken again
            put(pool, ptr, nbytes)
            glue.freed.append((ptr, ptr + pool.blocks[ptr]))
            pools.append(pool)

        def take_checked(pool, nbytes):
            ptr = take(pool, nbytes)
            if ptr:
                glue.freed.remove((ptr, ptr + pool.blocks[ptr]))
            return ptr
        monkeypatch.setattr(runtime_cuda._CapturePool, "put", put_checked)
        monkeypatch.setattr(runtime_cuda._CapturePool, "take", take_checked)
        for run, tokens in enumerate([9, 12, 16, 5]):
            feed_decode_step(glue, graph, 0, 1 << 36 | run << 20, tokens)
            glue.peak = before = glue.used
            kernel.compute(None)
            if run == 2:  # the capture
                assert glue.launches[-2:] == ["segment", "seamless_stage"]
                footprint[pooled] = glue.peak - before
        assert glue.launches == ["segment", "seamless_stage"] and glue.replays == 2
        assert bool(pools) == pooled and all(ptr not in glue.sizes for pool in pools for ptr in pool.blocks)
        monkeypatch.undo()
        monkeypatch.setattr(sys.modules[__name__], "FakeGlue", CheckedGlue)
    assert footprint[True] < 0.8 * footprint[False], footprint


def test_a_prompt_longer_than_the_largest_bucket_is_never_captured(monkeypatch):
    # past MAX_PROMPT tokens a prompt's GPU time hides the launches a replay saves, while a capture would keep every
    # buffer the run frees (a 32000-token prompt: 27 GB): it runs eagerly however often it comes; one within the
    # buckets is captured on its third run as before (MAX_PROMPT lowered to 16 here: the small decoder's lengths)
    monkeypatch.setattr(cuda_compute, "MAX_PROMPT", 16)
    graph, kernel, glue = fake_kernel(monkeypatch, {"capture": "auto"})
    for run in range(4):
        feed_decode_step(glue, graph, 0, 1 << 36 | run << 20, 17)
        kernel.compute(None)
        assert "segment" not in glue.launches
    assert not kernel.segments and glue.replays == 0
    for run in range(3):
        feed_decode_step(glue, graph, 0, 1 << 36 | run << 20, 16)
        kernel.compute(None)
    assert glue.launches[-2:] == ["segment", "seamless_stage"] and len(kernel.segments) == 1


def test_the_replay_key_pads_a_first_prompt_to_its_bucket():
    """cuda_replay.c: with a prompt's padding registered (seamless_replayer_prompts), a run whose past lengths are all 0
    and prompt lengths all equal is keyed by the prompt's bucket (a power of two from 16 up to the registered
    maximum, here 2048) and flagged; any other run, a longer prompt too, by the KV cache's capacity."""
    grow_at = np.array([1 * 4 + 1, 2 * 4 + 2], np.int64)  # the mask's total length, the past's length
    prompt_at, zero_at = np.array([0 * 4 + 1, 1 * 4 + 1], np.int64), np.array([2 * 4 + 2], np.int64)
    view = ffi.from_buffer
    replayer = REAL.seamless_replayer_new(3, 4, view("int64_t[]", grow_at), 2, 0, 64)
    try:
        assert REAL.seamless_replayer_prompts(replayer, view("int64_t[]", prompt_at), 2, view("int64_t[]", zero_at),
                                              1, 16, 2048) == 0

        def key(tokens, total, past):
            dims = np.zeros(12, np.int64)
            dims[0:2], dims[4:6], dims[8:12] = (1, tokens), (1, total), (1, 2, past, 64)
            ranks, types = np.array([2, 2, 4], np.int32), np.array([7, 7, 10], np.int32)
            out, prompt = ffi.new("uint8_t[]", REAL.seamless_replay_key_size(replayer)), ffi.new("int32_t*", -1)
            capacity = REAL.seamless_replay_key(replayer, view("int64_t[]", dims), view("int32_t[]", ranks),
                                                view("int32_t[]", types), out, prompt)
            return capacity, prompt[0], np.frombuffer(bytes(ffi.buffer(out))[:96], np.int64).reshape(3, 4)

        capacity, prompt, dims = key(5, 5, 0)
        assert (capacity, prompt) == (16, 1) and dims[0, 1] == dims[1, 1] == 16 and dims[2, 2] == 0
        assert key(1, 1, 0)[:2] == (16, 1) and key(17, 17, 0)[:2] == (32, 1)
        assert key(9, 9, 0)[2].tobytes() == dims.tobytes()  # a prompt of the same bucket: the same key
        assert key(1, 6, 5)[:2] == (64, 0)  # a decode step: the KV capacity
        assert key(5, 6, 0)[:2] == (64, 0)  # lengths that differ are no first prompt
        # KV buffers of the maximum length that past and present share (session capture's): a first prompt where
        # the bucket fits in them, keyed by the bucket and the buffers' length
        capacity, prompt, dims = key(5, 5, 100)
        assert (capacity, prompt) == (16, 1) and dims[0, 1] == dims[1, 1] == 16 and dims[2, 2] == 100
        assert key(9, 9, 100)[2].tobytes() == dims.tobytes() and key(16, 16, 16)[:2] == (16, 1)
        assert key(17, 17, 20)[:2] == (64, 0)  # the bucket (32) does not fit: keyed as a run of a growing cache
        assert key(1, 100, 100)[:2] == (128, 0)  # a decode step on the shared buffers
        # past the largest bucket a first prompt runs at its own length: keyed by it and the KV capacity
        assert key(2048, 2048, 0)[:2] == (2048, 1) and key(2048, 2048, 4096)[:2] == (2048, 1)
        capacity, prompt, dims = key(2049, 2049, 0)
        assert (capacity, prompt) == (4096, 0) and dims[0, 1] == 2049 and dims[1, 1] == 4096
        assert key(2049, 2049, 4096)[:2] == (4096, 0)
        assert key(1, 2 ** 62 + 1, 0)[:2] == (2 ** 62, 0)  # a length past 2^62 (a tensor with a zero-sized dim):
        assert key(2 ** 62 + 1, 2 ** 62 + 1, 0)[:2] == (2 ** 62, 0)  # no endless doubling, a capacity it exceeds
    finally:
        REAL.seamless_replayer_free(replayer)


def test_without_native_programs_every_run_is_eager(monkeypatch):
    # capture=off with native_program=0 keeps every run in Python: no segment is recorded
    graph, kernel, glue = fake_kernel(monkeypatch, {"capture": "off", "native_program": False})
    for run in range(4):
        feed_decode_step(glue, graph, 8, 1 << 36 | run << 20)
        kernel.compute(None)
        assert "segment" not in glue.launches and len(glue.launches) > 10
    assert not kernel.capture and glue.listed is None and glue.replays == 0


def feed_shared_prompt(glue, graph, tokens, max_len, base):
    """ORT's inputs of a first prompt over KV buffers of `max_len` that past and present share (session capture's
    binding): ids and mask as long as the prompt."""
    glue.feed = [(base + i * 4096, {"input_ids": (1, tokens), "attention_mask": (1, tokens)}.get(
                  n, (1, 2, max_len, 64)), np.dtype(graph.value(n).dtype)) for i, n in enumerate(graph.inputs)]
    glue.outputs, glue.launches, glue.copies = [None] * len(graph.outputs), [], []


@pytest.mark.parametrize("capture", ["auto", "off"])
def test_under_session_capture_uncaptured_prompts_of_any_length_replay_one_padded_segment(capture, monkeypatch):
    # enable_cuda_graph=1: ORT captures and replays the decode steps; a run it does not capture (gpu_graph_id -1,
    # onnxruntime-genai's prompt) gets capture=auto's segments (or launch programs). Its KV buffers are the shared
    # ones of the maximum length, so a first prompt is one whose ids and mask are as long and whose bucket fits in
    # them: padded to the bucket, the present staged back whole (the buffer's length)
    graph, kernel, glue = fake_kernel(monkeypatch, {"capture": capture, "enable_cuda_graph": 1})
    assert kernel.capture and kernel.prompt is not None
    ids, logits, present = graph.inputs.index("input_ids"), graph.outputs.index("logits"), \
        graph.outputs.index("present.0.key")
    vocab = graph.value("logits").shape[-1]
    for run, tokens in enumerate([5, 9, 16, 7, 12]):
        feed_shared_prompt(glue, graph, tokens, 100, 1 << 36 | run << 20)
        kernel.compute(None)
        assert glue.outputs[logits] == (1, tokens, vocab) and glue.outputs[present] == (1, 2, 100, 64)
        if run < 2:
            assert "segment" not in glue.launches and len(glue.launches) > 10
            continue
        assert glue.launches[-2:] == ["segment", "seamless_stage"] and (run == 2 or len(glue.launches) == 2)
        inputs, outputs = (np.frombuffer(rows, STAGE_COPY) for rows in glue.copies)
        fields = lambda entry, names: [int(entry[name]) for name in names]
        assert fields(inputs[ids], ("rows", "width", "dst_pitch")) == [1, 8 * tokens, 8 * 16]
        assert fields(outputs[logits], ("rows", "width", "src_pitch")) == [1, 2 * vocab * tokens, 2 * vocab * 16]
        assert fields(outputs[present], ("rows", "width", "src_pitch", "dst_pitch")) == [2, 128 * 100, 128 * 100,
                                                                                       128 * 100]
    assert glue.replays == 3 and len(kernel.segments) == 1 and glue.listed == (capture == "off")
    glue.capturing = 1  # ORT captures this run (gpu_graph_id >= 0): the kernels are launched into its graph
    feed_shared_prompt(glue, graph, 7, 100, 1 << 36)
    kernel.compute(None)
    assert "segment" not in glue.launches and len(glue.launches) > 10 and glue.replays == 3
    glue.capturing = 0
    feed_shared_prompt(glue, graph, 17, 20, 1 << 36)  # its bucket (32) does not fit the buffers: another binding
    kernel.compute(None)
    assert "segment" not in glue.launches and glue.outputs[present] == (1, 2, 20, 64)


def test_a_launch_program_records_the_streams_work_instead_of_issuing_it():
    # ep_plugin/cuda_capture.c: while this thread records a launch program on a stream (capture=off), cuda_exec.c's
    # launches (their argument bytes copied), copies, zeroing and cuBLASLt GEMMs on that stream are appended to the
    # program, not issued: this machine has no CUDA driver, so an issued call would fail
    stream, handle = ffi.cast("void*", 7), ffi.new("void**")
    assert REAL.seamless_segment_begin(stream, 1, handle) == ffi.NULL
    try:
        assert REAL.seamless_capturing()  # as during a capture: no host reads, memory freed stays with the program
        packed, offsets = struct.pack("<qi", 1 << 40, 3), ffi.new("int32_t[]", [0, 8])
        assert REAL.seamless_cuda_launch(ffi.cast("void*", 1), 4, 1, 256, 0, stream, packed, len(packed), offsets, 2,
                                         1) == ffi.NULL
        assert REAL.seamless_cuda_copy(1 << 36, 1 << 37, 64, stream) == ffi.NULL
        assert REAL.seamless_cuda_zero(1 << 36, 64, stream) == ffi.NULL
        assert REAL.seamless_cublas_gemm(0, stream, 10, 0, 1, 16, 32, 64, 1 << 36, 0, 1 << 37, 0, 1 << 38, 0, 1, 1.0,
                                         10, 0) == ffi.NULL
    finally:
        assert REAL.seamless_segment_end(handle[0], 1) == ffi.NULL
    assert not REAL.seamless_capturing()
    assert REAL.seamless_segment_steps(handle[0]) == 4
    REAL.seamless_segment_release(0, handle[0])


def _kept(kernel) -> set:
    """Addresses that outlive a run: the constants, the layouts kernels made of them (DeviceTensor.derived) and
    each stream's counters (CudaRuntime.counters)."""
    constants = kernel.constants.values()
    return ({t.ptr for t in constants if t.ptr} | {d.ptr for t in constants for d in (t.derived or {}).values()}
            | {entry[0].ptr for entry in kernel.rt._counters.values()})


@pytest.mark.parametrize("left", [0, 1])
def test_the_replay_key_takes_growing_lengths_at_their_capacity(left):
    """cuda_replay.c's binding key: the inputs' dims (zero past each rank, whatever the buffer held there), growing
    lengths replaced by the capacity, a power of two from 64 (padded at the start: each length plus the same lead),
    then ranks and types; the capacity returned. Keys of runs that share a capacity are equal."""
    grow_at = np.array([1 * 4 + 2, 2 * 4 + 2], np.int64)  # inputs 1 and 2 grow on axis 2 (max_rank 4)
    replayer = REAL.seamless_replayer_new(3, 4, ffi.from_buffer("int64_t[]", grow_at), 2, left, 64)
    try:
        size = REAL.seamless_replay_key_size(replayer)
        assert size == 3 * 4 * 8 + 2 * 3 * 4

        def key(lengths, stale=-7):
            dims = np.full(3 * 4, stale, np.int64)  # what lies past a rank must not matter
            dims[0:2] = (1, 1)
            for i, length in zip((1, 2), lengths):
                dims[i * 4:i * 4 + 4] = (1, 2, length, 64)
            ranks, types = np.array([2, 4, 4], np.int32), np.array([7, 10, 10], np.int32)
            out = ffi.new("uint8_t[]", size)
            view = ffi.from_buffer
            capacity = REAL.seamless_replay_key(replayer, view("int64_t[]", dims), view("int32_t[]", ranks),
                                                view("int32_t[]", types), out, ffi.NULL)
            raw = bytes(ffi.buffer(out))
            return capacity, np.frombuffer(raw[:96], np.int64).reshape(3, 4), raw[96:]

        capacity, dims, tail = key((70, 71))
        assert capacity == 128
        assert dims[0].tolist() == [1, 1, 0, 0]  # zero past the rank
        assert dims[1].tolist() == [1, 2, 127 if left else 128, 64] and dims[2].tolist() == [1, 2, 128, 64]
        assert tail == np.array([2, 4, 4, 7, 10, 10], np.int32).tobytes()
        assert key((0, 0))[0] == key((64, 1))[0] == 64 and key((65, 65), stale=9)[0] == 128
        same = key((100, 100), stale=3)  # another length below the same capacity: the same key
        assert same[0] == 128 and same[1].tobytes() == key((120, 120))[1].tobytes()
    finally:
        REAL.seamless_replayer_free(replayer)


def test_a_transpose_that_moves_only_axes_of_one_keeps_the_memory():
    """A decode step's [1, 1, n] -> [1, n, 1] (Qwen3.5's convolution around CausalConvWithState) is a view: the
    same address, the new shape, no launch (tests/cuda/test_cuda_quantization.py checks the values on a GPU)."""
    from onnxruntime_ep_seamless.kernels.cuda.shape import transpose
    from onnxruntime_ep_seamless.runtime.cuda import DeviceTensor
    x = DeviceTensor(1 << 20, (1, 1, 6), np.dtype(np.float16))
    for perm, shape in (([0, 2, 1], (1, 6, 1)), ([2, 1, 0], (6, 1, 1)), (None, (6, 1, 1))):
        (y,) = transpose(None, None, x, perm=perm)  # no runtime: nothing launched or allocated
        assert (y.ptr, y.shape, y.dtype) == (x.ptr, shape, x.dtype)
    host = DeviceTensor.on_host(np.arange(6, dtype=np.int64).reshape(2, 1, 3))
    (y,) = transpose(None, None, host, perm=[1, 0, 2])
    assert y.shape == (1, 2, 3) and y.host.tolist() == [[[0, 1, 2], [3, 4, 5]]]

    class Runtime:  # records the copy a real reordering makes
        def __init__(self):
            self.copies = []

        def alloc(self, shape, dtype):
            return DeviceTensor(2 << 20, tuple(shape), np.dtype(dtype))

        def strided_copy(self, stream, src, dst, dims, src_strides, dst_strides):
            self.copies.append((src.ptr, dst.ptr, tuple(dims), tuple(src_strides)))

    rt = Runtime()
    (y,) = transpose(rt, None, DeviceTensor(1 << 20, (2, 1, 3), np.dtype(np.float16)), perm=[2, 1, 0])
    assert (y.ptr, y.shape) == (2 << 20, (3, 1, 2)) and rt.copies == [(1 << 20, 2 << 20, (3, 1, 2), (1, 3, 3))]


def test_a_split_of_a_decode_row_is_views_that_keep_their_memory_alive(monkeypatch):
    """A decode step's [1, 1, n] split on its last axis (Qwen3.5's q, k, v after the convolution) gives views, no
    copy: a piece's memory lives while any piece, or a view of one (a Reshape), does; only the allocation itself is
    ever freed, never an address inside it (nor inside the input a piece of it lies in), eagerly or into a capture's
    pool; a piece that is an output keeps its allocation past the run."""
    from onnxruntime_ep_seamless.kernels.cuda.shape import VIEW_ALIGN
    n = VIEW_ALIGN // 2  # float16: pieces VIEW_ALIGN bytes apart
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT16, [1, 1, 3 * n])
    outs = [onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT16, None) for name in ("s", "r", "t")]
    flat = onnx.numpy_helper.from_array(np.array([1, n], np.int64), "flat")
    nodes = [onnx.helper.make_node("Mul", ["x", "x"], ["sq"]),
             onnx.helper.make_node("Split", ["sq"], ["q", "k", "v"], axis=-1, num_outputs=3),
             onnx.helper.make_node("Sigmoid", ["v"], ["g"]),
             onnx.helper.make_node("Add", ["q", "g"], ["s"]),
             onnx.helper.make_node("Reshape", ["k", "flat"], ["r"]),  # a view of a piece: an output
             onnx.helper.make_node("Split", ["x"], ["a", "b", "c"], axis=-1, num_outputs=3),  # pieces of the input
             onnx.helper.make_node("Reshape", ["b", "flat"], ["b2"]),
             onnx.helper.make_node("Sigmoid", ["b2"], ["t"])]
    model = onnx.helper.make_model(onnx.helper.make_graph(nodes, "split", [x], outs, [flat]),
                                   opset_imports=[onnx.helper.make_opsetid("", 18)])
    graph = import_model(model)

    class FreesOnlyAllocations(CheckedGlue):
        def seamless_cuda_free(self, ordinal, ptr):
            assert ptr in self.sizes, f"{ptr:#x} freed: not an allocation"
            super().seamless_cuda_free(ordinal, ptr)

    monkeypatch.setattr(sys.modules[__name__], "FakeGlue", FreesOnlyAllocations)
    monkeypatch.setattr(runtime_cuda, "FATBIN", __file__)
    monkeypatch.setattr(runtime_cuda.CudaRuntime, "_instances", {})
    ep = FakeEp({"capture": "off", "native_program": 0})
    kernel = cuda_compute.CudaKernel(ep, graph, ["x"], ["s", "r", "t"])
    glue, rt = ep.native.lib, kernel.rt
    x = rt.alloc((1, 1, 3 * n), np.float16)
    x.settled = True
    glue.launches, scratch = [], []
    s, r, t = kernel._run(dict(kernel.constants, x=x), ffi.cast("void*", 7), scratch)
    assert len([name for name in glue.launches if isinstance(name, str)]) == 4, glue.launches  # no copy
    squared = next(v for v in scratch if v.shape == (1, 1, 3 * n))
    assert r.base is squared and r.ptr == squared.ptr + VIEW_ALIGN and squared.ptr in glue.live
    glue.check(s.ptr, r.ptr, t.ptr)
    cuda_compute._release(rt, scratch, [x, s, r, t], kernel.held_addresses)
    assert glue.live == _kept(kernel) | {x.ptr, s.ptr, t.ptr, squared.ptr}  # r keeps its allocation
    for v in (s, r, t):
        rt.free(v.base or v)

    pooled = []  # a capture's run: what it frees serves its later allocations, so only allocations may go there
    monkeypatch.setattr(runtime_cuda._CapturePool, "put", lambda pool, ptr, nbytes: pooled.append(ptr))
    with rt.capture_pool():
        scratch = []
        kernel._run(dict(kernel.constants, x=x), ffi.cast("void*", 7), scratch)
        cuda_compute._release(rt, scratch, [x], kernel.held_addresses)
    assert pooled and set(pooled) <= set(glue.sizes), [hex(p) for p in pooled]


@pytest.mark.parametrize("tokens,experts,grouped", [(1, 8, False), (7, 8, False), (8, 8, True), (64, 8, True),
                                                    (64, 128, False)])
def test_a_prompts_qmoe_takes_its_experts_grouped(tokens, experts, grouped):
    """QMoE's 4-bit experts over a prompt of as many (token, slot) pairs as GROUPED_PAIRS_AN_EXPERT a expert: the
    pairs grouped by expert on the device (moe.cu group) and each weight read once for a tile of MOE_MMA_PAIRS pairs
    (float16: on tensor cores, grouped_mma), down's products summed by combine; fewer (a decode step) keep the
    pair-by-pair kernels. Either way the first product stores its rows activated (no activate launch), and every
    launch passes the arguments its kernel declares (tests/cuda_sources.py). The grid: a block per possible tile
    (pairs / MOE_MMA_PAIRS + experts) and MOE_MMA_ROWS rows (values: test_cuda_moe.py)."""
    from cuda_sources import launch_mismatches
    from onnxruntime_ep_seamless.kernels.cuda.moe import qmoe
    from onnxruntime_ep_seamless.runtime.cuda import DeviceTensor
    from onnxruntime_ep_seamless.runtime.cuda_args import ffi, lib as codes

    class Runtime:  # hands out aligned addresses and records the launches
        def __init__(self):
            self.top, self.launches = 1 << 32, []

        def alloc(self, shape, dtype):
            t, self.top = DeviceTensor(self.top, tuple(shape), np.dtype(dtype)), self.top + (1 << 20)
            return t

        def free(self, t):
            pass

        def launch(self, name, n, stream, *args):
            self.launches.append((name, None, args))

        def launch_rows(self, name, rows, stream, *args, shared=0, threads=256):
            self.launches.append((name, rows, args))

    rt, hidden, inter, k = Runtime(), 64, 32, 2
    f16, u8 = np.dtype(np.float16), np.dtype(np.uint8)
    x, router = rt.alloc((tokens, hidden), f16), rt.alloc((tokens, experts), f16)
    fc1, fc1_scales = rt.alloc((experts, 2 * inter, hidden // 2), u8), rt.alloc((experts, 2 * inter, hidden // 32), f16)
    fc2, fc2_scales = rt.alloc((experts, hidden, inter // 2), u8), rt.alloc((experts, hidden, inter // 32), f16)
    qmoe(rt, None, x, router, fc1, fc1_scales, None, fc2, fc2_scales, k=k, activation_type="swiglu", swiglu_fusion=1,
         expert_weight_bits=4, block_size=32)
    names = [name for name, _, _ in rt.launches]
    for name, _, args in rt.launches:  # each launch's arguments as its kernel declares them (args.h structs by size)
        assert not launch_mismatches(name, args, ffi.sizeof)
    if not grouped:
        assert names == ["seamless_moe_route_f16", "seamless_moe_up_f16", "seamless_moe_down_dealt_f16"]
        return
    assert names == ["seamless_moe_route_f16", "seamless_moe_group", "seamless_moe_grouped_mma_f16",
                     "seamless_moe_grouped_mma_act_f16", "seamless_moe_combine_f16"]
    tiles = -(-tokens * k // codes.MOE_MMA_PAIRS) + experts
    assert rt.launches[1][1] == 1 and rt.launches[1][2][2] == ("int", codes.MOE_MMA_PAIRS)
    assert rt.launches[2][1] == (tiles, -(-2 * inter // codes.MOE_MMA_ROWS))
    assert rt.launches[3][1] == (tiles, -(-hidden // codes.MOE_MMA_ROWS))
