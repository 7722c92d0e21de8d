"""Run-time checks shared by the kernels (CPU and CUDA), with stock ORT's outcomes.

A check raises before any kernel touches memory. Its exception's `status_code` is the OrtErrorCode
the EP returns (abi/bridge.py): InvalidArgument where stock ORT's CPU kernel answers INVALID_ARGUMENT;
any other exception is ORT_FAIL, as stock's failed enforcements are.
"""
from __future__ import annotations

ORT_FAIL, ORT_INVALID_ARGUMENT = 1, 2


class InvalidArgument(ValueError):
    """The input is at fault, and stock ORT says INVALID_ARGUMENT."""
    status_code = ORT_INVALID_ARGUMENT


class Undefined(NotImplementedError):
    """What stock's kernels leave unimplemented (ORT_NOT_IMPLEMENTED, so RUNTIME_EXCEPTION): ArgMax of an empty axis,
    ReduceMax of an empty bool set, MRotaryEmbedding past its caches."""
    status_code = 6


def status_code(exc: BaseException) -> int:
    """The OrtErrorCode for an exception: the first status_code along its chain of causes."""
    seen = 0
    while exc is not None and seen < 16:
        code = getattr(exc, "status_code", None)
        if code is not None:
            return code
        exc, seen = exc.__cause__, seen + 1
    return ORT_FAIL


class GpuCheck:
    """How a CUDA kernel of one node reports a bad value it finds in the run's data, which only the GPU holds
    (native/cuda/args.h GpuCheck: the kernel bounds its access and writes the value to its stream's report;
    the host fails the run once it has waited for the stream, with the status and text registered here). The
    planner hands one to every CUDA kernel that asks for `_gpu_check`."""

    def __init__(self, where: str):
        self.where = where  # the node, as run-time errors name it
        self._tags: dict = {}

    def fields(self, rt, stream, cause: str, error: type = InvalidArgument) -> dict:
        """The args.h GpuCheck of a kernel that reports `cause` (the error's text; "{value}" where the bad value
        goes) as stock ORT's `error` (its status code)."""
        tag = self._tags.get((cause, error))
        if tag is None:
            text = f"SeamlessCUDAExecutionProvider: node {self.where}: {error.__name__}: {cause} (found on the GPU)"
            tag = self._tags[cause, error] = rt.check_tag(text, status_code(error(cause)))
        return {"report": rt.gpu_report(stream), "tag": tag}


def gpu_check_fields(check: GpuCheck | None, rt, stream, cause: str, error: type = InvalidArgument) -> dict:
    """check.fields(...), or a null report (a kernel called outside a plan: bad values bounded, not reported)."""
    return check.fields(rt, stream, cause, error) if check is not None else {}


def gpu_check_arg(check: GpuCheck | None, rt, stream, cause: str, error: type = InvalidArgument) -> tuple:
    """gpu_check_fields' as a kernel's own launch argument."""
    from ..runtime.cuda_args import struct_arg  # the cuda variant's (the CPU distribution has no _cuda_args)
    return struct_arg("GpuCheck", **gpu_check_fields(check, rt, stream, cause, error))


def axis(value: int, rank: int, what: str = "axis") -> int:
    """A possibly negative axis in [0, rank); out of range fails as stock's HandleNegativeAxis does."""
    value = int(value)
    if not -rank <= value < rank:
        raise ValueError(f"{what} {value} is not in valid range [{-rank},{rank - 1}]")
    return value + rank if value < 0 else value


def axes(values, rank: int, what: str = "axes", unique: bool = True, error=ValueError) -> list[int]:
    """Axes normalised to [0, rank); duplicates refused when unique (error: the exception class)."""
    result = [axis(v, rank, what) for v in values]
    if unique and len(set(result)) != len(result):
        raise error(f"'{what}' has a duplicate axis: {list(values)}")
    return result


def first_outside(values, low: int, high: int) -> tuple[int, int] | None:
    """(flat position, value) of the first of `values` outside [low, high), or None: the one scan behind every
    index, length and position check (numpy would wrap a negative index silently)."""
    import numpy as np
    flat = np.asarray(values).reshape(-1)
    if not flat.size or (low <= int(flat.min()) and int(flat.max()) < high):
        return None
    i = int(np.flatnonzero((flat < low) | (flat >= high))[0])
    return i, int(flat[i])


def index_range(indices, size: int, what: str = "indices") -> None:
    """Every index in [-size, size), as Gather/Scatter* demand (INVALID_ARGUMENT otherwise)."""
    bad = first_outside(indices, -size, size)
    if bad:
        raise InvalidArgument(f"{what} element out of data bounds, idx={bad[1]} must be within the inclusive "
                              f"range [{-size},{size - 1}]")


def _physical_memory() -> int:
    import os
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 1 << 62


def allocation(shape, itemsize: int, what: str) -> None:
    """Refuse an array sized by input data beyond the machine's memory before it is allocated: an
    over-committing kernel would hand out the pages and kill the process while they are filled."""
    count = 1
    for d in shape:
        count *= int(d)
    if count * itemsize > _physical_memory():
        raise MemoryError(f"{what}: {count * itemsize} bytes requested, more than this machine's memory")
