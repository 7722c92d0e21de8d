"""Conv, ConvTranspose, pooling, BatchNormalization, InstanceNormalization, LRN, Resize and Pad on
the CUDA EP (kernels/cuda/spatial.py), against stock ORT's CPU EP; the GPU tests skip without one.

The reference is always stock ORT's float32 op on the inputs as our EP sees them (rounded to
float16/bfloat16 first): stock ORT CPU lacks bfloat16 kernels for these ops, and its float16 Conv
may run natively on some CPUs; a float32 reference states what the answer should be either way.
Window geometries and Resize modes reuse the CPU kernels' parity cases (tests/kernels/test_spatial.py).
"""
import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, numpy_helper

from kernels.test_spatial import (CONV_CASES, CONV_T_CASES, COORD_MODES, NEAREST_MODES, POOL_CASES, SCALES,
                                  causal_conv_inputs, nan_pool_case)
from parity import Const, assert_close, node_model, stock_session
from test_cuda_ep import DEVICES, PROBLEM, in_bfloat16, run_on_cuda

needs_gpu = pytest.mark.skipif(not DEVICES, reason=f"no NVIDIA GPU for the CUDA EP ({PROBLEM or 'none found'})")
F32, F16, I64 = np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.int64)
BF16 = np.dtype(ml_dtypes.bfloat16)
LOW = [F16, BF16]
# spacing of the numbers in [1, 2): a float16/bfloat16 result rounded once is within half of it (relative)
EPS = {F16: 2.0 ** -10, BF16: 2.0 ** -7}
CONV_TOL = {"rtol": 1e-4, "atol": 1e-5}    # float32 dot products summed in another order than MLAS
SUM_TOL = {"rtol": 1e-5, "atol": 1e-6}     # short float32 sums (averages, blends) in another order
rng = np.random.default_rng(7)


def data(*shape):
    return rng.standard_normal(shape).astype(F32)


def ints(*values):
    return np.array(values, I64)


def _rounded(a, dtype):
    return a.astype(dtype).astype(F32)


def check(op, inputs, attrs=None, *, dtype=F32, opset=17, const=(), keep=(), tol=None, exact=False):
    """op on our CUDA EP with its float32 inputs (all but positions `keep`: Resize's roi/scales) as
    `dtype`, against stock ORT's float32 op on the same rounded inputs. exact: a selection or copy
    of input values, equal after rounding the reference to `dtype`. Otherwise float32 results
    compare within `tol`, float16/bfloat16 ones within two units of their precision (relative, and
    at the output's largest magnitude for sums that cancel): one rounding of the result plus, for
    the GEMM-based ops, one of an intermediate (the GEMM's output before Conv's bias, ConvTranspose's
    columns before col2im sums them)."""
    dtype = np.dtype(dtype)
    floats = {i for i, a in enumerate(inputs) if a is not None and a.dtype == F32 and i not in keep}
    if dtype == BF16:  # bfloat16 entered the spec's type lists of these ops by opset 22
        model, feeds = node_model(op, inputs, attrs, max(opset, 22), const=const)
        model = in_bfloat16(model, {f"in{i}" for i in floats})
    else:
        model, feeds = node_model(op, [a.astype(dtype) if i in floats else a for i, a in enumerate(inputs)], attrs,
                                  opset, const=const)
    (ours,) = run_on_cuda(model, feeds)
    model, feeds = node_model(op, [_rounded(a, dtype) if i in floats else a for i, a in enumerate(inputs)], attrs,
                              opset, const=const)
    (ref,) = stock_session(model).run(None, feeds)
    if ref.dtype != F32:  # Pad of integers
        np.testing.assert_array_equal(ours, ref)
    elif exact:
        np.testing.assert_array_equal(np.asarray(ours).astype(F32), _rounded(ref, dtype))
    elif dtype == F32:
        assert_close(ours, ref, **(tol or CONV_TOL))
    else:
        scale = float(np.abs(ref).max()) if ref.size else 0.0
        assert_close(np.asarray(ours).astype(F32), ref, rtol=2 * EPS[dtype], atol=2 * EPS[dtype] * scale)


# --- Conv / ConvTranspose ---------------------------------------------------------------------


