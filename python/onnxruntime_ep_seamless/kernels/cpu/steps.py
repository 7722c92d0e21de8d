"""The CPU kernels' native steps (native/cpu/program.h): how exec/program.py lowers a node to its program.

A lowering gets the node, its input values (`Value`s: the array of the run that records, the slot, whether
it is static: known for the binding without reading the run's data) and the arrays the Python kernel
returned; it emits steps through the recorder and returns the node's output values, or raises `Declined`
with the reason the node stays in Python. Shapes, strides and attributes are resolved here, once per
binding; the step checks at run time only what it reads from data (gather indices).
"""
from __future__ import annotations

import math

import numpy as np

from ...graph.ir import NUMPY_TO_ONNX, PACKED_BITS
from ...runtime import numpy_memory
from .. import constants
from ..checks import status_code
from . import native

ffi, lib = native.ffi, native.lib
RANK = lib.SEAMLESS_PROGRAM_RANK
F32 = np.dtype(np.float32)
PLAIN = frozenset(map(np.dtype, (np.float32, np.float64, np.int64, np.int32, np.int8, np.uint8, np.bool_)))

LOWERINGS: dict[tuple[str, str], object] = {}  # (domain, op_type) -> lower(rec, node, ins, outs)


class Declined(Exception):
    """The node has no native step for this binding (the reason says why)."""


def lowers(*op_types: str, domain: str = ""):
    def register(fn):
        for op in op_types:
            LOWERINGS[(domain, op)] = fn
        return fn
    return register


def plain_memory(dtype) -> bool:
    """Whether values of dtype are plain bytes a slot can hold as numpy does (not sub-byte packed, not objects)."""
    return dtype.kind in "biuf" and dtype not in PACKED_BITS


def type_code(dtype) -> int:
    if dtype not in PLAIN:
        raise Declined(f"no native step for {dtype}")
    return NUMPY_TO_ONNX[dtype]


def _merged(dims, *strides):
    """dims and per-operand element strides with unit axes dropped and adjacent axes merged where every
    operand steps through them as one; at least one axis."""
    axes = [d for d in range(len(dims)) if dims[d] != 1]
    out_dims, out_strides = [], [[] for _ in strides]
    for d in axes:
        if out_dims and all(s[-1] == st[d] * dims[d] for s, st in zip(out_strides, strides)):
            out_dims[-1] *= dims[d]
            for s, st in zip(out_strides, strides):
                s[-1] = st[d]
            continue
        out_dims.append(dims[d])
        for s, st in zip(out_strides, strides):
            s.append(st[d])
    if not out_dims:
        return [1], [[0] for _ in strides]
    if len(out_dims) > RANK:
        raise Declined(f"rank {len(out_dims)} after merging axes (steps hold {RANK})")
    return out_dims, out_strides


def _broadcast_strides(shape, out_shape):
    """Element strides of a C-ordered array of `shape` broadcast to out_shape (0 on broadcast axes)."""
    strides, step = [], 1
    for d in range(len(shape) - 1, -1, -1):
        strides.append(0 if shape[d] == 1 else step)
        step *= shape[d]
    strides.reverse()
    return [0] * (len(out_shape) - len(shape)) + strides


def _fill(args, name, values):
    getattr(args, name)[0:len(values)] = values


# ---------------------------------------------------------------- elementwise

BINARY = {"Add": lib.SEAMLESS_ADD, "Sub": lib.SEAMLESS_SUB, "Mul": lib.SEAMLESS_MUL, "Div": lib.SEAMLESS_DIV,
          "Pow": lib.SEAMLESS_POW, "Max": lib.SEAMLESS_MAX, "Min": lib.SEAMLESS_MIN, "Equal": lib.SEAMLESS_EQUAL,
          "Less": lib.SEAMLESS_LESS, "Greater": lib.SEAMLESS_GREATER, "LessOrEqual": lib.SEAMLESS_LESS_EQUAL,
          "GreaterOrEqual": lib.SEAMLESS_GREATER_EQUAL, "And": lib.SEAMLESS_AND, "Or": lib.SEAMLESS_OR}


def _elementwise_args(rec, op, y, operands):
    """A BinaryArgs for y = op(operands...) (C-ordered operands broadcast to y)."""
    dims, strides = _merged(list(y.shape), *(_broadcast_strides(v.array.shape, y.shape) for v in operands))
    args = rec.args("SeamlessBinaryArgs")
    args.op, args.type, args.rank = op, type_code(operands[-1].array.dtype), len(dims)
    _fill(args, "dims", dims)
    for name, s in zip(("sa", "sb") if len(operands) == 2 else ("sc", "sa", "sb"), strides):
        _fill(args, name, s)
    return args


@lowers(*BINARY)
def binary(rec, node, ins, outs):
    if (node.op_type == "Pow" and len(ins) == 2 and ins[1].static and ins[0].array.dtype.kind == "f"
            and ins[1].array.dtype != ins[0].array.dtype):  # a constant exponent of another type (Relu^2's int 2)
        exponent = ins[1].array.astype(ins[0].array.dtype)
        if np.array_equal(exponent.astype(ins[1].array.dtype), ins[1].array):  # exactly the same powers
            ins = [ins[0], rec.constant(exponent)]
    if len(ins) != 2 or ins[0].array.dtype != ins[1].array.dtype:
        raise Declined("two operands of one type")
    return [_binary_value(rec, BINARY[node.op_type], *ins, outs[0])]


@lowers("Where")
def where(rec, node, ins, outs):
    if ins[1].array.dtype != ins[2].array.dtype or ins[0].array.dtype != np.bool_:
        raise Declined("a boolean condition and two operands of one type")
    y = rec.value(outs[0])
    rec.step(lib.SEAMLESS_OP_WHERE, _elementwise_args(rec, 0, outs[0], ins), [*ins, y])
    return [y]


UNARY = {"Erf": lib.SEAMLESS_ERF, "Sigmoid": lib.SEAMLESS_SIGMOID, "Tanh": lib.SEAMLESS_TANH, "Exp": lib.SEAMLESS_EXP,
         "Log": lib.SEAMLESS_LOG, "Sqrt": lib.SEAMLESS_SQRT, "Neg": lib.SEAMLESS_NEG, "Abs": lib.SEAMLESS_ABS,
         "Relu": lib.SEAMLESS_RELU, "Reciprocal": lib.SEAMLESS_RECIPROCAL, "GeluErf": lib.SEAMLESS_GELU,
         "QuickGelu": lib.SEAMLESS_QUICK_GELU, "Not": lib.SEAMLESS_NOT, "Cos": lib.SEAMLESS_COS,
         "Sin": lib.SEAMLESS_SIN}


def unary(rec, node, ins, outs):
    x = ins[0].array
    if not (x.dtype == F32 or (x.dtype == np.bool_ and node.op_type == "Not")):
        raise Declined(f"no native {node.op_type} of {x.dtype}")
    args = rec.args("SeamlessUnaryArgs")
    args.op, args.type, args.n = UNARY[node.op_type], type_code(x.dtype), x.size
    args.alpha = node.attrs.get("alpha", 1.702)
    y = rec.value(outs[0])
    rec.step(lib.SEAMLESS_OP_UNARY, args, [ins[0], y])
    return [y]


lowers(*(op for op in UNARY if op not in ("GeluErf", "QuickGelu")))(unary)
lowers("GeluErf", domain="ai.seamless")(unary)
lowers("QuickGelu", domain="com.microsoft")(unary)


@lowers("Gelu")
@lowers("Gelu", domain="com.microsoft")  # the erf form (no approximate attribute)
def gelu(rec, node, ins, outs):
    if ins[0].array.dtype != F32:
        raise Declined(f"no native Gelu of {ins[0].array.dtype}")
    y = rec.value(outs[0])
    _gelu_step(rec, ins[0], y, node.attrs.get("approximate", "none") == "tanh")
    return [y]


def _gelu_step(rec, x, y, tanh):
    """The float32 GELU step x -> y (y may be x): the erf form, or with tanh Gelu approximate="tanh"'s."""
    args = rec.args("SeamlessUnaryArgs")
    args.op, args.type, args.n = lib.SEAMLESS_GELU_TANH if tanh else lib.SEAMLESS_GELU, type_code(F32), y.array.size
    rec.step(lib.SEAMLESS_OP_UNARY, args, [x, y])


@lowers("BiasGelu", "FastGelu", domain="com.microsoft")
def bias_gelu(rec, node, ins, outs):
    """BiasGelu gelu(A + B) (the Python kernel's native.gelu) and FastGelu (Gelu approximate="tanh"'s step, an
    optional bias): the binary step's sum, then the GELU step in place."""
    x, bias = (ins + [None])[:2]
    if x.array.dtype != F32 or (bias is not None and bias.array.dtype != F32):
        raise Declined("float32")
    y = rec.value(outs[0]) if bias is None else _binary_value(rec, lib.SEAMLESS_ADD, x, bias, outs[0])
    _gelu_step(rec, x if bias is None else y, y, node.op_type == "FastGelu")
    return [y]


@lowers("Cast")
def cast(rec, node, ins, outs):
    src, dst = ins[0].array.dtype, outs[0].dtype
    if src == dst:
        return [rec.view(ins[0], outs[0])]
    if src.kind == "f" and dst.kind in "iub":
        raise Declined("float to integer casts (undefined in C out of range)")
    return [_cast_value(rec, ins[0], outs[0])]


def _cast_value(rec, x, out):
    """A new value of x's elements cast to out's type by the cast step (out: its recording-run array)."""
    args = rec.args("SeamlessCastArgs")
    args.__setattr__("from", type_code(x.array.dtype))
    args.to, args.n = type_code(out.dtype), out.size
    y = rec.value(out)
    rec.step(lib.SEAMLESS_OP_CAST, args, [x, y])
    return y


# ---------------------------------------------------------------- data movement

@lowers("Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity")
def view(rec, node, ins, outs):
    if any(v is not None and not v.static for v in ins[1:]):
        raise Declined("its shape or axes come from the run's data")
    return [rec.view(ins[0], outs[0])]


def _contiguous_strides(shape):
    return _broadcast_strides(shape, shape) if all(shape) else [0] * len(shape)


def _strided_copy(rec, src, dst, dims, src_strides, dst_strides, src_offset=0, dst_offset=0):
    dims, (ss, ds) = _merged(list(dims), list(src_strides), list(dst_strides))
    args = rec.args("SeamlessStridedArgs")
    args.rank, args.elem_bytes = len(dims), src.array.dtype.itemsize
    args.src_offset, args.dst_offset = src_offset, dst_offset
    _fill(args, "dims", dims)
    _fill(args, "src", ss)
    _fill(args, "dst", ds)
    rec.step(lib.SEAMLESS_OP_COPY_STRIDED, args, [src, dst])


def _address(a) -> int:
    return a.__array_interface__["data"][0]


def _byte_bounds(a) -> tuple[int, int]:
    """[low, high) of the bytes a non-empty array touches."""
    low = high = _address(a)
    for n, stride in zip(a.shape, a.strides):
        if stride < 0:
            low += (n - 1) * stride
        else:
            high += (n - 1) * stride
    return low, high + a.itemsize


