"""Elementwise ops on CUDA (native/cuda/elementwise.cu): arithmetic, comparisons, logic, unary
functions, Where, Cast. Float types compute in float32 and round once; int32/int64 in their type.
IsNaN, IsInf, Swish and Shrink are composed of those kernels; Dropout (inference) does no device work.
The helpers the other CUDA modules share: binary, unary, compare, logic, where, cast_to, device_scalar,
Scratch (a composition's intermediate tensors), on_host (a CPU kernel run on the host)."""
import inspect

import numpy as np

from ...graph.ir import ONNX_TO_NUMPY, attr_dtype
from ...runtime.cuda import MAX_DIMS, DeviceTensor, broadcast, operand_strides
from ...runtime.cuda_args import struct_arg, lib as codes
from ..cpu import elementwise as cpu_elementwise
from ..cpu.elementwise import UNSIGNED, check_bias, check_bitcast, check_bitshift
from .. import checks
from ..checks import InvalidArgument
from ..registry import ALL, BOOL, FLOATS, kernel

# kernel-name suffix of each element type a CUDA kernel is built for
SUFFIX = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16", np.dtype(np.float64): "f64",
          np.dtype(np.int8): "i8", np.dtype(np.uint8): "u8", np.dtype(np.int32): "i32", np.dtype(np.int64): "i64",
          np.dtype(np.uint16): "u16", np.dtype(np.uint32): "u32", np.dtype(np.uint64): "u64", np.dtype(np.bool_): "b"}
if 16 in ONNX_TO_NUMPY:  # bfloat16, when ml_dtypes is installed
    SUFFIX[ONNX_TO_NUMPY[16]] = "bf16"
GPU_FLOATS = frozenset(t for t, s in SUFFIX.items() if s in ("f32", "f16", "bf16"))
GPU_INTS = frozenset(map(np.dtype, (np.int32, np.int64)))
ARITHMETIC = GPU_FLOATS | GPU_INTS

# the op codes: native/cuda/args.h
ADD, SUB, MUL, DIV, POW, MAX, MIN, MOD, FMOD, PRELU, BIT_AND, BIT_OR, BIT_XOR, SHIFT_LEFT, SHIFT_RIGHT = (
    codes.ADD, codes.SUB, codes.MUL, codes.DIV, codes.POW, codes.MAX_, codes.MIN_, codes.MOD, codes.FMOD, codes.PRELU,
    codes.BIT_AND, codes.BIT_OR, codes.BIT_XOR, codes.SHIFT_LEFT, codes.SHIFT_RIGHT)
BINARY = {"Add": (ADD, 7, ARITHMETIC), "Sub": (SUB, 7, ARITHMETIC), "Mul": (MUL, 7, ARITHMETIC),
          "Div": (DIV, 7, ARITHMETIC), "Pow": (POW, 7, GPU_FLOATS), "PRelu": (PRELU, 7, ARITHMETIC),
          "BitwiseAnd": (BIT_AND, 18, GPU_INTS), "BitwiseOr": (BIT_OR, 18, GPU_INTS),
          "BitwiseXor": (BIT_XOR, 18, GPU_INTS)}
COMPARE = {"Equal": (codes.EQUAL, 7), "Less": (codes.LESS, 7), "LessOrEqual": (codes.LESS_EQUAL, 12),
           "Greater": (codes.GREATER, 7), "GreaterOrEqual": (codes.GREATER_EQUAL, 12)}
