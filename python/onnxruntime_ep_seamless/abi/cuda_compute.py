"""A fused node compiled for the CUDA EP: constants uploaded once, kernels launched on ORT's stream.

Values live in device memory from the CUDA runtime's cache (no driver allocation in steady
state); the partition's outputs are copied device-to-device into the tensors ORT allocates.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

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
    seam: str  # why the host must wait for the GPU before this step; "" when it need not


def place(graph, input_names) -> list[Step]:
    """Where each node of a fused graph runs, and its seams. Values known on the host are the
    constants and what host kernels compute; integer work runs there when all its inputs are, else
    with its CUDA kernel where there is one. A seam is a step that needs a GPU value on the host:
    a host kernel reading one, or a CUDA kernel's host input (a shape, axes, k…) computed on the GPU."""
    on_host = {name for name, v in graph.values.items() if v.const is not None and name not in input_names}
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
        steps.append(Step(node, kdef, on_gpu, seam))
    return steps


def capture_summary(steps: list[Step], name: str) -> str:
    """One line per partition (segments of GPU work between seams), then each seam."""
    seams = [s for s in steps if s.seam]
    gpu = sum(s.on_gpu for s in steps)
    lines = [f"{name}: {len(steps)} nodes ({gpu} on the GPU), {len(seams) + 1 if gpu else 0} segment(s), "
             f"{len(seams)} seam(s)"]
    lines += [f"  seam at {s.node.label!r} ({s.node.key}): {s.seam}" for s in seams]
    return "\n".join(lines)


class CudaKernel:
    compute_calls = 0  # of every CUDA fused node: a replayed CUDA graph makes none

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

    def compute(self, ctx) -> None:
        ffi, lib, check, rt = self.native.ffi, self.native.lib, self.native.check, self.rt
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
        values: dict[str, DeviceTensor] = dict(self.constants)
        for i, name in enumerate(self.input_names):
            rank = b.in_ranks[i]
            if rank >= 0:
                values[name] = DeviceTensor(int(ffi.cast("uintptr_t", b.in_data[i])),
                                            tuple(b.in_dims[i * MAX_RANK:i * MAX_RANK + rank]),
                                            ONNX_TO_NUMPY[b.in_types[i]])
        scratch = []
        try:
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
                    outs = [DeviceTensor(0, np.shape(v), np.asarray(v).dtype, np.asarray(v))
                            for v in fn(*[rt.to_host(values[n], stream) if n in values else None for n in node.inputs])]
                for name, t in zip(node.outputs, outs):
                    if t is not None:
                        scratch.append(t)  # freed after the run even when the node leaves it unnamed
                        if name:
                            values[name] = t
            results = [values[n] for n in self.output_names]
            for i, (t, dtype) in enumerate(zip(results, self.out_dtypes)):
                if t.dtype != dtype:
                    raise TypeError(f"output {self.output_names[i]!r}: kernel produced {t.dtype}, graph declares {dtype}")
                b.out_ranks[i] = len(t.shape)
                b.out_dims[i * MAX_RANK:i * MAX_RANK + len(t.shape)] = t.shape
            check(lib.seamless_get_outputs(ctx, len(results), b.out_ranks, b.out_dims, MAX_RANK, b.out_data))
            for i, name in enumerate(self.output_names):
                t = on_gpu_value(name)
                rt.copy(int(ffi.cast("uintptr_t", b.out_data[i])), t.ptr, t.nbytes, stream)
        finally:
            # back to the cache: later work on this stream is ordered after this run's kernels
            _release(rt, scratch, [values[n] for n in self.input_names if n in values], self.constants)


def _release(rt, scratch, inputs, constants):
    """Free what kernels allocated; aliases (same address as an input, a constant or an earlier
    value) are not allocations."""
    foreign = {t.ptr for t in inputs} | {t.ptr for t in constants.values()}
    freed = set()
    for t in scratch:
        if t.ptr and t.ptr not in foreign and t.ptr not in freed:
            freed.add(t.ptr)
            rt.free(t)
