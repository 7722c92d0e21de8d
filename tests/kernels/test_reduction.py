"""Parity of the reduction kernels (Reduce*, ArgMax/ArgMin, Softmax family, CumSum, TopK) with stock ORT."""
import numpy as np
import pytest
from onnx import helper
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument, RuntimeException

from parity import Const, assert_close, assert_parity, ep_session, node_model, run_ours, stock_session

rng = np.random.default_rng(1)
RTOL, ATOL = 1e-4, 1e-5
F16 = dict(rtol=2e-3, atol=2e-3)  # float16 results round to an 11-bit mantissa; sums of several terms drift

REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]


def build(op, *args, out=None, attrs=None, opset=17):
    """A one-node model and its feeds (tests/parity.py node_model)."""
    return node_model(op, list(args), attrs, opset, out if isinstance(out, list) or out is None else [out])


def parity(op, *args, out=None, attrs=None, opset=17, rtol=RTOL, atol=ATOL):
    model, feeds = build(op, *args, out=out, attrs=attrs, opset=opset)
    return assert_parity(model, feeds, rtol=rtol, atol=atol)


def rand(shape, dtype=np.float32, low=-2.0, high=2.0):
    if np.dtype(dtype).kind in "iu":
        return rng.integers(low, high, size=shape, endpoint=True).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)


def positive(op):
    # LogSum needs a positive sum; Prod stays well-conditioned near 1
    return op in ("ReduceLogSum", "ReduceProd")


def reduce(op, x, axes, keepdims=1, opset=18, noop=None, **tol):
    """Axes as an attribute or an input, whichever the opset uses."""
    attrs = {"keepdims": keepdims}
    axes_input = opset >= (13 if op == "ReduceSum" else 18)
    if noop is not None:
        attrs["noop_with_empty_axes"] = noop
    if axes_input:
        args = (x,) if axes is None else (x, np.array(axes, np.int64))
    else:
        args = (x,)
        if axes is not None:
            attrs["axes"] = axes
    return parity(op, *args, attrs=attrs, opset=opset, **tol)


# ---------------------------------------------------------------- Reduce*

@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("opset", [11, 13, 18])
@pytest.mark.parametrize("axes", [None, [1], [-1], [0, 2], [-3, 1]])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_float32(op, opset, axes, keepdims):
    x = rand((3, 4, 5), low=0.5 if positive(op) else -2.0, high=1.5 if positive(op) else 2.0)
    reduce(op, x, axes, keepdims, opset)


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("opset", [1, 20])
def test_reduce_first_and_latest_opsets(op, opset):
    x = rand((2, 3, 4), low=0.5 if positive(op) else -2.0, high=1.5 if positive(op) else 2.0)
    reduce(op, x, [1], 1, opset)
    reduce(op, x, None, 0, opset)


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_float16(op):
    x = rand((3, 4, 6), np.float16, low=0.5 if positive(op) else -2.0, high=1.2 if positive(op) else 2.0)
    reduce(op, x, [2], 1, 18, **F16)
    reduce(op, x, None, 0, 18, **F16)


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_float64(op):
    x = rand((3, 4), np.float64, low=0.5 if positive(op) else -2.0)
    reduce(op, x, [0], 0, 18)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                                "ReduceL1", "ReduceSumSquare"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_reduce_int(op, dtype):
    x = rand((3, 4, 2), dtype, -5, 5)
    reduce(op, x, [1], 1, 18)
    reduce(op, x, [0, 2], 0, 13)


def test_reduce_int_mean_truncates():
    x = np.array([[-7, 2, -1], [7, 1, 1], [-1, 0, 0]], np.int32)
    reduce("ReduceMean", x, [1], 0, 18)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.bool_])