LOGIC = {"And": codes.AND, "Or": codes.OR, "Xor": codes.XOR}
NOT = codes.NOT
# op -> (UnaryOp code, since, parameters as (attribute, default) pairs); float types
UNARY = {"Relu": (codes.RELU, 6, ()), "Sigmoid": (codes.SIGMOID, 6, ()), "Tanh": (codes.TANH, 6, ()),
         "Exp": (codes.EXP, 6, ()), "Log": (codes.LOG, 6, ()), "Neg": (codes.NEG, 6, ()), "Abs": (codes.ABS, 6, ()),
         "Sqrt": (codes.SQRT, 6, ()), "Erf": (codes.ERF, 9, ()), "Reciprocal": (codes.RECIPROCAL, 6, ()),
         "Sin": (codes.SIN, 7, ()), "Cos": (codes.COS, 7, ()), "Floor": (codes.FLOOR, 6, ()),
         "Ceil": (codes.CEIL, 6, ()), "Round": (codes.ROUND, 11, ()), "Softplus": (codes.SOFTPLUS, 1, ()),
         "LeakyRelu": (codes.LEAKY_RELU, 6, (("alpha", 0.01),)),
         "HardSigmoid": (codes.HARD_SIGMOID, 6, (("alpha", 0.2), ("beta", 0.5))),
         "HardSwish": (codes.HARD_SWISH, 14, ()), "Elu": (codes.ELU, 6, (("alpha", 1.0),)),
         "Selu": (codes.SELU, 6, (("alpha", 1.67326319217681884765625), ("gamma", 1.05070102214813232421875))),
         "Celu": (codes.CELU, 12, (("alpha", 1.0),)),
         "ThresholdedRelu": (codes.THRESHOLDED_RELU, 10, (("alpha", 1.0),)), "Sign": (codes.SIGN, 9, ()),
         "Softsign": (codes.SOFTSIGN, 1, ()), "Mish": (codes.MISH, 18, ()), "Tan": (codes.TAN, 7, ()),
         "Asin": (codes.ASIN, 7, ()), "Acos": (codes.ACOS, 7, ()), "Atan": (codes.ATAN, 7, ()),
         "Sinh": (codes.SINH, 9, ()), "Cosh": (codes.COSH, 9, ()), "Asinh": (codes.ASINH, 9, ()),
         "Acosh": (codes.ACOSH, 9, ()), "Atanh": (codes.ATANH, 9, ())}
INT_UNARY = ("Neg", "Abs", "Sign", "Relu")  # the ops whose kernel also takes int32/int64
CLIP, DIV_BY, MUL_BY, BIT_NOT = codes.CLIP, codes.DIV_BY, codes.MUL_BY, codes.BIT_NOT


def _broadcast_rank(node, graph):
    """Why the broadcast kernels cannot take the node's operands: a known rank above theirs (left to another EP)."""
    rank = max((len(graph.value(n).shape) for n in node.inputs if n and graph.value(n).shape is not None), default=0)
    return f"rank {rank} above the CUDA kernels' limit of {MAX_DIMS}" if rank > MAX_DIMS else None


def _same_types(node, graph):
    types = {graph.value(n).dtype for n in node.inputs if n}
    if len(types) != 1:
        return f"operands of different types ({', '.join(sorted(map(str, types)))})"
    return _broadcast_rank(node, graph)


def _broadcast_arg(y, a, b) -> tuple:
    """The Broadcast launch argument of a two-operand kernel writing y."""
    return struct_arg("Broadcast", **broadcast(y.shape, a.shape, b.shape))


def binary(rt, stream, code, a, b):
    y = rt.alloc(np.broadcast_shapes(a.shape, b.shape), a.dtype)
    rt.launch(f"seamless_binary_{SUFFIX[a.dtype]}", y.size, stream, ("int", code), ("int64", y.size),
              ("ptr", a.ptr), ("ptr", b.ptr), ("ptr", y.ptr), _broadcast_arg(y, a, b))
    return y


def check_ints(rt, stream, x, low: int, high: int, gpu_check, cause: str, error: type = InvalidArgument,
               nonzero: bool = False) -> None:
    """Integer data an op reads as indices, lengths or divisors: every value within [low, high] (and, with nonzero,
    not 0), else error(cause) ("{value}": the bad value). Checked on the host where x is known there, else on the
    GPU before kernels that cannot report a bad value themselves (elementwise.cu check_ints, one range for every
    column; gpu_check: the node's checks.GpuCheck, None: bounded there, not reported)."""
    if not x.size:
        return
    if x.host is not None:
        flat = np.asarray(x.host).reshape(-1)
        bad = checks.first_outside(flat, low, high + 1)
        if bad is None and nonzero and not flat.all():
            bad = (0, 0)
        if bad:
            raise error(cause.replace("{value}", str(bad[1])))
    elif gpu_check is not None:
        ranges = struct_arg("IntRanges", low=[low], high=[high], k=1, nonzero=int(nonzero),
                            check=gpu_check.fields(rt, stream, cause, error))
        rt.launch(f"seamless_check_ints_{SUFFIX[x.dtype]}", x.size, stream, ("int64", x.size), ("ptr", x.ptr), ranges)


