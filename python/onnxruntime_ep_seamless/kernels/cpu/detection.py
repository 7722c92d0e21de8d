"""Object detection: NonMaxSuppression and MaxRoiPool (ONNX semantics, ORT's answers), through the native kernels."""
import numpy as np

from .. import checks
from ..registry import kernel

F32 = frozenset([np.dtype(np.float32)])


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


def check_roi_pool(node, graph):
    """What stock refuses when it creates the kernel (FAIL, at session creation)."""
    pooled = node.attrs.get("pooled_shape") or []
    if len(pooled) != 2 or min(pooled) <= 0:
        raise ValueError(f"pooled_shape must hold two positive sizes, got {list(pooled)}")
    if not node.attrs.get("spatial_scale", 1.0) > 0:
        raise ValueError(f"spatial_scale must be positive, got {node.attrs.get('spatial_scale')}")


def roi_pool_output(x_shape: tuple, rois_shape: tuple, pooled_shape) -> tuple:
    """MaxRoiPool's output shape [num_rois, C, ph, pw], once X is [N, C, H, W] and rois [num_rois, 5] (stock checks
    the 5, FAIL; other ranks crash it) and the output fits in memory."""
    if len(x_shape) != 4:
        raise ValueError(f"X must be 4-D [N, C, H, W], got shape {x_shape}")
    if len(rois_shape) != 2 or rois_shape[1] != 5:
        raise ValueError(f"rois must be [num_rois, 5] (batch index, x1, y1, x2, y2), got shape {rois_shape}")
    shape = (rois_shape[0], x_shape[1], int(pooled_shape[0]), int(pooled_shape[1]))
    checks.allocation(shape, 4, "MaxRoiPool's output")
    return shape


@kernel("MaxRoiPool", since=1, types=F32, validate=check_roi_pool)
def max_roi_pool(x, rois, *, pooled_shape, spatial_scale=1.0):
    shape = roi_pool_output(x.shape, rois.shape, pooled_shape)
    batch = rois[:, 0]
    bad = np.flatnonzero(~((batch > -1) & (batch < x.shape[0])))  # an index truncates toward zero, as stock's int
    if bad.size:
        raise ValueError(f"roi {bad[0]} has batch index {batch[bad[0]]}, outside [0, {x.shape[0]})")
    from .native import max_roi_pool as native_roi_pool
    return (native_roi_pool(x, rois, shape[2], shape[3], float(spatial_scale)),)
