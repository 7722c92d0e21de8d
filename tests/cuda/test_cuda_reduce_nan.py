"""ReduceMax/ReduceMin on the CUDA EP with NaN, and the reductions' axes, scalars and empty sets, against stock ORT's
CPU EP. Stock keeps "a unless b is strictly greater (less)": a NaN sticks where it leads and is dropped, with what was
combined into it, where it follows, in the order of stock's path for the shape (kernels/cpu/reduction.py
stock_path); native/cuda/reduction.cu's second pass gives the same answers for a tensor in an aligned buffer.

The host-side checks run everywhere (a recording runtime, no GPU); the parity tests need a GPU (skipped without)."""
import struct

import numpy as np
import pytest

from kernels.test_reduction import NAN_ROWS
from onnxruntime_ep_seamless.kernels.cuda import reduction as cuda_reduce
from onnxruntime_ep_seamless.runtime.cuda import MAX_DIMS, DeviceTensor
from parity import Const, ep_session, node_model, stock_session
from test_cuda_ep import needs_gpu, run_on_cuda
from test_cuda_launch_choice import Recorder

F32, F16, I32, I64 = np.float32, np.float16, np.int32, np.int64
MAX, MIN, MEAN = (cuda_reduce.REDUCE[op][0] for op in ("ReduceMax", "ReduceMin", "ReduceMean"))


def on_gpu(*shape, dtype=F32):
    return DeviceTensor(1 << 20, tuple(shape), np.dtype(dtype))


# --- the host side (no GPU) ----------------------------------------------------------------------------------

def test_axes_out_of_range_refused_before_any_launch():
    rt = Recorder()
    for axes in ([2], [-3], [0, 5]):
        with pytest.raises(ValueError, match=rf"axis {axes[-1]} is not in valid range \[-2,1\]"):
            cuda_reduce.reduce(rt, None, MAX, on_gpu(2, 3), axes, 1)
    assert rt.launches == []


def test_scalar_repeated_axes_and_empty_sets():
    rt = Recorder()
    assert cuda_reduce.reduce(rt, None, MAX, on_gpu(), [5], 0).shape == ()  # a scalar: no axis, whatever they say
    assert cuda_reduce.reduce(rt, None, MAX, on_gpu(2, 3), [1, -1], 0).shape == (2,)
    # over an empty axis each output is the op's value for no element (-inf, 0 ...), as stock's
    assert cuda_reduce.reduce(rt, None, MEAN, on_gpu(2, 0), [1], 0).shape == (2,)
    assert [name for name, _, _ in rt.launches] == ["seamless_reduce_thread_f32"] * 3


@pytest.mark.parametrize("shape,axes,path", [((6, 80), [1], "rows"), ((300,), [0], "rows"), ((3, 70, 5), [1], "krk"),
                                             ((70, 3, 5), [0, 2], "rkr"), ((90, 4), [0], "loop"),
                                             ((2, 70, 2, 3), [1, 3], "loop"), ((1, 70, 5), [1], "loop")])
def test_stock_path_reaches_the_kernel(shape, axes, path):
    rt = Recorder()
    cuda_reduce.reduce(rt, None, MAX, on_gpu(*shape), axes, 1)
    (packed,) = [value for kind, value in rt.args[0] if kind == "bytes"]
    *_, d0, d1, d2, layout, lanes = struct.unpack(f"<{4 * MAX_DIMS + 1}q2i3q2i", packed)
    assert (layout, lanes) == (cuda_reduce.NAN_LAYOUT[path], 4)
    if path in ("krk", "rkr"):
        assert np.prod(shape) == d0 * d1 * d2


# --- on the GPU --------------------------------------------------------------------------------------------------

def aligned(x):
    """x in a 64-byte aligned buffer: where stock's packets start is then what the kernel assumes."""
    buf = np.empty(x.nbytes + 64, np.uint8)
    start = -buf.ctypes.data % 64
    out = buf[start:start + x.nbytes].view(x.dtype).reshape(x.shape)
    out[...] = x
    return out


def nan_check(op, x, attrs, opset=18, axes=None, spec_shape=None):
    """Ours on the GPU against stock's CPU EP. spec_shape: the spec's output shape where stock ORT before 1.32
    answers another (an empty axis reduced with keepdims=1 stays 0 there): then against our CPU EP, which the
    CPU suite checks against stock 1.32 (tests/kernels/test_reduction.py: test_reduce_empty_keepdims)."""
    # a scalar's axes fed, not constant: onnxruntime 1.30's shape inference refuses a constant axis on a scalar
    inputs = [x] + ([(np.array(axes, I64) if x.ndim == 0 else Const(np.array(axes, I64)))] if axes is not None else [])
    model, feeds = node_model(op, inputs, attrs, opset, [I64] if op in ("ArgMax", "ArgMin") else None)
    feeds = {k: aligned(v) for k, v in feeds.items()}
    (ours,) = run_on_cuda(model, feeds)
    (ref,) = stock_session(model).run(None, feeds)
    if spec_shape is not None and ref.shape != spec_shape:
        (ref,) = ep_session(model).run(None, feeds)
        assert ref.shape == spec_shape
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    if op in ("ReduceMax", "ReduceMin", "ArgMax", "ArgMin", "Hardmax"):  # picks one of the values: exact
        np.testing.assert_array_equal(ours, ref, err_msg=f"{op} {x.shape} {axes} {attrs}")
    else:  # sums: the GPU adds in another order than stock's Eigen (a unit of the last place)
        np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-7, err_msg=f"{op} {x.shape} {axes} {attrs}")


