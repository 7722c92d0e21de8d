"""Parity of the linear-quantization ops (kernels/cpu/quantization.py) with stock ORT, in the
shapes QDQ models use: constant scales and zero points, per tensor, per axis and blocked; and of
com.microsoft MatMulNBits and GatherBlockQuantized (native/cpu/quantization.c)."""
import numpy as np
import pytest
from onnx import helper, numpy_helper

from parity import S8_UNSATURATED, assert_parity, check_node, single_node_model


rng = np.random.default_rng(7)


def check(op, inputs, out_dtypes, attrs=None, opset=21, const=()):
    return check_node(op, inputs, attrs, opset, out_dtypes, const)


@pytest.mark.parametrize("zp_dtype", [np.uint8, np.int8, np.uint16, np.int16])
def test_quantize_per_tensor(zp_dtype):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32) * 50
    zp = np.array(3, zp_dtype)
    check("QuantizeLinear", [x, np.array(0.37, np.float32), zp], [zp_dtype], const=(1, 2))


def test_quantize_rounds_halves_to_even_and_saturates():
    x = np.array([-300, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 127.5, 300], np.float32)
    check("QuantizeLinear", [x, np.array(1, np.float32), np.array(0, np.int8)], [np.int8], const=(1, 2))
    check("QuantizeLinear", [x, np.array(1, np.float32)], [np.uint8], const=(1,), opset=13)  # default uint8


def test_quantize_and_dequantize_per_axis():
    x = rng.standard_normal((2, 4, 3)).astype(np.float32)
    scale = np.array([0.01, 0.02, 0.05, 0.1], np.float32)
    zp = np.array([0, 10, -5, 3], np.int8)
    check("QuantizeLinear", [x, scale, zp], [np.int8], attrs={"axis": 1}, const=(1, 2))
    q = rng.integers(-128, 127, (2, 4, 3)).astype(np.int8)
    check("DequantizeLinear", [q, scale, zp], [np.float32], attrs={"axis": 1}, const=(1, 2))
    check("DequantizeLinear", [q, scale, zp], [np.float32], attrs={"axis": -2}, const=(1, 2))


def test_blocked():
    x = rng.standard_normal((3, 8)).astype(np.float32)
    scale = rng.uniform(0.01, 0.1, (3, 2)).astype(np.float32)
    zp = rng.integers(-3, 3, (3, 2)).astype(np.int8)
    check("QuantizeLinear", [x, scale, zp], [np.int8], attrs={"axis": 1, "block_size": 4}, const=(1, 2))
    q = rng.integers(-128, 127, (3, 8)).astype(np.int8)
    check("DequantizeLinear", [q, scale, zp], [np.float32], attrs={"axis": 1, "block_size": 4}, const=(1, 2))


def test_dequantize_int32_and_float16_scale():
    q = rng.integers(-1000, 1000, (5,)).astype(np.int32)
    check("DequantizeLinear", [q, np.array(0.5, np.float32)], [np.float32], const=(1,))
    q8 = rng.integers(0, 255, (6,)).astype(np.uint8)
    check("DequantizeLinear", [q8, np.array(0.25, np.float16), np.array(128, np.uint8)], [np.float16],
          const=(1, 2))


def test_dynamic_quantize_linear():
    x = rng.standard_normal((3, 5)).astype(np.float32)
    check("DynamicQuantizeLinear", [x], [np.uint8, np.float32, np.uint8], opset=11)
    check("DynamicQuantizeLinear", [np.abs(x)], [np.uint8, np.float32, np.uint8], opset=11)  # min clamps to 0
    check("DynamicQuantizeLinear", [np.zeros((2, 3), np.float32)], [np.uint8, np.float32, np.uint8], opset=11)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_matmul(dtype):
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, (2, 3, 8)).astype(dtype)
    b = rng.integers(info.min, info.max, (8, 4)).astype(dtype)
    scalars = [np.array(0.02, np.float32), np.array(3, dtype), np.array(0.01, np.float32), np.array(2, dtype),
               np.array(0.5, np.float32), np.array(1, dtype)]
    check("QLinearMatMul", [a, scalars[0], scalars[1], b, scalars[2], scalars[3], scalars[4], scalars[5]], [dtype],
          const=(1, 2, 3, 4, 5, 6, 7), opset=10)


