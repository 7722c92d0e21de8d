"""Plain ONNX ops on the CUDA EP (skipped without a GPU), against stock ORT's CPU EP: the elementwise
family in every type it takes (float32/16, bfloat16, int32/64, bool), casts, reductions, softmax
axes, Gemm. Integer inputs fed to a session live on the GPU, so they exercise the integer kernels."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidGraph, NotImplemented as OrtNotImplemented

from onnxruntime_ep_seamless.kernels.cuda.elementwise import UNARY
from parity import Const, assert_close, node_model, stock_session
from test_cuda_ep import DEVICES, PROBLEM, cuda_session, in_bfloat16, run_on_cuda

pytestmark = pytest.mark.skipif(not DEVICES, reason=f"no NVIDIA GPU for the CUDA EP ({PROBLEM or 'none found'})")
F32, F16, I32, I64 = np.float32, np.float16, np.int32, np.int64
BF16 = TensorProto.BFLOAT16


def check(op, inputs, attrs=None, opset=17, outputs=None, rtol=1e-5, atol=1e-6, exact=False, domain="",
          ref_in_float32=False):
    """Ours vs stock ORT CPU on one node: exact, or within rtol/atol. ref_in_float32: the reference is
    stock's op on the float16 inputs as float32, rounded back (where stock lacks the float16 kernel)."""
    model, feeds = node_model(op, inputs, attrs, opset, outputs, domain=domain)
    ours = run_on_cuda(model, feeds)
    if ref_in_float32:
        wide = [a.astype(F32) if isinstance(a, np.ndarray) and a.dtype == F16 else a for a in inputs]
        model, wide_feeds = node_model(op, wide, attrs, opset, [F32 if o is F16 else o for o in outputs or [F16]],
                                       domain=domain)
        ref = [r.astype(F16) if r.dtype == F32 else r for r in stock_session(model).run(None, wide_feeds)]
    else:
        ref = stock_session(model).run(None, feeds)
    assert len(ours) == len(ref)
    for i, (o, r) in enumerate(zip(ours, ref)):
        assert o.dtype == r.dtype and o.shape == r.shape, (i, o.dtype, o.shape, r.dtype, r.shape)
        if exact:
            np.testing.assert_array_equal(o, r, err_msg=f"output {i}")
        else:
            assert_close(o, r, rtol, atol, f"output {i}")
    return ours


def skip_unless_stock_has(op, model):
    """Skips the test where stock ORT has no kernel for `model`'s op (an opset newer than it)."""
    try:
        stock_session(model)
    except (Fail, InvalidGraph, OrtNotImplemented) as e:
        if op not in str(e) and "opset" not in str(e).lower():
            raise
        pytest.skip(f"stock ORT lacks {op}: {str(e)[:80]}")


def through_bf16(op, arrays, attrs=None, opset=17):
    """op run in bfloat16 on our EP (float32 inputs cast to bfloat16 and the result back, all on the
    GPU) against stock ORT's float32 op on the bfloat16-rounded inputs, rounded to bfloat16: the
    stock CPU EP has almost no bfloat16 kernels. Returns (ours, reference) as float32."""
    model, feeds = node_model(op, arrays, attrs, opset)
    (ours,) = run_on_cuda(in_bfloat16(model), feeds)
    (ref,) = stock_session(model).run(None, {k: _bf16(v) for k, v in feeds.items()})
    return ours, _bf16(ref)


def _bf16(a):
    import ml_dtypes
    return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


BF16_TOL = {"rtol": 8e-3, "atol": 8e-3}  # one bfloat16 ulp (2^-8 relative) from rounding at different points

# each op's domain, where the default uniform(-3, 3) is outside it or hits a pole
UNARY_DOMAIN = {"Log": (0.05, 4), "Sqrt": (0, 4), "Acosh": (1.05, 4), "Atanh": (-0.95, 0.95), "Asin": (-1, 1),
                "Acos": (-1, 1), "Tan": (-1.4, 1.4), "Reciprocal": (0.1, 4)}


