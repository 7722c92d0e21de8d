"""A compiled fused node: binds ORT's inputs as numpy views, runs the plan, writes outputs; records its native
programs (exec/program.py), with which the C runner answers later Computes of a binding without Python."""
from __future__ import annotations

import threading
import weakref

import numpy as np

from ..graph.ir import ONNX_TO_NUMPY, PACKED_BITS, STRING, pack, unpack
from ..graph.reader import read_runtime_value
from ..kernels.registry import NUMPY_MAX_RANK
from ..plan.planner import Plan, as_output
from ..runtime import parallel
from . import program as programs

MAX_RANK = NUMPY_MAX_RANK  # input/output ranks the C glue passes: as many as a numpy array holds
MAX_BINDINGS_SEEN = 256    # binding keys counted before the counts start over


_KERNELS: "weakref.WeakSet[CompiledKernel]" = weakref.WeakSet()


def live_kernels() -> list:
    """The compiled CPU partitions alive in this process (tools/bench.py's program profile reads their programs)."""
    return list(_KERNELS)


def host_array(ffi, data, nbytes: int, dtype: np.dtype, shape: tuple) -> np.ndarray:
    """An input ORT holds in host memory (data: a char* cdata), as a read-only view of it; sub-byte types (int4, ...)
    arrive packed and come back unpacked (a new array, one element a byte)."""
    if not nbytes:
        return np.empty(shape, dtype)
    if dtype in PACKED_BITS:
        return unpack(np.frombuffer(ffi.buffer(data, nbytes), np.uint8), dtype, shape)
    arr = np.frombuffer(ffi.buffer(data, nbytes), dtype).reshape(shape)
    arr.flags.writeable = False  # inputs are the caller's memory: never written
    return arr


