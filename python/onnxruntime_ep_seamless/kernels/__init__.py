"""Kernels by family; `registry` maps ONNX nodes to them."""
import numpy as np


def c_order(array) -> np.ndarray:
    """A C-contiguous array of the same shape (np.ascontiguousarray would turn 0-d into 1-d)."""
    array = np.asarray(array)
    return array if array.flags.c_contiguous else array.copy()


def _native_cpu_module():
    """(ffi, lib) of the compiled native CPU kernels, with a clear error when the build is missing."""
    try:
        from .. import _native_cpu
    except ImportError as exc:
        raise ImportError("onnxruntime_ep_seamless: native CPU kernels are not built "
                          "(reinstall with `pip install .`, or run `python ep_plugin/build_plugin.py` in a checkout)") from exc
    return _native_cpu.ffi, _native_cpu.lib