def unary_input(op, rng, n=64):
    lo, hi = UNARY_DOMAIN.get(op, (-3, 3))
    x = rng.uniform(lo, hi, n)
    if op == "Round":
        x[:5] = [0.5, 1.5, 2.5, -0.5, -2.5]  # halves go to even
    if op == "Softplus":
        x[:2] = [-30, 30]
    return x.reshape(4, n // 4)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(op, dtype):
    if op == "Celu" and dtype != F32:
        pytest.skip("ONNX's Celu takes float32 only")
    x = unary_input(op, np.random.default_rng(5)).astype(dtype)
    opset = max(17, UNARY[op][1])
    if dtype == F32:
        check(op, [x], opset=opset, rtol=1e-5, atol=1e-6)  # CUDA's libdevice vs MLAS/libm: a few ulps
        return
    # stock ORT CPU lacks float16 kernels for several of these: float32 on the same inputs, rounded
    model, feeds = node_model(op, [x], opset=opset)
    (ours,) = run_on_cuda(model, feeds)
    model, feeds = node_model(op, [x.astype(F32)], opset=opset)
    (ref,) = stock_session(model).run(None, feeds)
    assert_close(ours, ref.astype(F16), rtol=1e-3, atol=1e-3)  # one float16 rounding


@pytest.mark.parametrize("op", sorted(set(UNARY) - {"Celu"}))  # ONNX's Celu takes float32 only
def test_unary_bfloat16(op):
    x = unary_input(op, np.random.default_rng(5)).astype(F32)
    ours, ref = through_bf16(op, [x], opset=22)  # ONNX allows bfloat16 in most of these from opset 22
    assert_close(ours, ref, name=op, **BF16_TOL)


@pytest.mark.parametrize("op,attrs", [("LeakyRelu", {"alpha": 0.3}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
                                      ("Elu", {"alpha": 0.7}), ("Selu", {"alpha": 1.5, "gamma": 1.1}),
                                      ("Celu", {"alpha": 2.0}), ("ThresholdedRelu", {"alpha": 0.5})])
def test_unary_attributes(op, attrs):
    x = np.random.default_rng(2).uniform(-3, 3, (3, 7)).astype(F32)
    check(op, [x], attrs)


@pytest.mark.parametrize("dtype", [I32, I64])
@pytest.mark.parametrize("op", ["Neg", "Abs", "Sign", "Relu"])
def test_unary_int(op, dtype):
    x = np.array([[-7, 0, 3], [2**20, -2**20, 1]], dtype)
    if op == "Relu":  # stock ORT CPU has no integer Relu: numpy is the reference
        model, feeds = node_model(op, [x])
        np.testing.assert_array_equal(run_on_cuda(model, feeds)[0], np.maximum(x, 0))
        return
    check(op, [x], exact=True)


@pytest.mark.parametrize("dtype", [I32, I64])
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
def test_binary_int_broadcast(op, dtype):
    rng = np.random.default_rng(3)
    a = rng.integers(-1000, 1000, (2, 3, 4)).astype(dtype)
    b = rng.integers(1, 50, (4,)).astype(dtype) * np.array([1, -1, 1, -1], dtype)  # no zero divisors
    check(op, [a, b], exact=True)


@pytest.mark.parametrize("dtype", [I32, I64])
def test_bitwise(dtype):
    rng = np.random.default_rng(5)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, (3, 4), endpoint=True).astype(dtype)
    for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
        check(op, [a, rng.integers(info.min, info.max, (4,), endpoint=True).astype(dtype)], opset=18, exact=True)
    check("BitwiseNot", [a], opset=18, exact=True)


@pytest.mark.parametrize("dtype,fmod", [(I32, 0), (I64, 0), (I64, 1), (F32, 1), (F16, 1)])
def test_mod(dtype, fmod):
    a = np.array([[-7, 7, -8, 9], [5, -5, 0, 13]], dtype)
    b = np.array([3, -3, 5, -4], dtype)
    check("Mod", [a, b], {"fmod": fmod}, exact=dtype in (I32, I64))


@pytest.mark.parametrize("dtype", [F32, F16])
def test_variadic_sum_mean_max_min(dtype):
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal(s).astype(dtype) for s in [(2, 3), (3,), (1, 3)]]
    for op in ("Sum", "Mean", "Max", "Min"):
        check(op, xs, rtol=1e-6 if dtype == F32 else 1e-3, atol=0)
    check("Sum", xs[:1], exact=True)  # one input: a copy


