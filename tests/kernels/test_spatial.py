"""Parity of GridSample, AffineGrid, Col2Im, DeformConv (kernels/cpu/spatial.py) and
NonMaxSuppression (kernels/cpu/detection.py) with stock ORT."""
import numpy as np
import pytest

from parity import check_node

rng = np.random.default_rng(5)


def check(op, inputs, out_dtypes, attrs=None, opset=22, const=(), rtol=1e-5, atol=1e-5):
    return check_node(op, inputs, attrs, opset, out_dtypes, const, rtol, atol)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_2d(mode, padding_mode, align_corners):
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    grid = rng.uniform(-1.4, 1.4, (2, 4, 7, 2)).astype(np.float32)  # some points outside the image
    check("GridSample", [x, grid], [np.float32],
          {"mode": mode, "padding_mode": padding_mode, "align_corners": align_corners}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_grid_sample_3d(mode):
    x = rng.standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
    grid = rng.uniform(-1.2, 1.2, (1, 2, 3, 4, 3)).astype(np.float32)
    check("GridSample", [x, grid], [np.float32], {"mode": mode, "padding_mode": "border"})


def test_grid_sample_opset16_names():
    x = rng.standard_normal((1, 1, 4, 4)).astype(np.float32)
    grid = rng.uniform(-1, 1, (1, 3, 3, 2)).astype(np.float32)
    check("GridSample", [x, grid], [np.float32], {"mode": "bicubic"}, opset=16, rtol=1e-4)
    check("GridSample", [x, grid], [np.float32], {}, opset=16)  # bilinear by default


@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("size", [[2, 3, 4, 5], [1, 2, 3, 4, 5], [3, 1, 1, 6]])
def test_affine_grid(align_corners, size):
    nd = len(size) - 2
    theta = rng.standard_normal((size[0], nd, nd + 1)).astype(np.float32)
    check("AffineGrid", [theta, np.array(size, np.int64)], [np.float32], {"align_corners": align_corners},
          const=(1,), opset=20)


@pytest.mark.parametrize("attrs", [{}, {"pads": [1, 0, 1, 2], "strides": [2, 1], "dilations": [1, 2]}])
def test_col2im(attrs):
    image, block = np.array([5, 6], np.int64), np.array([2, 3], np.int64)
    pads, strides, dil = attrs.get("pads", [0] * 4), attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    blocks = [(i + pads[k] + pads[k + 2] - d * (b - 1) - 1) // s + 1
              for k, (i, b, d, s) in enumerate(zip(image, block, dil, strides))]
    x = rng.standard_normal((2, 3 * 6, blocks[0] * blocks[1])).astype(np.float32)
    check("Col2Im", [x, image, block], [np.float32], attrs, const=(1, 2), opset=18)


def test_deform_conv():
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    offset = rng.standard_normal((1, 2 * 2 * 9, 6, 6)).astype(np.float32)   # offset_group 2
    mask = rng.uniform(0, 1, (1, 2 * 9, 6, 6)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    check("DeformConv", [x, w, offset, bias, mask], [np.float32],
          {"group": 2, "offset_group": 2, "pads": [1, 1, 1, 1]}, opset=19, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("center_point_box", [0, 1])
def test_non_max_suppression(center_point_box):
    boxes = rng.uniform(0, 10, (2, 12, 4)).astype(np.float32)
    if center_point_box:
        boxes[..., 2:] = rng.uniform(1, 4, (2, 12, 2))
    scores = rng.uniform(0, 1, (2, 3, 12)).astype(np.float32)
    limits = [np.array([4], np.int64), np.array([0.3], np.float32), np.array([0.2], np.float32)]
    check("NonMaxSuppression", [boxes, scores, *limits], [np.int64], {"center_point_box": center_point_box},
          const=(2, 3, 4), opset=11)
    check("NonMaxSuppression", [boxes, scores], [np.int64], opset=11)  # no limit: nothing selected
