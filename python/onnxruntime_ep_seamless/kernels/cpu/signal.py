"""Signal processing: DFT, STFT, window functions, MelWeightMatrix (ONNX semantics).

Complex tensors are real tensors with a trailing axis of 2 (real, imaginary); a trailing axis
of 1 holds a real signal. Transforms run in float64 (numpy's FFT) and round once at the end.
"""
import math

import numpy as np

from ..registry import FLOATS, kernel

SIZES = frozenset(map(np.dtype, (np.int32, np.int64)))
from ...graph.ir import attr_dtype


def _scalar(t, default=None):
    return default if t is None or t.size == 0 else t.reshape(-1)[0].item()


def _as_complex(x):
    """[..., 1] (real) or [..., 2] (real, imaginary) -> complex128 (or float64) [...]."""
    x = x.astype(np.float64)
    return x[..., 0] if x.shape[-1] == 1 else x[..., 0] + 1j * x[..., 1]


def _as_pairs(z):
    return np.stack([z.real, z.imag], axis=-1)


def _dft(x, length, axis, inverse, onesided):
    axis %= x.ndim
    signal = _as_complex(x)
    if length is None:
        length = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
    if inverse and onesided:  # a one-sided spectrum back to a real signal
        return np.fft.irfft(signal, n=length, axis=axis)[..., None]
    if inverse:
        return _as_pairs(np.fft.ifft(signal, n=length, axis=axis))
    z = np.fft.fft(signal, n=length, axis=axis)
    if onesided:  # a real signal's spectrum is symmetric: keep bins 0 .. length / 2
        z = np.take(z, range(length // 2 + 1), axis=axis)
    return _as_pairs(z)


@kernel("DFT", since=17, until=19, types=FLOATS)
def dft_17(input, dft_length=None, *, axis=1, inverse=0, onesided=0):
    return (_dft(input, _scalar(dft_length), axis, inverse, onesided).astype(input.dtype),)


@kernel("DFT", since=20, types=FLOATS)
def dft_20(input, dft_length=None, axis=None, *, inverse=0, onesided=0):
    return (_dft(input, _scalar(dft_length), _scalar(axis, -2), inverse, onesided).astype(input.dtype),)


@kernel("STFT", since=17, types=FLOATS)
def stft(signal, frame_step, window=None, frame_length=None, *, onesided=1):
    # frames of frame_length samples every frame_step samples, each weighted by the window, then a DFT
    step = _scalar(frame_step)
    length = window.shape[0] if window is not None else _scalar(frame_length)
    frames = 1 + (signal.shape[1] - length) // step
    starts = np.arange(frames)[:, None] * step + np.arange(length)
    framed = signal[:, starts]                                  # [batch, frames, length, 1|2]
    if window is not None:
        framed = framed * window.astype(np.float64)[:, None]
    return (_dft(framed, length, 2, False, onesided).astype(signal.dtype),)


# --- windows ------------------------------------------------------------------------------

def _window(size, periodic, output_datatype, cosines):
    """sum_k c_k cos(2 pi k n / N) for n < size, N = size (periodic) or size - 1 (symmetric)."""
    size = int(_scalar(size))
    n = np.arange(size, dtype=np.float64)
    period = size if periodic else size - 1
    y = sum(c * np.cos(2 * math.pi * k * n / period) for k, c in enumerate(cosines))
    return (np.asarray(y).astype(attr_dtype(output_datatype)),)


@kernel("HannWindow", since=17, types=SIZES)
def hann_window(size, *, output_datatype=1, periodic=1):
    return _window(size, periodic, output_datatype, (0.5, -0.5))


@kernel("HammingWindow", since=17, types=SIZES)
def hamming_window(size, *, output_datatype=1, periodic=1):
    return _window(size, periodic, output_datatype, (25 / 46, -21 / 46))


@kernel("BlackmanWindow", since=17, types=SIZES)
def blackman_window(size, *, output_datatype=1, periodic=1):
    return _window(size, periodic, output_datatype, (0.42, -0.5, 0.08))


@kernel("MelWeightMatrix", since=17, types=SIZES)
def mel_weight_matrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz, *,
                      output_datatype=1):
    # triangular filters, evenly spaced on the mel scale, over the bins of a one-sided spectrum
    mels, length, rate = int(_scalar(num_mel_bins)), int(_scalar(dft_length)), int(_scalar(sample_rate))
    low = 2595 * np.log10(1 + float(_scalar(lower_edge_hertz)) / 700)
    high = 2595 * np.log10(1 + float(_scalar(upper_edge_hertz)) / 700)
    points = np.arange(mels + 2) * ((high - low) / (mels + 2)) + low
    hertz = 700 * (10 ** (points / 2595) - 1)
    bins = (((length + 1) * hertz) // rate).astype(int)
    out = np.zeros((length // 2 + 1, mels))
    for i in range(mels):
        left, centre, right = bins[i], bins[i + 1], bins[i + 2]
        if centre == left:
            out[centre, i] = 1
        else:
            out[left:centre + 1, i] = (np.arange(left, centre + 1) - left) / (centre - left)
        if right > centre:
            out[centre:right, i] = (right - np.arange(centre, right)) / (right - centre)
    return (out.astype(attr_dtype(output_datatype)),)
