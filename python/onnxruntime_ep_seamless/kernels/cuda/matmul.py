"""Matrix products on CUDA (float32, float16, bfloat16; float32 accumulation) through cuBLASLt, those with
few rows through our kernels (native/cuda/matmul.cu), plan/fusion.py's Linear, LinearArgMax and SwiGLU, Det,
and Einsum (composed of the products and ReduceSum)."""
import math

import numpy as np

from ...runtime.cuda import MAX_DIMS, DeviceTensor, contiguous_strides
from ...runtime.cuda_args import struct_arg, lib as codes
from ..checks import InvalidArgument
from ..registry import FUSED_DOMAIN, kernel
from .elementwise import ADD, GPU_FLOATS, MUL_BY, SUFFIX, Scratch, binary, cast_to, unary
from .reduction import REDUCE, arg, reduce
from .shape import broadcast_to

F32 = np.dtype(np.float32)


def _rows(op, a, k):
    """The rows of a (..., k) operand; a clear error, before any launch, when its last dim is not k."""
    if len(a.shape) == 0 or a.shape[-1] != k:
        raise ValueError(f"{op}: the first operand has shape {a.shape}, its last dimension must be {k} "
                         "(the second operand's K); feed a tensor of that width")
    return math.prod(a.shape[:-1])


def broadcasts_to(shape, target) -> bool:
    """Whether `shape` broadcasts to `target` (numpy's rules) leaving it as it is."""
    try:
        return np.broadcast_shapes(tuple(shape), tuple(target)) == tuple(target)
    except ValueError:
        return False


def _materialize(rt, stream, t, batch):
    """t broadcast to the batch dims, contiguous (a copy only when it actually broadcasts)."""
    target = tuple(batch) + t.shape[-2:]
    if t.shape == target:
        return t, False
    return broadcast_to(rt, stream, t, target), True


@kernel("MatMul", since=1, types=GPU_FLOATS, device="cuda",
        check=lambda n, g: None if all(len(g.value(i).shape or ()) >= 2 for i in n.inputs) else "1-D operands")
def matmul(rt, stream, a, b):
    k, n = b.shape[-2], b.shape[-1]
    m = _rows("MatMul", a, k)
    if len(b.shape) == 2:  # (..., K) x (K, N): one GEMM over all rows
        y = rt.alloc(a.shape[:-1] + (n,), a.dtype)
        gemm_into(rt, stream, a, b, y, m, n, k)
        return (y,)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a2, a_copy = _materialize(rt, stream, a, batch)
    b2, b_copy = _materialize(rt, stream, b, batch)
    m = a.shape[-2]
    y = rt.alloc(tuple(batch) + (m, n), a.dtype)
    count = math.prod(batch)
    batched_product(rt, stream, a2, b2, y, m, n, k, count, m * k, k * n)
    for t, copied in ((a2, a_copy), (b2, b_copy)):
        if copied:
            rt.free(t)  # stream-ordered: the GEMM above is queued before any reuse
    return (y,)


def gemm_into(rt, stream, a, b, y, m, n, k, **how):
    if k == 0:  # an empty sum
        rt.zero(y, stream)
    elif y.size:
        rt.gemm(stream, a, b, y, m, n, k, **how)


def product_plus(rt, stream, a, b, c, m, n, k, shape, beta=1.0, where=None, **how):
    """a . b (how: rt.gemm's transposes and alpha) + beta * c, c broadcast to (m, n), as a tensor of `shape` (ORT's
    output `where` where it can be), rounded once as stock's fused product and bias: a vector c (n values, 16-byte
    aligned) by cuBLASLt's bias epilogue, else the product kept in float32, c added, then rounded."""
    if k and beta == 1 and c.size == n and c.shape[-1:] == (n,) and c.ptr % 16 == 0:
        y = rt.output(where, 0, shape, a.dtype)
        if y.size:
            rt.gemm(stream, a, b, y, m, n, k, bias=c, **how)
        return y
    s = Scratch(rt, c)
    product = s(rt.alloc((m, n), F32))
    gemm_into(rt, stream, a, b, product, m, n, k, **how)
    wide = c if c.dtype == F32 else s(cast_to(rt, stream, c, F32))
    scaled = wide if beta == 1 else s(unary(rt, stream, MUL_BY, wide, float(beta)))
    total = s(binary(rt, stream, ADD, product, scaled))
    y = total if a.dtype == F32 else s(cast_to(rt, stream, total, a.dtype))
    s.done(y)
    return DeviceTensor(y.ptr, tuple(shape), y.dtype)