def test_reduce_max_min_small_types(op, dtype):
    x = rng.random((3, 5)) > 0.5 if dtype == np.bool_ else rand((3, 5), dtype, 0, 100)
    reduce(op, x, [1], 0, 20)
    if dtype != np.bool_:
        reduce(op, x, [0], 1, 12)


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_noop_with_empty_axes(op):
    # noop skips only the summation: ReduceLogSum still takes the log, ReduceSumSquare squares, ...
    x = rand((2, 3), low=-1.5, high=1.5)
    if op in ("ReduceLogSum", "ReduceProd"):
        x = np.abs(x) + 0.5
    opset = 13 if op == "ReduceSum" else 18
    reduce(op, x, [], 1, opset, noop=1)       # empty axes input: identity
    reduce(op, x, None, 1, opset, noop=1)     # absent axes input: identity
    reduce(op, x, [], 0, opset, noop=0)       # empty axes: reduce everything
    reduce(op, x, [1], 0, opset, noop=1)      # axes given: noop does not apply


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_empty_input(op):
    x = np.zeros((2, 0, 3), np.float32)
    reduce(op, x, [1], 1, 18)                 # reduce over the empty axis
    reduce(op, x, [2], 0, 18)                 # empty result


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin", "ReduceSum"])
def test_reduce_empty_int(op):
    reduce(op, np.zeros((2, 0), np.int32), [1], 0, 18)


def test_reduce_scalar_input():
    for op in ["ReduceSum", "ReduceMax", "ReduceMean"]:
        reduce(op, np.array(2.5, np.float32), None, 1, 18)


def test_reduce_axes_from_initializer():
    x = rand((3, 4, 5))
    parity("ReduceMean", x, Const(np.array([0, -1], np.int64)), attrs={"keepdims": 0}, opset=18)
    parity("ReduceSum", x, Const(np.array([1], np.int64)), opset=13)


def test_reduce_log_sum_exp_is_stable():
    x = np.array([[1000.0, 1000.0, 999.0], [-1000.0, -1001.0, -np.inf], [-np.inf, -np.inf, -np.inf]], np.float32)
    reduce("ReduceLogSumExp", x, [1], 0, 18)


# ---------------------------------------------------------------- ArgMax, ArgMin

@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("opset", [1, 11, 12, 13])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_arg(op, opset, keepdims):
    x = rand((3, 4, 5))
    for axis in ([0, 1, 2] if opset < 11 else [0, 2, -1, -3]):
        parity(op, x, out=np.int64, attrs={"axis": axis, "keepdims": keepdims}, opset=opset)
    parity(op, x, out=np.int64, opset=opset)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_ties_select_last_index(op, last):
    x = np.array([[1, 3, 3, 0, 3], [2, 2, 0, 0, 1], [5, 5, 5, 5, 5]], np.float32)
    for axis in [0, 1]:
        parity(op, x, out=np.int64, attrs={"axis": axis, "select_last_index": last}, opset=12)
        parity(op, x, out=np.int64, attrs={"axis": axis, "select_last_index": last, "keepdims": 0}, opset=13)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float16, np.float64, np.uint8, np.int8])
def test_arg_types(op, dtype):
    x = rand((4, 6), dtype, 0, 9)
    parity(op, x, out=np.int64, attrs={"axis": 1}, opset=13)


# ---------------------------------------------------------------- Softmax, LogSoftmax, Hardmax

SOFTMAX = ["Softmax", "LogSoftmax", "Hardmax"]


@pytest.mark.parametrize("op", SOFTMAX)
@pytest.mark.parametrize("opset", [1, 11])
def test_softmax_coerced_2d(op, opset):
    # Before 13: softmax over all axes from `axis` on, as one flattened row
    x = rand((2, 3, 4, 2), low=-4, high=4)
    parity(op, x, opset=opset)
    for axis in ([0, 1, 2, 3] if opset < 11 else [0, 2, -1, -3]):
        parity(op, x, attrs={"axis": axis}, opset=opset)


@pytest.mark.parametrize("op", SOFTMAX)
def test_softmax_single_axis(op):
    x = rand((2, 3, 4, 2), low=-4, high=4)
    parity(op, x, opset=13)
    for axis in [0, 1, 2, -1, -2]:
        parity(op, x, attrs={"axis": axis}, opset=13)


