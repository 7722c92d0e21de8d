"""numpy's data allocator while our EP runs Python: native/cpu/numpy_memory.c's plain malloc, set for the calling
context only (numpy keeps its handler in a context variable) and put back when the call returns, so the
application's own arrays keep numpy's default.

Why: numpy's default allocator advises huge pages for arrays of 4 MB and more, and where the kernel's THP setting
is the usual defrag=madvise each such fresh array waits for 2 MB pages to be found and zeroed. Our Python runs
(a new binding, a recording run) and Compile make many large arrays; stock ORT's allocator gives no such advice.
Measured on a VM (the Qwen2.5-0.5B-shaped int4 decoder, a 400-token prompt, 1 thread): session creation 1.36 ->
0.57 s, the first run 5.9 -> 3.8 s, the recording run 8.9 -> 6.0 s (stock: 0.7 s, 3.6 s a run).

numpy's C API is reached through its `_ARRAY_API` capsule (the table `import_array` reads): PyDataMem_SetHandler is
entry 304 since numpy 1.22; tests/abi/test_numpy_memory.py checks the index and the handler's layout against the
installed numpy's headers.
"""
from __future__ import annotations

import ctypes

import numpy as np

SET_HANDLER_SLOT = 304  # PyDataMem_SetHandler in numpy's C API table (numpy >= 1.22)
CAPSULE_NAME = b"mem_handler"  # the name numpy asks of a handler's capsule

_set_handler = _capsule = None
_unbuilt = False  # no native CPU module: numpy's own allocator (the kernels say what is missing)


def _multiarray():
    core = getattr(np, "_core", None) or np.core  # numpy 2 / numpy 1
    return core._multiarray_umath


def _bind() -> None:
    global _set_handler, _capsule, _unbuilt
    try:
        from .. import _native_cpu
    except ImportError:
        _unbuilt = True
        return
    ffi, lib = _native_cpu.ffi, _native_cpu.lib
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    table = get_pointer(_multiarray()._ARRAY_API, None)
    slot = ctypes.c_void_p.from_address(table + SET_HANDLER_SLOT * ctypes.sizeof(ctypes.c_void_p)).value
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype, new_capsule.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    capsule = new_capsule(int(ffi.cast("uintptr_t", lib.seamless_numpy_handler())), CAPSULE_NAME, None)
    _set_handler = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object)(slot)
    _capsule = capsule


def plain(fn, *args):
    """fn(*args) with numpy's arrays from our handler (native/cpu/numpy_memory.c); the caller's handler after."""
    if _set_handler is None and not _unbuilt:
        _bind()
    if _set_handler is None:
        return fn(*args)
    previous = _set_handler(_capsule)
    try:
        return fn(*args)
    finally:
        _set_handler(previous)


def handler_name(array=None) -> str:
    """The name of the handler numpy allocates with now (array given: the one that allocated it)."""
    return _multiarray().get_handler_name(array) if array is not None else _multiarray().get_handler_name()
