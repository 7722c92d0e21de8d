"""Mixture of experts (com.microsoft MoE and QMoE): each token's top-k experts by the router, each expert an FFN
(fc1, the activation, fc2), their outputs summed with the routing weights. Float16 through float32. QMoE's expert
weights are 2-, 4- or 8-bit integers with a scale (and zero point) per row or per block of a row, dequantized to
float32 as stock's CPU kernel does, and its routing is stock's QMoE routing (below)."""
import dataclasses
import math

import numpy as np

from ..checks import InvalidArgument
from ..registry import FLOATS, kernel
from .quantization import node_readers, panel_value, rows_of_panels

_ACTIVATIONS = ("relu", "silu", "swiglu", "identity")
_QMOE_ACTIVATIONS = _ACTIVATIONS + ("gelu",)
QMOE_MIN_WEIGHT = 1e-8  # stock's QMoE runs a route only when its weight is above this


def _declined(attrs, activations, fc3: bool, cuda: bool):
    """What MoE and QMoE decline: other activations, CUDA's limit after the activation; on the CPU FC3 gating (stock's
    CPU EP refuses it) and the sparse mixer (stock's CPU EP routes such a node by plain top-k: it ignores the
    attribute, so stock runs it); separate FC3 weights with the fused SwiGLU (which has its own)."""
    act = attrs.get("activation_type", "relu")
    if act not in activations:
        return f"activation_type {act!r} is not one of {', '.join(activations)}"
    if fc3 and (not cuda or act == "swiglu"):
        return "separate fc3 weights are CUDA's, without the fused SwiGLU" if cuda else \
            "FC3 gating is not supported (nor is it on stock's CPU EP)"
    if attrs.get("use_sparse_mixer", 0) and not cuda:
        return "use_sparse_mixer=1: stock's CPU EP ignores it (plain top-k routing), so it runs the node"
    if attrs.get("swiglu_limit_after_activation", 0):
        return "swiglu_limit_after_activation=1 is not supported"
    return None


def check_moe(node, graph, cuda=False):
    return _declined(node.attrs, _ACTIVATIONS, any(node.inputs[6:8]), cuda)


def validate_moe(node, graph):
    """What stock's CPU kernel refuses when it loads the model (FAIL)."""
    if node.attrs.get("k", 1) < 1:
        raise ValueError(f"MoE attribute 'k' must be >= 1, got {node.attrs['k']}")
    if node.attrs.get("activation_type") == "swiglu" and node.attrs.get("swiglu_fusion", 0) != 1:
        raise ValueError("CPU MoE only supports interleaved SwiGLU format. Please set swiglu_fusion=1.")


def expect(name: str, array, shape: tuple) -> None:
    if array is not None and tuple(array.shape) != shape:
        braces = lambda dims: "{" + ",".join(str(d) for d in dims) + "}"
        raise InvalidArgument(f"Input '{name}' is expected to have shape {braces(shape)}, got {braces(array.shape)}")


def moe_geometry(x, router_probs, fc1, fc1_bias, fc2, fc2_bias, fusion: int, k: int) -> tuple[int, int, int]:
    """(tokens, experts, inter_size) with stock's checks: the experts from router_probs, inter_size from fc2 (anything
    with a shape)."""
    hidden = x.shape[-1]
    tokens = math.prod(x.shape) // hidden if hidden else 0
    if len(router_probs.shape) != 2 or len(fc2.shape) != 3 or len(x.shape) not in (2, 3):
        raise InvalidArgument(f"MoE: input {tuple(x.shape)}, router_probs {tuple(router_probs.shape)} and "
                              f"fc2_experts_weights {tuple(fc2.shape)} must be 2-D or 3-D, 2-D and 3-D")
    experts, inter = router_probs.shape[1], fc2.shape[2]
    expect("router_probs", router_probs, (tokens, experts))
    expect("fc1_experts_weights", fc1, (experts, fusion * inter, hidden))
    expect("fc1_experts_bias", fc1_bias, (experts, fusion * inter))
    expect("fc2_experts_weights", fc2, (experts, hidden, inter))
    expect("fc2_experts_bias", fc2_bias, (experts, hidden))
    if k > experts:
        raise ValueError(f"MoE attribute 'k' must be <= num_experts; got k={k}, num_experts={experts}")
    return tokens, experts, inter


