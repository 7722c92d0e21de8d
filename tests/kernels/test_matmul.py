"""Parity of MatMul, Gemm, MatMulInteger and Einsum with stock ORT."""
import numpy as np
import pytest

from parity import S8_UNSATURATED, Const, check_node, run_ours, single_node_model

rng = np.random.default_rng(2)
RTOL, ATOL = 1e-5, 1e-5  # BLAS and MLAS sum in different orders; small K keeps that within 1e-5
F16 = dict(rtol=2e-3, atol=2e-3)  # float16 output rounding (11-bit mantissa) after a float32 dot product


def parity(op, *args, out=None, attrs=None, opset=17, rtol=RTOL, atol=ATOL):
    """One-node parity (tests/parity.py check_node); out: output dtype(s), default the first input's."""
    return check_node(op, list(args), attrs, opset, out if isinstance(out, list) or out is None else [out],
                      rtol=rtol, atol=atol)


def rand(shape, dtype=np.float32, low=-1.0, high=1.0):
    if np.dtype(dtype).kind in "iu":
        return rng.integers(low, high, size=shape, endpoint=True).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)


# ---------------------------------------------------------------- MatMul

SHAPES = [
    ((3, 4), (4, 5)),
    ((2, 3, 4), (4, 5)),           # batched @ matrix
    ((2, 1, 3, 4), (3, 4, 2)),     # batch broadcasting
    ((4,), (4, 5)),                # 1-D left: promoted to a row, the axis dropped
    ((2, 3, 4), (4,)),             # 1-D right: promoted to a column, the axis dropped
    ((4,), (4,)),                  # dot product -> scalar
    ((3, 0), (0, 5)),              # K = 0: zeros
    ((0, 4), (4, 2)),
]


@pytest.mark.parametrize("sa,sb", SHAPES)
def test_matmul_shapes(sa, sb):
    parity("MatMul", rand(sa), rand(sb))


@pytest.mark.parametrize("opset", [1, 9, 13])
def test_matmul_opsets(opset):
    parity("MatMul", rand((3, 4)), rand((4, 2)), opset=opset)


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int64, np.uint32, np.uint64])
def test_matmul_types(dtype):
    parity("MatMul", rand((2, 3, 4), dtype, 0, 9), rand((4, 5), dtype, 0, 9))


def test_matmul_float16():
    parity("MatMul", rand((2, 3, 8), np.float16), rand((8, 5), np.float16), **F16)


def test_matmul_constant_weight():
    parity("MatMul", rand((5, 6)), Const(rand((6, 3))))