@pytest.mark.parametrize("op", SOFTMAX)
def test_softmax_types_and_shapes(op):
    if op != "Hardmax":  # ORT has float32 Hardmax only
        parity(op, rand((3, 5), np.float16, -4, 4), opset=13, **F16)
        parity(op, rand((3, 5), np.float64, -4, 4), opset=13)
    parity(op, rand((7,), low=-4, high=4), opset=13)
    parity(op, rand((2, 0, 3)), attrs={"axis": 1}, opset=13)
    parity(op, rand((2, 0, 3)), opset=11)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_large_values(op):
    x = np.array([[1000.0, 999.0, -1000.0], [-50.0, -50.0, -50.0], [88.0, 0.0, -88.0]], np.float32)
    parity(op, x, opset=13)


def test_hardmax_ties_pick_first():
    x = np.array([[3, 1, 3, 2], [0, 0, 0, 0], [1, 5, 5, 2]], np.float32)
    parity("Hardmax", x, opset=13)
    parity("Hardmax", x, attrs={"axis": 0}, opset=13)
    parity("Hardmax", x, attrs={"axis": 0}, opset=11)


# ---------------------------------------------------------------- CumSum

@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("opset", [11, 14])
def test_cumsum(exclusive, reverse, opset):
    x = rand((3, 4, 5))
    attrs = {"exclusive": exclusive, "reverse": reverse}
    for axis in [0, 1, -1]:
        parity("CumSum", x, np.array(axis, np.int32), attrs=attrs, opset=opset)
    parity("CumSum", x, np.array([2], np.int64), attrs=attrs, opset=opset)
    parity("CumSum", x, Const(np.array(-2, np.int64)), attrs=attrs, opset=opset)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64, np.float16])
def test_cumsum_types(dtype):
    x = rand((4, 6), dtype, -9, 9)
    tol = F16 if dtype == np.float16 else {}
    parity("CumSum", x, np.array(1, np.int64), opset=14, **tol)
    parity("CumSum", x, np.array(0, np.int64), attrs={"exclusive": 1, "reverse": 1}, opset=14, **tol)


def test_cumsum_float16_rounds_once():
    """Stock runs float16 CumSum in float32 and rounds each output once; float16 partial sums drift (4 ulps at
    65 terms, found by tests/properties/test_random_graphs.py)."""
    x = np.random.default_rng(3).uniform(-2, 2, (2, 257)).astype(np.float16)
    parity("CumSum", x, np.array(1, np.int64), opset=14, rtol=0, atol=0)


def test_cumsum_edge_shapes():
    parity("CumSum", rand((0, 3)), np.array(0, np.int64))
    parity("CumSum", rand((1,)), np.array(0, np.int64), attrs={"exclusive": 1})


# ---------------------------------------------------------------- TopK

TOPK_OUT = [np.float32, np.int64]


def test_topk_opset1_k_attribute():
    x = rand((3, 6))
    parity("TopK", x, out=TOPK_OUT, attrs={"k": 3}, opset=1)
    parity("TopK", x, out=TOPK_OUT, attrs={"k": 2, "axis": 0}, opset=1)


@pytest.mark.parametrize("opset", [10, 11, 24])
def test_topk_k_input(opset):
    x = rand((3, 6, 4))
    parity("TopK", x, np.array([3], np.int64), out=TOPK_OUT, opset=opset)
    parity("TopK", x, np.array([2], np.int64), out=TOPK_OUT, attrs={"axis": 1}, opset=opset)
    parity("TopK", x, Const(np.array([4], np.int64)), out=TOPK_OUT, opset=opset)


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_topk_largest_and_axis(largest, axis):
    x = rand((4, 5, 6))
    parity("TopK", x, np.array([3], np.int64), out=TOPK_OUT, attrs={"largest": largest, "axis": axis}, opset=11)


