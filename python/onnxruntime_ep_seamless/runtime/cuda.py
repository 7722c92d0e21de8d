"""The CUDA variant's runtime: device tensors, the kernel module, launches, scratch memory.

All CUDA calls go through the C glue of the CUDA plugin library (driver API, loaded at run
time); kernels come from _kernels_cuda.fatbin, built from native/cuda/*.cu by nvcc.
"""
from __future__ import annotations

import bisect
import contextlib
import math
import os
import struct
import threading
from dataclasses import dataclass

import numpy as np

from ..graph.ir import ONNX_TO_NUMPY, PACKED_BITS, c_order, load_exotic_types, pack, unpack
from .cuda_args import MAX_DIMS, lib as codes, struct_arg

# seamless_cublas_gemm's operand types (ONNX element type codes) by numpy dtype; any other: float32 (1)
load_exotic_types()  # bfloat16's dtype, where ml_dtypes is installed
_GEMM_TYPES = {ONNX_TO_NUMPY[code]: code for code in (10, 11, 16) if code in ONNX_TO_NUMPY}
FATBIN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_kernels_cuda.fatbin")


class _CapturePool:
    """Blocks a capture's run freed, by size: take gives the smallest that holds n bytes and is at most BLOCK_REUSE
    times that (native/cuda/args.h, the C cache's rule: a 1B prompt's 16 MB values took its layers' 67 MB dequantised
    weights' blocks, so each layer's weights took new memory: 2.5 GB a 1024-token segment). `blocks`: every block
    that went through the pool, with its size."""

    def __init__(self):
        self.blocks: dict[int, int] = {}
        self.spare: list[tuple[int, int]] = []  # (size, address), sorted

    def put(self, ptr: int, nbytes: int) -> None:
        size = self.blocks.setdefault(ptr, nbytes)
        bisect.insort(self.spare, (size, ptr))

    def take(self, nbytes: int) -> int:
        i = bisect.bisect_left(self.spare, (nbytes, 0))
        return self.spare.pop(i)[1] if i < len(self.spare) and self.spare[i][0] <= codes.BLOCK_REUSE * nbytes else 0