@needs_gpu
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("xs,ws,attrs", CONV_CASES)
def test_conv(xs, ws, attrs, bias):
    check("Conv", [data(*xs), data(*ws)] + ([data(ws[0])] if bias else []), attrs, const=[1, 2])


@needs_gpu
@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("xs,ws,attrs", CONV_CASES)
def test_conv_low_precision(xs, ws, attrs, dtype):
    check("Conv", [data(*xs), data(*ws), data(ws[0])], attrs, dtype=dtype, const=[1, 2])


@needs_gpu
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("xs,ws,attrs", CONV_T_CASES)
def test_conv_transpose(xs, ws, attrs, bias):
    b = [data(ws[1] * attrs.get("group", 1))] if bias else []
    check("ConvTranspose", [data(*xs), data(*ws)] + b, attrs, const=[1, 2])


@needs_gpu
@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("xs,ws,attrs", CONV_T_CASES)
def test_conv_transpose_low_precision(xs, ws, attrs, dtype):
    b = data(ws[1] * attrs.get("group", 1))
    check("ConvTranspose", [data(*xs), data(*ws), b], attrs, dtype=dtype, const=[1, 2])


@needs_gpu
@pytest.mark.parametrize("group", [1, 2])
def test_conv_and_conv_transpose_in_chunks_of_images(group, monkeypatch):
    """Column buffers past SCRATCH_BYTES are filled a few images at a time (here: one)."""
    from onnxruntime_ep_seamless.kernels.cuda import spatial
    monkeypatch.setattr(spatial, "SCRATCH_BYTES", 1)
    check("Conv", [data(3, 4, 6, 5), data(6, 4 // group, 3, 3), data(6)], {"group": group, "pads": [1, 0, 1, 2]},
          const=[1, 2])
    check("ConvTranspose", [data(3, 4, 4, 3), data(4, 3, 3, 2), data(3 * group)],
          {"group": group, "strides": [2, 1]}, const=[1, 2])


@needs_gpu
def test_conv_resnet_stem_and_fed_weights():
    # a realistic size (several thousand GEMM columns), weights and bias fed as inputs rather than constants
    check("Conv", [data(2, 3, 64, 64), data(16, 3, 7, 7), data(16)], {"pads": [3, 3, 3, 3], "strides": [2, 2]},
          tol={"rtol": 1e-4, "atol": 1e-4})


# --- pooling ----------------------------------------------------------------------------------


@needs_gpu
@pytest.mark.parametrize("dtype", [F32] + LOW)
@pytest.mark.parametrize("xs,attrs", POOL_CASES)
def test_max_pool(xs, attrs, dtype):
    check("MaxPool", [data(*xs)], attrs, dtype=dtype, opset=12, exact=True)


@needs_gpu
@pytest.mark.parametrize("seed", range(48))
def test_max_pool_with_nan_and_infinity_as_stock(seed):
    """NaN and -inf taken or dropped as stock's code path for the shape does (stock_max_pool_path): the random
    cases of the CPU kernel's test, those with one output of a type the CUDA EP takes."""
    op, x, attrs, outputs = nan_pool_case(seed)
    if len(outputs) > 1 or x.dtype == np.float64:
        pytest.skip("Indices and float64 stay with other EPs on CUDA")
    check(op, [x.astype(F32)], attrs, dtype=x.dtype, opset=12, exact=True)


@needs_gpu
@pytest.mark.parametrize("opset", [1, 8, 10, 11])
def test_max_pool_old_opsets(opset):
    check("MaxPool", [data(1, 2, 6, 6)], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, opset=opset, exact=True)


@needs_gpu
@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("xs,attrs", POOL_CASES)
def test_average_pool(xs, attrs, count_include_pad):
    check("AveragePool", [data(*xs)], {**attrs, "count_include_pad": count_include_pad}, opset=19, tol=SUM_TOL)


@needs_gpu
@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool_low_precision(count_include_pad, dtype):
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}
    check("AveragePool", [data(2, 3, 6, 7)], {**attrs, "count_include_pad": count_include_pad}, dtype=dtype,
          opset=19)


@needs_gpu
@pytest.mark.parametrize("opset", [7, 10, 11])
def test_average_pool_old_opsets(opset):
    check("AveragePool", [data(1, 2, 5, 5)], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
          opset=opset, tol=SUM_TOL)


@needs_gpu
@pytest.mark.parametrize("dtype", [F32] + LOW)
@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("xs", [(2, 3, 4, 5), (1, 2, 7), (1, 2, 2, 3, 2), (2, 3, 33, 35)])
def test_global_pool(op, xs, dtype):
    # (2, 3, 33, 35): more elements per plane than the block has threads
    check(op, [data(*xs)], dtype=dtype, exact=op == "GlobalMaxPool", tol=SUM_TOL)


# --- normalization ----------------------------------------------------------------------------


def _bn_inputs(xs):
    c = xs[1]
    return [data(*xs), data(c), data(c), data(c), (rng.random(c) + 0.5).astype(F32)]


@needs_gpu
@pytest.mark.parametrize("opset", [7, 9, 14, 15])
@pytest.mark.parametrize("xs", [(2, 3, 4, 5), (2, 3), (1, 3, 5)])
def test_batch_norm(opset, xs):
    check("BatchNormalization", _bn_inputs(xs), {"epsilon": 1e-3}, opset=opset, const=[1, 2, 3, 4], tol=SUM_TOL)


@needs_gpu
def test_batch_norm_training_mode_0_and_fed_statistics():
    check("BatchNormalization", _bn_inputs((2, 3, 4)), {"training_mode": 0, "momentum": 0.8}, opset=15, tol=SUM_TOL)


@needs_gpu
def test_batch_norm_spatial_0():
    # opset 7-8 spatial=0: statistics per (C, *spatial) element
    c = (3, 2)
    ins = [data(2, 3, 2), data(*c), data(*c), data(*c), (rng.random(c) + 0.5).astype(F32)]
    check("BatchNormalization", ins, {"spatial": 0}, opset=7, tol=SUM_TOL)


@needs_gpu
@pytest.mark.parametrize("dtype", LOW)
def test_batch_norm_low_precision(dtype):
    check("BatchNormalization", _bn_inputs((2, 3, 4, 5)), opset=15, dtype=dtype, const=[1, 2, 3, 4])


@needs_gpu
@pytest.mark.parametrize("dtype", [F32] + LOW)
@pytest.mark.parametrize("xs", [(2, 3, 4, 5), (1, 2, 50, 40), (2, 3, 7)])
def test_instance_norm(xs, dtype):
    # float32: mean and variance summed in another order than ORT's: 1e-4
    check("InstanceNormalization", [data(*xs), data(xs[1]), data(xs[1])], {"epsilon": 1e-3}, dtype=dtype,
          opset=6, tol={"rtol": 1e-4, "atol": 1e-5})


@needs_gpu
@pytest.mark.parametrize("dtype", [F32] + LOW)
@pytest.mark.parametrize("size", [1, 3, 5])  # ORT rejects even sizes
def test_lrn(size, dtype):
    # powf against ORT's pow and its running window sum: a few float32 ulps
    check("LRN", [data(2, 7, 3, 4)], {"size": size, "alpha": 0.01, "beta": 0.6, "bias": 2.0}, dtype=dtype, opset=13,
          tol={"rtol": 1e-5, "atol": 1e-5})


# --- Resize -----------------------------------------------------------------------------------


def _resize(x, scales=None, sizes=None, attrs=None, opset=19, **kw):
    none = np.zeros(0, F32)
    inputs = [x, none, none if scales is None else np.array(scales, F32)]
    if sizes is not None:
        inputs.append(ints(*sizes))
    check("Resize", inputs, attrs, opset=opset, const=[1, 2, 3], keep=[1, 2], **kw)


@needs_gpu
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample(mode):  # Resize-10's sampling with the scales as an attribute (7) or an input (9)
    check("Upsample", [data(1, 2, 3, 4)], {"mode": mode, "scales": [1.0, 1.0, 2.0, 1.5]}, opset=7,
          exact=mode == "nearest")
    check("Upsample", [data(1, 2, 3, 4), np.array([1, 1, 3, 2], F32)], {"mode": mode}, opset=9, const=[1], keep=[1],
          exact=mode == "nearest")


@needs_gpu
@pytest.mark.parametrize("nearest_mode", NEAREST_MODES)
@pytest.mark.parametrize("coord", COORD_MODES)
def test_resize_nearest(coord, nearest_mode):
    # 1.7 and 0.6: upsampling and downsampling, positions landing on halves for some modes
    _resize(data(1, 2, 4, 5), [1, 1, 1.7, 0.6], attrs={"mode": "nearest", "coordinate_transformation_mode": coord,
                                                       "nearest_mode": nearest_mode}, exact=True)


@needs_gpu
@pytest.mark.parametrize("scales", SCALES)
def test_resize_nearest_scales(scales):
    _resize(data(1, 2, 4, 5), scales, exact=True)


@needs_gpu
@pytest.mark.parametrize("opset", [11, 13])
def test_resize_tf_half_pixel_for_nn(opset):
    _resize(data(1, 2, 4, 5), [1, 1, 1.7, 0.6], attrs={"coordinate_transformation_mode": "tf_half_pixel_for_nn"},
            opset=opset, exact=True)


@needs_gpu
@pytest.mark.parametrize("scales", SCALES)
@pytest.mark.parametrize("coord", COORD_MODES)
def test_resize_linear(coord, scales):
    _resize(data(1, 2, 4, 5), scales, attrs={"mode": "linear", "coordinate_transformation_mode": coord},
            tol=SUM_TOL)


@needs_gpu
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("sizes", [[1, 2, 8, 3], [1, 2, 1, 9]])
def test_resize_sizes(mode, sizes):
    _resize(data(1, 2, 4, 5), sizes=sizes, attrs={"mode": mode}, exact=mode == "nearest", tol=SUM_TOL)


@needs_gpu
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_11_sizes_and_trivial_axes(mode):
    # opset 11: scales is a required input, given empty next to sizes; opset 18: axes naming every axis
    _resize(data(1, 1, 3, 3), sizes=[1, 1, 5, 2], attrs={"mode": mode}, opset=11, exact=mode == "nearest",
            tol=SUM_TOL)
    _resize(data(1, 2, 3, 4), [1, 1, 2, 1.5], attrs={"mode": mode, "axes": [0, 1, 2, 3]}, opset=18,
            exact=mode == "nearest", tol=SUM_TOL)


@needs_gpu
@pytest.mark.parametrize("xs,scales", [((4, 5), [2.0, 0.5]), ((1, 2, 3, 4, 5), [1, 1, 2, 1.5, 0.5])])
def test_resize_linear_2d_3d(xs, scales):
    _resize(data(*xs), scales, attrs={"mode": "linear"}, tol=SUM_TOL)


@needs_gpu
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [[1, 1, 2.0, 3.0], [1, 1, 0.5, 0.6], [1, 1, 1.5, 2.5]])
def test_resize_10(mode, scales):
    check("Resize", [data(1, 2, 4, 5), np.array(scales, F32)], {"mode": mode}, opset=10, const=[1], keep=[1],
          exact=mode == "nearest", tol=SUM_TOL)