@pytest.mark.parametrize("largest", [0, 1])
def test_topk_ties_lower_index_first(largest):
    x = np.array([[3, 1, 3, 2, 1, 3, 0, 2], [5, 5, 5, 5, 5, 5, 5, 5]], np.float32)
    for k in [1, 3, 5, 8]:
        parity("TopK", x, np.array([k], np.int64), out=TOPK_OUT, attrs={"largest": largest}, opset=11)
    x = rng.integers(0, 4, (3, 40)).astype(np.float32)  # many ties
    parity("TopK", x, np.array([17], np.int64), out=TOPK_OUT, attrs={"largest": largest}, opset=11)


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("k", [0, 1, 3, 32, 33, 40])
def test_topk_constant_k_native_step(largest, k):
    # a constant k: the native program's step in the third run (by insertion up to 32, a sort beyond)
    x = rng.integers(0, 6, (2, 40, 3)).astype(np.float32)  # many ties
    x[0, 5, 0] = x[1, 7, 2] = x[1, 30, 2] = x[1, 31, 2] = np.nan
    x[0, 9, 1], x[0, 11, 1] = -0.0, 0.0
    parity("TopK", x, Const(np.array([k], np.int64)), out=TOPK_OUT, attrs={"largest": largest, "axis": 1}, opset=11)
    parity("TopK", x, Const(np.array([min(k, 3)], np.int64)), out=TOPK_OUT, attrs={"largest": largest}, opset=11)


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("k", [33, 50, 1000])
def test_topk_large_k_last_axis_native_step(largest, k):
    # k past the insertion limit over a contiguous row: the step's heap, sixteen values skipped at a time
    x = rng.integers(0, 50, (3, 1000)).astype(np.float32)  # ties everywhere
    x[0, [5, 500, 999]] = np.nan
    x[1, 16:32] = np.nan
    x[2, 100], x[2, 101] = -0.0, 0.0
    parity("TopK", x, Const(np.array([k], np.int64)), out=TOPK_OUT, attrs={"largest": largest}, opset=11)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_topk_types(dtype):
    x = rand((3, 9), dtype, -20, 20)
    for largest in [0, 1]:
        parity("TopK", x, np.array([4], np.int64), out=[np.dtype(dtype), np.int64], attrs={"largest": largest},
               opset=11)


def test_topk_k_zero_and_full():
    x = rand((3, 5))
    parity("TopK", x, np.array([0], np.int64), out=TOPK_OUT, opset=11)
    parity("TopK", x, np.array([5], np.int64), out=TOPK_OUT, opset=11)


def test_topk_unsorted_same_set():
    # sorted=0 leaves the order undefined (ORT returns a selection order); compare as sets
    x = rand((3, 12))
    model, feeds = build("TopK", x, np.array([5], np.int64), out=TOPK_OUT, attrs={"sorted": 0}, opset=11)
    ref = stock_session(model).run(None, feeds)
    ours = run_ours(model, feeds)
    for (rv, ri), (ov, oi) in [((ref[0], ref[1]), (ours[0], ours[1]))]:
        ro, oo = np.argsort(ri, axis=-1), np.argsort(oi, axis=-1)
        assert_close(np.take_along_axis(oi, oo, -1), np.take_along_axis(ri, ro, -1), 0, 0, "indices")
        assert_close(np.take_along_axis(ov, oo, -1), np.take_along_axis(rv, ro, -1), 0, 0, "values")


# ---------------------------------------------------------------- CumProd

@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_cumprod(exclusive, reverse, dtype):
    x = rand((3, 4), dtype, 0.5, 1.5) if np.dtype(dtype).kind == "f" else rng.integers(-3, 4, (3, 4)).astype(dtype)
    for axis in (0, 1, -1):
        parity("CumProd", x, np.array(axis, np.int64), attrs={"exclusive": exclusive, "reverse": reverse}, opset=26)