@pytest.mark.parametrize("seed,per_column", [(3, False), (5, False), (6, True), (1, True)])
def test_qlinear_matmul_float16_scales(seed, per_column):
    """float16 scales: stock widens them and forms the multiplier in float32 (these seeds each have a product
    that float16 arithmetic rounds to another integer)."""
    r = np.random.default_rng(seed)
    a = r.integers(0, 255, (2, 3, 8)).astype(np.uint8)
    b = r.integers(0, 255, (8, 4)).astype(np.uint8)
    b_scale, b_zero = ((r.uniform(0.005, 0.02, 4).astype(np.float16), r.integers(0, 5, 4).astype(np.uint8))
                       if per_column else (np.array(0.01, np.float16), np.array(2, np.uint8)))
    h = lambda v: np.array(v, np.float16)
    check("QLinearMatMul", [a, h(0.02), np.array(3, np.uint8), b, b_scale, b_zero, h(0.5), np.array(1, np.uint8)],
          [np.uint8], const=(1, 2, 3, 4, 5, 6, 7), opset=21)


def test_qlinear_conv_and_conv_integer():
    x = rng.integers(0, 255, (1, 4, 6, 6)).astype(np.uint8)
    w = rng.integers(-128, 127, (6, 2, 3, 3)).astype(np.int8)
    attrs = {"group": 2, "pads": [1, 1, 1, 1], "strides": [2, 1]}
    check("ConvInteger", [x, w, np.array(128, np.uint8), np.array(0, np.int8)], [np.int32], attrs=attrs,
          const=(1, 2, 3), opset=10)
    w = rng.integers(*S8_UNSATURATED, (6, 2, 3, 3), endpoint=True).astype(np.int8)  # stock's AVX2 saturates beyond
    w_scale = rng.uniform(0.001, 0.01, 6).astype(np.float32)  # per output channel
    bias = rng.integers(-500, 500, 6).astype(np.int32)
    check("QLinearConv", [x, np.array(0.05, np.float32), np.array(128, np.uint8), w, w_scale,
                          np.zeros(6, np.int8), np.array(0.2, np.float32), np.array(120, np.uint8), bias],
          [np.uint8], attrs=attrs, const=(1, 2, 3, 4, 5, 6, 7, 8), opset=10)


# Parity tests for com.microsoft MatMulNBits and GatherBlockQuantized
# (kernels/cpu/quantization.py, native/cpu/quantization.c) against stock ORT's CPU EP.
#
# Every model here runs entirely on our EP (CPU fallback disabled). Tolerances: MatMulNBits sums
# up to K products of block-dequantized weights; with accuracy_level 4 both sides compute the same
# exact integer block dot products (MLAS's int8 path, which we reproduce) and differ only in the
# float order of the per-block scale products, otherwise both dequantize to float32 and differ by
# GEMM summation order: rtol 1e-5 with atol 2e-5 (outputs are O(1)) covers both.
# GatherBlockQuantized is exact ((q - zp) * scale, one rounding).

nbits_rng = np.random.default_rng(7)


MS = "com.microsoft"
TOL = {"rtol": 1e-5, "atol": 2e-5}


def pack(q, bits):
    """[..., n] values < 2**bits -> [..., n * bits / 8] uint8, low bits first."""
    if bits == 8:
        return q.astype(np.uint8)
    per = 8 // bits
    q = q.reshape(*q.shape[:-1], -1, per).astype(np.uint8)
    out = np.zeros(q.shape[:-1], np.uint8)
    for i in range(per):
        out |= q[..., i] << (bits * i)
    return out