@needs_gpu
@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_low_precision(mode, dtype):
    _resize(data(2, 3, 5, 6), [1, 1, 1.6, 0.7], attrs={"mode": mode}, dtype=dtype, exact=mode == "nearest")


# --- Pad --------------------------------------------------------------------------------------

PAD_MODES = ["constant", "reflect", "edge", "wrap"]


@needs_gpu
@pytest.mark.parametrize("mode", PAD_MODES)
@pytest.mark.parametrize("pads", [[1, 2, 2, 0], [0, 0, 0, 0], [-1, 1, 1, -2], [3, 4, 0, 3]])
def test_pad(mode, pads):
    # [3, 4, 0, 3]: as wide as reflect allows (the axis length - 1)
    cv = [np.array(3.5, F32)] if mode == "constant" else []
    check("Pad", [data(4, 5), ints(*pads)] + cv, {"mode": mode}, opset=19, exact=True)


@needs_gpu
@pytest.mark.parametrize("dtype", [F16, BF16, I64, np.dtype(np.uint8)])
@pytest.mark.parametrize("mode", PAD_MODES)
def test_pad_element_types(mode, dtype):
    x = (data(3, 4, 5) * 20).astype(dtype) if dtype.kind in "iu" else data(3, 4, 5)
    cv = [np.array(7.5, F32).astype(x.dtype)] if mode == "constant" else []
    check("Pad", [x, ints(1, 0, 2, 2, 1, 0)] + cv, {"mode": mode}, dtype=dtype, opset=19, exact=True)