# ---------------------------------------------------------------- NaN: stock's answers, not numpy's
# Stock keeps "a unless b is strictly better", so a NaN sticks where it leads and is dropped (with what was combined
# into it) where it follows, in the order of stock's path for the shape (Eigen's SSE2 packets, or a plain loop).

N = np.nan
NAN_ROWS = np.array([[N, 1, 2, 3, 4, 5, 6, 7, 8],    # leading NaN
                     [1, N, N, 2, 0, 0, 0, 0, 9],    # NaN in packet lanes, a larger value after them
                     [0, N, 0, 3, 2, 7, N, 1, 1],
                     [5, 5, 5, N, 5, 9, N, 9, 1],    # ties
                     [N, N, N, N, N, N, N, N, N],    # all NaN
                     [-np.inf, N, 3, N, N, 4, N, N, 2],
                     [1, 2, 3, 4, 5, 6, 7, 8, N]], np.float32)


def aligned_views(x):
    """x copied at each 4-byte offset from a 16-byte boundary: stock reads a fed tensor where it lies, and its
    vectorised reductions start their packets at the boundary."""
    views = []
    for offset in range(0, 16, x.itemsize):
        buf = np.zeros(x.size + 64 // x.itemsize, x.dtype)
        start = (offset - buf.ctypes.data % 16) % 16 // x.itemsize
        v = buf[start:start + x.size].reshape(x.shape)
        v[...] = x
        views.append(v)
    return views


def nan_parity(op, x, *extra, attrs=None, opset=18, outputs=None):
    """ours == stock, NaN for NaN, with x fed at each offset from a 16-byte boundary."""
    model, feeds = node_model(op, [x, *extra], attrs, opset, outputs)
    for view in aligned_views(x):
        ref = stock_session(model).run(None, {**feeds, "in0": view})
        ours = run_ours(model, {**feeds, "in0": view})
        for r, o in zip(ref, ours):
            assert r.dtype == o.dtype and r.shape == o.shape
            np.testing.assert_array_equal(o, r, err_msg=f"{op} {attrs} at {view.ctypes.data % 16}")


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_reduce_max_min_nan(op, dtype):
    x = NAN_ROWS.astype(dtype)
    for axes in ([1], [0], [0, 1]):
        nan_parity(op, x, np.array(axes, np.int64), attrs={"keepdims": 0})
    nan_parity(op, x, np.array([1], np.int64), attrs={"keepdims": 1})
    # every path of stock's: [kept, reduced, kept], [reduced, kept, reduced], [reduced, kept], a loop
    rng = np.random.default_rng(5)
    y = rng.integers(-4, 4, (3, 6, 2, 7)).astype(dtype)
    y[rng.random(y.shape) < 0.3] = np.nan
    for axes in ([1], [1, 2], [0, 3], [0, 1, 3], [0], [0, 2], [1, 3], [3]):
        nan_parity(op, y, np.array(axes, np.int64), attrs={"keepdims": 0})
    nan_parity(op, y[0, :, :, :3].copy(), attrs={"axes": [0], "keepdims": 1}, opset=13)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_arg_nan(op, last, dtype):
    x = NAN_ROWS.astype(dtype)
    for axis in (0, 1):
        nan_parity(op, x, attrs={"axis": axis, "select_last_index": last}, opset=13, outputs=[np.int64])
    # a vector: stock's vectorised search of packets from the first element
    for row in x:
        for n in (2, 3, 5, 9):
            nan_parity(op, row[:n].copy(), attrs={"axis": 0, "select_last_index": last, "keepdims": 0}, opset=13,
                       outputs=[np.int64])
    rng = np.random.default_rng(6)
    v = rng.integers(-3, 3, 61).astype(dtype)
    v[rng.random(61) < 0.4] = np.nan
    nan_parity(op, v, attrs={"axis": 0, "select_last_index": last}, opset=13, outputs=[np.int64])


@pytest.mark.parametrize("opset", [11, 13])
def test_hardmax_nan(opset):
    # 1 at the first occurrence of the row's maximum as stock's Eigen reduces it; none where that is NaN
    nan_parity("Hardmax", NAN_ROWS, opset=opset)
    nan_parity("Hardmax", NAN_ROWS, attrs={"axis": 0}, opset=opset)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_nan(op):
    nan_parity(op, NAN_ROWS, opset=13)


# ---------------------------------------------------------------- refused inputs: stock's error class and cause

def unranked(op, inputs, attrs=None, opset=18, outputs=None):
    """A one-node model whose inputs have no shape (so only the kernel can check them) and its feeds."""
    names = [f"in{i}" for i in range(len(inputs))]
    tp = helper.np_dtype_to_tensor_dtype
    outputs = outputs or [np.asarray(inputs[0]).dtype]
    node = helper.make_node(op, names, [f"out{j}" for j in range(len(outputs))], **(attrs or {}))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, tp(np.asarray(a).dtype), None)
                                            for n, a in zip(names, inputs)],
                              [helper.make_tensor_value_info(f"out{j}", tp(np.dtype(d)), None)
                               for j, d in enumerate(outputs)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)
    return model, {n: np.asarray(a) for n, a in zip(names, inputs)}