def test_prelu_and_pow():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 4)).astype(F32)
    check("PRelu", [x, rng.uniform(0, 1, (3, 1)).astype(F32)])
    check("Pow", [np.abs(x) + 0.1, np.array(1.7, F32)])
    for exponent in (np.array(2, I32), np.array([1, 2, 3, -1], I64)):  # another type (opset 12 on): Nemotron's square
        check("Pow", [np.abs(x) + 0.1, exponent], opset=15)


@pytest.mark.parametrize("dtype", [F32, F16, I32, I64])
@pytest.mark.parametrize("op", ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
def test_compare(op, dtype):
    a = np.array([[1, 2, 3, 4], [4, 3, 2, 1]], dtype)
    check(op, [a, np.array([2, 2, 4, 1], dtype)], outputs=[np.bool_], exact=True)


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic(op):
    a = np.array([[True, False], [True, True], [False, False]])
    check(op, [a, np.array([True, False])], exact=True)
    check("Not", [a], exact=True)


CAST_TYPES = [F32, F16, np.float64, np.int8, np.uint8, I32, I64, np.bool_]


@pytest.mark.parametrize("src", CAST_TYPES)
@pytest.mark.parametrize("dst", CAST_TYPES)
def test_cast(src, dst):
    # values every type holds; float sources have fractions, which casts to int truncate
    x = np.array([[0, 1, 2.75, 100.5], [3.25, 0, 7, 126]], np.float64)
    if src in (np.int8, np.uint8, I32, I64):
        x = np.floor(x)
    if src is np.bool_:
        x = x > 1
    check("Cast", [x.astype(src)], {"to": helper.np_dtype_to_tensor_dtype(np.dtype(dst))}, outputs=[dst], exact=True)


def test_cast_through_bfloat16_rounds_to_nearest_even():
    x = np.array([1.0, 1.00390625, 1.01171875, -3.3, 65504.0, 1e-3], F32)  # halfway cases and ordinary values
    ours, ref = through_bf16("Identity", [x])
    np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("dtype", [F32, F16, I64, np.bool_])
def test_where_any_type(dtype):
    cond = np.array([[True, False, True], [False, False, True]])
    a = np.arange(6).reshape(2, 3).astype(dtype)
    b = np.array([5, 0, 1]).astype(dtype)
    if dtype is np.bool_:  # stock ORT CPU has no bool Where: numpy is the reference
        model, feeds = node_model("Where", [cond, a, b])
        np.testing.assert_array_equal(run_on_cuda(model, feeds)[0], np.where(cond, a, b))
        return
    check("Where", [cond, a, b], outputs=[np.dtype(dtype)], exact=True)


def test_clip():
    x = np.random.default_rng(8).uniform(-3, 3, (4, 5)).astype(F32)
    check("Clip", [x, Const(np.array(-1.0, F32)), Const(np.array(0.5, F32))], exact=True)
    check("Clip", [x, Const(np.array(-1.0, F32))], exact=True)
    check("Clip", [x], {"min": -0.5, "max": 2.0}, opset=10, exact=True)
    check("Clip", [np.array([-9, -1, 0, 4, 99], I64), Const(np.array(-2, I64)), Const(np.array(5, I64))], exact=True)


REDUCE_FLOAT = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare", "ReduceL1",
                "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"]


@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([0, 2], 0), ([-1], 0), (None, 1), ([1, 2], 1)])
@pytest.mark.parametrize("op", REDUCE_FLOAT)
def test_reduce(op, axes, keepdims):
    rng = np.random.default_rng(9)
    # the block kernel (>= 64 elements per output) and the thread kernel (fewer) both run
    for shape in [(3, 5, 4), (2, 70, 3)]:
        x = rng.uniform(0.5, 1.5, shape).astype(F32)
        inputs = [x] + ([Const(np.array(axes, I64))] if axes is not None else [])
        check(op, inputs, {"keepdims": keepdims}, opset=18, rtol=2e-5, atol=1e-6)  # float32 sums in another order
        check(op, [x], {"keepdims": keepdims, **({"axes": axes} if axes is not None else {})}, opset=11, rtol=2e-5,
              atol=1e-6)


