"""DFT and STFT on the CUDA EP (kernels/cuda/signal.py; skipped without a GPU), against stock ORT's CPU EP.
Ours: float32 GEMMs by float64-made cosine/sine matrices; stock: an FFT in float32."""
import numpy as np
import pytest

from parity import Const
from test_cuda_ep import DEVICES, PROBLEM
from test_cuda_ops import F16, F32, I64, check

pytestmark = pytest.mark.skipif(not DEVICES, reason=f"no NVIDIA GPU for the CUDA EP ({PROBLEM or 'none found'})")
rng = np.random.default_rng(41)
FFT_TOL = {"rtol": 1e-4, "atol": 1e-4}  # sums of up to 16 terms of O(1) in float32, in other orders


@pytest.mark.parametrize("complex_input", [False, True])
@pytest.mark.parametrize("inverse,onesided", [(0, 0), (0, 1), (1, 0)])
@pytest.mark.parametrize("length,axis", [(None, 1), (10, -2), (5, 1)])
def test_dft(complex_input, inverse, onesided, length, axis):
    if onesided and complex_input:
        pytest.skip("a one-sided DFT takes a real signal")
    x = rng.standard_normal((2, 8, 3, 2 if complex_input else 1)).astype(F32)
    size = None if length is None else Const(np.array(length, I64))
    check("DFT", [x, size, Const(np.array(axis, I64))], {"inverse": inverse, "onesided": onesided}, opset=20,
          **FFT_TOL)


def test_dft_opset17_and_float16():
    x = rng.standard_normal((3, 6, 1)).astype(F32)
    check("DFT", [x], {"axis": 1}, opset=17, **FFT_TOL)
    check("DFT", [x.astype(F16)], {"axis": 1}, opset=17, rtol=3e-3, atol=3e-3, ref_in_float32=True)


@pytest.mark.parametrize("window", [False, True])
def test_stft(window):
    signal = rng.standard_normal((2, 40, 1)).astype(F32)
    inputs = [signal, Const(np.array(6, I64)), Const(np.hanning(16).astype(F32)) if window else None,
              None if window else Const(np.array(16, I64))]
    check("STFT", inputs, opset=17, **FFT_TOL)
