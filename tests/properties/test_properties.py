"""Property tests: random shapes, broadcasts, axes, indices and permutations (hypothesis) for the
elementwise, reduction and data-movement kernels, each example checked against stock ORT's CPU EP
through tests/parity.check_node (every node on our EP, CPU fallback disabled).

Bounded for CI: derandomized (the same examples on every run) and MAX_EXAMPLES (60) examples per
test, ~3 s for the file; each example builds two sessions. Values are drawn by numpy from a hypothesis-chosen seed, so
hypothesis explores shapes and arguments while the data stay cheap to generate.
"""
import os

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, mutually_broadcastable_shapes

from parity import Const, check_node

# SEAMLESS_PROPERTY_EXAMPLES=N SEAMLESS_PROPERTY_RANDOM=1: a longer, randomized bug hunt
MAX_EXAMPLES = int(os.environ.get("SEAMLESS_PROPERTY_EXAMPLES", "60"))
bounded = settings(max_examples=MAX_EXAMPLES, deadline=None, database=None,
                   derandomize=os.environ.get("SEAMLESS_PROPERTY_RANDOM") != "1",
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

F32, F16, I32, I64 = (np.dtype(t) for t in (np.float32, np.float16, np.int32, np.int64))
NUMERIC = [F32, F16, I32, I64]
# single float ops round once on both sides; float16 reductions/products may round differently
TOL = {F32: dict(rtol=1e-5, atol=1e-6), F16: dict(rtol=1e-3, atol=1e-3), I32: {}, I64: {}}

seeds = st.integers(0, 2**32 - 1)
shapes2 = mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, min_side=0, max_side=4)
shapes3 = mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=4, min_side=1, max_side=4)


def values(rng, shape, dtype, low=-10, high=10, nonzero=False, small_ints=False):
    """float: uniform in [low, high) (small_ints: integral values, so comparisons see ties);
    int: integers in [low, high]; nonzero: no zeros (divisors)."""
    if dtype.kind == "f" and not small_ints:
        a = rng.uniform(low, high, shape)
    else:
        a = rng.integers(low, high + 1, shape).astype(np.float64)
    if nonzero:
        a = np.where(a == 0, 1, a)
    return a.astype(dtype)


# --- elementwise, broadcasting ----------------------------------------------------------------


@bounded
@given(op=st.sampled_from(["Add", "Sub", "Mul", "Div", "Max", "Min"]), dtype=st.sampled_from(NUMERIC),
       shapes=shapes2, seed=seeds)
def test_binary_arithmetic_broadcast(op, dtype, shapes, seed):
    rng = np.random.default_rng(seed)
    a_shape, b_shape = shapes.input_shapes
    a = values(rng, a_shape, dtype)
    b = values(rng, b_shape, dtype, nonzero=op == "Div")  # integer division by zero is undefined
    check_node(op, [a, b], opset=13, **TOL[dtype])


@bounded
@given(dtype=st.sampled_from([F32, I32, I64]), shapes=shapes2, seed=seeds)
def test_pow_broadcast(dtype, shapes, seed):
    rng = np.random.default_rng(seed)
    a_shape, b_shape = shapes.input_shapes
    if dtype.kind == "f":
        base, exponent = values(rng, a_shape, dtype, 0.1, 3), values(rng, b_shape, dtype, -2, 2)
    else:
        base, exponent = values(rng, a_shape, dtype, -5, 5), values(rng, b_shape, dtype, 0, 4)
    check_node("Pow", [base, exponent], opset=15, rtol=1e-5, atol=1e-6)


@bounded
@given(op=st.sampled_from(["Equal", "Less"]), dtype=st.sampled_from(NUMERIC), shapes=shapes2, seed=seeds)
def test_comparison_broadcast(op, dtype, shapes, seed):
    rng = np.random.default_rng(seed)
    a_shape, b_shape = shapes.input_shapes
    a = values(rng, a_shape, dtype, -3, 3, small_ints=True)
    b = values(rng, b_shape, dtype, -3, 3, small_ints=True)
    check_node(op, [a, b], opset=13, outputs=[np.bool_])


@bounded
@given(dtype=st.sampled_from(NUMERIC), shapes=shapes3, seed=seeds)
def test_where_broadcast(dtype, shapes, seed):
    rng = np.random.default_rng(seed)
    c_shape, x_shape, y_shape = shapes.input_shapes
    cond = rng.random(c_shape) < 0.5
    check_node("Where", [np.asarray(cond), values(rng, x_shape, dtype), values(rng, y_shape, dtype)], opset=16,
               outputs=[dtype])


# --- reductions (opset 18: axes is an input) ---------------------------------------------------


@st.composite
def reductions(draw):
    shape = draw(array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4))
    axes = draw(st.none() | st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1, max_size=len(shape),
                                     unique_by=lambda a: a % len(shape)))
    return shape, axes, draw(st.sampled_from([0, 1])), draw(st.booleans())