SMALL_ROWS = codes.SMALL_ROWS  # products with at most this many rows take the GEMVs (native/cuda/args.h)
STAGED_MAX = 48 * 1024  # matmul.cu's Linear: the most shared memory a block takes to stage its weights
WIDE = 65536  # from this many columns on cuBLASLt streams the weights faster (H200, a float16 LM head of
              # 151936 x 896: 63 us against matmul.cu's 76; docs/benchmarks/gpu.md)


def batched_product(rt, stream, a, b, y, m, n, k, batch, stride_a, stride_b, trans_b=False, alpha=1.0):
    """y = alpha * a . b (b transposed when trans_b) for `batch` pairs. With few rows (a decode step's
    attention) by our kernel, whose sums do not depend on n and are the same for a k padded at its
    start with zeros: capture=auto's left-padded KV gives the bytes of the unpadded run."""
    if y.size == 0:
        return
    if m > SMALL_ROWS or a.dtype == np.float64:  # matmul.cu has no float64 kernel (MatMulInteger's)
        rt.gemm(stream, a, b, y, m, n, k, batch=batch, stride_a=stride_a, stride_b=stride_b, trans_b=trans_b,
                alpha=alpha)
        return
    rt.launch(f"seamless_product_rows_{SUFFIX[a.dtype]}", y.size * 32, stream, ("ptr", a.ptr), ("ptr", b.ptr),
              ("ptr", y.ptr), ("int64", batch), ("int64", m), ("int64", n), ("int64", k), ("int64", stride_a),
              ("int64", stride_b), ("int", int(trans_b)), ("float", alpha))


