"""OrtEpFactory: one per registered library; creates an EP per session."""
from __future__ import annotations

from .. import __version__
from ..graph.ir import NUMPY_TO_ONNX
from ..kernels import user as user_kernels
from ..runtime.options import OptionError, parse_options
from .ep import Ep

EP_NAMES = {"cpu": "SeamlessCPUExecutionProvider", "cuda": "SeamlessCUDAExecutionProvider"}
HARDWARE_TYPES = {"cpu": 0, "cuda": 1}  # OrtHardwareDeviceType CPU, GPU


class Factory:
    vendor = "onnxruntime-ep-seamless"
    version = __version__

    def __init__(self, native, registered_name: str):
        self.native = native
        self.registered_name = registered_name
        self.ep_name = EP_NAMES[native.variant]
        self.hardware_type = HARDWARE_TYPES[native.variant]
        self.custom_changes = 0  # user_kernels.changes() when the C factory last got the custom ops
        self.custom_kernels: list = []  # every custom op handed to the C factory, by id

    def custom_ops(self, factory_ptr) -> None:
        """Hand the C factory the schemas of the user's custom ops (kernels/user.py) when they changed since it
        last asked: ORT reads them when it appends the EP to session options. Those with a kernel for this EP."""
        if self.custom_changes == user_kernels.changes():
            return
        ffi, ops = self.native.ffi, user_kernels.custom_ops(self.native.variant)
        ids = list(range(len(self.custom_kernels), len(self.custom_kernels) + len(ops)))
        self.custom_kernels += ops  # what the C ops' ids name (py_infer_shapes), kept for the ORT sessions using them
        text = [ffi.new("char[]", s.encode()) for k in ops for s in (k.domain, k.op_type)]
        types = [NUMPY_TO_ONNX[t] if t is not None else 0 for k in ops for t in k.inputs + k.outputs]
        self.native.check(self.native.lib.seamless_set_custom_ops(
            factory_ptr, len(ops), ffi.new("char*[]", text[0::2]), ffi.new("char*[]", text[1::2]),
            ffi.new("int32_t[]", [k.since for k in ops]), ffi.new("int32_t[]", [k.until for k in ops]),
            ffi.new("int32_t[]", [len(k.inputs) for k in ops]),
            ffi.new("int32_t[]", [len(k.inputs) - k.optional_inputs for k in ops]),
            ffi.new("int32_t[]", [len(k.outputs) for k in ops]), ffi.new("int32_t[]", types or [0]),
            ffi.new("int32_t[]", ids or [0]), ffi.new("int32_t[]", [int(k.infers_shapes) for k in ops] or [0])))
        self.custom_changes = user_kernels.changes()

    def infer_shapes(self, op: int, input_types: list, input_shapes: list) -> list | None:
        """ORT's shape inference of a custom op's node (glue.c custom_op_infer): its outputs' (element type, shape)
        from the user's shape rule, or None where it cannot answer."""
        return user_kernels.infer_shapes(self.custom_kernels[op], input_types, input_shapes)

    def create_ep(self, entries: dict[str, str], device_ordinal: int, logger) -> Ep:
        # CreateEp failures make ORT fall back to CPU silently: keep bad options for Compile to report.
        try:
            options, error = parse_options(self.ep_name, entries), None
        except OptionError as exc:
            options, error = {}, exc
        return Ep(self, options, error, logger, device_ordinal)
