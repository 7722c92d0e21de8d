"""kernels/cuda/detection.py's MaxRoiPool (native/cuda/detection.cu) against stock ORT's CPU EP, every node
on our EP (skipped without a GPU); the ROIs are the CPU tests' (tests/kernels/test_detection.py)."""
import numpy as np
import pytest

from kernels.test_detection import detector_rois
from test_cuda_ep import DEVICES, PROBLEM
from test_cuda_ops import F32, check

pytestmark = pytest.mark.skipif(not DEVICES, reason=f"no NVIDIA GPU for the CUDA EP ({PROBLEM or 'none found'})")
rng = np.random.default_rng(29)


@pytest.mark.parametrize("pooled", [(7, 7), (3, 5)])
def test_max_roi_pool(pooled):
    x = rng.standard_normal((2, 16, 38, 50)).astype(F32)
    check("MaxRoiPool", [x, detector_rois(64, 2)], {"pooled_shape": list(pooled), "spatial_scale": 1 / 16},
          opset=21, exact=True)


def test_max_roi_pool_corners_nan_and_empty_bins():
    x = -np.abs(rng.standard_normal((1, 2, 12, 12))).astype(F32) - 1
    x[0, 0, 0, 0], x[0, 1, 5, 5] = np.nan, np.nan
    rois = np.array([[0, 0.5, 1.5, 2.5, 3.5], [0, -0.5, -1.5, 4.49, 4.5], [0, 11.5, 11.5, 40, 40], [0, 20, 20, 30, 30],
                     [0, 0, 0, 11, 11]], F32)
    check("MaxRoiPool", [x, rois], {"pooled_shape": [3, 3]}, opset=21, exact=True)