def assert_refused(model, feeds, error, cause):
    """Stock and ours both refuse with `error`; ours names the cause."""
    with pytest.raises(error):
        stock_session(model).run(None, feeds)
    with pytest.raises(error, match=cause):
        ep_session(model).run(None, feeds)


X23 = np.arange(6, dtype=np.float32).reshape(2, 3)
I64 = np.int64


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_axes_out_of_range(op):
    for axes in ([2], [-3], [0, 5]):
        cause = rf"axis {axes[-1]} is not in valid range \[-2,1\]"
        assert_refused(*unranked(op, [X23, np.array(axes, I64)]), Fail, cause)
        assert_refused(*unranked(op, [X23], {"axes": axes}, opset=11), Fail, cause)
    assert_refused(*unranked(op, [X23, np.array([[1]], I64)]), Fail, "axes tensor must be a vector")
    assert_refused(*unranked(op, [np.zeros((2, 0, 3), np.float32), np.array([3], I64)]), Fail, "not in valid range")


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin", "Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [11, 13])
def test_axis_out_of_range(op, opset):
    outputs = [I64] if op.startswith("Arg") else None
    for axis in (2, -3):
        assert_refused(*unranked(op, [X23], {"axis": axis}, opset, outputs), Fail,
                       rf"axis {axis} is not in valid range \[-2,1\]")
    if not op.startswith("Arg"):  # a scalar has no axis
        assert_refused(*unranked(op, [np.array(1.0, np.float32)], {}, opset), Fail, "not in valid range")


def test_cumsum_refused():
    assert_refused(*unranked("CumSum", [X23, np.array(2, I64)], opset=14), Fail, r"axis 2 is not in valid range")
    assert_refused(*unranked("CumSum", [X23, np.array(-3, I64)], opset=14), Fail, r"axis -3 is not in valid range")
    assert_refused(*unranked("CumSum", [X23, np.array([1, 0], I64)], opset=14), InvalidArgument, "exactly one element")
    assert_refused(*unranked("CumSum", [X23, np.array([[1]], I64)], opset=14), InvalidArgument, "0D or 1D")
    assert_refused(*unranked("CumSum", [np.array(1.0, np.float32), np.array(0, I64)], opset=14), InvalidArgument,
                   "on a scalar")


def test_topk_refused():
    model = lambda k, **attrs: unranked("TopK", [X23, np.array(k, I64)], attrs, 11, [np.float32, I64])
    assert_refused(*model([-1]), Fail, "k must not be negative")
    assert_refused(*model([4]), Fail, r"k argument \[4\] should not be greater than specified axis dim value \[3\]")
    assert_refused(*model([2], axis=2), Fail, r"axis 2 is not in valid range \[-2,1\]")
    for k in ([1, 2], 1, np.zeros(0, I64)):
        assert_refused(*model(k), Fail, "k tensor should be a 1D tensor of size 1")
    assert_refused(*unranked("TopK", [X23], {"k": 4}, 1, [np.float32, I64]), Fail, "should not be greater")


