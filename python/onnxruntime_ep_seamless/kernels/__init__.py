"""Kernels by family; `registry` maps ONNX nodes to them."""


def native_cpu_module():
    """(ffi, lib) of the compiled native CPU kernels, with a clear error when the build is missing."""
    try:
        from .. import _native_cpu
    except ImportError as exc:
        raise ImportError("onnxruntime_ep_seamless: native CPU kernels are not built "
                          "(reinstall with `pip install .`, or run `python ep_plugin/build_plugin.py` in a checkout)") from exc
    return _native_cpu.ffi, _native_cpu.lib