def pack_padded(q, bits):
    """pack() of rows padded with zeros to whole bytes (as zero points are stored: a row per column)."""
    per = 8 // bits
    padded = np.zeros((*q.shape[:-1], -(-q.shape[-1] // per) * per), np.int64)
    padded[..., :q.shape[-1]] = q
    return pack(padded, bits)


def matmul_nbits_case(a_shape, K, N, bits, block_size, zp_mode=None, accuracy_level=None, bias=False,
                      const_b=True, dtype=np.float32):
    nb = -(-K // block_size)
    q = nbits_rng.integers(0, 2 ** bits, (N, nb, block_size))
    # weights of O(0.1) whatever the bit width, so outputs are O(1)
    scales = ((nbits_rng.random((N, nb)) * 0.05 + 0.005) * 8 / 2 ** (bits - 1)).astype(dtype)
    arrays = {"B": pack(q, bits), "scales": scales}
    names = ["A", "B", "scales"]
    if zp_mode == "uint8":
        arrays["zp"] = pack_padded(nbits_rng.integers(0, 2 ** bits, (N, nb)), bits)
        names.append("zp")
    elif zp_mode == "float":
        arrays["zp"] = (nbits_rng.random((N, nb)) * (2 ** bits - 1)).astype(np.float32)
        names.append("zp")
    if bias:
        names += [""] * (5 - len(names)) + ["bias"]
        arrays["bias"] = nbits_rng.standard_normal(N).astype(dtype)
    attrs = {"K": K, "N": N, "bits": bits, "block_size": block_size}
    if accuracy_level is not None:
        attrs["accuracy_level"] = accuracy_level
    a = nbits_rng.standard_normal(a_shape).astype(dtype)
    inputs = [(n, arrays[n].dtype if n in arrays else dtype, arrays[n].shape if n in arrays else a.shape)
              for n in names]
    inits = [numpy_helper.from_array(arrays[n], n) for n in names if n in arrays] if const_b else []
    model = single_node_model("MatMulNBits", inputs, [("Y", dtype, None)], attrs, domain=MS,
                              initializers=inits)
    feeds = {"A": a}
    if not const_b:
        feeds.update({n: arrays[n] for n in names if n in arrays})
    return model, feeds


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("block_size", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("accuracy_level", [None, 4])
@pytest.mark.parametrize("m", [1, 7, 13])  # 13: a prompt of 8 rows or more (32 columns a pass, then 4 rows)
def test_matmul_nbits_blocks(bits, block_size, accuracy_level, m):
    model, feeds = matmul_nbits_case((m, 512), 512, 96, bits, block_size, accuracy_level=accuracy_level)
    assert_parity(model, feeds, **TOL)


@pytest.mark.parametrize("bits,zp_mode", [(4, "uint8"), (4, "float"), (8, "uint8"), (2, None), (2, "uint8")])
@pytest.mark.parametrize("accuracy_level", [0, 1, 4])
def test_matmul_nbits_zero_points(bits, zp_mode, accuracy_level):
    model, feeds = matmul_nbits_case((3, 256), 256, 40, bits, 32, zp_mode=zp_mode, accuracy_level=accuracy_level)
    assert_parity(model, feeds, **TOL)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("accuracy_level", [0, 4])
@pytest.mark.parametrize("K,block_size", [(200, 16), (200, 32), (300, 128), (72, 64)])
def test_matmul_nbits_ragged_k(bits, accuracy_level, K, block_size):
    """K not a multiple of the block size (the last block is zero-padded)."""
    model, feeds = matmul_nbits_case((2, 3, K), K, 33, bits, block_size, zp_mode="uint8",
                                     accuracy_level=accuracy_level)
    assert_parity(model, feeds, **TOL)


@pytest.mark.parametrize("accuracy_level", [0, 4])
def test_matmul_nbits_bias_3d(accuracy_level):
    model, feeds = matmul_nbits_case((2, 5, 128), 128, 64, 4, 32, accuracy_level=accuracy_level, bias=True)
    assert_parity(model, feeds, **TOL)


def test_matmul_nbits_weights_as_inputs():
    model, feeds = matmul_nbits_case((1, 256), 256, 64, 4, 64, zp_mode="uint8", accuracy_level=4, const_b=False)
    assert_parity(model, feeds, **TOL)


def test_matmul_nbits_large_n_decode():
    """An lm_head-like GEMV: one row, many outputs (the native kernel splits N into tasks)."""
    model, feeds = matmul_nbits_case((1, 1, 256), 256, 5000, 4, 32, accuracy_level=4)
    assert_parity(model, feeds, **TOL)


@pytest.mark.parametrize("block_size", [32, 128])
def test_matmul_nbits_decode_columns_beyond_fours(block_size):
    """The 4-bit decode GEMV takes four columns a pass: the last N % 4 (and a task's) go to the general tile."""
    model, feeds = matmul_nbits_case((1, 1024), 1024, 103, 4, block_size, accuracy_level=4, bias=True)
    assert_parity(model, feeds, **TOL)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("block_size", [16, 32, 128])
@pytest.mark.parametrize("rows", [(2, 9), (3, 5)])
def test_matmul_nbits_prompt_columns_beyond_passes(bits, block_size, rows):
    """A prompt takes 32 columns a pass (quantization.c mnb_int8_wide_vnni), each task its share of whole passes: the
    last N % 32 go to the per-chunk tiles; the rows past a multiple of 4 (2, 3; 1 in test_matmul_nbits_blocks) one
    tile."""
    model, feeds = matmul_nbits_case((*rows, 512), 512, 1103, bits, block_size, accuracy_level=4, bias=True)
    assert_parity(model, feeds, **TOL)


def test_matmul_nbits_declines_prepacked():
    import onnxruntime_ep_seamless as seamless
    import onnxruntime as ort
    model, feeds = matmul_nbits_case((1, 64), 64, 16, 4, 32)
    model.graph.node[0].attribute.append(helper.make_attribute("weight_prepacked", 1))
    sess = ort.InferenceSession(model.SerializeToString(), seamless.session_options())
    report = seamless.partition_report(sess)
    assert any("weight_prepacked" in reason for reason in report.declined.values()), report


# --- GatherBlockQuantized ---------------------------------------------------------------------


def gbq_case(rows, cols, bits, block_size, zp, indices, quantize_axis=1):
    nb = cols // block_size
    q = nbits_rng.integers(0, 2 ** bits, (rows, cols))
    scales = (nbits_rng.random((rows, nb)) * 0.1 + 0.01).astype(np.float32)
    arrays = {"data": pack(q, bits), "scales": scales}
    names = ["data", "indices", "scales"]
    if zp:
        arrays["zp"] = pack_padded(nbits_rng.integers(0, 2 ** bits, (rows, nb)), bits)
        names.append("zp")
    inputs = [(n, arrays[n].dtype, arrays[n].shape) if n in arrays else ("indices", indices.dtype, indices.shape)
              for n in names]
    inits = [numpy_helper.from_array(arrays[n], n) for n in names if n in arrays]
    attrs = {"bits": bits, "block_size": block_size, "gather_axis": 0, "quantize_axis": quantize_axis}
    model = single_node_model("GatherBlockQuantized", inputs, [("Y", np.float32, None)], attrs, domain=MS,
                              initializers=inits)
    return model, {"indices": indices}


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("block_size", [16, 32, 128])
@pytest.mark.parametrize("zp", [False, True])
def test_gather_block_quantized(bits, block_size, zp):
    idx = np.array([[0, 5, 2], [63, 1, 1]], np.int64)
    model, feeds = gbq_case(64, 256, bits, block_size, zp, idx)
    assert_parity(model, feeds, rtol=0, atol=0)


def test_gather_block_quantized_int32_negative_indices():
    idx = np.array([3, -1, -64, 0], np.int32)
    model, feeds = gbq_case(64, 128, 4, 32, False, idx)
    assert_parity(model, feeds, rtol=0, atol=0)


def test_gather_block_quantized_out_of_range_gives_zeros():
    idx = np.array([[1, 64, -65]], np.int64)
    model, feeds = gbq_case(64, 64, 4, 32, True, idx)
    assert_parity(model, feeds, rtol=0, atol=0)


# --- the native kernel at each instruction-set level, against the numpy reference ---------------


@pytest.mark.parametrize("isa", [0, 1, 2], ids=["scalar", "avx2", "avx512vnni"])
@pytest.mark.parametrize("bits,block_size,zp", [(4, 16, None), (4, 32, "uint8"), (4, 128, None), (8, 32, None),
                                                (8, 64, "uint8"), (8, 16, None), (4, 256, "uint8")])
@pytest.mark.parametrize("m,k", [(1, 512), (6, 200)])
def test_native_int8_isa_levels(isa, bits, block_size, zp, m, k):
    """Direct kernel calls (no ORT): every code path reproduces the int8 arithmetic exactly up to
    float summation order. Levels the CPU lacks fall back to the best available one."""
    from onnxruntime_ep_seamless.kernels.cpu import native, quantization as quant
    n = 37
    nb = -(-k // block_size)
    q = nbits_rng.integers(0, 2 ** bits, (n, nb, block_size))
    B = pack(q, bits)
    scales = (nbits_rng.random((n, nb)) * 0.05 * 8 / 2 ** (bits - 1)).astype(np.float32)
    zero_points = None
    if zp:
        zero_points = pack_padded(nbits_rng.integers(0, 2 ** bits, (n, nb)), bits)
    a = nbits_rng.standard_normal((m, k)).astype(np.float32)
    ref = quant._matmul_nbits_numpy(a, B, scales, zero_points, bits, block_size, k, n, True)
    native.lib.seamless_matmul_nbits_set_isa(isa)
    try:
        y = native.matmul_nbits(a, B, scales, zero_points, None, bits, block_size, k, n, True)
    finally:
        native.lib.seamless_matmul_nbits_set_isa(-1)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=2e-5)


def test_gather_block_quantized_declines_quantize_axis_0():
    """ORT rejects uint8 data quantized along a non-last axis; we decline it with a reason."""
    import onnxruntime as ort

    import onnxruntime_ep_seamless as seamless
    rows, cols, bs = 64, 24, 16
    data = nbits_rng.integers(0, 256, (rows, cols)).astype(np.uint8)
    scales = (nbits_rng.random((rows // bs, cols)) * 0.1).astype(np.float32)
    inputs = [("data", np.uint8, data.shape), ("indices", np.int64, (1,)), ("scales", np.float32, scales.shape)]
    inits = [numpy_helper.from_array(data, "data"), numpy_helper.from_array(scales, "scales")]
    model = single_node_model("GatherBlockQuantized", inputs, [("Y", np.float32, None)],
                              {"bits": 8, "block_size": bs, "gather_axis": 0, "quantize_axis": 0}, domain=MS,
                              initializers=inits)
    sess = ort.InferenceSession(model.SerializeToString(), seamless.session_options())
    report = seamless.partition_report(sess)
    assert any("quantize_axis" in r for r in report.declined.values()), report


@pytest.mark.parametrize("bits,zp", [(4, False), (4, True), (8, True)])
def test_gather_block_quantized_numpy_reference_matches_native(bits, zp, monkeypatch):
    from onnxruntime_ep_seamless.kernels.cpu import native, quantization as quant
    rows, cols, bs = 50, 128, 32
    q = nbits_rng.integers(0, 2 ** bits, (rows, cols))
    data, scales = pack(q, bits), nbits_rng.random((rows, cols // bs)).astype(np.float32)
    zero_points = pack(nbits_rng.integers(0, 2 ** bits, (rows, cols // bs)), bits) if zp else None
    idx = np.array([[1, -1, 49, 50, -51, 7]], np.int64)
    kw = dict(bits=bits, block_size=bs, quantize_axis=1)
    (native_out,) = quant.gather_block_quantized(data, idx, scales, zero_points, **kw)
    monkeypatch.setattr(native, "HAS_GATHER_BLOCK_QUANTIZED", False)
    (numpy_out,) = quant.gather_block_quantized(data, idx, scales, zero_points, **kw)
    np.testing.assert_array_equal(native_out, numpy_out)


def _panels_apply(n, k, bits, block_size):
    from onnxruntime_ep_seamless.kernels.cpu import native
    return bool(native.lib.seamless_matmul_nbits_panels(n, k, bits, block_size))


@pytest.mark.parametrize("isa", [1, 2])
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("block_size", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("m", [1, 2, 3, 5, 8, 13])
@pytest.mark.parametrize("zp", [False, True])
@pytest.mark.parametrize("int8", [True, False])
def test_native_panels(isa, bits, block_size, m, zp, int8):
    """Weights packed as 32-column panels (native.nbits_panels) give the row layout's arithmetic, int8 on each
    instruction set (2: AVX-512 VNNI, tiles of 4 rows, then 3/2/1; 1: AVX2, 2 rows, then 1) and float32 (tiles of 4
    rows, then 1), every row count, zero points or the default, and the columns past the last panel (70 = 2 x 32 + 6,
    kept as rows); the arrays given are left as they were."""
    from onnxruntime_ep_seamless.kernels.cpu import native, quantization as quant
    n, k = 70, 512
    if not _panels_apply(n, k, bits, block_size):
        pytest.skip("this CPU's int8 kernels read no panels (no AVX2)")
    nb = k // block_size
    B = pack(nbits_rng.integers(0, 2 ** bits, (n, nb, block_size)), bits)
    scales = (nbits_rng.random((n, nb)) * 0.05 * 8 / 2 ** (bits - 1)).astype(np.float32)
    bias = nbits_rng.standard_normal(n).astype(np.float32)
    zero_points = pack_padded(nbits_rng.integers(0, 2 ** bits, (n, nb)), bits) if zp else None
    zp_f32 = quant._zero_points(zero_points, bits, n, nb) if zp else None
    kept = B.copy(), scales.copy(), None if zp_f32 is None else zp_f32.copy()
    a = nbits_rng.standard_normal((m, k)).astype(np.float32)
    pb, ps, pz = native.nbits_panels(B, scales, zp_f32, bits, block_size, k, n)
    np.testing.assert_array_equal(B, kept[0])
    np.testing.assert_array_equal(scales, kept[1])
    np.testing.assert_array_equal(zp_f32, kept[2])
    ref = quant._matmul_nbits_numpy(a, B, scales, zero_points, bits, block_size, k, n, int8) + bias
    native.lib.seamless_matmul_nbits_set_isa(isa)  # a level the CPU lacks: its best
    try:
        y = native.matmul_nbits(a, pb, ps, pz, bias, bits, block_size, k, n, int8, panels=True)
    finally:
        native.lib.seamless_matmul_nbits_set_isa(-1)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=2e-5)


def _panel_layout(B, scales, bits):
    """The panel layout written out in numpy: in panel p, word w (4 bytes) of column i at byte
    w * 128 + (i // 16) * 64 + (i % 16) * 4, block b's scale of column i at float b * 32 + i."""
    n, row_bytes = B.shape[0], B[0].size
    rows = B.reshape(n, row_bytes)
    pb, ps = rows.copy(), scales.reshape(n, -1).copy()
    for p in range(n // 32):
        words = rows[p * 32:(p + 1) * 32].reshape(2, 16, row_bytes // 4, 4).transpose(2, 0, 1, 3)
        pb[p * 32:(p + 1) * 32] = words.reshape(32, row_bytes)
        ps[p * 32:(p + 1) * 32] = ps[p * 32:(p + 1) * 32].T.reshape(32, -1)
    return pb.reshape(B.shape), ps.reshape(scales.shape)


@pytest.mark.parametrize("zp", [False, True])
def test_panels_replace_the_row_layout_at_compile(zp):
    """plan/fusion.py (kernels/cpu/quantization.py with_panels): a MatMulNBits of the int8 path reads its weights as
    panels, the layout written out above (uint8 zero points as float32 panels of the scales' layout); the row
    layout's copies leave the graph."""
    from onnxruntime_ep_seamless.graph.onnx_import import import_model
    from onnxruntime_ep_seamless.kernels.cpu import quantization as quant
    from onnxruntime_ep_seamless.plan.fusion import fuse
    if not _panels_apply(70, 256, 4, 32):
        pytest.skip("this CPU's int8 kernels read no panels (no AVX2)")
    model, _ = matmul_nbits_case((1, 256), 256, 70, 4, 32, accuracy_level=4, zp_mode="uint8" if zp else None)
    graph = import_model(model)
    B, scales = graph.value("B").const.copy(), graph.value("scales").const.copy()  # (packed in place)
    zero_points = graph.value("zp").const if zp else None
    (node,) = fuse(graph, graph.outputs, "cpu")
    assert node.attrs["panels"] == 1 and node.inputs == ["A", "B.panels", "scales.panels"] + ["zp.panels"] * zp
    want = _panel_layout(B, scales, 4)
    np.testing.assert_array_equal(graph.value("B.panels").const, want[0])
    np.testing.assert_array_equal(graph.value("scales.panels").const, want[1])
    if zp:
        want_zp = _panel_layout(B, quant._zero_points(zero_points, 4, 70, 8), 4)[1]
        np.testing.assert_array_equal(graph.value("zp.panels").const, want_zp)
        assert graph.value("zp").const is None
    assert graph.value("B").const is None and graph.value("scales").const is None


def test_panels_only_where_every_reader_reads_panels():
    """Float zero points, 2-bit weights or a CUDA plan keep the row layout; so does B read by an op that reads no
    panels. A tied LM head (B also the embedding table, GatherBlockQuantized through a Reshape) is packed, its gather
    reading the panels: parity either way."""
    from onnxruntime_ep_seamless.graph.onnx_import import import_model
    from onnxruntime_ep_seamless.plan.fusion import fuse
    if not _panels_apply(64, 256, 4, 32):
        pytest.skip("this CPU's int8 kernels read no panels (no AVX2)")
    for kw, device in [(dict(zp_mode="float", accuracy_level=4), "cpu"), (dict(accuracy_level=4, bits=2), "cpu"),
                       (dict(accuracy_level=4), "cuda")]:
        model, _ = matmul_nbits_case((1, 256), 256, 64, kw.pop("bits", 4), 32, **kw)
        graph = import_model(model)
        assert "panels" not in fuse(graph, graph.outputs, device)[0].attrs
    for other_reader, folded in [(False, False), (False, True), (True, False)]:
        model, feeds = tied_lm_head_model(other_reader=other_reader, folded=folded)
        graph = import_model(model)
        nodes = fuse(graph, graph.outputs, "cpu")
        packed = {n.op_type: n for n in nodes if {"B.panels", "B.panels.table", "scales.panels"} & set(n.inputs)}
        if other_reader:
            assert not packed
        else:
            assert sorted(packed) == ["GatherBlockQuantized", "MatMulNBits"] + ([] if folded else ["Reshape"])
            assert packed["MatMulNBits"].attrs["panels"] == packed["GatherBlockQuantized"].attrs["panels"] == 1
            if folded:  # the gather reads the panels, the folded copy of B is freed
                assert packed["GatherBlockQuantized"].inputs[0] == "B.panels.table"
                assert graph.value("table").const is None
        assert_parity(model, feeds, **TOL)


def tied_lm_head_model(vocab=96, hidden=256, block_size=32, other_reader=False, folded=False):
    """A decoder's tied embeddings: GatherBlockQuantized reads the LM head's 4-bit weights and scales (as the model
    builder's int4 export with tie_word_embeddings): ids -> rows -> logits, the ids from row 0 to the last (past the
    last whole 32 rows: a row kept as it is). other_reader: B's shape an output too; folded: the table a copy of B's
    bytes instead of its Reshape (what ORT's constant folding leaves)."""
    nb = hidden // block_size
    B = pack(nbits_rng.integers(0, 16, (vocab + 5, nb, block_size)), 4)
    scales = (nbits_rng.random((vocab + 5, nb)) * 0.05 + 0.005).astype(np.float32)
    vocab += 5
    nodes = [helper.make_node("Reshape", ["B", "table_shape"], ["table"]),
             helper.make_node("GatherBlockQuantized", ["table", "ids", "scales"], ["x"], domain=MS, bits=4,
                              block_size=block_size, gather_axis=0, quantize_axis=1),
             helper.make_node("MatMulNBits", ["x", "B", "scales"], ["logits"], domain=MS, K=hidden, N=vocab, bits=4,
                              block_size=block_size, accuracy_level=4)]
    outputs = [helper.make_tensor_value_info("logits", 1, None)]
    if other_reader:
        nodes.append(helper.make_node("Shape", ["B"], ["b_shape"]))
        outputs.append(helper.make_tensor_value_info("b_shape", 7, None))
    inits = [numpy_helper.from_array(B, "B"), numpy_helper.from_array(scales, "scales"),
             numpy_helper.from_array(np.array([0, -1], np.int64), "table_shape")]
    if folded:
        nodes, inits = nodes[1:], inits[:2] + [numpy_helper.from_array(B.reshape(vocab, -1), "table")]
    graph = helper.make_graph(nodes, "tied", [helper.make_tensor_value_info("ids", 7, [1, 6])], outputs,
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)],
                              ir_version=9)
    return model, {"ids": np.array([[0, 5, vocab - 1, 17, 5, 63]], np.int64)}


def test_matmul_nbits_wrong_weight_size_is_an_error():
    from onnxruntime_ep_seamless.kernels.cpu import quantization as quant
    a = nbits_rng.standard_normal((1, 64)).astype(np.float32)
    B = np.zeros((16, 2, 15), np.uint8)  # 16 bytes per block expected
    with pytest.raises(ValueError, match="B has"):
        quant.matmul_nbits(a, B, np.ones((16, 2), np.float32), K=64, N=16, bits=4, block_size=32, accuracy_level=4)


def swiglu_nbits_model(K, N, block_size, zero_points=False, dtype=np.float32, m=3, silu="sigmoid", gate_out=False,
                       matmul=False):
    """An LLM MLP's gate: Mul(silu(MatMulNBits(A, gate)), MatMulNBits(A, up)), 4-bit (or with matmul,
    MatMuls by float matrices), silu as Sigmoid(g) * g or QuickGelu(g); gate_out: the gate's product is
    a graph output too. (model, feeds)"""
    nb = -(-K // block_size)
    weights, names = [], {}
    for w in ("gate", "up") if matmul else ():
        weights.append(numpy_helper.from_array((nbits_rng.standard_normal((K, N)) * 0.2).astype(dtype), f"{w}_w"))
        names[w] = [f"{w}_w"]
    for w in () if matmul else ("gate", "up"):
        q = pack(nbits_rng.integers(0, 16, (N, nb, block_size)), 4)
        scales = ((nbits_rng.random((N, nb)) * 0.05 + 0.005) * 2).astype(dtype)
        weights += [numpy_helper.from_array(q, f"{w}_q"), numpy_helper.from_array(scales, f"{w}_scales")]
        names[w] = [f"{w}_q", f"{w}_scales"]
        if zero_points:
            zp = np.zeros((N, -(-nb // 2) * 2), np.int64)
            zp[:, :nb] = nbits_rng.integers(0, 16, (N, nb))
            weights.append(numpy_helper.from_array(pack(zp, 4), f"{w}_zp"))
            names[w].append(f"{w}_zp")
    attrs = {"K": K, "N": N, "bits": 4, "block_size": block_size}
    op = (lambda w, out: helper.make_node("MatMul", ["A"] + names[w], [out])) if matmul else \
        (lambda w, out: helper.make_node("MatMulNBits", ["A"] + names[w], [out], domain=MS, **attrs))
    nodes = [op("gate", "g"), op("up", "u")]
    if silu == "sigmoid":
        nodes += [helper.make_node("Sigmoid", ["g"], ["s"]), helper.make_node("Mul", ["g", "s"], ["silu"])]
    else:
        nodes.append(helper.make_node("QuickGelu", ["g"], ["silu"], domain=MS, alpha=1.0))
    nodes.append(helper.make_node("Mul", ["silu", "u"], ["Y"]))
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    outputs = [helper.make_tensor_value_info("Y", t, [m, N])] + \
        ([helper.make_tensor_value_info("g", t, [m, N])] if gate_out else [])
    typed = [helper.make_tensor_value_info(n, t, [m, N]) for n in ("s", "silu", "u") + (() if gate_out else ("g",))]
    graph = helper.make_graph(nodes, "swiglu", [helper.make_tensor_value_info("A", t, [m, K])], outputs,
                              initializer=weights, value_info=typed)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)],
                              ir_version=9)
    return model, {"A": nbits_rng.standard_normal((m, K)).astype(dtype)}


def normed_product_model(product, norm="skip", K=64, N=40, m=1, dtype=np.float16, block_size=32):
    """An LLM's RMS norm feeding a product: SkipSimplifiedLayerNormalization(X, S, gamma) with its sum output R
    (norm="skip"), SimplifiedLayerNormalization(X, gamma) ("simple") or RMSNormalization ("rms"), read only by "nbits" (MatMulNBits),
    "matmul" (MatMul by a constant), or the SwiGLU of two ("nbits_swiglu", "matmul_swiglu"). (model, feeds)"""
    matmul = product.startswith("matmul")
    model, _ = swiglu_nbits_model(K, N, block_size, True, dtype, m, matmul=matmul)
    g = model.graph
    if not product.endswith("swiglu"):  # the gate's product alone, as Y
        keep = [n for n in g.node if "gate_w" in n.input or "gate_q" in n.input]
        keep[0].output[0] = "Y"
        if not matmul:  # as ORT shows the node to an EP: with every attribute's default
            keep[0].attribute.append(helper.make_attribute("weight_prepacked", 0))
        del g.node[:]
        g.node.extend(keep)
        del g.value_info[:]
        kept = [t for t in g.initializer if t.name in set(keep[0].input)]
        del g.initializer[:]
        g.initializer.extend(kept)
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    g.initializer.append(numpy_helper.from_array((nbits_rng.random(K) + 0.5).astype(dtype), "gamma"))
    if norm == "skip":
        g.node.insert(0, helper.make_node("SkipSimplifiedLayerNormalization", ["X", "S", "gamma"], ["A", "", "", "R"],
                                          domain=MS, epsilon=1e-6))
        g.output.append(helper.make_tensor_value_info("R", t, [m, K]))
    else:  # SimplifiedLayerNormalization, or ONNX's RMSNormalization (opset 23, torch's exports)
        op = "RMSNormalization" if norm == "rms" else "SimplifiedLayerNormalization"
        g.node.insert(0, helper.make_node(op, ["X", "gamma"], ["A"], epsilon=1e-6, axis=-1))
        if norm == "rms":
            model.opset_import[0].version = 23
    g.value_info.append(helper.make_tensor_value_info("A", t, [m, K]))
    inputs = ["X", "S"] if norm == "skip" else ["X"]
    del g.input[:]
    g.input.extend(helper.make_tensor_value_info(n, t, [m, K]) for n in inputs)
    return model, {n: nbits_rng.standard_normal((m, K)).astype(dtype) for n in inputs}