def _activation(h, kind, alpha, beta, limit):
    if kind == "gelu":  # QMoE's: the tanh approximation
        return 0.5 * h * (1 + np.tanh(np.float32(0.7978845608028654) * (h + np.float32(0.044715) * h * h * h)))
    if kind == "relu":
        return np.maximum(h, 0)
    if kind == "silu":
        return h / (1 + np.exp(-h))
    if kind == "identity":
        return h
    gate, lin = h[..., 0::2], h[..., 1::2]  # swiglu: gate and linear interleaved (swiglu_fusion=1, as stock's CPU)
    if limit is not None:
        gate, lin = np.minimum(gate, limit), np.clip(lin, -limit, limit)
    return gate / (1 + np.exp(-alpha * gate)) * (lin + beta)


def _experts(rows, top, weights, runs, fc1, fc1_bias, fc2, fc2_bias, activation):
    """Each token's sum over its routes (top [tokens, k], where `runs`) of weight * (fc2(e) . act(fc1(e) . x + b1) + b2),
    expert by expert; fc1, fc2: an expert's float32 weights [out, in]."""
    out = np.zeros_like(rows)
    for expert in np.unique(top):
        tokens, slot = np.nonzero((top == expert) & runs)
        if not len(tokens):
            continue
        h = rows[tokens] @ fc1(expert).T
        if fc1_bias is not None:
            h = h + fc1_bias[expert].astype(np.float32)
        y = activation(h) @ fc2(expert).T
        if fc2_bias is not None:
            y = y + fc2_bias[expert].astype(np.float32)
        np.add.at(out, tokens, weights[tokens, slot][:, None] * y)
    return out


@kernel("MoE", domain="com.microsoft", types=FLOATS, check=check_moe, validate=validate_moe)
def moe(x, router_probs, fc1_experts_weights, fc1_experts_bias=None, fc2_experts_weights=None,
        fc2_experts_bias=None, fc3_experts_weights=None, fc3_experts_bias=None, *, k=1, activation_type="relu",
        activation_alpha=1.0, activation_beta=0.0, normalize_routing_weights=0, swiglu_fusion=0, swiglu_limit=None,
        use_sparse_mixer=0, swiglu_limit_after_activation=0):
    tokens, _, _ = moe_geometry(x, router_probs, fc1_experts_weights, fc1_experts_bias, fc2_experts_weights,
                                fc2_experts_bias, 2 if activation_type == "swiglu" else 1, k)
    rows = x.reshape(tokens, x.shape[-1]).astype(np.float32)
    logits = router_probs.astype(np.float32)
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs = e / e.sum(axis=1, keepdims=True)
    top = np.argsort(-probs, axis=1, kind="stable")[:, :k]
    weights = np.take_along_axis(probs, top, axis=1)
    if normalize_routing_weights:
        weights = weights / weights.sum(axis=1, keepdims=True)
    out = _experts(rows, top, weights, True, lambda e: fc1_experts_weights[e].astype(np.float32), fc1_experts_bias,
                   lambda e: fc2_experts_weights[e].astype(np.float32), fc2_experts_bias,
                   lambda h: _activation(h, activation_type, activation_alpha, activation_beta, swiglu_limit))
    return (out.reshape(x.shape).astype(x.dtype),)


# ---------------------------------------------------------------- QMoE

def check_qmoe(node, graph, cuda=False):
    attrs = node.attrs
    if attrs.get("quant_type", "int") != "int":
        return f"quant_type {attrs['quant_type']!r} (only integer weights)"
    if any(node.inputs[15:]):
        return "global, activation and block activation scales (FP4/FP8 modes) are not supported"
    if attrs.get("weights_prepacked", -1) == 1 and not cuda:  # (CUDA's: kernels/cuda/moe.py expert_layout)
        return "weights_prepacked=1: stock's CPU EP's own prepacked expert layout"
    return _declined(attrs, _QMOE_ACTIVATIONS, any(node.inputs[8:11]) or any(node.inputs[13:14]), cuda)


def validate_qmoe(node, graph):
    """What stock's CPU kernel refuses when it loads the model (FAIL)."""
    attrs = node.attrs
    if attrs.get("activation_type") == "swiglu" and attrs.get("swiglu_fusion", 0) != 1:
        raise ValueError("CPU QMoE only supports interleaved SwiGLU format. Please set swiglu_fusion=1.")
    if attrs.get("expert_weight_bits", 4) not in (2, 4, 8):
        raise ValueError("Attribute 'expert_weight_bits' must be 2, 4, or 8.")
    if attrs.get("weights_prepacked", -1) not in (-1, 0, 1):
        raise ValueError("weights_prepacked must be -1, 0, or 1.")
    block = attrs.get("block_size", 0)
    if block < 0 or (block and block < 16):
        raise ValueError("block_size must be >= 16 when provided.")
    if block & (block - 1):
        raise ValueError("block_size must be a power of 2.")
    if attrs.get("k", 1) < 1:
        raise ValueError(f"QMoE attribute 'k' must be >= 1, got {attrs['k']}")


