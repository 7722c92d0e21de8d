"""What the executors use of the C glue: the plugin libraries loaded in this process, and ORT's log levels.

abi/bridge.attach fills NATIVES (variant -> abi.bridge.Native) when ORT loads a library.
"""
NATIVES: dict = {}
LOG_WARNING, LOG_ERROR = 2, 3  # OrtLoggingLevel
