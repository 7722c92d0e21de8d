"""CUDA kernels, one module per op family; each is a host function that launches device code.

A CUDA kernel function takes the runtime and the stream first, then DeviceTensors (None for an
absent optional input), ONNX attributes as keyword-only parameters; it returns a tuple of
DeviceTensors it allocated with rt.alloc (or aliases of its inputs for metadata-only ops).
"""
import importlib
import pkgutil

from ...graph.ir import load_exotic_types

load_exotic_types()  # the CUDA kernels' tables name bfloat16 (and MOVABLE the 8-bit floats) when they are imported


def load_all():
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
