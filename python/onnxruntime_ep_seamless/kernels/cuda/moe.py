"""com.microsoft MoE and QMoE on the GPU (native/cuda/moe.cu): the router's choice stays on the device, so a layer is
no seam; the shapes and checks are the CPU kernels' (kernels/cpu/moe.py)."""
import dataclasses
import functools

import numpy as np

from ...graph.ir import Value
from ...runtime.cuda_args import struct_arg, lib as codes
from ..checks import InvalidArgument
from ..cpu.moe import (check_moe, check_qmoe, expect, moe_geometry, qmoe_geometry, quantized_layout,
                       validate_moe, validate_qmoe)
from ..cpu.steps import MOE_ACTIVATIONS
from ..registry import kernel
from .elementwise import SUFFIX, Scratch

# the types stock's CPU kernels have, so that the parity tests can hold ours to them (moe.cu builds bfloat16 too)
TYPES = frozenset(map(np.dtype, (np.float32, np.float16)))


MAX_EXPERTS = 2048  # moe.cu route: a warp per token, a lane holding at most 64 experts
MOE_UP_ROWS = codes.MOE_UP_ROWS
# A prompt's QMoE products by expert (moe.cu group, grouped): from this many (token, slot) pairs an expert on average
# (a first rule: not yet measured against the pair-by-pair kernels)
GROUPED_PAIRS_AN_EXPERT = 2
# ... in float16 models on tensor cores (moe.cu grouped_mma, tiles of MOE_MMA_PAIRS), else on CUDA cores (grouped,
# tiles of MOE_TILE)
GROUPED_ON_TENSOR_CORES = True


NOT_ACTIVATED = struct_arg("MoeActivation", kind=-1)  # an up product stored as it is


def _weights(rows, cols, block, bits, zp_blockwise) -> tuple:
    """args.h MoeWeights (block_shift: log2 of a power-of-two block, else -1)."""
    shift = block.bit_length() - 1 if block & (block - 1) == 0 else -1
    return struct_arg("MoeWeights", rows=rows, cols=cols, block=block, bits=bits, zp_blockwise=zp_blockwise,
                      block_shift=shift)