def device_scalar(rt, stream, value, dtype=np.float32):
    """A 0-d tensor of `value` on the GPU (copied on the stream), to broadcast against others."""
    return rt.device(DeviceTensor.on_host(np.array(value, dtype)), stream)


def unary(rt, stream, code, x, p=0.0, q=0.0):
    y = rt.alloc(x.shape, x.dtype)
    rt.launch(f"seamless_unary_{SUFFIX[x.dtype]}", y.size, stream, ("int", code), ("int64", y.size),
              ("ptr", x.ptr), ("ptr", y.ptr), ("float", p), ("float", q))
    return y


def _binary_kernel(code):
    def run(rt, stream, a, b):
        return (binary(rt, stream, code, a, b),)
    return run


def _no_integer_zero(rt, stream, b, what, gpu_check):
    """An integer divisor of 0 fails the run, as stock's (the kernel would give 0)."""
    if b.dtype in GPU_INTS:
        check_ints(rt, stream, b, -2 ** 63, 2 ** 63 - 1, gpu_check, f"Integer {what} by zero", ValueError, nonzero=True)


for _op, (_code, _since, _types) in BINARY.items():
    if _op not in ("Div", "Pow"):
        kernel(_op, since=_since, types=_types, device="cuda", check=_same_types)(_binary_kernel(_code))


def _check_pow(node, graph):
    exponent = graph.value(node.inputs[1]).dtype
    if exponent is not None and exponent not in ARITHMETIC:
        return f"exponent dtype {exponent} not supported"
    return _broadcast_rank(node, graph)


@kernel("Pow", since=BINARY["Pow"][1], types=BINARY["Pow"][2], device="cuda", check=_check_pow)
def pow_(rt, stream, a, b):
    """An exponent of another type (opset 12 on: Nemotron's squared ReLU raises to an int32 2) taken as the base's."""
    exponent = cast_to(rt, stream, b, a.dtype)
    y = binary(rt, stream, POW, a, exponent)
    if exponent is not b:
        rt.free(exponent)  # stream-ordered: the launch reading it is queued
    return (y,)


@kernel("Div", since=BINARY["Div"][1], types=BINARY["Div"][2], device="cuda", check=_same_types)
def div(rt, stream, a, b, *, _gpu_check=None):
    _no_integer_zero(rt, stream, b, "division", _gpu_check)
    return (binary(rt, stream, DIV, a, b),)


@kernel("BitShift", since=11, types=UNSIGNED, device="cuda",
        check=lambda n, g: _same_types(n, g) or check_bitshift(n, g))
def bit_shift(rt, stream, x, y, *, direction):
    """x shifted by y bits (bits shifted out give 0, as numpy and the CPU EP)."""
    return (binary(rt, stream, SHIFT_LEFT if direction == "LEFT" else SHIFT_RIGHT, x, y),)


@kernel("Mod", since=10, types=ARITHMETIC, device="cuda",
        check=lambda n, g: _same_types(n, g) or (None if n.attrs.get("fmod", 0) or g.value(n.inputs[0]).dtype
                                                 in GPU_INTS else "float Mod needs fmod=1"))
def mod(rt, stream, a, b, *, fmod=0, _gpu_check=None):
    _no_integer_zero(rt, stream, b, "modulo", _gpu_check)
    return (binary(rt, stream, FMOD if fmod else MOD, a, b),)


