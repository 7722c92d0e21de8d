"""Parity of NonMaxSuppression and MaxRoiPool (kernels/cpu/detection.py, native/cpu/detection.c) with stock ORT:
NMS's order and tie rules, the batch / class layout of the selected rows, center_point_box, the limits, empty
answers; MaxRoiPool's corner rounding, bins, clipping, NaN order, empty bins. Invalid inputs are
tests/hostile/cases.py's (nms_*, roi_pool_*)."""
import numpy as np
import pytest

from parity import check_node


rng = np.random.default_rng(17)
F32, I64 = np.float32, np.int64


def check(op, inputs, out_dtypes, attrs=None, opset=22, const=(), rtol=1e-5, atol=1e-5):
    return check_node(op, inputs, attrs, opset, out_dtypes, const, rtol, atol)


def nms(boxes, scores, max_out=None, iou=None, score=None, center_point_box=0):
    """NonMaxSuppression's selected rows on stock ORT and ours (must be equal); the thresholds as constants,
    absent from `None` on (ONNX's trailing optional inputs)."""
    limits = [None if v is None else np.array([v], t) for v, t in ((max_out, I64), (iou, F32), (score, F32))]
    count = max((i + 1 for i, v in enumerate(limits) if v is not None), default=0)
    inputs = [np.asarray(boxes, F32), np.asarray(scores, F32)] + limits[:count]
    (rows,) = check_node("NonMaxSuppression", inputs, {"center_point_box": center_point_box}, opset=11,
                         outputs=[I64], const=tuple(range(2, 2 + count)))
    return rows


def detector_boxes(batches, n, center=False):
    """Boxes 10-120 wide on a 1000 x 1000 image, as [y1, x1, y2, x2] or [x_center, y_center, w, h]."""
    c, size = rng.uniform(0, 1000, (batches, n, 2)), rng.uniform(10, 120, (batches, n, 2))
    if center:
        return np.concatenate([c, size], axis=-1).astype(F32)
    return np.concatenate([c - size / 2, c + size / 2], axis=-1)[..., [1, 0, 3, 2]].astype(F32)


def test_nms_equal_scores_go_by_box_index():
    # five copies of one box: the lowest index among the best scores survives, the rest are suppressed
    boxes = np.tile(np.array([0, 0, 1, 1], F32), (1, 5, 1))
    rows = nms(boxes, np.array([[[0.5, 0.9, 0.7, 0.9, 0.9]]], F32), max_out=5, iou=0.5)
    assert rows.tolist() == [[0, 0, 1]]
    # no overlaps: every box, best score first, equal scores by index
    far = (np.arange(6, dtype=F32)[:, None] * 10 + np.array([0, 0, 1, 1], F32))[None]
    rows = nms(far, np.array([[[0.2, 0.7, 0.7, 0.2, 0.9, 0.7]]], F32), max_out=6, iou=0.5)
    assert rows[:, 2].tolist() == [4, 1, 2, 5, 0, 3]


def test_nms_rows_batch_major_then_class():
    boxes, scores = detector_boxes(3, 60), rng.random((3, 4, 60)).astype(F32)
    rows = nms(boxes, scores, max_out=7, iou=0.4, score=0.3)
    assert (np.diff(rows[:, 0] * 4 + rows[:, 1]) >= 0).all() and len(rows) > 40


@pytest.mark.parametrize("center_point_box", [0, 1])
def test_nms_detector_sized(center_point_box):
    boxes = detector_boxes(1, 1000, center=bool(center_point_box))
    scores = (rng.random((1, 20, 1000)) ** 4).astype(F32)
    nms(boxes, scores, max_out=100, iou=0.5, score=0.05, center_point_box=center_point_box)


def test_nms_corners_in_any_order():
    boxes = detector_boxes(1, 50)
    flipped = boxes.copy()
    flipped[0, ::2] = boxes[0, ::2][:, [2, 3, 0, 1]]   # [y2, x2, y1, x1]
    flipped[0, 1::4] = boxes[0, 1::4][:, [0, 3, 2, 1]]  # [y1, x2, y2, x1]
    scores = rng.random((1, 2, 50)).astype(F32)
    assert (nms(flipped, scores, max_out=50, iou=0.1) == nms(boxes, scores, max_out=50, iou=0.1)).all()


def test_nms_iou_exactly_at_the_threshold_is_kept():
    # IoU of the two boxes: 2 / 6 in float32, equal to the threshold: not above it, so both are kept
    boxes = np.array([[[0, 0, 2, 2], [0, 1, 2, 3]]], F32)
    scores = np.array([[[0.9, 0.8]]], F32)
    assert len(nms(boxes, scores, max_out=2, iou=float(np.float32(2) / np.float32(6)))) == 2
    assert len(nms(boxes, scores, max_out=2, iou=0.33)) == 1


