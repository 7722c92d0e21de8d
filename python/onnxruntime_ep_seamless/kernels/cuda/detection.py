"""Object detection on CUDA: NonMaxSuppression, whose output shape depends on the data, runs the CPU kernel on
the host (elementwise.on_host: its GPU inputs read back, a seam); MaxRoiPool runs native/cuda/detection.cu."""
import numpy as np

from ..cpu.detection import check_center_point_box, check_roi_pool, non_max_suppression, roi_pool_output
from ..checks import gpu_check_arg
from ..registry import kernel
from .elementwise import on_host

F32 = np.dtype(np.float32)

kernel("NonMaxSuppression", since=10, types=frozenset([F32]), device="cuda", host_inputs=(0, 1, 2, 3, 4),
       capture="host", validate=check_center_point_box)(on_host(non_max_suppression))


@kernel("MaxRoiPool", since=1, types=frozenset([F32]), device="cuda", validate=check_roi_pool)
def max_roi_pool(rt, stream, x, rois, *, pooled_shape, spatial_scale=1.0, _gpu_check=None):
    """The CPU kernel's checks; the batch indices (GPU data) checked on the GPU (an ROI whose index is out of range
    gives zeros and fails the run)."""
    shape = roi_pool_output(x.shape, rois.shape, pooled_shape)
    y = rt.alloc(shape, F32)
    rt.launch("seamless_max_roi_pool_f32", y.size, stream, ("int64", y.size), ("ptr", x.ptr),
              *(("int64", d) for d in x.shape), ("ptr", rois.ptr), ("int64", shape[2]), ("int64", shape[3]),
              ("float", float(spatial_scale)), ("ptr", y.ptr),
              gpu_check_arg(_gpu_check, rt, stream, f"roi {{value}} has a batch index outside [0, {x.shape[0]})",
                            ValueError))
    return (y,)