@needs_gpu
@pytest.mark.parametrize("mode", PAD_MODES)
@pytest.mark.parametrize("axes", [[1], [-1, 0]])
def test_pad_axes(mode, axes):
    pads = [1, 2] if len(axes) == 1 else [2, 1, 0, 2]
    check("Pad", [data(3, 4, 5), ints(*pads), None, ints(*axes)], {"mode": mode}, opset=19, exact=True)


@needs_gpu
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_2(mode):
    check("Pad", [data(3, 4)], {"pads": [1, 2, 2, 0], "mode": mode, "value": 1.5}, opset=2, exact=True)


@needs_gpu
@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
def test_pad_crop_then_pad(mode):
    # negative pads crop first, then the other side pads from the cropped tensor (as ORT does)
    check("Pad", [np.arange(4, dtype=F32), ints(-1, 2)], {"mode": mode}, opset=19, exact=True)


@needs_gpu
def test_pad_wrap_past_the_extent():
    # numpy is the reference: stock ORT 1.30 (the GPU machine's) reads past the tensor here; 1.32 is right
    x = data(2, 3)
    model, feeds = node_model("Pad", [x, Const(ints(1, 4, 0, 5))], {"mode": "wrap"}, opset=21)
    np.testing.assert_array_equal(run_on_cuda(model, feeds)[0], np.pad(x, ((1, 0), (4, 5)), mode="wrap"))