@pytest.mark.parametrize("dtype", [I32, I64])
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean"])
def test_reduce_int(op, dtype):
    x = np.random.default_rng(10).integers(-50, 50, (3, 6)).astype(dtype)
    check(op, [x, Const(np.array([1], I64))], {"keepdims": 0}, opset=18, exact=True)


def test_reduce_float16_and_noop():
    x = np.random.default_rng(11).uniform(-1, 1, (4, 100)).astype(F16)
    check("ReduceMean", [x, Const(np.array([-1], I64))], opset=18, rtol=1e-3, atol=1e-3)  # float32 accumulation
    check("ReduceSum", [x, Const(np.zeros(0, I64))], {"noop_with_empty_axes": 1}, opset=18, exact=True)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis,opset", [(-1, 13), (1, 13), (0, 13), (1, 11), (2, 11)])
def test_softmax_axes(op, axis, opset):
    x = np.random.default_rng(12).standard_normal((3, 4, 5)).astype(F32)
    check(op, [x], {"axis": axis}, opset=opset, rtol=1e-5, atol=1e-6)


def test_softmax_bfloat16():
    x = np.random.default_rng(13).standard_normal((3, 40)).astype(F32)
    ours, ref = through_bf16("Softmax", [x])
    assert_close(ours, ref, **BF16_TOL)


@pytest.mark.parametrize("attrs", [{}, {"transA": 1}, {"transB": 1, "alpha": 0.5}, {"beta": 2.0},
                                   {"transA": 1, "transB": 1, "alpha": 1.5, "beta": 0.0}])
