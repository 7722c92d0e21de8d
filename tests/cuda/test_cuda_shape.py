"""Indexing and selection ops on the CUDA EP (skipped without a GPU), against stock ORT's CPU EP:
Split, Tile, GatherElements, GatherND, ScatterND, ScatterElements, Trilu, CumSum, TopK, ArgMax/ArgMin,
Dropout, Constant, Range. Data movement and selection must match exactly in every element type they
take. Data are small integers (exact in every type, with ties for the selections) unless a case says
otherwise. Integer inputs fed to a session live on the GPU, so integer data exercises the kernels too."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from parity import Const, node_model, stock_session
from test_cuda_ep import DEVICES, PROBLEM, in_bfloat16, run_on_cuda
from test_cuda_ops import check as ops_check, skip_unless_stock_has

pytestmark = pytest.mark.skipif(not DEVICES, reason=f"no NVIDIA GPU for the CUDA EP ({PROBLEM or 'none found'})")
F32, F16, F64, I32, I64 = np.float32, np.float16, np.float64, np.int32, np.int64
MOVE_TYPES = [F32, F16, F64, I32, I64, np.int8, np.uint8, np.bool_]  # element sizes 1, 2, 4 and 8
NUMBER_TYPES = [F32, F16, I32, I64]


def data(shape, dtype=F32, low=-50, high=50, seed=0):
    values = np.random.default_rng(seed).integers(low, high, shape)
    return (values > 0) if dtype is np.bool_ else values.astype(dtype)


def indices(shape, dim, seed=1, dtype=I64):
    """Valid indices of an axis of length dim, negative ones (from the end) included."""
    return np.random.default_rng(seed).integers(-dim, dim, shape).astype(dtype)


def check(op, inputs, attrs=None, opset=18, outputs=None, tol=None, ref_in_float32=False):
    """Exact unless a tolerance is given: test_cuda_ops.check at this file's opset."""
    return ops_check(op, inputs, attrs, opset, outputs, **(tol or {}), exact=not tol, ref_in_float32=ref_in_float32)


def check_bfloat16(op, inputs, attrs=None, opset=18, outputs=None):
    """The op on bfloat16 data on our EP: the float32 feeds are cast to bfloat16 on the GPU and each float
    output back. Stock ORT CPU has almost no bfloat16 kernels, so the reference is its float32 op on the
    same values; they are small integers, exact in bfloat16, which data movement and selection only
    move (and CumSum adds exactly in float32, rounding once), so the results must agree bit for bit."""
    model, feeds = node_model(op, inputs, attrs, opset, outputs)
    bf16 = in_bfloat16(model, {name for name, a in feeds.items() if a.dtype == F32})
    ours = run_on_cuda(bf16, feeds)
    ref = stock_session(model).run(None, feeds)
    for i, (o, r) in enumerate(zip(ours, ref)):
        assert o.dtype == r.dtype and o.shape == r.shape, (i, o.dtype, o.shape, r.dtype, r.shape)
        np.testing.assert_array_equal(o, r, err_msg=f"output {i}")


# --- Flatten ------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [-4, -3, -1, 0, 2, 4])
def test_flatten_axes(axis):
    # a negative axis counts from the rank (the conformance suite found it counted from the rank + 1)
    check("Flatten", [data((2, 3, 4, 5), F32)], {"axis": axis})


# --- strided copies 16 bytes a thread (runtime/cuda.py strided_copy) ------------------------


@pytest.mark.parametrize("dtype", MOVE_TYPES)
def test_concat_and_slice_of_whole_16_byte_units(dtype, monkeypatch):
    """Rows of 32 and 48 values of every element size line up in 16-byte units (a thread copies one: seamless_copy_16);
    exact as stock's, and the same where a piece's offset does not line up (3 values in)."""
    from onnxruntime_ep_seamless.runtime import cuda as runtime_cuda
    launched, launch = [], runtime_cuda.CudaRuntime.launch
    monkeypatch.setattr(runtime_cuda.CudaRuntime, "launch",
                        lambda self, name, *a: (launched.append(name), launch(self, name, *a))[1])
    check("Concat", [data((3, 5, 32), dtype), data((3, 5, 48), dtype, seed=1)], {"axis": -1})
    check("Slice", [data((3, 5, 64), dtype), Const(np.array([16], I64)), Const(np.array([48], I64)),
                    Const(np.array([2], I64))])
    assert launched.count("seamless_copy_16") == 3 and not any(n.startswith("seamless_copy_") and n[14:] != "16"
                                                              for n in launched)
    check("Concat", [data((3, 5, 3), dtype), data((3, 5, 48), dtype, seed=1)], {"axis": -1})
    check("Slice", [data((3, 5, 64), dtype), Const(np.array([3], I64)), Const(np.array([51], I64)),
                    Const(np.array([2], I64))])


