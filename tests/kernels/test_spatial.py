"""Parity tests for convolution, pooling, Resize/Upsample and the sampling ops (GridSample, AffineGrid, Col2Im,
DeformConv) (kernels/cpu/spatial.py) against stock ORT.

Conv-like ops sum many products in a different order than ORT's MLAS kernels (im2col + BLAS vs
direct/Winograd-free GEMM tiling), so they are compared with rtol 1e-4 instead of 1e-5.
"""
import pathlib

import numpy as np
import pytest

from parity import check_node


rng = np.random.default_rng(1)
I64 = np.int64
CONV_TOL = {"rtol": 1e-4, "atol": 1e-5}
CPUINFO = pathlib.Path("/proc/cpuinfo")
AVX512 = CPUINFO.exists() and " avx512f" in CPUINFO.read_text()  # where spatial.c's AVX-512 paths run


check = check_node


def data(shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# --- Conv ----------------------------------------------------------------------------------

CONV_CASES = [
    # x shape, w shape, attrs
    ((1, 3, 7, 7), (4, 3, 3, 3), {}),
    ((2, 3, 7, 8), (4, 3, 3, 2), {"pads": [1, 0, 2, 1], "strides": [2, 1]}),
    ((1, 4, 9, 9), (6, 2, 3, 3), {"group": 2, "dilations": [2, 1], "pads": [1, 1, 1, 1]}),
    ((1, 4, 6, 6), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),  # depthwise (spatial.c's own loop)
    ((2, 3, 9, 11), (3, 1, 3, 3), {"group": 3, "strides": [2, 2], "pads": [0, 1, 2, 1]}),
    ((1, 4, 8, 8), (4, 1, 5, 3), {"group": 4, "dilations": [2, 3], "pads": [4, 2, 1, 3]}),
    ((1, 2, 2, 2), (2, 1, 3, 3), {"group": 2, "pads": [3, 3, 3, 3]}),  # outputs whose taps are all padding
    ((1, 3, 12), (3, 1, 3), {"group": 3, "pads": [1, 1], "strides": [3]}),
    ((1, 2, 3, 4, 5), (2, 1, 2, 3, 3), {"group": 2, "pads": [1, 1, 1, 0, 1, 2], "strides": [1, 2, 1]}),
    ((2, 5, 4, 4), (3, 5, 1, 1), {}),  # 1x1: plain matmul path
    ((2, 4, 5, 6), (3, 4, 1, 1), {"pads": [0, 0, 1, 2]}),  # 1x1 padded at the end only: not x itself (was read past)
    ((1, 5, 6, 6), (3, 5, 1, 1), {"strides": [2, 2]}),
    ((1, 2, 7, 6), (3, 2, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 2, 6, 6), (3, 2, 4, 4), {"auto_pad": "SAME_LOWER"}),
    ((1, 2, 6, 6), (3, 2, 4, 4), {"auto_pad": "SAME_UPPER"}),
    ((1, 2, 7, 6), (3, 2, 3, 3), {"auto_pad": "VALID", "strides": [2, 2]}),
    ((1, 2, 5, 5), (3, 2, 3, 3), {"kernel_shape": [3, 3], "strides": [3, 3]}),
    ((2, 3, 10), (4, 3, 3), {"pads": [2, 1], "strides": [2], "dilations": [2]}),  # 1-D
    ((1, 2, 4, 5, 6), (3, 2, 2, 3, 2), {"pads": [1, 0, 1, 0, 1, 1]}),  # 3-D
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("xs,ws,attrs", CONV_CASES)
def test_conv(xs, ws, attrs, bias):
    b = [data(ws[0])] if bias else []
    check("Conv", [data(xs), data(ws)] + b, attrs, const=[1, 2], **CONV_TOL)


@pytest.mark.parametrize("opset", [1, 11, 21])
def test_conv_opsets(opset):
    check("Conv", [data((1, 2, 5, 5)), data((2, 2, 3, 3))], {"pads": [1, 1, 1, 1]}, opset=opset, **CONV_TOL)


# float16: ORT accumulates in float32 and rounds once, as the kernels do; allow float16 rounding.
F16_TOL = {"rtol": 1e-3, "atol": 1e-3}


def test_conv_f16():
    check("Conv", [data((1, 4, 6, 6), np.float16), data((4, 2, 3, 3), np.float16), data(4, np.float16)],
          {"group": 2, "pads": [1, 1, 1, 1]}, const=[1, 2], **F16_TOL)


def test_conv_transpose_f16():
    check("ConvTranspose", [data((1, 2, 4, 4), np.float16), data((2, 3, 3, 3), np.float16)], {"strides": [2, 2]},
          const=[1], **F16_TOL)


def test_conv_empty_batch():
    check("Conv", [data((0, 2, 5, 5)), data((2, 2, 3, 3))], const=[1])


# Outputs in several blocks of the GEMM's columns (spatial.c conv_block_columns: packed B within 512 KB, here 224
# columns at 576 taps, 128 at 1024; 64 at least), the last part-filled, their output rows cut across blocks: 3x3,
# strided and dilated with groups, 1x1 (x packed as B a block at a time), 3-D
@pytest.mark.parametrize("xs,ws,attrs", [
    ((1, 64, 17, 19), (8, 64, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 128, 40, 21), (6, 64, 3, 3), {"group": 2, "strides": [2, 1], "dilations": [1, 2], "pads": [1, 2, 0, 1]}),
    ((1, 1024, 16, 18), (5, 1024, 1, 1), {}),
    ((1, 40, 6, 9, 10), (3, 40, 2, 3, 3), {"pads": [1, 0, 1, 0, 1, 1]}),
    ((1, 288, 10, 15), (4, 288, 3, 3), {"pads": [1, 1, 1, 1]}),  # 2592 taps: blocks of 64 columns (the least)
])
def test_conv_in_blocks_of_columns(xs, ws, attrs):
    check("Conv", [data(xs), data(ws), data(ws[0])], attrs, const=[1, 2], rtol=1e-4, atol=1e-4)


# Depthwise convolutions (spatial.c depthwise_padded; depthwise_plane_avx512 where it fits): through a zero-padded
# copy of the plane, rows of stride 1 or 2 16 outputs at a time (3-D, 1-D dilated, outputs of 14 columns, a 130 x 130 plane, 38 columns of stride 2 dilated),
# larger strides a tap's products over the whole plane at stride 1 keeping every stride-th row and column; taps
# reaching past DW_SLACK columns keep the per-row loop
@pytest.mark.parametrize("xs,ws,attrs", [
    ((1, 3, 4, 5, 6), (3, 1, 2, 3, 3), {"group": 3, "pads": [1, 1, 1, 0, 1, 1]}),
    ((1, 3, 20), (3, 1, 5), {"group": 3, "pads": [2, 2], "dilations": [2]}),
    ((2, 8, 14, 14), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),
    ((1, 4, 15, 16), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ((1, 2, 130, 130), (2, 1, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    ((1, 2, 6, 90), (2, 1, 1, 9), {"group": 2, "dilations": [1, 9], "pads": [0, 36, 0, 36]}),  # taps past DW_SLACK
    ((1, 3, 9, 12), (3, 1, 3, 3), {"group": 3, "pads": [1, 0, 1, 1], "strides": [3, 2], "dilations": [2, 1]}),
    ((2, 2, 10, 75), (2, 1, 3, 5), {"group": 2, "pads": [1, 4, 1, 4], "strides": [1, 2], "dilations": [1, 2]}),
    ((1, 3, 1, 9, 20), (3, 1, 1, 3, 3), {"group": 3, "pads": [1, 1, 1, 0, 1, 1], "strides": [2, 1, 2]}),  # all padding
])
@pytest.mark.parametrize("isa", [-1, 0], ids=["auto", "plain"])
def test_conv_depthwise_planes(xs, ws, attrs, isa):
    """With and without spatial.c depthwise_plane_avx512 (2-D, stride 2 along the row or rows of at most 16
    outputs, on AVX-512 CPUs)"""
    from onnxruntime_ep_seamless.kernels.cpu import native
    native.lib.seamless_spatial_set_isa(isa)
    try:
        check("Conv", [data(xs), data(ws), data(ws[0])], attrs, const=[1, 2], **CONV_TOL)
    finally:
        native.lib.seamless_spatial_set_isa(-1)


# Convolutions whose taps are read in place (spatial.c conv_direct, seamless_sgemm_indirect: stride 1, 12 output
# channels a group or more, rows padded at most 1/4; on AVX-512): 3x3 padded (a plane of 58 x 58 columns), unpadded
# (x itself), 1x1 padded at one end only and unpadded (x itself, not packed), 1-D and dilated, groups, two
# images; 13, 20 and 35 output channels (row blocks of 12, 8, 4 and single rows), columns past the last whole 32
# (the packed tail); a 3-D one whose first dim of 1 is padded (3 outputs along it) takes im2col. Where the path
# cannot run (another CPU) im2col gives them, bitwise the same (test_conv_direct_is_im2col_bitwise).
DIRECT_CASES = [
    ((1, 16, 56, 56), (13, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 8, 9, 40), (20, 8, 3, 3), {}),
    ((1, 6, 7, 33), (35, 6, 1, 1), {"pads": [0, 0, 1, 2]}),
    ((1, 6, 7, 33), (35, 6, 1, 1), {}),
    ((2, 5, 70), (24, 5, 3), {"pads": [3, 1], "dilations": [2]}),
    ((1, 8, 12, 30), (40, 4, 3, 2), {"group": 2, "pads": [1, 0, 2, 1], "dilations": [2, 1]}),
    ((1, 4, 1, 6, 20), (16, 4, 1, 3, 3), {"pads": [1, 1, 1, 1, 1, 1]}),  # 3-D, padded along a first dim of 1: im2col
    ((1, 4, 1, 6, 20), (16, 4, 1, 3, 3), {"pads": [1, 1, 1, 0, 1, 1], "strides": [2, 1, 1]}),  # its 1 output: padding
]


# The positions as the GEMM's rows (seamless_conv_rows: at most 100 of them, 16 output channels a group or more)
ROWS_CASES = [
    ((1, 32, 7, 7), (48, 32, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 40, 7, 7), (64, 40, 1, 1), {}),  # 1x1 stride 1: x's own rows transposed; 40 taps, not a multiple of 16
    ((1, 12, 14, 14), (32, 12, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 16, 9, 9), (32, 8, 3, 3), {"group": 2, "dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    ((1, 8, 5, 4, 4), (16, 8, 2, 3, 3), {"pads": [0, 1, 1, 0, 1, 1]}),  # 3-D
    ((1, 20, 10, 10), (17, 20, 3, 3), {"pads": [1, 1, 1, 1]}),  # 17 channels: a partial panel of the GEMM's B
]


# The output channels as vector lanes (seamless_conv_channels: AVX-512, stride 1 or 2 along the row, 16 output
# channels a group and 16 taps or more): 32-channel blocks whole and partial (16 + 8, a single panel of 16, 40 = 32 +
# 8), rows cut into runs (13, 14, 30 = 3 x 10, 57 = 4 x 14 + 1 shared), padded, unpadded and cropped planes (input
# past the last tap), dilations, groups, two images, 1-D, strides 2 both ways and along the row only
CHANNELS_CASES = [
    ((1, 24, 13, 13), (64, 24, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 16, 14, 30), (40, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 130, 9, 57), (16, 130, 1, 1), {}),
    ((1, 64, 12, 14), (48, 32, 3, 2), {"group": 2, "pads": [1, 0, 2, 1], "dilations": [2, 1]}),
    ((1, 32, 40), (24, 32, 5), {"pads": [2, 2]}),
    ((1, 32, 7, 7), (48, 32, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 32, 28, 28), (64, 32, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 16, 16, 30), (24, 16, 3, 3), {"strides": [1, 2]}),  # the last column never read: x in place all the same
    ((1, 160, 14, 14), (32, 160, 1, 1), {"strides": [2, 2]}),
    ((1, 3, 33, 33), (16, 3, 3, 3), {"strides": [2, 2]}),  # an RGB stem: 27 taps
]


@pytest.mark.parametrize("xs,ws,attrs", DIRECT_CASES + ROWS_CASES + CHANNELS_CASES)
def test_conv_direct(xs, ws, attrs):
    check("Conv", [data(xs), data(ws), data(ws[0])], attrs, const=[1, 2], **CONV_TOL)


@pytest.mark.parametrize("xs,ws,attrs", DIRECT_CASES + ROWS_CASES + CHANNELS_CASES + [
    ((1, 64, 20, 20), (48, 32, 3, 3), {"group": 2, "strides": [2, 2], "pads": [1, 1, 1, 1]}),  # im2col, groups
])
@pytest.mark.parametrize("bias,residual", [(False, False), (True, False), (True, True)])
def test_conv_direct_is_im2col_bitwise(xs, ws, attrs, bias, residual):
    # The same sums in the same order every way (direct, im2col, the positions as the GEMM's rows and the channels as
    # vector lanes), so the same bits; against a float64 reference too (the weights packed per group: each group's
    # rows at g * m/group * k of the flat weights); with `residual`, FusedConv's residual added and the Relu, which the
    # channels path applies as it stores a tile, the others after a block
    from onnxruntime_ep_seamless.kernels.cpu import native
    x, w, b = data(xs), data(ws), data(ws[0]) if bias else None
    nd, group = len(xs) - 2, attrs.get("group", 1)
    dil, pads = attrs.get("dilations", [1] * nd), attrs.get("pads", [0] * 2 * nd)
    strides = attrs.get("strides", [1] * nd)
    out = [(i + pads[d] + pads[d + nd] - (k - 1) * dil[d] - 1) // strides[d] + 1
           for d, (i, k) in enumerate(zip(xs[2:], ws[2:]))]
    z = data((xs[0], ws[0], *out)) if residual else None
    ys, ways = [], []
    for direct, rows, channels in ((True, False, False), (False, False, False), (False, True, False),
                                   (False, False, True)):
        args, _kept = native.conv_args(x.shape, w, b, group, strides, dil, pads[:nd], out, direct=direct, rows=rows,
                                       channels=channels, relu=residual)
        ys.append(native.conv(x, args, z).reshape(xs[0], ws[0], *out))
        ways.append((args.direct, args.packed_rows != native.ffi.NULL, args.channels))
    # the rows and channels ways where the case is for them (channels: on AVX-512 CPUs)
    assert ways[2][1] or (xs, ws, attrs) not in ROWS_CASES
    assert ways[3][2] or (xs, ws, attrs) not in CHANNELS_CASES or not AVX512
    assert all(np.array_equal(ys[0], y) for y in ys[1:])
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(pads[d], pads[d + nd]) for d in range(nd)])
    ref = np.zeros(ys[0].shape)
    mg, cg = ws[0] // group, ws[1]
    for tap in np.ndindex(*ws[2:]):
        window = tuple(slice(q * dl, q * dl + (o - 1) * s + 1, s) for q, dl, o, s in zip(tap, dil, out, strides))
        for g in range(group):
            patch = xp[(slice(None), slice(g * cg, (g + 1) * cg)) + window]
            wg = w[(slice(g * mg, (g + 1) * mg), slice(None)) + tap]
            ref[:, g * mg:(g + 1) * mg] += np.einsum("mc,nc...->nm...", wg, patch)
    if bias:
        ref += b.reshape((1, -1) + (1,) * nd)
    if residual:
        ref = np.maximum(ref + z, 0)
        assert (ys[0] == 0).any() and (ys[0] > 0).any()
    np.testing.assert_allclose(ys[0], ref, rtol=1e-4, atol=1e-4)


def test_conv_wrapper_refuses_extents_that_disagree():
    """native.conv is the last check before seamless_conv_f32, which trusts its extents: an input or a residual
    of another size (or type) is a ValueError, never a read past either buffer."""
    from onnxruntime_ep_seamless.kernels.cpu import native
    x, w = data((1, 4, 6, 6)), data((8, 4, 3, 3))
    args, _kept = native.conv_args(x.shape, w, None, 1, [1, 1], [1, 1], [1, 1], [6, 6])
    assert native.conv(x, args, data((1, 8, 6, 6))).size == 8 * 36
    for bad_x, z in [(data((1, 4, 6, 5)), None), (x, data((1, 8, 6, 5))), (x, data((1, 8, 6, 6)).astype(np.float64)),
                     (x.astype(np.float64), None)]:
        with pytest.raises(ValueError, match="native kernel"):
            native.conv(bad_x, args, z)


def test_conv_resnet_stem():
    # A 224x224 ResNet stem, to keep the im2col path honest about speed (well under a second).
    check("Conv", [data((1, 3, 224, 224)), data((64, 3, 7, 7)), data(64)],
          {"pads": [3, 3, 3, 3], "strides": [2, 2]}, const=[1, 2], rtol=1e-4, atol=1e-4)


CONV_T_CASES = [
    ((1, 2, 3, 3), (2, 3, 3, 3), {}),
    ((2, 2, 3, 4), (2, 3, 3, 2), {"strides": [2, 3], "pads": [1, 0, 0, 1]}),
    ((1, 4, 3, 3), (4, 2, 3, 3), {"group": 2, "strides": [2, 2], "output_padding": [1, 0]}),
    ((1, 2, 4, 4), (2, 2, 3, 3), {"dilations": [2, 1], "pads": [1, 1, 2, 0]}),
    ((1, 2, 3, 3), (2, 2, 3, 3), {"strides": [2, 2], "output_shape": [8, 7]}),
    ((1, 2, 3, 3), (2, 2, 3, 3), {"strides": [2, 2], "output_shape": [6, 5], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 3, 3), (2, 2, 3, 3), {"strides": [2, 2], "output_shape": [6, 5], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 3, 3), (2, 2, 4, 4), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 3, 3), (2, 2, 4, 4), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 3, 3), (2, 2, 5, 5), {"auto_pad": "SAME_UPPER"}),
    ((1, 2, 3, 3), (2, 2, 4, 4), {"auto_pad": "SAME_LOWER"}),
    ((1, 2, 3, 3), (2, 2, 1, 1), {"strides": [3, 2], "auto_pad": "SAME_UPPER"}),  # n * s > full: no padding
    ((1, 2, 3, 3), (2, 2, 3, 3), {"strides": [2, 2], "output_shape": [4, 3]}),
    ((1, 2, 3, 3), (2, 2, 3, 3), {"strides": [2, 2], "output_shape": [5, 4], "pads": [1, 1, 0, 0]}),
    ((1, 2, 3, 3), (2, 2, 3, 3), {"strides": [2, 2], "auto_pad": "VALID"}),
    ((1, 2, 5), (2, 3, 3), {"strides": [2], "pads": [1, 2], "output_padding": [1]}),  # 1-D
    ((1, 2, 2, 3, 2), (2, 1, 2, 2, 3), {"strides": [1, 2, 1]}),  # 3-D
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("xs,ws,attrs", CONV_T_CASES)
def test_conv_transpose(xs, ws, attrs, bias):
    b = [data(ws[1] * attrs.get("group", 1))] if bias else []
    check("ConvTranspose", [data(xs), data(ws)] + b, attrs, const=[1, 2], **CONV_TOL)


# --- pooling -------------------------------------------------------------------------------

POOL_CASES = [
    ((1, 2, 6, 6), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((2, 3, 7, 5), {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1], "strides": [2, 1]}),
    ((1, 2, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 2, 6, 6), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    ((1, 2, 8, 8), {"kernel_shape": [2, 2], "strides": [3, 3], "ceil_mode": 1}),
    # ceil_mode would start a last window inside the end padding: dropped.
    ((1, 2, 5, 5), {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    ((1, 2, 7, 6), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 6, 6), {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 7, 6), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "VALID"}),
    ((1, 2, 9, 9), {"kernel_shape": [2, 3], "dilations": [2, 2], "pads": [1, 2, 0, 1]}),
    ((1, 2, 9), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),  # 1-D
    ((1, 2, 4, 5, 6), {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2]}),  # 3-D
]


# Pools that keep the row length (stride 1): spatial.c row_span's inside rows as one span (the wrapped outputs at the
# row ends rewritten), the span rows' ends a column at a time down the rows
POOL_SPAN_CASES = [
    ((1, 2, 70, 80), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),  # spans of several 64-output blocks, 64 rows
    ((1, 2, 11, 13), {"kernel_shape": [3, 3], "dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    ((1, 2, 9, 10), {"kernel_shape": [3, 5], "pads": [0, 3, 2, 1]}),  # uneven pads
    ((1, 2, 4, 4), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),  # a span under 16 outputs
    ((1, 1, 3, 3), {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]}),  # no row inside
]


# Pools read from the window's rows directly (spatial.c max_rows_avx512 where the CPU has AVX-512, else the rows folded
# first): steps of 16 outputs and a masked short one, stride-2 steps reading past 32 floats, the widest window along
# the row it takes and one wider (folded), a window of more rows than it holds (pool_one), rows shorter than a step
POOL_ROW_CASES = [
    ((1, 2, 9, 61), {"kernel_shape": [3, 3], "strides": [2, 2]}),
    ((1, 2, 7, 40), {"kernel_shape": [2, 5], "strides": [1, 2], "pads": [0, 2, 1, 2]}),
    ((1, 2, 6, 50), {"kernel_shape": [3, 3], "strides": [2, 1], "dilations": [1, 8], "pads": [1, 0, 0, 1]}),
    ((1, 2, 6, 50), {"kernel_shape": [2, 4], "strides": [1, 2], "dilations": [1, 6]}),
    ((1, 1, 9, 9, 20), {"kernel_shape": [8, 9, 3], "strides": [1, 1, 2]}),
    ((1, 3, 13, 13), {"kernel_shape": [3, 3], "strides": [2, 2]}),
]


@pytest.mark.parametrize("isa", [-1, 0], ids=["auto", "plain"])
@pytest.mark.parametrize("xs,attrs", POOL_SPAN_CASES + POOL_ROW_CASES)
def test_max_pool_spans_as_stock(xs, attrs, isa):
    """spatial.c pool_max_rows's spans and rows on plain values (no NaN, -inf or -0), with and without its AVX-512
    loops: stock's values exactly."""
    from onnxruntime_ep_seamless.kernels.cpu import native
    x = np.random.default_rng(xs[-1]).standard_normal(xs).astype(np.float32) + 0.5
    native.lib.seamless_spatial_set_isa(isa)
    try:
        check("MaxPool", [x], attrs, opset=12, rtol=0, atol=0)
    finally:
        native.lib.seamless_spatial_set_isa(-1)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.uint8])
@pytest.mark.parametrize("xs,attrs", POOL_CASES)
def test_max_pool(xs, attrs, dtype):
    x = data(xs) * 20 if np.dtype(dtype).kind in "iu" else data(xs)
    check("MaxPool", [x.astype(dtype)], attrs, opset=12)


@pytest.mark.parametrize("xs,attrs,storage_order", [(xs, attrs, 0) for xs, attrs in POOL_CASES]
                         + [(xs, attrs, 1) for xs, attrs in POOL_CASES if len(xs) == 4])
def test_max_pool_indices(xs, attrs, storage_order):
    check("MaxPool", [data(xs)], {**attrs, "storage_order": storage_order}, opset=12, outputs=[np.float32, I64])


def nan_pool_case(seed):
    """A random MaxPool (1-3 spatial dims, kernels, strides, pads, ceil mode; some with dilations, storage order or
    indices) or GlobalMaxPool of float32/float16/float64 data holding NaN and -inf."""
    r = np.random.default_rng(seed)
    nd = int(r.choice([1, 2, 2, 3]))
    shape = [int(r.integers(1, 3)), int(r.integers(1, 3))] + [int(r.integers(1, 9 if nd == 3 else 40)) for _ in range(nd)]
    dtype = [np.float32, np.float32, np.float16, np.float64][seed % 4]
    x = r.standard_normal(shape).astype(dtype)
    mask = r.random(shape)
    x[mask < 0.15], x[mask > 0.9] = np.nan, -np.inf
    if seed % 7 == 0 and dtype != np.float64:  # stock has no float64 GlobalMaxPool
        return "GlobalMaxPool", x, {}, [dtype]
    kernel = [int(r.integers(1, min(n, 9) + 1)) for n in shape[2:]]
    attrs = {"kernel_shape": kernel, "strides": [int(r.integers(1, 4)) for _ in range(nd)],
             "pads": [int(r.integers(0, k)) for k in kernel] + [int(r.integers(0, k)) for k in kernel]}
    outputs = [dtype]
    if seed % 5 == 1:
        attrs["dilations"] = [1 + int((k - 1) * 2 + 1 <= n) for k, n in zip(kernel, shape[2:])]
    elif seed % 5 == 2 and nd == 2 and dtype != np.float64:
        attrs["storage_order"] = 1
    elif seed % 5 == 3:
        outputs = [dtype, I64]
    else:
        attrs["ceil_mode"] = int(r.integers(0, 2))
    return "MaxPool", x, attrs, outputs


@pytest.mark.parametrize("seed", range(48))
def test_max_pool_with_nan_and_infinity_as_stock(seed):
    """Stock keeps or drops a NaN (and turns -inf into the lowest float) by the code path it takes: MLAS's global,
    vector or scalar kernels for one float32/float16 output without dilation, else its own loop; values must be
    stock's exactly."""
    op, x, attrs, outputs = nan_pool_case(seed)
    check(op, [x], attrs, opset=12, outputs=outputs, rtol=0, atol=0)


@pytest.mark.parametrize("seed", range(48))
def test_max_pool_of_plain_values_as_stock(seed):
    """nan_pool_case's random pools on values without NaN, -inf or -0 (native/cpu/spatial.c pool_max_rows: the
    window's rows folded first, any order of taps; windows with taps outside and ceil mode's windows past the end as
    stock's paths give them): stock's values exactly."""
    op, x, attrs, outputs = nan_pool_case(seed)
    x = np.random.default_rng(seed).standard_normal(x.shape).astype(x.dtype) + 0.5  # no -0 (a draw of exactly 0)
    check(op, [x], attrs, opset=12, outputs=outputs, rtol=0, atol=0)


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [2, 3], "dilations": [2, 1], "pads": [1, 0, 0, 1]},
    {"kernel_shape": [7, 7]},
    {"kernel_shape": [3, 3], "pads": [2, 2, 2, 2], "strides": [3, 3]},  # a window of padding only: not this path
])
def test_max_pool_of_small_planes_16_at_a_time_as_stock(attrs):
    """spatial.c pool_planes_avx512: MaxPool of planes of at most 256 floats 16 at a time (42 planes: groups whole and
    partial); a plane holding NaN, -inf or -0 leaves its group and takes its own path: stock's values exactly."""
    x = np.random.default_rng(3).standard_normal((2, 21, 7, 7)).astype(np.float32) + 0.5
    x[0, 3, 2, 2], x[0, 17, 0, 0], x[1, 9, 4, 5] = np.nan, -np.inf, -0.0
    check("MaxPool", [x], attrs, opset=12, rtol=0, atol=0)


