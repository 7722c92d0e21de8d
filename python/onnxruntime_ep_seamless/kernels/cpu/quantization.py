"""Linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, QLinearMatMul,
QLinearConv, ConvInteger (ONNX semantics); ORT's block-quantized weight ops (com.microsoft): MatMulNBits,
GatherBlockQuantized.

Scale and zero point are a scalar (per tensor), a vector along `axis` (per axis), or, with
`block_size`, a tensor of x's shape with that axis divided into blocks (blocked). Quantized
integers round half to even and saturate to the type's range; as ORT does, arithmetic is float32.
"""
import dataclasses
import math

import numpy as np

from .. import checks
from ..registry import FLOATS, LOW_PRECISION, NUMERIC, kernel
from ...graph.ir import FLOAT8_TYPES, NUMPY_TO_ONNX, Value, attr_dtype, exotic
from . import native
from .elementwise import cast_array
from .spatial import conv

_F32 = np.dtype(np.float32)
_FLOAT4 = 23  # ORT's element type (graph/ir.py ONNX_TO_NUMPY)


def _range(dtype):
    """(min, max) of an integer quantized type (ml_dtypes' 4- and 2-bit types included)."""
    try:
        info = np.iinfo(dtype)
    except ValueError:
        import ml_dtypes
        info = ml_dtypes.iinfo(dtype)
    return int(info.min), int(info.max)


