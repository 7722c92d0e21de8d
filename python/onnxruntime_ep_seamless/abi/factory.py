"""OrtEpFactory: one per registered library; creates an EP per session."""
from __future__ import annotations

from .. import __version__
from ..runtime.options import OptionError, parse_options
from .ep import Ep

CPU_EP_NAME = "SeamlessCPUExecutionProvider"
HARDWARE_CPU = 0


class Factory:
    vendor = "onnxruntime-ep-seamless"
    version = __version__

    def __init__(self, registered_name: str):
        self.registered_name = registered_name
        self.ep_name = CPU_EP_NAME
        self.hardware_type = HARDWARE_CPU

    def create_ep(self, entries: dict[str, str], logger) -> Ep:
        # CreateEp failures make ORT fall back to CPU silently: keep bad options for Compile to report.
        try:
            options, error = parse_options(self.ep_name, entries), None
        except OptionError as exc:
            options, error = {}, exc
        return Ep(self, options, error, logger)
