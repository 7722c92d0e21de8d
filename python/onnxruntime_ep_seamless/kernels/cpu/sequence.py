"""Sequences (Python lists of arrays) and optionals (None or the value): the sequence ops, Optional,
OptionalHasElement, OptionalGetElement. A kernel never changes a list it is given: ORT's values are the caller's."""
import numpy as np

from ..checks import InvalidArgument
from ..registry import kernel
from .shape import split_parts

ANY = ("strings", "sequences", "optionals")
_INT64 = np.dtype(np.int64)


def _position(pos, size: int, inclusive_end: bool = False) -> int:
    """A sequence position in [-size, size) ([-size, size] for an insertion), as a list index."""
    p = int(np.asarray(pos).reshape(-1)[0])
    high = size if inclusive_end else size - 1
    if not -size <= p <= high:
        raise InvalidArgument(f"Invalid sequence index ({p}) specified for sequence of size ({size})")
    return p + size if p < 0 else p


def _same_type(seq: list, tensor: np.ndarray) -> None:
    if seq and seq[0].dtype != tensor.dtype:
        raise InvalidArgument(f"Sequence of {seq[0].dtype} cannot hold a tensor of {tensor.dtype}")


@kernel("SequenceEmpty", since=11, takes=ANY)
def sequence_empty(*, dtype=1):
    return ([],)


@kernel("SequenceConstruct", since=11, takes=ANY)
def sequence_construct(*tensors):
    for t in tensors[1:]:
        _same_type([tensors[0]], t)
    return (list(tensors),)


@kernel("SequenceInsert", since=11, takes=ANY)
def sequence_insert(seq, tensor, position=None):
    _same_type(seq, tensor)
    at = len(seq) if position is None else _position(position, len(seq), inclusive_end=True)
    return (seq[:at] + [tensor] + seq[at:],)


@kernel("SequenceAt", since=11, takes=ANY)
def sequence_at(seq, position):
    return (seq[_position(position, len(seq))],)


@kernel("SequenceErase", since=11, takes=ANY)
def sequence_erase(seq, position=None):
    at = len(seq) - 1 if position is None else _position(position, len(seq))
    if not seq:
        raise InvalidArgument("Invalid sequence index (-1) specified for sequence of size (0)")
    return (seq[:at] + seq[at + 1:],)


@kernel("SequenceLength", since=11, takes=ANY)
def sequence_length(seq):
    return (np.array(len(seq), _INT64),)


@kernel("SplitToSequence", since=11, takes=ANY)
def split_to_sequence(data, split=None, *, axis=0, keepdims=1):
    rank = data.ndim
    if not -rank <= axis < rank:
        raise InvalidArgument(f"Invalid value of attribute 'axis'. Rank={rank} Value={axis}")
    axis = axis + rank if axis < 0 else axis
    length = data.shape[axis]
    if split is None:  # pieces of one, the axis dropped unless keepdims
        parts = [np.take(data, [i], axis=axis) for i in range(length)]
        return ([p if keepdims else np.squeeze(p, axis) for p in parts],)
    sizes = np.asarray(split).reshape(-1).tolist()
    if np.asarray(split).ndim == 0:  # a scalar: pieces of that length, the last one shorter
        step = int(sizes[0])
        if step <= 0:
            raise InvalidArgument(f"Invalid 'split' value: {step}")
        sizes = [min(step, length - s) for s in range(0, length, step)]
    return (list(split_parts(data, sizes, axis, len(sizes))),)


@kernel("ConcatFromSequence", since=11, takes=ANY)
def concat_from_sequence(seq, *, axis, new_axis=0):
    if not seq:
        raise InvalidArgument("No tensors in the sequence: nothing to concatenate")
    rank = seq[0].ndim + (1 if new_axis else 0)
    if not -rank <= axis < rank:
        raise InvalidArgument(f"axis {axis} is not in valid range [-{rank},{rank - 1}]")
    return ((np.stack if new_axis else np.concatenate)(seq, axis=axis),)


@kernel("Optional", since=15, takes=ANY)
def optional(value=None):
    return (value,)


@kernel("OptionalHasElement", since=15, takes=ANY)
def optional_has_element(value=None):
    return (np.array(value is not None),)


@kernel("OptionalGetElement", since=15, takes=ANY)
def optional_get_element(value):
    if value is None:
        raise InvalidArgument("Trying to use OptionalGetElement on an optional type OrtValue which contains no data")
    return (value,)