@pytest.mark.parametrize("opset", [1, 8, 10, 11])
def test_max_pool_old_opsets(opset):
    check("MaxPool", [data((1, 2, 6, 6))], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, opset=opset)


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("xs,attrs", [c for c in POOL_CASES if "dilations" not in c[1]])
def test_average_pool(xs, attrs, count_include_pad):
    check("AveragePool", [data(xs)], {**attrs, "count_include_pad": count_include_pad}, opset=11)


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("xs,attrs", POOL_CASES)
def test_average_pool_19(xs, attrs, count_include_pad):
    check("AveragePool", [data(xs)], {**attrs, "count_include_pad": count_include_pad}, opset=19)


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("xs,attrs", POOL_CASES + [
    ((1, 3, 28, 28), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),  # Inception-v2's: rows of outputs inside
    ((2, 2, 19, 23), {"kernel_shape": [5, 3], "pads": [2, 1, 2, 1], "strides": [1, 2]}),
    ((1, 2, 5, 7, 9), {"kernel_shape": [3, 3, 3], "pads": [1, 1, 1, 1, 1, 1]}),
    ((1, 2, 28, 28), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}),  # ShuffleNet's
    ((1, 2, 14, 14), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 3, 7, 7), {"kernel_shape": [7, 7]}),
    # stride 1 on rows of at most 16 outputs: average_plane_avx512's taps loaded in place
    ((1, 4, 14, 14), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ((1, 3, 7, 7), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ((1, 2, 9, 16), {"kernel_shape": [5, 4], "pads": [2, 3, 1, 0]}),
    ((1, 2, 12, 15), {"kernel_shape": [3, 3], "pads": [2, 2, 2, 2], "dilations": [1, 2]}),
    ((1, 2, 70, 12), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),  # rows past the 64 kept once a task
    ((1, 1, 5, 300), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),  # steps past the 8 kept
    # planes of at most 256 floats, 16 at a time as vector lanes (average_planes_avx512): groups whole and partial
    ((2, 19, 7, 7), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ((1, 33, 9, 9), {"kernel_shape": [5, 5], "strides": [2, 2], "pads": [2, 2, 2, 2]}),
    ((1, 17, 16, 16), {"kernel_shape": [3, 3]}),
    ((1, 20, 5, 6), {"kernel_shape": [7, 7], "pads": [3, 3, 3, 3]}),  # windows wider than the plane
    ((1, 16, 12, 12), {"kernel_shape": [3, 3], "dilations": [2, 2], "pads": [2, 1, 0, 2]}),
    ((1, 18, 7, 7), {"kernel_shape": [7, 7]}),  # ShuffleNet's last: the whole plane
] + POOL_SPAN_CASES + POOL_ROW_CASES)
@pytest.mark.parametrize("isa", [-1, 0], ids=["auto", "plain"])
def test_average_pool_sums_each_window_as_stock(xs, attrs, count_include_pad, isa):
    """spatial.c pool_average_rows (and average_plane_avx512 on AVX-512 CPUs) sums each window's taps in the order
    pool_one sums them: stock's values exactly, edges and padding included."""
    from onnxruntime_ep_seamless.kernels.cpu import native
    x = np.random.default_rng(len(xs) + xs[-1]).standard_normal(xs).astype(np.float32) * 7
    native.lib.seamless_spatial_set_isa(isa)
    try:
        check("AveragePool", [x], {**attrs, "count_include_pad": count_include_pad}, opset=19, rtol=0, atol=0)
    finally:
        native.lib.seamless_spatial_set_isa(-1)


def test_average_pool_f16():
    # float16: ORT averages in float32 and rounds once; allow one float16 ulp.
    check("AveragePool", [data((1, 2, 6, 6), np.float16)], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
          opset=19, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("opset", [7, 10])  # ORT has no AveragePool-1 kernel
def test_average_pool_old_opsets(opset):
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    if opset >= 7:
        attrs["count_include_pad"] = 1
    check("AveragePool", [data((1, 2, 5, 5))], attrs, opset=opset)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("xs", [(2, 3, 4, 5), (1, 2, 7), (1, 2, 2, 3, 2)])
def test_global_pool(op, xs):
    check(op, [data(xs)])


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool_f16(op):
    # ORT sums float16 in float32; allow float16 rounding of the mean.
    check(op, [data((2, 3, 4, 5), np.float16)], rtol=1e-3, atol=1e-3)


# --- Resize --------------------------------------------------------------------------------

COORD_MODES = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric"]
NEAREST_MODES = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
SCALES = [[1, 1, 2.0, 3.0], [1, 1, 0.5, 0.75], [1, 1, 1.7, 0.6]]


def _resize(x, scales=None, sizes=None, roi=None, attrs=None, opset=19, **tol):
    none = np.zeros(0, np.float32)
    ins = [x, none if roi is None else np.array(roi, np.float32),
           none if scales is None else np.array(scales, np.float32)]
    if sizes is not None:
        ins.append(np.array(sizes, I64))
    check("Resize", ins, attrs, opset=opset, const=[1, 2, 3], **tol)


@pytest.mark.parametrize("scales", SCALES)
@pytest.mark.parametrize("nearest_mode", NEAREST_MODES)
@pytest.mark.parametrize("coord", COORD_MODES)
def test_resize_nearest(coord, nearest_mode, scales):
    _resize(data((1, 2, 4, 5)), scales, attrs={"mode": "nearest", "coordinate_transformation_mode": coord,
                                               "nearest_mode": nearest_mode})


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("scales", SCALES)
def test_resize_tf_half_pixel_for_nn(scales, opset):
    _resize(data((1, 2, 4, 5)), scales, attrs={"coordinate_transformation_mode": "tf_half_pixel_for_nn"},
            opset=opset)


@pytest.mark.parametrize("scales", SCALES)
@pytest.mark.parametrize("coord", COORD_MODES)
def test_resize_linear(coord, scales):
    _resize(data((1, 2, 4, 5)), scales, attrs={"mode": "linear", "coordinate_transformation_mode": coord})


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("sizes", [[1, 2, 8, 3], [1, 2, 1, 9]])
def test_resize_sizes(mode, sizes):
    _resize(data((1, 2, 4, 5)), sizes=sizes, attrs={"mode": mode})


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
def test_resize_keep_aspect_ratio(policy):
    _resize(data((1, 2, 4, 5)), sizes=[7, 7], attrs={"axes": [2, 3], "keep_aspect_ratio_policy": policy}, opset=18)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_axes(mode):
    _resize(data((1, 2, 4, 5)), scales=[2.0, 1.5], attrs={"axes": [-1, 2], "mode": mode}, opset=18)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("sizes,roi", [([1, 1, 5, 4], [0, 0, 0.2, 0.1, 1, 1, 0.9, 1.3]),
                                       ([1, 1, 1, 6], [0, 0, 0.5, -0.2, 1, 1, 0.7, 0.8])])
def test_resize_tf_crop_and_resize(mode, sizes, roi):
    _resize(data((1, 1, 4, 5)), sizes=sizes, roi=roi,
            attrs={"mode": mode, "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 7.5},
            opset=13)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int8])
def test_resize_nearest_ints(dtype):
    check("Resize", [(data((1, 1, 3, 4)) * 20).astype(dtype), np.zeros(0, np.float32),
                     np.array([1, 1, 1.5, 2], np.float32)], opset=13, const=[1, 2])


@pytest.mark.parametrize("xs,scales", [((4, 5), [2.0, 0.5]), ((1, 2, 3, 4, 5), [1, 1, 2, 1.5, 0.5])])
def test_resize_linear_2d_3d(xs, scales):
    _resize(data(xs), scales, attrs={"mode": "linear"})


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_f16(mode):
    _resize(data((1, 2, 3, 4), np.float16), [1, 1, 2, 1.5], attrs={"mode": mode}, **F16_TOL)


def test_resize_11_sizes():
    # Opset 11: scales is a required input, given as an empty tensor next to sizes.
    _resize(data((1, 1, 3, 3)), sizes=[1, 1, 5, 2], attrs={"mode": "nearest"}, opset=11)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [[1, 1, 2.0, 3.0], [1, 1, 0.5, 0.6], [1, 1, 1.5, 2.5]])