@lowers("Transpose", "Expand", "Slice", "Split")
def view_copy(rec, node, ins, outs):
    """Ops whose Python kernel returns views of their (C-ordered) input: each output copied out of the input at
    the view's offset and strides."""
    if any(v is not None and not v.static for v in ins[1:]):
        raise Declined("its sizes come from the run's data")
    x = ins[0].array
    type_code(x.dtype)
    lo, hi = _byte_bounds(x) if x.size else (0, 0)
    e = x.itemsize
    for out in outs:  # all checked before any step is emitted
        if out.size:
            v_lo, v_hi = _byte_bounds(out)
            if not (lo <= v_lo and v_hi <= hi) or any(s % e for s in out.strides):
                raise Declined("its result is no view of its input")
    return [_copied_out(rec, ins[0], out) for out in outs]


def _copied_out(rec, src, view):
    """A new value holding `view`, a view of src's recording-run array (strides in whole items): copied out of src
    at the view's offset and strides."""
    e = view.itemsize
    offset = (_address(view) - _address(src.array)) // e if view.size else 0
    y = rec.value(view)
    _strided_copy(rec, src, y, view.shape, [s // e for s in view.strides], _contiguous_strides(view.shape),
                  src_offset=offset)
    return y


@lowers("Concat")
def concat(rec, node, ins, outs):
    return [_concatenated(rec, ins, outs[0], node.attrs["axis"] % outs[0].ndim)]


def _concatenated(rec, parts, y_array, axis):
    """A new value y_array (its recording-run array): each part copied in at its place along axis."""
    y = rec.value(y_array)
    y_strides = _contiguous_strides(y_array.shape)
    start = 0
    for v in parts:
        if v.array.dtype != y_array.dtype:
            raise Declined("operands of several types")
        if v.array.size:
            _strided_copy(rec, v, y, v.array.shape, _contiguous_strides(v.array.shape), y_strides,
                          dst_offset=start * y_strides[axis])
        start += v.array.shape[axis]
    type_code(y_array.dtype)
    return y


@lowers("Gather")
def gather(rec, node, ins, outs):
    indices = ins[1].array
    if indices.dtype not in (np.dtype(np.int64), np.dtype(np.int32)):
        raise Declined(f"indices of {indices.dtype}")
    type_code(ins[0].array.dtype)
    axis = node.attrs.get("axis", 0) % max(ins[0].array.ndim, 1)
    return [_gather_value(rec, ins[0], ins[1], outs[0], axis)]


def _gather_value(rec, data, indices, out, axis=0, from_zero=False):
    """A new value of data's slices along axis at indices by the gather step (out: its recording-run array); with
    from_zero indices in [0, size) (table lookups), else [-size, size)."""
    shape = data.array.shape
    args = rec.args("SeamlessGatherArgs")
    args.outer, args.size = math.prod(shape[:axis]), shape[axis]
    args.inner_bytes = math.prod(shape[axis + 1:]) * data.array.dtype.itemsize
    args.count, args.index_type = indices.array.size, type_code(indices.array.dtype)
    args.from_zero = int(from_zero)
    y = rec.value(out)
    rec.step(lib.SEAMLESS_OP_GATHER, args, [data, indices, y])
    return y


SCATTER_REDUCTIONS = {"none": -1, "add": lib.SEAMLESS_ADD, "mul": lib.SEAMLESS_MUL, "max": lib.SEAMLESS_MAX,
                      "min": lib.SEAMLESS_MIN}


def _elements_args(rec, node, data, indices):
    """A SeamlessElementsArgs for GatherElements/ScatterElements (the Python kernel checked the shapes)."""
    if indices.dtype not in (np.dtype(np.int64), np.dtype(np.int32)) or not 1 <= data.ndim <= RANK:
        raise Declined(f"indices of {indices.dtype}, data of rank {data.ndim}")
    args = rec.args("SeamlessElementsArgs")
    args.rank, args.axis = data.ndim, node.attrs.get("axis", 0) % data.ndim
    args.type, args.index_type = type_code(data.dtype), type_code(indices.dtype)
    args.size, args.data_elements = data.shape[args.axis], data.size
    _fill(args, "dims", list(indices.shape))
    _fill(args, "strides", _contiguous_strides(data.shape))
    return args


@lowers("GatherND")
def gather_nd(rec, node, ins, outs):
    data, indices = ins[0].array, ins[1].array
    batch_dims = node.attrs.get("batch_dims", 0)
    k = indices.shape[-1] if indices.ndim else 0
    if indices.dtype != np.int64 or not plain_memory(data.dtype) or not 1 <= k <= RANK:
        raise Declined(f"int64 index tuples of 1 to {RANK}, plain data")
    strides = [s * data.itemsize for s in _contiguous_strides(data.shape)]
    args = rec.args("SeamlessGatherNdArgs")
    args.batches = math.prod(data.shape[:batch_dims])
    args.tuples, args.k = math.prod(indices.shape[batch_dims:-1]), k
    args.slice_bytes = math.prod(data.shape[batch_dims + k:]) * data.itemsize
    args.batch_bytes = math.prod(data.shape[batch_dims:]) * data.itemsize
    _fill(args, "dims", list(data.shape[batch_dims:batch_dims + k]))
    _fill(args, "strides", strides[batch_dims:batch_dims + k])
    y = rec.value(outs[0])
    rec.step(lib.SEAMLESS_OP_GATHER_ND, args, [ins[0], ins[1], y])
    return [y]


@lowers("GatherElements")
def gather_elements(rec, node, ins, outs):
    args = _elements_args(rec, node, ins[0].array, ins[1].array)
    y = rec.value(outs[0])
    rec.step(lib.SEAMLESS_OP_GATHER_ELEMENTS, args, [ins[0], ins[1], y])
    return [y]


@lowers("ScatterElements")
def scatter_elements(rec, node, ins, outs):
    args = _elements_args(rec, node, ins[0].array, ins[1].array)
    args.reduction = SCATTER_REDUCTIONS[node.attrs.get("reduction", "none")]
    if args.reduction >= 0 and ins[0].array.dtype.kind != "f":
        raise Declined(f"reduction {node.attrs['reduction']!r} of {ins[0].array.dtype}")
    y = rec.value(outs[0])
    rec.step(lib.SEAMLESS_OP_SCATTER_ELEMENTS, args, [ins[0], ins[1], ins[2], y])
    return [y]


@lowers("TopK")
def top_k(rec, node, ins, outs):
    x = ins[0].array
    values, indices = outs
    if x.dtype != F32 or not x.ndim:
        raise Declined(f"TopK of {x.dtype}")
    axis = node.attrs.get("axis", -1) % x.ndim
    args = rec.args("SeamlessTopKArgs")
    args.outer, args.n, args.inner = math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1:])
    args.k, args.largest = values.shape[axis], node.attrs.get("largest", 1) != 0
    scratch = rec.value(np.empty(2 * args.n, np.int64)) if args.k > lib.SEAMLESS_TOP_K_INSERT else None
    ys = [rec.value(values), rec.value(indices)]
    rec.step(lib.SEAMLESS_OP_TOP_K, args, [ins[0], *ys, scratch])
    return ys


@lowers("Clip")
def clip(rec, node, ins, outs):
    x = ins[0].array
    if node.since_version < 11:
        low, high = node.attrs.get("min", -np.inf), node.attrs.get("max", np.inf)
    else:
        bounds = (ins + [None] * 3)[1:3]
        if not all(v is None or v.static for v in bounds):
            raise Declined("its bounds come from the run's data")
        low, high = (default if v is None else float(v.array.reshape(-1)[0]) for v, default in
                     zip(bounds, (-np.inf, np.inf)))
    if x.dtype != F32:
        raise Declined(f"no native Clip of {x.dtype}")
    args = rec.args("SeamlessUnaryArgs")
    args.op, args.type, args.n, args.alpha, args.beta = lib.SEAMLESS_CLIP, type_code(F32), x.size, low, high
    y = rec.value(outs[0])
    rec.step(lib.SEAMLESS_OP_UNARY, args, [ins[0], y])
    return [y]


# ---------------------------------------------------------------- families with native kernels

def _rows(rec, rows, cols, eps=0.0):
    args = rec.args("SeamlessRowsArgs")
    args.rows, args.cols, args.eps = rows, cols, eps
    return args


