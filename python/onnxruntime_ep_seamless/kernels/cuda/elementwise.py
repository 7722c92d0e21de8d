"""Elementwise ops on CUDA (native/cuda/elementwise.cu), float32 and float16."""
import numpy as np

from ...runtime.cuda import DeviceTensor, broadcast_struct, broadcast_strides
from ..registry import kernel

GPU_FLOATS = frozenset(map(np.dtype, (np.float16, np.float32)))
SUFFIX = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16"}
BINARY = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3, "Pow": 4}  # and Max 5, Min 6 below
UNARY = {"Relu": (0, 6), "Sigmoid": (1, 6), "Tanh": (2, 6), "Exp": (3, 6), "Log": (4, 6), "Neg": (5, 6),
         "Abs": (6, 6), "Sqrt": (7, 6), "Erf": (8, 9), "Reciprocal": (9, 6), "Sin": (10, 7), "Cos": (11, 7),
         "Floor": (12, 6), "Ceil": (13, 6), "Round": (14, 11), "Softplus": (15, 1)}


def _binary(code):
    def run(rt, stream, a, b):
        if a.dtype != b.dtype:
            raise TypeError(f"operands of different types {a.dtype} and {b.dtype}")
        y = rt.alloc(np.broadcast_shapes(a.shape, b.shape), a.dtype)
        rt.launch(f"seamless_binary_{SUFFIX[a.dtype]}", y.size, stream, ("int", code), ("int64", y.size),
                  ("ptr", a.ptr), ("ptr", b.ptr), ("ptr", y.ptr), ("bytes", broadcast_struct(y.shape, a.shape, b.shape)))
        return (y,)
    return run


def _unary(code):
    def run(rt, stream, x):
        y = rt.alloc(x.shape, x.dtype)
        rt.launch(f"seamless_unary_{SUFFIX[x.dtype]}", y.size, stream, ("int", code), ("int64", y.size),
                  ("ptr", x.ptr), ("ptr", y.ptr))
        return (y,)
    return run


for _op, _code in BINARY.items():
    kernel(_op, since=7, types=GPU_FLOATS, device="cuda")(_binary(_code))
for _op, _code in {"Max": 5, "Min": 6}.items():  # variadic in ONNX; two inputs here
    kernel(_op, since=8, types=GPU_FLOATS, device="cuda",
           check=lambda n, g: None if len(n.inputs) == 2 else "two inputs only on CUDA")(_binary(_code))
for _op, (_code, _since) in UNARY.items():
    kernel(_op, since=_since, types=GPU_FLOATS, device="cuda")(_unary(_code))


def _activation(rt, stream, code, x, bias=None, alpha=0.0):
    if bias is not None and (len(bias.shape) != 1 or bias.shape[0] != x.shape[-1] or bias.dtype != x.dtype):
        raise ValueError(f"the bias must be 1-D with the input's last dimension ({x.shape[-1]}) and type "
                         f"({x.dtype}); got shape {bias.shape}, {bias.dtype}")
    y = rt.alloc(x.shape, x.dtype)
    rt.launch(f"seamless_activation_{SUFFIX[x.dtype]}", y.size, stream, ("int", code), ("int64", y.size),
              ("ptr", x.ptr), ("ptr", bias.ptr if bias is not None else 0),
              ("int64", bias.size if bias is not None else 1), ("float", alpha), ("ptr", y.ptr))
    return (y,)


FAST_GELU, QUICK_GELU, ERF_GELU = 0, 1, 2  # native/cuda/elementwise.cu Activation


@kernel("Gelu", since=20, types=GPU_FLOATS, device="cuda")
def gelu(rt, stream, x, *, approximate="none"):
    return _activation(rt, stream, FAST_GELU if approximate == "tanh" else ERF_GELU, x)


@kernel("FastGelu", domain="com.microsoft", types=GPU_FLOATS, device="cuda")
def fast_gelu(rt, stream, x, bias=None):
    return _activation(rt, stream, FAST_GELU, x, bias)


@kernel("QuickGelu", domain="com.microsoft", types=GPU_FLOATS, device="cuda")
def quick_gelu(rt, stream, x, *, alpha=1.702):
    return _activation(rt, stream, QUICK_GELU, x, alpha=alpha)


@kernel("BiasGelu", domain="com.microsoft", types=GPU_FLOATS, device="cuda")
def bias_gelu(rt, stream, a, b):
    return _activation(rt, stream, ERF_GELU, a, b)


@kernel("Identity", since=1, device="cuda")
def identity(rt, stream, x):
    return (DeviceTensor(x.ptr, x.shape, x.dtype),)


@kernel("Where", since=9, types=frozenset([np.dtype(np.bool_)]), device="cuda",
        check=lambda n, g: None if g.value(n.inputs[1]).dtype in GPU_FLOATS else "CUDA Where selects float16/float32")
def where(rt, stream, cond, a, b):
    y = rt.alloc(np.broadcast_shapes(cond.shape, a.shape, b.shape), a.dtype)
    s = broadcast_struct(y.shape, a.shape, b.shape) + broadcast_strides(y.shape, cond.shape)
    rt.launch(f"seamless_where_{SUFFIX[a.dtype]}", y.size, stream, ("int64", y.size), ("ptr", cond.ptr),
              ("ptr", a.ptr), ("ptr", b.ptr), ("ptr", y.ptr), ("bytes", s))
    return (y,)
