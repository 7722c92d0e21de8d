"""Row-wise ops on CUDA: Softmax, LogSoftmax, LayerNormalization."""
import math

import numpy as np

from .. import checks
from ..checks import InvalidArgument
from ..registry import kernel
from .elementwise import GPU_FLOATS, SUFFIX
from .shape import permuted


LOG, ZERO_MASKED_ROWS = 1, 2  # native/cuda/rows.cu softmax flags


def softmax_rows(rt, stream, x, rows, cols, flags):
    y = rt.alloc(x.shape, x.dtype)
    rt.launch_rows(f"seamless_softmax_{SUFFIX[x.dtype]}", rows if cols else 0, stream, ("ptr", x.ptr), ("ptr", y.ptr),
                   ("int64", cols), ("int", flags))
    return y


def _softmax_13(flags):
    def run(rt, stream, x, *, axis=-1):
        """Softmax along one axis: the row kernel, with the axis moved last and back when it is not."""
        rank = len(x.shape)
        axis = checks.axis(axis, max(rank, 1))
        cols = x.shape[axis] if rank else 1
        if rank == 0 or axis == rank - 1:
            return (softmax_rows(rt, stream, x, x.size // cols if cols else 0, cols, flags),)
        perm = [d for d in range(rank) if d != axis] + [axis]
        inverse = list(np.argsort(perm))
        moved = permuted(rt, stream, x, perm)
        out = softmax_rows(rt, stream, moved, moved.size // cols if cols else 0, cols, flags)
        y = permuted(rt, stream, out, inverse)
        rt.free(moved)
        rt.free(out)
        return (y,)
    return run


def _softmax_1(flags):
    def run(rt, stream, x, *, axis=1):
        """Opsets 1-12: the input as 2-D [prod(shape[:axis]), prod(shape[axis:])], rows normalised."""
        axis = checks.axis(axis, max(len(x.shape), 1))
        cols = math.prod(x.shape[axis:])
        return (softmax_rows(rt, stream, x, x.size // cols if cols else 0, cols, flags),)
    return run


for _op, _flags in (("Softmax", 0), ("LogSoftmax", LOG)):
    kernel(_op, since=1, until=12, types=GPU_FLOATS, device="cuda")(_softmax_1(_flags))
    kernel(_op, since=13, types=GPU_FLOATS, device="cuda")(_softmax_13(_flags))


def norm_check(extra_outputs: str):
    """The check of a normalisation whose extra outputs (named in the message) CUDA does not produce."""
    def check(node, graph):
        if len(node.outputs) > 1 and any(node.outputs[1:]):
            return extra_outputs
        if graph.value(node.inputs[1]).dtype != graph.value(node.inputs[0]).dtype:
            return "scale of another type than the input"
        return None
    return check


_check_layernorm = norm_check("Mean/InvStdDev outputs are not produced on CUDA")


@kernel("LayerNormalization", since=17, types=GPU_FLOATS, device="cuda", check=_check_layernorm)
def layer_norm(rt, stream, x, scale, bias=None, *, axis=-1, epsilon=1e-5, stash_type=1):
    axis = checks.axis(axis, len(x.shape))
    cols = math.prod(x.shape[axis:])  # normalised over the axes from `axis` on
    if scale.size != cols or (bias is not None and bias.size != cols):
        raise InvalidArgument(f"Scale and (optional) bias must match X.shape[axis:]: X.shape={x.shape} scale.shape="
                              f"{scale.shape} bias.shape={None if bias is None else bias.shape} and axis={axis}")
    y = rt.alloc(x.shape, x.dtype)
    rt.launch_rows(f"seamless_layernorm_{SUFFIX[x.dtype]}", x.size // cols if cols else 0, stream, ("ptr", x.ptr),
                   ("ptr", scale.ptr), ("ptr", bias.ptr if bias is not None else 0), ("ptr", y.ptr), ("int64", cols),
                   ("float", float(epsilon)))
    return (y,)
