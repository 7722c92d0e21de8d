"""A fused node compiled for the CUDA EP: constants uploaded once, kernels launched on ORT's stream.

Values live in device memory from the CUDA runtime's cache (no driver allocation in steady
state); the partition's outputs are copied device-to-device into the tensors ORT allocates.
"""
from __future__ import annotations

import re
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass


from ..graph.ir import ONNX_TO_NUMPY, Node
from ..kernels.registry import KernelDef, lookup
from ..runtime.cuda import CudaRuntime, DeviceTensor
from .compute import MAX_RANK, _Buffers
from .ep import LOG_WARNING


# CUDA kernels whose results are host values (shapes, sizes, constants)
HOST_RESULTS = frozenset({"Shape", "Size", "Constant", "Range"})


@dataclass
class Step:
    node: Node
    kdef: KernelDef
    on_gpu: bool
    seam: str    # why the host must wait for the GPU before this step; "" when it need not
    grows: bool  # a shape of the step depends on a growing symbol (the KV length)


KV_NAME = re.compile(r"past|present", re.IGNORECASE)
SYMBOL = re.compile(r"[A-Za-z_]\w*")


def growing_symbols(graph) -> set[str]:
    """The symbols that grow from one decode step to the next: a plain symbol on the sequence axis
    (2) of a KV cache (a rank-4 value named past*/present*). A dim grows when its expression uses
    one (an attention mask's total length, `past + seq`); batch, query length and heads stay pinned."""
    return {v.shape[2] for name, v in graph.values.items()
            if KV_NAME.search(name) and v.shape is not None and len(v.shape) == 4 and isinstance(v.shape[2], str)
            and SYMBOL.fullmatch(v.shape[2])}


def _grows(dims, growing) -> bool:
    return any(isinstance(d, str) and not growing.isdisjoint(SYMBOL.findall(d)) for d in dims or ())


def place(graph, input_names) -> list[Step]:
    """Where each node of a fused graph runs, and its seams. Values known on the host are the
    constants and what host kernels compute; integer work runs there when all its inputs are, else
    with its CUDA kernel where there is one. A seam is a step that needs a GPU value on the host:
    a host kernel reading one, or a CUDA kernel's host input (a shape, axes, k…) computed on the GPU."""
    on_host = {name for name, v in graph.values.items() if v.const is not None and name not in input_names}
    growing = growing_symbols(graph)
    steps = []
    for node in graph.nodes:
        kdef, reason = lookup(node, graph, "cuda")
        if kdef is None:
            raise ValueError(f"node {node.label!r} ({node.key}) cannot be planned: {reason}")
        if kdef.device != "cuda" and not all(n in on_host for n in node.inputs if n):
            kdef = lookup(node, graph, "cuda", host_rule=False)[0] or kdef
        on_gpu = kdef.device == "cuda"
        wanted = node.inputs if not on_gpu else [node.inputs[i] for i in kdef.host_inputs if i < len(node.inputs)]
        read = [n for n in wanted if n and n not in on_host]
        seam = (f"reads {', '.join(read)} on the host " + ("(no CUDA kernel takes these types)" if not on_gpu else
                                                            "(a shape-like input computed on the GPU)")) if read else ""
        if not on_gpu or node.op_type in HOST_RESULTS:
            on_host.update(n for n in node.outputs if n)
        grows = bool(growing) and any(_grows(graph.value(n).shape, growing) for n in node.inputs + node.outputs if n)
        steps.append(Step(node, kdef, on_gpu, seam, grows))
    return steps


def segments(steps: list[Step]) -> int:
    """Segments of GPU work a partition splits into: each seam starts another."""
    return sum(1 for s in steps if s.seam) + 1 if any(s.on_gpu for s in steps) else 0


def capture_summary(steps: list[Step], name: str) -> str:
    """One line per partition (segments of GPU work between seams), then each seam."""
    seams = [s for s in steps if s.seam]
    gpu = sum(s.on_gpu for s in steps)
    lines = [f"{name}: {len(steps)} nodes ({gpu} on the GPU), {segments(steps)} segment(s), {len(seams)} seam(s)"]
    growing = [s for s in steps if s.grows and s.on_gpu and s.node.op_type not in HOST_RESULTS]
    if growing:  # what a capture across decode steps would have to launch for a maximum length
        indexed = sum(s.kdef.capture == "device-indexed" for s in growing)
        lines.append(f"  {len(growing)} GPU node(s) with shapes that grow with the KV length, {indexed} of them "
                     f"device-indexed ({', '.join(sorted({s.node.op_type for s in growing}))})")
    lines += [f"  seam at {s.node.label!r} ({s.node.key}): {s.seam}" for s in seams]
    return "\n".join(lines)


