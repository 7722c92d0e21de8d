"""Normalization ops on CUDA: BatchNormalization, InstanceNormalization, LRN, LayerNormalization, the skip/RMS
normalizations, LpNormalization and com.microsoft GatedRMSNorm / LinearAttentionGate (native/cuda/normalization.cu),
GroupNormalization and MeanVarianceNormalization (composed of our kernels, float32 inside: float16/bfloat16 round once
at the end, as the CPU kernels do, kernels/cpu/normalization.py); plan/fusion.py's NormedProduct, an RMS normalisation
applied by the product reading it."""
import math

import numpy as np

from ...graph.ir import Node
from ...runtime.cuda import DeviceTensor
from ...runtime.cuda_args import struct_arg, lib as codes
from .. import checks
from ..checks import InvalidArgument
from ..cpu import attention as cpu_attention
from ..cpu import normalization as cpu_norm
from ..registry import FUSED_DOMAIN, NORMED_PRODUCTS, kernel, lookup
from .attention import MAX_SHARED
from .elementwise import ADD, DIV, GPU_FLOATS, MUL, SQRT, SUB, SUFFIX, Scratch, binary, cast_to, device_scalar, unary
from .matmul import linear, matmul_swiglu
from .quantization import matmul_nbits, matmul_nbits_swiglu
from .reduction import MEAN, reduce

_F32 = np.float32
F32 = np.dtype(_F32)


def _check_batch_norm(node, graph):
    if node.attrs.get("training_mode", 0):
        return "BatchNormalization training_mode=1 is not supported on CUDA (inference only)"
    if len([o for o in node.outputs if o]) > 1:
        return "BatchNormalization's running statistics outputs are not produced on CUDA"
    dtype = graph.value(node.inputs[0]).dtype
    if any(graph.value(n).dtype != dtype for n in node.inputs[1:5] if n):
        return "BatchNormalization parameters of another type than X"
    return None


@kernel("BatchNormalization", since=7, types=GPU_FLOATS, device="cuda", check=_check_batch_norm)
def batch_normalization(rt, stream, x, scale, b, mean, var, *, epsilon=1e-5, momentum=0.9, spatial=1,
                        training_mode=0):
    c = x.shape[1] if len(x.shape) > 1 else 1
    inner = math.prod(x.shape[2:])
    # per channel, or (opset 7-8, spatial=0) per channel and position: parameters of shape (C, *spatial)
    div, count = (inner, c) if scale.size == c else (1, c * inner)
    if any(t.size != count for t in (scale, b, mean, var)):
        raise InvalidArgument(f"BatchNormalization parameters of shapes {[t.shape for t in (scale, b, mean, var)]} "
                              f"for an input of shape {x.shape}: {c} values each expected")
    y = rt.alloc(x.shape, x.dtype)
    rt.launch(f"seamless_batch_norm_{SUFFIX[x.dtype]}", y.size, stream, ("int64", y.size), ("ptr", x.ptr),
              ("ptr", scale.ptr), ("ptr", b.ptr), ("ptr", mean.ptr), ("ptr", var.ptr), ("ptr", y.ptr),
              ("int64", div), ("int64", count), ("float", float(epsilon)))
    return (y,)


@kernel("InstanceNormalization", since=6, types=GPU_FLOATS, device="cuda")
def instance_normalization(rt, stream, x, scale, b, *, epsilon=1e-5):
    c = x.shape[1]
    cols = math.prod(x.shape[2:])
    if scale.size != c or b.size != c:
        raise InvalidArgument(f"Mismatch between input data and scale or B: sizes {scale.size}, {b.size} for {c} "
                              "channels")
    y = rt.alloc(x.shape, x.dtype)
    if y.size:
        rt.launch_rows(f"seamless_instance_norm_{SUFFIX[x.dtype]}", x.shape[0] * c, stream, ("ptr", x.ptr),
                       ("ptr", scale.ptr), ("ptr", b.ptr), ("ptr", y.ptr), ("int64", c), ("int64", cols),
                       ("float", float(epsilon)))
    return (y,)


