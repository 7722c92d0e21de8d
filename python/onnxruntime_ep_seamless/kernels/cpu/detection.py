"""Object detection: NonMaxSuppression (ONNX semantics, ORT's answers), through the native kernel."""
import numpy as np

from ..registry import kernel


def check_center_point_box(node, graph):
    if node.attrs.get("center_point_box", 0) not in (0, 1):
        raise ValueError("center_point_box only support 0 or 1")


def _first(tensor, default):
    """The first element of an optional scalar input (ORT reads no more of it)."""
    return default if tensor is None or tensor.size == 0 else tensor.item(0)


@kernel("NonMaxSuppression", since=10, types=frozenset([np.dtype(np.float32)]), validate=check_center_point_box)
def non_max_suppression(boxes, scores, max_output_boxes_per_class=None, iou_threshold=None,
                        score_threshold=None, *, center_point_box=0):
    # stock's checks, in its order, all ORT_FAIL
    if boxes.ndim != 3:
        raise ValueError("boxes must be a 3D tensor.")
    if scores.ndim != 3:
        raise ValueError("scores must be a 3D tensor.")
    if boxes.shape[0] != scores.shape[0]:
        raise ValueError("boxes and scores should have same num_batches.")
    if boxes.shape[1] != scores.shape[2]:
        raise ValueError("boxes and scores should have same spatial_dimension.")
    if boxes.shape[2] != 4:
        raise ValueError("The most inner dimension in boxes must have 4 data.")
    limit = int(_first(max_output_boxes_per_class, 0))
    iou = float(_first(iou_threshold, 0.0))
    if not 0 <= iou <= 1:
        raise ValueError("iou_threshold must be in range [0, 1].")
    if limit <= 0:
        return (np.zeros((0, 3), np.int64),)
    from .native import non_max_suppression as native_nms
    return (native_nms(boxes, scores, limit, iou, _first(score_threshold, None), center_point_box),)