class CompiledKernel:
    def __init__(self, native, ep_name: str, graph, input_names: list[str], output_names: list[str],
                 fusion: bool = True, native_program: bool = True, log=None):
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
        _KERNELS.add(self)
        # the C runner of this node's native programs (None: every run in Python, and why_python says why)
        self.native_runner = None
        self.by_value = programs.keyed_by_value(self.plan)  # inputs whose values join a binding's key
        self.why_python = (programs.why_not_native(self.plan, {self.plan.input_names[i] for i in self.by_value})
                           if native_program else "the native_program option is 0")
        self.log = log  # log(message): log_partition's report of why the node runs through Python
        if log and self.why_python:
            log(f"fused node {self.name!r} runs through Python: {self.why_python}")
        self.programs: dict[bytes, tuple] = {}   # binding key -> (runner slot, Program), oldest first
        self.seen: dict[bytes, int] = {}         # binding key -> sightings before it is recorded
        self.classes: dict[tuple, BindingClass] = {}  # the inputs' ranks and types -> what was seen of them
        self.families: list = []                 # (runner slot, programs.Family)
        self.recordings = 0
        self.programs_logged = False
        self._record_lock = threading.Lock()
        if self.why_python is None:
            ffi, lib = native.ffi, native.lib
            run = int(programs.native_cpu.ffi.cast("uintptr_t", programs.native_cpu.ffi.addressof(
                programs.native_cpu.lib, "seamless_program_run")))
            prefix = f"{ep_name}: fused node {self.name!r}: KernelError: ".encode("utf-8", "replace")
            self.native_runner = ffi.gc(lib.seamless_runner_new(self.n_in, self.n_out, ffi.cast("void*", run), prefix),
                                        lib.seamless_runner_free)
            if self.native_runner == ffi.NULL:
                raise MemoryError("out of host memory for the node's runner")
            for i in self.by_value:
                lib.seamless_runner_key_by_value(self.native_runner, i)

    def _buffers(self):
        b = getattr(self._tls, "b", None)
        if b is None:
            b = self._tls.b = Buffers(self.native.ffi, self.n_in, self.n_out)
        return b

    def _view(self, ctx, b, i: int):
        rank = b.in_ranks[i]
        if rank == -2:  # strings, a sequence, an optional: copied out whole, every run
            return self._read_whole(ctx, i)
        if rank < 0:
            return None  # absent optional input
        return host_array(self.native.ffi, b.in_data[i], b.in_nbytes[i], ONNX_TO_NUMPY[b.in_types[i]],
                          tuple(b.in_dims[i * MAX_RANK:i * MAX_RANK + rank]))

    def _read_whole(self, ctx, i: int):
        ffi, lib = self.native.ffi, self.native.lib
        out, size = ffi.new("char**"), ffi.new("size_t*")
        self.native.check(lib.seamless_read_input(ctx, i, out, size))
        try:
            return read_runtime_value(ffi.buffer(out[0], size[0])[:])
        finally:
            lib.seamless_free(out[0])

    def _write_strings(self, ctx, i: int, arr: np.ndarray) -> None:
        ffi = self.native.ffi
        items = [ffi.new("char[]", str(s).encode("utf-8", "surrogateescape")) for s in arr.reshape(-1)]
        self.native.check(self.native.lib.seamless_write_strings(
            ctx, i, ffi.new("int64_t[]", arr.shape or [0]), arr.ndim, ffi.new("char*[]", items), len(items)))

    def compute(self, ctx) -> None:
        ffi, lib, check = self.native.ffi, self.native.lib, self.native.check
        b = self._buffers()
        args = b.args
        if lib.seamless_get_inputs(ctx, self.n_in, b.in_data, b.in_nbytes, b.in_types, b.in_ranks, b.in_dims,
                                   MAX_RANK, b.changed, b.status):
            check(b.status[0])
            for i in range(self.n_in):
                if b.changed[i]:  # new memory, type or shape since this thread's last run
                    args[i] = self._view(ctx, b, i)
        key = self._binding_key(b) if self.why_python is None else None
        tls = parallel.state
        tls.context = ctx  # native kernels may use ORT's intra-op pool
        try:
            results = self._record(key, b, args) if key is not None else self.plan.run(*args)
            outputs = [as_output(v, t) for v, t in zip(results, self.out_dtypes)]
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
            if arr.dtype == STRING:  # ORT's strings are no flat bytes: it copies them in
                self._write_strings(ctx, i, arr)
                continue
            if self.packed_outputs and arr.dtype in PACKED_BITS:  # sub-byte types leave packed, as ORT holds them
                arr = pack(arr).reshape(-1)
                dst = np.frombuffer(ffi.buffer(ffi.cast("char*", b.out_data[i]), arr.nbytes), np.uint8)
            else:
                dst = np.frombuffer(ffi.buffer(ffi.cast("char*", b.out_data[i]), arr.nbytes),
                                    arr.dtype).reshape(arr.shape)
            np.copyto(dst, arr)


    def _binding_key(self, b) -> bytes | None:
        """The binding's key when it is due for recording, else None: seen RECORD_AFTER times, or new in a class
        (the inputs' ranks and types) already seen with other dims, while that class may still yield a family."""
        if any(b.in_ranks[i] > programs.native_cpu.lib.SEAMLESS_PROGRAM_RANK for i in range(self.n_in)):
            return None
        ffi, lib = self.native.ffi, self.native.lib
        if b.key is None:
            b.key = ffi.new("uint8_t[]", max(lib.seamless_runner_key_capacity(self.native_runner), 1))
        n = lib.seamless_runner_key(self.native_runner, b.in_dims, b.in_ranks, b.in_types, MAX_RANK, b.in_data,
                                    b.in_nbytes, b.key)
        if n == ffi.cast("size_t", -1):  # a value too large to key by: Python runs it
            return None
        key = bytes(ffi.buffer(b.key, n))
        if key in self.programs:  # recorded while this run waited (or the C runner declined it): Python
            return None
        if len(self.seen) > MAX_BINDINGS_SEEN:
            self.seen.clear()
        seen = self.seen[key] = self.seen.get(key, 0) + 1
        klass = self.classes.setdefault(binding_class(key, self.by_value), BindingClass())
        if seen == 1:
            klass.keys += 1
        return key if seen >= programs.RECORD_AFTER or klass.wants_recordings() else None

    def _record(self, key: bytes, b, args) -> list:
        with self._record_lock:
            if key in self.programs or self.why_python is not None:
                return self.plan.run(*args)
            self.recordings += 1
            if self.recordings > programs.MAX_RECORDINGS:  # shapes that never settle: recording would cost more
                self.why_python = f"more than {programs.MAX_RECORDINGS} bindings recorded: the input shapes keep changing"
                if self.log:
                    self.log(f"fused node {self.name!r} runs through Python from now on: {self.why_python}")
                return self.plan.run(*args)
            outputs, program, why_not = programs.record(self.plan, args, (self.n_in, self.n_out), self.by_value)
            if program is None:
                self.why_python = why_not  # one node without a native step: every binding would stop there
                if self.log:
                    self.log(f"fused node {self.name!r} runs through Python: {why_not}")
                return outputs
            ffi, lib = self.native.ffi, self.native.lib
            if len(self.programs) >= programs.MAX_BINDINGS:  # the oldest binding makes room
                old = next(iter(self.programs))
                lib.seamless_runner_remove(self.native_runner, self.programs.pop(old)[0])
            ranks = ffi.new("int32_t[]", max(self.n_out, 1))
            dims = ffi.new("int64_t[]", max(self.n_out, 1) * MAX_RANK)
            for j, arr in enumerate(outputs):
                ranks[j] = np.ndim(arr)
                dims[j * MAX_RANK:j * MAX_RANK + np.ndim(arr)] = np.shape(arr)
            slot = lib.seamless_runner_add(self.native_runner, key, len(key), ffi.cast("void*", program.address),
                                           ranks, dims, MAX_RANK)
            if slot < 0:
                raise MemoryError("out of host memory for a native program")
            self.programs[key] = (slot, program)
            if program.python_steps and self.log and not self.programs_logged:
                self.programs_logged = True
                self.log(f"fused node {self.name!r} runs as a native program with {len(program.python_steps)} Python "
                         f"step(s): {', '.join(sorted(set(program.python_steps)))}")
            klass = self.classes[binding_class(key, self.by_value)]
            if klass.wants_recordings():
                self._try_family(klass, key, program)
            return outputs

    def _try_family(self, klass, key: bytes, program) -> None:
        klass.recordings = (klass.recordings + [(np.frombuffer(key, np.int64).copy(),
                                                 program)])[-programs.FAMILY_RECORDINGS:]
        klass.tries += 1
        if len(klass.recordings) < programs.FAMILY_RECORDINGS or len(self.families) >= programs.MAX_FAMILIES:
            return
        try:
            family = programs.Family(klass.recordings)
        except programs.NotAffine:
            return
        lib, ffi = self.native.lib, self.native.ffi
        slot = lib.seamless_runner_add_family(self.native_runner, ffi.cast("void*", family.address))
        if slot < 0:
            raise MemoryError("out of host memory for a native program family")
        self.families.append((slot, family))
        klass.tries, klass.recordings = 0, []  # bindings beyond its guards' limit may make the next family


