"""The thread pool native kernels may use: ORT's intra-op pool of the node being computed.

Compute sets `state.context` (the OrtKernelContext pointer, a cdata) for its thread while its
plan runs; native kernels read it with current(). Outside a Compute (kernels called directly)
it is None: run serially.
"""
import threading

state = threading.local()
_parallel_for = 0  # address of the C glue's seamless_parallel_for, set when the EP loads


def set_parallel_for(address: int) -> None:
    global _parallel_for
    _parallel_for = address


def current():
    """(parallel_for address, context pointer) for this thread, or (0, 0)."""
    ctx = getattr(state, "context", None)
    return (_parallel_for, ctx) if ctx is not None else (0, 0)
