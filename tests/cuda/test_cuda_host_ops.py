"""kernels/cuda/host.py: ops whose output shape depends on the data (NonZero, Unique,
NonMaxSuppression) on float inputs, computed on the host inside the CUDA partition (skipped without a
GPU), against stock ORT's CPU EP (test_cuda_capture.py: such a partition is left eager by capture=auto)."""
import numpy as np
import pytest

from parity import Const
from test_cuda_ep import DEVICES, PROBLEM
from test_cuda_ops import F16, F32, I64, check

pytestmark = pytest.mark.skipif(not DEVICES, reason=f"no NVIDIA GPU for the CUDA EP ({PROBLEM or 'none found'})")
rng = np.random.default_rng(31)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("shape", [(3, 4), (5,), (0, 3)])
def test_non_zero(dtype, shape):
    x = (rng.standard_normal(shape) * (rng.random(shape) > 0.5)).astype(dtype)
    check("NonZero", [x], outputs=[I64], exact=True)


@pytest.mark.parametrize("sorted_", [0, 1])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_unique(sorted_, axis):
    x = rng.integers(0, 3, (4, 3)).astype(F32)
    x[2] = x[0]  # a repeated row
    attrs = {"sorted": sorted_} if axis is None else {"sorted": sorted_, "axis": axis}
    check("Unique", [x], attrs, opset=11, outputs=[F32, I64, I64, I64], exact=True)


@pytest.mark.parametrize("center_point_box", [0, 1])
def test_non_max_suppression(center_point_box):
    boxes = rng.uniform(0, 10, (2, 12, 4)).astype(F32)
    if center_point_box:
        boxes[..., 2:] = rng.uniform(1, 4, (2, 12, 2))
    scores = rng.uniform(0, 1, (2, 3, 12)).astype(F32)
    limits = [Const(np.array([4], I64)), Const(np.array([0.3], F32)), Const(np.array([0.2], F32))]
    check("NonMaxSuppression", [boxes, scores, *limits], {"center_point_box": center_point_box}, opset=11,
          outputs=[I64], exact=True)

