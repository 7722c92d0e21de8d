"""Linear algebra beyond products: Det."""
import numpy as np

from ..registry import FLOATS, kernel
from .elementwise import _via_float32


@kernel("Det", since=11, types=FLOATS)
@_via_float32
def det(X):
    # determinants of the trailing [M, M] matrices
    return (np.linalg.det(X).astype(X.dtype, copy=False),)
