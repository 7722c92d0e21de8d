"""The Python side of the ABI: the extern "Python" callbacks the C glue calls.

Each callback finds its object from a handle, calls one method and turns any exception
into an OrtStatus (ORT_FAIL, never ORT_EP_FAIL, which makes onnxruntime's Python wrapper
silently rebuild the session on its CPU EP). No ABI detail lives outside abi/.
"""
from __future__ import annotations

import os
import traceback
import warnings

ORT_FAIL = 1
ffi = lib = None          # set by attach(): the cffi embedding module's ffi and lib
_live: dict[int, tuple] = {}  # handle address -> (object, handle): what ORT holds, kept alive


def new_handle(obj):
    handle = ffi.new_handle(obj)
    _live[int(ffi.cast("uintptr_t", handle))] = (obj, handle)
    return handle


def from_handle(handle):
    return ffi.from_handle(handle)


def check(status) -> None:
    """Raise for a failed ORT call made through the C glue."""
    if status != ffi.NULL:
        message = ffi.string(lib.seamless_status_message(status)).decode("utf-8", "replace")
        lib.seamless_release_status(status)
        raise RuntimeError(message)


def error_status(exc: BaseException, prefix: str = ""):
    text = f"{prefix}{type(exc).__name__}: {exc}"
    if os.environ.get("SEAMLESS_TRACEBACK") == "1":
        text += "\n" + "".join(traceback.format_exception(exc))
    return lib.seamless_status(ORT_FAIL, text.encode("utf-8", "replace"))


def attach(ffi_, lib_) -> None:
    """Bind the callbacks to the embedding module (runs once, from its init code)."""
    global ffi, lib
    ffi, lib = ffi_, lib_
    # numpy warns on overflow, 0/0 etc.; ORT computes the same inf/nan silently. Ignore those
    # warnings only where our kernels and plans raise them (np.errstate per run costs ~1 us).
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"onnxruntime_ep_seamless\.")
    from ..runtime import parallel
    from .factory import Factory
    parallel.set_parallel_for(int(ffi.cast("uintptr_t", ffi.addressof(lib, "seamless_parallel_for"))))

    @ffi.def_extern()
    def py_ready():
        return 1

    @ffi.def_extern()
    def py_create_factories(registered_name, logger, factories, max_factories, num_factories):
        try:
            factory = Factory(ffi.string(registered_name).decode())
            factories[0] = lib.seamless_new_factory(new_handle(factory), factory.ep_name.encode(),
                                                    factory.vendor.encode(), factory.version.encode(),
                                                    factory.hardware_type)
            num_factories[0] = 1
            return ffi.NULL
        except Exception as exc:
            return error_status(exc, "onnxruntime-ep-seamless: ")

    @ffi.def_extern()
    def py_release_handle(handle):
        _live.pop(int(ffi.cast("uintptr_t", handle)), None)

    @ffi.def_extern()
    def py_create_ep(factory_handle, keys, values, n, logger, ep_handle):
        try:
            entries = {ffi.string(keys[i]).decode(): ffi.string(values[i]).decode() for i in range(n)}
            ep = from_handle(factory_handle).create_ep(entries, logger)
            ep_handle[0] = new_handle(ep)
            return ffi.NULL
        except Exception as exc:
            return error_status(exc, "onnxruntime-ep-seamless: creating the EP: ")

    @ffi.def_extern()
    def py_get_capability(ep_handle, graph, info):
        ep = from_handle(ep_handle)
        try:
            ep.get_capability(graph, info)
            return ffi.NULL
        except Exception as exc:  # ORT only logs this and leaves every node to other EPs
            return error_status(exc, f"{ep.name}: GetCapability: ")

    @ffi.def_extern()
    def py_compile(ep_handle, graph, fused_node, kernel_handle):
        ep = from_handle(ep_handle)
        try:
            kernel_handle[0] = new_handle(ep.compile(graph, fused_node))
            return ffi.NULL
        except Exception as exc:
            return error_status(exc, f"{ep.name}: Compile: ")

    @ffi.def_extern()
    def py_compute(kernel_handle, ctx):
        kernel = from_handle(kernel_handle)
        try:
            kernel.compute(ctx)
            return ffi.NULL
        except Exception as exc:
            return error_status(exc, f"{kernel.ep_name}: fused node {kernel.name!r}: ")
