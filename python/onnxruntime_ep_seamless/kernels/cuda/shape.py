"""Metadata-only shape ops on CUDA: the output aliases the input's memory with a new shape.

Shapes must be known on the host: the shape inputs have to be constant initializers (a shape
computed on the GPU would need a host seam; such nodes are declined).
"""
import numpy as np

from ...runtime.cuda import DeviceTensor
from ..registry import kernel


def _constant_input(index, what):
    def check(node, graph):
        if len(node.inputs) > index and node.inputs[index] and graph.value(node.inputs[index]).const is None:
            return f"{what} must be a constant initializer on CUDA (not computed at run time)"
        return None
    return check


@kernel("Reshape", since=5, device="cuda", check=_constant_input(1, "the shape"))
def reshape(rt, stream, data, shape, *, allowzero=0):
    dims = [int(d) for d in rt.host(shape)]
    dims = [data.shape[i] if d == 0 and not allowzero else d for i, d in enumerate(dims)]
    out = np.empty(data.shape, np.bool_).reshape(dims).shape  # numpy resolves -1 and checks the size
    return (DeviceTensor(data.ptr, out, data.dtype),)


@kernel("Flatten", since=1, device="cuda")
def flatten(rt, stream, x, *, axis=1):
    axis = axis + len(x.shape) if axis < 0 else axis
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    return (DeviceTensor(x.ptr, (outer, x.size // outer if outer else 0), x.dtype),)


@kernel("Unsqueeze", since=13, device="cuda", check=_constant_input(1, "axes"))
def unsqueeze(rt, stream, x, axes):
    rank = len(x.shape) + len(rt.host(axes))
    shape = list(x.shape)
    for a in sorted(int(a) % rank for a in rt.host(axes)):
        shape.insert(a, 1)
    return (DeviceTensor(x.ptr, tuple(shape), x.dtype),)


@kernel("Squeeze", since=13, device="cuda", check=_constant_input(1, "axes"))
def squeeze(rt, stream, x, axes=None):
    drop = {int(a) % len(x.shape) for a in rt.host(axes)} if axes is not None else {
        i for i, d in enumerate(x.shape) if d == 1}
    return (DeviceTensor(x.ptr, tuple(d for i, d in enumerate(x.shape) if i not in drop), x.dtype),)