@needs_gpu
def test_pad_constant_inputs():
    check("Pad", [data(2, 3, 4, 4), ints(0, 0, 1, 1, 0, 0, 1, 1), np.array(-2.0, F32)], const=[1, 2], opset=18,
          exact=True)


# --- declined nodes (no GPU needed) -----------------------------------------------------------


def _lookup(op, attrs=None, shapes=((1, 2, 5, 5),), types=(TensorProto.FLOAT,), outputs=1, opset=19):
    from onnxruntime_ep_seamless.graph.ir import Graph, Node, Value
    from onnxruntime_ep_seamless.kernels.registry import lookup
    names = [f"x{i}" for i in range(len(shapes))]
    values = {n: Value(n, t, s) for n, s, t in zip(names, shapes, types)}
    outs = [f"y{i}" for i in range(outputs)]
    values.update({o: Value(o, TensorProto.FLOAT, None) for o in outs})
    node = Node("n", op, "", opset, names, outs, attrs or {})
    kdef, reason = lookup(node, Graph([node], values, names, outs), "cuda")
    return reason if kdef is None or kdef.device != "cuda" else None


def test_declines_what_the_cuda_kernels_do_not_cover():
    assert _lookup("MaxPool", {"kernel_shape": [2, 2]}) is None
    assert "Indices" in _lookup("MaxPool", {"kernel_shape": [2, 2]}, outputs=2)
    assert "spatial" in _lookup("Conv", shapes=((1, 2, 3, 4, 5, 6), (2, 2, 1, 1, 1, 1)), types=(1, 1))
    bn = ((2, 3, 4), (3,), (3,), (3,), (3,))
    assert _lookup("BatchNormalization", shapes=bn, types=(1,) * 5) is None
    assert "training_mode" in _lookup("BatchNormalization", {"training_mode": 1}, shapes=bn, types=(1,) * 5)
    assert _lookup("BatchNormalization", shapes=bn, types=(1,) * 5, outputs=3) is not None
    assert _lookup("BatchNormalization", shapes=bn, types=(10, 1, 1, 1, 1)) is not None  # mixed types
    resize = ((1, 2, 4, 4), (0,), (4,))
    assert _lookup("Resize", {"mode": "linear"}, shapes=resize, types=(1, 1, 1)) is None
    for attrs in ({"mode": "cubic"}, {"coordinate_transformation_mode": "tf_crop_and_resize"}, {"antialias": 1},
                  {"exclude_outside": 1}, {"keep_aspect_ratio_policy": "not_larger"}, {"axes": [2, 3]}):
        assert _lookup("Resize", attrs, shapes=resize, types=(1, 1, 1)) is not None, attrs
    assert _lookup("Pad", {"mode": "constant"}, shapes=((2, 3), (4,)), types=(TensorProto.INT4, 7)) is not None


