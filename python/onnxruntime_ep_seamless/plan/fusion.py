"""Fusions chosen at plan time: a node pattern becomes one kernel call computing the same math.

Fused nodes use the internal domain FUSED_DOMAIN (kernels in kernels/cpu/fused.py) or an ORT op
with the same semantics (com.microsoft QuickGelu for SiLU, MatMulNBits with its bias input).
A pattern is rewritten only when its intermediate values have no other reader and are not
outputs of the partition, and the device has a kernel for the fused node (float32 only on the CPU).
"""
from __future__ import annotations

import math
from collections import Counter

import numpy as np

from ..graph.ir import Graph, Node, Value
from ..kernels.registry import lookup

FUSED_DOMAIN = "ai.seamless"
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
INTS = frozenset(map(np.dtype, (np.int32, np.int64)))


def fuse(graph: Graph, outputs: list[str], device: str = "cpu") -> list[Node]:
    readers = Counter(name for node in graph.nodes for name in node.inputs if name)
    outputs = set(outputs)
    replaced: dict[int, Node | None] = {}  # node index -> fused node (first) or None (absorbed)

    def const(name):
        return graph.value(name).const if name else None

    def fused_float(name):  # the CPU's fused kernels are float32; on CUDA the kernel lookup decides
        return device != "cpu" or graph.value(name).dtype == F32

    def private(node):
        """Whether the node's only output is read by exactly one node and by nobody else."""
        return len(node.outputs) == 1 and readers[node.outputs[0]] == 1 and node.outputs[0] not in outputs

    def other(node, name):
        """The input of a two-input node that is not `name`."""
        a, b = node.inputs
        return b if a == name else a

    def scalar(name, value):
        c = const(name)
        return c is not None and c.size == 1 and c.dtype == F32 and abs(float(c.reshape(-1)[0]) - value) < 1e-6

    by_input: dict[str, list[Node]] = {}
    for node in graph.nodes:
        for name in node.inputs:
            by_input.setdefault(name, []).append(node)

    def reader(node):
        (out,) = node.outputs
        return by_input[out][0]

    def bias_add(node, n, dtype):
        """(the Add, its bias) when the node's product is read only by an Add of a constant bias of shape
        (n,) and type dtype, else (None, None)."""
        if not private(node):
            return None, None
        add = reader(node)
        if add.op_type != "Add" or add.domain or add.index in replaced:
            return None, None
        b = const(other(add, node.outputs[0]))
        return (add, other(add, node.outputs[0])) if b is not None and b.dtype == dtype and b.shape == (n,) else \
            (None, None)

    producer = {out: node for node in graph.nodes for out in node.outputs if out}
    nbits_attrs = ("K", "N", "block_size", "bits", "accuracy_level")

    def plain_nbits(node):  # a MatMulNBits without bias or g_idx
        return node.op_type == "MatMulNBits" and node.domain == "com.microsoft" and not any(node.inputs[4:])

    def const_matmul(node):  # an ONNX MatMul by a constant matrix
        return node.op_type == "MatMul" and not node.domain and const(node.inputs[1]) is not None and \
            const(node.inputs[1]).ndim == 2

    def take(fused, absorbed):
        """Replace the pattern by `fused` where the device runs it; whether it did."""
        if lookup(fused, graph, device)[0] is None:  # no kernel for it on the device
            return False
        replaced[fused.index] = fused
        for n in absorbed:
            replaced[n.index] = None
        return True

    made: dict[tuple, str] = {}  # the constants this fusion added, by the weights they hold

    def transposed(key, matrix, shape, like, fused, absorbed):
        """take(fused(name), absorbed) where the fused node reads a constant added here: matrix() (K, N)
        of the weights named in `key`, stored transposed, `shape` (N, K), as a linear layer stores it, so
        that a decode step's product reads each output's weights in one run (native/cuda/products.cu).
        Typed like `like` before the kernel lookup reads it; one constant for weights read twice (tied)."""
        if key in made:
            return take(fused(made[key]), absorbed)
        name = "|".join(key) + ".T"
        while name in graph.values:  # a name of the model's own
            name += "'"
        graph.values[name] = Value(name, graph.value(like).elem_type, shape)
        if take(fused(name), absorbed):
            graph.values[name].const = np.ascontiguousarray(matrix().T)
            made[key] = name
            return True
        del graph.values[name]
        return False

    def swiglu(gate):
        """Fuse silu(gate) * up where `gate` and `up` are plain MatMulNBits alike or MatMuls by
        constant matrices alike, of one input; whether it did. For MatMuls the fused node reads
        [gate | up] as one matrix, a constant added to the graph."""
        g = gate.outputs[0]
        if not (plain_nbits(gate) or const_matmul(gate)) or g in outputs:
            return False
        users = by_input.get(g, [])
        sigmoid = [n for n in users if n.op_type == "Sigmoid" and not n.domain]
        if len(users) == readers[g] == 2 and sigmoid and private(sigmoid[0]) and reader(sigmoid[0]) in users:
            silu = [sigmoid[0], reader(sigmoid[0])]  # Sigmoid(g) * g
            if silu[1].op_type != "Mul" or silu[1].domain or other(silu[1], sigmoid[0].outputs[0]) != g:
                return False
        elif len(users) == readers[g] == 1 and users[0].op_type == "QuickGelu" and users[0].attrs.get("alpha") == 1.0:
            silu = users
        else:
            return False
        if not private(silu[-1]) or reader(silu[-1]).op_type != "Mul" or reader(silu[-1]).domain:
            return False
        final = reader(silu[-1])
        up = producer.get(other(final, silu[-1].outputs[0]))
        if up is None or up.index in replaced or not private(up) or up.inputs[0] != gate.inputs[0]:
            return False
        absorbed = [up] + silu + [final]
        if const_matmul(gate):
            wg, wu = const(gate.inputs[1]), const(up.inputs[1]) if const_matmul(up) else None
            if wu is None or wu.shape != wg.shape or wu.dtype != wg.dtype:
                return False
            return transposed((gate.inputs[1], up.inputs[1]), lambda: np.concatenate([wg, wu], axis=1),
                              (2 * wg.shape[1], wg.shape[0]), gate.inputs[1],
                              lambda both: Node(final.name, "MatMulSwiGLU", FUSED_DOMAIN, 1, [gate.inputs[0], both],
                                                final.outputs, index=gate.index), absorbed)
        zero = lambda n: n.inputs[3] if len(n.inputs) > 3 else ""
        if not plain_nbits(up) or bool(zero(gate)) != bool(zero(up)) or \
                any(gate.attrs.get(k) != up.attrs.get(k) for k in nbits_attrs):
            return False
        return take(Node(final.name, "MatMulNBitsSwiGLU", FUSED_DOMAIN, 1,
                         gate.inputs[:3] + [zero(gate)] + up.inputs[1:3] + [zero(up)], final.outputs,
                         {k: gate.attrs[k] for k in nbits_attrs if k in gate.attrs}, index=gate.index), absorbed)

    def row_sum_sub_cast(node):
        """Fuse Cast(ReduceSum(x over its last axis) - c) of an integer x, c a constant scalar of its type (a
        decoder's seqlens_k from its attention mask); whether it did."""
        x = graph.value(node.inputs[0])
        rank, keepdims = len(x.shape or ()), node.attrs.get("keepdims", 1)
        axes = const(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else node.attrs.get("axes")
        if x.dtype not in INTS or not rank or axes is None or [int(a) % rank for a in np.ravel(axes)] != [rank - 1] \
                or not private(node):
            return False
        sub = reader(node)
        if sub.op_type != "Sub" or sub.domain or sub.inputs[0] != node.outputs[0] or not private(sub):
            return False
        c = const(sub.inputs[1])
        if c is None or c.size != 1 or c.dtype != x.dtype or c.ndim > rank - 1 + bool(keepdims):  # no broadcast up
            return False
        cast = reader(sub)
        return cast.op_type == "Cast" and not cast.domain and take(
            Node(cast.name, "ReduceSumSubCast", FUSED_DOMAIN, 1, node.inputs[:1], cast.outputs,
                 {"offset": int(c.reshape(-1)[0]), "to": cast.attrs.get("to"), "keepdims": keepdims},
                 index=node.index), [sub, cast])

    for node in graph.nodes:
        if node.index in replaced:
            continue
        # Cast(ReduceSum(mask, last axis) - 1)  ->  ReduceSumSubCast(mask): seqlens_k in one launch (CUDA)
        if node.op_type == "ReduceSum" and not node.domain and device != "cpu" and row_sum_sub_cast(node):
            continue
        # MatMul(A, W) + b  ->  MatMulBias(A, W, b): the bias added while the GEMM stores its tile
        # (float16 too on the CPU: stock ORT fuses the pair and rounds the product plus bias once)
        if const_matmul(node) and (fused_float(node.inputs[0]) or graph.value(node.inputs[0]).dtype == F16) and \
                const(node.inputs[1]).dtype == graph.value(node.inputs[0]).dtype:
            w = const(node.inputs[1])
            add, bias = bias_add(node, w.shape[1], w.dtype)
            if add is not None and take(Node(add.name, "MatMulBias", FUSED_DOMAIN, 1, [node.inputs[0], node.inputs[1], bias],
                                             add.outputs, index=node.index), [add]):
                continue
        # Sigmoid(x) * x  ->  com.microsoft QuickGelu(x, alpha=1): SiLU in one native pass
        if node.op_type == "Sigmoid" and not node.domain and private(node) and fused_float(node.inputs[0]):
            mul = reader(node)
            if mul.op_type == "Mul" and not mul.domain and other(mul, node.outputs[0]) == node.inputs[0] and \
                    take(Node(mul.name, "QuickGelu", "com.microsoft", 1, [node.inputs[0]], mul.outputs,
                              {"alpha": 1.0}, index=node.index), [mul]):
                continue
        # silu(MatMulNBits(A, gate)) * MatMulNBits(A, up)  ->  MatMulNBitsSwiGLU(A, gate, up), and the same
        # of two MatMuls -> MatMulSwiGLU(A, [gate | up]): an LLM's MLP gate in one pass over A (CUDA)
        if node.op_type in ("MatMulNBits", "MatMul") and len(node.outputs) == 1 and swiglu(node):
            continue
        # MatMulNBits(...) + b  ->  MatMulNBits(..., bias=b): the bias added as the product is stored
        if node.op_type == "MatMulNBits" and node.domain == "com.microsoft" and \
                (len(node.inputs) < 6 or not node.inputs[5]) and fused_float(node.inputs[0]):
            add, bias = bias_add(node, node.attrs.get("N"), graph.value(node.inputs[0]).dtype)
            if add is not None and take(Node(add.name, node.op_type, node.domain, node.since_version,
                                             (node.inputs + [""] * 5)[:5] + [bias], add.outputs, dict(node.attrs),
                                             index=node.index), [add]):
                continue
        # Div(x, sqrt 2) -> Erf -> Add 1 -> Mul x -> Mul 0.5  ->  Gelu(x), as torch exports it
        if node.op_type == "Div" and not node.domain and scalar(node.inputs[1], math.sqrt(2)) and fused_float(node.inputs[0]):
            x, chain = node.inputs[0], [node]
            for op, operand in (("Erf", None), ("Add", 1.0), ("Mul", node.inputs[0]), ("Mul", 0.5)):
                prev = chain[-1]
                if not private(prev):
                    break
                nxt = reader(prev)
                if nxt.op_type != op or nxt.domain:
                    break
                if operand is not None:
                    rest = other(nxt, prev.outputs[0])
                    if not (rest == operand if isinstance(operand, str) else scalar(rest, operand)):
                        break
                chain.append(nxt)
            if len(chain) == 5:
                take(Node(chain[-1].name, "GeluErf", FUSED_DOMAIN, 1, [x], chain[-1].outputs, index=node.index),
                     chain[1:])

    def argmax_of(y):
        """The ArgMax over the last axis of y that reads it, if one does."""
        rank = len(graph.value(y).shape or ())
        for n in by_input.get(y, []):
            if n.op_type == "ArgMax" and not n.domain and n.inputs[0] == y and n.index not in replaced and rank and \
                    n.attrs.get("axis", 0) % rank == rank - 1:
                return n
        return None

    for node in graph.nodes if device != "cpu" else ():
        # what remains of MatMul(A, W) [+ b], W and b constants  ->  Linear(A, W.T [, b]) (CUDA), and with an
        # ArgMax of its last axis (a greedy decoder's LM head and next token) -> LinearArgMax: one launch
        if node.index in replaced or not const_matmul(node) or \
                const(node.inputs[1]).dtype != graph.value(node.inputs[0]).dtype:
            continue
        w = node.inputs[1]
        add, bias = bias_add(node, const(w).shape[1], const(w).dtype)
        last = add if add is not None else node
        op, outs, attrs, absorbed = "Linear", list(last.outputs), {}, [add] if add is not None else []
        pick = argmax_of(last.outputs[0])
        if pick is not None:
            op, outs, absorbed = "LinearArgMax", outs + pick.outputs, absorbed + [pick]
            attrs = {"keepdims": pick.attrs.get("keepdims", 1),
                     "select_last_index": pick.attrs.get("select_last_index", 0)}
        transposed((w,), lambda: const(w), const(w).shape[::-1], w,
                   lambda wt: Node(last.name, op, FUSED_DOMAIN, 1, [node.inputs[0], wt] + ([bias] if bias else []),
                                   outs, attrs, index=node.index), absorbed)
    nodes = [replaced.get(n.index, n) for n in graph.nodes if replaced.get(n.index, n) is not None]
    return nodes if device == "cpu" else _norms_into_products(graph, nodes, outputs, device)


# the RMS norms a product can apply to its activations itself (the kernel's epsilon default), and those products
NORMS = {("com.microsoft", "SkipSimplifiedLayerNormalization"): 1e-12, ("", "SimplifiedLayerNormalization"): 1e-5,
         ("", "RMSNormalization"): 1e-5}
NORMED_PRODUCTS = {"MatMulNBits": "com.microsoft", "MatMulNBitsSwiGLU": FUSED_DOMAIN, "Linear": FUSED_DOMAIN,
                   "MatMulSwiGLU": FUSED_DOMAIN}


def _norms_into_products(graph: Graph, nodes: list[Node], outputs: set, device: str) -> list[Node]:
    """A (Skip)SimplifiedLayerNormalization or RMSNormalization over the last axis whose output only one
    product reads (as its activations) -> NormedProduct(x, skip, gamma, bias, the product's other inputs) at
    the product's place, with the norm's x + skip + bias output when it has one: a decode step's GEMV
    normalises its rows itself (kernels/cuda/contrib.py), one launch instead of two."""
    readers: dict[str, list[int]] = {}
    for i, node in enumerate(nodes):
        for name in node.inputs:
            if name:
                readers.setdefault(name, []).append(i)
    dropped, fused_at = set(), {}
    for i, norm in enumerate(nodes):
        default = NORMS.get((norm.domain, norm.op_type))
        if default is None or any(norm.outputs[1:3]) or norm.outputs[0] in outputs:
            continue
        if not norm.domain and \
                norm.attrs.get("axis", -1) not in (-1, len(graph.value(norm.inputs[0]).shape or ()) - 1):
            continue
        users = readers.get(norm.outputs[0], [])
        if len(users) != 1:
            continue
        j = users[0]
        product = nodes[j]
        if NORMED_PRODUCTS.get(product.op_type) != product.domain or product.inputs.count(norm.outputs[0]) != 1 or \
                product.inputs[0] != norm.outputs[0]:
            continue
        total = norm.outputs[3] if len(norm.outputs) > 3 else ""
        if total and any(k < j for k in readers.get(total, [])):  # read before the product runs
            continue
        x, skip, gamma, bias = ((norm.inputs + [""] * 4)[:4] if norm.domain else
                                (norm.inputs[0], "", norm.inputs[1], ""))
        fused = Node(product.name, "NormedProduct", FUSED_DOMAIN, 1, [x, skip, gamma, bias] + product.inputs[1:],
                     product.outputs + ([total] if total else []),
                     {**product.attrs, "product": product.op_type, "epsilon": norm.attrs.get("epsilon", default)},
                     index=product.index)
        if lookup(fused, graph, device)[0] is not None:
            dropped.add(i)
            fused_at[j] = fused
    return [fused_at.get(i, n) for i, n in enumerate(nodes) if i not in dropped]