def _broadcastable(value, shape, axis, block_size):
    """Scale or zero point shaped to broadcast against x (see the module docstring)."""
    if value.ndim == 0 or value.size == 1 and not block_size:
        return value.reshape(())
    axis = checks.axis(axis, len(shape))
    if not block_size:
        if value.ndim != 1 or value.size != shape[axis]:
            raise ValueError(f"For per axis quantization, scale must be 1D tensor with size {shape[axis]}, got "
                             f"shape {value.shape}")
        dims = [1] * len(shape)
        dims[axis] = value.size
        return value.reshape(dims)
    blocks = -(-shape[axis] // block_size)
    if value.shape != tuple(blocks if a == axis else d for a, d in enumerate(shape)):
        raise ValueError(f"x_scale must be ceil(Di/block_size) on the quantize axis i for blocked quantization: "
                         f"scale {value.shape}, x {tuple(shape)}, axis {axis}, block_size {block_size}")
    return np.repeat(value, block_size, axis=axis).take(range(shape[axis]), axis=axis)


def _quantize(x, scale, zero_point, out_dtype, saturate=1):
    """x / scale (+ zero point), as out_dtype."""
    q = x.astype(_F32) / scale.astype(_F32)
    code = NUMPY_TO_ONNX.get(out_dtype)
    if code in FLOAT8_TYPES:
        return cast_array(q, out_dtype, saturate)  # a float8 zero point must be 0
    if code == _FLOAT4:
        return (q + (0 if zero_point is None else zero_point.astype(_F32))).astype(out_dtype)
    q = np.rint(q)
    if zero_point is not None:
        q += zero_point.astype(_F32)
    low, high = _range(out_dtype)
    return np.clip(q, low, high).astype(out_dtype)


def _dequantize(x, scale, zero_point):
    wide = x.astype(_F32)
    if zero_point is not None and NUMPY_TO_ONNX.get(x.dtype) not in FLOAT8_TYPES | {_FLOAT4}:
        wide = wide - zero_point.astype(_F32)
    return wide * scale.astype(_F32)


def _check_quantize(node, graph):
    if node.attrs.get("precision", 0) not in (0, 1):
        return f"precision={node.attrs['precision']} not supported (float32 arithmetic only)"
    out = graph.value(node.outputs[0]).dtype
    if out is not None and out not in NUMERIC and not exotic(out):
        return f"quantizing to {out} is not supported"
    return None


@kernel("QuantizeLinear", since=10, types=FLOATS | LOW_PRECISION | {np.dtype(np.int32)}, check=_check_quantize)
def quantize_linear(x, y_scale, y_zero_point=None, *, axis=1, block_size=0, output_dtype=0, precision=0,
                    saturate=1):
    if y_zero_point is not None:
        out_dtype = y_zero_point.dtype
    elif output_dtype:
        out_dtype = attr_dtype(output_dtype)
    else:
        out_dtype = np.dtype(np.uint8)
    scale = _broadcastable(y_scale, x.shape, axis, block_size)
    zero = None if y_zero_point is None else _broadcastable(y_zero_point, x.shape, axis, block_size)
    return (_quantize(x, scale, zero, out_dtype, saturate),)


@kernel("DequantizeLinear", since=10, types=NUMERIC | LOW_PRECISION)
def dequantize_linear(x, x_scale, x_zero_point=None, *, axis=1, block_size=0, output_dtype=0):
    scale = _broadcastable(x_scale, x.shape, axis, block_size)
    zero = None if x_zero_point is None else _broadcastable(x_zero_point, x.shape, axis, block_size)
    out_dtype = attr_dtype(output_dtype) if output_dtype else x_scale.dtype
    return (_dequantize(x, scale, zero).astype(out_dtype, copy=False),)


@kernel("DynamicQuantizeLinear", since=11, types={_F32})
def dynamic_quantize_linear(x):
    # uint8 over [min(x, 0), max(x, 0)]: the range always includes 0, so 0 is exactly representable;
    # an all-zero x gets scale 1 (stock ORT's choice; the spec's formula would divide by 0)
    low, high = x.min(initial=0), x.max(initial=0)
    scale = (high - low) / np.float32(255) if high != low else np.float32(1)
    zero_point = np.clip(np.rint(-low / scale), 0, 255)
    y = _quantize(x, scale, zero_point, np.dtype(np.uint8))
    return y, np.asarray(scale, _F32), np.asarray(zero_point, np.uint8)


# --- integer matmul and conv --------------------------------------------------------------

def _centered(q, zero_point, per_row=False):
    """q - zero_point as float64 (exact for 8- and 16-bit integers), a vector zero point per row of
    A (per_row) or per column of B."""
    wide = q.astype(np.float64)
    if zero_point is None:
        return wide
    z = zero_point.astype(np.float64)
    if z.ndim == 1 and z.size > 1 and per_row:
        z = z.reshape(-1, 1)
    return wide - z


def _requantize(acc, multiplier, y_zero_point):
    """Round acc * multiplier to y_zero_point's type, shifted by it. The product is float64, as in
    the spec's reference (ORT's float32 product rounds some halves the other way)."""
    y = np.rint(acc * multiplier.astype(np.float64)) + y_zero_point.astype(np.float64)
    low, high = _range(y_zero_point.dtype)
    return np.clip(y, low, high).astype(y_zero_point.dtype)


_INT8S = frozenset(map(np.dtype, (np.int8, np.uint8)))


@kernel("QLinearMatMul", since=10, types=_INT8S)
def qlinear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    acc = np.matmul(_centered(a, a_zero_point, per_row=True), _centered(b, b_zero_point))
    a_s = a_scale.reshape(-1, 1) if a_scale.size > 1 else a_scale
    # in float32 (float16 scales widened first), as stock computes it
    multiplier = a_s.astype(np.float32) * b_scale.astype(np.float32) / y_scale.astype(np.float32)
    return (_requantize(acc, multiplier, y_zero_point),)


def _conv_accumulate(x, x_zero_point, w, w_zero_point, attrs):
    """The int32 accumulator of an integer convolution, through float64 (exact)."""
    x = _centered(x, x_zero_point)
    w = w.astype(np.float64)
    if w_zero_point is not None:
        z = w_zero_point.astype(np.float64)
        w = w - (z.reshape((-1,) + (1,) * (w.ndim - 1)) if z.size > 1 else z)
    (acc,) = conv(x, w, **attrs)
    return acc


@kernel("ConvInteger", since=10, types=_INT8S)
def conv_integer(x, w, x_zero_point=None, w_zero_point=None, *, auto_pad="NOTSET", dilations=None, group=1,
                 kernel_shape=None, pads=None, strides=None):
    attrs = dict(auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads,
                 strides=strides)
    return (np.rint(_conv_accumulate(x, x_zero_point, w, w_zero_point, attrs)).astype(np.int32),)


@kernel("QLinearConv", since=10, types=_INT8S)
def qlinear_conv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B=None, *,
                 auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    attrs = dict(auto_pad=auto_pad, dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads,
                 strides=strides)
    acc = _conv_accumulate(x, x_zero_point, w, w_zero_point, attrs)
    spatial = (1,) * (acc.ndim - 2)
    if B is not None:
        acc = acc + B.astype(np.float64).reshape((-1,) + spatial)
    w_s = w_scale.astype(_F32)
    multiplier = x_scale.astype(_F32) * (w_s.reshape((-1,) + spatial) if w_s.size > 1 else w_s) \
        / y_scale.astype(_F32)
    return (_requantize(acc, multiplier, y_zero_point),)


# ORT's block-quantized weight ops (com.microsoft): MatMulNBits, GatherBlockQuantized.
#
# Semantics follow ORT's docs/ContribOperators.md; numerics follow ORT's CPU EP (MLAS):
# - MatMulNBits with accuracy_level 4, uint8 (or default) zero points and constant weights
#   (which ORT prepacks) runs MLAS's "CompInt8" path: each row of A is quantized to int8 per block of `block_size` along K
#   (scale = max|a| / 127, q = round-half-even(a * 127 / max|a|)), the block dot products are
#   exact integers, and each is scaled by scale_a * scale_b. We compute exactly that, so our
#   result differs from stock ORT only by float summation order (~1e-7 relative), where a float
#   dequantization would differ by the int8 rounding of A (~1e-3 relative).
# - Every other configuration (accuracy_level 0-3, float zero points, weights fed as graph
#   inputs) is "CompFp32": weights
#   dequantized to float32, (q - zero_point) * scale, then an ordinary float GEMM.
#
# float32 A only; the native kernels (native/cpu/quantization.c) cover 4- and 8-bit weights, a numpy
# path covers the rest (2-bit, odd shapes) with the same arithmetic.

F32 = np.dtype(np.float32)


# --- MatMulNBits ------------------------------------------------------------------------------


def _check_matmul_nbits(node, graph):
    bits = node.attrs.get("bits", 4)
    bs = node.attrs.get("block_size")
    K, N = node.attrs.get("K"), node.attrs.get("N")
    if bits not in (2, 4, 8):
        return f"bits={bits} not supported (2, 4 or 8)"
    if bs is None or bs < 16 or bs & (bs - 1):
        return f"block_size={bs} must be a power of two >= 16"
    if K is None or N is None:
        return "attributes K and N are required"
    if node.attrs.get("weight_prepacked", 0):
        return f"weight_prepacked={node.attrs['weight_prepacked']} (an EP-specific CUDA layout) not supported"
    a = graph.value(node.inputs[0]).dtype
    if a is not None and a != F32:
        return f"A of dtype {a} not supported (float32 only)"
    inputs = node.inputs + [""] * (6 - len(node.inputs))
    if inputs[4]:
        return "g_idx (deprecated input) not supported"
    zp = graph.value(inputs[3]).dtype if inputs[3] else None
    if zp is not None and zp not in (np.dtype(np.uint8), F32):
        return f"zero_points of dtype {zp} not supported (uint8 or float32)"
    if node.attrs.get("accuracy_level", 0) == 4 and not all(_is_constant(graph, n) for n in inputs[1:4] if n):
        # Stock ORT quantizes A to int8 only for weights it could prepack (constant initializers);
        # otherwise it dequantizes to float32. Record the compute type ORT will really use.
        node.attrs["accuracy_level"] = 0
    return None


def _is_constant(graph, name: str) -> bool:
    return name in graph.initializers or graph.value(name).const is not None


def _unpack(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """Low-bits-first unpacking along the last axis: [..., n] uint8 -> [..., count] uint8."""
    if bits == 8:
        return packed[..., :count]
    per = 8 // bits
    mask = (1 << bits) - 1
    parts = [(packed >> (bits * i)) & mask for i in range(per)]
    return np.stack(parts, axis=-1).reshape(*packed.shape[:-1], -1)[..., :count]


def _zero_points(zero_points, bits: int, N: int, nb: int) -> np.ndarray | None:
    """Zero points as float32 [N, nb] (None: the default 2^(bits-1))."""
    if zero_points is None:
        return None
    if zero_points.dtype == np.uint8:
        return _unpack(zero_points.reshape(N, -1), bits, nb).astype(np.float32)
    return zero_points.reshape(N, nb).astype(np.float32)


def dequantize_nbits(B, scales, zero_points, bits, block_size, K, N) -> np.ndarray:
    """The float32 weight matrix [K, N] that MatMulNBits multiplies by."""
    nb = (K + block_size - 1) // block_size
    q = _unpack(B.reshape(N, nb, -1), bits, block_size).astype(np.float32)
    zp = _zero_points(zero_points, bits, N, nb)
    zp = np.float32(2 ** (bits - 1)) if zp is None else zp[..., None]
    w = (q - zp) * scales.reshape(N, nb, 1).astype(np.float32)
    return w.reshape(N, nb * block_size)[:, :K].T


def quantize_a_int8(a2d: np.ndarray, block_size: int, nb: int):
    """MLAS's int8 quantization of A (CompInt8): per block, scale = amax/127, q = rint(a * 127/amax)."""
    m, k = a2d.shape
    ap = np.zeros((m, nb * block_size), np.float32)
    ap[:, :k] = a2d
    ab = ap.reshape(m, nb, block_size)
    amax = np.abs(ab).max(axis=-1)
    scale = amax / np.float32(127)
    inv = np.divide(np.float32(127), amax, out=np.zeros_like(amax), where=amax != 0)
    qa = np.rint(ab * inv[..., None])
    return qa, scale


def _matmul_nbits_numpy(a2d, B, scales, zero_points, bits, block_size, K, N, int8: bool):
    if not int8:
        return a2d @ dequantize_nbits(B, scales, zero_points, bits, block_size, K, N)
    nb = (K + block_size - 1) // block_size
    qa, sa = quantize_a_int8(a2d, block_size, nb)
    qb = _unpack(B.reshape(N, nb, -1), bits, block_size).astype(np.float32)
    zp = _zero_points(zero_points, bits, N, nb)
    qb -= np.float32(2 ** (bits - 1)) if zp is None else zp[..., None]
    # integer block dot products, exact in float32 (|sum| <= 127 * 255 * 256 < 2^24)
    dots = np.einsum("mbk,nbk->mnb", qa, qb)
    return np.einsum("mnb,mb,nb->mn", dots, sa, scales.reshape(N, nb).astype(np.float32), dtype=np.float32)


def validate_nbits_weights(node, graph):
    """Constant weights whose sizes the attributes contradict: stock ORT refuses them when it pre-packs them at
    load (the CUDA kernel validates with this too)."""
    a = node.attrs
    const = [graph.value(n).const if n else None for n in (node.inputs + [""] * 6)[1:6]]
    B, scales, zero_points, bias = const[0], const[1], const[2], const[4]
    if B is not None and B.size and scales is not None:
        native.check_nbits_weights(B, scales, zero_points, bias, a.get("bits", 4), a["block_size"], a["K"], a["N"])


def _panel_weights(node, graph):
    """(B, scales, zero points or "") names of a MatMulNBits node whose constant weights the kernels may read as
    panels (uint8 zero points or the default; either compute type), else None."""
    a, inputs = node.attrs, node.inputs + [""] * (6 - len(node.inputs))
    if (node.op_type != "MatMulNBits" or node.domain != "com.microsoft" or
            a.get("weight_prepacked", 0) or a.get("panels", 0) or inputs[4] or
            graph.value(inputs[0]).dtype not in (None, _F32)):  # (the check declines other types)
        return None
    B, scales, zp = (graph.value(n).const if n else None for n in inputs[1:4])
    if (B is None or scales is None or B.dtype != np.uint8 or scales.dtype != _F32 or
            (inputs[3] and (zp is None or zp.dtype != np.uint8))):
        return None
    try:
        native.check_nbits_weights(B, scales, zp, None, a.get("bits", 4), a["block_size"], a["K"], a["N"])
    except ValueError:  # validate_nbits_weights refuses them at Compile
        return None
    return inputs[1], inputs[2], inputs[3]


def _table_of(node, s_name, bits, block_size) -> bool:
    """Whether a node is a GatherBlockQuantized of rows quantized along them with these scales and no zero points
    (what reads a tied LM head's weights as the embedding table)."""
    a = node.attrs
    return (node.op_type == "GatherBlockQuantized" and node.domain == "com.microsoft" and len(node.inputs) >= 3 and
            node.inputs[2] == s_name and not any(node.inputs[3:]) and a.get("bits", 4) == bits and
            a.get("block_size", 128) == block_size and a.get("gather_axis", 0) == 0 and
            a.get("quantize_axis", 1) in (1, -1))


def _reshaped(node, graph, shape) -> tuple | None:
    """The shape a Reshape of a constant of `shape` gives (its target a constant), else None."""
    target = graph.value(node.inputs[1]).const if len(node.inputs) > 1 else None
    if target is None or target.ndim != 1:
        return None
    dims = [int(d) if d or node.attrs.get("allowzero", 0) else shape[i] for i, d in enumerate(target.tolist())]
    if dims.count(-1) == 1:
        known = math.prod(d for d in dims if d != -1)
        dims[dims.index(-1)] = math.prod(shape) // known if known else -1
    return tuple(dims) if math.prod(dims) == math.prod(shape) and min(dims, default=0) >= 0 else None


def _same_bytes(a, b, part=1 << 22) -> bool:
    """a and b (uint8, of one size) equal, compared a part at a time (no temporary the size of a table)."""
    a, b = a.reshape(-1), b.reshape(-1)
    return all(np.array_equal(a[i:i + part], b[i:i + part]) for i in range(0, a.size, part))


def _tied_tables(nodes, readers, graph, outputs, members, b_name, s_name, bits, block_size, n):
    """The other readers of a product's weights when each reads rows of B with its scales (a tied LM head's embedding
    table, GatherBlockQuantized): (Reshapes of B to the table [N, row bytes], the gathers) - a gather reading B itself,
    such a Reshape's output, or ORT's constant-folded copy of that Reshape (a constant of B's bytes). None where
    another node reads B or its scales."""
    b = graph.values[b_name].const
    table = (n, b.size // n)
    views, tables = [], []
    for i in readers[b_name]:
        node = nodes[i]
        if i in members:
            continue
        out = node.outputs[0] if node.outputs else ""
        if _table_of(node, s_name, bits, block_size) and node.inputs[0] == b_name and b.shape == table:
            tables.append(i)
        elif (node.op_type == "Reshape" and not node.domain and node.inputs[0] == b_name and out not in outputs and
              _reshaped(node, graph, b.shape) == table and
              all(_table_of(nodes[j], s_name, bits, block_size) and nodes[j].inputs[0] == out
                  for j in readers.get(out, []))):
            views.append(i)
            tables += readers.get(out, [])
        else:
            return None
    for i in readers[s_name]:
        node = nodes[i]
        if i in members or i in tables:
            continue
        copy = graph.value(node.inputs[0]).const
        if not (_table_of(node, s_name, bits, block_size) and copy is not None and copy.dtype == np.uint8 and
                copy.shape == table and _same_bytes(copy, b)):
            return None
        tables.append(i)
    return views, tables


def node_readers(nodes) -> dict:
    """Value name -> positions of the nodes reading it."""
    readers: dict = {}
    for i, node in enumerate(nodes):
        for name in dict.fromkeys(node.inputs):
            if name:
                readers.setdefault(name, []).append(i)
    return readers


def panel_value(graph, name: str, array) -> str:
    """`name`'s packed panels as the graph's constant `{name}.panels`; the row layout's copy is freed."""
    packed = f"{name}.panels"
    graph.values[packed] = Value(packed, NUMPY_TO_ONNX[array.dtype], array.shape, array)
    graph.values[name] = dataclasses.replace(graph.values[name], const=None)
    return packed


def with_panels(nodes, graph, outputs):
    """The nodes with MatMulNBits reading its constant weights as 32-column panels where this CPU's kernels do
    (native.nbits_panels: packed once here, as stock ORT pre-packs them for MLAS). The panels replace the row layout
    in the graph, so every reader of both constants must read panels: such products of the same shape, and
    GatherBlockQuantized of B's rows (a tied LM head's embedding table: _tied_tables); the partition must not output
    them."""
    if not native.HAS_MATMUL_NBITS:
        return nodes
    readers = node_readers(nodes)
    groups: dict = {}  # (B, scales, zero points) -> positions of its products
    for i, node in enumerate(nodes):
        names = _panel_weights(node, graph)
        if names is not None:
            groups.setdefault(names, []).append(i)
    nodes, outputs = list(nodes), set(outputs)
    for (b_name, s_name, z_name), members in groups.items():
        shapes = {tuple(nodes[i].attrs.get(k, 4) for k in ("K", "N", "bits", "block_size")) for i in members}
        if (len(shapes) != 1 or len({b_name, s_name, z_name}) != 3 or {b_name, s_name, z_name} & outputs or
                (z_name and set(readers[z_name]) != set(members))):
            continue
        K, N, bits, block_size = shapes.pop()
        tied = _tied_tables(nodes, readers, graph, outputs, members, b_name, s_name, bits, block_size, N)
        if z_name and tied != ([], []):  # (a gather of rows has no zero points here)
            continue
        b_value, s_value = graph.values[b_name], graph.values[s_name]
        nb = -(-K // block_size)
        zp = _zero_points(graph.values[z_name].const, bits, N, nb) if z_name else None
        # in place: the graph's constants are the EP's own copies (graph/reader.py), read only by these nodes
        packed = None if tied is None else native.nbits_panels(b_value.const, s_value.const, zp, bits, block_size, K,
                                                                 N, in_place=True)
        if packed is None:
            continue
        views, tables = tied
        # (the zero points as float32 [N, nb] panels)
        names = tuple(panel_value(graph, name, array) if name else "" for name, array in
                      zip((b_name, s_name, z_name), packed))
        renamed = dict(zip((b_name, s_name, z_name), names))
        for i in members + views:
            node = nodes[i]
            nodes[i] = dataclasses.replace(node, inputs=[renamed.get(n, n) for n in node.inputs],
                                           attrs=node.attrs if i in views else {**node.attrs, "panels": 1})
        viewed = {nodes[i].outputs[0] for i in views}
        table = f"{names[0]}.table"  # the panels as the gather's [N, row bytes] table (a view)
        copies = set()
        for i in tables:
            node = nodes[i]
            data = node.inputs[0]
            if data not in viewed:  # B itself, or ORT's copy of it (freed below)
                if table not in graph.values:
                    graph.values[table] = Value(table, b_value.elem_type, (N, packed[0].size // N),
                                                packed[0].reshape(N, -1))
                copies.add(data)
                data = table
            nodes[i] = dataclasses.replace(node, inputs=[data, node.inputs[1], names[1], *node.inputs[3:]],
                                           attrs={**node.attrs, "panels": 1})
        for name in copies - {b_name}:
            if not any(name in node.inputs for node in nodes) and name not in outputs:
                graph.values[name] = dataclasses.replace(graph.values[name], const=None)
    return nodes


def rows_of_panels(B, scales, zero_points=None):
    """B [N, row bytes], scales and float32 zero points [N, nb] (or None) back in the row layout from the panels
    native.nbits_panels makes (every full 32 rows' words [row bytes / 4][2][16][4 bytes], blocks [nb][32])."""
    n = scales.shape[0]
    full = n // 32 * 32
    b, rows = np.asarray(B).reshape(n, -1), []
    for a, shape, order in ((b, (-1, b.shape[1] // 4, 2, 16, 4), (0, 2, 3, 1, 4)), (scales, (-1, scales.shape[1], 32),
                            (0, 2, 1)), (zero_points, (-1, scales.shape[1], 32), (0, 2, 1))):
        if a is None:
            rows.append(None)
            continue
        a = np.asarray(a).reshape(n, -1)
        rows.append(np.concatenate([a[:full].reshape(shape).transpose(order).reshape(full, -1), a[full:]]))
    return tuple(rows)


@kernel("MatMulNBits", domain="com.microsoft", check=_check_matmul_nbits, validate=validate_nbits_weights)
def matmul_nbits(A, B, scales, zero_points=None, g_idx=None, bias=None, *, K, N, bits=4, block_size,
                 accuracy_level=0, weight_prepacked=0, panels=0):
    lead = A.shape[:-1]
    if B.size == 0:  # an omitted projection: zeros, or the broadcast bias
        y = np.zeros((*lead, N), np.float32)
        return (y + bias if bias is not None else y,)
    if A.shape[-1] != K:
        raise ValueError(f"A has {A.shape[-1]} columns, K={K}")
    int8 = native.nbits_int8(accuracy_level, zero_points, panels)  # stock's compute type (the module docstring)
    if bits != 2 and native.HAS_MATMUL_NBITS:
        y = native.matmul_nbits(A.reshape(-1, K), B, scales, zero_points, bias, bits, block_size, K, N, int8,
                                bool(panels))
        return (y.reshape(*lead, N),)
    a2d = A.reshape(-1, K)
    y = _matmul_nbits_numpy(a2d, B, scales, zero_points, bits, block_size, K, N, int8)
    if bias is not None:
        y = y + bias
    return (y.astype(np.float32, copy=False).reshape(*lead, N),)


# --- GatherBlockQuantized ---------------------------------------------------------------------


def _check_gather_block_quantized(node, graph):
    data = graph.value(node.inputs[0])
    bits = node.attrs.get("bits", 4)
    bs = node.attrs.get("block_size", 128)
    if data.dtype != np.uint8:
        return f"data of element type {data.type_name} not supported (uint8 only)"
    if bits not in (2, 4, 8):
        return f"bits={bits} not supported for uint8 data (2, 4 or 8)"
    if bs < 16 or bs & (bs - 1):
        return f"block_size={bs} must be a power of two >= 16"
    scales = graph.value(node.inputs[2]).dtype
    if scales is not None and scales != F32:
        return f"scales of dtype {scales} not supported (float32 only)"
    rank = len(data.shape) if data.shape is not None else None
    if rank is None:
        return "data of unknown rank"
    g = node.attrs.get("gather_axis", 0)
    q = node.attrs.get("quantize_axis", 1)
    g, q = g + rank if g < 0 else g, q + rank if q < 0 else q
    if g != 0:
        return f"gather_axis={g} not supported for uint8 data (must be 0)"
    if q != rank - 1:
        return f"quantize_axis={q} not supported for uint8 data (must be the last axis, as in ORT)"
    return None


@kernel("GatherBlockQuantized", domain="com.microsoft", check=_check_gather_block_quantized)
def gather_block_quantized(data, indices, scales, zero_points=None, *, bits=4, block_size=128, quantize_axis=1,
                           gather_axis=0, panels=0):
    rank = data.ndim
    qaxis = quantize_axis + rank if quantize_axis < 0 else quantize_axis
    if panels or (rank == 2 and qaxis == 1 and native.HAS_GATHER_BLOCK_QUANTIZED and scales.dtype == F32 and
                  (data.shape[1] * (8 // bits)) % block_size == 0):  # (with_panels checked the table's shape)
        return (native.gather_block_quantized(data, indices, scales, zero_points, bits, block_size, bool(panels)),)
    per = 8 // bits
    shape = list(data.shape)
    shape[-1] *= per  # the logical (unpacked) shape
    rows = data.shape[0]
    idx = np.asarray(indices).astype(np.int64)
    idx = np.where(idx < 0, idx + rows, idx)
    valid = (idx >= 0) & (idx < rows)  # out-of-range indices produce zeros
    picked = data[np.where(valid, idx, 0)]                            # [*idx, ...packed]
    q = _unpack(picked, bits, shape[-1]).astype(np.float32) if bits < 8 else picked.astype(np.float32)
    sc = scales[np.where(valid, idx, 0)].astype(np.float32)
    if zero_points is not None:
        zp = zero_points[np.where(valid, idx, 0)]
        zp = _unpack(zp, bits, sc.shape[-1]) if bits < 8 and qaxis == rank - 1 else zp
        zp = zp.astype(np.float32)
    else:
        zp = np.float32(2 ** (bits - 1))
    # expand per-block parameters along the quantized axis (shifted by the gathered index dims)
    ax = idx.ndim + qaxis - 1
    n = q.shape[ax]

    def expand(p):
        if np.ndim(p) == 0:
            return p
        return np.repeat(p, block_size, axis=ax).take(np.arange(n), axis=ax)

    y = (q - expand(zp)) * expand(sc)
    y = np.where(valid.reshape(valid.shape + (1,) * (y.ndim - valid.ndim)), y, np.float32(0))
    return (y.astype(np.float32, copy=False),)