# --- Col2Im ---------------------------------------------------------------------------------


@needs_gpu
@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("image,block,attrs", [([5, 6], [2, 3], {}),
                                               ([5, 6], [2, 3], {"pads": [1, 0, 1, 2], "strides": [2, 1],
                                                                 "dilations": [1, 2]}),
                                               ([4, 3, 5], [2, 1, 2], {"strides": [1, 2, 1]})])
def test_col2im(image, block, attrs, dtype):
    # up to 6 overlapping columns summed a block offset at a time (float16: each add rounded, as the CPU EP's);
    # not 3-D with dilations, where stock ORT departs from the spec's reference (docs/user-guide.md)
    nd = len(image)
    pads, strides = attrs.get("pads", [0] * 2 * nd), attrs.get("strides", [1] * nd)
    dilations = attrs.get("dilations", [1] * nd)
    blocks = [(i + pads[k] + pads[k + nd] - d * (b - 1) - 1) // s + 1
              for k, (i, b, d, s) in enumerate(zip(image, block, dilations, strides))]
    x = data(2, 3 * int(np.prod(block)), int(np.prod(blocks)))
    check("Col2Im", [x, ints(*image), ints(*block)], attrs, dtype=dtype, opset=18, const=(1, 2), tol=SUM_TOL)


# --- GridSample -------------------------------------------------------------------------------


@needs_gpu
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_2d(mode, padding_mode, align_corners):
    # some grid points outside the image; float32 taps summed in the CPU kernel's order (stock: its own)
    grid = rng.uniform(-1.4, 1.4, (2, 4, 7, 2)).astype(F32)
    check("GridSample", [data(2, 3, 5, 6), grid], {"mode": mode, "padding_mode": padding_mode,
                                                    "align_corners": align_corners}, opset=20, tol=CONV_TOL)


@needs_gpu
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("dtype", [F32, F16])
def test_grid_sample_3d(mode, dtype):
    grid = rng.uniform(-1.2, 1.2, (1, 2, 3, 4, 3)).astype(F32)
    check("GridSample", [data(1, 2, 3, 4, 5), grid], {"mode": mode, "padding_mode": "border"}, dtype=dtype,
          opset=20, tol=SUM_TOL)


@needs_gpu
def test_grid_sample_opset16_names():
    grid = rng.uniform(-1, 1, (1, 3, 3, 2)).astype(F32)
    check("GridSample", [data(1, 1, 4, 4), grid], {"mode": "bicubic"}, opset=16, tol=CONV_TOL)
    check("GridSample", [data(1, 1, 4, 4), grid], {}, opset=16, tol=SUM_TOL)  # bilinear by default


# --- DeformConv -------------------------------------------------------------------------------


@needs_gpu
@pytest.mark.parametrize("case", ["groups_mask_bias", "strided"])
def test_deform_conv(case):
    from test_cuda_ops import skip_unless_stock_has
    og, attrs = (2, {"group": 2, "offset_group": 2, "pads": [1, 1, 1, 1]}) if case == "groups_mask_bias" else \
        (1, {"strides": [2, 1]})
    w = data(4, 2 if case == "groups_mask_bias" else 4, 3, 3)
    out = (6, 6) if case == "groups_mask_bias" else (2, 4)
    inputs = [data(1, 4, 6, 6), w, data(1, og * 2 * 9, *out)]
    if case == "groups_mask_bias":
        inputs += [data(4), rng.uniform(0, 1, (1, og * 9, *out)).astype(F32)]
    skip_unless_stock_has("DeformConv", node_model("DeformConv", inputs, attrs, 19)[0])
    check("DeformConv", inputs, attrs, opset=19, tol=CONV_TOL)


