"""Row-wise ops on CUDA over the last axis: Softmax, LayerNormalization."""
import numpy as np

from ..registry import kernel
from .elementwise import GPU_FLOATS, SUFFIX


def _last_axis(node, graph):
    shape = graph.value(node.inputs[0]).shape
    axis = node.attrs.get("axis", -1)
    if axis == -1 or (shape is not None and axis == len(shape) - 1):
        return None
    return "only the last axis on CUDA"


@kernel("Softmax", since=13, types=GPU_FLOATS, device="cuda", check=_last_axis)
def softmax(rt, stream, x, *, axis=-1):
    y = rt.alloc(x.shape, x.dtype)
    cols = x.shape[-1] if x.shape else 1
    rt.launch_rows(f"seamless_softmax_{SUFFIX[x.dtype]}", x.size // cols if cols else 0, stream,
                   ("ptr", x.ptr), ("ptr", y.ptr), ("int64", cols))
    return (y,)


def _check_layernorm(node, graph):
    if len(node.outputs) > 1 and any(node.outputs[1:]):
        return "Mean/InvStdDev outputs are not produced on CUDA"
    reason = _last_axis(node, graph)
    scale = graph.value(node.inputs[1])
    if reason is None and scale.dtype != graph.value(node.inputs[0]).dtype:
        reason = "scale of another type than the input"
    return reason


@kernel("LayerNormalization", since=17, types=GPU_FLOATS, device="cuda", check=_check_layernorm)
def layer_norm(rt, stream, x, scale, bias=None, *, axis=-1, epsilon=1e-5, stash_type=1):
    cols = x.shape[-1]
    if scale.size != cols or (bias is not None and bias.size != cols):
        raise ValueError("CUDA LayerNormalization needs scale and bias of the last axis' size")
    y = rt.alloc(x.shape, x.dtype)
    rt.launch_rows(f"seamless_layernorm_{SUFFIX[x.dtype]}", x.size // cols if cols else 0, stream, ("ptr", x.ptr),
                   ("ptr", scale.ptr), ("ptr", bias.ptr if bias is not None else 0), ("ptr", y.ptr), ("int64", cols),
                   ("float", float(epsilon)))
    return (y,)


@kernel("Cast", since=6, types=GPU_FLOATS, device="cuda",
        check=lambda n, g: None if n.attrs.get("to") in (1, 10) else "CUDA casts between float32 and float16")
def cast(rt, stream, x, *, to, saturate=1):
    target = np.dtype(np.float32) if to == 1 else np.dtype(np.float16)
    if target == x.dtype:
        return (x,)
    y = rt.alloc(x.shape, target)
    name = "seamless_cast_f32_f16" if target == np.float16 else "seamless_cast_f16_f32"
    rt.launch(name, y.size, stream, ("int64", y.size), ("ptr", x.ptr), ("ptr", y.ptr))
    return (y,)


def _check_reduce_last(node, graph):
    axes = node.attrs.get("axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1]:
        c = graph.value(node.inputs[1]).const
        axes = None if c is None else c.reshape(-1).tolist()
    shape = graph.value(node.inputs[0]).shape
    last = [-1] if shape is None else [-1, len(shape) - 1]
    if axes is None or len(axes) != 1 or axes[0] not in last:
        return "CUDA ReduceMean over the last axis only (constant axes)"
    return None


@kernel("ReduceMean", since=1, until=17, types=GPU_FLOATS, device="cuda", check=_check_reduce_last)
def reduce_mean(rt, stream, x, *, axes=(-1,), keepdims=1):
    return _mean_last(rt, stream, x, keepdims)


@kernel("ReduceMean", since=18, types=GPU_FLOATS, device="cuda", check=_check_reduce_last)
def reduce_mean_18(rt, stream, x, axes=None, *, keepdims=1, noop_with_empty_axes=0):
    return _mean_last(rt, stream, x, keepdims)


def _mean_last(rt, stream, x, keepdims):
    cols = x.shape[-1]
    y = rt.alloc(x.shape[:-1] + ((1,) if keepdims else ()), x.dtype)
    rt.launch_rows(f"seamless_mean_{SUFFIX[x.dtype]}", y.size if cols else 0, stream, ("ptr", x.ptr), ("ptr", y.ptr),
                   ("int64", cols))
    return (y,)
