"""Parity tests for shape/indexing ops (kernels/cpu/shape.py) against stock ORT."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from onnx import TensorProto, numpy_helper

import parity
from parity import check_node, assert_parity, single_node_model

rng = np.random.default_rng(0)
I64 = np.int64


check = check_node


def ints(*v):
    return np.array(v, dtype=I64)


def data(shape, dtype=np.float32):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) > 0.5
    if dtype.kind in "iu":
        return rng.integers(0, 100, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


DTYPES = [np.float32, np.float16, np.int64, np.bool_]


# --- layout ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("perm", [None, [0, 2, 1], [2, 0, 1]])
def test_transpose(dtype, perm):
    check("Transpose", [data((2, 3, 4), dtype)], {} if perm is None else {"perm": perm})


def test_transpose_empty():
    check("Transpose", [data((0, 3), np.float32)])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [[4, -1], [0, 3, 4], [-1], [2, 0, 2, -1]])
def test_reshape(dtype, shape):
    check("Reshape", [data((2, 3, 4), dtype), ints(*shape)])


def test_reshape_allowzero():
    check("Reshape", [data((0, 3)), ints(3, 0)], {"allowzero": 1}, opset=14)


def test_reshape_opset5_const_shape():
    check("Reshape", [data((2, 6)), ints(3, -1)], opset=5, const=[1])


@pytest.mark.parametrize("axis,opset", [(0, 9), (1, 9), (3, 13), (-1, 13), (-3, 21)])
def test_flatten(axis, opset):
    check("Flatten", [data((2, 3, 4))], {"axis": axis}, opset=opset)


def test_flatten_empty():
    check("Flatten", [data((2, 0, 4))], {"axis": 2})


@pytest.mark.parametrize("axes", [None, [1], [-1, 1]])
def test_squeeze_11(axes):
    check("Squeeze", [data((2, 1, 3, 1))], {} if axes is None else {"axes": axes}, opset=11)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axes", [None, [1], [-1, 1]])
def test_squeeze_13(dtype, axes):
    check("Squeeze", [data((2, 1, 3, 1), dtype)] + ([] if axes is None else [ints(*axes)]), opset=13)


def test_squeeze_empty_axes():
    check("Squeeze", [data((1, 3, 1)), np.zeros(0, I64)], opset=13)


@pytest.mark.parametrize("axes", [[0], [-1], [1, 3]])
def test_unsqueeze_11(axes):
    check("Unsqueeze", [data((2, 3))], {"axes": axes}, opset=11)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axes", [[0], [-1], [3, 1], [-4, -1]])
def test_unsqueeze_13(dtype, axes):
    check("Unsqueeze", [data((2, 3), dtype), ints(*axes)], opset=13)


def test_unsqueeze_scalar():
    check("Unsqueeze", [np.float32(3.0), ints(0)], opset=21)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(dtype, axis):
    parts = []
    for n in (1, 2, 0):  # one empty part
        s = [2, 3, 4]
        s[axis] = n
        parts.append(data(s, dtype))
    check("Concat", parts, {"axis": axis})


def test_concat_opset4_single():
    check("Concat", [data((2, 3))], {"axis": 0}, opset=4)


@pytest.mark.parametrize("opset", [11, 13])
def test_split_equal(opset):
    check("Split", [data((6, 4))], {"axis": 0}, opset=opset, outputs=[np.float32] * 3)


def test_split_attr():
    check("Split", [data((2, 7))], {"axis": -1, "split": [3, 0, 4]}, opset=11, outputs=[np.float32] * 3)


@pytest.mark.parametrize("dtype", DTYPES)
def test_split_input(dtype):
    check("Split", [data((2, 7), dtype), ints(3, 4)], {"axis": 1}, opset=13, outputs=[np.dtype(dtype)] * 2)


@pytest.mark.parametrize("n,dim", [(3, 7), (2, 4), (4, 6)])
def test_split_num_outputs(n, dim):
    check("Split", [data((dim, 2))], {"num_outputs": n}, opset=18, outputs=[np.float32] * n)


SLICES = [
    # starts, ends, axes, steps
    ([1], [3], None, None),
    ([0, 1], [-1, 1000], [0, 2], None),
    ([-100], [100], [-1], [2]),
    ([3, -1], [0, -100], [1, 2], [-1, -2]),
    ([5], [-20], [2], [-3]),
    ([2], [2], [0], None),  # empty
    ([0, 0], [2**63 - 1, -(2**63)], [0, 2], [1, -1]),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("starts,ends,axes,steps", SLICES)
def test_slice_10(dtype, starts, ends, axes, steps):
    ins = [data((3, 4, 6), dtype), ints(*starts), ints(*ends)]
    ins += [None if axes is None else ints(*axes)] if axes is not None or steps is not None else []
    if steps is not None:
        ins.append(ints(*steps))
    check("Slice", ins, opset=13)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-8, 8), st.integers(-8, 8), st.integers(-3, 3).filter(bool)),
                min_size=1, max_size=3))
def test_slice_random(specs):
    # Random starts/ends/steps around the dims (4, 5, 6), including out-of-range and negative ones.
    axes = list(range(len(specs)))
    starts, ends, steps = zip(*specs)
    check("Slice", [data((4, 5, 6)), ints(*starts), ints(*ends), ints(*axes), ints(*steps)], opset=13)


def test_slice_const_inputs():
    check("Slice", [data((3, 4)), ints(1), ints(-1), ints(1)], const=[1, 2, 3])


@pytest.mark.parametrize("axes", [None, [1], [-1, 0]])
def test_slice_1(axes):
    n = 1 if axes is None else len(axes)
    attrs = {"starts": [1, -3][:n], "ends": [1000, -1][:n]}
    if axes is not None:
        attrs["axes"] = axes
    check("Slice", [data((3, 4))], attrs, opset=9)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [[2, 1, 4], [1], [3, 1, 1, 1], [0, 1, 1]])
def test_expand(dtype, shape):
    check("Expand", [data((3, 1), dtype), ints(*shape)])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("repeats", [[1, 1], [2, 3], [0, 2]])
def test_tile(dtype, repeats):
    check("Tile", [data((2, 3), dtype), ints(*repeats)])


@pytest.mark.parametrize("mode,opset", [(None, 1), ("DCR", 13), ("CRD", 13)])
def test_depth_to_space(mode, opset):
    attrs = {"blocksize": 2}
    if mode:
        attrs["mode"] = mode
    check("DepthToSpace", [data((2, 8, 3, 2))], attrs, opset=opset)


def test_space_to_depth():
    check("SpaceToDepth", [data((2, 3, 4, 6))], {"blocksize": 2})


# --- shape queries and constants ------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_shape(dtype):
    check("Shape", [data((2, 3, 0), dtype)], outputs=[I64], symbolic=True)


@pytest.mark.parametrize("start,end", [(1, None), (None, -1), (-2, None), (-10, 10), (2, 1)])
def test_shape_15(start, end):
    attrs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    check("Shape", [data((2, 3, 4))], attrs, opset=15, outputs=[I64], symbolic=True)


@pytest.mark.parametrize("shape", [(2, 3), (), (0, 4)])
def test_size(shape):
    check("Size", [data(shape)], outputs=[I64], symbolic=True)


@pytest.mark.parametrize("value", [None, np.array([2.5], np.float16), np.array([7], I64), np.array([True])])
def test_constant_of_shape(value):
    attrs = {} if value is None else {"value": numpy_helper.from_array(value)}
    check("ConstantOfShape", [ints(2, 3)], attrs, outputs=[np.float32 if value is None else value.dtype])


def test_constant_of_shape_scalar():
    check("ConstantOfShape", [np.zeros(0, I64)], outputs=[np.float32])


# ORT turns Constant nodes into initializers when it loads a model, so no EP ever sees one: the Constant
# kernel serves only the direct runner.
only_direct = pytest.mark.skipif(not parity.DIRECT, reason="ORT folds Constant nodes into initializers")


def _constant(attr, value, dtype, opset=13):
    out = [("out0", dtype, None)]
    model = single_node_model("Constant", [], out, {attr: value}, opset=opset)
    assert_parity(model, {})


@only_direct
@pytest.mark.parametrize("value", [np.arange(6, dtype=np.float32).reshape(2, 3), np.array(3, I64),
                                   np.array([True, False]), np.zeros((0, 2), np.float16)])
def test_constant_value(value):
    _constant("value", numpy_helper.from_array(value), value.dtype)


@only_direct
@pytest.mark.parametrize("attr,value,dtype", [("value_float", 1.5, np.float32),
                                              ("value_floats", [1.0, 2.5], np.float32),
                                              ("value_int", 4, I64), ("value_ints", [1, -2, 3], I64)])
def test_constant_scalar_attrs(attr, value, dtype):
    _constant(attr, value, dtype)


@pytest.mark.parametrize("start,limit,delta,dtype", [
    (0, 10, 3, I64), (10, 0, -3, np.int32), (5, 5, 1, I64), (0.0, 1.0, 0.1, np.float32),
    (1.0, -2.0, -0.3, np.float64), (-1.5, 10.0, 0.013, np.float32)])
def test_range(start, limit, delta, dtype):
    check("Range", [np.array(start, dtype), np.array(limit, dtype), np.array(delta, dtype)])


@pytest.mark.parametrize("k", [0, 1, -2, 5])
@pytest.mark.parametrize("dtype", [np.float32, I64, np.int32])
def test_eye_like(k, dtype):
    check("EyeLike", [data((3, 5), dtype)], {"k": k})


def test_eye_like_dtype():
    check("EyeLike", [data((4, 3))], {"dtype": TensorProto.INT64, "k": -1}, outputs=[I64])


@pytest.mark.parametrize("dtype", [np.float32, np.float16, I64, np.bool_])
@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, 0, 2, -1, -10])
def test_trilu(dtype, upper, k):
    check("Trilu", [data((2, 3, 4), dtype)] + ([] if k is None else [ints(k)]), {"upper": upper}, opset=14)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot(axis):
    indices = ints(0, 2, -1, 5, -4, 1).reshape(2, 3)  # -4 and 5 are out of range for depth 4
    check("OneHot", [indices, ints(4), np.array([-1.0, 2.0], np.float32)], {"axis": axis}, opset=11,
          outputs=[np.float32])


def test_one_hot_float_depth():
    # ORT registers only some (indices, depth, values) type combinations; this is one of them.
    check("OneHot", [np.array([1, 0, 2], np.int32), np.array([3.0], np.float32), np.array([0, 9], np.float32)],
          outputs=[np.float32])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 4), (5,), (0, 3)])
def test_non_zero(dtype, shape):
    x = data(shape, dtype)
    if dtype != np.bool_:
        x = (x * (data(shape, np.float32) > 0)).astype(dtype)
    check("NonZero", [x], outputs=[I64])


# --- gather / scatter ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather(dtype, axis):
    check("Gather", [data((3, 4, 5), dtype), ints(0, -1, 2, 1).reshape(2, 2)], {"axis": axis}, opset=13)


def test_gather_scalar_index_int32():
    check("Gather", [data((3, 4)), np.array(-2, np.int32)], {"axis": 1})


def test_gather_empty_indices():
    check("Gather", [data((3, 4)), np.zeros((0,), I64)], {"axis": 0})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(dtype, axis):
    x = data((3, 4), dtype)
    idx = rng.integers(-3, 3, (2, 4) if axis == 0 else (3, 2))
    check("GatherElements", [x, idx.astype(I64)], {"axis": axis}, opset=13)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch_dims,ishape,idx", [
    (0, (2, 3), [[0, 1], [1, -1]]),
    (0, (2, 3, 4), [[[1], [0]]]),
    (1, (2, 3, 4), [[1], [2]]),
    (1, (2, 3, 4), [[[1, 3], [0, 0]], [[2, 2], [-1, 1]]]),
    (2, (2, 3, 4), np.zeros((2, 3, 1), I64)),
])
def test_gather_nd(dtype, batch_dims, ishape, idx):
    check("GatherND", [data(ishape, dtype), np.array(idx, I64)], {"batch_dims": batch_dims}, opset=13)


@pytest.mark.parametrize("reduction,opset", [(None, 13), ("none", 16), ("add", 16), ("mul", 16),
                                             ("max", 18), ("min", 18)])
@pytest.mark.parametrize("dtype", [np.float32, I64])
def test_scatter_nd(reduction, opset, dtype):
    x = data((4, 3, 2), dtype)
    # Duplicate indices only where a reduction makes their order irrelevant.
    idx = ints(1, 0, 3) if reduction in (None, "none") else ints(1, 0, 1, 3)
    idx = idx.reshape(-1, 1)
    upd = data((len(idx), 3, 2), dtype)
    check("ScatterND", [x, idx, upd], {} if reduction is None else {"reduction": reduction}, opset=opset)


def test_scatter_nd_elements():
    check("ScatterND", [data((3, 4)), ints(0, 1, 2, -1).reshape(2, 2), data((2,))], opset=13)


@pytest.mark.parametrize("reduction,opset", [(None, 11), ("none", 16), ("add", 16), ("mul", 18),
                                             ("max", 18), ("min", 18)])
@pytest.mark.parametrize("axis", [0, -1])
def test_scatter_elements(reduction, opset, axis):
    x = data((3, 4))
    if reduction in (None, "none"):
        idx = ints(2, 0, 1, 1, 0, -1, 2, 0).reshape(2, 4) if axis == 0 else ints(3, 0, -3, 2, 1, 0).reshape(3, 2)
    else:
        idx = ints(2, 2, 1, 1, 0, 2, 2, 0).reshape(2, 4) if axis == 0 else ints(3, 3, 1, 1, 0, 0).reshape(3, 2)
    attrs = {"axis": axis}
    if reduction is not None:
        attrs["reduction"] = reduction
    check("ScatterElements", [x, idx, data(idx.shape)], attrs, opset=opset)


def test_scatter_9():
    check("Scatter", [data((3, 4), I64), ints(1, 0, 2, 0).reshape(1, 4), data((1, 4), I64)], {"axis": 0}, opset=9)


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_compress(axis):
    cond = np.array([True, False, True])
    check("Compress", [data((3, 3)), cond] if axis is None else [data((3, 4)), cond],
          {} if axis is None else {"axis": axis}, opset=11)


def test_compress_long_condition():
    check("Compress", [data((3, 4)), np.array([True, False, True, True, True])], {"axis": 1})


# --- Pad -----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_2(mode):
    check("Pad", [data((3, 4))], {"pads": [1, 2, 2, 0], "mode": mode, "value": 1.5}, opset=2)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, I64])
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("pads", [[1, 2, 2, 0], [0, 0, 0, 0], [-1, 1, 1, -2]])
def test_pad_11(dtype, mode, pads):
    cv = [np.array(3, dtype)] if mode == "constant" else []
    check("Pad", [data((4, 5), dtype), ints(*pads)] + cv, {"mode": mode}, opset=13)


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
def test_pad_crop_then_pad(mode):
    # Negative pads crop first, then the other side pads from the cropped tensor (as ORT does).
    check("Pad", [np.arange(4, dtype=np.float32), ints(-1, 2)], {"mode": mode}, opset=19)


def test_pad_bool():
    check("Pad", [data((2, 3), np.bool_), ints(1, 0, 0, 1), np.array(True)], opset=13)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("axes", [[1], [-1, 0]])
def test_pad_axes(mode, axes):
    pads = [1, 2] if len(axes) == 1 else [2, 1, 0, 2]
    check("Pad", [data((3, 4, 5)), ints(*pads), None, ints(*axes)], {"mode": mode}, opset=19)


def test_pad_wrap_large():
    check("Pad", [data((2, 3)), ints(1, 4, 0, 5)], {"mode": "wrap"}, opset=21)


def test_pad_const_inputs():
    check("Pad", [data((2, 3)), ints(1, 1, 1, 1), np.array(-2.0, np.float32)], const=[1, 2], opset=18)


# --- Unique, ReverseSequence, TensorScatter ---------------------------------------------------

@pytest.mark.parametrize("sorted_", [0, 1])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_unique(sorted_, axis):
    x = rng.integers(0, 3, (4, 3)).astype(np.int64)
    x[2] = x[0]  # a repeated row
    attrs = {"sorted": sorted_} if axis is None else {"sorted": sorted_, "axis": axis}
    check("Unique", [x], attrs, opset=11, outputs=[np.int64] * 4)
    check("Unique", [x.astype(np.float32)], attrs, opset=11, outputs=[np.float32, np.int64])


@pytest.mark.parametrize("batch_axis,time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence(batch_axis, time_axis):
    x = data((4, 3, 2) if time_axis == 0 else (3, 4, 2))
    check("ReverseSequence", [x, ints(4, 1, 3)], {"batch_axis": batch_axis, "time_axis": time_axis}, opset=10)


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter(mode):
    cache, update = data((2, 3, 6, 4)), data((2, 3, 2, 4))
    check("TensorScatter", [cache, update, ints(1, 5) if mode == "circular" else ints(1, 4)], {"mode": mode},
          opset=24)
    check("TensorScatter", [cache, update], {"mode": mode}, opset=24)  # write at 0