def _run(rt, stream, x, router, fcs, tokens, experts, inter, attrs, bits=None):
    """fcs: "fc1", "fc2" and (FC3 gating) "fc3" -> (weights, bias, QMoE's (scales, zero points, block) or None);
    bits: QMoE's."""
    act, k = attrs["activation_type"], attrs["k"]
    rows1, hidden, suffix = (2 if act == "swiglu" else 1) * inter, x.shape[-1], SUFFIX[x.dtype]
    s = Scratch(rt, x)
    f32 = np.dtype(np.float32)
    chosen = s(rt.alloc((tokens, k), np.dtype(np.int32)))
    weights = s(rt.alloc((tokens, k), f32))
    gate = s(rt.alloc((tokens, k, inter), f32)) if "fc3" in fcs else None
    activated = s(rt.alloc((tokens, k, inter), f32))
    y = rt.alloc(x.shape, x.dtype)
    if experts > MAX_EXPERTS:
        raise ValueError(f"MoE on CUDA routes among up to {MAX_EXPERTS} experts, not {experts}")
    if attrs["sparse_mixer"]:
        rt.launch(f"seamless_moe_route_sparse_mixer_{suffix}", tokens * 32, stream, ("int64", tokens),
                  ("int64", experts), ("ptr", router.ptr), ("ptr", chosen.ptr), ("ptr", weights.ptr))
    else:
        rt.launch(f"seamless_moe_route_{suffix}", tokens * 32, stream, ("int64", tokens), ("int64", experts),
                  ("int64", k), ("int", int(bits is not None)), ("int", int(bool(attrs["normalize"]))),
                  ("ptr", router.ptr), ("ptr", chosen.ptr), ("ptr", weights.ptr))

    pairs = tokens * k
    grouped = bits == 4 and pairs >= GROUPED_PAIRS_AN_EXPERT * experts and hidden % 32 == 0 and inter % 32 == 0 and \
        all(q is not None and q[2] >= 32 and q[2] & (q[2] - 1) == 0 and w.ptr % 16 == 0 for w, _, q in fcs.values())
    mma = GROUPED_ON_TENSOR_CORES and x.dtype == np.float16 and x.ptr % 16 == 0
    tile = codes.MOE_MMA_PAIRS if mma else codes.MOE_TILE
    limit = attrs["swiglu_limit"]
    activation = struct_arg("MoeActivation", kind=MOE_ACTIVATIONS[act], has_limit=int(limit is not None),
                            alpha=float(attrs["alpha"]), beta=float(attrs["beta"]), limit=float(limit or 0.0))
    # fc1's product stored activated (moe.cu store_up), but for FC3's gate and CUDA-core `grouped`: then as it is, h
    fused = gate is None and (mma or not grouped)
    h = activated if fused else s(rt.alloc((tokens, k, rows1), f32))
    if grouped:  # a prompt's pairs by expert (moe.cu group), each weight then read once for up to `tile` of them
        tiles_max = -(-pairs // tile) + experts
        order = s(rt.alloc((pairs,), np.dtype(np.int32)))
        tiles = s(rt.alloc((tiles_max, 3), np.dtype(np.int32)))
        ntiles = s(rt.alloc((1,), np.dtype(np.int32)))
        rt.launch_rows("seamless_moe_group", 1, stream, ("int64", pairs), ("int64", experts), ("int", tile),
                       ("ptr", chosen.ptr), ("ptr", order.ptr), ("ptr", tiles.ptr), ("ptr", ntiles.ptr),
                       shared=8 * experts, threads=codes.MOE_GROUP_THREADS)

    def product(name, fc, rows, cols, inputs, out, stored=NOT_ACTIVATED):
        """out = fc's experts' rows . inputs (+ bias), an up product's `stored` (args.h MoeActivation)."""
        w, bias, quant = fcs[fc]
        if quant is None:
            layout, operands = _weights(rows, cols, cols, 8, 0), [w.ptr, 0, 0, 0]
        else:
            scales, zp, block = quant
            layout = _weights(rows, cols, block, bits, int(zp is not None and len(zp.shape) == 3))
            operands = [0, w.ptr, scales.ptr, zp.ptr if zp is not None else 0]
        if grouped:  # out: each pair's rows (down's then summed a token by moe.cu combine)
            rt.launch_rows(f"seamless_moe_grouped{'_mma' if mma else ''}{'_act' if name == 'down' else ''}_{suffix}",
                           (tiles_max, -(-rows // (codes.MOE_MMA_ROWS if mma else codes.MOE_TILE_ROWS))), stream,
                           ("int64", k), ("int", 1), layout, *((stored,) if mma else ()),
                           ("ptr", tiles.ptr), ("ptr", ntiles.ptr), ("ptr", order.ptr), ("ptr", weights.ptr),
                           ("ptr", inputs.ptr), *(("ptr", p) for p in operands[1:]),
                           ("ptr", bias.ptr if bias is not None else 0), ("ptr", out.ptr))
            return
        warps = tokens * k * -(-rows // MOE_UP_ROWS) if name == "up" else tokens * rows  # moe.cu up, down
        if name == "down" and quant is not None and cols < 32 * 32:  # fewer 32-column chunks a row than lanes
            name = "down_dealt"
        rt.launch(f"seamless_moe_{name}_{suffix}", warps * 32, stream,
                  ("int64", tokens), ("int64", k), ("int", int(bits is not None)), layout,
                  *((stored,) if name == "up" else ()),
                  ("ptr", chosen.ptr), ("ptr", weights.ptr), ("ptr", inputs.ptr),
                  *(("ptr", p) for p in operands), ("ptr", bias.ptr if bias is not None else 0), ("ptr", out.ptr))

    product("up", "fc1", rows1, hidden, x, h, activation if fused else NOT_ACTIVATED)
    if gate is not None:
        product("up", "fc3", inter, hidden, x, gate)
    if not fused:
        rt.launch("seamless_moe_activate", tokens * k * inter, stream, ("int64", tokens * k * inter),
                  ("int64", inter), activation, ("ptr", h.ptr), ("ptr", gate.ptr if gate is not None else 0),
                  ("ptr", activated.ptr))
    if not grouped:
        product("down", "fc2", hidden, inter, activated, y)
        return s.done(y)
    part = s(rt.alloc((pairs, hidden), f32))  # each pair's product, then summed a token by ascending expert
    product("down", "fc2", hidden, inter, activated, part)
    rt.launch_rows(f"seamless_moe_combine_{suffix}", min(tokens, 1 << 20), stream, ("int64", tokens), ("int64", k),
                   ("int64", hidden), ("int", 1), ("ptr", chosen.ptr), ("ptr", weights.ptr), ("ptr", part.ptr),
                   ("ptr", y.ptr), shared=4 * k)
    return s.done(y)


def _attrs(activation_type, k, normalize, alpha, beta, swiglu_limit, use_sparse_mixer):
    return dict(activation_type=activation_type, k=k, normalize=normalize, alpha=alpha, beta=beta,
                swiglu_limit=swiglu_limit, sparse_mixer=bool(use_sparse_mixer))


def _validate(validate_cpu):
    """stock's checks at load, and its CUDA kernels': the sparse mixer routes 2 experts."""
    def validate(node, graph):
        validate_cpu(node, graph)
        if node.attrs.get("use_sparse_mixer", 0) and node.attrs.get("k", 1) != 2:
            raise ValueError("Sparse mixer only supports k=2")
    return validate


@kernel("MoE", domain="com.microsoft", types=TYPES, device="cuda", check=functools.partial(check_moe, cuda=True),
        validate=_validate(validate_moe))
def moe(rt, stream, x, router_probs, fc1_experts_weights, fc1_experts_bias=None, fc2_experts_weights=None,
        fc2_experts_bias=None, fc3_experts_weights=None, fc3_experts_bias=None, *, k=1, activation_type="relu",
        activation_alpha=1.0, activation_beta=0.0, normalize_routing_weights=0, swiglu_fusion=0, swiglu_limit=None,
        use_sparse_mixer=0, swiglu_limit_after_activation=0):
    tokens, experts, inter = moe_geometry(x, router_probs, fc1_experts_weights, fc1_experts_bias, fc2_experts_weights,
                                          fc2_experts_bias, 2 if activation_type == "swiglu" else 1, k)
    fcs = {"fc1": (fc1_experts_weights, fc1_experts_bias, None), "fc2": (fc2_experts_weights, fc2_experts_bias, None)}
    if fc3_experts_weights is not None:
        expect("fc3_experts_weights", fc3_experts_weights, (experts, inter, x.shape[-1]))
        expect("fc3_experts_bias", fc3_experts_bias, (experts, inter))
        fcs["fc3"] = (fc3_experts_weights, fc3_experts_bias, None)
    return _run(rt, stream, x, router_probs, fcs, tokens, experts, inter,
                _attrs(activation_type, k, normalize_routing_weights, activation_alpha, activation_beta, swiglu_limit,
                       use_sparse_mixer))


def expert_layout(node, graph) -> tuple[bool, str | None]:
    """(whether a QMoE's integer expert weights are in CUTLASS's SM80 mixed-GEMM layout, what keeps us from reading
    them). ORT's CUDA QMoE reads that layout, fc1 [experts, hidden, rows1 / pack] and fc2 [experts, inter, hidden /
    pack], for weights_prepacked 1 and -1 (its default: the builder's -e cuda models), the raw one (the CPU EP's) for
    0. Ours reads the raw one (with_raw_experts converts at Compile); with -1 it takes a model's weights as raw where
    CUTLASS's layout does not fit their shapes (a model built for the CPU EP, which stock's CUDA EP refuses)."""
    attrs = node.attrs
    mode = attrs.get("weights_prepacked", -1)
    if attrs.get("quant_type", "int") != "int" or mode == 0:
        return False, None
    bits, rows1 = attrs.get("expert_weight_bits", 4), 2 if attrs.get("activation_type") == "swiglu" else 1
    pack = 8 // bits if bits in (2, 4, 8) else 1
    fc1, fc2 = (graph.value(node.inputs[i]) if len(node.inputs) > i and node.inputs[i] else None for i in (2, 5))
    shapes = [tuple(v.shape or ()) if v is not None else () for v in (fc1, fc2)]
    if any(len(s) != 3 or not all(isinstance(d, int) for d in s) for s in shapes):
        return mode == 1, "weights_prepacked=1 with expert weights of unknown shapes" if mode == 1 else None
    (_, hidden, cols1), (_, inter, cols2) = shapes
    x_shape = graph.value(node.inputs[0]).shape or (None,)
    fits = (bits in (4, 8) and cols1 * pack == rows1 * inter and cols2 * pack == hidden and hidden % 64 == 0 and
            inter % 64 == 0 and rows1 * inter % (16 // bits) == 0 and hidden % (16 // bits) == 0 and
            (x_shape[-1] == hidden or not isinstance(x_shape[-1], int)))
    fc3 = graph.value(node.inputs[8]) if len(node.inputs) > 8 and node.inputs[8] else None
    fits = fits and (fc3 is None or tuple(fc3.shape or ()) == shapes[0])  # FC3 gating: fc1's shape
    if mode == -1 and not fits:
        return False, None
    if not fits:
        return True, (f"weights_prepacked=1: expert weights {shapes[0]} and {shapes[1]} are not CUTLASS's layout of "
                      f"{bits}-bit experts (fc1 [experts, hidden, rows / pack], fc2 [experts, inter, hidden / pack], "
                      "4 or 8 bits, hidden and inter multiples of 64)")
    if any(v is not None and v.const is None and v.name not in graph.initializers for v in (fc1, fc2, fc3)):
        # (large initializers' data is not read when ORT asks what the EP claims: only at Compile)
        return True, "CUTLASS-prepacked expert weights (weights_prepacked) that are not initializers"
    return True, None


def with_raw_experts(node, graph):
    """The QMoE node reading its expert weights in the raw layout: CUTLASS-prepacked ones (expert_layout) converted
    into constants added to the graph, once per weights the graph holds."""
    prepacked, problem = expert_layout(node, graph)
    if not prepacked or problem:
        return node
    from ..cpu.native import raw_experts
    inputs, bits = list(node.inputs), node.attrs.get("expert_weight_bits", 4)
    for i in (2, 5, 8)[:3 if len(inputs) > 8 and inputs[8] else 2]:
        name = f"{inputs[i]}.raw"
        if name not in graph.values:
            held = graph.value(inputs[i])
            experts, k, cols = held.const.shape
            raw = raw_experts(held.const, cols * 8 // bits, k, bits)
            graph.values[name] = Value(name, held.elem_type, raw.shape, raw)
        inputs[i] = name
    return dataclasses.replace(node, inputs=inputs, attrs={**node.attrs, "weights_prepacked": 0})


def _check_qmoe_cuda(node, graph):
    return check_qmoe(node, graph, cuda=True) or ("router_weights is not supported on CUDA" if node.inputs[14:15] and
                                                  node.inputs[14] else None) or expert_layout(node, graph)[1]


@kernel("QMoE", domain="com.microsoft", types=TYPES, device="cuda", check=_check_qmoe_cuda,
        validate=_validate(validate_qmoe))
def qmoe(rt, stream, x, router_probs, fc1_experts_weights, fc1_scales=None, fc1_experts_bias=None,
         fc2_experts_weights=None, fc2_scales=None, fc2_experts_bias=None, fc3_experts_weights=None, fc3_scales=None,
         fc3_experts_bias=None, fc1_zero_points=None, fc2_zero_points=None, fc3_zero_points=None, router_weights=None,
         *rest, k=1, activation_type="relu", activation_alpha=1.0, activation_beta=0.0, normalize_routing_weights=0,
         swiglu_fusion=0, swiglu_limit=None, use_sparse_mixer=0, expert_weight_bits=4, block_size=0,
         quant_type="int", weights_prepacked=-1, accuracy_level=0, swiglu_limit_after_activation=0):
    if any(s is not None and s.dtype != x.dtype for s in (fc1_scales, fc2_scales, fc3_scales)):
        raise InvalidArgument(f"QMoE: scales of {fc1_scales.dtype} with an input of {x.dtype} (one type, as stock's)")
    zero_points = (fc1_zero_points, fc2_zero_points)
    tokens, experts, inter, block1, block2 = qmoe_geometry(
        x, router_probs, fc1_experts_weights, fc1_scales, fc1_experts_bias, fc2_experts_weights, fc2_scales,
        fc2_experts_bias, zero_points, 2 if activation_type == "swiglu" else 1, k, expert_weight_bits, block_size)
    fcs = {"fc1": (fc1_experts_weights, fc1_experts_bias, (fc1_scales, fc1_zero_points, block1)),
           "fc2": (fc2_experts_weights, fc2_experts_bias, (fc2_scales, fc2_zero_points, block2))}
    if fc3_experts_weights is not None:
        if fc3_scales is None:
            raise InvalidArgument("Input 'fc3_scales' is required with fc3_experts_weights.")
        blockwise = block_size > 0 and len(fc1_scales.shape) == 3 and fc1_scales.shape[-1] > 1  # as qmoe_geometry
        quantized_layout("fc3", fc3_experts_weights, fc3_scales, fc3_zero_points, expert_weight_bits, block_size,
                         blockwise, experts, inter, x.shape[-1])
        expect("fc3_experts_bias", fc3_experts_bias, (experts, inter))
        fcs["fc3"] = (fc3_experts_weights, fc3_experts_bias, (fc3_scales, fc3_zero_points, block1))
    return _run(rt, stream, x, router_probs, fcs, tokens, experts, inter,
                _attrs(activation_type, k, 0, activation_alpha, activation_beta, swiglu_limit, use_sparse_mixer),
                expert_weight_bits)
