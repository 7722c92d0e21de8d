"""The Python side of the ABI: the extern "Python" callbacks the C glue calls.

Each plugin library (one per variant: cpu, cuda) has its own cffi embedding module; attach()
binds the callbacks to one of them and wraps its ffi/lib in a Native object that the
factory, EPs and kernels of that variant carry. Each callback finds its object from a handle,
calls one method and turns any exception into an OrtStatus (ORT_FAIL, or the code a kernel check gives,
kernels/checks.py; never ORT_EP_FAIL,
which makes onnxruntime's Python wrapper silently rebuild the session on its CPU EP).
No ABI detail lives outside abi/.
"""
from __future__ import annotations

import traceback
import warnings

from ..kernels.checks import status_code
from ..runtime.native import NATIVES
from ..runtime.numpy_memory import plain
from ..runtime.options import traceback_wanted

_live: dict[int, tuple] = {}  # handle address -> (object, handle): what ORT holds, kept alive


class Native:
    """One plugin library's cffi module: its ffi, its lib (the C glue) and its variant."""

    def __init__(self, ffi, lib, variant: str):
        self.ffi, self.lib, self.variant = ffi, lib, variant

    def new_handle(self, obj):
        handle = self.ffi.new_handle(obj)
        _live[int(self.ffi.cast("uintptr_t", handle))] = (obj, handle)
        return handle

    def check(self, status) -> None:
        """Raise for a failed ORT call made through the C glue (its status code kept for the EP's own status)."""
        if status != self.ffi.NULL:
            message = self.ffi.string(self.lib.seamless_status_message(status)).decode("utf-8", "replace")
            code = self.lib.seamless_status_code(status)
            self.lib.seamless_release_status(status)
            raise StatusError(message, code)

    def error_status(self, exc: BaseException, prefix: str = ""):
        text = f"{prefix}{type(exc).__name__}: {exc}"
        if traceback_wanted():
            text += "\n" + "".join(traceback.format_exception(exc))
        return self.lib.seamless_status(status_code(exc), text.encode("utf-8", "replace"))


class StatusError(RuntimeError):
    """A failed status from the C glue; status_code: its OrtErrorCode (checks.status_code reads it)."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.status_code = code


def live_eps(variant: str, registered_name: str) -> int:
    """How many EPs (one per session) ORT holds that the factory of this registration made (a factory
    ORT has released, and its EPs, no longer count)."""
    from .ep import Ep
    from .factory import Factory
    objects = [obj for obj, _ in list(_live.values())]
    factories = {id(f) for f in objects if isinstance(f, Factory) and f.native.variant == variant
                 and f.registered_name == registered_name}
    return sum(isinstance(ep, Ep) and id(ep.factory) in factories for ep in objects)


def attach(ffi, lib, variant: str = "cpu") -> None:
    """Bind the callbacks to one embedding module (runs once per module, from its init code)."""
    native = NATIVES[variant] = Native(ffi, lib, variant)
    # numpy warns on overflow, 0/0 etc.; ORT computes the same inf/nan silently. Ignore those
    # warnings only where our kernels and plans raise them (np.errstate per run costs ~1 us).
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"onnxruntime_ep_seamless\.")
    from ..runtime import parallel
    from .factory import Factory
    if variant == "cpu":
        parallel.set_parallel_for(int(ffi.cast("uintptr_t", ffi.addressof(lib, "seamless_parallel_for"))))
    else:  # before ORT asks for devices: cuBLAS from NVIDIA's wheel, if installed
        from ..runtime.cuda import preload_cublas
        preload_cublas()
    from_handle = ffi.from_handle
    live = _live  # module globals may already be None when ORT releases objects at interpreter exit

    @ffi.def_extern()
    def py_ready():
        return 1

    @ffi.def_extern()
    def py_create_factories(registered_name, logger, factories, max_factories, num_factories):
        try:
            factory = Factory(native, ffi.string(registered_name).decode())
            factories[0] = lib.seamless_new_factory(native.new_handle(factory), factory.ep_name.encode(),
                                                    factory.vendor.encode(), factory.version.encode(),
                                                    factory.hardware_type)
            num_factories[0] = 1
            return ffi.NULL
        except Exception as exc:
            return native.error_status(exc, "onnxruntime-ep-seamless: ")

    @ffi.def_extern()
    def py_release_handle(handle):
        live.pop(int(ffi.cast("uintptr_t", handle)), None)

    @ffi.def_extern()
    def py_create_ep(factory_handle, keys, values, n, device_ordinal, logger, ep_handle, graph_capture):
        try:
            entries = {ffi.string(keys[i]).decode(): ffi.string(values[i]).decode() for i in range(n)}
            ep = from_handle(factory_handle).create_ep(entries, device_ordinal, logger)
            graph_capture[0] = int(bool(ep.options.get("enable_cuda_graph")) and ep.option_error is None)
            ep_handle[0] = native.new_handle(ep)
            return ffi.NULL
        except Exception as exc:
            return native.error_status(exc, "onnxruntime-ep-seamless: creating the EP: ")

    @ffi.def_extern()
    def py_get_capability(ep_handle, graph, info):
        ep = from_handle(ep_handle)
        try:
            plain(ep.get_capability, graph, info)
            return ffi.NULL
        except Exception as exc:  # ORT only logs this and leaves every node to other EPs
            return native.error_status(exc, f"{ep.name}: GetCapability: ")

    @ffi.def_extern()
    def py_compile(ep_handle, graph, fused_node, kernel_handle, native_runner):
        ep = from_handle(ep_handle)
        try:
            kernel = plain(ep.compile, graph, fused_node)
            kernel_handle[0] = native.new_handle(kernel)
            # what answers Computes in C: the CPU kernel's runner, the CUDA kernel's replayer of captured bindings
            native_runner[0] = getattr(kernel, "native_runner", None) or ffi.NULL
            return ffi.NULL
        except Exception as exc:
            return native.error_status(exc, f"{ep.name}: Compile: ")

    @ffi.def_extern()
    def py_custom_ops(factory_handle, factory):
        try:
            from_handle(factory_handle).custom_ops(factory)
            return ffi.NULL
        except Exception as exc:
            return native.error_status(exc, "onnxruntime-ep-seamless: custom-op domains: ")

    @ffi.def_extern()
    def py_infer_shapes(factory_handle, op, n, types, ranks, dims, max_rank, n_out, out_types, out_ranks, out_dims):
        try:
            shapes = [None if ranks[i] < 0 else tuple(dims[i * max_rank + d] for d in range(ranks[i]))
                      for i in range(n)]
            found = from_handle(factory_handle).infer_shapes(op, [types[i] for i in range(n)], shapes)
            if found is None:
                return 0
            for j, (elem_type, shape) in enumerate(found[:n_out]):
                out_types[j], out_ranks[j] = elem_type, len(shape)
                for d, value in enumerate(shape[:max_rank]):
                    out_dims[j * max_rank + d] = value
            return 1
        except Exception:  # ORT goes on without the shapes; the session's checks report a bad rule
            return 0

    @ffi.def_extern()
    def py_compute(kernel_handle, ctx):
        kernel = from_handle(kernel_handle)
        try:
            plain(kernel.compute, ctx)
            return ffi.NULL
        except Exception as exc:
            return native.error_status(exc, f"{kernel.ep_name}: fused node {kernel.name!r}: ")