def _linear_split(a, w, m, n, k, norm=None) -> int:
    """How many warps matmul.cu's GEMV splits a column over for y = a . w.T, or 0 where it does not apply:
    it takes a with at most SMALL_ROWS rows, n below WIDE and k by eights (16-byte loads); with `norm`
    (normalization.RowNorm) it normalises a's rows itself, where the norm fits."""
    if not (0 < m <= SMALL_ROWS and n < WIDE and k % 8 == 0 and k and a.ptr % 16 == 0 and w.ptr % 16 == 0):
        return 0
    # a warp's one pass takes 256 k; the most warps a column (up to 8) that keep n * split within ~4096 warps (31 an
    # SM): more only adds blocks, each summing its warps (and normalising the rows) again. H200, float16, 16 layers'
    # weights in a row (docs/benchmarks/gpu.md, fortieth session): a Llama-3.2-1B-shaped down projection (2048 x
    # 8192) 11.9 -> 9.5 us at 2 rather than 1, its q|k|v with their norm (3072 x 2048) 5.8 us at 1 against 7.0 at 2
    split = 1
    while split < 8 and split < -(-k // 256) and 2 * n * split <= 4096:
        split *= 2
    return 0 if norm is not None and not norm.fits(k, -(-n // (8 // split))) else split


TC_MAX_K = codes.LINEAR_WARPS * codes.LINEAR_TC_CHUNKS * 32  # linear_tc: chunks of 32 k for each of a block's warps


def _tensor_cores(a, k) -> bool:
    """Whether matmul.cu's linear_tc takes a product of K = k (16-bit types, K in chunks of 32 up to TC_MAX_K)."""
    return a.dtype.itemsize == 2 and k % 32 == 0 and 0 < k <= TC_MAX_K


def _linear(rt, stream, a, w, y, m, n, k, split, bias=None, swiglu=False, norm=None, pick=None) -> None:
    """y = a . w.T (+ bias), or silu(a . w[:n].T) * (a . w[n:].T), by matmul.cu (split: _linear_split's): on
    tensor cores (linear_tc) for 16-bit types where K is a multiple of 32 up to TC_MAX_K, else a warp a column split
    over `split` warps. pick: (indices, prefer_last), the ArgMax of y's rows written into indices as well (linear_tc
    only)."""
    tc = _tensor_cores(a, k)
    # linear_tc's column groups of 8 a block: 2 (_tc16) for gate|up and LinearArgMax's, 1 for one matrix (q|k|v
    # with its norm, o): o at 1 took a float16 Qwen2.5-0.5B step's GPU time 494.8 -> 491.3 us on the H200
    # (docs/benchmarks/gpu.md, eighteenth and twenty-first sessions)
    groups = 2 if tc and (swiglu or pick) else 1
    kind = ("_tc" if groups == 1 else "_tc16") if tc else ""
    kind += ("_swiglu" if swiglu else "") + ("_norm" if norm else "") + ("_argmax" if pick else "")
    name = f"seamless_linear{kind}_{SUFFIX[a.dtype]}"
    normed = -(-m * k * a.dtype.itemsize // 16) * 16 if norm else 0
    # the weights through shared memory: 16 bytes a lane for each pass over k (256 k a warp's pass; linear_tc: its
    # chunks of 32 k, every 8th a warp's), column group and matrix, 8 warps: linear_tc always (up to 64 KiB), and
    # linear_row (one row of 16-bit values, no norm, up to LINEAR_ROW_PASSES passes); else linear streams them
    if tc:
        split = 1
    staged = 8 * -(-k // (256 * split)) * (2 if swiglu else 1) * groups * 512
    stage = tc or (m == 1 and a.dtype.itemsize == 2 and not norm and k <= codes.LINEAR_ROW_PASSES * 256 * split
                   and staged <= STAGED_MAX)
    args = [("ptr", w.ptr), ("ptr", bias.ptr if bias is not None else 0), ("ptr", y.ptr),
            struct_arg("Linear", m=m, n=n, k=k, split=split, staged=int(stage))]
    shared = normed + (staged if stage else 0)
    blocks = -(-n // (8 * groups)) if tc else -(-n // (8 // split))
    if pick:  # the rows' ArgMax keys (matmul.cu's Pick)
        indices, prefer_last = pick
        keys = rt.counters(2 * m, stream)
        args += [("ptr", keys.ptr), ("int", int(prefer_last))]
    if norm:  # the rows are the norm's (its x is in its argument)
        rt.launch_rows(name, blocks, stream, *args, norm.argument(rt), shared=shared)
    else:
        rt.launch_rows(name, blocks, stream, ("ptr", a.ptr), *args, shared=shared)
    if pick:  # the keys into indices, and back to zero
        rt.launch_rows("seamless_linear_picked", 1, stream, ("ptr", keys.ptr), ("ptr", indices.ptr), ("int", m),
                       ("int", int(prefer_last)), ("ptr", y.ptr), ("int64", n), ("int", int(SUFFIX[y.dtype] == "bf16")),
                       threads=32)


@kernel("Linear", domain=FUSED_DOMAIN, types=GPU_FLOATS, device="cuda")
def linear(rt, stream, a, w, bias=None, *, _norm=None, _output_buffer=None):
    """a . w.T (+ bias): a MatMul by a constant (K, N) matrix, given transposed (N, K) by plan/fusion.py as a
    linear layer stores it, so that a decode step's product reads each output's weights in one run.
    _norm: a normalization.RowNorm to apply to a first (normalization.normed_product)."""
    n, k = w.shape
    m = _rows("MatMul", a, k)
    shape = a.shape[:-1] + (n,)
    split = _linear_split(a, w, m, n, k, _norm)
    if _norm is not None and not split:
        return after_norm(linear, rt, stream, _norm, w, bias, _output_buffer=_output_buffer)
    if bias is not None and not split:
        return (product_plus(rt, stream, a, w, bias, m, n, k, shape, where=_output_buffer, trans_b=True),)
    y = rt.output(_output_buffer, 0, shape, a.dtype)  # ORT's output tensor where y is the result
    if split:
        _linear(rt, stream, a, w, y, m, n, k, split, bias=bias, norm=_norm)
    else:
        gemm_into(rt, stream, a, w, y, m, n, k, trans_b=True)
    return (y,)


@kernel("LinearArgMax", domain=FUSED_DOMAIN, types=GPU_FLOATS, device="cuda")
def linear_argmax(rt, stream, a, w, bias=None, *, keepdims=1, select_last_index=0, _output_buffer=None):
    """Linear's a . w.T (+ bias) and the ArgMax of its last axis (plan/fusion.py: a greedy decoder's LM head and
    its next token): with at most SMALL_ROWS rows on tensor cores, matmul.cu's linear_tc picks each row's ArgMax
    as it stores the product (at any width), a one-block kernel after it writes the indices; else Linear, then
    ArgMax."""
    n, k = w.shape
    m = _rows("MatMul", a, k)
    if not (0 < m <= SMALL_ROWS and 0 < n < 2 ** 31 and _tensor_cores(a, k) and a.ptr % 16 == 0 and w.ptr % 16 == 0):
        (y,) = linear(rt, stream, a, w, bias, _output_buffer=_output_buffer)
        second = _output_buffer and (lambda i, shape, dtype: _output_buffer(i + 1, shape, dtype))
        return y, arg(rt, stream, y, -1, keepdims, select_last_index, True, second)[0]
    y = rt.output(_output_buffer, 0, a.shape[:-1] + (n,), a.dtype)
    indices = rt.output(_output_buffer, 1, a.shape[:-1] + (1,) * bool(keepdims), np.int64)
    _linear(rt, stream, a, w, y, m, n, k, 1, bias=bias, pick=(indices, select_last_index))
    return y, indices


def after_norm(product, rt, stream, norm, *weights, **options):
    """product(the normalised activations, *weights, **options) with the norm (normalization.RowNorm) by its own
    kernel first, where the product's GEMV could not apply it."""
    normed = norm.apply(rt, stream)
    out = product(rt, stream, normed, *weights, **options)
    rt.free(normed)  # stream-ordered
    return out


@kernel("MatMulSwiGLU", domain=FUSED_DOMAIN, types=GPU_FLOATS, device="cuda")
def matmul_swiglu(rt, stream, a, gate_up, *, _norm=None):
    """silu(a . Wg) * (a . Wu) with gate_up = [Wg | Wu] transposed, (2N, K) (plan/fusion.py): few rows in one
    pass, else one GEMM and one pass over its product. _norm: as Linear's."""
    both, k = gate_up.shape
    m = _rows("MatMul", a, k)
    split = _linear_split(a, gate_up, m, both // 2, k, _norm)
    if _norm is not None and not split:
        return after_norm(matmul_swiglu, rt, stream, _norm, gate_up)
    y = rt.alloc(a.shape[:-1] + (both // 2,), a.dtype)
    if split:
        _linear(rt, stream, a, gate_up, y, m, both // 2, k, split, swiglu=True, norm=_norm)
        return (y,)
    product = rt.alloc(a.shape[:-1] + (both,), a.dtype)
    gemm_into(rt, stream, a, gate_up, product, m, both, k, trans_b=True)
    swiglu_of_product(rt, stream, product, y)
    rt.free(product)  # stream-ordered: reused only by later work
    return (y,)


def swiglu_of_product(rt, stream, product, y):
    """y = silu(gate) * up from a product's rows [gate | up] (its last axis twice y's): elementwise.cu swiglu,
    8 columns a thread where rows and addresses allow 16-byte accesses."""
    wide = y.shape[-1] % 8 == 0 and product.ptr % 16 == 0 and y.ptr % 16 == 0
    if y.size:
        rt.launch(f"seamless_swiglu_{SUFFIX[y.dtype]}", y.size // 8 if wide else y.size, stream, ("int64", y.size),
                  ("int64", y.shape[-1]), ("ptr", product.ptr), ("ptr", y.ptr), ("int", int(wide)))


@kernel("Gemm", since=7, types=GPU_FLOATS, device="cuda")
def gemm(rt, stream, a, b, c=None, *, alpha=1.0, beta=1.0, transA=0, transB=0):
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ValueError(f"Gemm: A and B must be 2-D, got shapes {a.shape} and {b.shape}")
    m, k = a.shape[::-1] if transA else a.shape
    n, kb = b.shape if transB else b.shape[::-1]
    if kb != k:
        raise InvalidArgument(f"GEMM: Dimension mismatch, W: {b.shape} K: {k} N:{n} (A {a.shape} transA={transA}, "
                              f"B transB={transB})")
    if c is not None and beta != 0 and not broadcasts_to(c.shape, (m, n)):
        raise InvalidArgument(f"Gemm: Invalid bias shape for broadcast: C {c.shape} to {(m, n)}")
    how = dict(trans_a=bool(transA), trans_b=bool(transB), alpha=float(alpha))
    if c is not None and beta != 0:
        return (product_plus(rt, stream, a, b, c, m, n, k, (m, n), beta=float(beta), **how),)
    y = rt.alloc((m, n), a.dtype)
    gemm_into(rt, stream, a, b, y, m, n, k, **how)
    return (y,)


@kernel("Det", since=11, types=GPU_FLOATS, device="cuda")
def det(rt, stream, x):
    """Each trailing square matrix's determinant: matmul.cu's LU in float64, a thread a matrix."""
    if len(x.shape) < 2 or x.shape[-1] != x.shape[-2]:
        raise InvalidArgument(f"Det: the input has shape {x.shape}; its last two dimensions must be equal (square "
                              "matrices)")
    n, batch = x.shape[-1], math.prod(x.shape[:-2])
    y = rt.alloc(x.shape[:-2], x.dtype)
    work = rt.alloc((batch, n, n), np.dtype(np.float64))
    rt.launch(f"seamless_det_{SUFFIX[x.dtype]}", batch, stream, ("int64", batch), ("int", n), ("ptr", x.ptr),
              ("ptr", work.ptr), ("ptr", y.ptr))
    rt.free(work)  # stream-ordered
    return (y,)


# ---------------------------------------------------------------- Einsum

ELLIPSIS_LABELS = "0123456789"  # internal labels of the dims "..." stands for (ONNX labels are letters)


def _einsum_labels(equation, ranks):
    """Each operand's labels (one character a dim, "..." spelled out) and the output's: with no "->",
    the ellipsis dims then the letters used once, sorted (numpy's implicit form)."""
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"Einsum equation {equation!r} names {len(terms)} operands, the node has {len(ranks)}")
    spans = [rank - (len(t) - 3) for t, rank in zip(terms, ranks) if "..." in t]
    dots = ELLIPSIS_LABELS[:max(spans, default=0)]
    labels = []
    for t, rank in zip(terms, ranks):
        lab = t.replace("...", dots[len(dots) - (rank - (len(t) - 3)):]) if "..." in t else t
        if len(lab) != rank or not all(c.isalpha() or c in dots for c in lab):
            raise ValueError(f"Einsum term {t!r} does not fit an operand of rank {rank}")
        labels.append(lab)
    if arrow:
        out = rhs.replace("...", dots)
    else:
        letters = "".join(labels)
        out = dots + "".join(sorted(c for c in set(letters) if c.isalpha() and letters.count(c) == 1))
    if set(out) - set("".join(labels)) or len(set(out)) != len(out):
        raise ValueError(f"Einsum output {out!r} names a label twice or one no operand has")
    return labels, out


def _check_einsum(node, graph):
    try:
        ranks = [len(graph.value(i).shape or ()) for i in node.inputs]
        labels, _ = _einsum_labels(node.attrs.get("equation", ""), ranks)
    except ValueError as e:
        return str(e)
    return None if all(len(lab) <= MAX_DIMS for lab in labels) else f"an operand of rank above {MAX_DIMS}"


@kernel("Einsum", since=12, types=GPU_FLOATS, device="cuda", check=_check_einsum)
def einsum(rt, stream, *inputs, equation):
    """Operands taken pairwise, left to right, in float32: a repeated label's diagonal taken by strides,
    labels used nowhere later summed out, the rest arranged as [batch, free, contracted] x
    [batch, contracted, free] for one batched GEMM; the result summed and ordered as the output."""
    labels, out = _einsum_labels(equation, [len(x.shape) for x in inputs])
    size = {}
    for lab, x in zip(labels, inputs):
        for c, d in zip(lab, x.shape):  # equal sizes, or 1 broadcast
            if size.get(c, 1) == 1:
                size[c] = d
            elif d not in (1, size[c]):
                raise InvalidArgument(f"Einsum operands could not be broadcast together: label {c!r} is {size[c]} in "
                                      f"one operand and {d} in another")
    s = Scratch(rt, *inputs)

    def arranged(x, lab, order):
        """x's dims in `order` at their full sizes (diagonals of repeated labels, broadcasting of 1s), a view
        when nothing moves."""
        strides = contiguous_strides(x.shape)
        step = {c: 0 for c in order}
        for c, d, st in zip(lab, x.shape, strides):
            step[c] += st if d != 1 else 0
        dims = [size[c] for c in order]
        if lab == "".join(order) and all(x.shape[i] == dims[i] for i in range(len(dims))):
            return x
        y = s(rt.alloc(tuple(dims), x.dtype))
        rt.strided_copy(stream, x, y, dims, [step[c] for c in order], contiguous_strides(dims))
        return y

    def summed(x, lab, keep):
        x = arranged(x, lab, list(dict.fromkeys(lab)))  # one dim a label
        lab = "".join(dict.fromkeys(lab))
        axes = [i for i, c in enumerate(lab) if c not in keep]
        if not axes:
            return x, lab
        return s(reduce(rt, stream, REDUCE["ReduceSum"][0], x, axes, 0)), "".join(c for c in lab if c in keep)

    operands = [(s(cast_to(rt, stream, x, F32)) if x.dtype != F32 else x, lab) for x, lab in zip(inputs, labels)]
    x, lab = operands[0]
    for i, (z, zlab) in enumerate(operands[1:], 1):
        later = set(out).union(*(set(l) for _, l in operands[i + 1:]))
        x, lab = summed(x, lab, later | set(zlab))
        z, zlab = summed(z, zlab, later | set(lab))
        batch = [c for c in lab if c in zlab and c in later]
        contracted = [c for c in lab if c in zlab and c not in later]
        left, right = [c for c in lab if c not in zlab], [c for c in zlab if c not in lab]
        a, b = arranged(x, lab, batch + left + contracted), arranged(z, zlab, batch + contracted + right)
        count, m, k, n = (math.prod([size[c] for c in g]) for g in (batch, left, contracted, right))
        y = s(rt.alloc(tuple(size[c] for c in batch + left + right), F32))
        if count == 1:
            gemm_into(rt, stream, a, b, y, m, n, k)
        elif k == 0:
            rt.zero(y, stream)
        else:
            batched_product(rt, stream, a, b, y, m, n, k, count, m * k, k * n)
        x, lab = y, "".join(batch + left + right)
    x, lab = summed(x, lab, set(out))
    result = cast_to(rt, stream, arranged(x, lab, list(out)), inputs[0].dtype)
    if any(result is t for t in inputs):
        result = DeviceTensor(result.ptr, result.shape, result.dtype)  # an alias of the input
    return s.done(result)