def _variadic(code, mean=False):
    def run(rt, stream, *inputs):
        dtype = inputs[0].dtype
        if code == ADD and dtype != np.float32 and len(inputs) > 2:  # sums of 16-bit floats: float32 partial sums
            wide = [cast_to(rt, stream, x, np.dtype(np.float32)) for x in inputs]
            (total,) = run(rt, stream, *wide)
            y = cast_to(rt, stream, total, dtype)
            for x in wide + [total]:
                rt.free(x)  # stream-ordered: the launches reading them are queued
            return (y,)
        y = inputs[0]
        for x in inputs[1:]:
            z = binary(rt, stream, code, y, x)
            if y is not inputs[0]:
                rt.free(y)  # stream-ordered: the launch reading it is already queued
            y = z
        if mean:
            z = unary(rt, stream, DIV_BY, y, float(len(inputs)))
            if y is not inputs[0]:
                rt.free(y)
            y = z
        elif y is inputs[0]:
            y = DeviceTensor(y.ptr, y.shape, y.dtype)  # one input: an alias
        return (y,)
    return run


for _op, _code, _types, _mean in (("Max", MAX, ARITHMETIC, False), ("Min", MIN, ARITHMETIC, False),
                                  ("Sum", ADD, GPU_FLOATS, False), ("Mean", ADD, GPU_FLOATS, True)):
    kernel(_op, since=8 if _op in ("Max", "Min") else 6, types=_types, device="cuda", check=_same_types)(
        _variadic(_code, _mean))


def compare(rt, stream, code, a, b):
    y = rt.alloc(np.broadcast_shapes(a.shape, b.shape), np.bool_)
    rt.launch(f"seamless_compare_{SUFFIX[a.dtype]}", y.size, stream, ("int", code), ("int64", y.size),
              ("ptr", a.ptr), ("ptr", b.ptr), ("ptr", y.ptr), _broadcast_arg(y, a, b))
    return y


def _compare_kernel(code):
    def run(rt, stream, a, b):
        return (compare(rt, stream, code, a, b),)
    return run


for _op, (_code, _since) in COMPARE.items():
    kernel(_op, since=_since, types=ARITHMETIC, device="cuda", check=_same_types)(_compare_kernel(_code))


def logic(rt, stream, code, a, b):
    y = rt.alloc(np.broadcast_shapes(a.shape, b.shape), np.bool_)
    rt.launch("seamless_logic", y.size, stream, ("int", code), ("int64", y.size), ("ptr", a.ptr), ("ptr", b.ptr),
              ("ptr", y.ptr), _broadcast_arg(y, a, b))
    return (y,)


def _logic_kernel(code):
    def run(rt, stream, a, b):
        return logic(rt, stream, code, a, b)
    return run


for _op, _code in LOGIC.items():
    kernel(_op, since=7, types=BOOL, device="cuda", check=_broadcast_rank)(_logic_kernel(_code))


@kernel("Not", since=1, types=BOOL, device="cuda")
def not_(rt, stream, x):
    return logic(rt, stream, NOT, x, x)


def _unary_kernel(code, params):
    def run(rt, stream, x, **attrs):
        values = [float(attrs.get(name, default)) for name, default in params] + [0.0, 0.0]
        return (unary(rt, stream, code, x, values[0], values[1]),)
    # the registry binds the attributes the function declares as keyword-only parameters
    P = inspect.Parameter
    run.__signature__ = inspect.Signature([P(p, P.POSITIONAL_OR_KEYWORD) for p in ("rt", "stream", "x")] +
                                          [P(name, P.KEYWORD_ONLY, default=d) for name, d in params])
    return run


for _op, (_code, _since, _params) in UNARY.items():
    kernel(_op, since=_since, types=ARITHMETIC if _op in INT_UNARY else GPU_FLOATS, device="cuda")(
        _unary_kernel(_code, _params))


@kernel("BitwiseNot", since=18, types=GPU_INTS, device="cuda")
def bitwise_not(rt, stream, x):
    return (unary(rt, stream, BIT_NOT, x),)


@kernel("Clip", since=6, until=10, types=GPU_FLOATS, device="cuda")
def clip_6(rt, stream, x, *, min=-np.inf, max=np.inf):
    return (unary(rt, stream, CLIP, x, float(min), float(max)),)


def _check_clip(node, graph):
    dtype = graph.value(node.inputs[0]).dtype
    if dtype in GPU_INTS:
        for name in node.inputs[1:]:
            if name and graph.value(name).const is not None and abs(int(graph.value(name).const)) >= 2 ** 24:
                return "int Clip bounds beyond 2^24 (the kernel takes them as float32)"
    return None