def test_resize_10(mode, scales):
    check("Resize", [data((1, 2, 4, 5)), np.array(scales, np.float32)], {"mode": mode}, opset=10, const=[1])


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample(mode):
    check("Upsample", [data((1, 2, 3, 4))], {"mode": mode, "scales": [1.0, 1.0, 2.0, 1.5]}, opset=7)
    check("Upsample", [data((1, 2, 3, 4)), np.array([1, 1, 3, 2], np.float32)], {"mode": mode}, opset=9,
          const=[1])


# --- Resize: cubic, antialiasing -------------------------------------------------------------

@pytest.mark.parametrize("scales", SCALES)
@pytest.mark.parametrize("coord", COORD_MODES)
def test_resize_cubic(coord, scales):
    _resize(data((1, 2, 4, 5)), scales=scales, attrs={"mode": "cubic", "coordinate_transformation_mode": coord},
            rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("attrs", [{"cubic_coeff_a": -0.5}, {"exclude_outside": 1}])
def test_resize_cubic_options(attrs):
    _resize(data((1, 1, 5, 6)), scales=[1, 1, 1.6, 0.7], attrs={"mode": "cubic", **attrs}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("scales", [[1, 1, 0.6, 0.4], [1, 1, 0.5, 1.5]])
def test_resize_antialias(mode, scales):
    _resize(data((1, 2, 8, 9)), scales=scales, attrs={"mode": mode, "antialias": 1}, rtol=1e-4, atol=1e-5)


# --- LpPool, MaxUnpool, normalizations ---------------------------------------------------------

LP_POOL_CASES = [{"kernel_shape": [2, 2]}, {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1], "p": 3},
                 {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER", "p": 1},
                 {"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1, "dilations": [1, 2]}]


@pytest.mark.parametrize("attrs", LP_POOL_CASES)
def test_lp_pool(attrs):
    check("LpPool", [data((1, 3, 5, 6))], attrs, opset=18, rtol=1e-5, atol=1e-5)


def test_global_lp_pool():
    check("GlobalLpPool", [data((2, 3, 4, 5))], {"p": 3}, opset=2, rtol=1e-5, atol=1e-5)


def max_pool_with_indices():
    """A 2x2 / stride 2 MaxPool of a (1, 2, 4, 4) input and its flat Indices output."""
    x = data((1, 2, 4, 4))
    pooled, indices = np.zeros((1, 2, 2, 2), np.float32), np.zeros((1, 2, 2, 2), np.int64)
    for c in range(2):
        for i in range(2):
            for j in range(2):
                window = x[0, c, 2 * i:2 * i + 2, 2 * j:2 * j + 2]
                k = int(np.argmax(window))
                pooled[0, c, i, j] = window.flat[k]
                indices[0, c, i, j] = c * 16 + (2 * i + k // 2) * 4 + 2 * j + k % 2
    return pooled, indices


def test_max_unpool():
    check("MaxUnpool", list(max_pool_with_indices()), {"kernel_shape": [2, 2], "strides": [2, 2]}, opset=11)


sampling_rng = np.random.default_rng(5)


def check_sampling(op, inputs, out_dtypes, attrs=None, opset=22, const=(), rtol=1e-5, atol=1e-5):
    return check_node(op, inputs, attrs, opset, out_dtypes, const, rtol, atol)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_2d(mode, padding_mode, align_corners):
    x = sampling_rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    grid = sampling_rng.uniform(-1.4, 1.4, (2, 4, 7, 2)).astype(np.float32)  # some points outside the image
    check_sampling("GridSample", [x, grid], [np.float32],
          {"mode": mode, "padding_mode": padding_mode, "align_corners": align_corners}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_grid_sample_3d(mode):
    x = sampling_rng.standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
    grid = sampling_rng.uniform(-1.2, 1.2, (1, 2, 3, 4, 3)).astype(np.float32)
    check_sampling("GridSample", [x, grid], [np.float32], {"mode": mode, "padding_mode": "border"})


def test_grid_sample_opset16_names():
    x = sampling_rng.standard_normal((1, 1, 4, 4)).astype(np.float32)
    grid = sampling_rng.uniform(-1, 1, (1, 3, 3, 2)).astype(np.float32)
    check_sampling("GridSample", [x, grid], [np.float32], {"mode": "bicubic"}, opset=16, rtol=1e-4)
    check_sampling("GridSample", [x, grid], [np.float32], {}, opset=16)  # bilinear by default


@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("size", [[2, 3, 4, 5], [1, 2, 3, 4, 5], [3, 1, 1, 6]])
def test_affine_grid(align_corners, size):
    nd = len(size) - 2
    theta = sampling_rng.standard_normal((size[0], nd, nd + 1)).astype(np.float32)
    check_sampling("AffineGrid", [theta, np.array(size, np.int64)], [np.float32], {"align_corners": align_corners},
          const=(1,), opset=20)


@pytest.mark.parametrize("attrs", [{}, {"pads": [1, 0, 1, 2], "strides": [2, 1], "dilations": [1, 2]}])
def test_col2im(attrs):
    image, block = np.array([5, 6], np.int64), np.array([2, 3], np.int64)
    pads, strides, dil = attrs.get("pads", [0] * 4), attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    blocks = [(i + pads[k] + pads[k + 2] - d * (b - 1) - 1) // s + 1
              for k, (i, b, d, s) in enumerate(zip(image, block, dil, strides))]
    x = sampling_rng.standard_normal((2, 3 * 6, blocks[0] * blocks[1])).astype(np.float32)
    check_sampling("Col2Im", [x, image, block], [np.float32], attrs, const=(1, 2), opset=18)


def test_deform_conv():
    x = sampling_rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    w = sampling_rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    offset = sampling_rng.standard_normal((1, 2 * 2 * 9, 6, 6)).astype(np.float32)   # offset_group 2
    mask = sampling_rng.uniform(0, 1, (1, 2 * 9, 6, 6)).astype(np.float32)
    bias = sampling_rng.standard_normal(4).astype(np.float32)
    check_sampling("DeformConv", [x, w, offset, bias, mask], [np.float32],
          {"group": 2, "offset_group": 2, "pads": [1, 1, 1, 1]}, opset=19, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- CausalConvWithState (LFM2's short convolutions)

def causal_conv_inputs(b, c, n, k, dilation=1, channels_last=False, past=True, bias=True, dtype=np.float32):
    span = (k - 1) * dilation
    x = rng.standard_normal((b, n, c) if channels_last else (b, c, n)).astype(dtype)
    state = rng.standard_normal((b, span, c) if channels_last else (b, c, span)).astype(dtype) if past else None
    weight = rng.standard_normal((c, 1, k)).astype(dtype)
    return [x, weight, rng.standard_normal(c).astype(dtype) if bias else None, state]


@pytest.mark.parametrize("b,c,n,k,attrs,past,bias", [
    (1, 8, 5, 3, {}, True, True),                      # a prompt
    (2, 8, 1, 4, {}, True, True),                      # a decode step
    (1, 4, 2, 4, {}, False, True),                     # shorter than the state, no past: zeros
    (1, 8, 6, 3, {"dilation": 2}, True, True),
    (1, 8, 5, 3, {"activation": "silu"}, True, False),
    (1, 8, 5, 3, {"activation": "swish", "channels_last": 1}, True, True),
])
def test_causal_conv_with_state(b, c, n, k, attrs, past, bias):
    inputs = causal_conv_inputs(b, c, n, k, attrs.get("dilation", 1), attrs.get("channels_last", 0), past, bias)
    check_node("CausalConvWithState", inputs, attrs, opset=21, domain="com.microsoft",
               outputs=[np.float32, np.float32], const=(1, 2))


def test_causal_conv_with_state_onnx_and_float16():
    check_node("CausalConvWithState", causal_conv_inputs(2, 6, 3, 3), opset=27, outputs=[np.float32, np.float32],
               const=(1, 2))
    check_node("CausalConvWithState", causal_conv_inputs(1, 8, 5, 3, dtype=np.float16), opset=21,
               domain="com.microsoft", outputs=[np.float16, np.float16], rtol=1e-3, atol=1e-3)