@kernel("LRN", since=1, types=GPU_FLOATS, device="cuda")
def lrn(rt, stream, x, *, alpha=1e-4, beta=0.75, bias=1.0, size):
    y = rt.alloc(x.shape, x.dtype)
    alpha_over_size = float(_F32(alpha) / _F32(size))  # float32, as ORT computes it
    rt.launch(f"seamless_lrn_{SUFFIX[x.dtype]}", y.size, stream, ("int64", y.size), ("ptr", x.ptr), ("ptr", y.ptr),
              ("int64", x.shape[1]), ("int64", math.prod(x.shape[2:])), ("int64", size), ("float", alpha_over_size),
              ("float", float(beta)), ("float", float(bias)))
    return (y,)


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


# --- composed of our kernels, float32 inside ----------------------------------------------


def _standardize(rt, stream, s, x, axes, epsilon):
    """(x - mean) / sqrt(var + epsilon) over `axes` of a float32 x."""
    mean = s(reduce(rt, stream, MEAN, x, axes, 1))
    centered = s(binary(rt, stream, SUB, x, mean))
    var = s(reduce(rt, stream, MEAN, s(binary(rt, stream, MUL, centered, centered)), axes, 1))
    std = s(unary(rt, stream, SQRT, s(binary(rt, stream, ADD, var, s(device_scalar(rt, stream, epsilon, F32))))))
    return s(binary(rt, stream, DIV, centered, std))


