"""Random-graph property suite: seeded random ONNX graphs of 3-12 steps (a step adds 1-4 nodes)
chaining elementwise, broadcasting, reduction, MatMul/Gemm, shape and Cast ops over float32, float16,
int32 and int64 (symbolic dims, fed or constant operands, empty tensors and NaNs at times), run on
stock ORT's CPU EP and on ours (every node on our EP, CPU fallback disabled: tests/parity.py).

The generator tracks each value's shape, dtype, magnitude and error allowance, so every graph is
valid, stays in range, and is compared with a tolerance its own ops justify:
- `err`, a first-order bound on |ours - stock| for a value, is 0 where both sides must give the same
  bits: correctly rounded IEEE ops (Relu, Abs, Neg, Add, Sub, Mul, Div, Max, Min, Sqrt, Where),
  ReduceMax/Min, Cast and data movement only pass their inputs' differences on (through the op's
  derivative). Approximations of Exp, Sigmoid, Tanh, Erf and Pow add 4 float32 ulps of their output;
  sums taken in another order (ReduceSum/Mean, CumSum, Softmax, MatMul, Gemm) add the classic bound
  2*n*ulp of the sum of the n terms' magnitudes (float32 ulps: both sum float16 in float32),
  products of n terms (ReduceProd) 2*n ulps.
- float16: stock runs float16 nodes it has no float16 kernel for in float32 and drops the float16
  round trip between consecutive ones (ORT's InsertCastTransformer), also that of a Cast to float16
  in the model (Sub(Reshape(c), c) of c = Cast(x, to=float16) is not 0 on stock); ours rounds every
  node's output as the spec says. So each float16 node that can round adds one float16 ulp.
- Comparisons, ArgMax/ArgMin, casts to integers, and Sqrt or x**0.5 (which near 0 turn a last-bit
  difference into its square root) only see values whose `err` is 0; no cast to integers where
  NaNs may be (undefined).
- Magnitudes are bounds while the graph is generated (to keep it in range), then the largest finite
  |element| of each value in stock's run, so the allowances are not compounded worst cases.
Checked: |ours - stock| <= err + atol + rtol * |stock|, float32 atol 1e-6, rtol 1e-5; float16 1 ulp
(rtol 2**-10, atol 2**-24); NaNs in the same places; integers and booleans exact; shapes, dtypes.

SEAMLESS_RANDOM_GRAPHS=N runs seeds 0..N-1 (default 300: ~10 s on 2 cores; larger N is a longer bug
hunt), SEAMLESS_RANDOM_GRAPH_SEED=S runs one. A failure prints the seed and the graph's node list.
"""
import math
import os
from collections import Counter
from dataclasses import dataclass

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from parity import run_ours, stock_session

CI_COUNT = 300
COUNT = int(os.environ.get("SEAMLESS_RANDOM_GRAPHS", CI_COUNT))
ONE_SEED = os.environ.get("SEAMLESS_RANDOM_GRAPH_SEED")
SEEDS = [int(ONE_SEED)] if ONE_SEED else range(COUNT)

F32, F16, I32, I64 = (np.dtype(t) for t in (np.float32, np.float16, np.int32, np.int64))
EPS = {F32: 2.0**-23, F16: 2.0**-10}
TOL = {F32: (1e-6, 1e-5), F16: (2.0**-24, 2.0**-10)}  # atol, rtol
# magnitude caps: float16 well below its 65504, integers far from int32 overflow
LIMIT = {F32: 1e4, F16: 1e3, I32: 1e6, I64: 1e6}
MAX_NUMEL = 4096
INT64_MAX, INT64_MIN = 2**63 - 1, -2**63
SHORT = {F32: "f32", F16: "f16", I32: "i32", I64: "i64", np.dtype(bool): "bool"}


@dataclass
class Value:
    name: str
    shape: tuple
    dtype: np.dtype
    bound: float = 0.0  # max |element|
    err: float = 0.0  # allowed |ours - stock|; 0: the same bits
    show: str = ""  # how the node list prints it (constants of axes, shapes, ...)

    def __str__(self):
        return self.show or f"{self.name}:{SHORT[self.dtype]}{list(self.shape)}"


def numel(shape):
    return int(np.prod(shape, dtype=np.int64))


def magnitude(array):
    """The largest |element| but NaNs."""
    a = np.abs(array.astype(np.float64))
    return float(a[~np.isnan(a)].max(initial=0))


def try_broadcast(*shapes):
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None


def summed(n, term):
    """|difference| of two float32 sums of n terms of at most `term` each, added in any order."""
    return 2 * n * EPS[F32] * n * term


def approx(y):
    """Two approximations of a function (Exp, Tanh, ...) differ by up to 4 float32 ulps."""
    return 4 * EPS[F32] * y.bound