# --- CausalConvWithState (LFM2's short convolutions) -------------------------------------------------------------


@pytest.mark.parametrize("b,c,n,k,attrs,past,bias", [
    (1, 8, 5, 3, {}, True, True), (2, 8, 1, 4, {}, True, True), (1, 4, 2, 4, {}, False, True),
    (1, 8, 6, 3, {"dilation": 2}, True, True), (1, 8, 5, 3, {"activation": "silu"}, True, False),
    (3, 16, 0, 3, {}, True, True)])
@needs_gpu
@pytest.mark.parametrize("dtype", [F32, np.float16])
def test_causal_conv_with_state(b, c, n, k, attrs, past, bias, dtype):
    from onnxruntime_ep_seamless.graph.onnx_import import import_model
    from onnxruntime_ep_seamless.kernels.registry import lookup
    from test_cuda_ops import check as ops_check
    inputs = causal_conv_inputs(b, c, n, k, attrs.get("dilation", 1), False, past, bias, dtype)
    model, _ = node_model("CausalConvWithState", inputs, attrs, 21, [dtype, dtype], domain="com.microsoft")
    graph = import_model(model)
    assert lookup(graph.nodes[0], graph, "cuda", host_rule=False)[0].device == "cuda"  # its CUDA kernel, not the host
    tol = {"rtol": 1e-3, "atol": 1e-3} if dtype == np.float16 else {"rtol": 1e-5, "atol": 1e-6}
    ops_check("CausalConvWithState", inputs, attrs, 21, [dtype, dtype], domain="com.microsoft", **tol)


def token_major_conv_model(dtype, b, c, n, k, activation, domain):
    """Transpose -> CausalConvWithState -> Transpose, as Qwen3.5's export writes its short convolution (x and y
    (b, n, c), the state (b, c, k - 1)): plan/fusion.py token_major_causal_conv's pattern."""
    from onnx import helper
    kind = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    x, weight, bias, _ = causal_conv_inputs(b, c, n, k, dtype=dtype)
    conv_attrs = {"activation": activation} if activation != "none" else {}
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
             helper.make_node("CausalConvWithState", ["xt", "w", "bias", "past"], ["yt", "present"], domain=domain,
                              **conv_attrs),
             helper.make_node("Transpose", ["yt"], ["y"], perm=[0, 2, 1])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", kind, [b, "n", c]),
                     helper.make_tensor_value_info("past", kind, [b, c, k - 1])],
        [helper.make_tensor_value_info("y", kind, [b, "n", c]),
         helper.make_tensor_value_info("present", kind, [b, c, k - 1])],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "bias")])
    opsets = [helper.make_opsetid("", 27 if not domain else 21)] + \
        ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(graph, opset_imports=opsets, ir_version=11), x.transpose(0, 2, 1).copy()


def gated_conv_model(dtype, b, c, n, k, activation, domain, shared=False):
    """LFM2's gated short convolution: x (b, n, 3c) -> Transpose -> Split(axis 1, [c, c, c]) -> Mul(b0, b2) ->
    CausalConvWithState -> Mul(b1, y) -> Transpose -> y (b, n, c); the state (b, c, k - 1). shared: the Split's
    first block also a graph output (the blocks are then not the convolution's alone)."""
    from onnx import helper
    kind = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    _, weight, bias, _ = causal_conv_inputs(b, c, n, k, dtype=dtype)
    conv_attrs = {"activation": activation} if activation != "none" else {}
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
             helper.make_node("Split", ["xt", "sizes"], ["gate_in", "gate_out", "v"], axis=1),
             helper.make_node("Mul", ["gate_in", "v"], ["gated"]),
             helper.make_node("CausalConvWithState", ["gated", "w", "bias", "past"], ["yt", "present"], domain=domain,
                              **conv_attrs),
             helper.make_node("Mul", ["gate_out", "yt"], ["out"]),
             helper.make_node("Transpose", ["out"], ["y"], perm=[0, 2, 1])]
    outputs = [helper.make_tensor_value_info("y", kind, [b, "n", c]),
               helper.make_tensor_value_info("present", kind, [b, c, k - 1])]
    if shared:
        outputs.append(helper.make_tensor_value_info("gate_in", kind, [b, c, "n"]))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", kind, [b, "n", 3 * c]),
                     helper.make_tensor_value_info("past", kind, [b, c, k - 1])], outputs,
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "bias"),
         numpy_helper.from_array(np.array([c, c, c], np.int64), "sizes")])
    opsets = [helper.make_opsetid("", 27 if not domain else 21)] + \
        ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(graph, opset_imports=opsets, ir_version=11), \
        rng.standard_normal((b, n, 3 * c)).astype(dtype)


