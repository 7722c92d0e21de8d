"""The CUDA variant's runtime: device tensors, the kernel module, launches, scratch memory.

All CUDA calls go through the C glue of the CUDA plugin library (driver API, loaded at run
time); kernels come from _kernels_cuda.fatbin, built from native/cuda/*.cu by nvcc.
"""
from __future__ import annotations

import os
import struct
import threading
from dataclasses import dataclass

import numpy as np

FATBIN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_kernels_cuda.fatbin")
MAX_DIMS = 8  # native/cuda/elementwise.cu SEAMLESS_MAX_DIMS


@dataclass
class DeviceTensor:
    ptr: int                 # device address
    shape: tuple
    dtype: np.dtype
    host: np.ndarray | None = None  # the value on the host too, for constants

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize


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

    def function(self, name: str):
        fn = self._functions.get(name)
        if fn is None:
            out = self.ffi.new("void**")
            self.native.check(self.lib.seamless_cuda_function(self._module, name.encode(), out))
            fn = self._functions[name] = out[0]
        return fn

    def alloc(self, shape, dtype) -> DeviceTensor:
        t = DeviceTensor(0, tuple(int(d) for d in shape), np.dtype(dtype))
        if t.nbytes:
            out = self.ffi.new("void**")
            self.native.check(self.lib.seamless_cuda_alloc(self.ordinal, t.nbytes, out))
            t.ptr = int(self.ffi.cast("uintptr_t", out[0]))
        return t

    def free(self, t: DeviceTensor) -> None:
        if t.ptr:
            self.lib.seamless_cuda_free(self.ordinal, self.ffi.cast("void*", t.ptr))

    @staticmethod
    def host(t: DeviceTensor) -> np.ndarray:
        if t.host is None:
            raise ValueError("a value computed on the GPU was needed on the host")
        return t.host

    def upload(self, array: np.ndarray) -> DeviceTensor:
        """A constant to the GPU, synchronously (at Compile); it keeps its host copy."""
        array = np.ascontiguousarray(array)
        t = self.alloc(array.shape, array.dtype)
        t.host = array
        if t.nbytes:
            self.native.check(self.lib.seamless_cuda_copy(self.ffi.cast("void*", t.ptr), self.ffi.from_buffer(array),
                                                          t.nbytes, self.ffi.NULL))
            self.native.check(self.lib.seamless_cuda_sync(self.ffi.NULL))
        return t

    def copy(self, dst: int, src: int, nbytes: int, stream) -> None:
        if nbytes:
            self.native.check(self.lib.seamless_cuda_copy(self.ffi.cast("void*", dst), self.ffi.cast("void*", src),
                                                          nbytes, stream))

    def launch(self, name: str, n: int, stream, *args) -> None:
        """A 1-D grid-stride kernel over n elements; args are ("int"|"int64"|"ptr"|"bytes", value)."""
        if n == 0:
            return
        ffi = self.ffi
        keep = []
        for kind, value in args:
            if kind == "int":
                keep.append(ffi.new("int32_t*", value))
            elif kind == "int64":
                keep.append(ffi.new("int64_t*", value))
            elif kind == "ptr":
                keep.append(ffi.new("void**", ffi.cast("void*", value)))
            else:
                keep.append(ffi.new("char[]", value))
        params = ffi.new("void*[]", [ffi.cast("void*", k) for k in keep])
        block = 256
        grid = min((n + block - 1) // block, 65535)
        self.native.check(self.lib.seamless_cuda_launch(self.function(name), grid, 1, 1, block, 1, 1, 0, stream, params))


def broadcast_struct(out_shape, a_shape, b_shape) -> bytes:
    """native/cuda/elementwise.cu's Broadcast for operands of these shapes (numpy rules)."""
    rank = len(out_shape)
    if rank > MAX_DIMS:
        raise ValueError(f"rank {rank} above the CUDA kernels' limit of {MAX_DIMS}")

    def strides(shape):
        shape = (1,) * (rank - len(shape)) + tuple(shape)
        out, step = [0] * rank, 1
        for d in range(rank - 1, -1, -1):
            out[d] = 0 if shape[d] == 1 and out_shape[d] != 1 else step
            step *= shape[d]
        return out

    pad = [0] * (MAX_DIMS - rank)
    return struct.pack(f"<{3 * MAX_DIMS}qi4x", *(list(out_shape) + pad), *(strides(a_shape) + pad),
                       *(strides(b_shape) + pad), rank)