def _group_norm(rt, stream, x, scale, bias, epsilon, num_groups, per_channel):
    n, c = x.shape[0], x.shape[1]
    if c % num_groups:
        raise ValueError(f"GroupNormalization: {c} channels do not divide into {num_groups} groups")
    per = c if per_channel else num_groups
    if scale.size != per or bias.size != per:  # read as (per, 1) columns
        raise ValueError(f"GroupNormalization: scale {scale.shape} and bias {bias.shape} must have {per} values "
                         f"(one per {'channel' if per_channel else 'group'})")
    s = Scratch(rt, x, scale, bias)
    xf = s(cast_to(rt, stream, x, F32))
    y = _standardize(rt, stream, s, DeviceTensor(xf.ptr, (n, num_groups, x.size // max(n * num_groups, 1)), F32),
                     [2], epsilon)
    # scale and bias per group (opset 18) on the groups' view, or per channel (21) on the input's
    view = (n, num_groups, y.shape[2]) if not per_channel else (n, c, x.size // max(n * c, 1))
    y = DeviceTensor(y.ptr, view, F32)
    sc, bi = (DeviceTensor(s(cast_to(rt, stream, t, F32)).ptr, (view[1], 1), F32) for t in (scale, bias))
    y = s(binary(rt, stream, ADD, s(binary(rt, stream, MUL, y, sc)), bi))
    return s.done(cast_to(rt, stream, DeviceTensor(y.ptr, x.shape, F32), x.dtype))


@kernel("GroupNormalization", since=18, until=20, types=GPU_FLOATS, device="cuda")
def group_normalization_18(rt, stream, x, scale, bias, *, epsilon=1e-5, num_groups):
    return _group_norm(rt, stream, x, scale, bias, epsilon, num_groups, per_channel=False)


@kernel("GroupNormalization", since=21, types=GPU_FLOATS, device="cuda",
        check=lambda n, g: None if n.attrs.get("stash_type", 1) == 1 else "stash_type other than float32")
def group_normalization_21(rt, stream, x, scale, bias, *, epsilon=1e-5, num_groups, stash_type=1):
    return _group_norm(rt, stream, x, scale, bias, epsilon, num_groups, per_channel=True)


@kernel("MeanVarianceNormalization", since=9, types=GPU_FLOATS, device="cuda")
def mean_variance_normalization(rt, stream, x, *, axes=(0, 2, 3)):
    # the spec's function body: (X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9)
    s = Scratch(rt, x)
    xf = s(cast_to(rt, stream, x, F32))
    axes = [a % len(x.shape) for a in axes]
    mean = s(reduce(rt, stream, MEAN, xf, axes, 1))
    var = s(binary(rt, stream, SUB, s(reduce(rt, stream, MEAN, s(binary(rt, stream, MUL, xf, xf)), axes, 1)),
                   s(binary(rt, stream, MUL, mean, mean))))
    std = s(binary(rt, stream, ADD, s(unary(rt, stream, SQRT, var)), s(device_scalar(rt, stream, 1e-9, F32))))
    y = s(binary(rt, stream, DIV, s(binary(rt, stream, SUB, xf, mean)), std))
    return s.done(cast_to(rt, stream, y, x.dtype))


@kernel("LpNormalization", since=1, types=GPU_FLOATS, device="cuda",
        check=lambda n, g: None if n.attrs.get("p", 2) in (1, 2) else f"p={n.attrs.get('p')} (1 or 2)")
def lp_normalization(rt, stream, x, *, axis=-1, p=2):
    axis = checks.axis(axis, len(x.shape))
    n, inner = x.shape[axis], math.prod(x.shape[axis + 1:])
    y = rt.alloc(x.shape, x.dtype)
    if x.size:  # normalization.cu lp_norm: a warp a vector, one launch
        rt.launch(f"seamless_lp_norm_{SUFFIX[x.dtype]}", x.size // n * 32, stream, ("ptr", x.ptr), ("ptr", y.ptr),
                  ("int64", x.size // n), ("int64", n), ("int64", inner), ("int", p))
    return (y,)


# --- the skip and RMS normalisations ------------------------------------------------------


def _skip_norm(rt, stream, x, skip, bias, scale, beta, epsilon, want_sum, simplified, axis=-1):
    axis = checks.axis(axis, len(x.shape))
    cols = math.prod(x.shape[axis:])  # normalised over the axes from `axis` on
    if any(v is not None and v.size != cols for v in (scale, bias, beta)) or (skip is not None and skip.shape != x.shape):
        raise InvalidArgument(f"layer normalisation: scale/beta/bias must have shape {x.shape[axis:]} and skip x's "
                              f"shape {x.shape}; got {[None if v is None else v.shape for v in (scale, beta, bias, skip)]}")
    y = rt.alloc(x.shape, x.dtype)
    total = rt.alloc(x.shape, x.dtype) if want_sum else None
    # normalization.cu: eight values a thread in registers where the row and every pointer allow it, else the
    # row in shared memory
    tensors = [t for t in (x, skip, bias, scale, beta, y, total) if t is not None]
    in_registers = cols % 8 == 0 and cols <= 8 * 1024 and all(t.ptr % 16 == 0 for t in tensors)
    if not in_registers and cols * 4 > MAX_SHARED:
        raise ValueError(f"CUDA layer normalisation handles rows of up to {MAX_SHARED // 4} elements "
                         f"(or {8 * 1024} in multiples of 8)")
    launch = dict(threads=-(-cols // 256) * 32) if in_registers else dict(shared=cols * 4)
    ptr = lambda v: ("ptr", v.ptr if v is not None else 0)
    rt.launch_rows(f"seamless_skip_norm{'8' if in_registers else ''}_{SUFFIX[x.dtype]}", x.size // cols if cols else 0,
                   stream, ptr(x), ptr(skip), ptr(bias), ptr(scale), ptr(beta), ptr(y), ptr(total), ("int64", cols),
                   ("float", float(epsilon)), ("int", int(simplified)), **launch)
    return y, total


_check_rms = norm_check("inv_std_var output not produced on CUDA")


@kernel("SimplifiedLayerNormalization", types=GPU_FLOATS, device="cuda", check=_check_rms)
def simplified_layer_norm(rt, stream, x, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    return (_skip_norm(rt, stream, x, None, None, scale, None, epsilon, False, True, axis)[0],)


@kernel("RMSNormalization", since=23, types=GPU_FLOATS, device="cuda", check=_check_rms)
def rms_normalization(rt, stream, x, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    return (_skip_norm(rt, stream, x, None, None, scale, None, epsilon, False, True, axis)[0],)


def _check_skip(node, graph):
    if len(node.outputs) > 1 and any(node.outputs[1:3]):
        return "mean / inv_std_var outputs not produced on CUDA"
    return None


@kernel("SkipSimplifiedLayerNormalization", domain="com.microsoft", types=GPU_FLOATS, device="cuda",
        check=_check_skip)
def skip_simplified_layer_norm(rt, stream, x, skip, gamma, bias=None, *, epsilon=1e-12, _num_outputs=1):
    y, total = _skip_norm(rt, stream, x, skip, bias, gamma, None, epsilon, _num_outputs >= 4, True)
    return (y, None, None, total) if total is not None else (y,)


@kernel("SkipLayerNormalization", domain="com.microsoft", types=GPU_FLOATS, device="cuda", check=_check_skip)
def skip_layer_norm(rt, stream, x, skip, gamma, beta=None, bias=None, *, epsilon=1e-12, _num_outputs=1):
    y, total = _skip_norm(rt, stream, x, skip, bias, gamma, beta, epsilon, _num_outputs >= 4, False)
    return (y, None, None, total) if total is not None else (y,)


# --- plan/fusion.py's NormedProduct -------------------------------------------------------


class RowNorm:
    """An RMS normalisation still to be applied to a product's activations, RMSNorm(x + skip + bias) * gamma
    (plan/fusion.py's NormedProduct): by the product's GEMV kernel itself where it fits (common.cuh's
    RowNorm: the same arithmetic as the norm kernel), else by the norm kernel first (`apply`). `sum`: x + skip
    + bias, made when wanted."""

    def __init__(self, x, skip, bias, gamma, epsilon, want_sum):
        self.x, self.skip, self.bias, self.gamma, self.epsilon, self.want_sum = x, skip, bias, gamma, epsilon, want_sum
        self.sum = None

    def fits(self, k, blocks) -> bool:
        """Whether a GEMV of `blocks` blocks can normalise rows of k activations itself (one 8-value group a
        thread; 16-byte loads). Each block normalises its rows again: beyond NORM_MAX_BLOCKS that costs more
        than the norm kernel (the float16 LM head's 18992 blocks: 76 -> 116 us on the H200)."""
        tensors = [t for t in (self.x, self.skip, self.bias, self.gamma) if t is not None]
        return (k % 8 == 0 and 0 < k <= NORM_MAX_K and blocks <= NORM_MAX_BLOCKS and self.x.shape[-1] == k
                and self.gamma.size == k and (self.bias is None or self.bias.size == k)
                and (self.skip is None or self.skip.shape == self.x.shape) and all(t.ptr % 16 == 0 for t in tensors))

    def argument(self, rt):
        """The kernels' RowNorm argument (allocating the sum)."""
        if self.want_sum:
            self.sum = rt.alloc(self.x.shape, self.x.dtype)
        ptr = lambda t: t.ptr if t is not None else 0
        return struct_arg("RowNorm", x=self.x.ptr, skip=ptr(self.skip), bias=ptr(self.bias), gamma=self.gamma.ptr,
                          sum=ptr(self.sum), eps=float(self.epsilon))

    def apply(self, rt, stream):
        """The normalised activations, by the norm kernel (the caller frees them)."""
        y, self.sum = _skip_norm(rt, stream, self.x, self.skip, self.bias, self.gamma, None, self.epsilon,
                                 self.want_sum, True)
        return y


NORM_MAX_K = codes.NORM_MAX_K
NORM_MAX_BLOCKS = 4096


def _check_normed(node, graph):
    """The product's own check (plan/fusion.py's NormedProduct keeps its inputs after the norm's four)."""
    attrs = {k: v for k, v in node.attrs.items() if k not in ("product", "epsilon")}
    inner = Node(node.name, node.attrs.get("product", ""), NORMED_PRODUCTS.get(node.attrs.get("product"), "?"), 1,
                 node.inputs[:1] + node.inputs[4:], node.outputs[:1], attrs)
    kdef, reason = lookup(inner, graph, "cuda", host_rule=False)
    return None if kdef is not None else reason


@kernel("NormedProduct", domain=FUSED_DOMAIN, types=GPU_FLOATS, device="cuda", check=_check_normed)
def normed_product(rt, stream, x, skip, gamma, norm_bias, *weights, product, epsilon=1e-5, K=0, N=0, block_size=0,
                   bits=4, accuracy_level=0, weight_prepacked=0, _num_outputs=1, _output_buffer=None):
    """A product (registry.NORMED_PRODUCTS) of RMSNorm(x + skip + norm_bias) * gamma, and x + skip +
    norm_bias as a second output when the node has one: plan/fusion.py's fusion of a
    (Skip)SimplifiedLayerNormalization into the product reading it, so that a decode step's GEMV normalises its
    rows itself (one launch, not two)."""
    norm = RowNorm(x, skip, norm_bias, gamma, epsilon, _num_outputs > 1)
    nbits = dict(K=K, N=N, block_size=block_size, bits=bits, accuracy_level=accuracy_level)
    run = {"MatMulNBits": lambda: matmul_nbits(rt, stream, x, *weights, **nbits, weight_prepacked=weight_prepacked,
                                               _norm=norm, _output_buffer=_output_buffer),
           "MatMulNBitsSwiGLU": lambda: matmul_nbits_swiglu(rt, stream, x, *weights, **nbits, _norm=norm),
           "Linear": lambda: linear(rt, stream, x, *weights, _norm=norm, _output_buffer=_output_buffer),
           "MatMulSwiGLU": lambda: matmul_swiglu(rt, stream, x, *weights, _norm=norm)}[product]
    (y,) = run()
    return (y, norm.sum) if norm.want_sum else (y,)


# --- Qwen3.5's linear-attention layers: GatedRMSNorm, LinearAttentionGate (normalization.cu), the CPU kernels' checks


@kernel("GatedRMSNorm", domain="com.microsoft", types=GPU_FLOATS, device="cuda", check=cpu_norm._check_gated_rms)
def gated_rms_norm(rt, stream, X, scale, gate, *, activation="silu", epsilon=1e-5):
    cols = scale.size
    rows = cpu_norm.gated_rms_rows(X.shape, gate.shape, cols)
    if scale.dtype != X.dtype or gate.dtype != X.dtype:
        raise ValueError(f"GatedRMSNorm: X {X.dtype}, scale {scale.dtype} and gate {gate.dtype} must be one type")
    y = rt.alloc(X.shape, X.dtype)
    rt.launch_rows(f"seamless_gated_rmsnorm_{SUFFIX[X.dtype]}", rows, stream, ("ptr", X.ptr), ("ptr", scale.ptr),
                   ("ptr", gate.ptr), ("ptr", y.ptr), ("int64", cols), ("float", float(epsilon)),
                   ("int", cpu_norm.GATED_RMS_ACTIVATIONS[activation]))
    return (y,)


@kernel("LinearAttentionGate", domain="com.microsoft", types=GPU_FLOATS, device="cuda",
        check=cpu_attention._check_gate)
def linear_attention_gate(rt, stream, a, dt_bias, decay_scale, b=None):
    cpu_attention.gate_shapes(a.shape, dt_bias.size, decay_scale.size, None if b is None else b.shape)
    if dt_bias.dtype != F32 or decay_scale.dtype != F32:
        raise ValueError("LinearAttentionGate: dt_bias and decay_scale must be float32")
    decay = rt.alloc(a.shape, a.dtype)
    beta = rt.alloc(a.shape, a.dtype) if b is not None else None
    rt.launch(f"seamless_linear_attention_gate_{SUFFIX[a.dtype]}", a.size, stream, ("int64", a.size),
              ("int64", a.shape[-1]), ("ptr", a.ptr), ("ptr", dt_bias.ptr), ("ptr", decay_scale.ptr),
              ("ptr", b.ptr if b is not None else 0), ("ptr", decay.ptr), ("ptr", beta.ptr if beta is not None else 0))
    return decay, beta