@bounded
@given(op=st.sampled_from(["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"]),
       dtype=st.sampled_from([F32, I32, I64]), case=reductions(), seed=seeds)
def test_reduce_axes_keepdims(op, dtype, case, seed):
    shape, axes, keepdims, const_axes = case
    rng = np.random.default_rng(seed)
    low, high = (-2, 2) if op == "ReduceProd" else (-10, 10)
    x = values(rng, shape, dtype, low, high)
    inputs = [x] if axes is None else [x, np.array(axes, np.int64)]
    # ReduceProd of up to 256 values in [-2, 2): relative float32 rounding
    check_node(op, inputs, dict(keepdims=keepdims), opset=18, const=(1,) if const_axes else (),
               rtol=1e-5, atol=1e-5)


# --- data movement ----------------------------------------------------------------------------


@bounded
@given(shape=array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=5), index_shape=array_shapes(
    min_dims=0, max_dims=2, min_side=0, max_side=3), data=st.data(), seed=seeds,
    index_dtype=st.sampled_from([I32, I64]), dtype=st.sampled_from(NUMERIC))
def test_gather(shape, index_shape, data, seed, index_dtype, dtype):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    n = shape[axis]
    rng = np.random.default_rng(seed)
    indices = rng.integers(-n, n, index_shape).astype(index_dtype)  # negative indices count from the end
    check_node("Gather", [values(rng, shape, dtype), indices], dict(axis=axis), opset=13)


@st.composite
def slices(draw):
    shape = draw(array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=6))
    axes = draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, max_size=len(shape), unique=True))
    starts, ends, steps = [], [], []
    for a in axes:
        n = shape[a]
        # out-of-range starts/ends clamp; INT64 extremes are the "to the end" idiom
        starts.append(draw(st.integers(-n - 2, n + 2)))
        ends.append(draw(st.integers(-n - 2, n + 2) | st.sampled_from([2**63 - 1, -2**63])))
        steps.append(draw(st.sampled_from([1, 1, 2, 3, -1, -2])))
    negative_axes = draw(st.booleans())
    if negative_axes:
        axes = [a - len(shape) for a in axes]
    return shape, starts, ends, axes, steps


@bounded
@given(case=slices(), seed=seeds, const=st.booleans(), with_axes=st.booleans())
# found by hypothesis: ORT reads end = INT64_MAX as "to the end" also when counting down (x[0::-1]),
# where clamping it to dim-1 as the spec's text does gives an empty slice
@example(case=((1,), [0], [2**63 - 1], [0], [-1]), seed=0, const=False, with_axes=True)
@example(case=((4, 3), [2], [2**31 - 1], [-2], [-2]), seed=0, const=True, with_axes=True)
def test_slice(case, seed, const, with_axes):
    shape, starts, ends, axes, steps = case
    rng = np.random.default_rng(seed)
    x = values(rng, shape, F32)
    i64 = lambda v: np.array(v, np.int64)
    if with_axes:
        inputs = [x, i64(starts), i64(ends), i64(axes), i64(steps)]
    else:  # axes absent: the first len(starts) axes, steps 1
        k = len(starts)
        inputs = [x, i64(starts), i64(ends)]
        shape = shape[:k]
    check_node("Slice", inputs, opset=13, const=(1, 2, 3, 4) if const else ())


@bounded
@given(shape=array_shapes(min_dims=1, max_dims=5, min_side=1, max_side=4), data=st.data(), seed=seeds,
       dtype=st.sampled_from(NUMERIC))
def test_transpose(shape, data, seed, dtype):
    perm = data.draw(st.permutations(range(len(shape))))
    rng = np.random.default_rng(seed)
    check_node("Transpose", [values(rng, shape, dtype)], dict(perm=list(perm)), opset=13)


@st.composite
def reshapes(draw):
    shape = draw(array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=4))
    size = int(np.prod(shape))
    # a random factorization of size into up to 4 dims
    target, rest = [], size
    for _ in range(draw(st.integers(0, 3))):
        d = draw(st.sampled_from([f for f in range(1, rest + 1) if rest % f == 0]))
        target.append(d)
        rest //= d
    target.append(rest)
    if len(target) == 1 and target[0] == 1 and draw(st.booleans()):
        target = []  # to a scalar
    if target and draw(st.booleans()):
        target[draw(st.integers(0, len(target) - 1))] = -1  # inferred
    for i in range(min(len(shape), len(target))):  # 0 copies the input dim (allowzero=0)
        if target[i] == shape[i] and draw(st.booleans()):
            target[i] = 0
    return shape, target


@bounded
@given(case=reshapes(), seed=seeds, const=st.booleans())
def test_reshape(case, seed, const):
    shape, target = case
    rng = np.random.default_rng(seed)
    check_node("Reshape", [values(rng, shape, F32), np.array(target, np.int64)], opset=14,
               const=(1,) if const else ())