def test_gemm(attrs):
    rng = np.random.default_rng(14)
    a = rng.standard_normal((6, 4) if attrs.get("transA") else (4, 6)).astype(F32)
    b = rng.standard_normal((5, 6) if attrs.get("transB") else (6, 5)).astype(F32)
    check("Gemm", [a, b, rng.standard_normal((5,)).astype(F32)], attrs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("c_shape,beta", [((512,), 1.0), ((1, 512), 1.0), ((64, 512), 1.0), ((64, 1), 2.0),
                                          ((), 1.0), ((512,), 0.5)])
def test_float16_gemm_rounds_once(c_shape, beta):
    """float16 A . B + beta C summed in float32 and rounded once, as stock's Gemm: the exact value rounded, up to
    one float16 ulp where float32 sums in another order differ (and a few float32 ulps of the largest value where
    they cancel); rounded twice, 27 % of these values differ."""
    rng = np.random.default_rng(16)
    a, b, c = (rng.standard_normal(s).astype(F16) for s in ((64, 256), (256, 512), c_shape))
    model, feeds = node_model("Gemm", [a, Const(b), Const(c)], {"beta": beta}, 13, [F16])
    (ours,) = run_on_cuda(model, feeds)
    exact = (a.astype(np.float64) @ b.astype(np.float64) + beta * c.astype(np.float64)).astype(F16)
    differ = ours != exact
    ulp = np.spacing(np.abs(exact)).astype(np.float64) + 2.0 ** -20 * np.abs(exact).max()
    assert np.mean(differ) < 0.01 and np.all(np.abs(ours.astype(np.float64) - exact) <= ulp), np.mean(differ)


def test_matmul_bfloat16():
    rng = np.random.default_rng(15)
    ours, ref = through_bf16("MatMul", [rng.standard_normal((2, 5, 16)).astype(F32),
                                        rng.standard_normal((16, 8)).astype(F32)])
    # bfloat16 products summed in float32 by cuBLAS, rounded once; the reference rounds once too
    assert_close(ours, ref, rtol=1.6e-2, atol=1.6e-2)


# A MatMul by a constant runs as plan/fusion.py's Linear (the weights transposed): with few rows (a
# decode step's projections) matmul.cu's kernel when k comes by eights (1, 2, 4 or 8 warps a column
# as k grows, 1 from 4096 columns: (520, 4100) makes a lone warp take 3 passes; 16-bit types with k in
# chunks of 32 up to 1024: tensor cores, 16 columns a block: n = 20 ends in a part of one), else cuBLASLt. float32: sums in another
# order than ORT's; float16: both sum in float32 and round once, so at most one float16 ulp (9.8e-4
# relative) apart.
FEW_ROWS_TOL = {F32: {"rtol": 1e-4, "atol": 1e-4}, F16: {"rtol": 2e-3, "atol": 1e-3}}


@pytest.mark.parametrize("m", [1, 4, 5])
@pytest.mark.parametrize("k,n", [(896, 1152), (40, 9), (264, 16), (4864, 16), (2056, 24), (33, 12), (520, 4100),
                                 (1024, 20), (96, 12)])  # 16-bit, K in chunks of 32 up to 1024: tensor cores
@pytest.mark.parametrize("dtype", [F32, F16])
def test_matmul_by_a_constant(m, k, n, dtype):
    rng = np.random.default_rng(m * k + n)
    w = (rng.standard_normal((k, n)) * 0.1).astype(dtype)
    check("MatMul", [rng.standard_normal((1, m, k)).astype(dtype), Const(w)], **FEW_ROWS_TOL[dtype])


@pytest.mark.parametrize("m,k,n", [(1, 896, 40), (3, 96, 20), (2, 2056, 24)])
def test_matmul_by_a_bfloat16_constant(m, k, n):
    """A bfloat16 Linear of few rows: matmul.cu's tensor-core kernel (K in chunks of 32 up to 1024), else a warp
    a column. The reference is stock ORT's float32 MatMul of the same bfloat16 values."""
    import ml_dtypes
    rng = np.random.default_rng(k + n)
    w = (rng.standard_normal((k, n)) * 0.1).astype(ml_dtypes.bfloat16)
    bf16 = helper.make_tensor("w", TensorProto.BFLOAT16, [k, n], w.view(np.uint16).tobytes(), raw=True)
    nodes = [helper.make_node("Cast", ["a"], ["a16"], to=TensorProto.BFLOAT16),
             helper.make_node("MatMul", ["a16", "w"], ["p"]),
             helper.make_node("Cast", ["p"], ["y"], to=TensorProto.FLOAT)]
    io = ([helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])],
          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])])
    model = helper.make_model(helper.make_graph(nodes, "bf16", *io, [bf16]),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    ref_model = helper.make_model(helper.make_graph([helper.make_node("MatMul", ["a", "w"], ["y"])], "f32", *io,
                                                    [numpy_helper.from_array(w.astype(F32), "w")]),
                                  opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    feeds = {"a": rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16).astype(F32)}  # exact in bfloat16
    (ours,) = run_on_cuda(model, feeds)
    (ref,) = stock_session(ref_model).run(None, feeds)
    assert_close(ours, ref, rtol=1.6e-2, atol=1.6e-2)  # float32 sums of the same products, rounded to bfloat16 once


@pytest.mark.parametrize("m", [1, 4, 5])
@pytest.mark.parametrize("dtype", [F32, F16])
def test_matmul_by_a_constant_plus_bias(m, dtype):
    """MatMul by a constant, then Add of a constant bias: one Linear node with its bias on CUDA."""
    rng = np.random.default_rng(m)
    w, bias = (rng.standard_normal((64, 1152)) * 0.1).astype(dtype), rng.standard_normal(1152).astype(dtype)
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["a", "w"], ["p"]), helper.make_node("Add", ["bias", "p"], ["y"])], "bias",
        [helper.make_tensor_value_info("a", t, [m, 64])], [helper.make_tensor_value_info("y", t, [m, 1152])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "bias")]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    feeds = {"a": rng.standard_normal((m, 64)).astype(dtype)}
    (ours,) = run_on_cuda(model, feeds)
    (ref,) = stock_session(model).run(None, feeds)
    # float16: ORT rounds the product, then the sum with the bias; ours (m <= 4) rounds once
    assert_close(ours, ref, **(FEW_ROWS_TOL[F32] if dtype == F32 else {"rtol": 4e-3, "atol": 4e-3}))


