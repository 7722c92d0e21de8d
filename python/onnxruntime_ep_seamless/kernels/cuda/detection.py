"""Object detection on CUDA: NonMaxSuppression, whose output shape depends on the data, runs the CPU kernel on
the host (elementwise.on_host: its GPU inputs read back, a seam)."""
import numpy as np

from ..cpu.detection import check_center_point_box, non_max_suppression
from ..registry import kernel
from .elementwise import on_host

F32 = np.dtype(np.float32)

kernel("NonMaxSuppression", since=10, types=frozenset([F32]), device="cuda", host_inputs=(0, 1, 2, 3, 4),
       capture="host", validate=check_center_point_box)(on_host(non_max_suppression))