@kernel("Clip", since=11, types=ARITHMETIC, device="cuda", check=_check_clip, host_inputs=(1, 2))
def clip_11(rt, stream, x, min=None, max=None):
    # the bounds are scalars read on the host (constants in real models)
    lo = float(rt.to_host(min, stream)) if min is not None else -np.inf
    hi = float(rt.to_host(max, stream)) if max is not None else np.inf
    if x.dtype in GPU_INTS:
        info = np.iinfo(x.dtype)
        lo, hi = np.clip(lo, info.min, info.max), np.clip(hi, info.min, info.max)
    if lo > hi:  # min is applied first: everything becomes max
        lo = hi
    return (unary(rt, stream, CLIP, x, lo, hi),)


def _activation(rt, stream, code, x, bias=None, alpha=0.0):
    check_bias(x, bias)
    if bias is not None and bias.dtype != x.dtype:
        raise ValueError(f"the bias must have the input's type ({x.dtype}); got {bias.dtype}")
    y = rt.alloc(x.shape, x.dtype)
    rt.launch(f"seamless_activation_{SUFFIX[x.dtype]}", y.size, stream, ("int", code), ("int64", y.size),
              ("ptr", x.ptr), ("ptr", bias.ptr if bias is not None else 0),
              ("int64", bias.size if bias is not None else 1), ("float", alpha), ("ptr", y.ptr))
    return (y,)


FAST_GELU, QUICK_GELU, ERF_GELU = codes.FAST_GELU, codes.QUICK_GELU, codes.ERF_GELU


@kernel("Gelu", since=20, types=GPU_FLOATS, device="cuda")
def gelu(rt, stream, x, *, approximate="none"):
    return _activation(rt, stream, FAST_GELU if approximate == "tanh" else ERF_GELU, x)


@kernel("FastGelu", domain="com.microsoft", types=GPU_FLOATS, device="cuda")
def fast_gelu(rt, stream, x, bias=None):
    return _activation(rt, stream, FAST_GELU, x, bias)


@kernel("QuickGelu", domain="com.microsoft", types=GPU_FLOATS, device="cuda")
def quick_gelu(rt, stream, x, *, alpha=1.702):
    return _activation(rt, stream, QUICK_GELU, x, alpha=alpha)


@kernel("Gelu", domain="com.microsoft", types=GPU_FLOATS, device="cuda")
def ms_gelu(rt, stream, x):
    return _activation(rt, stream, ERF_GELU, x)


@kernel("BiasGelu", domain="com.microsoft", types=GPU_FLOATS, device="cuda")
def bias_gelu(rt, stream, a, b):
    return _activation(rt, stream, ERF_GELU, a, b)


@kernel("Identity", since=1, device="cuda")
def identity(rt, stream, x):
    return (DeviceTensor(x.ptr, x.shape, x.dtype, x.host),)


@kernel("Where", since=9, types=BOOL, device="cuda",
        check=lambda n, g: _broadcast_rank(n, g) or (None if g.value(n.inputs[1]).dtype.itemsize in (1, 2, 4, 8)
                                                      else "element size"))
def where(rt, stream, cond, a, b):
    y = rt.alloc(np.broadcast_shapes(cond.shape, a.shape, b.shape), a.dtype)
    s = struct_arg("Broadcast3", ab=broadcast(y.shape, a.shape, b.shape),
                   c_strides=operand_strides(y.shape, cond.shape))
    rt.launch(f"seamless_where_{a.dtype.itemsize}", y.size, stream, ("int64", y.size), ("ptr", cond.ptr),
              ("ptr", a.ptr), ("ptr", b.ptr), ("ptr", y.ptr), s)
    return (y,)


def cast_to(rt, stream, x, target):
    """x as `target` (a new tensor; x itself when the type is already target)."""
    if target == x.dtype:
        return x
    y = rt.alloc(x.shape, target)
    rt.launch(f"seamless_cast_{SUFFIX[x.dtype]}_{SUFFIX[target]}", y.size, stream, ("int64", y.size), ("ptr", x.ptr),
              ("ptr", y.ptr))
    return y