@needs_gpu
@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("dtype", [F32, F16])
def test_reduce_max_min_nan(op, dtype):
    rng = np.random.default_rng(3)
    # rows of 9 (thread kernel) and of 70 (block kernel) start at every phase of a 16-byte boundary
    for shape, axes_list in [((7, 9), ([1], [0], [0, 1])), ((5, 70), ([1], [0], None)), ((3, 9, 5), ([1], [0, 2])),
                             ((4, 70, 6), ([1], [0, 2], [0, 1])), ((2, 3, 4, 70), ([1, 3], [0, 2], [3])),
                             ((1, 9, 7), ([1],)), ((300,), ([0],))]:
        for density in (0.05, 0.3, 0.9):
            x = rng.integers(-5, 5, shape).astype(dtype)
            x[rng.random(shape) < density] = np.nan
            for axes in axes_list:
                nan_check(op, x, {"keepdims": 0}, axes=axes)
            nan_check(op, x, {"keepdims": 1, "axes": list(axes_list[0])}, opset=13)
    x = np.array([[np.nan, 1, 2, 3, 4], [1, np.nan, np.nan, 2, 9], [np.nan] * 5], dtype)
    nan_check(op, x, {"keepdims": 0}, axes=[1])
    nan_check(op, np.array(np.nan, dtype), {"keepdims": 0}, axes=[0])


@needs_gpu
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", [F32, F16])
def test_arg_nan(op, dtype):
    """Rows in stock's loop order; a vector (select_last_index=0) in its vectorised search's (native/cuda/
    reduction.cu arg_vector_nan), at lengths with and without whole packets and a tail."""
    x = NAN_ROWS.astype(dtype)
    for axis in (0, 1):
        for last in (0, 1):
            nan_check(op, x, {"axis": axis, "select_last_index": last}, opset=13)
    rng = np.random.default_rng(8)
    vectors = [row[:n].copy() for row in x for n in (2, 3, 5, 9)] + [rng.integers(-3, 3, n).astype(dtype)
                                                                      for n in (61, 1000, 4099)]
    for v in vectors[-3:]:
        v[rng.random(v.size) < 0.4] = np.nan
    for v in vectors:
        nan_check(op, v, {"axis": 0, "keepdims": 0}, opset=13)


@needs_gpu
@pytest.mark.parametrize("dtype", [F32, F16])
def test_hardmax_nan(dtype):
    """1 at the first element equal to the row's maximum as stock's Eigen takes it, none where that is NaN."""
    x = NAN_ROWS.astype(dtype)
    for opset in (11, 13):
        nan_check("Hardmax", x, {}, opset=opset)
        nan_check("Hardmax", x, {"axis": 0}, opset=opset)
    y = np.random.default_rng(9).integers(-3, 3, (3, 9, 5)).astype(dtype)
    y[np.random.default_rng(10).random(y.shape) < 0.3] = np.nan
    for axis in (0, 1, 2):
        nan_check("Hardmax", y, {"axis": axis}, opset=13)


@needs_gpu
@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin", "ReduceSum", "ReduceMean", "ReduceProd", "ReduceL2",
                                "ReduceLogSum", "ReduceLogSumExp"])
def test_reduce_scalar_empty_and_repeated_axes(op):
    nan_check(op, np.array(2.5, F32), {"keepdims": 0}, axes=[0])
    nan_check(op, np.zeros((2, 0, 3), F32), {"keepdims": 0}, axes=[1])
    nan_check(op, np.zeros((2, 0, 3), F32), {"keepdims": 1}, axes=[-2], spec_shape=(2, 1, 3))
    nan_check(op, np.random.default_rng(4).uniform(0.5, 2, (3, 4, 5)).astype(F32), {"keepdims": 0}, axes=[2, -1])


@needs_gpu
@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin", "ReduceSum", "ReduceMean"])
def test_reduce_int_empty(op):
    nan_check(op, np.zeros((2, 0), I32), {"keepdims": 0}, axes=[1])
    nan_check(op, np.zeros((2, 0), I64), {"keepdims": 1}, axes=[1])


@needs_gpu
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceProd", "ReduceSumSquare", "ReduceL1"])
@pytest.mark.parametrize("dtype", [I32, I64])
def test_reduce_int_saturates(op, dtype):
    # stock accumulates integers in float64 and saturates at the type's limits (it does not wrap)
    info = np.iinfo(dtype)
    x = np.array([[info.max, 5, -3], [info.max // 2 + 1] * 3, [info.min, -5, 1], [7, -7, 3]], dtype)
    for axes in ([1], [0]):
        nan_check(op, x, {"keepdims": 0}, axes=axes)
    if dtype == I32:  # rows of 70 (the block kernel): int32 sums are exact in float64, in any order
        nan_check(op, np.tile(x, (1, 24))[:, :70].copy(), {"keepdims": 0}, axes=[1])