@dataclass
class DeviceTensor:
    """A value of the CUDA executor: on the GPU (ptr), on the host (host: constants and small
    integer values computed there), or both."""
    ptr: int                 # device address, 0 when not (yet) on the GPU
    shape: tuple
    dtype: np.dtype
    host: np.ndarray | None = None
    # written before this run's first launch, which waits for all work before it (CudaRuntime.begin_run), and
    # not by a launch of the run: a kernel may read it before waiting for the kernel before (a run's inputs)
    settled: bool = False
    derived: dict | None = None  # a constant's other layouts on the GPU, made once by kernels (contrib._tiles)
    container: bool = False  # host holds a sequence (a list of arrays) or an empty optional (None): never uploaded
    # the allocation a view lies inside at an offset (a Split's piece): freed in its place, kept while the view lives
    base: "DeviceTensor | None" = None

    @classmethod
    def on_host(cls, value) -> "DeviceTensor":
        """A value known only on the host (an array is uploaded when a GPU kernel needs it); a sequence or an empty
        optional, which only the host kernels of the partition read, is held as it is."""
        if value is None or isinstance(value, list):
            return cls(0, (), np.dtype(object), value, container=True)
        array = np.asarray(value)
        return cls(0, array.shape, array.dtype, array)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Its bytes on the GPU: sub-byte types (int4, ...) packed, as ORT holds them."""
        bits = PACKED_BITS.get(self.dtype)
        return -(-self.size * bits // 8) if bits else self.size * self.dtype.itemsize


def _bytes(array: np.ndarray) -> np.ndarray:
    """A host array as the GPU holds it: sub-byte types packed (numpy keeps one element per byte)."""
    return pack(array) if array.dtype in PACKED_BITS else array


class CudaRuntime:
    """One GPU's kernels and scratch memory, shared by every compiled node on that GPU."""

    _instances: dict = {}
    _lock = threading.Lock()

    @classmethod
    def get(cls, native, ordinal: int) -> "CudaRuntime":
        with cls._lock:
            rt = cls._instances.get(ordinal)
            if rt is None:
                rt = cls._instances[ordinal] = cls(native, ordinal)
            return rt

    def __init__(self, native, ordinal: int):
        self.native, self.ordinal = native, ordinal
        self.ffi, self.lib = native.ffi, native.lib
        if not os.path.isfile(FATBIN):
            raise RuntimeError(f"the CUDA kernels were not built ({FATBIN} is missing): reinstall the package on a "
                               "machine with nvcc (CUDA 13) on PATH")
        with open(FATBIN, "rb") as f:
            self._image = self.ffi.new("char[]", f.read())  # the driver may keep referring to it
        module = self.ffi.new("void**")
        native.check(self.lib.seamless_cuda_load_module(ordinal, self._image, module))
        self._module = module[0]
        self._functions: dict[str, object] = {}
        # compute capability 9.0 and up: programmatic dependent launch (SEAMLESS_DEPENDENT_LAUNCH=0: never), TMA
        self.hopper = bool(self.lib.seamless_cuda_dependent_launch(ordinal))
        self.dependent = int(os.environ.get("SEAMLESS_DEPENDENT_LAUNCH", "1") != "0" and self.hopper)
        self.multiprocessors = int(self.lib.seamless_cuda_multiprocessors(ordinal))  # a wave's SMs (0: unknown)
        self.host_reads = 0  # GPU values read on the host (each waits for the stream): a steady state adds none
        self._counters: dict = {}  # stream -> [its counters, zeroed outside a capture] (see counters)
        self._barriers: set = set()  # streams whose next launch waits for all work before it (begin_run)
        self._plain: set = set()  # streams whose launches all do (an If branch's body being captured)
        self._parents: dict = {}  # a body's stream -> the stream of the capture that holds it
        self._layouts: dict = {}  # kernel argument kinds -> _ArgLayout
        self._shared: dict[str, int] = {}  # kernel -> the dynamic shared memory it was allowed (cuFuncSetAttribute)
        self._capture = threading.local()  # .pool: a _CapturePool while this thread captures a segment (capture_pool)

    def function(self, name: str):
        fn = self._functions.get(name)
        if fn is None:
            out = self.ffi.new("void**")
            self.native.check(self.lib.seamless_cuda_function(self._module, name.encode(), out))
            fn = self._functions[name] = out[0]
        return fn

    def alloc(self, shape, dtype, kept: bool = False) -> DeviceTensor:
        """kept: memory kept for good (never a capture's: capture_pool gives the graph what went through it)."""
        t = DeviceTensor(0, tuple(map(int, shape)), np.dtype(dtype))
        pool = None if kept else getattr(self._capture, "pool", None)
        if t.nbytes:
            t.ptr = pool.take(t.nbytes) if pool is not None else 0
            if not t.ptr:
                t.ptr = self.lib.seamless_cuda_alloc(self.ordinal, t.nbytes)
            if not t.ptr:
                raise MemoryError(f"SeamlessCUDAExecutionProvider: out of GPU memory for a tensor of shape {t.shape} "
                                  f"({t.dtype}, {t.nbytes} bytes): free GPU memory or run a smaller model or batch")
        return t

    def counters(self, n: int, stream) -> DeviceTensor:
        """n uint32 counters of this stream, zero whenever a kernel on it starts: a kernel that counts with them
        sets them back to zero before it ends (attention.cu gqa_decode, reduction.cu select_chunk; LinearArgMax's
        keys: matmul.cu's seamless_linear_picked, the kernel after its product). Kept for good: captured graphs
        refer to them. Made while a graph is captured, they are zeroed in the graph and again by the stream's next
        eager use."""
        key, capturing = self._stream_key(stream), bool(self.lib.seamless_capturing())
        key = self._parents.get(key, key)  # a branch body's: its segment's (they run in one graph, in order)
        with self._lock:
            entry = self._counters.get(key)
            if entry is None or entry[0].size < n:
                entry = self._counters[key] = [self.alloc((max(n, 1024),), np.uint32, kept=True), False]
                self.zero(entry[0], stream)
                entry[1] = not capturing
            elif not entry[1] and not capturing:
                self.zero(entry[0], stream)
                entry[1] = True
        return entry[0]

    def output(self, where, i: int, shape: tuple, dtype) -> DeviceTensor:
        """Memory for a kernel's output i: ORT's tensor for it where the plan offers one (`where`: the kernel's
        _output_buffer, registry.PLAN_FACTS), so that no copy follows the run; else new memory. The kernel
        must not free it."""
        return (where and where(i, shape, dtype)) or self.alloc(shape, dtype)

    def free(self, t: DeviceTensor) -> None:
        if t.ptr:
            pool = getattr(self._capture, "pool", None)
            if pool is not None:
                pool.put(t.ptr, t.nbytes)
            else:
                self.lib.seamless_cuda_free(self.ordinal, t.ptr)

    @contextlib.contextmanager
    def capture_pool(self):
        """While this thread captures a segment (or records a launch program): memory the run frees serves its later
        allocations, and at the block's end every block that went through the pool goes to the C glue, which keeps
        it with the graph (cuda_capture.c capture_retain). In stream order, as the cache reuses memory in an eager
        run; without it a segment kept every block its run freed (the 1B int4 shape's 2048-token prompt bucket 6.09
        GB, with it 1.45: tests/cuda/run_memory.py)."""
        pool = self._capture.pool = _CapturePool()
        try:
            yield
        finally:
            self._capture.pool = None
            for ptr in pool.blocks:
                self.lib.seamless_cuda_free(self.ordinal, ptr)

    @staticmethod
    def host(t: DeviceTensor) -> np.ndarray:
        if t.host is None:
            raise ValueError("a value computed on the GPU was needed on the host")
        return t.host

    def upload(self, array: np.ndarray) -> DeviceTensor:
        """A constant to the GPU, synchronously (at Compile); it keeps its host copy."""
        array = c_order(array)
        t = self.alloc(array.shape, array.dtype)
        t.host = array
        if t.nbytes:
            data = _bytes(array)
            self.native.check(self.lib.seamless_cuda_copy(t.ptr, self.address(data), t.nbytes, self.ffi.NULL))
            self.native.check(self.lib.seamless_cuda_sync(self.ffi.NULL))
        return t

    def device(self, t: DeviceTensor, stream) -> DeviceTensor:
        """t on the GPU (uploading a host value on the stream; the copy is staged at once)."""
        if t.ptr or t.nbytes == 0:
            return t
        host = c_order(t.host)
        d = self.alloc(t.shape, t.dtype)
        self.native.check(self.lib.seamless_cuda_upload(self.ordinal, d.ptr, self.ffi.from_buffer(_bytes(host)),
                                                        d.nbytes, stream))
        d.host = host
        return d

    def to_host(self, t: DeviceTensor, stream) -> np.ndarray:
        """t's value on the host; reading a GPU value waits for the stream (a host seam)."""
        if t.host is None and not t.container:
            if self.lib.seamless_capturing():
                raise RuntimeError(f"a GPU value of shape {t.shape} is needed on the host, which a CUDA graph cannot "
                                   "capture: run this model without enable_cuda_graph")
            packed = t.dtype in PACKED_BITS
            host = np.empty(t.nbytes if packed else t.shape, np.uint8 if packed else t.dtype)
            self.host_reads += 1
            if t.nbytes:
                self.native.check(self.lib.seamless_cuda_copy(self.address(host), t.ptr, t.nbytes, stream))
                self.native.check(self.lib.seamless_cuda_sync(stream))
            t.host = unpack(host, t.dtype, t.shape) if packed else host
        return t.host

    def gemm(self, stream, a: DeviceTensor, b: DeviceTensor, c: DeviceTensor, m: int, n: int, k: int,
             batch: int = 1, stride_a: int = 0, stride_b: int = 0, trans_a: bool = False, trans_b: bool = False,
             alpha: float = 1.0, bias: DeviceTensor | None = None):
        """Row-major c = alpha * a . b (+ bias, n values of c's type added to each row before c is rounded; batch
        1) through cuBLASLt: float32, float16 or bfloat16 with float32 accumulation (c: a's type, or float32),
        float64 throughout."""
        dtype = _GEMM_TYPES.get(a.dtype, 1)
        self.native.check(self.lib.seamless_cublas_gemm(
            self.ordinal, stream, dtype, int(trans_a), int(trans_b), m, n, k, a.ptr, stride_a, b.ptr, stride_b, c.ptr,
            m * n, batch, alpha, _GEMM_TYPES.get(c.dtype, 1), bias.ptr if bias is not None else 0))

    def strided_copy(self, stream, x: DeviceTensor, y: DeviceTensor, dims, src_strides, dst_strides,
                     src_offset: int = 0, dst_offset: int = 0) -> None:
        """y[dst_offset + c . dst_strides] = x[src_offset + c . src_strides] over the box `dims` (native/cuda/shape.cu):
        axes that are one run in both merged, then 16 bytes a thread where the rows and every offset line up."""
        if not len(src_strides) == len(dst_strides) == len(dims):
            raise ValueError(f"strided copy of dims {tuple(dims)} with strides {list(src_strides)}, {list(dst_strides)}")
        box = _merged_box(dims, src_strides, dst_strides)
        if len(box) > MAX_DIMS:
            raise ValueError(f"rank {len(box)} above the CUDA kernels' limit of {MAX_DIMS}")
        unit = size = x.dtype.itemsize
        if box and box[-1][1] == box[-1][2] == 1 and x.ptr % 16 == 0 and y.ptr % 16 == 0 and all(
                v * size % 16 == 0 for v in (box[-1][0], src_offset, dst_offset, *(s for _, s, _ in box[:-1]),
                                             *(d for _, _, d in box[:-1]))):
            unit, k = 16, 16 // size  # whole 16-byte units: each thread moves k values
            box = [(n, s // k, d // k) for n, s, d in box[:-1]] + [(box[-1][0] // k, 1, 1)]
            src_offset, dst_offset = src_offset // k, dst_offset // k
        dims = [n for n, _, _ in box] or [1]
        src = [s for _, s, _ in box] or [0]
        dst = [d for _, _, d in box] or [0]
        n = math.prod(dims)
        # every index below 2^30 (and the grid's stride beyond them): 32-bit arithmetic in the kernel
        reach = max(abs(src_offset) + sum((c - 1) * abs(s) for c, s in zip(dims, src)),
                    abs(dst_offset) + sum((c - 1) * abs(d) for c, d in zip(dims, dst)), n)
        strided = struct_arg("Strided", dims=dims, src_strides=src, dst_strides=dst, src_offset=int(src_offset),
                             dst_offset=int(dst_offset), rank=len(dims))
        self.launch(f"seamless_copy_{unit}", n, stream, ("int64", n), ("ptr", x.ptr), ("ptr", y.ptr), strided,
                    ("int", int(reach < 1 << 30)))

    def launch_rows(self, name: str, rows, stream, *args, shared: int = 0, threads: int = 256) -> None:
        """One block of `threads` threads per row (`shared` bytes of dynamic shared memory each); rows:
        a count, or (x, y) blocks."""
        if rows:
            self._launch(name, rows, threads, stream, args, shared)

    def stage(self, table: DeviceTensor, first: int, count: int, stream, largest: int = 0) -> None:
        """The staging copies of table entries [first, first + count) (native/cuda/shape.cu), with
        blocks enough for the `largest` copy's bytes (16 a thread per pass, up to 8 passes)."""
        if count:
            self.staging(table, first, count, largest, stream)

    def staging(self, table: DeviceTensor, first: int, count: int, largest: int, stream=None, prepare: bool = False):
        """stage()'s launch; with prepare, not launched but returned for the C glue (a captured segment's staging,
        the same every replay: ep_plugin/cuda_replay.c)."""
        entry = table.nbytes // table.shape[0]
        blocks = min(1024, max(16, -(-largest // (256 * 16 * 8))))
        return self._launch("seamless_stage", (blocks, count), 256, stream, [("ptr", table.ptr + first * entry)],
                            prepare=prepare)

    def zero(self, t: DeviceTensor, stream) -> None:
        if t.nbytes:
            self.native.check(self.lib.seamless_cuda_zero(t.ptr, t.nbytes, stream))

    def copy(self, dst: int, src: int, nbytes: int, stream) -> None:
        if nbytes:
            self.native.check(self.lib.seamless_cuda_copy(dst, src, nbytes, stream))

    def gpu_report(self, stream) -> int:
        """Where kernels on `stream` report a bad value (ep_plugin/cuda_exec.c), or 0."""
        return self.lib.seamless_gpu_report(stream)

    def check_tag(self, text: str, code: int) -> int:
        """The tag a report carries to fail the run with status `code` and `text` ("{value}": the value)."""
        return self.lib.seamless_gpu_check_tag(text.encode("utf-8", "replace"), code)

    def _stream_key(self, stream) -> int:
        """A stream (a cffi pointer) as a dictionary key: its address."""
        return int(self.ffi.cast("uintptr_t", stream))

    def begin_run(self, stream) -> None:
        """The next launch on `stream` is not a dependent launch: it starts once all work before it is done, and
        so does every later kernel, which may then read the run's inputs (DeviceTensor.settled) before waiting
        for the kernel before it."""
        self._barriers.add(self._stream_key(stream))

    def if_bodies(self, stream, cond: DeviceTensor) -> tuple:
        """While `stream` is captured: an If decided by `cond` (a bool on the GPU) as two conditional IF nodes
        (ep_plugin/cuda_capture.c) after a kernel that sets them from it; their bodies (then, else), which body_capture
        fills. The stream's next launch waits for both nodes."""
        return self._conditional(stream, 2, "seamless_if_branches", [("ptr", cond.ptr)])[:2]

    def loop_body(self, stream, m: DeviceTensor | None, cond: DeviceTensor | None, i: DeviceTensor,
                  carried: DeviceTensor) -> tuple:
        """While `stream` is captured: a Loop as a conditional WHILE node, after a kernel that zeroes the counter `i`
        (int64 on the GPU), copies the condition (None: true) into `carried` (the body's condition input) and says
        whether the first iteration runs (i < m, None: no limit); its body (for body_capture) and its handle, which
        loop_next sets at the body's end."""
        return self._conditional(stream, 1, "seamless_loop_start", [("ptr", m.ptr if m else 0),
                                                                    ("ptr", cond.ptr if cond else 0), ("ptr", i.ptr),
                                                                    ("ptr", carried.ptr)])

    def loop_next(self, stream, handle: int, m: DeviceTensor | None, cond: DeviceTensor, i: DeviceTensor,
                  carried: DeviceTensor) -> None:
        """At the end of a Loop's body: i + 1, the body's condition into `carried`, and whether the next iteration
        runs."""
        self._launch("seamless_loop_next", 1, 1, stream, [("ptr", m.ptr if m else 0), ("ptr", cond.ptr), ("ptr", i.ptr),
                                                          ("ptr", carried.ptr), ("ptr", handle)])

    def _conditional(self, stream, n: int, kernel: str, args: list) -> tuple:
        """n conditional nodes (two IF, or one WHILE) after `kernel` (args, then the handles), which sets them: their
        bodies, then their handles."""
        handles, bodies = self.ffi.new("uint64_t[2]"), self.ffi.new("void*[2]")
        self.native.check(self.lib.seamless_conditional_handles(stream, handles, n))
        self.begin_run(stream)  # plain launches around the nodes: no programmatic edge meets a conditional node
        self._launch(kernel, 1, 1, stream, args + [("ptr", handles[k]) for k in range(n)])
        self.native.check(self.lib.seamless_conditional_nodes(stream, handles, n, int(n == 1), bodies))
        self.begin_run(stream)
        return (*[bodies[k] for k in range(n)], *[int(handles[k]) for k in range(n)])

    @contextlib.contextmanager
    def body_capture(self, body, parent):
        """A stream whose work (plain launches) is captured into `body`, a conditional node's graph in the capture on
        stream `parent`, until the block ends."""
        out = self.ffi.new("void**")
        self.native.check(self.lib.seamless_body_begin(body, out))
        stream, key = out[0], self._stream_key(out[0])
        self._plain.add(key)
        parent_key = self._stream_key(parent)
        self._parents[key] = self._parents.get(parent_key, parent_key)
        failed = True
        try:
            yield stream
            failed = False
        finally:
            self._plain.discard(key)
            self._barriers.discard(key)
            self._parents.pop(key, None)
            status = self.lib.seamless_body_end(stream)
            if not failed:
                self.native.check(status)

    def launch(self, name: str, n: int, stream, *args) -> None:
        """A 1-D grid-stride kernel over n elements; args are ("int"|"int64"|"ptr"|"bytes", value)."""
        if n == 0:
            return
        block = 256
        self._launch(name, min((n + block - 1) // block, 65535), block, stream, args)

    def _launch(self, name: str, grid, block: int, stream, args, shared: int = 0, prepare: bool = False):
        """grid: blocks, or (x, y) blocks. prepare: not launched; its arguments to seamless_cuda_launch but for the
        stream and whether it is dependent returned instead (for cuda_replay.c's SeamlessSegment)."""
        gx, gy = grid if isinstance(grid, tuple) else (grid, 1)
        kinds = tuple(len(value) if kind == "bytes" else kind for kind, value in args)
        layout = self._layouts.get(kinds)
        if layout is None:
            layout = self._layouts[kinds] = _ArgLayout(kinds, self.ffi)
        fn = self.function(name)
        # without opting in, a kernel's static and dynamic shared memory share 48 KiB, and its static size is the
        # compiler's: so every kernel with dynamic shared memory opts in to its size (once, and again for more)
        if shared > self._shared.get(name, 0):
            self.native.check(self.lib.seamless_cuda_allow_shared(fn, shared))
            self._shared[name] = shared
        packed = layout.pack(*[value for _, value in args])
        if prepare:
            return fn, gx, gy, block, shared, packed, layout.offsets, len(kinds)
        dependent = self._dependent(stream) if self._barriers or self._plain else self.dependent
        self.native.check(self.lib.seamless_cuda_launch(fn, gx, gy, block, shared, stream, packed, len(packed),
                                                        layout.offsets, len(kinds), dependent))

    def _dependent(self, stream) -> int:
        """Whether a launch on `stream` now is a dependent launch: not the first after begin_run's barrier."""
        key = self._stream_key(stream)
        dependent = self.dependent and key not in self._barriers and key not in self._plain
        self._barriers.discard(key)
        return dependent

    def address(self, array: np.ndarray) -> int:
        """The host address of a C-contiguous array's data."""
        return int(self.ffi.cast("uintptr_t", self.ffi.from_buffer(array)))


def _merged_box(dims, src_strides, dst_strides) -> list[tuple[int, int, int]]:
    """A strided copy's box as (extent, source stride, destination stride) per axis, axes of extent 1 dropped and each
    axis folded into the one before it where the two are one run in both tensors (the same elements, in the same
    order)."""
    box = []
    for n, s, d in zip(dims, src_strides, dst_strides):
        if n == 1:
            continue
        if box and box[-1][1] == s * n and box[-1][2] == d * n:
            box[-1] = (box[-1][0] * n, s, d)
        else:
            box.append((n, s, d))
    return box


class _ArgLayout:
    """How one list of kernel argument kinds ("int", "int64", "ptr", "float", or a struct's byte count) is
    packed into one buffer for seamless_cuda_launch: each at its C alignment (a struct's at 8)."""

    CODES = {"int": "i", "int64": "q", "ptr": "Q", "float": "f"}

    def __init__(self, kinds: tuple, ffi):
        fmt, offsets, end = "<", [], 0
        for kind in kinds:
            code = f"{kind}s" if isinstance(kind, int) else self.CODES[kind]
            size = struct.calcsize("<" + code)
            pad = -end % (8 if isinstance(kind, int) else size)
            fmt, end = fmt + "x" * pad + code, end + pad
            offsets.append(end)
            end += size
        self.pack = struct.Struct(fmt).pack
        self.offsets = ffi.new("int32_t[]", offsets or [0])


def contiguous_strides(shape) -> list[int]:
    out, step = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        out[d] = step
        step *= shape[d]
    return out


def cublas_candidates() -> list[str]:
    """Where NVIDIA's wheel installs cuBLASLt: nvidia/cu13/lib or nvidia/cublas/lib under site-packages only.
    Never a sys.path entry such as "" (the current directory): a library found there would run as this process."""
    import site
    import sysconfig
    roots = [sysconfig.get_paths()[key] for key in ("purelib", "platlib")] + site.getsitepackages()
    if site.ENABLE_USER_SITE:
        roots.append(site.getusersitepackages())
    found = []
    for root in dict.fromkeys(os.path.abspath(r) for r in roots):
        for sub in ("nvidia/cu13/lib", "nvidia/cublas/lib"):
            found.append(os.path.join(root, sub, "libcublasLt.so.13"))
    return found


def preload_cublas() -> None:
    """Load cuBLASLt from NVIDIA's wheel if installed, so the C glue finds it by name."""
    import ctypes
    for lib in cublas_candidates():
        if os.path.isfile(lib):
            try:
                ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
                return
            except OSError:
                continue


def operand_strides(out_shape, shape) -> list[int]:
    """Element strides of an operand broadcast to out_shape (0 on broadcast axes)."""
    rank = len(out_shape)
    if rank > MAX_DIMS:
        raise ValueError(f"rank {rank} above the CUDA kernels' limit of {MAX_DIMS}")
    shape = (1,) * (rank - len(shape)) + tuple(shape)
    out, step = [0] * rank, 1
    for d in range(rank - 1, -1, -1):
        out[d] = 0 if shape[d] == 1 and out_shape[d] != 1 else step
        step *= shape[d]
    return out


def broadcast(out_shape, a_shape, b_shape) -> dict:
    """The fields of args.h's Broadcast for operands of these shapes (numpy rules)."""
    return {"dims": list(out_shape), "a_strides": operand_strides(out_shape, a_shape),
            "b_strides": operand_strides(out_shape, b_shape), "rank": len(out_shape)}