def _check_cast(node, graph):
    target = ONNX_TO_NUMPY.get(node.attrs.get("to"))
    return None if target in SUFFIX else f"CUDA Cast to ONNX type {node.attrs.get('to')}"


@kernel("Cast", since=6, types=frozenset(SUFFIX), device="cuda", check=_check_cast)
def cast(rt, stream, x, *, to, saturate=1, round_mode="up"):
    y = cast_to(rt, stream, x, ONNX_TO_NUMPY[to])
    return (y if y is not x else DeviceTensor(x.ptr, x.shape, x.dtype, x.host),)


@kernel("CastLike", since=15, types=frozenset(SUFFIX), device="cuda",
        check=lambda n, g: None if g.value(n.inputs[1]).dtype in SUFFIX else "CUDA CastLike to this type")
def cast_like(rt, stream, x, target_type, *, saturate=1, round_mode="up"):
    y = cast_to(rt, stream, x, target_type.dtype)
    return (y if y is not x else DeviceTensor(x.ptr, x.shape, x.dtype, x.host),)


# ---------------------------------------------------------------- composed of the kernels above

EQUAL, LESS, GREATER = COMPARE["Equal"][0], COMPARE["Less"][0], COMPARE["Greater"][0]
SQRT, ABS = UNARY["Sqrt"][0], UNARY["Abs"][0]


class Scratch:
    """Intermediate tensors of one composition, freed (stream-ordered) when it returns its results."""

    def __init__(self, rt, *inputs):
        self.rt, self.made, self.inputs = rt, [], {t.ptr for t in inputs if t is not None}

    def __call__(self, t):
        self.made.append(t)
        return t

    def done(self, *results):
        keep = {r.ptr for r in results} | self.inputs
        for t in {t.ptr: t for t in self.made}.values():
            if t.ptr not in keep:
                self.rt.free(t)
        return results


@kernel("IsNaN", since=9, types=GPU_FLOATS, device="cuda")
def isnan(rt, stream, x):
    s = Scratch(rt, x)
    same = s(compare(rt, stream, EQUAL, x, x))  # false only for NaN
    return s.done(logic(rt, stream, NOT, same, same)[0])


@kernel("IsInf", since=10, types=GPU_FLOATS, device="cuda")
def isinf(rt, stream, x, *, detect_negative=1, detect_positive=1):
    s = Scratch(rt, x)
    found = [s(compare(rt, stream, EQUAL, x, s(device_scalar(rt, stream, sign * np.inf, x.dtype))))
             for sign, wanted in ((1, detect_positive), (-1, detect_negative)) if wanted]
    if not found:
        y = rt.alloc(x.shape, np.bool_)
        rt.zero(y, stream)
        return s.done(y)
    return s.done(found[0] if len(found) == 1 else logic(rt, stream, LOGIC["Or"], *found)[0])


@kernel("Swish", since=24, types=GPU_FLOATS, device="cuda")
def swish(rt, stream, x, *, alpha=1.0):
    return _activation(rt, stream, QUICK_GELU, x, alpha=alpha)  # x * sigmoid(alpha * x)


@kernel("Shrink", since=9, types=GPU_FLOATS, device="cuda")
def shrink(rt, stream, x, *, bias=0.0, lambd=0.5):
    s = Scratch(rt, x)
    const = lambda v: s(device_scalar(rt, stream, v, x.dtype))
    low, high = const(-lambd), const(lambd)
    inner = s(where(rt, stream, s(compare(rt, stream, GREATER, x, high)), s(binary(rt, stream, SUB, x, const(bias))),
                    const(0.0))[0])
    return s.done(where(rt, stream, s(compare(rt, stream, LESS, x, low)), s(binary(rt, stream, ADD, x, const(bias))),
                        inner)[0])


# --- Dropout (inference): no device work --------------------------------------------------

_BF16 = frozenset([ONNX_TO_NUMPY[16]]) if 16 in ONNX_TO_NUMPY else frozenset()
HOST_FLOATS = FLOATS | _BF16  # Dropout and Range: no device arithmetic


