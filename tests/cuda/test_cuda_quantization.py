"""The CUDA kernels composed of our other kernels (skipped without a GPU), against stock ORT's CPU EP, every node on our EP."""
import numpy as np
import pytest

from kernels.test_matmul import EQUATIONS as EINSUM_EQUATIONS
from kernels.test_quantization import matmul_nbits_case
from kernels.test_spatial import LP_POOL_CASES, max_pool_with_indices
from onnxruntime_ep_seamless.kernels.cpu.quantization import conv_integer as cpu_conv_integer
from parity import Const, assert_close, node_model, stock_session
from test_cuda_ep import DEVICES, PROBLEM, run_on_cuda
from test_cuda_ops import F16, F32, I32, I64, check, through_bf16

pytestmark = pytest.mark.skipif(not DEVICES, reason=f"no NVIDIA GPU for the CUDA EP ({PROBLEM or 'none found'})")
rng = np.random.default_rng(23)
# float16 normalisations: both compute in float32 and round once; sums in another order (1 ulp)
F16_TOL = {"rtol": 2e-3, "atol": 2e-3}


def special(dtype):
    return np.array([[0.0, np.nan, np.inf, -np.inf, -2.5], [6.0e4, -0.0, 3.0, np.nan, -np.inf]], F32).astype(dtype)


@pytest.mark.parametrize("dtype", [F32, F16])
def test_is_nan_and_is_inf(dtype):
    x = special(dtype)
    check("IsNaN", [x], opset=13, outputs=[np.bool_], exact=True)
    for attrs in ({}, {"detect_negative": 0}, {"detect_positive": 0}, {"detect_negative": 0, "detect_positive": 0}):
        check("IsInf", [x], attrs, opset=20, outputs=[np.bool_], exact=True)