def test_undefined_empty_reductions():
    # stock leaves these undefined (ORT_NOT_IMPLEMENTED): RUNTIME_EXCEPTION
    for op in ("ReduceMax", "ReduceMin"):
        assert_refused(*unranked(op, [np.zeros((2, 0), np.bool_), np.array([1], I64)], {"keepdims": 0}, 20),
                       RuntimeException, f"{op} is not defined for empty set with bool type")
    for op in ("ArgMax", "ArgMin"):
        assert_refused(*unranked(op, [np.zeros((2, 0), np.float32)], {"axis": 1}, 13, [I64]), RuntimeException,
                       "empty axis")


# ---------------------------------------------------------------- valid inputs stock answers

@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_scalar_with_axes(op):
    # stock reduces a scalar over no axis, whatever the axes say
    x = np.array(2.5, np.float32)
    for axes in ([0], [5], [-1, 0]):
        assert_parity(*unranked(op, [x, np.array(axes, I64)], {"keepdims": 0}))
        assert_parity(*unranked(op, [x, np.array(axes, I64)]))
    assert_parity(*unranked(op, [x], {"axes": [0]}, opset=11))


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceL2", "ReduceLogSumExp"])
def test_reduce_repeated_axes(op):
    x = rand((3, 4, 5), low=0.5)
    reduce(op, x, [1, 1], 0, 18)
    reduce(op, x, [2, -1, 0], 1, 18)
    reduce(op, x, [0, 0], 1, 13)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin", "ReduceSum", "ReduceMean", "ReduceProd", "ReduceLogSum"])
def test_reduce_empty_keepdims(op):
    x = np.zeros((2, 0, 3), np.float32)
    for axes, keepdims in (([1], 0), ([-2], 1), ([0, 1], 0), ([2], 0), (None, 0)):
        reduce(op, x, axes, keepdims, 18)
    reduce(op, x, [], 1, 18, noop=1)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceProd", "ReduceSumSquare", "ReduceL1", "ReduceL2",
                                "ReduceLogSum"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_reduce_int_saturates(op, dtype):
    # stock accumulates integers in float64 and saturates at the type's limits (it does not wrap)
    info = np.iinfo(dtype)
    x = np.array([[info.max, 5, -3], [info.max // 2 + 1] * 3, [info.min, -5, 1], [7, -7, 3]], dtype)
    for axes in ([1], [0], None):
        reduce(op, x, axes, 0, 18)


# ---------------------------------------------------------------- TopK: ties, NaN, every way of selecting

@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int64, np.uint8])
def test_topk_ties_nan_and_sizes(largest, dtype):
    rng = np.random.default_rng(9)
    for rows, n in ((3, 9), (2, 300), (1, 4000)):
        x = rng.integers(0, 20, (rows, n)).astype(dtype)  # many ties
        if np.dtype(dtype).kind == "f" and n != 300:
            x[rng.random(x.shape) < 0.1] = np.nan  # NaN above every number, lower index first
        for k in sorted({1, 2, 5, n // 16, n // 3, n}):
            parity("TopK", x, np.array([k], I64), out=[np.dtype(dtype), I64], attrs={"largest": largest}, opset=11)
    signed = np.array([[0.0, -0.0, 0.0, -0.0, 1, 1, -1] * 40], np.float32)  # -0 equals 0: index order
    parity("TopK", signed, np.array([5], I64), out=TOPK_OUT, attrs={"largest": largest}, opset=11)
    parity("TopK", signed, np.array([280], I64), out=TOPK_OUT, attrs={"largest": largest}, opset=11)
    extremes = np.array([[np.inf, -np.inf, 1, np.inf, -np.inf, 0] * 30], np.float32)
    parity("TopK", extremes, np.array([20], I64), out=TOPK_OUT, attrs={"largest": largest}, opset=11)
