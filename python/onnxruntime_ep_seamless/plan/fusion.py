"""Fusions chosen at plan time: a node pattern becomes one kernel call computing the same math.

Each fusion is one rule below, `rule(ctx, node) -> bool`: it looks for its pattern starting at `node` and,
where it matches, hands the replacement to `ctx.take` (which keeps it only where the device has a kernel for
it) and says whether it fused. `FUSIONS` orders them: `fuse` walks the nodes once per group, and at each node
the first rule of the group that fuses wins; a later group sees the nodes the earlier ones made. To add a
fusion: write its rule (docstring: the pattern, the replacement, when it applies), put it in `FUSIONS` where
its patterns no longer overlap an earlier rule's, and register the fused node's kernel.

Fused nodes use the internal domain FUSED_DOMAIN (kernels/registry.py; kernels in the family modules
of kernels/cpu/ and kernels/cuda/) or an ORT op with the same semantics (com.microsoft QuickGelu for SiLU, MatMulNBits with its
bias input). A pattern is rewritten only when its intermediate values have no other reader and are not
outputs of the partition, and the device has a kernel for the fused node (float32 only on the CPU).
"""
from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..graph.ir import Graph, Node, Value
from ..kernels import user as user_kernels
from ..kernels.registry import FUSED_DOMAIN, NORMED_PRODUCTS, lookup

F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
INTS = frozenset(map(np.dtype, (np.int32, np.int64)))
HALF_FLOATS = (10, 16)  # ONNX's float16 and bfloat16
NBITS_ATTRS = ("K", "N", "block_size", "bits", "accuracy_level")
# the RMS norms a product can apply to its activations itself (the kernel's epsilon default); the products:
# kernels/registry.py's NORMED_PRODUCTS
NORMS = {("com.microsoft", "SkipSimplifiedLayerNormalization"): 1e-12, ("", "SimplifiedLayerNormalization"): 1e-5,
         ("", "RMSNormalization"): 1e-5}


@dataclass
class FusionContext:
    """What the rules of one `fuse` call share: the graph, the partition's outputs, the device, the nodes of
    the current walk indexed by the values they read and write, and what the walk fused so far."""
    graph: Graph
    outputs: set
    device: str
    made: dict = field(default_factory=dict)  # the constants the rules added, by the weights they hold
    readers: Counter = field(default_factory=Counter)  # value -> how many inputs of the walk's nodes name it
    by_input: dict = field(default_factory=dict)  # value -> the nodes reading it, in order
    producer: dict = field(default_factory=dict)  # value -> the node writing it
    replaced: dict = field(default_factory=dict)  # node index -> fused node (first) or None (absorbed)

    def walk(self, nodes: list[Node]) -> None:
        """Start a walk over `nodes`: index them, nothing fused yet."""
        self.readers = Counter(name for node in nodes for name in node.inputs if name)
        self.by_input = {}
        for node in nodes:
            for name in node.inputs:
                self.by_input.setdefault(name, []).append(node)
        self.producer = {out: node for node in nodes for out in node.outputs if out}
        self.replaced = {}

    def result(self, nodes: list[Node]) -> list[Node]:
        """`nodes` after the walk: each fused node at the place of its first node, the absorbed ones gone."""
        return [self.replaced.get(n.index, n) for n in nodes if self.replaced.get(n.index, n) is not None]

    def const(self, name):
        return self.graph.value(name).const if name else None

    def fused_float(self, name):  # the CPU's fused kernels are float32; on CUDA the kernel lookup decides
        return self.device != "cpu" or self.graph.value(name).dtype == F32

    def private(self, node):
        """Whether the node's only output is read by exactly one node and by nobody else."""
        return len(node.outputs) == 1 and self.readers[node.outputs[0]] == 1 and node.outputs[0] not in self.outputs

    def scalar(self, name, value):
        c = self.const(name)
        return c is not None and c.size == 1 and c.dtype == F32 and abs(float(c.reshape(-1)[0]) - value) < 1e-6

    def reader(self, node):
        (out,) = node.outputs
        return self.by_input[out][0]

    def const_matmul(self, node):  # an ONNX MatMul by a constant matrix
        return node.op_type == "MatMul" and not node.domain and self.const(node.inputs[1]) is not None and \
            self.const(node.inputs[1]).ndim == 2

    def bias_add(self, node, n, dtype):
        """(the Add, its bias) when the node's product is read only by an Add of a constant bias of shape
        (n,) and type dtype, else (None, None)."""
        if not self.private(node):
            return None, None
        add = self.reader(node)
        if add.op_type != "Add" or add.domain or add.index in self.replaced:
            return None, None
        b = self.const(other(add, node.outputs[0]))
        return (add, other(add, node.outputs[0])) if b is not None and b.dtype == dtype and b.shape == (n,) else \
            (None, None)

    def take(self, fused, absorbed):
        """Replace the pattern by `fused` where the device runs it; whether it did."""
        if lookup(fused, self.graph, self.device, host_rule=False)[0] is None:  # no kernel for it on the device
            return False
        self.replaced[fused.index] = fused
        for n in absorbed:
            self.replaced[n.index] = None
        return True

    def transposed(self, key, matrix, shape, like, fused, absorbed):
        """take(fused(name), absorbed) where the fused node reads a constant added here: matrix() (K, N)
        of the weights named in `key`, stored transposed, `shape` (N, K), as a linear layer stores it, so
        that a decode step's product reads each output's weights in one run (native/cuda/matmul.cu).
        Typed like `like` before the kernel lookup reads it; one constant for weights read twice (tied)."""
        graph = self.graph
        if key in self.made:
            return self.take(fused(self.made[key]), absorbed)
        name = "|".join(key) + ".T"
        while name in graph.values:  # a name of the model's own
            name += "'"
        graph.values[name] = Value(name, graph.value(like).elem_type, shape)
        if self.take(fused(name), absorbed):
            from ..kernels.cpu.native import transpose_2d  # tiled: numpy's copy of .T took 0.2-0.3 GB/s
            graph.values[name].const = transpose_2d(matrix())
            self.made[key] = name
            return True
        del graph.values[name]
        return False


def other(node, name):
    """The input of a two-input node that is not `name`."""
    a, b = node.inputs
    return b if a == name else a


def plain_nbits(node):  # a MatMulNBits without bias or g_idx
    return node.op_type == "MatMulNBits" and node.domain == "com.microsoft" and not any(node.inputs[4:])


# --- the rules, in FUSIONS' order ----------------------------------------------------------------------------

