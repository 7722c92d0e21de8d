"""The thread pool native kernels may use: ORT's intra-op pool of the node being computed.

Compute records (parallel_for address, kernel context address) for its thread; native
kernels read it. Outside a Compute (kernels called directly) both are 0: run serially.
"""
import threading

_state = threading.local()
_parallel_for = 0  # address of the C glue's seamless_parallel_for, set when the EP loads


def set_parallel_for(address: int) -> None:
    global _parallel_for
    _parallel_for = address


def enter(context_address: int) -> None:
    _state.context = context_address


def current() -> tuple[int, int]:
    """(parallel_for, context) for this thread, or (0, 0)."""
    ctx = getattr(_state, "context", 0)
    return (_parallel_for, ctx) if ctx else (0, 0)