def binding_class(key: bytes, by_value=()) -> tuple:
    """The inputs' ranks and element types of a binding key (ep_plugin/cpu_runner.c seamless_runner_key), and the
    values of the inputs keyed by value (a family never spans two of them)."""
    words = np.frombuffer(key, np.int64)
    out, i = [], 0
    while i < len(words):
        rank, dtype = int(words[i]), int(words[i + 1])
        i += 2 + max(rank, 0)
        value = ()
        if len(out) in by_value:  # its byte count, then the bytes in words
            count = 1 + (int(words[i]) + 7) // 8
            value, i = tuple(int(w) for w in words[i:i + count]), i + count
        out.append((rank, dtype, *value))
    return tuple(out)


class BindingClass:
    """The bindings seen of one class, and the family derived from its recordings."""
    # recordings made in the hope of a family, before the class waits for repeated bindings
    MAX_TRIES = 2 * programs.FAMILY_RECORDINGS

    def __init__(self):
        self.keys = 0            # distinct bindings seen
        self.tries = 0
        self.recordings: list = []

    def wants_recordings(self) -> bool:
        # a binding of the class that reaches Python lies outside its families (the C runner answers the others)
        return self.keys >= 2 and self.tries < self.MAX_TRIES


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
        self.key = None  # a binding's key (exec/program.py), made on first use