def rounding(y):
    """float16: the rounding stock may skip (module docstring)."""
    return EPS[F16] * y.bound if y.dtype == F16 else 0.0


class RandomGraph:
    def __init__(self, seed):
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.opset = int(self.pick([13, 18, 18, 21]))
        self.nans = self.chance(0.1)  # NaNs in the float inputs: both sides must place the same NaNs
        self.nodes, self.inits, self.inputs, self.feeds = [], [], [], {}
        self.lines = []  # the node list printed on failure
        self.pool = []  # values later nodes may read
        self.produced = []  # (node outputs, their err as a function of an output)
        self.transposed = set()  # outputs of Transpose nodes
        self.consumed = set()
        self.count = 0

    # --- building blocks -------------------------------------------------------------------

    def chance(self, p):
        return self.rng.random() < p

    def pick(self, options):
        return options[int(self.rng.integers(len(options)))]

    def fresh(self, prefix="v"):
        self.count += 1
        return f"{prefix}{self.count}"

    def data(self, shape, dtype, low, high):
        if dtype.kind == "f":
            a = self.rng.uniform(low, high, shape)
            return np.asarray(np.round(a * 2) / 2 if self.chance(0.15) else a, dtype)  # halves: ties
        return np.asarray(self.rng.integers(int(low), int(high) + 1, shape), dtype)

    def leaf(self, shape, dtype, low=None, high=None, const=None, array=None):
        """A new operand: a graph input (its dims symbolic at times, so ORT cannot fold shapes)
        or an initializer."""
        if array is None:
            low = (-2 if dtype.kind == "f" else -4) if low is None else low
            high = -low if high is None else high
            array = self.data(shape, dtype, low, high)
        array = np.asarray(array)  # 0-d arithmetic gives numpy scalars
        const = self.chance(0.4) if const is None else const
        if self.nans and not const and array.dtype.kind == "f":
            array = np.where(self.rng.random(array.shape) < 0.15, np.nan, array).astype(array.dtype)
        v = Value(self.fresh("c" if const else "x"), tuple(array.shape), array.dtype, magnitude(array))
        if const:
            self.inits.append(numpy_helper.from_array(array, v.name))
        else:
            dims = [f"{v.name}_{i}" for i in range(array.ndim)] if self.chance(0.5) else list(array.shape)
            self.inputs.append(helper.make_tensor_value_info(v.name, helper.np_dtype_to_tensor_dtype(array.dtype),
                                                             dims))
            self.feeds[v.name] = array
        return v

    def ints(self, values, dtype=I64):
        """An integer operand (axes, shapes, repeats, indices, ...): an initializer, or fed at times."""
        array = np.array(values, dtype)
        v = self.leaf(array.shape, dtype, array=array, const=self.chance(0.75))
        v.show = f"{array.tolist()}:{SHORT[dtype]}" + ("" if v.name in self.feeds else " const")
        return v

    def node(self, op, inputs, outs, err, **attrs):
        """Adds a node. outs: (shape, dtype, bound) per output; err(y): output y's allowance, read
        again once the magnitudes are known (refine)."""
        values = [Value(self.fresh(), tuple(int(d) for d in s), np.dtype(t), float(b)) for s, t, b in outs]
        for y in values:
            y.err = float(err(y))
        names = [v.name if v is not None else "" for v in inputs]
        self.nodes.append(helper.make_node(op, names, [v.name for v in values], **attrs))
        self.consumed.update(names)
        shown = ", ".join(str(v) if v is not None else "<absent>" for v in inputs)
        shown += "".join(f", {k}={a}" for k, a in attrs.items())
        self.lines.append(f"{', '.join(map(str, values))} = {op}({shown})")
        self.pool.extend(values)
        self.produced.append((values, err))
        return values

    def partner_shape(self, shape):
        """A random shape that broadcasts with `shape`."""
        out = []
        for d in shape:
            r = self.rng.random()
            out.append(1 if r < 0.25 else int(self.rng.integers(2, 4)) if d == 1 and r < 0.45 else d)
        if self.chance(0.4):
            out = out[int(self.rng.integers(0, len(out) + 1)):]
        elif self.chance(0.15) and len(out) < 5:
            out = [int(self.rng.integers(1, 4))] + out
        return tuple(out)

    def operand(self, shape, dtype):
        """A second operand broadcasting with `shape`: an earlier value at times, else a new one."""
        fits = [p for p in self.pool if p.dtype == dtype and
                numel(try_broadcast(shape, p.shape) or (MAX_NUMEL + 1,)) <= MAX_NUMEL]
        if fits and self.chance(0.3):
            return self.pick(fits)
        return self.leaf(self.partner_shape(shape), dtype)

    def axis(self, rank, inclusive=False):
        a = int(self.rng.integers(0, rank + inclusive))
        return a - rank if self.chance(0.3) else a

    # --- ops --------------------------------------------------------------------------------

    def unary(self, v):
        # integer Relu: opset 14, and stock has no int64 kernel
        ops = ["Abs", "Neg"] + ["Relu"] * (v.dtype.kind == "f" or v.dtype == I32 and self.opset >= 14)
        if v.dtype.kind == "f":
            ops += ["Sigmoid", "Tanh", "Erf"] + ["Exp"] * (v.bound <= (5 if v.dtype == F32 else 4))
            ops += ["Sqrt"] * (v.err == 0)
        op = self.pick(ops)
        b = v.bound
        if op in ("Relu", "Abs", "Neg"):
            return self.node(op, [v], [(v.shape, v.dtype, b)], lambda y: v.err)
        if op == "Sqrt":  # of Abs: no NaN
            (a,) = self.node("Abs", [v], [(v.shape, v.dtype, b)], lambda y: 0)
            return self.node("Sqrt", [a], [(v.shape, v.dtype, math.sqrt(b))], rounding)
        if op == "Exp":
            out, slope = math.exp(b), lambda y: y.bound
        else:  # the slope's bound
            out, slope = {"Sigmoid": (min(1, 0.5 + b / 4), lambda y: 0.25), "Tanh": (min(1, b), lambda y: 1),
                          "Erf": (min(1, 1.13 * b), lambda y: 1.13)}[op]
        return self.node(op, [v], [(v.shape, v.dtype, out)], lambda y: slope(y) * v.err + approx(y) + rounding(y))

    def binary(self, v):
        op = self.pick(["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"])
        float_ = v.dtype.kind == "f"
        if op == "Div":  # by a nonzero constant, |c| >= 1/2 (integers: truncating division)
            shape = self.partner_shape(v.shape)
            c = self.rng.uniform(0.5, 2, shape) if float_ else self.rng.integers(1, 5, shape)
            c = (c * self.rng.choice([-1, 1], shape)).astype(v.dtype)
            w = self.leaf(shape, v.dtype, const=True, array=c)
            slope = 1 / float(np.abs(c).min(initial=2)) if float_ else 1
            return self.node("Div", [v, w], [(try_broadcast(v.shape, shape), v.dtype, v.bound * slope)],
                             lambda y: slope * v.err + rounding(y))
        if op == "Pow":
            exponent = float(self.pick([2, 3, 1.5] + [0.5] * (v.err == 0) if float_ else [2, 3]))  # as Sqrt
            base = v
            if exponent % 1:  # fractional powers of |x|: no NaN
                (base,) = self.node("Abs", [v], [(v.shape, v.dtype, v.bound)], lambda y: v.err)
            if v.bound**exponent > LIMIT[v.dtype]:
                return None
            shape = () if self.chance(0.5) else self.partner_shape(v.shape)
            w = self.leaf(shape, v.dtype, const=self.chance(0.7), array=np.full(shape, exponent, v.dtype))
            # (base.err is 0 for fractional exponents, where base.bound may be 0)
            err = (lambda y: (base.err and exponent * base.bound ** (exponent - 1) * base.err) + approx(y)
                   + rounding(y) if float_ else 0)
            return self.node("Pow", [base, w], [(try_broadcast(v.shape, shape), v.dtype, v.bound**exponent)], err)
        w = self.operand(v.shape, v.dtype)
        shape = try_broadcast(v.shape, w.shape)
        a, b = (v, w) if self.chance(0.7) else (w, v)
        if op in ("Add", "Sub"):
            out, err = v.bound + w.bound, lambda y: a.err + b.err + rounding(y)
        elif op == "Mul":
            out, err = v.bound * w.bound, lambda y: a.err * b.bound + b.err * a.bound + a.err * b.err + rounding(y)
        else:
            out, err = max(v.bound, w.bound), lambda y: max(a.err, b.err)
        if out > LIMIT[v.dtype]:
            return None
        return self.node(op, [a, b], [(shape, v.dtype, out)], err)

    def where(self, v):
        if v.err:  # a last-bit difference would flip the comparison
            return None
        op = self.pick(["Less", "Greater", "Equal", "LessOrEqual", "GreaterOrEqual"])
        shape = self.partner_shape(v.shape)
        # thresholds from the value's own range; integral at times, so Equal and ties happen
        k = self.data(shape, v.dtype, -v.bound, v.bound)
        if v.dtype.kind == "f" and self.chance(0.5):
            k = np.round(k)
        cond_shape = try_broadcast(v.shape, shape)
        xs = [p for p in self.pool if try_broadcast(cond_shape, p.shape) is not None]
        x = self.pick(xs) if xs and self.chance(0.5) else v
        y = self.operand(try_broadcast(cond_shape, x.shape), x.dtype)
        out_shape = try_broadcast(cond_shape, x.shape, y.shape)
        if out_shape is None or numel(out_shape) > MAX_NUMEL:
            return None
        (cond,) = self.node(op, [v, self.leaf(shape, v.dtype, array=k)], [(cond_shape, np.bool_, 1)], lambda o: 0)
        self.pool.remove(cond)  # booleans feed only Where
        return self.node("Where", [cond, x, y], [(out_shape, x.dtype, max(x.bound, y.bound))],
                         lambda o: max(x.err, y.err))

    def reduce(self, v):
        rank = len(v.shape)
        if rank == 0:
            return None
        ops = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"]
        ops += ["CumSum"] * (v.dtype != F16 or self.opset >= 14)  # float16 CumSum: opset 14
        ops += ["ArgMax", "ArgMin"] * (v.err == 0) + ["Softmax"] * (v.dtype.kind == "f")
        op = self.pick(ops)
        float_ = v.dtype.kind == "f"
        if op in ("ArgMax", "ArgMin"):
            axis, keep = self.axis(rank), int(self.rng.integers(2))
            if v.shape[axis] == 0:  # stock refuses
                return None
            shape = v.shape[:axis % rank] + (1,) * keep + v.shape[axis % rank + 1:]
            attrs = dict(axis=axis, keepdims=keep)
            if self.chance(0.4):
                attrs["select_last_index"] = 1
            return self.node(op, [v], [(shape, I64, v.shape[axis])], lambda y: 0, **attrs)
        if op == "Softmax":
            axis = self.axis(rank)
            n = v.shape[axis]
            return self.node(op, [v], [(v.shape, v.dtype, 1)],
                             lambda y: 2 * v.err + (n + 8) * EPS[F32] + rounding(y), axis=axis)
        if op == "CumSum":
            axis = self.axis(rank)
            n = v.shape[axis]
            if n * v.bound > LIMIT[v.dtype]:
                return None
            attrs = {k: 1 for k in ("exclusive", "reverse") if self.chance(0.3)}
            return self.node(op, [v, self.ints(axis, self.pick([I32, I64]))], [(v.shape, v.dtype, n * v.bound)],
                             lambda y: n * v.err + summed(n, v.bound) + rounding(y) if float_ else 0, **attrs)
        # Reduce*: some axes (negative at times), all (none given), or none (noop_with_empty_axes)
        attrs, keep = {}, int(self.rng.integers(2))
        if keep == 0 or self.chance(0.3):
            attrs["keepdims"] = keep
        axes = sorted(self.rng.choice(rank, int(self.rng.integers(1, rank + 1)), replace=False).tolist())
        given = [a - rank if self.chance(0.3) else a for a in axes]
        if self.chance(0.15):
            axes, given = list(range(rank)), None
        elif self.opset >= 18 and self.chance(0.08):
            attrs["noop_with_empty_axes"] = 1
            axes, given = [], []
        n = numel([v.shape[a] for a in axes])
        shape = tuple(1 if a in axes else d for a, d in enumerate(v.shape) if keep or a not in axes)
        if op in ("ReduceMax", "ReduceMin"):
            if n == 0:  # -inf / inf
                return None
            out, err = v.bound, lambda y: v.err
        elif op == "ReduceProd":
            if n * math.log(max(v.bound, 1)) > math.log(LIMIT[v.dtype]):
                return None
            out = v.bound**n
            err = (lambda y: n * v.bound ** max(n - 1, 0) * v.err + 2 * n * EPS[F32] * y.bound + rounding(y)
                   if float_ else 0)
        else:
            out = n * v.bound
            err = lambda y: n * v.err + summed(n, v.bound) + rounding(y) if float_ else 0
            if op == "ReduceMean":
                out = v.bound
                err = lambda y: v.err + summed(n, v.bound) / max(n, 1) + rounding(y) if float_ else 0
        if out > LIMIT[v.dtype]:
            return None
        inputs = [v]
        if given is not None and (self.opset >= 18 or op == "ReduceSum"):
            if given or self.chance(0.5):
                inputs.append(self.ints(given))
        elif given:
            attrs["axes"] = given
        return self.node(op, inputs, [(shape, v.dtype, out)], err, **attrs)

    def matmul(self, v):
        if len(v.shape) == 0:
            return None
        if v.dtype.kind == "f" and len(v.shape) == 2 and self.chance(0.35):
            return self.gemm(v)
        float_ = v.dtype.kind == "f"
        low = -1 if float_ else -2
        if len(v.shape) >= 2 and self.chance(0.25):  # v on the right: w [.., M, K] @ v [.., K, N]
            k = v.shape[-2]
            w_shape = self.partner_shape(v.shape[:-2]) + (int(self.rng.integers(1, 5)), k)
            if self.chance(0.2):
                w_shape = (k,)
            a, b = self.leaf(w_shape, v.dtype, low, -low), v
        else:
            k = v.shape[-1]
            n = int(self.pick([1, 2, 3, 4, 8, 17]))
            r = self.rng.random()
            w_shape = (k,) if r < 0.15 else (k, n) if r < 0.75 else self.partner_shape(v.shape[:-2]) + (k, n)
            partners = [p for p in self.pool if p.dtype == v.dtype and len(p.shape) >= 2 and p.shape[-2] == k]
            a, b = v, (self.pick(partners) if partners and self.chance(0.2)
                       else self.leaf(w_shape, v.dtype, low, -low, const=self.chance(0.6)))
        try:
            shape = np.matmul(np.empty(a.shape, np.int8), np.empty(b.shape, np.int8)).shape
        except ValueError:
            return None
        # stock ORT 1.32's Transpose+MatMul fusion (FusedMatMul) is wrong where A is a Transpose's output
        # and B is 1-D (x[3,2]: MatMul(Transpose(x), [1,10,100]) gives [210, 543], not [420, 531]), and
        # crashes (SIGSEGV) creating the session for float16 where the Transpose moves a batch axis
        # (x[4,3,2] perm [1,0,2])
        if (a.name in self.transposed and len(b.shape) == 1) or (
                v.dtype == F16 and {a.name, b.name} & self.transposed):
            return None
        out = k * a.bound * b.bound
        if out > LIMIT[v.dtype] or numel(shape) > MAX_NUMEL:
            return None
        (y,) = self.node("MatMul", [a, b], [(shape, v.dtype, out)],
                         lambda y: k * (a.err * b.bound + b.err * a.bound) + summed(k, a.bound * b.bound)
                         + rounding(y) if float_ else 0)
        if len(shape) and self.chance(0.4):  # + bias: the fused pattern
            c = self.leaf(shape[-1:], v.dtype, const=True)
            return self.node("Add", [y, c], [(shape, v.dtype, y.bound + c.bound)], lambda o: y.err + rounding(o))
        return [y]

    def gemm(self, v):
        attrs = {}
        if self.chance(0.3):
            attrs["transA"] = 1
        m, k = v.shape[::-1] if attrs else v.shape
        n = int(self.pick([1, 2, 3, 5, 16]))
        trans_b = self.chance(0.4)
        if trans_b:
            attrs["transB"] = 1
        b = self.leaf((n, k) if trans_b else (k, n), v.dtype, -1, 1, const=self.chance(0.7))
        alpha, beta = float(self.pick([1.0, 1.0, 0.5, -1.5])), float(self.pick([1.0, 1.0, 0.25]))
        if alpha != 1:
            attrs["alpha"] = alpha
        inputs = [v, b]
        out = abs(alpha) * k * v.bound * b.bound
        c = None
        if self.chance(0.6):
            c = self.leaf(self.pick([(n,), (1, n), (m, 1), (m, n), (), (1,)]), v.dtype, const=self.chance(0.7))
            inputs.append(c)
            if beta != 1:
                attrs["beta"] = beta
            out += beta * c.bound
        if out > LIMIT[v.dtype]:
            return None
        err = lambda y: (abs(alpha) * (k * (v.err * b.bound + b.err * v.bound) + summed(k, v.bound * b.bound))
                         + (beta * c.err if c else 0) + rounding(y))
        return self.node("Gemm", inputs, [((m, n), v.dtype, out)], err, **attrs)

    def cast(self, v):
        to_int = [I32, I64] * (v.err == 0 and not self.nans)  # NaN to integer is undefined
        if v.dtype == F32:
            options = [F16] * (v.bound <= LIMIT[F16]) + to_int
        elif v.dtype == F16:
            options = [F32] + to_int
        else:
            options = [F32, F16 if v.bound <= LIMIT[F16] else F32, I64 if v.dtype == I32 else I32]
        if not options:
            return None
        to = self.pick(options)
        bound = math.floor(v.bound) if to.kind == "i" else v.bound
        return self.node("Cast", [v], [(v.shape, to, bound)], lambda y: v.err + rounding(y),
                         to=helper.np_dtype_to_tensor_dtype(to))

    def same(self, v, op, shape, inputs, **attrs):
        """A node that only moves v's elements: its bound and err pass on."""
        if numel(shape) > MAX_NUMEL:
            return None
        return self.node(op, [v] + inputs, [(shape, v.dtype, v.bound)], lambda y: v.err, **attrs)

    def reshape(self, v):
        size, dims = numel(v.shape), []
        if size == 0:  # some 0s and other dims; allowzero=1 (opset 14) reads 0 as 0, not as "copy"
            if self.opset < 14:
                return None
            shape = tuple(int(self.pick([0, 1, 2, 3])) for _ in range(int(self.rng.integers(1, 4))))
            shape = shape if 0 in shape else shape + (0,)
            return self.same(v, "Reshape", shape, [self.ints(shape)], allowzero=1)
        for _ in range(int(self.rng.integers(0, 4))):  # a random factorization of the size
            d = int(self.pick([f for f in range(1, size + 1) if size % f == 0]))
            dims.append(d)
            size //= d
        target = dims + [size]
        self.rng.shuffle(target)
        shape = tuple(target)
        if self.chance(0.3):
            target[int(self.rng.integers(len(target)))] = -1
        for i in range(min(len(v.shape), len(target))):  # 0 copies the input's dim (allowzero=0)
            if target[i] == v.shape[i] and self.chance(0.3):
                target[i] = 0
        return self.same(v, "Reshape", shape, [self.ints(target)])

    def shape_chain(self, v):
        """Shape -> Gather -> Concat -> Reshape: v reshaped to some of its own dims and -1."""
        rank = len(v.shape)
        if rank == 0:
            return None
        attrs = {}
        dims = list(range(rank))
        if self.opset >= 15 and self.chance(0.3):  # Shape's start/end
            start, end = sorted(int(i) for i in self.rng.integers(-rank, rank + 1, 2))
            dims = dims[start:end]
            attrs = dict(start=start, end=end)
        if not dims:
            return None
        picks = self.rng.choice(len(dims), int(self.rng.integers(1, len(dims) + 1)), replace=False).tolist()
        kept = [v.shape[dims[p]] for p in picks]  # any of v's dims divide its size
        if numel(kept) == 0:  # -1 is then undefined
            return None
        no_err = lambda y: 0
        (s,) = self.node("Shape", [v], [((len(dims),), I64, max(v.shape))], no_err, **attrs)
        (g,) = self.node("Gather", [s, self.ints(picks, self.pick([I32, I64]))], [((len(picks),), I64, s.bound)],
                         no_err)
        tail = self.ints([-1])
        parts = [g, tail] if self.chance(0.6) else [tail, g]
        (t,) = self.node("Concat", parts, [((len(picks) + 1,), I64, s.bound)], no_err, axis=0)
        shape = kept + [numel(v.shape) // numel(kept)]
        return self.same(v, "Reshape", tuple(shape if parts[0] is g else shape[-1:] + shape[:-1]), [t])

    def movement(self, v):
        rank, s = len(v.shape), v.shape
        op = self.pick(["Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Slice", "Slice", "Concat",
                        "Split", "Expand", "Tile", "Gather", "Gather", "Identity"])
        if op == "Reshape":
            return self.reshape(v)
        if op == "Identity":
            out = self.same(v, op, s, [])
            if v.name in self.transposed:  # stock removes Identity nodes before its MatMul fusion (matmul)
                self.transposed.update(y.name for y in out)
            return out
        if op == "Unsqueeze":
            new_rank = rank + int(self.rng.integers(1, 3))
            axes = self.rng.choice(new_rank, new_rank - rank, replace=False).tolist()
            rest = iter(s)
            shape = tuple(1 if i in axes else next(rest) for i in range(new_rank))
            return self.same(v, op, shape, [self.ints([a - new_rank if self.chance(0.3) else a for a in axes])])
        if rank == 0:
            return None
        if op == "Transpose":
            if self.chance(0.2):  # no perm: reversed
                out = self.same(v, op, s[::-1], [])
            else:
                perm = self.rng.permutation(rank).tolist()
                out = self.same(v, op, tuple(s[p] for p in perm), [], perm=perm)
            self.transposed.update(y.name for y in out or ())
            return out
        if op == "Flatten":
            axis = self.axis(rank, inclusive=True)
            return self.same(v, op, (numel(s[:axis]), numel(s[axis:])), [], axis=axis)
        if op == "Squeeze":
            ones = [i for i, d in enumerate(s) if d == 1]
            if not ones or self.chance(0.2):  # no axes: every 1
                return self.same(v, op, tuple(d for d in s if d != 1), [])
            axes = self.rng.choice(ones, int(self.rng.integers(1, len(ones) + 1)), replace=False).tolist()
            shape = tuple(d for i, d in enumerate(s) if i not in axes)
            return self.same(v, op, shape, [self.ints([a - rank if self.chance(0.3) else a for a in axes])])
        if op == "Slice":
            return self.slice(v)
        if op == "Concat":
            return self.concat(v)
        if op == "Split":
            return self.split(v)
        if op == "Expand":
            target = [int(self.rng.integers(1, 4)) if d == 1 else self.pick([d, d, 1]) for d in s]
            if self.chance(0.3):
                target = [int(self.rng.integers(1, 3))] + target
            return self.same(v, op, try_broadcast(s, target), [self.ints(target)])
        if op == "Tile":
            repeats = [int(self.pick([1, 1, 2, 3])) for _ in s]
            return self.same(v, op, tuple(d * r for d, r in zip(s, repeats)), [self.ints(repeats)])
        # Gather, negative indices at times
        axis = self.axis(rank)
        d, a = s[axis], axis % rank
        if d == 0:  # no valid index
            return None
        index_shape = tuple(int(i) for i in self.rng.integers(1, 4, int(self.rng.integers(0, 3))))
        indices = self.leaf(index_shape, self.pick([I32, I64]), -d, d - 1, const=self.chance(0.6))
        return self.same(v, op, s[:a] + index_shape + s[a + 1:], [indices], axis=axis)

    def slice(self, v):
        s, rank = v.shape, len(v.shape)
        axes = self.rng.choice(rank, int(self.rng.integers(1, rank + 1)), replace=False).tolist()
        index = self.pick([I32, I64])
        big, small = (INT64_MAX, INT64_MIN) if index == I64 else (2**31 - 1, -2**31)
        starts, ends, steps, shape = [], [], [], list(s)
        for a in axes:
            d = s[a]
            for _ in range(10):  # until the slice is not empty
                step = int(self.pick([1, 1, 1, 2, 3, -1, -2]))
                start = int(self.rng.integers(-d - 2, d + 3))
                end = int(self.rng.integers(-d - 2, d + 3))
                if self.chance(0.2):  # "to the end" either way (out-of-range ends clamp)
                    end = self.pick([big, small])
                if self.chance(0.1):
                    start = big if step < 0 else small
                n = len(range(*slice(start, end, step).indices(d)))
                if n:
                    break
            else:
                start, end, step, n = 0, d, 1, d
            starts.append(start)
            ends.append(end)
            steps.append(step)
            shape[a] = n
        inputs = [self.ints(starts, index), self.ints(ends, index)]
        if axes != list(range(len(axes))) or steps != [1] * len(steps) or self.chance(0.5):
            inputs.append(self.ints([a - rank if self.chance(0.3) else a for a in axes], index))
            if steps != [1] * len(steps) or self.chance(0.5):
                inputs.append(self.ints(steps, index))
        return self.same(v, "Slice", tuple(shape), inputs)

    def concat(self, v):
        s, rank = v.shape, len(v.shape)
        axis = self.axis(rank)
        a = axis % rank
        parts = [v]
        for _ in range(int(self.rng.integers(1, 3))):
            fits = [p for p in self.pool if p.dtype == v.dtype and len(p.shape) == rank and all(
                p.shape[i] == d for i, d in enumerate(s) if i != a)]
            parts.append(self.pick(fits) if self.chance(0.4) else
                         self.leaf(s[:a] + (int(self.rng.integers(1, 4)),) + s[a + 1:], v.dtype))
        self.rng.shuffle(parts)
        shape = s[:a] + (sum(p.shape[a] for p in parts),) + s[a + 1:]
        if numel(shape) > MAX_NUMEL:
            return None
        return self.node("Concat", parts, [(shape, v.dtype, max(p.bound for p in parts))],
                         lambda y: max(p.err for p in parts), axis=axis)

    def split(self, v):
        s, rank = v.shape, len(v.shape)
        splittable = [a for a in range(rank) if s[a] >= 2]
        if not splittable:
            return None
        a = self.pick(splittable)
        d = s[a]
        if self.opset >= 18 and self.chance(0.5):  # num_outputs: ceil(d / n) each, the last the rest
            n = self.pick([n for n in range(2, d + 1) if d - -(-d // n) * (n - 1) > 0])
            sizes = [-(-d // n)] * (n - 1) + [d - -(-d // n) * (n - 1)]
            inputs, attrs = [], dict(num_outputs=n)
        else:
            cuts = sorted(self.rng.choice(np.arange(1, d), int(self.rng.integers(1, min(3, d - 1) + 1)),
                                          replace=False).tolist())
            sizes = np.diff([0] + cuts + [d]).tolist()
            inputs, attrs = [self.ints(sizes)], {}
        outs = [(s[:a] + (n,) + s[a + 1:], v.dtype, v.bound) for n in sizes]
        return self.node("Split", [v] + inputs, outs, lambda y: v.err, axis=a - rank if self.chance(0.3) else a,
                         **attrs)

    # --- the graph ---------------------------------------------------------------------------

    STEPS = {"unary": 3, "binary": 3, "where": 1, "reduce": 2.5, "matmul": 1.5, "movement": 4,
             "shape_chain": 0.7, "cast": 1}

    def build(self):
        """The model (outputs: every value no node reads, and a few that nodes read), feeds, outputs."""
        for _ in range(int(self.rng.integers(1, 3))):
            rank = int(self.pick([0, 1, 2, 2, 3, 3, 4]))
            shape = [int(self.pick([1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 7, 16, 33, 65])) for _ in range(rank)]
            while numel(shape) > 1024:
                shape = shape[1:]
            if shape and self.chance(0.05):  # empty tensors
                shape[int(self.rng.integers(len(shape)))] = 0
            shape = tuple(shape)
            self.pool.append(self.leaf(shape, self.pick([F32, F32, F32, F32, F16, I32, I64]), const=False))
        steps = list(self.STEPS)
        weights = np.array(list(self.STEPS.values())) / sum(self.STEPS.values())
        target = int(self.rng.integers(3, 13))
        for _ in range(500):  # steps not applicable to the value picked return None
            if len(self.lines) >= target:
                break
            v = self.pool[-1] if self.chance(0.5) else self.pick(self.pool)
            getattr(self, steps[self.rng.choice(len(steps), p=weights)])(v)
        outs = [v for v in self.pool if v.name not in self.feeds and
                (v.name not in self.consumed or self.chance(0.1))]
        return self.model(outs), self.feeds, outs

    def model(self, outs):
        graph = helper.make_graph(
            self.nodes, f"seed{self.seed}", self.inputs,
            [helper.make_tensor_value_info(v.name, helper.np_dtype_to_tensor_dtype(v.dtype), [None] * len(v.shape))
             for v in outs], initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                                  ir_version=10 if self.opset >= 21 else 9)
        onnx.checker.check_model(model)
        return model

    def refine(self):
        """Each value's magnitude from stock's run, and the allowances again from those."""
        values = [y for ys, _ in self.produced for y in ys]
        for y, a in zip(values, stock_session(self.model(values)).run(None, self.feeds)):
            y.bound = magnitude(a)
        for ys, err in self.produced:
            for y in ys:
                y.err = float(err(y))

    def describe(self):
        inputs = ", ".join(f"{n}:{SHORT[a.dtype]}{list(a.shape)}" for n, a in self.feeds.items())
        return (f"seed {self.seed} (SEAMLESS_RANDOM_GRAPH_SEED={self.seed} runs it alone), opset {self.opset}, "
                f"inputs {inputs}{' with NaNs' if self.nans else ''}\n  " + "\n  ".join(self.lines))


def compare(value, ours, ref):
    assert ours.dtype == ref.dtype, f"{value.name}: dtype {ours.dtype}, stock {ref.dtype}"
    assert ours.shape == ref.shape, f"{value.name}: shape {ours.shape}, stock {ref.shape}"
    if ref.dtype.kind != "f":
        np.testing.assert_array_equal(ours, ref, err_msg=value.name)
        return
    atol, rtol = TOL[ref.dtype]
    o, r = ours.astype(np.float64), ref.astype(np.float64)
    assert np.array_equal(np.isnan(o), np.isnan(r)), f"{value.name}: NaN where stock has none (or the reverse)"
    diff = np.abs(np.nan_to_num(o - r))
    allowed = value.err + atol + rtol * np.abs(np.nan_to_num(r))
    if (diff > allowed).any():
        i = np.unravel_index(np.argmax(diff - allowed), diff.shape)
        raise AssertionError(f"{value.name}: {int((diff > allowed).sum())} of {diff.size} elements differ; at "
                             f"{[int(j) for j in i]} ours {o[i]!r}, stock {r[i]!r}, allowed |diff| {allowed[i]:.3g}")


def run_graph(seed):
    g = RandomGraph(seed)
    model, feeds, outs = g.build()
    try:
        ref = stock_session(model).run(None, feeds)
        g.refine()
    except Exception as e:  # the generator's fault: it must build valid graphs
        pytest.fail(f"stock ORT refused a generated graph: {e}\n{g.describe()}")
    try:
        ours = run_ours(model, feeds)
        assert len(ours) == len(ref), f"{len(ours)} outputs, stock {len(ref)}"
        for v, o, r in zip(outs, ours, ref):
            compare(v, o, r)
    except Exception as e:
        pytest.fail(f"{type(e).__name__}: {e}\n{g.describe()}")


@pytest.mark.parametrize("seed", SEEDS)
def test_random_graph(seed):
    run_graph(seed)


def test_generator_covers_every_op():
    """The CI seeds reach every op the suite promises (so a generator change cannot drop one)."""
    counts = Counter()
    for seed in range(CI_COUNT):
        g = RandomGraph(seed)
        g.build()
        counts.update(n.op_type for n in g.nodes)
    expected = """Relu Sigmoid Tanh Exp Abs Neg Sqrt Erf Add Sub Mul Div Max Min Pow Where Less Greater Equal
        ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ArgMax ArgMin Softmax CumSum MatMul Gemm Reshape
        Transpose Flatten Squeeze Unsqueeze Slice Concat Split Expand Tile Gather Shape Cast Identity""".split()
    missing = [op for op in expected if counts[op] < 5]
    assert not missing, f"ops seen fewer than 5 times in {CI_COUNT} graphs: {missing}; counts {dict(counts)}"
