"""The CUDA kernels' argument structs and codes, as native/cuda/args.h declares them (the .cu files and the C glue
include it; the _cuda_args module is its cffi build). Python fills the structs by field name, never by layout."""
import numpy as np

from .. import _cuda_args

ffi, lib = _cuda_args.ffi, _cuda_args.lib
MAX_DIMS = lib.SEAMLESS_MAX_DIMS


def pack(ctype: str, **fields) -> bytes:
    """The bytes of an args.h struct; fields not given are 0 (arrays: their missing tail), nested structs as dicts."""
    return _bytes(ctype, fields)


def struct_arg(ctype: str, **fields) -> tuple:
    """A launch argument (runtime/cuda.py CudaRuntime.launch) of an args.h struct."""
    return ("bytes", _bytes(ctype, fields))


def _bytes(ctype: str, fields: dict) -> bytes:
    pointer = _POINTERS.get(ctype)
    if pointer is None:
        pointer = _POINTERS[ctype] = ffi.typeof(ctype + "*")
    try:
        return ffi.buffer(ffi.new(pointer, fields))[:]
    except IndexError as exc:  # an array field given more values than it holds: more dims than the kernels take
        raise ValueError(f"{ctype}: {exc} (the CUDA kernels take up to {MAX_DIMS} dims)") from None


_POINTERS: dict = {}  # ctype -> its pointer type (ffi.typeof once: a run packs several structs a node)


def _numpy_dtype(ctype: str) -> np.dtype:
    """An args.h struct of scalar fields as a numpy structured dtype (for tables of them)."""
    t = ffi.typeof(ctype)
    return np.dtype({"names": [name for name, _ in t.fields],
                     "formats": [np.dtype(_SCALARS[f.type.cname]) for _, f in t.fields],
                     "offsets": [f.offset for _, f in t.fields], "itemsize": ffi.sizeof(t)})


_SCALARS = {"int32_t": np.int32, "int64_t": np.int64, "uint64_t": np.uint64, "float": np.float32}
STAGE_COPY = _numpy_dtype("StageCopy")  # a staging table's entry (shape.cu seamless_stage)