@pytest.mark.parametrize("m", [1, 3, 4, 5, 8, 11, 12, 13, 16, 20, 23, 24, 25, 36])
@pytest.mark.parametrize("n", [1, 16, 17, 31, 32, 33, 64, 65, 96])
@pytest.mark.parametrize("isa", [-1, 1, 0], ids=["auto", "avx2", "plain"])
def test_native_sgemm_tiles(m, n, isa):
    """The native GEMM's tiles (matmul.c) on each instruction set this CPU has: rows by 12, 8, 4 and 1 (A read in
    place) with AVX-512, by 6 and 4 with AVX2, by 4 in plain C; one or two panels of 16 columns, whole or cut, with
    and without bias, against a float64 product. Constant B: the packed path."""
    from onnxruntime_ep_seamless.kernels.cpu import native
    native.lib.seamless_sgemm_set_isa(isa)
    try:
        for k in (1, 7, 64):
            a, b, bias = rand((m, k)), rand((k, n)), rand((n,))
            want = a.astype(np.float64) @ b.astype(np.float64)
            packed = native.pack_b(b)
            np.testing.assert_allclose(native.sgemm(a, packed, n), want, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(native.sgemm(a, packed, n, bias), want + bias, rtol=1e-5, atol=1e-5)
    finally:
        native.lib.seamless_sgemm_set_isa(-1)


@pytest.mark.parametrize("m,k,n", [(13, 1024, 300), (25, 1536, 1030), (13, 8, 16400)])
@pytest.mark.parametrize("isa", [-1, 1], ids=["auto", "avx2"])
def test_native_sgemm_packing_a_for_the_product(m, k, n, isa):
    """Products whose A the GEMM packs per call (matmul.c pack_a_pays: rows 4 KB or 2 KB apart, and the widest;
    with AVX2 every product of 1 M MACs and 64+ columns)."""
    from onnxruntime_ep_seamless.kernels.cpu import native
    a, b, bias = rand((m, k)), rand((k, n)), rand((n,))
    native.lib.seamless_sgemm_set_isa(isa)
    try:
        y = native.sgemm(a, native.pack_b(b), n, bias)
    finally:
        native.lib.seamless_sgemm_set_isa(-1)
    np.testing.assert_allclose(y, a.astype(np.float64) @ b + bias, rtol=1e-5,
                               atol=1e-7 * k)  # float32 sums of k terms of magnitude <= 1: ~k eps each


def _amx_or_skip(k, n):
    from onnxruntime_ep_seamless.kernels.cpu import native
    if not native.lib.seamless_sgemm_split_size(k, n):
        pytest.skip("no AMX tiles on this machine (or the kernel does not let the process use them)")
    return native


def _sgemm_on(native, isa, *args):
    native.lib.seamless_sgemm_set_isa(isa)
    try:
        return native.sgemm(*args)
    finally:
        native.lib.seamless_sgemm_set_isa(-1)


@pytest.mark.parametrize("m,k,n", [(128, 384, 384), (96, 100, 200), (120, 70, 480), (64, 1536, 96)])
def test_native_sgemm_amx_tiles_keep_float32_accuracy(m, k, n):
    """matmul.c's AMX path: A and B split into three bf16 each, six products summed on the tiles; rows, depth and
    columns cut short of the 32-wide blocks. As close to the float64 product as the float32 tiles (the split is
    exact, the dropped products below float32's rounding), and not the float32 tiles' bits (the tiles ran)."""
    native = _amx_or_skip(k, n)
    a, b, bias = rand((m, k)), rand((k, n)), rand((n,))
    packed = native.pack_b(b)
    split = native.split_b(packed, k, n)
    want = a.astype(np.float64) @ b.astype(np.float64) + bias
    amx = _sgemm_on(native, 3, a, packed, n, bias, split)
    fma = _sgemm_on(native, 2, a, packed, n, bias, split)
    fma_error = np.abs(fma - want).max()
    assert np.abs(amx - want).max() <= 1.5 * fma_error, (np.abs(amx - want).max(), fma_error)
    assert not np.array_equal(amx, fma)


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan])
def test_native_sgemm_amx_leaves_non_finite_values_to_the_float32_tiles(value):
    """inf - inf does not split: a B holding an infinity or NaN gets no split, a product whose A holds one runs the
    float32 tiles (the same bits), so inf, -inf and NaN come out where float32 products put them."""
    native = _amx_or_skip(128, 64)
    a, b = rand((64, 128)), rand((128, 64))
    packed = native.pack_b(b)
    split = native.split_b(packed, 128, 64)
    a[5, 7] = value
    np.testing.assert_array_equal(_sgemm_on(native, 3, a, packed, 64, None, split),
                                  _sgemm_on(native, 2, a, packed, 64, None, split))
    b[9, 3] = value
    assert native.split_b(native.pack_b(b), 128, 64) is None


def test_native_sgemm_refuses_a_split_of_another_shape():
    """The C tiles trust the split's extent: the wrapper checks it holds K x n (another K's, or a uint8 array of the
    same bytes, is refused before any memory is read)."""
    native = _amx_or_skip(128, 64)
    a, packed = rand((64, 128)), native.pack_b(rand((128, 64)))
    other = native.split_b(native.pack_b(rand((96, 64))), 96, 64)
    with pytest.raises(ValueError, match="split B does not hold 128 x 64"):
        native.sgemm(a, packed, 64, None, other)
    with pytest.raises(ValueError, match="uint16"):
        native.sgemm(a, packed, 64, None, native.split_b(packed, 128, 64).view(np.uint8)[::2])