@pytest.mark.parametrize("const", [False, True])
def test_matmul_of_mismatched_widths_is_a_clear_error(const):
    """Symbolic dims let a wrong width reach the EP: an error naming the shapes before any launch (a
    GEMM would read past the operands), and the session runs right feeds afterwards."""
    rng = np.random.default_rng(19)
    w = rng.standard_normal((8, 16)).astype(F32)
    model, _ = node_model("MatMul", [rng.standard_normal((2, 8)).astype(F32), Const(w) if const else w],
                          symbolic=True)
    sess = cuda_session(model)
    bad = {"in0": np.ones((2, 5), F32)} | ({} if const else {"in1": w})
    with pytest.raises(Exception, match=r"last dimension must be 8"):
        sess.run(None, bad)
    good = {"in0": np.ones((3, 8), F32)} | ({} if const else {"in1": w})
    np.testing.assert_allclose(sess.run(None, good)[0], good["in0"] @ w, rtol=1e-5, atol=1e-5)


def test_matmul_by_a_constant_bfloat16():
    rng = np.random.default_rng(17)
    ours, ref = through_bf16("MatMul", [rng.standard_normal((3, 40)).astype(F32),
                                        Const(rng.standard_normal((40, 24)).astype(F32))])
    # float32 sums rounded once to bfloat16 by both: one bfloat16 ulp (7.8e-3 relative) apart at most
    assert_close(ours, ref, rtol=1.6e-2, atol=1.6e-2)


def test_integer_reductions_over_long_axes():
    """int32/int64 reductions of many elements an output (or of 48 into few outputs) take reduction.cu's
    block path: exact."""
    rng = np.random.default_rng(18)
    for dtype in (I32, I64):
        x = rng.integers(-1000, 1000, (3, 3000)).astype(dtype)
        for op in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceSumSquare"):
            check(op, [x], {"axes": [1], "keepdims": 0}, opset=11, exact=True)
        check("ReduceProd", [np.where(x > 0, 1, -1).astype(dtype)], {"axes": [1]}, opset=11, exact=True)
        check("ReduceMean", [x.reshape(3, 50, 60)], {"axes": [0, 2]}, opset=11, exact=True)
        check("ReduceSum", [x[:, :48]], {"axes": [1]}, opset=11, exact=True)


def test_layer_normalization_over_two_axes():
    rng = np.random.default_rng(16)
    x = rng.standard_normal((2, 3, 4, 5)).astype(F32)
    check("LayerNormalization", [x, rng.standard_normal((4, 5)).astype(F32), rng.standard_normal((4, 5)).astype(F32)],
          {"axis": -2}, rtol=1e-5, atol=1e-5)


def test_mask_arithmetic_on_the_gpu():
    """The builder's attention-mask chain (ReduceSum, Sub, Cast to int32) on a mask fed to the
    session, which lives on the GPU: the integer kernels compute it there."""
    nodes = [helper.make_node("ReduceSum", ["mask", "one"], ["n"], keepdims=0),
             helper.make_node("Sub", ["n", "one"], ["m"]),
             helper.make_node("Cast", ["m"], ["seqlens"], to=TensorProto.INT32)]
    one = helper.make_tensor("one", TensorProto.INT64, [1], [1])
    model = helper.make_model(helper.make_graph(nodes, "mask", [helper.make_tensor_value_info("mask", 7, [2, 6])],
                                                [helper.make_tensor_value_info("seqlens", 6, [2])], [one]),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    feeds = {"mask": np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], I64)}
    (ours,) = run_on_cuda(model, feeds)
    np.testing.assert_array_equal(ours, np.array([3, 5], I32))


@pytest.mark.parametrize("x,to", [(np.array([[1.5, -2.0, np.inf]], F32), TensorProto.INT32),
                                  (np.array([0.25, -3.0], F16), TensorProto.INT16),
                                  (np.array([7, -1], I64), TensorProto.DOUBLE)])