def reduce_sum_sub_cast(ctx: FusionContext, node: Node) -> bool:
    """Cast(ReduceSum(x over its last axis) - c) -> ReduceSumSubCast(x): a decoder's seqlens_k from its
    attention mask in one launch. x integer, c a constant scalar of its type; CUDA only."""
    if node.op_type != "ReduceSum" or node.domain or ctx.device == "cpu":
        return False
    x = ctx.graph.value(node.inputs[0])
    rank, keepdims = len(x.shape or ()), node.attrs.get("keepdims", 1)
    axes = ctx.const(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else node.attrs.get("axes")
    if x.dtype not in INTS or not rank or axes is None or [int(a) % rank for a in np.ravel(axes)] != [rank - 1] \
            or not ctx.private(node):
        return False
    sub = ctx.reader(node)
    if sub.op_type != "Sub" or sub.domain or sub.inputs[0] != node.outputs[0] or not ctx.private(sub):
        return False
    c = ctx.const(sub.inputs[1])
    if c is None or c.size != 1 or c.dtype != x.dtype or c.ndim > rank - 1 + bool(keepdims):  # no broadcast up
        return False
    cast = ctx.reader(sub)
    return cast.op_type == "Cast" and not cast.domain and ctx.take(
        Node(cast.name, "ReduceSumSubCast", FUSED_DOMAIN, 1, node.inputs[:1], cast.outputs,
             {"offset": int(c.reshape(-1)[0]), "to": cast.attrs.get("to"), "keepdims": keepdims},
             index=node.index), [sub, cast])


def matmul_bias(ctx: FusionContext, node: Node) -> bool:
    """MatMul(A, W) + b -> MatMulBias(A, W, b): the bias added while the GEMM stores its tile. W and b
    constants of A's type; float32, and float16 too (on the CPU stock ORT fuses the pair and rounds once)."""
    if not (ctx.const_matmul(node) and (ctx.fused_float(node.inputs[0]) or ctx.graph.value(node.inputs[0]).dtype == F16)
            and ctx.const(node.inputs[1]).dtype == ctx.graph.value(node.inputs[0]).dtype):
        return False
    w = ctx.const(node.inputs[1])
    add, bias = ctx.bias_add(node, w.shape[1], w.dtype)
    return add is not None and ctx.take(Node(add.name, "MatMulBias", FUSED_DOMAIN, 1,
                                             [node.inputs[0], node.inputs[1], bias], add.outputs, index=node.index),
                                        [add])


def fused_conv(ctx: FusionContext, node: Node) -> bool:
    """Relu(Conv(x, W, b)), Add(Conv(x, W, b), z) and Relu(Add(Conv(x, W, b), z)) (a residual block's end; Add or a
    Sum of two, z of the Conv's shape) -> FusedConv (CPU, float32, constant weights): the Add and the Relu on each block
    of the output as the convolution writes it (in cache), not passes of their own over the whole output (stock ORT
    fuses them too). With z, the fused node takes the Add's place: z is ready there."""
    if ctx.device != "cpu" or node.op_type != "Conv" or node.domain or not ctx.private(node) or \
            not ctx.fused_float(node.inputs[0]) or ctx.const(node.inputs[1]) is None:
        return False
    inputs, absorbed, last, at = list(node.inputs[:3]), [], ctx.reader(node), node.index
    if last.index in ctx.replaced:  # the Add of a residual block whose other Conv fused it already
        return False
    if last.op_type in ("Add", "Sum") and not last.domain and len(last.inputs) == 2 and \
            last.inputs[0] != last.inputs[1]:
        z, conv_shape = other(last, node.outputs[0]), ctx.graph.value(node.outputs[0]).shape
        if not conv_shape or None in conv_shape or ctx.graph.value(z).shape != conv_shape or \
                ctx.graph.value(z).dtype != F32:
            return False  # an Add that broadcasts, or shapes not known to agree
        inputs, absorbed, at = inputs + [""] * (3 - len(inputs)) + [z], [node], last.index
        if ctx.private(last) and ctx.reader(last).op_type == "Relu" and not ctx.reader(last).domain:
            last = ctx.reader(last)
            absorbed.append(last)
    elif last.op_type == "Relu" and not last.domain:
        absorbed = [last]
    else:
        return False
    attrs = dict(node.attrs, relu=int(last.op_type == "Relu"))
    return ctx.take(Node(last.name, "FusedConv", FUSED_DOMAIN, 1, inputs, last.outputs, attrs, index=at), absorbed)


def silu(ctx: FusionContext, node: Node) -> bool:
    """Sigmoid(x) * x -> com.microsoft QuickGelu(x, alpha=1): SiLU in one native pass (float32 on the CPU)."""
    if node.op_type != "Sigmoid" or node.domain or not ctx.private(node) or not ctx.fused_float(node.inputs[0]):
        return False
    mul = ctx.reader(node)
    return mul.op_type == "Mul" and not mul.domain and other(mul, node.outputs[0]) == node.inputs[0] and \
        ctx.take(Node(mul.name, "QuickGelu", "com.microsoft", 1, [node.inputs[0]], mul.outputs, {"alpha": 1.0},
                      index=node.index), [mul])


def swiglu(ctx: FusionContext, gate: Node) -> bool:
    """silu(MatMulNBits(A, gate)) * MatMulNBits(A, up) -> MatMulNBitsSwiGLU(A, gate, up), and of two MatMuls
    by constant matrices -> MatMulSwiGLU(A, [gate | up] transposed, a constant added to the graph): an LLM's
    MLP gate in one pass over A. silu as Sigmoid(g) * g or QuickGelu(g, alpha=1); both products alike (CUDA)."""
    if gate.op_type not in ("MatMulNBits", "MatMul") or len(gate.outputs) != 1:
        return False
    g = gate.outputs[0]
    if not (plain_nbits(gate) or ctx.const_matmul(gate)) or g in ctx.outputs:
        return False
    users = ctx.by_input.get(g, [])
    sigmoid = [n for n in users if n.op_type == "Sigmoid" and not n.domain]
    if len(users) == ctx.readers[g] == 2 and sigmoid and ctx.private(sigmoid[0]) and ctx.reader(sigmoid[0]) in users:
        act = [sigmoid[0], ctx.reader(sigmoid[0])]  # Sigmoid(g) * g
        if act[1].op_type != "Mul" or act[1].domain or other(act[1], sigmoid[0].outputs[0]) != g:
            return False
    elif len(users) == ctx.readers[g] == 1 and users[0].op_type == "QuickGelu" and users[0].attrs.get("alpha") == 1.0:
        act = users
    else:
        return False
    if not ctx.private(act[-1]) or ctx.reader(act[-1]).op_type != "Mul" or ctx.reader(act[-1]).domain:
        return False
    final = ctx.reader(act[-1])
    up = ctx.producer.get(other(final, act[-1].outputs[0]))
    if up is None or up.index in ctx.replaced or not ctx.private(up) or up.inputs[0] != gate.inputs[0]:
        return False
    absorbed = [up] + act + [final]
    if ctx.const_matmul(gate):
        wg, wu = ctx.const(gate.inputs[1]), ctx.const(up.inputs[1]) if ctx.const_matmul(up) else None
        if wu is None or wu.shape != wg.shape or wu.dtype != wg.dtype:
            return False
        return ctx.transposed((gate.inputs[1], up.inputs[1]), lambda: np.concatenate([wg, wu], axis=1),
                              (2 * wg.shape[1], wg.shape[0]), gate.inputs[1],
                              lambda both: Node(final.name, "MatMulSwiGLU", FUSED_DOMAIN, 1, [gate.inputs[0], both],
                                                final.outputs, index=gate.index), absorbed)
    zero = lambda n: n.inputs[3] if len(n.inputs) > 3 else ""
    if not plain_nbits(up) or bool(zero(gate)) != bool(zero(up)) or \
            any(gate.attrs.get(k) != up.attrs.get(k) for k in NBITS_ATTRS):
        return False
    return ctx.take(Node(final.name, "MatMulNBitsSwiGLU", FUSED_DOMAIN, 1,
                         gate.inputs[:3] + [zero(gate)] + up.inputs[1:3] + [zero(up)], final.outputs,
                         {k: gate.attrs[k] for k in NBITS_ATTRS if k in gate.attrs}, index=gate.index), absorbed)


def matmul_nbits_bias(ctx: FusionContext, node: Node) -> bool:
    """MatMulNBits(...) + b -> MatMulNBits(..., bias=b): the bias added as the product is stored. b a constant
    of shape (N,) and A's type, the node without a bias of its own (float32 on the CPU)."""
    if node.op_type != "MatMulNBits" or node.domain != "com.microsoft" or \
            not (len(node.inputs) < 6 or not node.inputs[5]) or not ctx.fused_float(node.inputs[0]):
        return False
    add, bias = ctx.bias_add(node, node.attrs.get("N"), ctx.graph.value(node.inputs[0]).dtype)
    return add is not None and ctx.take(Node(add.name, node.op_type, node.domain, node.since_version,
                                             (node.inputs + [""] * 5)[:5] + [bias], add.outputs, dict(node.attrs),
                                             index=node.index), [add])


def gelu_erf(ctx: FusionContext, node: Node) -> bool:
    """Div(x, sqrt 2) -> Erf -> Add 1 -> Mul x -> Mul 0.5 -> GeluErf(x), as torch exports GELU (float32 on
    the CPU)."""
    if node.op_type != "Div" or node.domain or not ctx.scalar(node.inputs[1], math.sqrt(2)) or \
            not ctx.fused_float(node.inputs[0]):
        return False
    x, chain = node.inputs[0], [node]
    for op, operand in (("Erf", None), ("Add", 1.0), ("Mul", node.inputs[0]), ("Mul", 0.5)):
        prev = chain[-1]
        if not ctx.private(prev):
            break
        nxt = ctx.reader(prev)
        if nxt.op_type != op or nxt.domain:
            break
        if operand is not None:
            rest = other(nxt, prev.outputs[0])
            if not (rest == operand if isinstance(operand, str) else ctx.scalar(rest, operand)):
                break
        chain.append(nxt)
    return len(chain) == 5 and ctx.take(Node(chain[-1].name, "GeluErf", FUSED_DOMAIN, 1, [x], chain[-1].outputs,
                                             index=node.index), chain[1:])


def channel_affine(ctx: FusionContext, node: Node) -> bool:
    """An inference BatchNormalization (constant per-channel parameters) and after it a Mul and an Add by constants
    of one value a channel (and a Relu), any of them, as a CNN's pre-activation block (DenseNet's BN, scale, shift,
    Relu before a Conv; ORT folds those that follow a Conv into its weights) -> ChannelAffine(x, scale, shift): the
    chain folded at Compile into one scale and one shift a channel (float32, in the chain's order), one pass instead
    of up to five (CPU)."""
    if ctx.device != "cpu" or node.op_type != "BatchNormalization" or node.domain or len(node.inputs) != 5 or \
            node.attrs.get("training_mode", 0) or len([o for o in node.outputs if o]) != 1 or \
            not ctx.fused_float(node.inputs[0]):
        return False
    shape = ctx.graph.value(node.inputs[0]).shape
    params = [ctx.const(n) for n in node.inputs[1:]]
    if not shape or len(shape) < 2 or not isinstance(shape[1], int) or \
            any(p is None or p.dtype != F32 or p.shape != (shape[1],) for p in params):
        return False
    from ..kernels.cpu.normalization import inference_scale_shift
    a, b = inference_scale_shift(*params, node.attrs.get("epsilon", 1e-5))
    last, absorbed, relu = node, [], 0
    for op in ("Mul", "Add", "Relu"):
        if not ctx.private(last):
            break
        nxt = ctx.reader(last)
        if nxt.op_type != op or nxt.domain or nxt.index in ctx.replaced:
            continue
        if op == "Relu":
            relu = 1
        else:
            c = _per_channel_const(ctx, other(nxt, last.outputs[0]), shape)
            if c is None:
                continue
            a, b = (a * c, b * c) if op == "Mul" else (a, b + c)
        last = nxt
        absorbed.append(nxt)
    if not absorbed:
        return False
    names = []
    for part, v in (("scale", a), ("shift", b)):
        name = f"{node.outputs[0]}|channel_{part}"
        while name in ctx.graph.values:  # a name of the model's own
            name += "'"
        ctx.graph.values[name] = Value(name, ctx.graph.value(node.inputs[1]).elem_type, v.shape, const=v)
        names.append(name)
    if ctx.take(Node(last.name, "ChannelAffine", FUSED_DOMAIN, 1, [node.inputs[0], *names], last.outputs,
                     {"relu": relu}, index=node.index), absorbed):
        return True
    for name in names:
        del ctx.graph.values[name]
    return False


def _per_channel_const(ctx: FusionContext, name, shape):
    """A float32 constant holding one value a channel of a value of `shape` (C,) + 1s, or 1 + (C,) + 1s, as a vector;
    else None."""
    c = ctx.const(name)
    if c is None or c.dtype != F32 or c.size != shape[1] or c.ndim > len(shape):
        return None
    dims = (1,) * (len(shape) - c.ndim) + c.shape
    return c.reshape(-1) if dims[1] == shape[1] and all(d == 1 for i, d in enumerate(dims) if i != 1) else None


def layer_norm(ctx: FusionContext, node: Node) -> bool:
    """LayerNorm spelled out over the last axis, as torch exports it below opset 17: d = x - ReduceMean(x),
    d / Sqrt(ReduceMean(Pow(d, 2)) + eps) * gamma + beta (gamma and beta constant vectors, either operand order of
    the Mul and the Add) -> LayerNormalization(x, gamma, beta, epsilon=eps), one pass instead of nine (stock ORT fuses
    it too). CPU only: not yet run on a GPU."""
    if ctx.device != "cpu" or not _last_axis_mean(ctx, node) or not ctx.private(node) or \
            not ctx.fused_float(node.inputs[0]):
        return False
    x, sub = node.inputs[0], ctx.reader(node)
    if sub.op_type != "Sub" or sub.domain or sub.inputs != [x, node.outputs[0]]:
        return False
    d = sub.outputs[0]
    readers = ctx.by_input.get(d, [])
    if ctx.readers[d] != 2 or d in ctx.outputs or sorted(r.op_type for r in readers) != ["Div", "Pow"]:
        return False
    power, div = sorted(readers, key=lambda r: r.op_type != "Pow")
    if power.domain or not ctx.scalar(power.inputs[1], 2.0) or power.inputs[0] != d or not ctx.private(power):
        return False
    mean = ctx.reader(power)
    if not _last_axis_mean(ctx, mean) or not ctx.private(mean):
        return False
    add = ctx.reader(mean)
    eps = ctx.const(other(add, mean.outputs[0])) if add.op_type == "Add" and not add.domain else None
    if eps is None or eps.size != 1 or eps.dtype != F32 or not ctx.private(add):
        return False
    sqrt = ctx.reader(add)
    if sqrt.op_type != "Sqrt" or sqrt.domain or not ctx.private(sqrt) or ctx.reader(sqrt) is not div or \
            div.domain or div.inputs != [d, sqrt.outputs[0]] or not ctx.private(div):
        return False
    scale = ctx.reader(div)
    gamma = other(scale, div.outputs[0]) if scale.op_type == "Mul" and not scale.domain else None
    if gamma is None or not _row_vector(ctx, gamma, x) or not ctx.private(scale):
        return False
    shift = ctx.reader(scale)
    beta = other(shift, scale.outputs[0]) if shift.op_type == "Add" and not shift.domain else None
    if beta is None or not _row_vector(ctx, beta, x):
        return False
    absorbed = [sub, power, mean, add, sqrt, div, scale, shift]
    if any(n.index in ctx.replaced for n in absorbed):
        return False
    return ctx.take(Node(shift.name, "LayerNormalization", "", 17, [x, gamma, beta], shift.outputs,
                         {"axis": -1, "epsilon": float(eps.reshape(-1)[0])}, index=node.index), absorbed)


def _last_axis_mean(ctx: FusionContext, node) -> bool:
    """A ReduceMean over the last axis only, keeping it (axes an attribute, or a constant input since opset 18)."""
    if node.op_type != "ReduceMean" or node.domain or not node.attrs.get("keepdims", 1):
        return False
    rank = len(ctx.graph.value(node.inputs[0]).shape or ())
    axes = ctx.const(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else node.attrs.get("axes")
    return bool(rank) and axes is not None and [int(a) % rank for a in np.ravel(axes)] == [rank - 1]


def _row_vector(ctx: FusionContext, name, x) -> bool:
    """A float32 constant of one row of x's last axis (a LayerNorm's gamma or beta)."""
    c, shape = ctx.const(name), ctx.graph.value(x).shape
    return c is not None and c.dtype == F32 and c.ndim == 1 and bool(shape) and c.shape[0] == shape[-1]


def gelu_tanh(ctx: FusionContext, node: Node) -> bool:
    """GELU's tanh form spelled out, x (0.5 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))), matched from its Tanh: the
    cube as Pow(x, 3) or Muls of x in any order and nesting (jax2tf's Magika, GPT-2's torch export), every
    commutative operand order, the 0.5 with x or with the bracket -> com.microsoft FastGelu(x), one pass instead of
    nine (stock ORT fuses it to FastGelu too). CPU only: not yet run on a GPU."""
    if ctx.device != "cpu" or node.op_type != "Tanh" or node.domain:
        return False
    scaled = ctx.producer.get(node.inputs[0])  # sqrt(2/pi) (x + 0.044715 x^3)
    inner = _scaled_by(ctx, scaled, math.sqrt(2 / math.pi))
    if inner is None or inner.op_type != "Add" or inner.domain or not ctx.private(inner):
        return False
    for x, cube in (inner.inputs, inner.inputs[::-1]):
        leaves, chain = _product_leaves(ctx, ctx.producer.get(cube))
        if sorted(map(str, leaves)) == sorted(map(str, [x, x, x, 0.044715])):
            break
    else:
        return False
    if not ctx.fused_float(x) or not ctx.private(node):
        return False
    one = ctx.reader(node)  # 1 + tanh
    if one.op_type != "Add" or one.domain or not ctx.scalar(other(one, node.outputs[0]), 1.0) or not ctx.private(one):
        return False
    tail = _gelu_tail(ctx, one, x)
    if tail is None:
        return False
    absorbed = chain + [inner, scaled, one] + tail
    if any(n.index in ctx.replaced for n in absorbed):
        return False
    return ctx.take(Node(tail[-1].name, "FastGelu", "com.microsoft", 1, [x], tail[-1].outputs, index=node.index),
                    absorbed)


def _scaled_by(ctx: FusionContext, mul, value):
    """The producer of the other operand of `mul`, a private Mul by the scalar `value`, or None."""
    if mul is None or mul.op_type != "Mul" or mul.domain or not ctx.private(mul):
        return None
    for a, b in (mul.inputs, mul.inputs[::-1]):
        if ctx.scalar(b, value):
            return ctx.producer.get(a)
    return None


def _product_leaves(ctx: FusionContext, node):
    """The factors of a tree of private Muls (and Pow(t, 3), three factors t) rooted at node: value names and
    float32 scalars rounded to 6 digits; ([], []) where it is none. Also the tree's nodes."""
    if node is None or node.domain or not ctx.private(node):
        return [], []
    if node.op_type == "Pow" and ctx.scalar(node.inputs[1], 3.0):
        return [node.inputs[0]] * 3, [node]
    if node.op_type != "Mul":
        return [], []
    leaves, chain = [], [node]
    for name in node.inputs:
        c = ctx.const(name)
        if c is not None and c.size == 1 and c.dtype == F32:
            leaves.append(round(float(c.reshape(-1)[0]), 6))
            continue
        inner = ctx.producer.get(name)
        sub, nodes = _product_leaves(ctx, inner) if inner is not None and inner.op_type in ("Mul", "Pow") else ([], [])
        if sub:
            leaves, chain = leaves + sub, chain + nodes
        else:
            leaves.append(name)
    return leaves, chain


def _gelu_tail(ctx: FusionContext, one, x):
    """The nodes after 1 + tanh that make x (0.5 (1 + tanh)): Mul(x, Mul(0.5, one)) or Mul(Mul(0.5, x), one), any
    operand order; None where it is neither."""
    half = ctx.reader(one)
    if half.op_type != "Mul" or half.domain:
        return None
    if ctx.scalar(other(half, one.outputs[0]), 0.5) and ctx.private(half):  # x (0.5 (1 + tanh))
        last = ctx.reader(half)
        return [half, last] if last.op_type == "Mul" and not last.domain and \
            other(last, half.outputs[0]) == x else None
    half_x = ctx.producer.get(other(half, one.outputs[0]))  # (0.5 x) (1 + tanh)
    if half_x is None or half_x.op_type != "Mul" or half_x.domain or not ctx.private(half_x) or \
            x not in half_x.inputs or not ctx.scalar(other(half_x, x), 0.5):
        return None
    return [half_x, half]


def _dim_of_shape(ctx: FusionContext, name):
    """0 or 1 where `name` is Unsqueeze(Gather(Shape(t), that index), axis 0) of a rank-3 t (torch's view of a
    tensor's batch or sequence length), else None."""
    unsqueeze = ctx.producer.get(name)
    if unsqueeze is None or unsqueeze.op_type != "Unsqueeze" or unsqueeze.domain:
        return None
    axes = ctx.const(unsqueeze.inputs[1]) if len(unsqueeze.inputs) > 1 else unsqueeze.attrs.get("axes")
    gather = ctx.producer.get(unsqueeze.inputs[0])
    if axes is None or list(np.ravel(axes)) != [0] or gather is None or gather.op_type != "Gather" or gather.domain:
        return None
    shape, i = ctx.producer.get(gather.inputs[0]), ctx.const(gather.inputs[1])
    if shape is None or shape.op_type != "Shape" or shape.domain or shape.attrs.get("start", 0) or \
            "end" in shape.attrs or len(ctx.graph.value(shape.inputs[0]).shape or ()) != 3 or i is None or i.size != 1:
        return None
    return int(i.reshape(-1)[0]) if int(i.reshape(-1)[0]) in (0, 1) else None


def _shape_parts(ctx: FusionContext, name):
    """A Reshape's target, part by part: ints where constant, "b" and "s" for dims 0 and 1 of a rank-3 value (a
    Concat of Unsqueeze(Gather(Shape(t), i)), as torch exports a view); None where it is something else."""
    c = ctx.const(name)
    if c is not None:
        return [int(v) for v in c.reshape(-1)] if c.ndim == 1 else None
    concat = ctx.producer.get(name)
    if concat is None or concat.op_type != "Concat" or concat.domain or concat.attrs.get("axis") != 0:
        return None
    parts = []
    for part in concat.inputs:
        c = ctx.const(part)
        dim = None if c is not None else _dim_of_shape(ctx, part)
        if c is not None and c.size == 1:
            parts.append(int(c.reshape(-1)[0]))
        elif dim is not None:
            parts.append("bs"[dim])
        else:
            return None
    return parts


def _heads(ctx: FusionContext, name, perm):
    """(x, heads, head size, [the Transpose, the Reshape]) where `name` is Transpose(perm) of a private Reshape of x
    [b, s, heads * head size] to [b, s, heads, head size]; else None."""
    t = ctx.producer.get(name)
    if t is None or t.op_type != "Transpose" or t.domain or list(t.attrs.get("perm", ())) != perm or \
            not ctx.private(t):
        return None
    r = ctx.producer.get(t.inputs[0])
    if r is None or r.op_type != "Reshape" or r.domain or r.attrs.get("allowzero", 0) or not ctx.private(r):
        return None
    x, parts = ctx.graph.value(r.inputs[0]), _shape_parts(ctx, r.inputs[1])
    if len(x.shape or ()) != 3 or not isinstance(x.shape[2], int) or parts is None or len(parts) != 4 or \
            parts[0] not in (0, "b") or parts[1] not in (0, "s") or not all(isinstance(d, int) for d in parts[2:]):
        return None
    n, h = parts[2:]
    if n == -1 and h > 0 and x.shape[2] % h == 0:  # one dim inferred
        n = x.shape[2] // h
    elif h == -1 and n > 0 and x.shape[2] % n == 0:
        h = x.shape[2] // n
    return (r.inputs[0], n, h, [t, r]) if n > 0 and h > 0 and n * h == x.shape[2] else None


def encoder_attention(ctx: FusionContext, softmax: Node) -> bool:
    """A torch-exported encoder's attention (BERT, MiniLM): Q, K and V [b, s, n h] viewed as heads (Reshape,
    Transpose to [b, n, s, h], K's to [b, n, h, s]), Q K^T times or over a scalar, plus a mask, Softmax over the
    keys, times V, heads transposed back and merged -> ONNX Attention(q, k, v, mask; q_num_heads, kv_num_heads,
    scale) (opset 23): one native step (native/cpu/sdpa.c) instead of eleven, the scores a block at a time in
    cache (CPU, float32). The scale a product: a divisor becomes its reciprocal, as stock's AttentionFusion
    makes it."""
    if ctx.device != "cpu" or softmax.op_type != "Softmax" or softmax.domain or \
            len(ctx.graph.value(softmax.inputs[0]).shape or ()) != 4 or not ctx.fused_float(softmax.inputs[0]) or \
            softmax.attrs.get("axis", -1 if softmax.since_version >= 13 else 1) % 4 != 3 or not ctx.private(softmax):
        return False
    chain, mask, scale = [softmax], "", 1.0
    node = ctx.producer.get(softmax.inputs[0])
    if node is not None and node.op_type == "Add" and not node.domain and ctx.private(node):
        sides = [x for x in node.inputs if ctx.producer.get(x) is not None and
                 ctx.producer[x].op_type in ("Mul", "Div", "MatMul") and ctx.private(ctx.producer[x])]
        if len(sides) != 1 or len(ctx.graph.value(other(node, sides[0])).shape or ()) > 4 or \
                not ctx.fused_float(other(node, sides[0])):
            return False
        mask = other(node, sides[0])
        chain.append(node)
        node = ctx.producer[sides[0]]
    if node is not None and node.op_type in ("Mul", "Div") and not node.domain and ctx.private(node):
        c = ctx.const(node.inputs[1])
        if c is None or c.size != 1 or c.dtype != F32 or not float(c.reshape(-1)[0]):
            return False
        scale = float(c.reshape(-1)[0]) if node.op_type == "Mul" else float(np.float32(1) / c.reshape(-1)[0])
        chain.append(node)
        node = ctx.producer.get(node.inputs[0])
    if node is None or node.op_type != "MatMul" or node.domain or not ctx.private(node):
        return False
    q, k = _heads(ctx, node.inputs[0], [0, 2, 1, 3]), _heads(ctx, node.inputs[1], [0, 2, 3, 1])
    pv = ctx.reader(softmax)
    if q is None or k is None or pv.op_type != "MatMul" or pv.domain or pv.inputs[0] != softmax.outputs[0] or \
            not ctx.private(pv):
        return False
    v, back = _heads(ctx, pv.inputs[1], [0, 2, 1, 3]), ctx.reader(pv)
    if v is None or back.op_type != "Transpose" or back.domain or list(back.attrs.get("perm", ())) != [0, 2, 1, 3] \
            or not ctx.private(back):
        return False
    merge = ctx.reader(back)
    parts = _shape_parts(ctx, merge.inputs[1]) if merge.op_type == "Reshape" and not merge.domain else None
    if parts is None or merge.attrs.get("allowzero", 0) or len(parts) != 3 or parts[0] not in (0, "b") or \
            parts[1] not in (0, "s") or parts[2] not in (-1, q[1] * v[2]) or q[2] != k[2] or k[1] != v[1] or \
            q[1] % k[1]:
        return False
    absorbed = chain + [node, pv, back] + q[3] + k[3] + v[3]
    if any(n.index in ctx.replaced for n in absorbed + [merge]):
        return False
    return ctx.take(Node(merge.name, "Attention", "", 23, [q[0], k[0], v[0], mask], merge.outputs,
                         {"q_num_heads": q[1], "kv_num_heads": k[1], "scale": scale}, index=merge.index), absorbed)


def mish(ctx: FusionContext, node: Node) -> bool:
    """x * Tanh(Softplus(x)) -> Mish(x) (opset 18): torch's Mish as exported before opset 18, one pass
    instead of three (any float type: the Mish kernels of both devices take them all)."""
    if node.op_type != "Softplus" or node.domain or not ctx.private(node):
        return False
    tanh = ctx.reader(node)
    if tanh.op_type != "Tanh" or tanh.domain or not ctx.private(tanh):
        return False
    mul = ctx.reader(tanh)
    return mul.op_type == "Mul" and not mul.domain and other(mul, tanh.outputs[0]) == node.inputs[0] and \
        ctx.take(Node(mul.name, "Mish", "", 18, [node.inputs[0]], mul.outputs, {}, index=node.index), [tanh, mul])


def _argmax_of(ctx: FusionContext, y):
    """The ArgMax over the last axis of y that reads it, if one does."""
    rank = len(ctx.graph.value(y).shape or ())
    for n in ctx.by_input.get(y, []):
        if n.op_type == "ArgMax" and not n.domain and n.inputs[0] == y and n.index not in ctx.replaced and rank and \
                n.attrs.get("axis", 0) % rank == rank - 1:
            return n
    return None


def linear(ctx: FusionContext, node: Node) -> bool:
    """What remains of MatMul(A, W) [+ b], W and b constants of A's type -> Linear(A, W.T [, b]), W.T a constant
    added to the graph; with an ArgMax of its last axis (a greedy decoder's LM head and next token) ->
    LinearArgMax: one launch (CUDA)."""
    if ctx.device == "cpu" or not ctx.const_matmul(node) or \
            ctx.const(node.inputs[1]).dtype != ctx.graph.value(node.inputs[0]).dtype:
        return False
    w = node.inputs[1]
    add, bias = ctx.bias_add(node, ctx.const(w).shape[1], ctx.const(w).dtype)
    last = add if add is not None else node
    op, outs, attrs, absorbed = "Linear", list(last.outputs), {}, [add] if add is not None else []
    pick = _argmax_of(ctx, last.outputs[0])
    if pick is not None:
        op, outs, absorbed = "LinearArgMax", outs + pick.outputs, absorbed + [pick]
        attrs = {"keepdims": pick.attrs.get("keepdims", 1),
                 "select_last_index": pick.attrs.get("select_last_index", 0)}
    return ctx.transposed((w,), lambda: ctx.const(w), ctx.const(w).shape[::-1], w,
                          lambda wt: Node(last.name, op, FUSED_DOMAIN, 1, [node.inputs[0], wt] + ([bias] if bias else []),
                                          outs, attrs, index=node.index), absorbed)


def _keeps_rows(ctx: FusionContext, node: Node) -> bool:
    """A private Reshape that copies its input's first two axes (batch, sequence): a shape constant starting 0, 0."""
    c = ctx.const(node.inputs[1]) if node.op_type == "Reshape" and len(node.inputs) > 1 else None
    return c is not None and not node.domain and c.size >= 2 and not (c.reshape(-1)[:2] != 0).any() and \
        not node.attrs.get("allowzero", 0) and node.index not in ctx.replaced and ctx.private(node)


def _l2_rows(ctx: FusionContext, name: str, d: int):
    """(x, the nodes) where `name` is Reshape(LpNormalization(Reshape(x)), p=2, over a last axis of d) of a rank-3
    x, both Reshapes keeping x's first two axes: each d consecutive values of x's rows over their L2 norm."""
    unflat = ctx.producer.get(name)
    if unflat is None or not _keeps_rows(ctx, unflat):
        return None
    norm = ctx.producer.get(unflat.inputs[0])
    if norm is None or norm.op_type != "LpNormalization" or norm.domain or norm.attrs.get("p", 2) != 2 or \
            norm.index in ctx.replaced or not ctx.private(norm):
        return None
    shape = ctx.graph.value(norm.inputs[0]).shape
    if not shape or norm.attrs.get("axis", -1) not in (-1, len(shape) - 1) or shape[-1] != d:
        return None
    flat = ctx.producer.get(norm.inputs[0])
    if flat is None or not _keeps_rows(ctx, flat) or len(ctx.graph.value(flat.inputs[0]).shape or ()) != 3:
        return None
    return flat.inputs[0], [flat, norm, unflat]


def normed_linear_attention(ctx: FusionContext, node: Node) -> bool:
    """com.microsoft LinearAttention whose key and query are _l2_rows of d_k values (the query's maybe then times a
    scalar constant) -> NormedLinearAttention(x_q, x_k, the other inputs; q_scale: the constant, 0.0 for none):
    its kernel normalises the rows as it loads them, three launches a layer fewer (Qwen3.5's linear attention).
    Where that kernel runs (kernels/cuda/attention.py column_recurrence; CUDA)."""
    if ctx.device == "cpu" or node.op_type != "LinearAttention" or node.domain != "com.microsoft" or \
            len(node.inputs) < 3 or node.attrs.get("state_window", 0):
        return False
    from ..kernels.cuda.attention import column_recurrence  # CUDA's modules: not in a CPU-only install
    q_heads, kv_heads = node.attrs.get("q_num_heads", 0), node.attrs.get("kv_num_heads", 0)
    q_width = (ctx.graph.value(node.inputs[0]).shape or (None,))[-1]
    v_width = (ctx.graph.value(node.inputs[2]).shape or (None,))[-1]
    if not (isinstance(q_width, int) and isinstance(v_width, int) and q_heads > 0 and kv_heads > 0):
        return False
    d_k, d_v = q_width // q_heads, v_width // kv_heads
    if q_width != d_k * q_heads or v_width != d_v * kv_heads or \
            not column_recurrence(d_k, max(q_heads // kv_heads, 1)):
        return False
    q, mul, q_scale = node.inputs[0], ctx.producer.get(node.inputs[0]), 0.0
    if mul is not None and mul.op_type == "Mul" and not mul.domain and mul.index not in ctx.replaced and \
            ctx.private(mul):
        for i in (0, 1):
            c = ctx.const(mul.inputs[1 - i])
            if c is not None and c.size == 1 and c.dtype == ctx.graph.value(q).dtype and float(c.reshape(-1)[0]):
                q, q_scale = mul.inputs[i], float(c.reshape(-1)[0])
                break
    queries, keys = _l2_rows(ctx, q, d_k), _l2_rows(ctx, node.inputs[1], d_k)
    if queries is None or keys is None:
        return False
    absorbed = queries[1] + keys[1] + ([mul] if q != node.inputs[0] else [])
    return ctx.take(Node(node.name, "NormedLinearAttention", FUSED_DOMAIN, 1, [queries[0], keys[0]] + node.inputs[2:],
                         node.outputs, {**node.attrs, "q_scale": q_scale}, index=node.index), absorbed)


def rotary_in_float(ctx: FusionContext, node: Node) -> bool:
    """Cast(MRotaryEmbedding(Cast(x, float32), float32 caches), x's type) of a float16 or bfloat16 x ->
    MRotaryEmbedding in FUSED_DOMAIN (x, the caches): the float32 rotation rounded once into x's type, two launches
    fewer (Qwen3.5's attention layers, q and k; CUDA)."""
    if ctx.device == "cpu" or node.op_type != "MRotaryEmbedding" or node.domain != "com.microsoft" or \
            not ctx.private(node):
        return False
    up, down = ctx.producer.get(node.inputs[0]), ctx.reader(node)
    if up is None or not all(c.op_type == "Cast" and not c.domain and c.index not in ctx.replaced for c in (up, down)):
        return False
    x = up.inputs[0]
    kind = ctx.graph.value(x).elem_type
    if kind not in HALF_FLOATS or ctx.graph.value(node.inputs[0]).dtype != F32 or not ctx.private(up) or \
            ctx.graph.value(down.outputs[0]).elem_type != kind or \
            any(ctx.graph.value(c).dtype != F32 for c in node.inputs[2:4]):
        return False
    return ctx.take(Node(down.name, node.op_type, FUSED_DOMAIN, 1, [x] + node.inputs[1:], down.outputs,
                         dict(node.attrs), index=node.index), [up, down])


def token_major_causal_conv(ctx: FusionContext, node: Node) -> bool:
    """Transpose(CausalConvWithState(Transpose(x, perm 0 2 1)), perm 0 2 1) of a channels-first, rank-3 node ->
    CausalConvWithState in FUSED_DOMAIN (x; the node's other inputs, outputs and state layout): the kernel reads and
    writes (batch, position, channel) itself, two copies of a prompt's activations a layer fewer (Qwen3.5's short
    convolution). LFM2's gated form, Transpose(Mul(c, CausalConvWithState(Mul(b, v)))) where b, c and v are the
    three blocks of C channels of Split(Transpose(x, perm 0 2 1), axis 1), fuses too: the node reads x's blocks
    itself (attrs pieces, value, in_gate, out_gate: args.h ConvPieces), five launches a layer fewer (CUDA)."""
    from ..kernels.cpu.spatial import check_causal_conv
    if ctx.device == "cpu" or node.op_type != "CausalConvWithState" or node.domain not in ("", "com.microsoft") or \
            node.attrs.get("channels_last", 0) or check_causal_conv(node, ctx.graph) or not node.outputs[0] or \
            node.outputs[0] in ctx.outputs or ctx.readers[node.outputs[0]] != 1:
        return False
    up, down = ctx.producer.get(node.inputs[0]), ctx.by_input[node.outputs[0]][0]
    attrs = {"activation": node.attrs.get("activation", "none"), "dilation": node.attrs.get("dilation", 1)}
    absorbed = []
    if _plain(ctx, up, "Mul") and _plain(ctx, down, "Mul"):
        gates = _conv_gates(ctx, node, up, down)
        if gates is None:
            return False
        split, attrs["value"], attrs["in_gate"], attrs["out_gate"] = gates
        attrs["pieces"] = len(split.outputs)
        absorbed = [up, split, down]
        up, down = ctx.producer.get(split.inputs[0]), ctx.reader(down)
    if not all(_plain(ctx, t, "Transpose") and list(t.attrs.get("perm", ())) == [0, 2, 1] for t in (up, down)) or \
            not ctx.private(up):
        return False
    return ctx.take(Node(node.name, node.op_type, FUSED_DOMAIN, 1, [up.inputs[0]] + node.inputs[1:],
                         down.outputs + node.outputs[1:], attrs, index=node.index), [up, down] + absorbed)


def _plain(ctx: FusionContext, node, op_type: str) -> bool:
    """Whether node is an ONNX `op_type` node no rule has taken."""
    return node is not None and node.op_type == op_type and not node.domain and node.index not in ctx.replaced


def _conv_gates(ctx: FusionContext, conv: Node, gate_in: Node, gate_out: Node):
    """(the Split, value, in_gate, out_gate: its blocks' places) where the convolution reads Mul(v, b) and is read by
    Mul(y, c) of the three equal blocks of one Split of its channels (LFM2's short convolution), else None."""
    channels = (ctx.graph.value(conv.inputs[1]).shape or (None,))[0]
    split = ctx.producer.get(gate_in.inputs[0])
    if not _plain(ctx, split, "Split") or len(split.outputs) != 3 or not ctx.private(gate_in) or \
            not ctx.private(gate_out) or len(gate_in.inputs) != 2 or len(gate_out.inputs) != 2 or \
            any(ctx.readers[o] != 1 or o in ctx.outputs for o in split.outputs) or \
            gate_out.inputs.count(conv.outputs[0]) != 1 or not isinstance(channels, int):
        return None
    blocks = [*gate_in.inputs, other(gate_out, conv.outputs[0])]
    if sorted(blocks) != sorted(split.outputs) or not _equal_blocks(ctx, split, channels):
        return None
    return (split, *(split.outputs.index(b) for b in blocks))


def _equal_blocks(ctx: FusionContext, split: Node, channels: int) -> bool:
    """Whether the Split cuts axis 1 of its rank-3 input into blocks of `channels` each."""
    shape = ctx.graph.value(split.inputs[0]).shape
    if split.attrs.get("axis", 0) not in (1, -2) or shape is None or len(shape) != 3:
        return False
    if len(split.inputs) > 1 and split.inputs[1]:  # the sizes as an input (opset 13 and up): a constant
        sizes = ctx.const(split.inputs[1])
        return sizes is not None and [int(v) for v in np.ravel(sizes)] == [channels] * len(split.outputs)
    if "split" in split.attrs:  # before opset 13
        return list(split.attrs["split"]) == [channels] * len(split.outputs)
    return shape[1] == channels * len(split.outputs)  # equal blocks of a known axis


def normed_product(ctx: FusionContext, norm: Node) -> bool:
    """A (Skip)SimplifiedLayerNormalization or RMSNormalization (NORMS) over the last axis whose output only one
    product (NORMED_PRODUCTS) reads, as its activations -> NormedProduct(x, skip, gamma, bias, the product's
    other inputs) at the product's place, with the norm's x + skip + bias output when it has one: a decode
    step's GEMV normalises its rows itself (kernels/cuda/normalization.py), one launch instead of two (CUDA)."""
    default = NORMS.get((norm.domain, norm.op_type))
    if ctx.device == "cpu" or default is None or any(norm.outputs[1:3]) or norm.outputs[0] in ctx.outputs:
        return False
    if not norm.domain and \
            norm.attrs.get("axis", -1) not in (-1, len(ctx.graph.value(norm.inputs[0]).shape or ()) - 1):
        return False
    if ctx.readers[norm.outputs[0]] != 1:
        return False
    product = ctx.by_input[norm.outputs[0]][0]
    if NORMED_PRODUCTS.get(product.op_type) != product.domain or product.inputs.count(norm.outputs[0]) != 1 or \
            product.inputs[0] != norm.outputs[0]:
        return False
    total = norm.outputs[3] if len(norm.outputs) > 3 else ""
    if total and any(k.index < product.index for k in ctx.by_input.get(total, [])):  # read before the product runs
        return False
    x, skip, gamma, bias = ((norm.inputs + [""] * 4)[:4] if norm.domain else
                            (norm.inputs[0], "", norm.inputs[1], ""))
    return ctx.take(Node(product.name, "NormedProduct", FUSED_DOMAIN, 1, [x, skip, gamma, bias] + product.inputs[1:],
                         product.outputs + ([total] if total else []),
                         {**product.attrs, "product": product.op_type, "epsilon": norm.attrs.get("epsilon", default)},
                         index=product.index), [norm])


# The rules in the order they are tried: one walk over the nodes per group, where at each node the first rule
# of the group that fuses wins. The nodes come in topological order: SwiGLU is tried at a gate before SiLU
# reaches its Sigmoid; Linear takes only the products SwiGLU left (a pair's up product may come before its
# gate); NormedProduct reads the products the groups before it made (Node.index: the place in that order).
FUSIONS = [
    [reduce_sum_sub_cast, matmul_bias, fused_conv, silu, swiglu, matmul_nbits_bias, gelu_erf, gelu_tanh, layer_norm,
     channel_affine, mish, encoder_attention, normed_linear_attention, rotary_in_float, token_major_causal_conv],
    [linear],
    [normed_product],
]


def _user_nodes(graph: Graph, device: str) -> set:
    """The indices of the nodes a user's kernel runs (kernels/user.py): they run as they are."""
    if not user_kernels.has_kernels():
        return set()
    return {node.index for node in graph.nodes if getattr(lookup(node, graph, device)[0], "user", "")}


def fuse(graph: Graph, outputs: list[str], device: str = "cpu", enabled: bool = True) -> list[Node]:
    """The graph's nodes after FUSIONS, for a partition whose outputs are `outputs`, on `device`. May add
    constants to the graph (the transposed weights of Linear and MatMulSwiGLU; on CUDA, QMoE's CUTLASS-prepacked
    experts in the raw layout, kernels/cuda/moe.py with_raw_experts; on the CPU, MatMulNBits' and QMoE's weights as
    panels in place of their rows, kernels/cpu/quantization.py with_panels, kernels/cpu/moe.py qmoe_with_panels).
    enabled=False (the `fusion` option): the nodes as they are but for those layouts."""
    ctx = FusionContext(graph, set(outputs), device)
    held = _user_nodes(graph, device) if enabled else set()
    originals = {}  # id(stand-in) -> the node a user's kernel runs: no rule matches the stand-in's op type
    nodes = []
    for n in graph.nodes:
        if n.index in held:
            stand_in = dataclasses.replace(n, op_type=f"{n.op_type} (user kernel)")
            originals[id(stand_in)] = n
            n = stand_in
        nodes.append(n)
    if device == "cuda":  # not a fusion: the layout of weights our kernel reads (with fusion off too)
        from ..kernels.cuda.moe import with_raw_experts
        nodes = [with_raw_experts(n, graph) if n.op_type == "QMoE" and n.domain == "com.microsoft" else n
                 for n in nodes]
    for rules in FUSIONS if enabled else ():
        ctx.walk(nodes)
        for node in nodes:
            if node.index not in ctx.replaced:
                for rule in rules:
                    if rule(ctx, node):
                        break
        nodes = ctx.result(nodes)
    if device == "cpu":  # not a fusion either: the weight layout the CPU's MatMulNBits kernels read (fusion off too)
        from ..kernels.cpu.moe import qmoe_with_panels
        from ..kernels.cpu.quantization import with_panels
        nodes = qmoe_with_panels(with_panels(nodes, graph, outputs), graph, outputs)
    return [originals.get(id(n), n) for n in nodes]