# --- Split --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", MOVE_TYPES)
def test_split_types(dtype):
    # num_outputs (opset 18) not dividing the axis: parts of 3, 3 and 1
    check("Split", [data((7, 3), dtype)], {"axis": 0, "num_outputs": 3}, outputs=[dtype] * 3)


@pytest.mark.parametrize("opset,attrs,split,parts", [
    (11, {"axis": 1, "split": [1, 2, 3]}, None, 3),  # split as an attribute
    (11, {"axis": -1}, None, 2),                      # equal parts
    (13, {"axis": 1}, [2, 4], 2),                     # split as an input
    (13, {"axis": 1}, [2, 0, 4], 3),                  # an empty part
    (13, {"axis": 0}, None, 2),
    (18, {"axis": 2, "num_outputs": 2}, None, 2),     # 5 into 3 and 2
])
def test_split_attributes(opset, attrs, split, parts):
    x = data((2, 6, 5) if opset == 18 else (2, 6, 4))
    inputs = [x] if split is None else [x, Const(np.array(split, I64))]
    check("Split", inputs, attrs, opset=opset, outputs=[F32] * parts)


@pytest.mark.parametrize("dtype,sizes", [(F16, [128, 128, 256]), (F32, [64, 128]), (F16, [100, 156])])
def test_split_of_a_decode_row(dtype, sizes):
    # [1, 1, n] on its last axis: pieces starting 256 bytes apart are views of the input (kernels/cuda/shape.py
    # VIEW_ALIGN), the others copies
    check("Split", [data((1, 1, sum(sizes)), dtype), Const(np.array(sizes, I64))], {"axis": -1}, opset=13,
          outputs=[dtype] * len(sizes))


def test_split_bfloat16():
    check_bfloat16("Split", [data((4, 6)), Const(np.array([1, 5], I64))], {"axis": 1}, outputs=[F32, F32])


# --- Tile ---------------------------------------------------------------------------------

TILE_CASES = [((2, 3), [2, 3]), ((2, 1, 3), [1, 4, 2]), ((5,), [3]), ((2, 3), [0, 2]),
              ((2, 3, 1, 2, 1), [1, 1, 3, 1, 2]),  # rank 5, 7 view axes: still one strided copy
              ((2, 1, 2, 1, 3), [2, 3, 1, 2, 2])]  # 9 view axes: the dedicated tile kernel


@pytest.mark.parametrize("shape,repeats", TILE_CASES)
def test_tile_shapes(shape, repeats):
    check("Tile", [data(shape), Const(np.array(repeats, I64))])


@pytest.mark.parametrize("dtype", MOVE_TYPES)
@pytest.mark.parametrize("shape,repeats", [TILE_CASES[1], TILE_CASES[-1]])
def test_tile_types(dtype, shape, repeats):
    check("Tile", [data(shape, dtype), Const(np.array(repeats, I64))])


def test_tile_bfloat16():
    check_bfloat16("Tile", [data((2, 1, 3)), Const(np.array([2, 3, 1], I64))])


# --- GatherElements, GatherND -------------------------------------------------------------


@pytest.mark.parametrize("index_type", [I64, I32])
@pytest.mark.parametrize("axis,index_shape", [(0, (2, 4, 5)), (1, (3, 6, 5)), (-1, (2, 3, 7)), (2, (1, 1, 1))])
def test_gather_elements(axis, index_shape, index_type):
    x = data((3, 4, 5), seed=2)
    check("GatherElements", [x, indices(index_shape, x.shape[axis], dtype=index_type)], {"axis": axis})


@pytest.mark.parametrize("dtype", MOVE_TYPES)
def test_gather_elements_types(dtype):
    check("GatherElements", [data((4, 6), dtype), indices((4, 3), 6)], {"axis": 1})


def test_gather_elements_bfloat16():
    check_bfloat16("GatherElements", [data((4, 6)), indices((5, 6), 4)], {"axis": 0})


def nd_indices(data_shape, index_shape, batch_dims=0, seed=3):
    """GatherND/ScatterND indices of shape index_shape: column j indexes data axis batch_dims + j."""
    k = index_shape[-1]
    if k == 0:  # whole slices of data
        return np.zeros(index_shape, I64)
    columns = [indices(index_shape[:-1] + (1,), data_shape[batch_dims + j], seed + j) for j in range(k)]
    return np.concatenate(columns, axis=-1)


