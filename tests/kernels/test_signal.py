"""Parity of DFT, STFT, the window functions and MelWeightMatrix (kernels/cpu/signal.py) with stock ORT.
Our transforms run in float64; ORT's in float32, so values near 0 differ by ~1e-5 (atol)."""
import numpy as np
import pytest
from onnx import TensorProto

from parity import check_node

rng = np.random.default_rng(3)
FFT_TOL = {"rtol": 1e-4, "atol": 1e-4}


def check(op, inputs, out_dtype=np.float32, attrs=None, opset=20, const=(), **tol):
    return check_node(op, inputs, attrs, opset, [out_dtype], const, **(tol or {"rtol": 1e-5, "atol": 1e-6}))


@pytest.mark.parametrize("complex_input", [False, True])
@pytest.mark.parametrize("inverse,onesided", [(0, 0), (0, 1), (1, 0)])
def test_dft(complex_input, inverse, onesided):
    if onesided and complex_input:
        pytest.skip("a one-sided DFT takes a real signal")
    x = rng.standard_normal((2, 8, 3, 2 if complex_input else 1)).astype(np.float32)
    check("DFT", [x, None, np.array(1, np.int64)], attrs={"inverse": inverse, "onesided": onesided}, const=(2,),
          **FFT_TOL)
    check("DFT", [x, np.array(10, np.int64), np.array(-2, np.int64)], attrs={"inverse": inverse, "onesided": onesided},
          const=(1, 2), **FFT_TOL)  # zero-padded to 10 along axis 2 (-2)


def test_dft_opset17_axis_attribute():
    x = rng.standard_normal((3, 6, 1)).astype(np.float32)
    check("DFT", [x], attrs={"axis": 1}, opset=17, **FFT_TOL)


@pytest.mark.parametrize("window", [False, True])
def test_stft(window):
    signal = rng.standard_normal((2, 40, 1)).astype(np.float32)
    ins = [signal, np.array(6, np.int64), np.hanning(16).astype(np.float32) if window else None,
           None if window else np.array(16, np.int64)]
    check("STFT", ins, opset=17, const=(1, 2, 3) if window else (1, 3), **FFT_TOL)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
def test_windows(op, periodic):
    check(op, [np.array(10, np.int64)], attrs={"periodic": periodic}, opset=17, rtol=1e-5, atol=1e-6)
    check(op, [np.array(7, np.int32)], np.float64, attrs={"periodic": periodic, "output_datatype": TensorProto.DOUBLE},
          opset=17)


def test_mel_weight_matrix():
    ins = [np.array(8, np.int64), np.array(64, np.int64), np.array(8000, np.int64), np.array(100, np.float32),
           np.array(3000, np.float32)]
    check("MelWeightMatrix", ins, opset=17)
