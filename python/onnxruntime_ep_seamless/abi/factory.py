"""OrtEpFactory: one per registered library; creates an EP per session."""
from __future__ import annotations

from .. import __version__
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

    def create_ep(self, entries: dict[str, str], device_ordinal: int, logger) -> Ep:
        # CreateEp failures make ORT fall back to CPU silently: keep bad options for Compile to report.
        try:
            options, error = parse_options(self.ep_name, entries), None
        except OptionError as exc:
            options, error = {}, exc
        return Ep(self, options, error, logger, device_ordinal)