def _same(x):
    return DeviceTensor(x.ptr, x.shape, x.dtype, x.host)


@kernel("Dropout", since=7, until=9, types=HOST_FLOATS, device="cuda")
def dropout_7(rt, stream, x, *, ratio=0.5, _num_outputs=1):
    # inference: y is x; the mask (of x's type before opset 10) is zeros, as ORT and the CPU kernel write
    return (_same(x), DeviceTensor.on_host(np.zeros(x.shape, x.dtype)))[:_num_outputs]


@kernel("Dropout", since=10, until=11, types=HOST_FLOATS, device="cuda")
def dropout_10(rt, stream, x, *, ratio=0.5, _num_outputs=1):
    return (_same(x), DeviceTensor.on_host(np.zeros(x.shape, np.bool_)))[:_num_outputs]


def check_dropout_inference(node, graph):
    if len(node.inputs) > 2 and node.inputs[2]:
        training_mode = graph.value(node.inputs[2]).const
        if training_mode is None:
            return "Dropout training_mode is not a constant"
        if bool(np.asarray(training_mode).reshape(-1)[0]):
            return "Dropout in training mode (random mask) is not supported on CUDA"
    return None


@kernel("Dropout", since=12, types=HOST_FLOATS, device="cuda", check=check_dropout_inference, host_inputs=(1, 2))
def dropout_12(rt, stream, x, ratio=None, training_mode=None, *, seed=0, _num_outputs=1):
    # training_mode is a constant False (see the check): y is x, the mask all True
    return (_same(x), DeviceTensor.on_host(np.ones(x.shape, np.bool_)))[:_num_outputs]


# --- ops run on the host ------------------------------------------------------------------
#
# Ops computed on the host inside a CUDA partition by the CPU kernels: those whose output shape
# depends on the data (NonZero, Unique, NonMaxSuppression), two whose inputs are mostly sizes or
# token ids (MelWeightMatrix, TfIdfVectorizer) and ai.onnx.ml's TreeEnsemble (ORT's CUDA EP has none of
# the three: tree walks are branchy host work). Their GPU inputs are read
# back (a seam: the host waits for the stream; under session capture a clear error; constant inputs
# cost nothing), their outputs are host values, uploaded when a GPU kernel reads them. The partition
# stays whole: ORT inserts no copies or CPU nodes.
# Each registers with its family: shape.py, detection.py, signal.py, ml.py.


def on_host(cpu_kernel):
    """A CUDA kernel running `cpu_kernel` on its inputs' host values (same attributes)."""
    def run(rt, stream, *inputs, **attrs):
        outputs = cpu_kernel(*[None if x is None else rt.to_host(x, stream) for x in inputs], **attrs)
        return tuple(DeviceTensor.on_host(y) for y in outputs)
    signature = inspect.signature(cpu_kernel)
    P = inspect.Parameter
    run.__signature__ = signature.replace(parameters=[P("rt", P.POSITIONAL_OR_KEYWORD),
                                                      P("stream", P.POSITIONAL_OR_KEYWORD),
                                                      *signature.parameters.values()])
    return run


@kernel("BitCast", since=26, types=ALL, device="cuda", check=check_bitcast)
def bit_cast(rt, stream, x, *, to):
    """The same bytes read as another type of the same width: an alias."""
    dtype = attr_dtype(to)
    return (DeviceTensor(x.ptr, x.shape, dtype, None if x.host is None else np.ascontiguousarray(x.host).view(dtype)),)


@kernel("GatedAdd", domain="com.microsoft", types=GPU_FLOATS, device="cuda", check=cpu_elementwise._check_gated_add)
def gated_add(rt, stream, X, Y, gate, gate_weight=None):
    """X + Y * gate (one gate per row), the product rounded to X's type before the add, as stock's kernels do."""
    cpu_elementwise.gated_add_shapes(X.shape, Y.shape, gate.shape)
    s = Scratch(rt, X, Y, gate)
    return s.done(binary(rt, stream, ADD, X, s(binary(rt, stream, MUL, Y, gate))))