def quantized_layout(name, q, scales, zero_points, bits, block_size, blockwise, experts, rows, cols,
                     panels=False) -> int:
    """The cols a scale covers in one FC's QMoE weights, after stock's shape checks (anything with a shape); panels:
    the zero points as float32 per block (qmoe_with_panels)."""
    pack = 8 // bits
    expect(f"{name}_experts_weights", q, (experts, rows, -(-cols // pack)))
    blocks = -(-cols // block_size) if blockwise else 1
    if blockwise:
        expect(f"{name}_scales", scales, (experts, rows, blocks))
    elif tuple(scales.shape) not in ((experts, rows), (experts, rows, 1)):
        expect(f"{name}_scales", scales, (experts, rows))
    if zero_points is not None:
        expect(f"{name}_zero_points", zero_points, (experts, rows, blocks) if panels else
               (experts, rows, -(-blocks // pack)) if blockwise else (experts, -(-rows // pack)))
    return block_size if blockwise else cols


class QuantizedExperts:
    """One FC's expert weights (their shapes checked by qmoe_geometry): q [experts, rows, ceil(cols / pack)] uint8,
    `pack` elements a byte (the lowest bits first), w = scale (q - zero) per (row, block of `block` cols). panels:
    each expert's q, scales and float32 zero points (zero None: the default) packed as MatMulNBits' panels."""

    def __init__(self, q, scales, zero_points, bits, block, experts, rows, cols, panels=False):
        self.bits, self.pack, self.cols, self.block, self.panels = bits, 8 // bits, cols, block, panels
        self.blocks = -(-cols // block)
        self.q, self.sources = q, (scales, zero_points)
        self.scales = scales.astype(np.float32, copy=False).reshape(experts, rows, self.blocks)
        self.zero = zero_points if panels else self._zero_points(zero_points, experts, rows)

    def _zero_points(self, zp, experts, rows):
        """[experts, rows, blocks] float32: unpacked (along the blocks, or row-wise along the rows), else 2^(bits-1)."""
        if zp is None:
            return np.full((experts, rows, self.blocks), 2 ** (self.bits - 1), np.float32)
        if zp.ndim == 3:
            return _block_zero_points(zp, self.bits, self.blocks)
        return _unpack(zp, self.bits, rows).astype(np.float32).reshape(experts, rows, 1)

    def dequantized(self, expert) -> np.ndarray:
        """float32 [rows, cols] of one expert."""
        q, scales, zero = self.q[expert], self.scales[expert], None if self.zero is None else self.zero[expert]
        if self.panels:
            q, scales, zero = rows_of_panels(q, scales, zero)
        values = _unpack(q, self.bits, self.cols).astype(np.float32)
        scale = np.repeat(scales, self.block, axis=1)[:, :self.cols]
        zero = np.float32(2 ** (self.bits - 1)) if zero is None else np.repeat(zero, self.block, axis=1)[:, :self.cols]
        return scale * (values - zero)


def _block_zero_points(zp, bits, blocks) -> np.ndarray:
    """Block-wise zero points [experts, rows, ceil(blocks / pack)] uint8 as float32 [experts, rows, blocks]."""
    return _unpack(zp, bits, blocks).astype(np.float32)


def _unpack(packed, bits, count):
    """The last axis of uint8 `packed` as `count` values of `bits` bits each, the lowest bits first."""
    if bits == 8:
        return packed[..., :count]
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    values = (packed[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    return values.reshape(*packed.shape[:-1], -1)[..., :count]


def qmoe_geometry(x, router_probs, fc1, fc1_scales, fc1_bias, fc2, fc2_scales, fc2_bias, zero_points, fusion, k,
                  bits, block_size, panels=False):
    """(tokens, experts, inter, fc1's block, fc2's block) with stock's checks (anything with a shape)."""
    hidden = x.shape[-1]
    tokens = math.prod(x.shape) // hidden if hidden else 0
    pack = 8 // bits
    if len(router_probs.shape) != 2 or len(fc1.shape) != 3 or len(fc2.shape) != 3 or len(x.shape) not in (2, 3):
        raise InvalidArgument(f"QMoE: input {tuple(x.shape)}, router_probs {tuple(router_probs.shape)}, "
                              f"fc1_experts_weights {tuple(fc1.shape)} and fc2_experts_weights {tuple(fc2.shape)} "
                              "must be 2-D or 3-D, 2-D, 3-D and 3-D")
    experts, inter = router_probs.shape[1], fc2.shape[2] * pack
    expect("router_probs", router_probs, (tokens, experts))
    expect("fc1_experts_bias", fc1_bias, (experts, fusion * inter))
    expect("fc2_experts_bias", fc2_bias, (experts, hidden))
    if k > experts:
        raise ValueError(f"QMoE attribute 'k' must be <= num_experts; got k={k}, num_experts={experts}")
    for name, scales in (("fc1", fc1_scales), ("fc2", fc2_scales)):
        if scales is None:
            raise InvalidArgument(f"Input '{name}_scales' is required.")
    # stock decides block-wise or row-wise from fc1's scales, for both
    blockwise = block_size > 0 and len(fc1_scales.shape) == 3 and fc1_scales.shape[-1] > 1
    block1 = quantized_layout("fc1", fc1, fc1_scales, zero_points[0], bits, block_size, blockwise, experts,
                              fusion * inter, hidden, panels)
    block2 = quantized_layout("fc2", fc2, fc2_scales, zero_points[1], bits, block_size, blockwise, experts, hidden,
                              inter, panels)
    return tokens, experts, inter, block1, block2


def quantized_experts(fc1, fc1_scales, fc2, fc2_scales, zero_points, bits, blocks, experts, inter, hidden, fusion,
                      panels=False):
    """The two QuantizedExperts of a QMoE whose shapes qmoe_geometry checked (blocks: its fc1 and fc2 blocks)."""
    return (QuantizedExperts(fc1, fc1_scales, zero_points[0], bits, blocks[0], experts, fusion * inter, hidden, panels),
            QuantizedExperts(fc2, fc2_scales, zero_points[1], bits, blocks[1], experts, hidden, inter, panels))


def qmoe_routes(logits, k, router_weights, normalize):
    """(top, weights) [tokens, k]: the k largest logits (a tie to the higher index), weighted by the softmax over
    those k (or by router_weights there, divided by their sum when normalize), as stock's QMoE routes."""
    n = logits.shape[1]
    top = n - 1 - np.argsort(-logits[:, ::-1], axis=1, kind="stable")[:, :k]
    if router_weights is None:
        chosen = np.take_along_axis(logits, top, axis=1)
        e = np.exp(chosen - chosen.max(axis=1, keepdims=True))
        total = e.sum(axis=1, keepdims=True)
    else:
        e = np.take_along_axis(router_weights.astype(np.float32), top, axis=1)
        if not normalize:
            return top, e
        total = e.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        return top, np.where(total != 0, e / total, np.float32(0))


def qmoe_with_panels(nodes, graph, outputs):
    """The nodes with QMoE reading its constant experts as MatMulNBits' 32-column panels (each expert's fc1 and fc2
    packed in place by native.nbits_panels, zero points as float32 per block; attribute panels=1) where both FCs are
    MatMulNBits' layout (program.c moe_nbits_layout) of a shape the kernels read so, the node of float32 activations
    and the only reader of those constants, none of them a partition output."""
    from . import native
    if not native.HAS_MATMUL_NBITS:
        return nodes
    readers = node_readers(nodes)
    nodes = list(nodes)
    for i, node in enumerate(nodes):
        a, inputs = node.attrs, node.inputs + [""] * (15 - len(node.inputs))
        if (node.op_type != "QMoE" or node.domain != "com.microsoft" or a.get("panels", 0) or
                a.get("weights_prepacked", -1) == 1 or check_qmoe(node, graph) or inputs[14] or
                graph.value(inputs[0]).dtype != np.float32):
            continue
        bits, block = a.get("expert_weight_bits", 4), a.get("block_size", 0)
        names = [inputs[j] for j in (2, 3, 11, 5, 6, 12)]  # per FC: weights, scales, zero points
        given = [n for n in names if n]
        values = [graph.value(n).const if n else None for n in names]
        if (bits not in (4, 8) or block <= 0 or not all(names[j] for j in (0, 1, 3, 4)) or
                any(n and v is None for n, v in zip(names, values)) or len(set(given)) != len(given) or
                any(len(readers[n]) != 1 or n in outputs for n in given)):  # constants, read by this node alone
            continue
        (q1, s1, z1, q2, s2, z2), fusion = values, 2 if a.get("activation_type") == "swiglu" else 1
        if (q1.dtype != np.uint8 or q2.dtype != np.uint8 or s1.dtype != np.float32 or s2.dtype != np.float32 or
                any(z is not None and z.dtype != np.uint8 for z in (z1, z2)) or q1.ndim != 3 or q2.ndim != 3 or
                s1.ndim != 3 or s1.shape[-1] <= 1):
            continue
        experts, hidden, inter = q2.shape[0], q2.shape[1], q2.shape[2] * (8 // bits)
        try:  # the experts with their zero points as float32 per block (or none: the default), packed below
            fcs = [QuantizedExperts(q, s_, None if z is None else _block_zero_points(z, bits, -(-cols // block)), bits,
                                    quantized_layout(f, q, s_, z, bits, block, True, experts, rows, cols), experts,
                                    rows, cols, panels=True)
                   for f, q, s_, z, rows, cols in (("fc1", q1, s1, z1, fusion * inter, hidden),
                                                   ("fc2", q2, s2, z2, hidden, inter))]
        except InvalidArgument:  # validate refuses them as stock does
            continue
        if not all(fc.block != fc.cols and fc.cols % fc.block == 0 and
                   native.lib.seamless_matmul_nbits_panels(q.shape[1], fc.cols, bits, block)
                   for fc, q in zip(fcs, (q1, q2))):
            continue
        renamed = {}
        for fc, fc_names in zip(fcs, (names[:3], names[3:])):
            for e in range(experts):  # in place: the graph's constants are the EP's own copies (graph/reader.py)
                native.nbits_panels(fc.q[e], fc.scales[e], None if fc.zero is None else fc.zero[e], bits, block,
                                    fc.cols, fc.q.shape[1], in_place=True)
            renamed.update((name, panel_value(graph, name, array)) for name, array in
                           zip(fc_names, (fc.q, fc.scales, fc.zero)) if name)
        nodes[i] = dataclasses.replace(node, inputs=[renamed.get(n, n) for n in node.inputs],
                                       attrs={**node.attrs, "panels": 1})
    return nodes


@kernel("QMoE", domain="com.microsoft", types=FLOATS, check=check_qmoe, validate=validate_qmoe)
def qmoe(x, router_probs, fc1_experts_weights, fc1_scales=None, fc1_experts_bias=None, fc2_experts_weights=None,
         fc2_scales=None, fc2_experts_bias=None, fc3_experts_weights=None, fc3_scales=None, fc3_experts_bias=None,
         fc1_zero_points=None, fc2_zero_points=None, fc3_zero_points=None, router_weights=None, *rest, k=1,
         activation_type="relu", activation_alpha=1.0, activation_beta=0.0, normalize_routing_weights=0,
         swiglu_fusion=0, swiglu_limit=None, use_sparse_mixer=0, expert_weight_bits=4, block_size=0,
         quant_type="int", weights_prepacked=-1, accuracy_level=0, swiglu_limit_after_activation=0, panels=0):
    if fc2_experts_weights is None:
        raise InvalidArgument("Input 'fc2_experts_weights' is required.")
    fusion, zero_points = 2 if activation_type == "swiglu" else 1, (fc1_zero_points, fc2_zero_points)
    tokens, experts, inter, *blocks = qmoe_geometry(
        x, router_probs, fc1_experts_weights, fc1_scales, fc1_experts_bias, fc2_experts_weights, fc2_scales,
        fc2_experts_bias, zero_points, fusion, k, expert_weight_bits, block_size, panels)
    fc1, fc2 = quantized_experts(fc1_experts_weights, fc1_scales, fc2_experts_weights, fc2_scales, zero_points,
                                 expert_weight_bits, blocks, experts, inter, x.shape[-1], fusion, panels)
    if router_weights is not None:
        expect("router_weights", router_weights, (tokens, experts))
    rows = x.reshape(tokens, x.shape[-1]).astype(np.float32)
    top, weights = qmoe_routes(router_probs.astype(np.float32), k, router_weights, normalize_routing_weights)
    out = _experts(rows, top, weights, weights > QMOE_MIN_WEIGHT, fc1.dequantized, fc1_experts_bias,
                   fc2.dequantized, fc2_experts_bias,
                   lambda h: _activation(h, activation_type, activation_alpha, activation_beta, swiglu_limit))
    return (out.reshape(x.shape).astype(x.dtype),)
