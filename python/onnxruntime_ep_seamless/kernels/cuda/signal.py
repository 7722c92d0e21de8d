"""DFT and STFT on CUDA (ONNX semantics, as kernels/cpu/signal.py): a transform along an axis is one GEMM
by a matrix of cosines and sines made on the host in float64 for the transform's length, the input's
width and the direction, rounded to float32 (O(n^2) work a transform, no FFT; float32 sums). STFT frames
the signal by one strided copy (overlapping reads), weights the frames by the window, then the same GEMM.
Complex tensors are real ones with a trailing axis of 2 (real, imaginary); a trailing 1 is a real signal."""
import math

import numpy as np

from .. import checks
from ..cpu.signal import SIZES, mel_weight_matrix
from ..registry import kernel
from .elementwise import GPU_FLOATS, MUL, binary, cast_to, on_host
from .matmul import gemm_into
from .shape import permuted
from ...runtime.cuda import DeviceTensor, contiguous_strides

F32 = np.dtype(np.float32)


def dft_matrix(samples, width, length, inverse, onesided):
    """(samples * width, bins * out_width) float64: row t * width + i (sample t, component i: 0 real,
    1 imaginary) by column f * out_width + j (bin f, component j), for a signal zero-padded or cropped to
    `length`: numpy's fft (bins 0 .. length / 2 when onesided), ifft, or with inverse and onesided irfft
    (a one-sided spectrum to a real signal of `length`: out_width 1)."""
    if inverse and onesided:
        bins_in = min(samples, length // 2 + 1)
        f = np.arange(bins_in)[:, None]
        t = np.arange(length)[None, :]
        angle = 2 * np.pi * f * t / length
        weight = np.where((f == 0) | ((length % 2 == 0) & (f == length // 2)), 1.0, 2.0) / length
        cos, sin = weight * np.cos(angle), weight * np.sin(angle)
        sin[((f == 0) | (2 * f == length))[:, 0]] = 0.0  # the imaginary parts of bins 0 and length / 2 are unused
        w = np.zeros((samples, width, length, 1))
        w[:bins_in, 0, :, 0] = cos
        if width == 2:
            w[:bins_in, 1, :, 0] = -sin
        return w.reshape(samples * width, length)
    bins = length // 2 + 1 if onesided else length
    used = min(samples, length)
    t = np.arange(used)[:, None]
    f = np.arange(bins)[None, :]
    angle = 2 * np.pi * f * t / length
    cos, sin = np.cos(angle), np.sin(angle)
    sign, scale = (1.0, 1.0 / length) if inverse else (-1.0, 1.0)
    w = np.zeros((samples, width, bins, 2))
    # (xr + i xi)(cos + i sign sin) = xr cos - sign xi sin + i (sign xr sin + xi cos)
    w[:used, 0, :, 0], w[:used, 0, :, 1] = cos * scale, sign * sin * scale
    if width == 2:
        w[:used, 1, :, 0], w[:used, 1, :, 1] = -sign * sin * scale, cos * scale
    return w.reshape(samples * width, bins * 2)


def _transform(rt, stream, x, axis, length, inverse, onesided):
    """x's DFT along axis (not the last): the axis moved next to the last, one GEMM, moved back."""
    rank = len(x.shape)
    axis = checks.axis(axis, rank)
    if axis == rank - 1:
        raise ValueError(f"DFT: axis {axis} is the (real, imaginary) axis of a {rank}-D input; the signal's axis "
                         "must be another one")
    samples, width = x.shape[axis], x.shape[-1]
    if width not in (1, 2):
        raise ValueError(f"DFT: the last axis has {width} values; 1 (real) or 2 (complex) expected")
    if length is None:
        length = 2 * (samples - 1) if inverse and onesided else samples
    if length < 1:
        raise ValueError(f"DFT: dft_length {length}: at least 1 expected")
    perm = [d for d in range(rank - 1) if d != axis] + [axis, rank - 1]
    moved = x if perm == list(range(rank)) else permuted(rt, stream, x, perm)
    wide = moved if moved.dtype == F32 else cast_to(rt, stream, moved, F32)
    matrix = rt.device(DeviceTensor.on_host(dft_matrix(samples, width, length, inverse, onesided).astype(F32)), stream)
    out_width = 1 if inverse and onesided else 2
    bins = matrix.shape[1] // out_width
    rows = math.prod(moved.shape[:-2])
    y = rt.alloc(moved.shape[:-2] + (bins, out_width), F32)
    gemm_into(rt, stream, wide, matrix, y, rows, bins * out_width, samples * width)
    for t in {id(t): t for t in (matrix, wide, moved) if t is not x and t is not y}.values():
        rt.free(t)  # stream-ordered
    if perm != list(range(rank)):
        back = permuted(rt, stream, y, list(np.argsort(perm)))
        rt.free(y)
        y = back
    if x.dtype != F32:
        narrow = cast_to(rt, stream, y, x.dtype)
        rt.free(y)
        y = narrow
    return y


def _scalar(rt, stream, t, default=None):
    if t is None or t.size == 0:
        return default
    return int(np.asarray(rt.to_host(t, stream)).reshape(-1)[0])


@kernel("DFT", since=17, until=19, types=GPU_FLOATS, device="cuda", host_inputs=(1,))
def dft_17(rt, stream, input, dft_length=None, *, axis=1, inverse=0, onesided=0):
    return (_transform(rt, stream, input, axis, _scalar(rt, stream, dft_length), inverse, onesided),)


@kernel("DFT", since=20, types=GPU_FLOATS, device="cuda", host_inputs=(1, 2))
def dft_20(rt, stream, input, dft_length=None, axis=None, *, inverse=0, onesided=0):
    return (_transform(rt, stream, input, _scalar(rt, stream, axis, -2), _scalar(rt, stream, dft_length), inverse,
                       onesided),)


@kernel("STFT", since=17, types=GPU_FLOATS, device="cuda", host_inputs=(1, 3))
def stft(rt, stream, signal, frame_step, window=None, frame_length=None, *, onesided=1):
    """Frames of frame_length samples every frame_step samples (one strided copy), times the window, then
    each frame's DFT: [batch, frames, bins, 2]."""
    step = _scalar(rt, stream, frame_step)
    length = window.shape[0] if window is not None else _scalar(rt, stream, frame_length)
    if window is not None and (len(window.shape) != 1 or frame_length is not None and frame_length.size and
                               _scalar(rt, stream, frame_length) != length):
        raise ValueError(f"STFT: a window of shape {window.shape} for frame_length "
                         f"{_scalar(rt, stream, frame_length)}: a 1-D window of frame_length values expected")
    if length is None or step is None or step < 1 or length < 1 or len(signal.shape) != 3:
        raise ValueError(f"STFT: signal {signal.shape}, frame_step {step}, frame length {length}: a [batch, "
                         "samples, 1|2] signal, a positive step and a window or a frame_length expected")
    batch, samples, width = signal.shape
    if samples < length:
        raise ValueError(f"STFT: a frame of {length} samples is longer than the signal's {samples}")
    frames = 1 + (samples - length) // step
    framed = rt.alloc((batch, frames, length, width), signal.dtype)
    rt.strided_copy(stream, signal, framed, framed.shape, [samples * width, step * width, width, 1],
                    contiguous_strides(framed.shape))
    if window is not None:
        on_gpu = rt.device(window, stream)
        weighted = binary(rt, stream, MUL, framed, DeviceTensor(on_gpu.ptr, (length, 1), window.dtype))
        rt.free(framed)
        if on_gpu.ptr != window.ptr:
            rt.free(on_gpu)
        framed = weighted
    y = _transform(rt, stream, framed, 2, length, 0, onesided)
    rt.free(framed)
    return (y,)


# MelWeightMatrix (mostly sizes) runs the CPU kernel on the host
kernel("MelWeightMatrix", since=17, types=SIZES, device="cuda", host_inputs=(0, 1, 2, 3, 4), capture="host")(
    on_host(mel_weight_matrix))