def test_native_sgemm_amx_is_off_with_seamless_amx_0(monkeypatch):
    """SEAMLESS_AMX=0: no split is made (no memory for it), so every product runs the float32 tiles."""
    native = _amx_or_skip(128, 64)
    packed = native.pack_b(rand((128, 64)))
    assert native.split_b(packed, 128, 64) is not None
    monkeypatch.setenv("SEAMLESS_AMX", "off")
    assert native.split_b(packed, 128, 64) is None


def test_native_sgemm_amx_takes_rows_in_groups():
    """A product whose split A exceeds one group (matmul.c AMX_A_BYTES: 128 rows at K 2048) goes a group at a time;
    a group whose A holds an infinity runs the float32 tiles, the other groups stay on the AMX tiles."""
    m, k, n = 300, 2048, 64
    native = _amx_or_skip(k, n)
    a, b = rand((m, k)), rand((k, n))
    packed = native.pack_b(b)
    split = native.split_b(packed, k, n)
    want = a.astype(np.float64) @ b.astype(np.float64)
    amx = _sgemm_on(native, 3, a, packed, n, None, split)
    np.testing.assert_allclose(amx, want, rtol=0, atol=1.5 * np.abs(_sgemm_on(native, 2, a, packed, n) - want).max())
    a[200, 5] = np.inf
    amx, fma = _sgemm_on(native, 3, a, packed, n, None, split), _sgemm_on(native, 2, a, packed, n)
    np.testing.assert_array_equal(amx[128:256], fma[128:256])
    assert not np.array_equal(amx[:128], fma[:128]) and not np.array_equal(amx[256:], fma[256:])


# ---------------------------------------------------------------- Gemm

@pytest.mark.parametrize("transA", [0, 1])
@pytest.mark.parametrize("transB", [0, 1])
def test_gemm_transposes(transA, transB):
    a = rand((4, 3) if transA else (3, 4))
    b = rand((5, 4) if transB else (4, 5))
    parity("Gemm", a, b, rand((3, 5)), attrs={"transA": transA, "transB": transB})


@pytest.mark.parametrize("c_shape", [(3, 5), (5,), (1, 5), (3, 1), (1,), ()])
def test_gemm_c_broadcast(c_shape):
    parity("Gemm", rand((3, 4)), rand((4, 5)), rand(c_shape), attrs={"alpha": 0.5, "beta": 2.0})


@pytest.mark.parametrize("opset", [7, 9, 11, 13])
def test_gemm_opsets(opset):
    parity("Gemm", rand((3, 4)), rand((4, 5)), rand((5,)), opset=opset)
    parity("Gemm", rand((3, 4)), rand((5, 4)), rand((3, 5)), attrs={"transB": 1, "alpha": 1.5}, opset=opset)


def test_gemm_without_c():
    parity("Gemm", rand((3, 4)), rand((4, 5)), opset=11)
    parity("Gemm", rand((3, 4)), rand((4, 5)), None, attrs={"alpha": 3.0}, opset=13)


def test_gemm_beta_zero_ignores_c():
    c = np.full((3, 5), np.nan, np.float32)
    parity("Gemm", rand((3, 4)), rand((4, 5)), c, attrs={"beta": 0.0})


def test_gemm_types_and_constants():
    parity("Gemm", rand((3, 4), np.float64), rand((4, 5), np.float64), rand((5,), np.float64))
    parity("Gemm", rand((3, 4), np.float16), rand((4, 5), np.float16), rand((5,), np.float16), **F16)
    parity("Gemm", rand((3, 4)), Const(rand((5, 4))), Const(rand((5,))), attrs={"transB": 1})


# ---------------------------------------------------------------- MatMulInteger

@pytest.mark.parametrize("ta,tb", [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8),
                                   (np.int8, np.uint8)])