def test_bit_cast(x, to):
    # an alias of the input's bytes (opset 26): exact
    model, _ = node_model("BitCast", [x], {"to": to}, 26, [helper.tensor_dtype_to_np_dtype(to)])
    skip_unless_stock_has("BitCast", model)
    check("BitCast", [x], {"to": to}, opset=26, outputs=[helper.tensor_dtype_to_np_dtype(to)], exact=True)


@pytest.mark.parametrize("shape", [(4, 4), (3, 5, 5), (2, 1, 1), (2, 2, 6, 6)])
def test_det(shape):
    # ours: LU in float64, rounded once; stock: float32 LU (both ~1e-6 relative from exact here)
    x = np.random.default_rng(5).standard_normal(shape).astype(F32)
    if shape[-1] > 1:
        first = x.reshape(-1, shape[-1], shape[-1])[0]  # a view
        first[1] = first[0]  # a singular matrix: 0 (stock's float32 LU leaves ~1e-7)
    check("Det", [x], opset=11, rtol=1e-4, atol=1e-5)


def test_det_float16():
    x = np.random.default_rng(6).standard_normal((3, 4, 4)).astype(F16)
    check("Det", [x], opset=11, rtol=2e-3, atol=2e-3, ref_in_float32=True)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint32, np.uint64])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bit_shift(dtype, direction):
    # unsigned integers on the GPU (graph inputs); a shift per column, then one for all
    x = np.random.default_rng(12).integers(0, 256, (3, 4)).astype(dtype)
    check("BitShift", [x, np.array([0, 1, 3, 7], dtype)], {"direction": direction}, opset=11, exact=True)
    check("BitShift", [x, np.array(2, dtype)], {"direction": direction}, opset=11, exact=True)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
def test_bit_shift_past_the_width(dtype):
    # bits shifted out give 0, as numpy and the CPU EP (stock ORT's C++ shift is undefined there, and it lacks
    # uint16): against numpy
    bits = 8 * np.dtype(dtype).itemsize
    x, y = np.array([1, 255, 7, 128], dtype), np.array([bits - 1, bits, bits + 1, 0], dtype)
    for direction, shift in (("LEFT", np.left_shift), ("RIGHT", np.right_shift)):
        (ours,) = run_on_cuda(*node_model("BitShift", [x, y], {"direction": direction}, 11))
        np.testing.assert_array_equal(ours, shift(x, y))


# plan/fusion.py's ReduceSumSubCast (tests/kernels/test_fusion.py: which patterns fuse): a decoder's seqlens_k in
# one launch, exact; int64 sums beyond int32's range keep their low 32 bits in the cast, as ORT's Cast does
@pytest.mark.parametrize("dtype,opset,keepdims,to", [(I64, 13, 0, np.int32), (I32, 11, 1, np.int64), (I64, 18, 1, np.int64)])
def test_a_mask_sum_less_one_cast_in_one_launch(dtype, opset, keepdims, to):
    from kernels.test_fusion import mask_lengths_model
    model, mask = mask_lengths_model(dtype, opset, keepdims, to=to)
    big = np.random.default_rng(6).integers(0, 1 << 40 if dtype == I64 else 1 << 20, mask.shape).astype(dtype)
    for x in (mask, big):
        (ours,), (ref,) = run_on_cuda(model, {"mask": x}), stock_session(model).run(None, {"mask": x})
        assert ours.dtype == ref.dtype and ours.shape == ref.shape
        np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("dtype", [F32, F16])
def test_fused_mish(dtype):
    """x * Tanh(Softplus(x)) runs as one Mish on the GPU (plan/fusion.py's `mish`); stock runs the three nodes."""
    from kernels.test_fusion import _mish_model
    x = np.concatenate([np.linspace(-30, 30, 64 * 7), [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-8, -1e-8, 88.0] * 8])
    feeds = {"x": x.reshape(-1, 64).astype(dtype)}
    model = _mish_model(dtype)
    (ours,), (ref,) = run_on_cuda(model, feeds), stock_session(model).run(None, feeds)
    # float16: stock rounds Softplus's and Tanh's results to float16, ours rounds once
    assert_close(ours, ref, *((1e-5, 1e-6) if dtype == F32 else (1e-3, 1e-3)))
