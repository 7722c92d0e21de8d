"""A compiled fused node: binds ORT's inputs as numpy views, runs the plan, writes outputs."""
from __future__ import annotations

import threading

import numpy as np

from ..graph.ir import ONNX_TO_NUMPY
from ..plan.planner import Plan, as_output
from . import bridge

MAX_RANK = 16


class CompiledKernel:
    def __init__(self, ep_name: str, graph, input_names: list[str], output_names: list[str]):
        self.ep_name = ep_name
        self.name = "+".join(sorted({n.op_type for n in graph.nodes}))[:80] if len(graph.nodes) > 1 else graph.nodes[0].label
        self.plan = Plan(graph, input_names, output_names, label=self.name)
        self.n_in, self.n_out = len(input_names), len(output_names)
        self.out_dtypes = []
        for name in output_names:
            dtype = graph.value(name).dtype
            if dtype is None:
                raise TypeError(f"output {name!r} has an element type the EP cannot produce")
            self.out_dtypes.append(dtype)
        self._tls = threading.local()  # per-thread C buffers: Compute may run on several threads at once

    def _buffers(self):
        b = getattr(self._tls, "b", None)
        if b is None:
            ffi = bridge.ffi
            b = self._tls.b = _Buffers(ffi, max(self.n_in, 1), max(self.n_out, 1))
        return b

    def compute(self, ctx) -> None:
        ffi, lib = bridge.ffi, bridge.lib
        b = self._buffers()
        bridge.check(lib.seamless_get_inputs(ctx, self.n_in, b.in_data, b.in_types, b.in_ranks, b.in_dims, MAX_RANK))
        args = []
        for i in range(self.n_in):
            rank = b.in_ranks[i]
            if rank < 0:
                args.append(None)
                continue
            dtype = ONNX_TO_NUMPY[b.in_types[i]]
            shape = tuple(b.in_dims_np[i, :rank].tolist())
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if nbytes:
                arr = np.frombuffer(ffi.buffer(b.in_data[i], nbytes), dtype).reshape(shape)
                arr.flags.writeable = False  # inputs are the caller's memory: never written
            else:
                arr = np.empty(shape, dtype)
            args.append(arr)
        results = self.plan.run(*args)
        keep = []
        for i, (value, dtype) in enumerate(zip(results, self.out_dtypes)):
            arr = as_output(value, dtype)
            if arr.ndim > MAX_RANK:
                raise ValueError(f"output rank {arr.ndim} exceeds {MAX_RANK}")
            keep.append(arr)
            b.out_ranks[i] = arr.ndim
            b.out_dims_np[i, :arr.ndim] = arr.shape
            b.out_nbytes[i] = arr.nbytes
            b.out_data[i] = ffi.from_buffer(arr) if arr.nbytes else ffi.NULL
        bridge.check(lib.seamless_set_outputs(ctx, self.n_out, b.out_data, b.out_ranks, b.out_dims, MAX_RANK,
                                              b.out_nbytes))


class _Buffers:
    def __init__(self, ffi, n_in: int, n_out: int):
        self.in_data = ffi.new("void*[]", n_in)
        self.in_types = ffi.new("int32_t[]", n_in)
        self.in_ranks = ffi.new("int32_t[]", n_in)
        self.in_dims = ffi.new("int64_t[]", n_in * MAX_RANK)
        self.in_dims_np = np.frombuffer(ffi.buffer(self.in_dims), np.int64).reshape(n_in, MAX_RANK)
        self.out_data = ffi.new("void*[]", n_out)
        self.out_ranks = ffi.new("int32_t[]", n_out)
        self.out_dims = ffi.new("int64_t[]", n_out * MAX_RANK)
        self.out_dims_np = np.frombuffer(ffi.buffer(self.out_dims), np.int64).reshape(n_out, MAX_RANK)
        self.out_nbytes = ffi.new("size_t[]", n_out)