WARMUP_RUNS = 2    # capture=auto: runs with the same input shapes before they are captured
MAX_SEGMENTS = 8   # captured input shapes per compiled node; the least recently used is dropped


@dataclass
class Segment:
    """A captured Compute for one set of input shapes: replays copy ORT's inputs into `inputs`,
    launch the graph, and copy `outputs` into ORT's outputs."""
    graph: object      # the C handle (cuda_capture.c)
    stream: object     # replayed only on the stream it was captured on (its buffers are reused)
    inputs: dict       # input name -> the DeviceTensor the graph reads
    outputs: list      # DeviceTensors the graph leaves the results in


class CudaKernel:
    compute_calls = 0      # of every CUDA fused node: a replayed session graph makes none
    segment_replays = 0    # Computes answered by replaying a captured segment (capture=auto)

    def __init__(self, ep, graph, input_names: list[str], output_names: list[str]):
        self.native, self.ep_name = ep.native, ep.name
        if ep.device_ordinal < 0:
            raise RuntimeError("the CUDA EP was created without a CUDA device")
        self.rt = CudaRuntime.get(ep.native, ep.device_ordinal)
        self.name = "+".join(sorted({n.op_type for n in graph.nodes}))[:80] if len(graph.nodes) > 1 else graph.nodes[0].label
        self.input_names, self.output_names = input_names, output_names
        self.constants = {name: self.rt.upload(v.const) for name, v in graph.values.items()
                          if v.const is not None and name not in input_names}
        placed = place(graph, input_names)
        if ep.options.get("log_capture"):
            ep.log(LOG_WARNING, capture_summary(placed, f"{ep.name} fused node {self.name!r}"))
        self.steps = [(s.node, s.kdef.build(s.node), s.on_gpu, frozenset(s.kdef.host_inputs)) for s in placed]
        self.out_dtypes = [graph.value(n).dtype for n in output_names]
        self._tls = threading.local()
        # capture=auto: a node without seams is captured whole, per set of input shapes
        self.capture = (ep.options.get("capture") == "auto" and not ep.options.get("enable_cuda_graph")
                        and not any(s.seam for s in placed))
        self.segments: OrderedDict = OrderedDict()
        self.seen: Counter = Counter()
        self._lock = threading.Lock()

    def compute(self, ctx) -> None:
        ffi, lib, check = self.native.ffi, self.native.lib, self.native.check
        b = getattr(self._tls, "b", None)
        if b is None:
            b = self._tls.b = _Buffers(ffi, len(self.input_names), len(self.output_names))
        stream_out = ffi.new("void**")
        check(lib.seamless_compute_stream(ctx, stream_out))
        stream = stream_out[0]
        check(lib.seamless_capture_begin(stream))  # a session graph capture starts on this stream
        CudaKernel.compute_calls += 1
        if lib.seamless_get_inputs(ctx, len(self.input_names), b.in_data, b.in_nbytes, b.in_types, b.in_ranks,
                                   b.in_dims, MAX_RANK, b.changed, b.status) < 0:
            check(b.status[0])
        inputs: dict[str, DeviceTensor] = {}
        for i, name in enumerate(self.input_names):
            rank = b.in_ranks[i]
            if rank >= 0:
                inputs[name] = DeviceTensor(int(ffi.cast("uintptr_t", b.in_data[i])),
                                            tuple(b.in_dims[i * MAX_RANK:i * MAX_RANK + rank]),
                                            ONNX_TO_NUMPY[b.in_types[i]])
        if self.capture and not lib.seamless_capturing():
            key = tuple((n, inputs[n].shape, inputs[n].dtype.str) for n in self.input_names if n in inputs)
            with self._lock:
                segment = self.segments.get(key)
                if segment is not None:
                    self.segments.move_to_end(key)
                if len(self.seen) > 4096:  # shapes that keep changing (a growing KV cache) are never captured
                    self.seen.clear()
                self.seen[key] += 1
                due = segment is None and self.seen[key] > WARMUP_RUNS
            if segment is not None and segment.stream == stream:
                return self._replay(segment, inputs, ctx, b, stream)
            if due:
                try:
                    return self._capture(key, inputs, ctx, b, stream)
                except Exception:  # not capturable after all (or a bad input): this node runs eagerly from now on
                    self.capture = False
        scratch = []
        try:
            results = self._run(dict(self.constants, **inputs), stream, scratch)
            self._write_outputs(ctx, b, results, stream)
        finally:
            # back to the cache: later work on this stream is ordered after this run's kernels
            _release(self.rt, scratch, list(inputs.values()), self.constants)

    def _run(self, values: dict, stream, scratch: list) -> list[DeviceTensor]:
        """Every step on `values` (constants and inputs); the outputs, on the GPU. What kernels
        allocate is appended to `scratch`."""
        rt = self.rt

        def on_gpu_value(name):
            t = values[name]
            if not t.ptr and t.nbytes:  # a host value a GPU kernel reads: upload once
                t = values[name] = rt.device(t, stream)
                scratch.append(t)
            return t

        for node, fn, on_gpu, host_inputs in self.steps:
            if on_gpu:  # host inputs (shapes, axes…) are read where they are, the rest must be on the GPU
                outs = fn(rt, stream, *[None if not n else values[n] if i in host_inputs else on_gpu_value(n)
                                        for i, n in enumerate(node.inputs)])
            else:  # integer shape/mask arithmetic: the CPU kernel, on the host
                host_args = [rt.to_host(values[n], stream) if n in values else None for n in node.inputs]
                outs = [DeviceTensor.on_host(v) for v in fn(*host_args)]
            for name, t in zip(node.outputs, outs):
                if t is not None:
                    scratch.append(t)  # freed after the run even when the node leaves it unnamed
                    if name:
                        values[name] = t
        results = [on_gpu_value(n) for n in self.output_names]
        for name, t, dtype in zip(self.output_names, results, self.out_dtypes):
            if t.dtype != dtype:
                raise TypeError(f"output {name!r}: kernel produced {t.dtype}, graph declares {dtype}")
        return results

    def _write_outputs(self, ctx, b, results: list[DeviceTensor], stream) -> None:
        ffi = self.native.ffi
        for i, t in enumerate(results):
            b.out_ranks[i] = len(t.shape)
            b.out_dims[i * MAX_RANK:i * MAX_RANK + len(t.shape)] = t.shape
        self.native.check(self.native.lib.seamless_get_outputs(ctx, len(results), b.out_ranks, b.out_dims, MAX_RANK,
                                                               b.out_data))
        for i, t in enumerate(results):
            self.rt.copy(int(ffi.cast("uintptr_t", b.out_data[i])), t.ptr, t.nbytes, stream)

    def _capture(self, key, inputs: dict, ctx, b, stream) -> None:
        """Capture this Compute's launches for these input shapes, then run them as a replay does."""
        ffi, lib, rt = self.native.ffi, self.native.lib, self.rt
        stable = {}
        for name, t in inputs.items():  # the graph reads its own copies of the inputs
            stable[name] = rt.alloc(t.shape, t.dtype)
            rt.copy(stable[name].ptr, t.ptr, t.nbytes, stream)
        handle = ffi.new("void**")
        self.native.check(lib.seamless_segment_begin(stream, handle))
        graph, scratch = handle[0], []
        try:
            results = self._run(dict(self.constants, **stable), stream, scratch)
            _release(rt, scratch, list(stable.values()), self.constants)  # kept by the graph: replays reuse them
            self.native.check(lib.seamless_segment_end(graph, 1))
        except BaseException:
            if lib.seamless_capturing():
                lib.seamless_segment_end(graph, 0)
            lib.seamless_segment_release(rt.ordinal, graph)
            for t in stable.values():
                rt.free(t)
            raise
        segment = Segment(graph, stream, stable, results)
        with self._lock:
            self.segments[key] = segment
            while len(self.segments) > MAX_SEGMENTS:
                self._drop(self.segments.popitem(last=False)[1])
        self._replay(segment, inputs, ctx, b, stream, copy_inputs=False)

    def _replay(self, segment: Segment, inputs: dict, ctx, b, stream, copy_inputs: bool = True) -> None:
        if copy_inputs:
            for name, t in inputs.items():
                self.rt.copy(segment.inputs[name].ptr, t.ptr, t.nbytes, stream)
        self.native.check(self.native.lib.seamless_segment_launch(segment.graph, stream))
        self._write_outputs(ctx, b, segment.outputs, stream)
        CudaKernel.segment_replays += 1

    def _drop(self, segment: Segment) -> None:
        self.native.lib.seamless_segment_release(self.rt.ordinal, segment.graph)
        for t in segment.inputs.values():
            self.rt.free(t)

    def __del__(self):
        try:
            for segment in getattr(self, "segments", {}).values():
                self._drop(segment)
        except Exception:  # interpreter shutdown: the process releases the GPU anyway
            pass


def _release(rt, scratch, inputs, constants):
    """Free what kernels allocated; aliases (same address as an input, a constant or an earlier
    value) are not allocations."""
    foreign = {t.ptr for t in inputs} | {t.ptr for t in constants.values()}
    freed = set()
    for t in scratch:
        if t.ptr and t.ptr not in foreign and t.ptr not in freed:
            freed.add(t.ptr)
            rt.free(t)