@pytest.mark.parametrize("data_shape,index_shape,batch_dims", [
    ((2, 3, 4), (5, 2), 0), ((2, 3, 4), (2, 2, 3), 0), ((2, 3, 4), (4, 1), 0),
    ((2, 3, 4), (2, 2, 1), 1), ((2, 3, 4), (2, 3, 1), 2), ((2, 3, 4, 5), (2, 1, 2), 1), ((2, 3, 4, 5), (2, 3, 0), 2)])
def test_gather_nd(data_shape, index_shape, batch_dims):
    check("GatherND", [data(data_shape), nd_indices(data_shape, index_shape, batch_dims)], {"batch_dims": batch_dims})


@pytest.mark.parametrize("dtype", MOVE_TYPES)
def test_gather_nd_types(dtype):
    check("GatherND", [data((3, 4, 2), dtype), nd_indices((3, 4, 2), (2, 3, 2))])


def test_gather_nd_bfloat16():
    check_bfloat16("GatherND", [data((3, 4, 2)), nd_indices((3, 4, 2), (2, 3, 2))])


# --- ScatterND, ScatterElements -----------------------------------------------------------


@pytest.mark.parametrize("index,update_shape", [
    ([[1], [3]], (2, 5, 3)), ([[0, 1], [2, 4], [-1, 0]], (3, 3)), ([[0, 1, 2], [3, 4, 0], [-2, -1, -3]], (3,))])
def test_scatter_nd(index, update_shape):
    check("ScatterND", [data((4, 5, 3)), np.array(index, I64), data(update_shape, seed=4)])


@pytest.mark.parametrize("dtype", MOVE_TYPES)
def test_scatter_nd_types(dtype):
    check("ScatterND", [data((4, 5), dtype), np.array([[2], [0]], I64), data((2, 5), dtype, seed=4)])


# Reductions apply duplicates (row 1 three times, -3 is 1 too) one after another in ORT and in an open
# order on the GPU: the small integer values keep every order's result exact.
@pytest.mark.parametrize("dtype", NUMBER_TYPES)
@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
def test_scatter_nd_reductions(reduction, dtype):
    x, updates = data((4, 5, 3), dtype, -4, 5), data((4, 5, 3), dtype, -4, 5, seed=4)
    # stock ORT CPU has no float16 scatter reductions: float32 on the same (exact) values
    check("ScatterND", [x, np.array([[1], [3], [1], [-3]], I64), updates], {"reduction": reduction},
          ref_in_float32=dtype == F16)


def distinct_indices(shape, axis, dim, seed=5):
    """Indices along `axis` that never repeat within a lane (ScatterElements without a reduction
    leaves the winner of a duplicate open)."""
    rng = np.random.default_rng(seed)
    moved = list(np.moveaxis(np.empty(shape), axis, -1).shape)
    lanes = [rng.permutation(dim)[:moved[-1]] - rng.integers(0, 2) * dim for _ in range(int(np.prod(moved[:-1])))]
    return np.moveaxis(np.array(lanes, I64).reshape(moved), -1, axis)


@pytest.mark.parametrize("index_type", [I64, I32])
@pytest.mark.parametrize("axis,index_shape", [(0, (2, 4, 5)), (1, (3, 2, 4)), (-1, (2, 3, 5))])
def test_scatter_elements(axis, index_shape, index_type):
    x = data((3, 4, 5))
    index = distinct_indices(index_shape, axis, x.shape[axis]).astype(index_type)
    check("ScatterElements", [x, index, data(index_shape, seed=6)], {"axis": axis})


@pytest.mark.parametrize("dtype", MOVE_TYPES)
def test_scatter_elements_types(dtype):
    index = distinct_indices((3, 4), 1, 6)
    check("ScatterElements", [data((3, 6), dtype), index, data((3, 4), dtype, seed=6)], {"axis": 1})


@pytest.mark.parametrize("dtype", NUMBER_TYPES)
@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
def test_scatter_elements_reductions(reduction, dtype):
    x, updates = data((3, 4), dtype, -4, 5), data((3, 6), dtype, -4, 5, seed=6)
    index = indices((3, 6), 4, seed=7)  # six updates into four columns: duplicates
    check("ScatterElements", [x, index, updates], {"axis": 1, "reduction": reduction}, ref_in_float32=dtype == F16)