@needs_gpu
@pytest.mark.parametrize("dtype", [F32, np.float16])
@pytest.mark.parametrize("b,n,activation,domain", [(1, 150, "silu", "com.microsoft"), (2, 1, "none", "com.microsoft"),
                                                   (1, 7, "none", "")])
def test_token_major_causal_conv_is_its_nodes_bit_for_bit(dtype, b, n, activation, domain):
    """The fused token-major convolution (the Transposes folded into its indexing) gives the bytes the three nodes
    give (fusion=0) and the CPU kernel's values; the plan has the fused node."""
    from onnxruntime_ep_seamless.kernels.cpu.spatial import causal_conv_with_state
    c, k = 48, 4
    model, x = token_major_conv_model(dtype, b, c, n, k, activation, domain)

    def reference(weight, bias, past):
        y, present = causal_conv_with_state(x.transpose(0, 2, 1), weight, bias, past, activation=activation)
        return y.transpose(0, 2, 1), present
    check_fused_conv(model, x, (b, c, k - 1), reference, 1e-3 if dtype == np.float16 else 1e-6)


@needs_gpu
@pytest.mark.parametrize("dtype", [F32, np.float16])
@pytest.mark.parametrize("b,n,activation", [(1, 150, "none"), (2, 1, "silu"), (1, 7, "none")])
def test_gated_causal_conv_is_its_nodes_bit_for_bit(dtype, b, n, activation):
    """LFM2's gated convolution as one token-major node (its Transposes, Split and two Muls folded into the kernel's
    indexing) gives the bytes the six nodes give (fusion=0) and the CPU kernel's values."""
    from onnxruntime_ep_seamless.kernels.cpu.spatial import causal_conv_with_state
    c, k = 48, 3
    model, x = gated_conv_model(dtype, b, c, n, k, activation, "com.microsoft")
    gate_in, gate_out, v = x.transpose(0, 2, 1).reshape(b, 3, c, n).transpose(1, 0, 2, 3)  # each (b, c, n)

    def reference(weight, bias, past):
        y, present = causal_conv_with_state((gate_in * v).astype(dtype), weight, bias, past, activation=activation)
        return (gate_out * y).transpose(0, 2, 1), present
    check_fused_conv(model, x, (b, c, k - 1), reference, 2e-3 if dtype == np.float16 else 1e-6)


def check_fused_conv(model, x, state_shape, reference, tol):
    """The model plans as one fused CausalConvWithState on CUDA, gives the unfused graph's bytes (fusion=0), and
    reference(weight, bias, past)'s values (y, present) within tol."""
    from onnxruntime_ep_seamless.graph.onnx_import import import_model
    from onnxruntime_ep_seamless.kernels.registry import FUSED_DOMAIN
    from onnxruntime_ep_seamless.plan.fusion import fuse
    from test_cuda_ep import cuda_session
    graph = import_model(model)
    assert [(n.op_type, n.domain) for n in fuse(graph, list(graph.outputs), "cuda")] == \
        [("CausalConvWithState", FUSED_DOMAIN)]
    feeds = {"x": x, "past": rng.standard_normal(state_shape).astype(x.dtype)}
    ours = cuda_session(model).run(None, feeds)
    unfused = cuda_session(model, fusion="0").run(None, feeds)
    weight, bias = (numpy_helper.to_array(t) for t in model.graph.initializer[:2])
    for name, o, u, r in zip(("y", "present"), ours, unfused, reference(weight, bias, feeds["past"])):
        np.testing.assert_array_equal(o, u, err_msg=name)
        np.testing.assert_allclose(o.astype(F32), r.astype(F32), rtol=tol, atol=tol, err_msg=name)