@lowers("Softmax")
def softmax(rec, node, ins, outs):
    x = ins[0].array
    if x.dtype != F32 or not x.size:
        raise Declined(f"softmax of {x.dtype} {x.shape}")
    default = -1 if node.since_version >= 13 else 1
    axis = node.attrs.get("axis", default) % x.ndim
    if node.since_version >= 13 and axis != x.ndim - 1:
        raise Declined("softmax over an inner axis")
    cols = math.prod(x.shape[axis:])
    y = rec.value(outs[0])
    rec.step(lib.SEAMLESS_OP_SOFTMAX, _rows(rec, x.size // cols, cols), [ins[0], y])
    return [y]


@lowers("LayerNormalization")
def layer_norm(rec, node, ins, outs):
    x = ins[0].array
    if any(node.outputs[1:]):
        raise Declined("its mean and inverse deviation are read")
    axis = node.attrs.get("axis", -1) % x.ndim
    cols = math.prod(x.shape[axis:])
    bias = ins[2] if len(ins) > 2 else None
    if (x.dtype != F32 or not x.size or ins[1].array.dtype != F32 or ins[1].array.size != cols
            or (bias is not None and (bias.array.dtype != F32 or bias.array.size != cols))):
        raise Declined("float32 with a scale and bias per normalized element")
    y = rec.value(outs[0])
    rec.step(lib.SEAMLESS_OP_LAYERNORM, _rows(rec, x.size // cols, cols, node.attrs.get("epsilon", 1e-5)),
             [ins[0], ins[1], bias, y])
    return [y]


def _gemm(rec, a, b_array, trans_b, bias, y_array):
    """A GEMM step with the constant B (packed once per weight) and bias."""
    from .matmul import native_packed
    a_arr = a.array
    args = rec.args("SeamlessGemmArgs")
    args.m = math.prod(a_arr.shape[:-1])
    args.k = a_arr.shape[-1]
    args.n = b_array.shape[0] if trans_b else b_array.shape[1]
    packed, split = rec.keep(native_packed(b_array, trans_b))
    args.packed = ffi.cast("float*", ffi.from_buffer(packed))
    if split is not None:
        args.split = ffi.cast("uint16_t*", ffi.from_buffer(split))
    if bias is not None:
        bias = rec.keep(np.ascontiguousarray(bias, np.float32).reshape(-1))
        if bias.size != args.n:
            raise Declined("a bias that is not one per column")
        args.bias = ffi.cast("float*", ffi.from_buffer(bias))
    y = rec.value(y_array)
    rec.step(lib.SEAMLESS_OP_GEMM, args, [a, y])
    return [y]


@lowers("MatMul")
def matmul(rec, node, ins, outs):
    a, b = ins
    if a.array.dtype != F32 or b.array.dtype != F32 or a.array.ndim < 2 or b.array.ndim < 2:
        raise Declined("float32 operands of rank 2 and more")
    if b.static and b.array.ndim == 2:
        return _gemm(rec, a, b.array, False, None, outs[0])
    (m, k), n = a.array.shape[-2:], b.array.shape[-1]
    batch = outs[0].shape[:-2]
    args = rec.args("SeamlessGemmArgs")
    args.batch, args.m, args.n, args.k, args.ldb = math.prod(batch), m, n, k, n
    for value, stride, items in ((a, "stride_a", m * k), (b, "stride_b", k * n)):
        own = value.array.shape[:-2]
        if math.prod(own) == 1:
            setattr(args, stride, 0)
        elif tuple(own) == tuple(batch):
            setattr(args, stride, items)
        else:
            raise Declined("batch axes broadcast on both sides")
    y = rec.value(outs[0])
    rec.step(lib.SEAMLESS_OP_GEMM_BATCHED, args, [a, b, y])
    return [y]


@lowers("MatMulBias", domain="ai.seamless")
def matmul_bias(rec, node, ins, outs):
    a, w, bias = ins
    if a.array.dtype != F32 or w.array.dtype != F32 or w.array.ndim != 2 or not (w.static and bias.static):
        raise Declined("float32 with a constant 2-D weight and bias")
    return _gemm(rec, a, w.array, False, bias.array, outs[0])


@lowers("Gemm")
def gemm(rec, node, ins, outs):
    a, b = ins[:2]
    c = ins[2] if len(ins) > 2 else None
    attrs = node.attrs
    n = outs[0].shape[-1]
    # C of shape (N,) or (1, N): one value a column
    per_column = c is not None and c.static and c.array.size == n and (c.array.ndim == 0 or c.array.shape[-1] == n)
    if (a.array.dtype != F32 or attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0 or not b.static
            or (c is not None and (attrs.get("beta", 1.0) != 1.0 or not per_column))):
        raise Declined("float32, constant B and a constant per-column C, alpha = beta = 1, A not transposed")
    return _gemm(rec, a, b.array, bool(attrs.get("transB", 0)), None if c is None else c.array.reshape(n), outs[0])


@lowers("Conv")
def conv(rec, node, ins, outs):
    return _conv(rec, node, ins, outs, relu=False)


@lowers("FusedConv", domain="ai.seamless")
def fused_conv(rec, node, ins, outs):
    z = ins[3] if len(ins) > 3 else None
    if z is not None and (z.array.dtype != F32 or z.array.shape != outs[0].shape):
        raise Declined("a residual of the output's shape and type")  # the Python kernel broadcasts it as Add does
    return _conv(rec, node, ins, outs, relu=bool(node.attrs.get("relu", 0)), z=z)


def _conv(rec, node, ins, outs, relu, z=None):
    from .native import conv_args, conv_scratch_floats
    from .spatial import geometry, native_conv
    x, w = ins[:2]
    b = ins[2] if len(ins) > 2 else None
    nd = x.array.ndim - 2
    group = node.attrs.get("group", 1)
    if not (w.static and (b is None or b.static) and native_conv(x.array, w.array, None if b is None else b.array,
                                                                 group)) or not outs[0].size:
        raise Declined("float32 with constant weights and bias, 1-3 spatial dims")
    strides, dilations = node.attrs.get("strides") or [1] * nd, node.attrs.get("dilations") or [1] * nd
    begin, _, out = geometry(x.array.shape[2:], w.array.shape[2:], strides, dilations, node.attrs.get("pads"),
                             node.attrs.get("auto_pad", "NOTSET"))
    args, kept = conv_args(x.array.shape, w.array, None if b is None else b.array, group, strides, dilations, begin,
                           out, relu=relu)
    rec.keep(kept)
    args = rec.keep(args)
    y = rec.value(outs[0])
    scratch = rec.value(np.empty(conv_scratch_floats(args), np.float32))
    rec.step(lib.SEAMLESS_OP_CONV, args, [x, y, scratch, z])
    return [y]


POOL_MAX = {"scalar": lib.SEAMLESS_POOL_MAX_SCALAR, "loop": lib.SEAMLESS_POOL_MAX_LOOP,
            "global": lib.SEAMLESS_POOL_MAX_GLOBAL,
            "vector": {2: lib.SEAMLESS_POOL_MAX_VECTOR_2D, 3: lib.SEAMLESS_POOL_MAX_VECTOR_3D}}


@lowers("MaxPool", "AveragePool")
def pool(rec, node, ins, outs):
    """seamless_pool_f32: MaxPool by stock's path for the window (spatial.py stock_max_pool_path: the Python
    kernel's), AveragePool with or without the pads in the divisor; the same values as the Python kernels."""
    from .spatial import geometry, stock_max_pool_path
    x, attrs = ins[0].array, node.attrs
    nd = x.ndim - 2
    if x.dtype != F32 or not 1 <= nd <= 3 or len([o for o in node.outputs if o]) > 1 or not outs[0].size:
        raise Declined("float32, 1-3 spatial dims, one output")
    kernel = list(attrs["kernel_shape"])
    strides, dilations = list(attrs.get("strides") or [1] * nd), list(attrs.get("dilations") or [1] * nd)
    begin, end, out = geometry(x.shape[2:], kernel, strides, dilations, attrs.get("pads"),
                               attrs.get("auto_pad", "NOTSET"), attrs.get("ceil_mode", 0))
    if node.op_type == "MaxPool":
        path = stock_max_pool_path(x.dtype, x.shape[2:], kernel, strides, dilations, begin, end,
                                   attrs.get("storage_order", 0))
        mode = POOL_MAX["vector"][nd] if path == "vector" else POOL_MAX[path]
    else:
        mode = lib.SEAMLESS_POOL_AVERAGE_WITH_PADS if attrs.get("count_include_pad", 0) else lib.SEAMLESS_POOL_AVERAGE
    return _pool_step(rec, ins[0], outs[0], mode, out, kernel, strides, dilations, begin, end)


@lowers("GlobalMaxPool")
def global_max_pool(rec, node, ins, outs):
    """MLAS's global kernel (the Python kernel's fold where NaN or -inf decide): one output a plane."""
    x = ins[0].array
    nd = x.ndim - 2
    if x.dtype != F32 or not 1 <= nd <= 3 or not x.size:
        raise Declined("float32, 1-3 spatial dims")
    ones, zeros = [1] * nd, [0] * nd
    return _pool_step(rec, ins[0], outs[0], lib.SEAMLESS_POOL_MAX_GLOBAL, ones, list(x.shape[2:]), ones, ones, zeros,
                      zeros)


def _pool_step(rec, x, y_array, mode, out, kernel, strides, dilations, begin, end):
    """seamless_pool_f32 over x's (N * C) planes of 1-3 spatial dims (fewer given as leading dims of 1)."""
    shape = x.array.shape
    nd = len(shape) - 2
    front = lambda values, unit=1: [unit] * (3 - nd) + [int(v) for v in values]  # noqa: E731
    args = rec.args("SeamlessPoolArgs")
    args.planes, args.mode = shape[0] * shape[1], mode
    for name, values, unit in (("in", shape[2:], 1), ("out", out, 1), ("kernel", kernel, 1), ("stride", strides, 1),
                               ("dilation", dilations, 1), ("pad_begin", begin, 0), ("pad_end", end, 0)):
        _fill(args, name, front(values, unit))
    y = rec.value(y_array)
    rec.step(lib.SEAMLESS_OP_POOL, args, [x, y])
    return [y]


@lowers("GlobalAveragePool")
def global_average_pool(rec, node, ins, outs):
    """ReduceMean's step over the spatial axes."""
    x = ins[0].array
    if x.dtype != F32 or x.ndim < 3 or not x.size:
        raise Declined(f"GlobalAveragePool of {x.dtype} {x.shape}")
    return _reduce_step(rec, lib.SEAMLESS_REDUCE_MEAN, ins[0], range(2, x.ndim), outs[0])


@lowers("Sum")
def sum_(rec, node, ins, outs):
    """Binary Adds into the output in the inputs' order, as the Python kernel's reduce: ((x0 + x1) + x2) + ..."""
    if any(v is None or v.array.dtype != F32 for v in ins) or not outs[0].size:
        raise Declined("float32 inputs")
    y = rec.value(outs[0])
    if len(ins) == 1:
        _strided_copy(rec, ins[0], y, outs[0].shape, _contiguous_strides(outs[0].shape),
                      _contiguous_strides(outs[0].shape))
        return [y]
    rec.step(lib.SEAMLESS_OP_BINARY, _elementwise_args(rec, lib.SEAMLESS_ADD, outs[0], ins[:2]), [*ins[:2], y])
    for v in ins[2:]:  # y's own elements with the next input (one element read before it is written)
        rec.step(lib.SEAMLESS_OP_BINARY, _elementwise_args(rec, lib.SEAMLESS_ADD, outs[0], [rec.view(y, outs[0]), v]),
                 [y, v, y])
    return [y]


@lowers("BatchNormalization")
def batch_normalization(rec, node, ins, outs):
    """Inference with constant parameters: x * a + b per channel, a and b made as the Python kernel makes them."""
    x = ins[0].array
    if (x.dtype != F32 or x.ndim < 2 or node.attrs.get("training_mode", 0) or len(ins) != 5
            or not all(v.static and v.array.dtype == F32 and v.array.shape == (x.shape[1],) for v in ins[1:])
            or len([o for o in node.outputs if o]) != 1 or not outs[0].size):
        raise Declined("float32 inference with constant per-channel parameters")
    from .normalization import inference_scale_shift
    a, b = inference_scale_shift(*(v.array for v in ins[1:]), node.attrs.get("epsilon", 1e-5))
    channel = (x.shape[1],) + (1,) * (x.ndim - 2)
    a, b = rec.constant(a.reshape(channel)), rec.constant(b.reshape(channel))
    scaled, y = rec.value(np.empty_like(outs[0])), rec.value(outs[0])
    rec.step(lib.SEAMLESS_OP_BINARY, _elementwise_args(rec, lib.SEAMLESS_MUL, outs[0], [ins[0], a]),
             [ins[0], a, scaled])
    rec.step(lib.SEAMLESS_OP_BINARY, _elementwise_args(rec, lib.SEAMLESS_ADD, outs[0], [scaled, b]), [scaled, b, y])
    return [y]


@lowers("ChannelAffine", domain="ai.seamless")
def channel_affine(rec, node, ins, outs):
    x = ins[0].array
    if x.dtype != F32 or x.ndim < 2 or not all(v.static and v.array.shape == (x.shape[1],) for v in ins[1:]) or \
            not outs[0].size:
        raise Declined("float32, constant per-channel scale and shift")
    args = rec.args("SeamlessChannelAffineArgs")
    args.n, args.c, args.spatial = x.shape[0], x.shape[1], x.size // (x.shape[0] * x.shape[1])
    args.relu = int(node.attrs.get("relu", 0))
    y = rec.value(outs[0])
    rec.step(lib.SEAMLESS_OP_CHANNEL_AFFINE, args, [*ins, y])
    return [y]


@lowers("LRN")
def lrn(rec, node, ins, outs):
    x = ins[0].array
    if x.dtype != F32 or x.ndim < 2 or not outs[0].size:
        raise Declined(f"LRN of {x.dtype} {x.shape}")
    args = rec.args("SeamlessLrnArgs")
    args.n, args.c, args.size = x.shape[0], x.shape[1], node.attrs["size"]
    args.spatial = x.size // (x.shape[0] * x.shape[1])
    args.alpha_over_size = np.float32(node.attrs.get("alpha", 1e-4) / node.attrs["size"])  # the Python kernel's
    args.bias, args.beta = node.attrs.get("bias", 1.0), node.attrs.get("beta", 0.75)
    y = rec.value(outs[0])
    rec.step(lib.SEAMLESS_OP_LRN, args, [ins[0], y])
    return [y]


@lowers("RotaryEmbedding")
def rotary_embedding(rec, node, ins, outs):
    """seamless_rotary_f32 for ONNX RotaryEmbedding (the Python kernel checked the caches' width)."""
    x, cos, sin, pos = (ins + [None] * 4)[:4]
    shape = x.array.shape
    if x.array.dtype != F32 or cos.array.dtype != F32 or sin.array.dtype != F32 or len(shape) not in (3, 4):
        raise Declined("float32, 3-D or 4-D")
    if len(shape) == 4:
        b, n, s, h = shape
        strides = (n * s * h, h, s * h)
    else:
        b, s = shape[:2]
        n = node.attrs["num_heads"]
        h = shape[2] // n
        strides = (s * n * h, n * h, h)
    half = (node.attrs.get("rotary_embedding_dim", 0) or h) // 2
    if pos is None:
        if cos.array.shape != (b, s, half) or sin.array.shape != cos.array.shape:
            raise Declined("caches of (batch, sequence, rotary/2) without position_ids")
    elif (pos.array.dtype != np.int64 or pos.array.shape != (b, s) or cos.array.ndim != 2
          or cos.array.shape[1] != half or sin.array.shape != cos.array.shape):
        raise Declined("int64 position_ids of (batch, sequence) and caches of (positions, rotary/2)")
    args = rec.args("SeamlessRotaryArgs")
    args.batch, args.seq, args.heads, args.head, args.half = b, s, n, h, half
    args.batch_stride, args.seq_stride, args.head_stride = strides
    args.max_pos, args.interleaved = cos.array.shape[0], int(bool(node.attrs.get("interleaved", 0)))
    y = rec.value(outs[0])
    rec.step(lib.SEAMLESS_OP_ROTARY, args, [x, cos, sin, pos, y])
    return [y]


@lowers("Attention")
def onnx_attention(rec, node, ins, outs):
    """seamless_onnx_attention_f32, the Python kernel's float32 path (attention.py native_attention_layout)."""
    q, k, v, mask, past_k, past_v, nonpad = (ins + [None] * 7)[:7]
    attrs = node.attrs
    if (not all(x is None or x.array.dtype == F32 for x in (q, k, v, past_k, past_v)) or nonpad is not None
            or attrs.get("qk_matmul_output_mode", 0) or node.since_version >= 24
            or (mask is not None and mask.array.dtype not in (F32, np.dtype(np.bool_)))):
        raise Declined("float32, no nonpad_kv_seqlen, the qk output the scaled product (mode 0)")
    return _attention_step(rec, node, outs, q, k, v, mask, past_k, past_v, attrs.get("q_num_heads", 0),
                           attrs.get("kv_num_heads", 0), attrs.get("is_causal", 0), attrs.get("scale"),
                           attrs.get("softcap", 0.0))


@lowers("EmbedLayerNormalization", domain="com.microsoft")
def embed_layer_normalization(rec, node, ins, outs):
    """word[input_ids] + position[position_ids or 0..S-1] (+ segment[segment_ids]) by Gather and binary steps in the
    Python kernel's order, then the LayerNormalization step over the hidden axis; mask_index the count of mask == 1 a
    row (Equal, Cast, ReduceSum and Cast steps); embedding_sum the sum before the norm."""
    ids, seg, word, pos, seg_table, gamma, beta, mask, pos_ids = (ins + [None] * 9)[:9]
    b, s = ids.array.shape
    if (word.array.dtype != F32 or gamma is None or not all(t is None or t.static for t in (word, pos, seg_table,
                                                                                            gamma, beta))
            or pos.array.shape[0] < s or (mask is None and len(node.outputs) > 1 and node.outputs[1])):
        raise Declined("float32 with constant tables, gamma and beta, a mask for mask_index")
    hidden = word.array.shape[1]

    def rows(table, indices):  # stock's lookups take no negative ids (in range here: the Python kernel's run checked)
        return _gather_value(rec, table, indices, table.array[indices.array], from_zero=True)

    positions = rec.constant(pos.array[:s]) if pos_ids is None else rows(pos, pos_ids)
    segments = seg is not None and seg_table is not None
    emb = outs[2] if len(outs) > 2 else None  # embedding_sum: the recording run answers with the Python kernel's
    total = _binary_value(rec, lib.SEAMLESS_ADD, rows(word, ids), positions, None if segments else emb)
    if segments:
        total = _binary_value(rec, lib.SEAMLESS_ADD, total, rows(seg_table, seg), emb)
    y = rec.value(outs[0])
    rec.step(lib.SEAMLESS_OP_LAYERNORM, _rows(rec, b * s, hidden, node.attrs.get("epsilon", 1e-12)),
             [total, gamma, beta, y])
    results = [y, None, total]
    if mask is not None:
        ones = _binary_value(rec, lib.SEAMLESS_EQUAL, mask, rec.constant(np.ones((), np.int32)))
        count = _cast_value(rec, ones, ones.array.astype(np.int64))
        (counts,) = _reduce_step(rec, lib.SEAMLESS_REDUCE_SUM, count, [1], count.array.sum(axis=1))
        results[1] = _cast_value(rec, counts, outs[1])
    return results[:len(node.outputs)]


@lowers("MultiHeadAttention", domain="com.microsoft")
def multi_head_attention(rec, node, ins, outs):
    """MultiHeadAttention as ONNX Attention's step where they agree: 3-D float32 query/key/value (a constant bias
    added by a binary step each), attention_bias and the key padding mask as one float mask (_key_mask),
    past/present [B, N, T, H], unidirectional only for one query row (a decode step: no key after it). Else its
    Python kernel (packed or left-padded masks, a unidirectional prompt)."""
    q, k, v, bias, padding, attention_bias, past_k, past_v = (ins + [None] * 8)[:8]
    attrs = node.attrs
    if ((bias is not None and not bias.static) or any(x is not None for x in ins[8:])
            or not all(x is None or x.array.dtype == F32 for x in (q, k, v, bias, attention_bias, past_k, past_v))
            or (attrs.get("unidirectional", 0) and q.array.shape[1] > 1) or q.array.ndim != 3):
        raise Declined("float32 3-D, a constant bias, no unidirectional prompt")
    if bias is not None:  # the Python kernel's sums, q | k | v's slices of the bias
        d = q.array.shape[2]
        q, k, v = (_binary_value(rec, lib.SEAMLESS_ADD, x, rec.constant(bias.array[lo:hi]))
                   for x, lo, hi in ((q, 0, d), (k, d, 2 * d), (v, 2 * d, bias.array.size)))
    b, s = q.array.shape[:2]
    t = k.array.shape[1] + (0 if past_k is None else past_k.array.shape[2])
    fill = np.float32(attrs.get("mask_filter_value", -10000.0))
    mask = _score_mask(rec, _key_mask(rec, padding, b, s, t, fill), attention_bias)
    n = attrs["num_heads"]
    return _attention_step(rec, node, outs, q, k, v, mask, past_k, past_v, n, n, 0,
                           attrs.get("scale") or None, 0.0)


@lowers("Attention", domain="com.microsoft")
def ms_attention(rec, node, ins, outs):
    """com.microsoft Attention (ORT's fused BERT/GPT-2 attention): q, k and v by one GEMM step each (the constant
    weights and bias split at q|k|v), mask_index, the unidirectional mask and attention_bias as one float mask, then
    ONNX Attention's step - the Python kernel's sums. A past (2, B, N, P, H) is copied into its key and value halves
    and the present (2, B, N, P + S, H) stacked from the step's present key and value. Else its Python kernel
    (weights that are not constants, left-padding mask_index, a shared KV buffer)."""
    x, w, bias, mask_index, past, attention_bias = (ins + [None] * 6)[:6]
    attrs = node.attrs
    n = attrs["num_heads"]
    if (x.array.dtype != F32 or x.array.ndim != 3 or not w.static or (bias is not None and not bias.static)
            or any(v is not None for v in ins[6:]) or (past is not None and past.array.dtype != F32)
            or attrs.get("do_rotary", 0) or (attention_bias is not None and attention_bias.array.dtype != F32)):
        raise Declined("float32 3-D input, constant weights and bias, no shared KV buffer")
    sizes = attrs.get("qkv_hidden_sizes") or [w.array.shape[1] // 3] * 3
    dq, dk, dv = (int(d) for d in sizes)
    b, s, _ = x.array.shape
    p = 0 if past is None else past.array.shape[3]
    fill = np.float32(attrs.get("mask_filter_value", -10000.0))
    mask = _key_mask(rec, mask_index, b, s, p + s, fill)
    if attrs.get("unidirectional", 0) and s > 1:  # added to the key mask, as the Python kernel adds them
        future = np.arange(p + s)[None, :] > (p + np.arange(s))[:, None]
        causal = rec.constant(np.where(future, fill, np.float32(0)).reshape(1, 1, s, p + s))
        mask = causal if mask is None else _binary_value(rec, lib.SEAMLESS_ADD, mask, causal)
    mask = _score_mask(rec, mask, attention_bias)
    wa = w.array.astype(F32, copy=False)
    ba = None if bias is None else bias.array.astype(F32, copy=False).reshape(-1)
    q, k, v = (_gemm(rec, x, _constant_part(w.array, f"attention_columns_{lo}_{hi}", lambda a: a[:, lo:hi]), False,
                     None if ba is None else ba[lo:hi], x.array @ wa[:, lo:hi] + (0 if ba is None else ba[lo:hi]))[0]
               for lo, hi in ((0, dq), (dq, dq + dk), (dq + dk, dq + dk + dv)))
    if past is None:
        y = _attention_step(rec, node, outs[:1], q, k, v, mask, None, None, n, n, 0, attrs.get("scale") or None, 0.0)
        return y[:1] + [None] * (len(node.outputs) - 1)
    halves = [_copied_out(rec, past, past.array[i]) for i in range(2)]  # the past's key and value
    present = outs[1]  # a past comes with its present (bert.check_ms_attention)
    y, present_k, present_v = _attention_step(rec, node, outs[:1], q, k, v, mask, *halves, n, n, 0,
                                              attrs.get("scale") or None, 0.0, presents=present)
    stacked = _concatenated(rec, [rec.view(h, h.array[None]) for h in (present_k, present_v)], present, 0)
    return [y, stacked]


_NUMPY_BINARY = {lib.SEAMLESS_ADD: np.add, lib.SEAMLESS_LESS: np.less, lib.SEAMLESS_GREATER: np.greater,
                 lib.SEAMLESS_EQUAL: np.equal}


def _constant_part(array, name, part):
    """part(array) as a float32 C-ordered constant, made once per constant array: the GEMM packs it once, and every
    recording holds the same address (a family can form)."""
    def made(a):
        made = np.ascontiguousarray(part(a), F32)
        constants.mark(made)
        return made
    return constants.derived(array, name, made)


def _binary_value(rec, op, a, b, out=None):
    """A new value op(a, b) by the binary step (a and b broadcast); its recording-run array computed here (a value a
    lowering makes may be a node's output: the recording run answers with it), or `out`, the node's output."""
    if not lib.seamless_binary_supported(type_code(a.array.dtype), op):
        raise Declined(f"no native binary op {op} of {a.array.dtype}")
    if out is None:
        out = _NUMPY_BINARY[op](a.array, b.array)
    y = rec.value(out)
    rec.step(lib.SEAMLESS_OP_BINARY, _elementwise_args(rec, op, out, [a, b]), [a, b, y])
    return y


def _key_mask(rec, mask, b, s, t, fill):
    """com.microsoft attention's key mask as a float mask added to the scores (0 where a key is kept, fill where it
    is masked) of shape (B, 1, 1, T) or (B, 1, S, T): from (B,) valid lengths (right padding), or a (B, T) or (B, S,
    T) raw mask (kept where > 0). None without a mask; Declined for the other forms (left padding, packed)."""
    if mask is None:
        return None
    m = mask.array
    if m.dtype != np.int32 or m.shape not in ((b,), (b, t), (b, s, t)):
        raise Declined(f"mask of {m.dtype} {m.shape}: int32 (B,), (B, T) or (B, S, T) natively")
    if m.ndim == 1:
        keys = rec.constant(np.arange(t, dtype=np.int32).reshape(1, t))
        keep = _binary_value(rec, lib.SEAMLESS_LESS, keys, rec.view(mask, m.reshape(b, 1)))
    else:
        keep = _binary_value(rec, lib.SEAMLESS_GREATER, mask, rec.constant(np.zeros((), np.int32)))
    shape = (b, 1, 1, t) if m.ndim < 3 else (b, 1, s, t)
    keep = rec.view(keep, keep.array.reshape(shape))
    out = np.where(keep.array, np.float32(0), fill).astype(F32)
    y = rec.value(out)
    operands = [keep, rec.constant(np.zeros((), F32)), rec.constant(np.array(fill, F32))]
    rec.step(lib.SEAMLESS_OP_WHERE, _elementwise_args(rec, 0, out, operands), [*operands, y])
    return y


def _score_mask(rec, mask, attention_bias):
    """One float mask for the scores: the key mask (or None) plus attention_bias (or None)."""
    if mask is None or attention_bias is None:
        return mask if attention_bias is None else attention_bias
    return _binary_value(rec, lib.SEAMLESS_ADD, mask, attention_bias)


def _attention_step(rec, node, outs, q, k, v, mask, past_k, past_v, q_heads, kv_heads, causal, scale, softcap,
                    presents=None):
    """The seamless_onnx_attention_f32 step; outputs (y, present_key, present_value, qk) as the node has them, or
    given presents (a stacked (2, ...) array: their recording-run values) y, present_key and present_value."""
    from .attention import native_attention_layout
    from .native import attention_scale
    layout = native_attention_layout(q.array.shape, k.array.shape, v.array.shape,
                                     None if past_k is None else past_k.array.shape,
                                     None if mask is None else mask.array.shape, q_heads, kv_heads)
    if layout is None:
        raise Declined("a mask that does not broadcast to the scores")
    dims, strides, _ = layout
    args = rec.args("SeamlessOnnxAttentionArgs")
    _fill(args, "dims", dims)
    _fill(args, "strides", strides)
    args.mask_bool = int(mask is not None and mask.array.dtype == np.bool_)
    args.causal = int(bool(causal))
    args.scale, args.softcap = attention_scale(scale, dims[6]), softcap
    b, _, nkv, _, l, past, h, hv = dims
    # the outputs the node has; the presents the kernel always writes (scratch where the node has none)
    scratch = (None, *(presents if presents is not None else
                       (np.empty((b, nkv, l + past, h), F32), np.empty((b, nkv, l + past, hv), F32))), None)
    ys = [rec.value(outs[i]) if i < len(outs) and i < len(node.outputs) and node.outputs[i]
          else None if scratch[i] is None else rec.value(np.ascontiguousarray(scratch[i])) for i in range(4)]
    rec.step(lib.SEAMLESS_OP_ONNX_ATTENTION, args, [q, k, v, past_k, past_v, mask, *ys])
    return ys[:3] if presents is not None else ys[:len(node.outputs)]


@lowers("LSTM")
def lstm(rec, node, ins, outs):
    from .native import RNN_ACTIVATIONS
    from .rnn import cell_activations, packed_weights
    x, w, r = ins[:3]
    b, lens, h0, c0, p = (ins + [None] * 8)[3:8]
    attrs = node.attrs
    n = attrs["hidden_size"]
    if (x.array.dtype != F32 or attrs.get("direction", "forward") != "forward" or attrs.get("layout", 0)
            or attrs.get("input_forget", 0) or lens is not None or not all(v is None or v.static for v in (w, r, b, p))
            or w.array.shape[0] != 1):
        raise Declined("a float32 forward layer without sequence lengths, constant weights")
    acts = cell_activations("LSTM", attrs.get("activations"))[0]
    if any(a not in RNN_ACTIVATIONS for a in acts):
        raise Declined(f"activations {acts}")
    seq, batch = x.array.shape[:2]
    bias = np.zeros(4 * n, np.float32) if b is None else b.array[0, :4 * n] + b.array[0, 4 * n:]
    (xw,) = _gemm(rec, x, w.array[0], True, bias, np.empty((seq, batch, 4 * n), np.float32))
    args = rec.args("SeamlessLstmArgs")
    args.steps, args.batch, args.n = seq, batch, n
    clip = attrs.get("clip")
    args.has_clip, args.clip = clip is not None, float(clip or 0.0)
    args.acts[0:3] = [RNN_ACTIVATIONS[a] for a in acts]
    args.packed_r = ffi.cast("float*", ffi.from_buffer(rec.keep(packed_weights(r.array, "r")[0])))
    if p is not None:
        args.peepholes = ffi.cast("float*", ffi.from_buffer(rec.keep(np.ascontiguousarray(p.array[0], np.float32))))
    state = np.empty((1, batch, n), np.float32)
    y = rec.value(outs[0]) if len(outs) > 0 and node.outputs[0] else None
    h = rec.value(outs[1] if len(outs) > 1 and node.outputs[1] else state)
    c = rec.value(outs[2] if len(outs) > 2 and node.outputs[2] else state)
    gates, tmp = rec.value(np.empty((batch, 4 * n), np.float32)), rec.value(np.empty(n, np.float32))
    rec.step(lib.SEAMLESS_OP_LSTM, args, [xw, h0, c0, y, h, c, gates, tmp])
    return [y, h, c][:len(node.outputs)]


@lowers("CausalConvWithState")
@lowers("CausalConvWithState", domain="com.microsoft")
def causal_conv(rec, node, ins, outs):
    x, weight, bias, past = (ins + [None] * 4)[:4]
    attrs = node.attrs
    if (x.array.dtype != F32 or attrs.get("channels_last", 0) or not weight.static
            or not (bias is None or bias.static) or len(outs) < 2 or not node.outputs[1]):
        raise Declined("float32, channels first, constant weights, both outputs")
    batch, channels, length = x.array.shape
    args = rec.args("SeamlessCausalConvArgs")
    args.batch, args.channels, args.length, args.k = batch, channels, length, weight.array.shape[2]
    args.dilation = attrs.get("dilation", 1)
    args.activation = attrs.get("activation", "none") != "none"
    y, present = rec.value(outs[0]), rec.value(outs[1])
    rec.step(lib.SEAMLESS_OP_CAUSAL_CONV, args, [x, weight, bias, past, y, present])
    return [y, present]


MOE_ACTIVATIONS = {"relu": 0, "silu": 1, "swiglu": 2, "identity": 3, "gelu": 4}


def _moe_step(rec, node, x, router, fc1, b1, fc2, b2, tokens, experts, inter, outs, quantized=None):
    """The MoE step (program.h SeamlessMoeArgs); quantized: QMoE's two QuantizedExperts."""
    attrs = node.attrs
    act = attrs.get("activation_type", "relu")
    args = rec.args("SeamlessMoeArgs")
    args.tokens, args.hidden, args.experts, args.inter = tokens, x.array.shape[-1], experts, inter
    args.k = attrs.get("k", 1)
    args.activation, args.normalize = MOE_ACTIVATIONS[act], bool(attrs.get("normalize_routing_weights", 0))
    limit = attrs.get("swiglu_limit")
    args.has_limit, args.limit = limit is not None, float(limit or 0.0)
    args.alpha, args.beta = attrs.get("activation_alpha", 1.0), attrs.get("activation_beta", 0.0)
    if quantized:
        args.qmoe, args.bits = 1, quantized[0].bits
        for fc, weights, n in zip(quantized, (fc1, fc2), "12"):
            setattr(args, f"block{n}", fc.block)
            setattr(args, f"panels{n}", int(fc.panels))
            # one table per constant (the same address in every recording: a family's argument blocks agree); panels:
            # the constants themselves (the default zero points none)
            tables = (fc.scales, fc.zero) if fc.panels else constants.derived(
                weights.array, f"qmoe_tables_{fc.bits}_{fc.block}_{id(fc.sources[0])}_{id(fc.sources[1])}",
                lambda _, fc=fc: (np.ascontiguousarray(fc.scales), np.ascontiguousarray(fc.zero)))
            for name, table in zip(("scale", "zero"), rec.keep(tables)):
                setattr(args, f"{name}{n}", ffi.NULL if table is None else ffi.cast("float*", ffi.from_buffer(table)))
            packed = None if fc.panels else fc.sources[1]  # as given: MatMulNBits' kernel reads them (program.c)
            if packed is not None:
                packed = rec.keep(np.ascontiguousarray(packed))
                setattr(args, f"packed_zero{n}", ffi.cast("uint8_t*", ffi.from_buffer(packed)))
    fusion, k = 2 if act == "swiglu" else 1, args.k  # program.h SEAMLESS_OP_MOE's scratch
    chunk = lib.SEAMLESS_MOE_CHUNK * ((fusion + 1) * inter + max(args.hidden, inter) + 1)
    gemm = tokens * (2 * args.hidden + (fusion + 1) * inter + 1) + \
        (lib.SEAMLESS_MOE_GEMM_ROWS * max(args.hidden, inter) if quantized else 0)
    scratch = rec.value(np.empty(experts + 2 * tokens * k + tokens + chunk + gemm, np.float32))
    y = rec.value(outs[0])
    rec.step(lib.SEAMLESS_OP_MOE, args, [x, router, fc1, b1, fc2, b2, y, scratch])
    return [y]


@lowers("MoE", domain="com.microsoft")
def moe(rec, node, ins, outs):
    from .moe import moe_geometry
    x, router, fc1, b1, fc2, b2 = (ins + [None] * 6)[:6]
    weights = [v for v in (fc1, b1, fc2, b2) if v is not None]
    if x.array.dtype != F32 or router.array.dtype != F32 or not all(v.static for v in weights):
        raise Declined("float32, constant expert weights")
    act = node.attrs.get("activation_type", "relu")
    tokens, experts, inter = moe_geometry(x.array, router.array, fc1.array, None if b1 is None else b1.array,
                                          fc2.array, None if b2 is None else b2.array, 2 if act == "swiglu" else 1,
                                          node.attrs.get("k", 1))
    return _moe_step(rec, node, x, router, fc1, b1, fc2, b2, tokens, experts, inter, outs)


@lowers("QMoE", domain="com.microsoft")
def qmoe(rec, node, ins, outs):
    from .moe import qmoe_geometry, quantized_experts
    x, router, fc1, s1, b1, fc2, s2, b2 = (ins + [None] * 8)[:8]
    z1, z2, _, router_weights = (ins + [None] * 15)[11:15]
    weights = [v for v in (fc1, s1, b1, fc2, s2, b2, z1, z2) if v is not None]
    if (x.array.dtype != F32 or router.array.dtype != F32 or not all(v.static for v in weights)
            or router_weights is not None):
        raise Declined("float32, constant expert weights, scales and zero points, no router_weights")
    attrs = node.attrs
    array = lambda v: None if v is None else v.array
    fusion, zero_points, bits = 2 if attrs.get("activation_type") == "swiglu" else 1, (array(z1), array(z2)), \
        attrs.get("expert_weight_bits", 4)
    tokens, experts, inter, *blocks = qmoe_geometry(
        x.array, router.array, fc1.array, array(s1), array(b1), fc2.array, array(s2), array(b2), zero_points, fusion,
        attrs.get("k", 1), bits, attrs.get("block_size", 0), attrs.get("panels", 0))
    fc1q, fc2q = quantized_experts(fc1.array, s1.array, fc2.array, s2.array, zero_points, bits, blocks, experts, inter,
                                   x.array.shape[-1], fusion, attrs.get("panels", 0))
    return _moe_step(rec, node, x, router, fc1, b1, fc2, b2, tokens, experts, inter, outs, (fc1q, fc2q))


PAD_MODES = {"constant": 0, "reflect": 1, "edge": 2, "wrap": 3}


@lowers("Pad")
def pad(rec, node, ins, outs):
    from .shape import pad_geometry, pad_value
    x = ins[0]
    mode = node.attrs.get("mode", "constant")
    if node.since_version >= 11:
        rest = (ins + [None] * 4)[1:4]
        if not all(v is None or v.static for v in rest):
            raise Declined("pads, value and axes known per binding")
        pads, value, axes = (None if v is None else v.array for v in rest)
        begin, _ = pad_geometry(x.array, [int(v) for v in pads.reshape(-1)], mode,
                                None if axes is None else [int(v) for v in axes.reshape(-1)])
        value = pad_value(x.array, value)
    else:
        begin, _ = pad_geometry(x.array, node.attrs["pads"], mode)
        value = np.array(node.attrs.get("value", 0.0), x.array.dtype)
    y_arr = outs[0]
    if (not plain_memory(x.array.dtype) or x.array.ndim > lib.SEAMLESS_PROGRAM_RANK or x.array.itemsize > 8
            or (mode != "constant" and min(begin + [0]) < 0) or not y_arr.size):
        raise Declined("a mode other than constant with a crop, or no output")
    args = rec.args("SeamlessPadArgs")
    args.rank, args.mode, args.elem_bytes = x.array.ndim, PAD_MODES[mode], x.array.itemsize
    args.x_dims[0:x.array.ndim] = list(x.array.shape)
    args.y_dims[0:x.array.ndim] = list(y_arr.shape)
    args.begin[0:x.array.ndim] = begin
    args.value[0:value.itemsize] = list(value.tobytes())
    y = rec.value(y_arr)
    rec.step(lib.SEAMLESS_OP_PAD, args, [x, y])
    return [y]


REDUCE = {"ReduceSum": lib.SEAMLESS_REDUCE_SUM, "ReduceMean": lib.SEAMLESS_REDUCE_MEAN,
          "ReduceSumSquare": lib.SEAMLESS_REDUCE_SUM_SQUARE, "ReduceL1": lib.SEAMLESS_REDUCE_L1,
          "ReduceL2": lib.SEAMLESS_REDUCE_L2, "ReduceMax": lib.SEAMLESS_REDUCE_MAX,
          "ReduceMin": lib.SEAMLESS_REDUCE_MIN}


@lowers(*REDUCE)
def reduce(rec, node, ins, outs):
    from .reduction import reduced_axes, stock_path
    x = ins[0].array
    if not (x.dtype == F32 or (x.dtype == np.int64 and node.op_type == "ReduceSum")) or not x.size or not x.ndim:
        raise Declined(f"{node.op_type} of {x.dtype} {x.shape}")
    extreme = node.op_type in ("ReduceMax", "ReduceMin")
    axes = node.attrs.get("axes")
    if len(ins) > 1 and ins[1] is not None:
        if not ins[1].static:
            raise Declined("its axes come from the run's data")
        axes = ins[1].array.reshape(-1).tolist()
    if not axes and node.attrs.get("noop_with_empty_axes", 0):
        raise Declined("a reduction over no axis")
    reduced = reduced_axes(x.ndim, axes)
    path = stock_path(x.shape, reduced)[0] if extreme else "rows"
    if path not in ("rows", "loop"):  # stock's order of combination with NaN: the Python kernel's replay
        raise Declined(f"{node.op_type} by stock's {path!r} path")
    return _reduce_step(rec, REDUCE[node.op_type], ins[0], reduced, outs[0], eigen_rows=extreme and path == "rows")


def _reduce_step(rec, op, x, reduced, y_array, eigen_rows=False):
    """A reduction step of x (a Value) over the `reduced` axes into y_array's value (program.h SeamlessReduceArgs;
    eigen_rows: Max and Min over each output's contiguous row in Eigen's order)."""
    shape = x.array.shape
    strides = _contiguous_strides(shape)
    kept = [d for d in range(len(shape)) if d not in reduced]
    dims, (kept_strides,) = _merged([shape[d] for d in kept], [strides[d] for d in kept])
    rdims, (rstrides,) = _merged([shape[d] for d in reduced], [strides[d] for d in reduced])
    args = rec.args("SeamlessReduceArgs")
    args.op, args.type, args.rank, args.reduced_rank = op, type_code(x.array.dtype), len(dims), len(rdims)
    args.eigen_rows = int(eigen_rows)
    _fill(args, "dims", dims)
    _fill(args, "strides", kept_strides)
    _fill(args, "reduced_dims", rdims)
    _fill(args, "reduced_strides", rstrides)
    y = rec.value(y_array)
    rec.step(lib.SEAMLESS_OP_REDUCE, args, [x, y])
    return [y]


@lowers("MatMulNBits", domain="com.microsoft")
def matmul_nbits(rec, node, ins, outs):
    a, b, scales, zero_points, g_idx, bias = (list(ins) + [None] * 6)[:6]
    attrs = node.attrs
    bits, K, N = attrs.get("bits", 4), attrs["K"], attrs["N"]
    if (a.array.dtype != F32 or g_idx is not None or bits == 2 or not native.HAS_MATMUL_NBITS or not b.array.size
            or not all(v is None or v.static for v in (b, scales, zero_points, bias))):
        raise Declined("float32 activations, constant 4- or 8-bit weights without g_idx")
    zp = None if zero_points is None else zero_points.array
    weights = rec.keep(native._weights(b.array, scales.array, zp, None if bias is None else bias.array, bits,
                                       attrs["block_size"], K, N))
    rec.keep([v.array for v in (b, scales, zero_points, bias) if v is not None])
    args = rec.args("SeamlessNBitsArgs")
    args.m, args.k, args.n = a.array.size // K, K, N
    args.bits, args.block_size = bits, attrs["block_size"]
    args.panels = attrs.get("panels", 0)
    args.int8 = int(native.nbits_int8(attrs.get("accuracy_level", 0), zp, args.panels))
    args.b, args.scales, args.zp_u8, args.zp_f32, args.bias = weights[:5]
    y = rec.value(outs[0])
    rec.step(lib.SEAMLESS_OP_MATMUL_NBITS, args, [a, y])
    return [y]


def _rms_step(rec, x, skip, bias, gamma, y_array, sum_array, inv_array, eps):
    """x (+ skip + bias) RMS-normalized over its last axis times gamma: the outputs asked for (None: not)."""
    xa = x.array
    cols = gamma.array.size
    if (xa.dtype != F32 or not xa.size or xa.shape[-1] != cols or gamma.array.dtype != F32
            or any(v is not None and (v.array.dtype != F32 or not v.array.size) for v in (skip, bias))
            or (skip is not None and (skip.array.shape[-1] != cols or xa.size % skip.array.size))
            or (bias is not None and bias.array.size != cols)):
        raise Declined("float32 rows with one gamma (and bias) per column, skip whole rows")
    args = _rows(rec, xa.size // cols, cols, eps)
    args.skip_rows = 0 if skip is None else skip.array.size // cols
    outs = [None if a is None else rec.value(a) for a in (y_array, sum_array, inv_array)]
    if outs[2] is None:  # the kernel always writes the inverse RMS: a scratch value when no output wants it
        outs[2] = rec.value(np.empty(xa.size // cols, F32))
    rec.step(lib.SEAMLESS_OP_RMS_NORM, args, [x, skip, bias, gamma, *outs])
    return outs


@lowers("SimplifiedLayerNormalization", "RMSNormalization")
def rms_norm(rec, node, ins, outs):
    x = ins[0].array
    axis = node.attrs.get("axis", -1) % max(x.ndim, 1)
    if axis != x.ndim - 1:
        raise Declined("normalization over several axes")
    inv = outs[1] if len(outs) > 1 and node.outputs[1] else None
    y, _, inv_value = _rms_step(rec, ins[0], None, None, ins[1], outs[0], None, None if inv is None else
                                inv.reshape(-1), node.attrs.get("epsilon", 1e-5))
    result = [y]
    if inv is not None:
        result.append(rec.view(inv_value, inv))
    return result


@lowers("SkipSimplifiedLayerNormalization", domain="com.microsoft")
def skip_rms_norm(rec, node, ins, outs):
    x, skip, gamma = ins[:3]
    bias = ins[3] if len(ins) > 3 else None
    wanted = [i < len(node.outputs) and bool(node.outputs[i]) for i in range(4)]
    if wanted[1]:
        raise Declined("its mean output is read")
    inv = outs[2].reshape(-1) if wanted[2] else None
    y, s, inv_value = _rms_step(rec, x, skip, bias, gamma, outs[0], outs[3] if wanted[3] else None, inv,
                                node.attrs.get("epsilon", 1e-12))
    return [y, None, rec.view(inv_value, outs[2]) if wanted[2] else None, s]


@lowers("SkipLayerNormalization", domain="com.microsoft")
def skip_layer_norm(rec, node, ins, outs):
    """(x + skip [+ bias]) by Add steps (the sum in its output when read), then the LayerNormalization step."""
    x, skip, gamma = ins[:3]
    beta, bias = (list(ins[3:]) + [None, None])[:2]
    wanted = [i < len(node.outputs) and bool(node.outputs[i]) for i in range(4)]
    xa = x.array
    cols = xa.shape[-1] if xa.ndim else 0
    if wanted[1] or wanted[2]:
        raise Declined("its mean or inverse deviation is read")
    if (xa.dtype != F32 or not xa.size or skip.array.dtype != F32
            or np.broadcast_shapes(skip.array.shape, xa.shape) != xa.shape
            or any(v is not None and (v.array.dtype != F32 or v.array.size != cols) for v in (gamma, beta, bias))):
        raise Declined("float32, a skip broadcast to the input, one gamma (beta, bias) per column")
    total = outs[3] if wanted[3] else np.empty(xa.shape, F32)
    first = total if bias is None else np.empty(xa.shape, F32)
    s = rec.value(first)
    rec.step(lib.SEAMLESS_OP_BINARY, _elementwise_args(rec, lib.SEAMLESS_ADD, first, [x, skip]), [x, skip, s])
    if bias is not None:  # as the Python kernel: (x + skip) + bias
        summed = rec.value(total)
        rec.step(lib.SEAMLESS_OP_BINARY, _elementwise_args(rec, lib.SEAMLESS_ADD, total, [s, bias]), [s, bias, summed])
        s = summed
    y = rec.value(outs[0])
    rec.step(lib.SEAMLESS_OP_LAYERNORM, _rows(rec, xa.size // cols, cols, node.attrs.get("epsilon", 1e-12)),
             [s, gamma, beta, y])
    return [y, None, None, s if wanted[3] else None]


_ZERO_SINKS: dict[int, np.ndarray] = {}  # smooth softmax without head_sink: a zero sink per head


@lowers("GroupQueryAttention", domain="com.microsoft")
def group_query_attention(rec, node, ins, outs):
    from .attention import gqa_layout
    q, k, v, past_k, past_v, seqlens, total = (list(ins) + [None] * 7)[:7]
    a = node.attrs
    rest = list(ins[7:])
    do_rotary = a.get("do_rotary", 0)
    cos, sin = (rest + [None, None])[:2]
    extra = rest[2:]  # position_ids, attention_bias, head_sink, the quantized cache's scales, …
    sink_value = extra[2] if len(extra) > 2 else None
    if (any(v is not None for v in extra[:2] + extra[3:]) or (sink_value is not None and not sink_value.static)
            or total is None or not total.static or seqlens is None or seqlens.array.dtype != np.int32
            or any(v is not None and v.array.dtype != F32 for v in (q, k, v, past_k, past_v))
            or (do_rotary and not (cos.static and sin.static))):
        raise Declined("float32, total_sequence_length and rotary caches constant, no position_ids/bias/"
                       "quantized cache")
    nh, nkv = a["num_heads"], a["kv_num_heads"]
    window_cache = a.get("local_window_size", -1) if a.get("sliding_window_cache", 0) else 0
    h, first_prompt, present_len, _ = gqa_layout(q.array.shape, k is None, None if past_k is None else
                                                 past_k.array.shape, None, total.array, nh, nkv,
                                                 cos.array.shape if do_rotary else None, window_cache)
    b, s = q.array.shape[:2]
    args = rec.args("SeamlessGqaArgs")
    args.b, args.s, args.num_heads, args.kv_num_heads, args.head_size = b, s, nh, nkv, h
    args.q_row = q.array.shape[2]
    args.k_row = args.q_row if k is None else k.array.shape[2]
    args.v_row = args.q_row if k is None else v.array.shape[2]
    args.k_offset, args.v_offset = nh * h, (nh + nkv) * h
    args.past_len = 0 if past_k is None else past_k.array.shape[2]
    args.present_len, args.total = present_len, int(np.asarray(total.array).reshape(-1)[0])
    args.window, args.first_prompt, args.causal = a.get("local_window_size", -1), int(first_prompt), a.get("causal", 1)
    args.window_cache = int(bool(window_cache))
    args.interleaved = a.get("rotary_interleaved", 0)
    scale = a.get("scale", 0.0)
    args.scale = float(scale) if scale != 0.0 else 1.0 / float(np.sqrt(np.float32(h)))
    args.softcap = a.get("softcap", 0.0)
    if do_rotary:
        cos_c, sin_c = (rec.keep(np.ascontiguousarray(c.array, np.float32)) for c in (cos, sin))
        args.cos, args.sin = (ffi.cast("float*", ffi.from_buffer(c)) for c in (cos_c, sin_c))
        args.half = cos_c.shape[1]
    if a.get("smooth_softmax", -1) == 1 or sink_value is not None:
        # the same address in every recording (a family's argument blocks agree): one table per constant
        sink = _ZERO_SINKS.setdefault(nh, np.zeros(nh, F32)) if sink_value is None else constants.derived(
            sink_value.array, "gqa_sinks", lambda s: np.ascontiguousarray(s, F32).reshape(nh))
        args.sink = ffi.cast("float*", ffi.from_buffer(rec.keep(sink)))
    if past_k is not None and past_k.array.shape != (b, nkv, args.past_len, h):
        raise Declined("a past cache of another layout")
    y, pk, pv = (rec.value(o) for o in outs[:3])
    rec.step(lib.SEAMLESS_OP_GQA, args, [q, k, v, past_k, past_v, seqlens, y, pk, pv])
    return [y, pk, pv]


@lowers("GatedAdd", domain="com.microsoft")
def gated_add(rec, node, ins, outs):
    from .elementwise import gated_add_shapes
    x, y, gate = ins[:3]
    if any(v.array.dtype != F32 for v in (x, y, gate)):
        raise Declined("float32 only")
    gated_add_shapes(x.array.shape, y.array.shape, gate.array.shape)
    product, out = rec.value(outs[0]), rec.value(outs[0])  # two steps: the product rounded before the add
    rec.step(lib.SEAMLESS_OP_BINARY, _elementwise_args(rec, lib.SEAMLESS_MUL, outs[0], [y, gate]), [y, gate, product])
    rec.step(lib.SEAMLESS_OP_BINARY, _elementwise_args(rec, lib.SEAMLESS_ADD, outs[0], [x, product]), [x, product, out])
    return [out]


# ---------------------------------------------------------------- linear-attention layers (Qwen3.5's)

@lowers("LinearAttention", domain="com.microsoft")
def linear_attention(rec, node, ins, outs):
    from .attention import linear_attention_geometry
    q, k, v, past, decay, beta = (list(ins) + [None] * 6)[:6]
    if any(x is not None and x.array.dtype != F32 for x in (q, k, v, past, decay, beta)):
        raise Declined("float32 only")
    a = node.attrs
    rule, qh, kv = a.get("update_rule", "gated_delta"), a["q_num_heads"], a["kv_num_heads"]
    shape = lambda x: None if x is None else x.array.shape  # noqa: E731
    d_k, d_v, k_heads = linear_attention_geometry(q.array.shape, k.array.shape, v.array.shape, shape(past),
                                                  shape(decay), shape(beta), qh, kv, rule)
    args = rec.args("SeamlessLinearAttentionArgs")
    args.batch, args.tokens = q.array.shape[:2]
    args.q_heads, args.kv_heads, args.k_heads, args.d_k, args.d_v = qh, kv, k_heads, d_k, d_v
    args.gated, args.delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    args.decay_per_key = bool(args.gated) and decay.array.shape[2] == kv * d_k
    args.beta_per_head = bool(args.delta) and beta.array.shape[2] == kv
    args.scale = a.get("scale", 0.0) or 1.0 / math.sqrt(d_k)
    y, present = rec.value(outs[0]), rec.value(outs[1])
    scratch = rec.value(np.empty(args.batch * kv * d_v, np.float32))
    rec.step(lib.SEAMLESS_OP_LINEAR_ATTENTION, args, [q, k, v, past, decay if args.gated else None,
                                                      beta if args.delta else None, y, present, scratch])
    return [y, present]


@lowers("GatedDeltaNet", domain="com.microsoft")
def gated_delta_net(rec, node, ins, outs):
    """LinearAttention's step with GatedDeltaNet's fusions as steps before it: the softplus gate and the beta sigmoid
    (LinearAttentionGate's step, its scale -exp(a_log)), the query/key L2 norms (the Lp norm step, its 1e-12 floor),
    the state transposed in and out ([B, H_v, d_v, d_k] against LinearAttention's [B, H_v, d_k, d_v]). Uniform
    requests of separate q, k and v, one decay and beta a value head (ragged, packed, per-key and sigmoid-gated
    exports keep the Python kernel)."""
    query, key, value, cu_seqlens, decay, beta, state, a_log, dt_bias = (list(ins) + [None] * 9)[:9]
    a = node.attrs
    rule, gate = a.get("update_rule", "gated_delta"), a.get("gate_activation", "none")
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if (key is None or value is None or cu_seqlens is not None or state is None
            or gate not in ("none", "softplus", "qwen")
            or any(v is not None and v.array.dtype != F32 for v in (query, key, value, decay, beta, state))):
        raise Declined("float32 q, k and v apart, uniform requests, an initial state, no gate or a softplus one")
    rank4 = query.array.ndim == 4
    tokens = query.array.shape[0] * query.array.shape[1] if rank4 else query.array.shape[0]
    h_q, d_k = query.array.shape[-2:]
    h_v, d_v = value.array.shape[-2:]
    batch = state.array.shape[0]
    if ((gated and decay.array.size != tokens * h_v) or (delta and beta.array.size != tokens * h_v)
            or (gated and gate != "none" and not (a_log.static and dt_bias.static and dt_bias.array.size == h_v))):
        raise Declined("one decay and beta a value head, constant a_log and dt_bias")
    flat = lambda v, width: rec.view(v, v.array.reshape(batch, tokens // batch, width))  # noqa: E731
    g = decay
    sigmoid_beta = delta and a.get("beta_activation", "none") == "sigmoid"
    if gated and gate != "none":  # decay = -exp(a_log) softplus(decay + dt_bias), beta = sigmoid(beta) alongside
        scale = rec.constant((-np.exp(a_log.array.reshape(h_v).astype(F32))).astype(F32))
        g = rec.value(np.empty((tokens, h_v), F32))
        rate = rec.value(np.empty((tokens, h_v), F32)) if sigmoid_beta else None
        rec.step(lib.SEAMLESS_OP_LINEAR_ATTENTION_GATE, _row_norm(rec, tokens, h_v),
                 [rec.view(decay, decay.array.reshape(tokens, h_v)), rec.constant(dt_bias.array.reshape(h_v)), scale,
                  beta if sigmoid_beta else None, g, rate])
        beta = rate if sigmoid_beta else beta
    elif sigmoid_beta:
        rate = rec.value(np.empty((tokens, h_v), F32))
        args = rec.args("SeamlessUnaryArgs")
        args.op, args.type, args.n = lib.SEAMLESS_SIGMOID, type_code(F32), tokens * h_v
        rec.step(lib.SEAMLESS_OP_UNARY, args, [beta, rate])
        beta = rate
    q, k = query, key
    if a.get("qk_l2_norm", 0):  # x / sqrt(max(sum x^2, 1e-12)) over each head's d_k
        q, k = rec.value(np.empty((tokens, h_q, d_k), F32)), rec.value(np.empty((tokens, h_q, d_k), F32))
        for x, y in ((query, q), (key, k)):
            rec.step(lib.SEAMLESS_OP_LP_NORM, _row_norm(rec, tokens * h_q, d_k, eps=1e-12, mode=2), [x, y])
    past = rec.value(np.empty((batch, h_v, d_k, d_v), F32))
    _strided_copy(rec, state, past, (batch, h_v, d_k, d_v), (h_v * d_v * d_k, d_v * d_k, 1, d_k),
                  _contiguous_strides((batch, h_v, d_k, d_v)))
    args = rec.args("SeamlessLinearAttentionArgs")
    args.batch, args.tokens = batch, tokens // batch
    args.q_heads, args.kv_heads, args.k_heads, args.d_k, args.d_v = h_q, h_v, h_q, d_k, d_v
    args.gated, args.delta, args.decay_per_key, args.beta_per_head = gated, delta, 0, 1
    args.scale = a.get("scale", 0.0) or 1.0 / math.sqrt(d_k)
    y, present = rec.value(outs[0]), rec.value(np.empty((batch, h_v, d_k, d_v), F32))
    scratch = rec.value(np.empty(batch * h_v * d_v, np.float32))
    rec.step(lib.SEAMLESS_OP_LINEAR_ATTENTION, args,
             [flat(q, h_q * d_k), flat(k, h_q * d_k), flat(value, h_v * d_v), past,
              flat(g, h_v) if gated else None, flat(beta, h_v) if delta else None, y, present, scratch])
    final = rec.value(outs[1])
    _strided_copy(rec, present, final, (batch, h_v, d_v, d_k), (h_v * d_k * d_v, d_k * d_v, 1, d_v),
                  _contiguous_strides((batch, h_v, d_v, d_k)))
    return [y, final]


@lowers("MRotaryEmbedding", domain="com.microsoft")
def m_rotary_embedding(rec, node, ins, outs):
    from .attention import mrope_streams, mrotary_geometry
    x, pos, cos, sin = ins[:4]
    if x.array.dtype != F32 or not (cos.static and sin.static):
        raise Declined("float32, constant caches")
    a = node.attrs
    section, layout = list(a["mrope_section"]), a.get("mrope_layout", 0)
    n, h, rot = mrotary_geometry(x.array.shape, pos.array.shape, cos.array.shape, sin.array.shape,
                                 a.get("num_heads", 0), a.get("rotary_embedding_dim", 0), section, layout)
    if rot // 2 > 1024:
        raise Declined(f"{rot // 2} rotary columns (native/cpu/attention.c MROTARY_HALF_MAX: 1024)")
    args = rec.args("SeamlessMRotaryArgs")
    shape = x.array.shape
    args.batch, args.heads, args.head, args.half = shape[0], n, h, rot // 2
    if len(shape) == 3:  # (B, S, N * H)
        args.seq, args.head_stride, args.seq_stride = shape[1], h, n * h
    else:                # (B, N, S, H)
        args.seq, args.seq_stride, args.head_stride = shape[2], h, shape[2] * h
    args.batch_stride, args.max_pos = args.seq * n * h, cos.array.shape[0]
    args.interleaved, args.scale = a.get("interleaved", 0), a.get("scale", 1.0)
    caches = [rec.keep(np.ascontiguousarray(c.array, np.float32)) for c in (cos, sin)]
    args.cos, args.sin = (ffi.cast("float*", ffi.from_buffer(c)) for c in caches)
    # one table per cache constant: the same address in every recording (a family's argument blocks agree)
    owner = rec.keep(constants.derived(cos.array, f"mrope_streams_{layout}_{section}_{rot}",
                                       lambda _: mrope_streams(section, layout, rot // 2)))
    args.owner = ffi.cast("int8_t*", ffi.from_buffer(owner))
    y = rec.value(outs[0])
    rec.step(lib.SEAMLESS_OP_MROTARY, args, [x, pos, y])
    return [y]


def _row_norm(rec, rows, cols, eps=0.0, mode=0):
    args = rec.args("SeamlessRowNormArgs")
    args.rows, args.cols, args.eps, args.mode = rows, cols, eps, mode
    return args


@lowers("GatedRMSNorm", domain="com.microsoft")
def gated_rms_norm(rec, node, ins, outs):
    from .normalization import GATED_RMS_ACTIVATIONS, gated_rms_rows
    x, scale, gate = ins[:3]
    if any(v.array.dtype != F32 for v in (x, scale, gate)):
        raise Declined("float32 only")
    c = scale.array.size
    rows = gated_rms_rows(x.array.shape, gate.array.shape, c)
    act = GATED_RMS_ACTIVATIONS[node.attrs.get("activation", "silu")]
    y = rec.value(outs[0])
    rec.step(lib.SEAMLESS_OP_GATED_RMS_NORM, _row_norm(rec, rows, c, node.attrs.get("epsilon", 1e-5), act),
             [x, scale, gate, y])
    return [y]


@lowers("LpNormalization")
def lp_normalization(rec, node, ins, outs):
    x = ins[0]
    shape, p = x.array.shape, node.attrs.get("p", 2)
    last = bool(shape) and node.attrs.get("axis", -1) % len(shape) == len(shape) - 1
    if x.array.dtype != F32 or p not in (1, 2) or not last:
        raise Declined("float32, p 1 or 2, over the last axis")
    y = rec.value(outs[0])
    rec.step(lib.SEAMLESS_OP_LP_NORM, _row_norm(rec, x.array.size // max(shape[-1], 1), shape[-1], mode=p), [x, y])
    return [y]


@lowers("LinearAttentionGate", domain="com.microsoft")
def linear_attention_gate(rec, node, ins, outs):
    a, dt_bias, decay_scale, b = (list(ins) + [None] * 4)[:4]
    if any(v is not None and v.array.dtype != F32 for v in (a, dt_bias, decay_scale, b)):
        raise Declined("float32 only")
    heads = a.array.shape[-1]
    decay = rec.value(outs[0])
    beta = rec.value(outs[1]) if b is not None and len(outs) > 1 and outs[1] is not None else None
    rec.step(lib.SEAMLESS_OP_LINEAR_ATTENTION_GATE, _row_norm(rec, a.array.size // heads, heads),
             [a, dt_bias, decay_scale, b if beta is not None else None, decay, beta])
    return [decay, beta]


@lowers("GatherBlockQuantized", domain="com.microsoft")
def gather_block_quantized(rec, node, ins, outs):
    data, indices, scales = ins[:3]
    zero_points = ins[3] if len(ins) > 3 else None
    a = node.attrs
    bits, bs = a.get("bits", 4), a.get("block_size", 128)
    qaxis = a.get("quantize_axis", 1) % max(data.array.ndim, 1)
    if (data.array.ndim != 2 or qaxis != 1 or a.get("gather_axis", 0) != 0 or indices.array.dtype != np.int64
            or scales.array.dtype != F32 or not native.HAS_GATHER_BLOCK_QUANTIZED
            or (data.array.shape[1] * (8 // bits)) % bs
            or not all(v is None or v.static for v in (data, scales, zero_points))):
        raise Declined("a constant 2-D table quantized along its rows, int64 indices")
    table = rec.keep(np.ascontiguousarray(data.array))
    sc = rec.keep(np.ascontiguousarray(scales.array, np.float32))
    args = rec.args("SeamlessGatherQuantizedArgs")
    args.rows, args.cols = table.shape[0], table.shape[1] * (8 // bits)
    args.count, args.bits, args.block_size = indices.array.size, bits, bs
    args.panels = a.get("panels", 0)
    args.data = ffi.cast("uint8_t*", ffi.from_buffer(table))
    args.scales = ffi.cast("float*", ffi.from_buffer(sc))
    if zero_points is not None:
        zp = rec.keep(np.ascontiguousarray(zero_points.array))
        args.zero_points = ffi.cast("uint8_t*", ffi.from_buffer(zp))
    y = rec.value(outs[0])
    rec.step(lib.SEAMLESS_OP_GATHER_BLOCK_QUANTIZED, args, [indices, y])
    return [y]



# ---------------------------------------------------------------- Python steps

# the inputs whose values (not only shapes) set an op's output shapes: with such an input from the run's data, a node
# cannot be a Python step of a program (its outputs' sizes are fixed when the binding is recorded)
SHAPE_INPUTS = {
    "Reshape": {1}, "Expand": {1}, "Tile": {1}, "Slice": {1, 2, 3, 4}, "Pad": {1, 3}, "Resize": {1, 2, 3},
    "Upsample": {1}, "TopK": {1}, "Range": {0, 1, 2}, "ConstantOfShape": {0}, "OneHot": {1}, "Squeeze": {1},
    "Unsqueeze": {1}, "Split": {1}, "Compress": {0, 1}, "NonZero": {0}, "Unique": {0},
    "NonMaxSuppression": {0, 1, 2, 3, 4}, "CenterCropPad": {1}, "Col2Im": {1, 2}, "DFT": {1}, "STFT": {2, 3},
    "MaxUnpool": {2}, "AffineGrid": {1}, "GroupQueryAttention": {6}, "BlackmanWindow": {0}, "HannWindow": {0},
    "HammingWindow": {0}, "MelWeightMatrix": {0, 1, 2, 3, 4}, "StringSplit": {0}, "RegexFullMatch": set(),
    "If": {0},  # the branch taken (a static condition: exec/program.py records the branch in line)
    **{op: {1} for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                          "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")},
}


class PythonStep:
    """A node run by its Python kernel inside a native program: views over its operands' slots, the kernel, the
    results copied into the output slots (whose shapes the binding fixed). user: a user's kernel (kernels/user.py)
    by name, which its errors name; it may return one array for a node of one output."""

    def __init__(self, node, fn, inputs: list, outputs: list, user: str = ""):
        self.node, self.fn, self.user = node, fn, user
        self.inputs = [None if a is None else (a.dtype, a.shape) for a in inputs]
        self.outputs = [(a.dtype, a.shape) for a in outputs]

    def run(self, operands) -> None:
        args, k = [], 0
        for spec in self.inputs:
            if spec is None:
                args.append(None)
                continue
            dtype, shape = spec
            view = np.frombuffer(ffi.buffer(operands[k], dtype.itemsize * math.prod(shape)), dtype).reshape(shape) \
                if math.prod(shape) else np.empty(shape, dtype)
            view.flags.writeable = False  # the program's values: never written by a kernel
            args.append(view)
            k += 1
        try:
            results = self.fn(*args)
        except Exception as exc:
            if not self.user:
                raise
            raise RuntimeError(f"node {self.node.label!r} ({self.node.key}): the user kernel {self.user} raised "
                               f"{type(exc).__name__}: {exc}") from exc
        if results.__class__ is np.ndarray:
            results = (results,)
        for (dtype, shape), result in zip(self.outputs, results):
            result = np.asarray(result)
            if result.shape != shape or result.dtype != dtype:
                raise RuntimeError(f"{self.node.key} gave {result.dtype} {result.shape} where the recorded binding "
                                   f"has {dtype} {shape}")
            if result.size:
                np.copyto(np.frombuffer(ffi.buffer(operands[k], result.nbytes), dtype).reshape(shape), result)
            k += 1


@ffi.def_extern()
def seamless_python_step(handle, operands, error, error_len):
    step = ffi.from_handle(handle)
    try:
        numpy_memory.plain(step.run, operands)
        return 0
    except Exception as exc:  # the program stops; the runner turns the code and message into ORT's status
        message = f"{type(exc).__name__}: {exc}".encode("utf-8", "replace")[:max(error_len - 1, 0)]
        ffi.memmove(error, message, len(message))
        error[len(message)] = b"\0"
        return status_code(exc)


def python_step(rec, node, fn, ins, outs, user: str = "") -> list:
    """The node as a Python step of the program, or Declined (its outputs' shapes could follow the run's data, or
    its values are not plain memory). user: a user's kernel, by name (PythonStep)."""
    shaped = SHAPE_INPUTS.get(node.op_type, set())
    dynamic = [i for i, v in enumerate(ins) if v is not None and not v.static]
    if shaped & set(dynamic):
        raise Declined("its output shapes follow the run's data")
    present = [v for v in ins if v is not None]
    if len(present) + len(outs) > lib.SEAMLESS_STEP_OPERANDS:
        raise Declined(f"more than {lib.SEAMLESS_STEP_OPERANDS} operands for a Python step")
    if not all(plain_memory(a.dtype) for a in [v.array for v in present] + list(outs)):
        raise Declined("values that are no plain memory (sub-byte packed types)")
    step = PythonStep(node, fn, [None if v is None else v.array for v in ins], outs, user)
    args = rec.args("SeamlessPythonArgs")
    args.handle = rec.keep(ffi.new_handle(step))
    args.n_operands = len(present) + len(outs)
    ys = [rec.value(o) for o in outs]
    rec.step(lib.SEAMLESS_OP_PYTHON, args, [*present, *ys])
    rec.python_steps.append(node.key)
    return ys