def test_scatter_opset_10():
    check("Scatter", [data((3, 4)), distinct_indices((3, 2), 1, 4), data((3, 2), seed=6)], {"axis": 1}, opset=10)


def test_scatter_bfloat16():
    check_bfloat16("ScatterND", [data((4, 5)), np.array([[2], [0]], I64), data((2, 5), seed=4)])
    check_bfloat16("ScatterElements", [data((3, 6)), distinct_indices((3, 4), 1, 6), data((3, 4), seed=6)],
                   {"axis": 1})


# --- Trilu --------------------------------------------------------------------------------


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, 0, 1, -1, 4, -6])
@pytest.mark.parametrize("shape", [(4, 5), (2, 3, 6, 4)])
def test_trilu(shape, k, upper):
    inputs = [data(shape)] + ([] if k is None else [Const(np.array(k, I64))])
    check("Trilu", inputs, {"upper": upper})


@pytest.mark.parametrize("dtype", [F16, F64, I64, np.bool_])  # the types stock ORT's Trilu takes
def test_trilu_types(dtype):
    check("Trilu", [data((3, 5), dtype), Const(np.array(1, I64))], {"upper": 0})


def test_trilu_bfloat16():
    check_bfloat16("Trilu", [data((5, 4))])


# --- CumSum -------------------------------------------------------------------------------


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumsum(axis, exclusive, reverse):
    axis_type = I32 if axis == 1 else I64  # the axis input takes either
    check("CumSum", [data((3, 4, 5)), Const(np.array(axis, axis_type))], {"exclusive": exclusive, "reverse": reverse})


@pytest.mark.parametrize("dtype", NUMBER_TYPES)
def test_cumsum_types(dtype):
    check("CumSum", [data((3, 40), dtype), Const(np.array(1, I64))], {"exclusive": 1})


@pytest.mark.parametrize("dtype", [F32, F16])
def test_cumsum_fractions(dtype):
    # the same sequential float32 additions as ORT's loop (which runs float16 in float32, rounding each
    # output once); the tolerance only covers a different association of those additions
    x = np.random.default_rng(8).standard_normal((4, 300)).astype(dtype)
    tol = {"rtol": 1e-6, "atol": 1e-5} if dtype == F32 else {"rtol": 1e-3, "atol": 1e-3}
    check("CumSum", [x, Const(np.array(-1, I64))], {"reverse": 1}, tol=tol)


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 1)])
@pytest.mark.parametrize("dtype", [F32, I32, I64])
def test_cumprod(exclusive, reverse, dtype):
    # float32: factors in [0.5, 1.5], products in float32 as ORT's loop (the tolerance covers another
    # rounding of the same products); integers: exact
    rng = np.random.default_rng(9)
    x = (rng.uniform(0.5, 1.5, (3, 4)) if dtype == F32 else rng.integers(-3, 4, (3, 4))).astype(dtype)
    skip_unless_stock_has("CumProd", node_model("CumProd", [x, Const(np.array(1, I64))], None, 26)[0])
    check("CumProd", [x, Const(np.array(-1, I64))], {"exclusive": exclusive, "reverse": reverse}, opset=26,
          tol={"rtol": 1e-6, "atol": 1e-6} if dtype == F32 else None)


def test_cumsum_bfloat16():
    # sums of small integers are exact in float32 and rounded once to bfloat16, as the reference's are
    check_bfloat16("CumSum", [data((3, 40)), Const(np.array(1, I64))])


# --- TopK, ArgMax, ArgMin -----------------------------------------------------------------


@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("shape,axis,k", [((3, 50), -1, 5), ((4, 7, 3), 1, 7), ((6, 5), 0, 2), ((3, 9), 1, 0),
                                          ((2, 5000), 1, 64)])
def test_topk(shape, axis, k, largest):
    # values 0..9: many ties, which ORT breaks by the lower index
    check("TopK", [data(shape, low=0, high=10), Const(np.array([k], I64))], {"axis": axis, "largest": largest},
          opset=11, outputs=[F32, I64])


def test_topk_distinct_values_and_older_opsets():
    x = np.random.default_rng(9).standard_normal((3, 2000)).astype(F32)
    check("TopK", [x, Const(np.array([50], I64))], {"axis": 1, "sorted": 1}, opset=11, outputs=[F32, I64])
    check("TopK", [x, Const(np.array([3], I64))], opset=10, outputs=[F32, I64])
    check("TopK", [x], {"k": 4, "axis": 1}, opset=9, outputs=[F32, I64])


