"""A compiled fused node: binds ORT's inputs as numpy views, runs the plan, writes outputs."""
from __future__ import annotations

import threading

import numpy as np

from ..graph.ir import ONNX_TO_NUMPY, PACKED_BITS, pack, unpack
from ..kernels.registry import NUMPY_MAX_RANK
from ..plan.planner import Plan, as_output
from ..runtime import parallel

MAX_RANK = NUMPY_MAX_RANK  # input/output ranks the C glue passes: as many as a numpy array holds


class CompiledKernel:
    def __init__(self, native, ep_name: str, graph, input_names: list[str], output_names: list[str],
                 fusion: bool = True):
        self.native = native
        self.ep_name = ep_name
        self.name = "+".join(sorted({n.op_type for n in graph.nodes}))[:80] if len(graph.nodes) > 1 else graph.nodes[0].label
        self.plan = Plan(graph, input_names, output_names, label=self.name, fusion=fusion)
        self.n_in, self.n_out = len(input_names), len(output_names)
        self.out_dtypes = []
        for name in output_names:
            dtype = graph.value(name).dtype
            if dtype is None:
                raise TypeError(f"output {name!r} has an element type the EP cannot produce")
            self.out_dtypes.append(dtype)
        self.packed_outputs = any(t in PACKED_BITS for t in self.out_dtypes)
        self._tls = threading.local()  # per-thread C buffers: Compute may run on several threads at once

    def _buffers(self):
        b = getattr(self._tls, "b", None)
        if b is None:
            b = self._tls.b = Buffers(self.native.ffi, self.n_in, self.n_out)
        return b

    def _view(self, b, i: int):
        rank = b.in_ranks[i]
        if rank < 0:
            return None  # absent optional input
        dtype = ONNX_TO_NUMPY[b.in_types[i]]
        shape = tuple(b.in_dims[i * MAX_RANK:i * MAX_RANK + rank])
        nbytes = b.in_nbytes[i]
        if not nbytes:
            return np.empty(shape, dtype)
        if dtype in PACKED_BITS:  # sub-byte types (int4, ...) arrive packed: one element per byte for numpy
            return unpack(np.frombuffer(self.native.ffi.buffer(b.in_data[i], nbytes), np.uint8), dtype, shape)
        arr = np.frombuffer(self.native.ffi.buffer(b.in_data[i], nbytes), dtype).reshape(shape)
        arr.flags.writeable = False  # inputs are the caller's memory: never written
        return arr

    def compute(self, ctx) -> None:
        ffi, lib, check = self.native.ffi, self.native.lib, self.native.check
        b = self._buffers()
        args = b.args
        if lib.seamless_get_inputs(ctx, self.n_in, b.in_data, b.in_nbytes, b.in_types, b.in_ranks, b.in_dims,
                                   MAX_RANK, b.changed, b.status):
            check(b.status[0])
            for i in range(self.n_in):
                if b.changed[i]:  # new memory, type or shape since this thread's last run
                    args[i] = self._view(b, i)
        tls = parallel.state
        tls.context = ctx  # native kernels may use ORT's intra-op pool
        try:
            outputs = [as_output(v, t) for v, t in zip(self.plan.run(*args), self.out_dtypes)]
        finally:
            tls.context = None
        for i, arr in enumerate(outputs):
            ndim = arr.ndim
            if ndim > MAX_RANK:
                raise ValueError(f"output rank {ndim} exceeds {MAX_RANK}")
            b.out_ranks[i] = ndim
            b.out_dims[i * MAX_RANK:i * MAX_RANK + ndim] = arr.shape
        # ORT allocates the outputs, the results are copied straight into them: a view (Expand, Transpose,
        # Slice) is never materialised in between
        check(lib.seamless_get_outputs(ctx, self.n_out, b.out_ranks, b.out_dims, MAX_RANK, b.out_data))
        for i, arr in enumerate(outputs):
            if not arr.size or b.out_data[i] == ffi.NULL:
                continue
            if self.packed_outputs and arr.dtype in PACKED_BITS:  # sub-byte types leave packed, as ORT holds them
                arr = pack(arr).reshape(-1)
                dst = np.frombuffer(ffi.buffer(ffi.cast("char*", b.out_data[i]), arr.nbytes), np.uint8)
            else:
                dst = np.frombuffer(ffi.buffer(ffi.cast("char*", b.out_data[i]), arr.nbytes),
                                    arr.dtype).reshape(arr.shape)
            np.copyto(dst, arr)


class Buffers:
    def __init__(self, ffi, n_in: int, n_out: int):
        self.args = [None] * n_in        # input views of the last run on this thread
        n_in, n_out = max(n_in, 1), max(n_out, 1)  # C arrays of at least one element
        self.in_data = ffi.new("void*[]", n_in)
        self.in_nbytes = ffi.new("size_t[]", n_in)
        self.in_types = ffi.new("int32_t[]", n_in)
        self.in_ranks = ffi.new("int32_t[]", n_in)
        self.in_dims = ffi.new("int64_t[]", n_in * MAX_RANK)
        self.in_ranks[0:n_in] = [-2] * n_in  # "never seen": the first run builds every view
        self.changed = ffi.new("uint8_t[]", n_in)
        self.status = ffi.new("OrtStatus**")
        self.out_data = ffi.new("void*[]", n_out)
        self.out_ranks = ffi.new("int32_t[]", n_out)
        self.out_dims = ffi.new("int64_t[]", n_out * MAX_RANK)