def test_matmul_integer(ta, tb):
    lo_a, hi_a = (0, 255) if ta == np.uint8 else (-128, 127)
    lo_b, hi_b = (0, 255) if tb == np.uint8 else S8_UNSATURATED if ta == np.uint8 else (-128, 127)
    a, b = rand((3, 4, 6), ta, lo_a, hi_a), rand((6, 5), tb, lo_b, hi_b)
    parity("MatMulInteger", a, b, out=np.int32, opset=10)
    parity("MatMulInteger", a, b, np.array(7, ta), np.array(3, tb), out=np.int32)
    parity("MatMulInteger", a, b, None, rand((5,), tb, lo_b, hi_b), out=np.int32)   # per-column B
    parity("MatMulInteger", a, b, Const(np.array([12], ta)), None, out=np.int32)


def test_matmul_integer_is_exact_over_the_full_range():
    """uint8 x int8 at the extremes, where stock ORT's AVX2 kernel saturates (tests/parity.py): ours is the
    exact int32 product, as the spec defines it."""
    a = np.concatenate([np.full((2, 6), 255, np.uint8), rand((3, 6), np.uint8, 0, 255)])
    b = np.concatenate([np.full((6, 2), -128, np.int8), np.full((6, 1), 127, np.int8), rand((6, 2), np.int8, -128, 127)],
                       axis=1)
    model = single_node_model("MatMulInteger", [("a", np.uint8, a.shape), ("b", np.int8, b.shape)],
                              [("y", np.int32, None)], opset=10)
    (y,) = run_ours(model, {"a": a, "b": b})
    np.testing.assert_array_equal(y, a.astype(np.int32) @ b.astype(np.int32))


def test_matmul_integer_1d():
    parity("MatMulInteger", rand((6,), np.uint8, 0, 255), rand((6, 3), np.uint8, 0, 255), out=np.int32)


# ---------------------------------------------------------------- Einsum

EQUATIONS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),                          # implicit output: trace
    ("ij,kj", [(3, 4), (5, 4)]),               # implicit output: letters once, sorted -> ik
    ("i,j->ij", [(3,), (4,)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("ijk->", [(2, 3, 4)]),
    ("i j , j k -> i k", [(3, 4), (4, 2)]),  # spaces are allowed
]


@pytest.mark.parametrize("equation,shapes", EQUATIONS)
def test_einsum(equation, shapes):
    parity("Einsum", *[rand(s) for s in shapes], attrs={"equation": equation}, opset=12)


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int64])
def test_einsum_types(dtype):
    parity("Einsum", rand((2, 3), dtype, -5, 5), rand((3, 4), dtype, -5, 5), attrs={"equation": "ij,jk->ik"})
    parity("Einsum", rand((3, 3), dtype, -5, 5), attrs={"equation": "ii->"})


def test_det():
    parity("Det", rand((4, 4)), opset=11, rtol=1e-4, atol=1e-5)
    parity("Det", rand((2, 3, 3, 3)), opset=11, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("threads", [False, True])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int8, np.int64])
@pytest.mark.parametrize("shape", [(70, 33), (1, 5), (33, 1), (0, 4), (64, 96), (130, 7)])
def test_native_transpose_2d_is_the_transposed_copy(dtype, shape, threads, monkeypatch):
    # kernels/cpu/native.transpose_2d (elementwise.c, tiles of 32): plan/fusion.py's Linear weights, W.T contiguous;
    # large ones in blocks of rows on several threads (here any size: TRANSPOSE_SHARE 1 byte)
    from onnxruntime_ep_seamless.kernels.cpu import native
    from onnxruntime_ep_seamless.kernels.cpu.native import transpose_2d
    if threads:
        monkeypatch.setattr(native, "TRANSPOSE_SHARE", 1)
        monkeypatch.setattr(native.os, "cpu_count", lambda: 3)
    x = rand(shape, dtype, -100, 100)
    y = transpose_2d(x[:, ::-1][:, ::-1])  # a view: made contiguous first
    assert y.flags.c_contiguous and y.dtype == x.dtype
    np.testing.assert_array_equal(y, x.T)