@pytest.mark.parametrize("dtype", NUMBER_TYPES)
def test_topk_types(dtype):
    check("TopK", [data((4, 30), dtype, 0, 10), Const(np.array([6], I64))], {"largest": 0}, opset=11,
          outputs=[dtype, I64])


def test_topk_bfloat16():
    check_bfloat16("TopK", [data((4, 30), low=0, high=10), Const(np.array([6], I64))], opset=24,  # bfloat16 from 24
                   outputs=[F32, I64])


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("select_last_index", [0, 1])
@pytest.mark.parametrize("keepdims", [1, 0])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_argmax_argmin(op, axis, keepdims, select_last_index):
    attrs = {"axis": axis, "keepdims": keepdims, "select_last_index": select_last_index}
    check(op, [data((3, 4, 5), low=0, high=4)], attrs, opset=13, outputs=[I64])  # ties in every lane


@pytest.mark.parametrize("dtype", NUMBER_TYPES)
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_argmax_argmin_types(op, dtype):
    check(op, [data((3, 700), dtype, 0, 100)], {"axis": 1}, outputs=[I64])
    check(op, [data((3, 7), dtype, 0, 4)], {"keepdims": 0}, opset=11, outputs=[I64])


@pytest.mark.parametrize("select_last_index", [0, 1])
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype,shape,axis", [(F16, (2, 151936), -1), (F32, (1, 1, 5000), 2), (I64, (3, 4097, 2), 1),
                                               (F16, (300, 4096), -1), (F32, (260, 1000), 1), (I64, (2, 128, 70), 2),
                                               (F16, (300, 4097), -1)])
def test_argmax_argmin_over_a_long_axis(op, dtype, shape, axis, select_last_index):
    """A long axis is split over blocks (indexing.SELECT_CHUNK) and combined: still the first (or last) index
    of the extreme, with ties across chunks (values 0..3), and the one-block path's answers. Many contiguous
    rows of whole 16-byte groups (indexing.ROWS16_LANES and more) take a block a row; 4097 halves do not."""
    attrs = {"axis": axis, "select_last_index": select_last_index}
    check(op, [data(shape, dtype, 0, 4)], attrs, opset=13, outputs=[I64])
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(dtype) if dtype != I64 else data(shape, dtype, -10**6, 10**6)
    check(op, [x], attrs, opset=13, outputs=[I64])


def test_argmax_bfloat16():
    check_bfloat16("ArgMax", [data((5, 9), low=0, high=4)], {"axis": 1, "select_last_index": 1}, opset=13,
                   outputs=[I64])


# --- Dropout, Constant, Range -------------------------------------------------------------


# With its mask output used ORT keeps the node (it removes a Dropout whose mask nobody reads).
@pytest.mark.parametrize("opset,extra,mask", [(7, [], F32), (10, [], np.bool_),
                                              (12, [Const(np.array(0.3, F32)), Const(np.array(False))], np.bool_),
                                              (13, [], np.bool_)])
@pytest.mark.parametrize("dtype", [F32, F16])
def test_dropout_inference(opset, extra, mask, dtype):
    mask = dtype if mask is F32 else mask  # before opset 10 the mask has the data's type
    check("Dropout", [data((3, 4), dtype), *extra], opset=opset, outputs=[dtype, mask])


def constant_model(**attrs):
    """y = x + Constant(...): ORT turns a Constant node into an initializer as it loads the model, so
    the Add is what runs on our EP here; the Constant kernel serves graphs handed over unconverted."""
    value = helper.make_node("Constant", [], ["c"], **attrs)
    add = helper.make_node("Add", ["x", "c"], ["y"])
    graph = helper.make_graph([value, add], "constant", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=9)


@pytest.mark.parametrize("attrs", [{"value": numpy_helper.from_array(data((2, 3), seed=9), "v")},
                                   {"value_float": 2.5}, {"value_floats": [1.0, -2.0, 3.5]}])
def test_constant(attrs):
    model, feeds = constant_model(**attrs), {"x": data((2, 3))}
    np.testing.assert_array_equal(run_on_cuda(model, feeds)[0], stock_session(model).run(None, feeds)[0])


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("start,limit,delta", [(0, 10, 1), (1, 2, 0.1), (5, -3, -0.7), (3, 3, 1), (0, -1, 1)])
def test_range(start, limit, delta, dtype):
    # fed, not constant: ORT would fold a Range of constants before partitioning
    check("Range", [np.array(start, dtype), np.array(limit, dtype), np.array(delta, dtype)], opset=17)