def test_nms_limits():
    boxes, scores = detector_boxes(2, 40), rng.random((2, 3, 40)).astype(F32)
    for max_out in (1, 2, 1000, -3, 0):
        nms(boxes, scores, max_out=max_out, iou=0.3)
    assert len(nms(boxes, scores)) == 0                     # max_output_boxes_per_class absent: 0
    assert len(nms(boxes, scores, max_out=5)) == 2 * 3 * 5  # iou_threshold absent: 0, touching boxes suppress


def test_nms_score_threshold_is_strict():
    boxes = (np.arange(4, dtype=F32)[:, None] * 10 + np.array([0, 0, 1, 1], F32))[None]
    rows = nms(boxes, np.array([[[0.5, 0.25, 0.75, 0.5]]], F32), max_out=4, iou=0.5, score=0.5)
    assert rows[:, 2].tolist() == [2]
    assert len(nms(boxes, np.full((1, 1, 4), 0.1, F32), max_out=4, iou=0.5, score=0.5)) == 0


def test_nms_no_boxes():
    assert nms(np.zeros((2, 0, 4), F32), np.zeros((2, 3, 0), F32), max_out=3, iou=0.5).shape == (0, 3)


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


def roi_pool(x, rois, pooled=(2, 2), scale=None, opset=21):
    """MaxRoiPool on stock ORT and ours (must be equal: both take maxima of the same floats)."""
    attrs = {"pooled_shape": list(pooled), **({} if scale is None else {"spatial_scale": scale})}
    (y,) = check_node("MaxRoiPool", [np.asarray(x, F32), np.asarray(rois, F32)], attrs, opset=opset, outputs=[F32],
                      rtol=0, atol=0)
    return y


def detector_rois(n, batches, size=(600, 800)):
    """ROIs [batch, x1, y1, x2, y2] in image pixels: most inside, some past the edges, some malformed (x2 < x1)."""
    b = rng.integers(0, batches, n).astype(F32)
    x1, y1 = rng.uniform(-50, size[1], n), rng.uniform(-50, size[0], n)
    w, h = rng.uniform(-20, 300, n), rng.uniform(-20, 300, n)
    return np.stack([b, x1, y1, x1 + w, y1 + h], 1).astype(F32)


@pytest.mark.parametrize("pooled", [(7, 7), (3, 5), (1, 1)])
def test_max_roi_pool_on_detector_rois(pooled):
    x = rng.standard_normal((2, 16, 38, 50)).astype(F32)
    y = roi_pool(x, detector_rois(64, 2), pooled, scale=1 / 16)
    assert y.shape == (64, 16, *pooled)


def test_max_roi_pool_rounds_corners_half_away_from_zero_and_starts_below_every_value():
    x = -np.abs(rng.standard_normal((1, 2, 12, 12))).astype(F32) - 1  # every value negative: no bin gives 0
    corners = [[0, 0.5, 1.5, 2.5, 3.5], [0, -0.5, -1.5, 4.49, 4.5], [0, 2.5, 2.5, 2.5, 2.5], [0, 11.5, 11.5, 40, 40]]
    roi_pool(x, corners, (3, 3))
    roi_pool(x, np.array(corners, F32) * 2, (2, 4), scale=0.5)


def test_max_roi_pool_nan_and_infinities_decide_as_stock():
    x = rng.standard_normal((1, 1, 6, 6)).astype(F32)
    x[0, 0, 0, 0], x[0, 0, 2, 3], x[0, 0, 5, 5], x[0, 0, 4, 1] = np.nan, np.nan, np.nan, np.inf
    x[0, 0, 1, 4] = -np.inf
    roi_pool(x, [[0, 0, 0, 5, 5], [0, 0, 0, 2, 2], [0, 3, 3, 5, 5], [0, 1, 1, 4, 4]], (2, 2))


def test_max_roi_pool_empty_answers():
    x = rng.standard_normal((2, 3, 8, 8)).astype(F32)
    assert roi_pool(x, np.zeros((0, 5), F32)).shape == (0, 3, 2, 2)
    assert not roi_pool(x[:, :, :0], [[1, 0, 0, 3, 3]]).any()  # an image without rows: every bin empty, 0
    assert not roi_pool(x, [[0, 20, 20, 30, 30], [1, -30, -30, -20, -20]]).any()  # ROIs outside the image
