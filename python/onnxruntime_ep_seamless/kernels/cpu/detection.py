"""Object detection: NonMaxSuppression (ONNX semantics)."""
import numpy as np

from ..registry import FLOATS, kernel


def _corners(boxes, center_point_box):
    """(x_min, y_min, x_max, y_max) columns of boxes given as [y1, x1, y2, x2] (any two opposite
    corners) or, with center_point_box, as [x_center, y_center, width, height]."""
    if center_point_box:
        x, y, w, h = boxes.T
        return x - w / 2, y - h / 2, x + w / 2, y + h / 2
    y1, x1, y2, x2 = boxes.T
    return np.minimum(x1, x2), np.minimum(y1, y2), np.maximum(x1, x2), np.maximum(y1, y2)


def _iou(corners, i, others):
    """Intersection over union of box i with the boxes `others` (0 where either box is empty)."""
    x0, y0, x1, y1 = corners
    w = np.minimum(x1[i], x1[others]) - np.maximum(x0[i], x0[others])
    h = np.minimum(y1[i], y1[others]) - np.maximum(y0[i], y0[others])
    inter = np.where((w > 0) & (h > 0), w * h, 0)
    area = (x1 - x0) * (y1 - y0)
    union = area[i] + area[others] - inter
    valid = (inter > 0) & (area[i] > 0) & (area[others] > 0) & (union > 0)
    return np.where(valid, inter / np.where(valid, union, 1), 0)


@kernel("NonMaxSuppression", since=10, types=FLOATS)
def non_max_suppression(boxes, scores, max_output_boxes_per_class=None, iou_threshold=None,
                        score_threshold=None, *, center_point_box=0):
    limit = 0 if max_output_boxes_per_class is None or max_output_boxes_per_class.size == 0 \
        else max(int(max_output_boxes_per_class.reshape(-1)[0]), 0)
    iou_limit = 0.0 if iou_threshold is None or iou_threshold.size == 0 else float(iou_threshold.reshape(-1)[0])
    has_floor = score_threshold is not None and score_threshold.size > 0
    floor = float(score_threshold.reshape(-1)[0]) if has_floor else 0.0
    selected = []
    for b in range(scores.shape[0]):
        corners = _corners(boxes[b].astype(np.float64), center_point_box)
        for c in range(scores.shape[1]):
            s = scores[b, c]
            candidates = np.flatnonzero(s > floor) if has_floor else np.arange(s.size)
            # highest score first; equal scores: lower box index first
            order = candidates[np.lexsort((candidates, -s[candidates]))]
            kept = []
            for i in order:
                if len(kept) >= limit:
                    break
                # suppressed when it overlaps a kept box by more than the threshold
                if not kept or not np.any(_iou(corners, i, np.array(kept)) > iou_limit):
                    kept.append(i)
            selected += [(b, c, i) for i in kept]
    return (np.array(selected, dtype=np.int64).reshape(-1, 3),)