@pytest.mark.parametrize("alpha", [1.0, 1.702])
def test_swish(alpha):
    check("Swish", [rng.standard_normal((3, 7)).astype(F32)], {"alpha": alpha}, opset=24, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("attrs", [{}, {"lambd": 1.0, "bias": 0.5}])
def test_shrink(attrs):
    check("Shrink", [rng.standard_normal((4, 6)).astype(F32) * 2], attrs, opset=9, exact=True)


@pytest.mark.parametrize("opset,axis", [(13, -1), (13, 0), (11, 1), (11, 0)])
def test_hardmax(opset, axis):
    x = rng.integers(0, 4, (3, 4, 5)).astype(F32)  # ties: the first maximum wins
    check("Hardmax", [x], {"axis": axis}, opset=opset, exact=True)


def test_hardmax_bfloat16():
    ours, ref = through_bf16("Hardmax", [rng.standard_normal((4, 9)).astype(F32)], {"axis": -1}, opset=13)
    np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("itype,depth", [(I64, np.array([4], I64)), (I32, np.array([4.0], F32))])  # as ORT registers
def test_one_hot(axis, itype, depth):
    indices = np.array([[0, 3, -1], [5, -4, 2]], itype)  # 5 and -4 are out of range for depth 4: all "off"
    check("OneHot", [indices, depth, np.array([-1.5, 2.0], F32)], {"axis": axis}, opset=11, outputs=[F32], exact=True)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space(mode):
    check("DepthToSpace", [rng.standard_normal((2, 8, 3, 5)).astype(F32)], {"blocksize": 2, "mode": mode}, opset=13,
          exact=True)


def test_space_to_depth():
    check("SpaceToDepth", [rng.standard_normal((2, 3, 4, 6)).astype(F16)], {"blocksize": 2}, opset=13, exact=True)


@pytest.mark.parametrize("opset", [18, 21])
@pytest.mark.parametrize("dtype", [F32, F16])
def test_group_normalization(opset, dtype):
    param = 6 if opset >= 21 else 3  # opset 18 scales per group, 21 per channel
    x = rng.standard_normal((2, 6, 3, 4)).astype(dtype)
    check("GroupNormalization", [x, rng.standard_normal(param).astype(dtype), rng.standard_normal(param).astype(dtype)],
          {"num_groups": 3, "epsilon": 1e-3}, opset=opset, **({"rtol": 1e-4, "atol": 1e-5} if dtype == F32 else F16_TOL))


@pytest.mark.parametrize("axes", [(0, 2, 3), (1,)])
def test_mean_variance_normalization(axes):
    check("MeanVarianceNormalization", [rng.standard_normal((2, 3, 4, 5)).astype(F32)], {"axes": list(axes)}, opset=13,
          rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("p", [1, 2])
def test_lp_normalization_and_global_lp_pool(p):
    x = rng.standard_normal((2, 3, 4, 5)).astype(F32)
    x[0, :, 0, 0] = 0  # a zero vector (along axis 1) stays zero
    check("LpNormalization", [x], {"p": p, "axis": 1}, opset=13, rtol=1e-5, atol=1e-6)
    check("GlobalLpPool", [x], {"p": p}, opset=13, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("p", [1, 2])
def test_lp_normalization_of_heads(p, dtype):
    """Qwen3.5's q and k L2 norm: [batch, tokens, heads, 128] over the last axis (normalization.cu lp_norm: a warp a
    vector), rows longer than a warp's 32 lanes and a zero vector among them."""
    x = rng.standard_normal((2, 3, 5, 160)).astype(dtype)
    x[1, 2, 3] = 0
    check("LpNormalization", [x], {"p": p, "axis": -1}, opset=13,  # stock's CPU EP: float32 only
          **({"rtol": 1e-5, "atol": 1e-6} if dtype == F32 else dict(F16_TOL, ref_in_float32=True)))


@pytest.mark.parametrize("shape, perm", [((1, 1, 6), (0, 2, 1)), ((2, 1, 3, 1), (0, 3, 2, 1)), ((1, 4, 1), None),
                                         ((2, 3, 4), (1, 0, 2)), ((2, 1, 3), (2, 1, 0))])
def test_transpose_moving_only_axes_of_one_is_a_view_and_others_copy(shape, perm):
    """A Transpose that moves only axes of length 1 (a decode step's [1, 1, n] -> [1, n, 1]) leaves the bytes where
    they are (the same memory, a new shape: tests/cuda/test_cuda_host_path.py); others copy: both give stock's
    values."""
    x = rng.standard_normal(shape).astype(F32)
    check("Transpose", [x], {} if perm is None else {"perm": list(perm)}, opset=13, exact=True)


@pytest.mark.parametrize("k", [0, 1, -2])
def test_eye_like(k):
    check("EyeLike", [rng.standard_normal((3, 5)).astype(F32)], {"k": k}, opset=9, exact=True)
    check("EyeLike", [rng.standard_normal((4, 2)).astype(F16)], {"k": k, "dtype": 7}, opset=9, outputs=[I64], exact=True)


def test_compress():
    x = np.array([[0.0, 1.5, 0.0], [-2.0, 0.0, 3.0]], F32)
    for axis in (0, 1, None):
        cond = np.array([True, False, True][:2 if axis == 0 else 3], np.bool_)
        check("Compress", [x, cond], {} if axis is None else {"axis": axis}, opset=11, exact=True)


# 8-bit linear quantization: per tensor, per axis, blocked (opset 21, a partial last block); exact,
# both sides computing x / scale in float32 and rounding halves to even
QUANT_CASES = {
    "tensor": (np.float32(0.05), np.uint8(128), {}),
    "axis": (np.array([0.02, 0.1, 0.07], F32), np.array([-3, 0, 5], np.int8), {"axis": 0}),
    "blocked": (np.array([[0.03, 0.2], [0.11, 0.05], [0.08, 0.01]], F32), np.array([[1, -2], [0, 3], [-1, 0]], np.int8),
                {"axis": 1, "block_size": 3}),
}


@pytest.mark.parametrize("case", list(QUANT_CASES))
@pytest.mark.parametrize("dtype", [F32, F16])
def test_quantize_and_dequantize_linear(case, dtype):
    scale, zero, attrs = QUANT_CASES[case]
    x = (rng.standard_normal((3, 5)) * 2).astype(dtype)
    x[0, :3] = [0.025, -0.075, 0.125]  # halves of the scale: rounding to even
    scale = np.asarray(scale).astype(dtype)
    check("QuantizeLinear", [x, scale, np.asarray(zero)], attrs, opset=21, outputs=[np.asarray(zero).dtype], exact=True)
    q = rng.integers(-100, 100, (3, 5)).astype(np.asarray(zero).dtype)
    check("DequantizeLinear", [q, scale, np.asarray(zero)], attrs, opset=21, outputs=[dtype], exact=dtype == F32,
          rtol=1e-3, atol=1e-3)


def test_dynamic_quantize_linear():
    # exact: both sides compute the range, scale and zero point in float32 and round halves to even
    x = rng.standard_normal((3, 5)).astype(F32)
    for v in (x, np.abs(x), np.zeros((2, 3), F32)):  # a minimum clamped to 0; an all-zero input (scale 0)
        check("DynamicQuantizeLinear", [v], opset=11, outputs=[np.uint8, F32, np.uint8], exact=True)


@pytest.mark.parametrize("ta,tb", [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8), (np.int8, np.uint8)])
def test_matmul_integer(ta, tb):
    def ints(shape, t):
        info = np.iinfo(t)
        return rng.integers(info.min, info.max, shape, endpoint=True).astype(t)
    a, b = ints((3, 4, 70), ta), ints((70, 5), tb)
    outputs = [np.int32]
    check("MatMulInteger", [a, b], opset=10, outputs=outputs, exact=True)
    check("MatMulInteger", [a, b, np.array(7, ta), np.array(3, tb)], outputs=outputs, exact=True)
    check("MatMulInteger", [a, b, np.array(7, ta), ints((5,), tb)], outputs=outputs, exact=True)  # per column of b
    check("MatMulInteger", [ints((2, 3, 70), ta), ints((2, 70, 5), tb)], outputs=outputs, exact=True)  # batched
    # per row of a: the spec allows it, stock ORT's CPU kernel does not; the exact integer product instead
    za, zb = ints((4,), ta), np.array(3, tb)
    model, feeds = node_model("MatMulInteger", [a, b, za, zb], None, 10, outputs)
    (ours,) = run_on_cuda(model, feeds)
    wide = (a.astype(np.int64) - za.astype(np.int64)[:, None]) @ (b.astype(np.int64) - np.int64(zb))
    np.testing.assert_array_equal(ours, wide.astype(np.int32))


# Einsum: the CPU parity equations (implicit outputs, diagonals, ellipses, three operands) and a few
# more (a broadcast 1, a diagonal beside a product, a label kept across operands, an empty K).
# float32: products summed in another order than ORT's (1e-4); float16: ORT rounds each pairwise
# product to float16 where we keep float32 and round once
EINSUM_MORE = [("ij,j->i", [(3, 1), (4,)]), ("iij,jk->ik", [(3, 3, 2), (2, 4)]), ("ab,ab,ab->a", [(2, 3)] * 3),
               ("ij,jk->ik", [(2, 0), (0, 3)])]


@pytest.mark.parametrize("equation,shapes", EINSUM_EQUATIONS + EINSUM_MORE)
@pytest.mark.parametrize("dtype", [F32, F16])
def test_einsum(equation, shapes, dtype):
    inputs = [rng.standard_normal(shape).astype(dtype) for shape in shapes]
    check("Einsum", inputs, {"equation": equation}, opset=12, outputs=[dtype],
          **({"rtol": 1e-4, "atol": 1e-5} if dtype == F32 else {"rtol": 4e-3, "atol": 4e-3}))


# LpPool: |x|^p summed over windows by the pool kernel's sum mode, then the p-th root; float32 powf
# against numpy's (an ulp or two)
@pytest.mark.parametrize("attrs", LP_POOL_CASES)
@pytest.mark.parametrize("dtype", [F32, F16])
def test_lp_pool(attrs, dtype):
    check("LpPool", [rng.standard_normal((1, 3, 5, 6)).astype(dtype)], attrs, opset=18,
          **({"rtol": 1e-5, "atol": 1e-5} if dtype == F32 else F16_TOL))


# index-tensor data movement: exact (elements are moved, never computed)
@pytest.mark.parametrize("batch_axis,time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence(batch_axis, time_axis):
    x = rng.standard_normal((4, 3, 2) if time_axis == 0 else (3, 4, 2)).astype(F32)
    check("ReverseSequence", [x, np.array([4, 1, 3], I64)], {"batch_axis": batch_axis, "time_axis": time_axis},
          opset=10, exact=True)


@pytest.mark.parametrize("mode,starts", [("linear", [1, 4]), ("circular", [5, 2]), ("linear", None)])
@pytest.mark.parametrize("dtype", [F32, F16])
def test_tensor_scatter(mode, starts, dtype):
    cache, update = (rng.standard_normal(shape).astype(dtype) for shape in ((2, 3, 6, 4), (2, 3, 2, 4)))
    inputs = [cache, update] + ([] if starts is None else [np.array(starts, I64)])
    check("TensorScatter", inputs, {"mode": mode}, opset=24, exact=True)


def test_max_unpool():
    pooled, indices = max_pool_with_indices()
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    check("MaxUnpool", [pooled, indices], attrs, opset=11, exact=True)
    # with output_shape, stock ORT departs from the spec (docs/user-guide.md): the spec's result, padded
    model, feeds = node_model("MaxUnpool", [pooled, indices, Const(np.array([1, 2, 5, 5], I64))], attrs, 11)
    (ours,) = run_on_cuda(model, feeds)
    spec = np.zeros((1, 2, 5, 5), F32)
    spec[:, :, :4, :4] = np.bincount(indices.reshape(-1), pooled.reshape(-1), 32).reshape(1, 2, 4, 4)
    np.testing.assert_array_equal(ours, spec)


def test_conv_integer():
    # exact: a float64 Conv of the centered values (tests/kernels/test_quantization.py's case, and
    # without zero points)
    x = rng.integers(0, 255, (1, 4, 6, 6), endpoint=True).astype(np.uint8)
    w = rng.integers(-128, 127, (6, 2, 3, 3), endpoint=True).astype(np.int8)
    attrs = {"group": 2, "pads": [1, 1, 1, 1], "strides": [2, 1]}
    for zeros in ([np.array(128, np.uint8), np.array(0, np.int8)], []):
        check("ConvInteger", [x, Const(w), *map(Const, zeros)], attrs, opset=10, outputs=[I32], exact=True)
    # a weight zero point per output channel: the spec allows it, stock ORT's CPU kernel does not; the
    # reference is the CPU EP's float64 convolution (exact integers)
    zeros = [np.array(3, np.uint8), np.arange(6, dtype=np.int8)]
    model, feeds = node_model("ConvInteger", [x, Const(w), *map(Const, zeros)], attrs, 10, [I32])
    (ours,) = run_on_cuda(model, feeds)
    np.testing.assert_array_equal(ours, cpu_conv_integer(x, w, *zeros, **attrs)[0])


@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("size", [[2, 3, 4, 5], [1, 2, 3, 4, 5], [3, 1, 1, 6]])
def test_affine_grid(align_corners, size):
    nd = len(size) - 2
    theta = rng.standard_normal((size[0], nd, nd + 1)).astype(F32)
    # stock: float64 sums of nd + 1 terms rounded once; ours: float32 sums (a few float32 steps at values ~3)
    check("AffineGrid", [theta, Const(np.array(size, I64))], {"align_corners": align_corners}, opset=20,
          rtol=1e-6, atol=2e-6)


def test_affine_grid_float16():
    # ours rounds the base points and the result to float16
    theta, size = rng.standard_normal((2, 2, 3)).astype(F16), Const(np.array([2, 3, 4, 5], I64))
    check("AffineGrid", [theta, size], {}, opset=20, rtol=2e-3, atol=4e-3, ref_in_float32=True)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("scales", [F32, np.float16])
def test_qlinear_matmul(dtype, per_column, scales):
    # exact integer sums, requantized in float64 (this seed's products land on no rounding half, where stock's
    # float32 product could differ: docs/user-guide.md); its own generator, so another test order (pytest -n)
    # draws the same values
    r, info = np.random.default_rng(11), np.iinfo(dtype)
    a = r.integers(info.min, info.max, (2, 3, 8)).astype(dtype)
    b = r.integers(info.min, info.max, (8, 4)).astype(dtype)
    # float16 scales: their product is rounded to float16 (the CUDA requantization once read it as float32)
    b_scale, b_zero = ((r.uniform(0.005, 0.02, 4).astype(scales), r.integers(0, 5, 4).astype(dtype))
                       if per_column else (np.array(0.01, scales), np.array(2, dtype)))
    inputs = [a, np.array(0.02, scales), np.array(3, dtype), b, b_scale, b_zero, np.array(0.5, scales),
              np.array(1, dtype)]
    check("QLinearMatMul", [x if i in (0, 3) else Const(x) for i, x in enumerate(inputs)], opset=21, exact=True)


def test_qlinear_conv():
    x = rng.integers(0, 255, (1, 4, 6, 6)).astype(np.uint8)
    w = rng.integers(-128, 127, (6, 2, 3, 3)).astype(np.int8)
    w_scale = rng.uniform(0.001, 0.01, 6).astype(F32)  # per output channel
    bias = rng.integers(-500, 500, 6).astype(I32)
    consts = [np.array(0.05, F32), np.array(128, np.uint8), w, w_scale, np.zeros(6, np.int8), np.array(0.2, F32),
              np.array(120, np.uint8), bias]
    check("QLinearConv", [x] + [Const(c) for c in consts], {"group": 2, "pads": [1, 1, 1, 1], "strides": [2, 1]},
          opset=10, exact=True)


def test_binarizer():
    x = rng.standard_normal((4, 5)).astype(F32)
    x[0, :2] = 0.25  # at the threshold: not above it
    check("Binarizer", [x], {"threshold": 0.25}, domain="ai.onnx.ml", exact=True)


@pytest.mark.parametrize("x_shape,indices", [((3, 5), [0, 4, 2]), ((2, 3, 4), [[1], [3]]), ((6,), [5, 0])])
def test_array_feature_extractor(x_shape, indices):
    x = rng.standard_normal(x_shape).astype(F32)
    check("ArrayFeatureExtractor", [x, np.array(indices, I64)], domain="ai.onnx.ml", exact=True)


# MatMulNBits by row count: 1 the GEMV, 2-16 the rows kernels (float16 from 4 rows on tensor cores), more the
# weights dequantized into a scratch matrix and one GEMM (quantization.cu dequantize_nbits: 8 values a thread, one
# load and one 16-byte store where K comes by eights, else value by value). float16: the prompt path rounds the
# dequantized weights to float16 before its GEMM (as ORT's CUDA EP does), stock's CPU kernel keeps them in float32:
# ~sqrt(K) * 0.1 * 5e-4 apart at K 896, so a wider bound than a float16 product's one ulp.
NBITS_TOL = {F32: {"rtol": 1e-4, "atol": 1e-4}, F16: {"rtol": 1e-2, "atol": 1e-2}}


@pytest.mark.parametrize("m", [1, 3, 9, 17, 40])
@pytest.mark.parametrize("bits,block_size,zp_mode,k", [
    (4, 32, None, 896), (4, 16, "uint8", 256), (4, 128, None, 200),  # K by eights (200: a part block at the end)
    (4, 32, "uint8", 100), (8, 32, "uint8", 512), (8, 64, None, 72), (8, 16, None, 36)])  # 100, 36: not by eights
@pytest.mark.parametrize("dtype", [F32, F16])
def test_matmul_nbits_every_row_count(m, bits, block_size, zp_mode, k, dtype):
    model, feeds = matmul_nbits_case((m, k), k, 72, bits, block_size, zp_mode, dtype=dtype)
    ours, ref = run_on_cuda(model, feeds), stock_session(model).run(None, feeds)
    assert_close(ours[0], ref[0], name="Y", **NBITS_TOL[dtype])
