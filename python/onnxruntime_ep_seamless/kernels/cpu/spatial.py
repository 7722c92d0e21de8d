"""Sampling and patch ops on (N, C, *spatial) images: GridSample, AffineGrid, Col2Im, DeformConv.

GridSample coordinates are float32, as in ORT and the spec's reference, so that nearest-neighbour
rounding agrees.
"""
import math

import numpy as np

from ..registry import FLOATS, kernel
from .nn import _cubic, _widen

_F32 = np.float32


# --- GridSample ---------------------------------------------------------------------------

def _denormalize(n, length, align_corners):
    """Grid coordinate in [-1, 1] -> pixel coordinate along an axis of `length` pixels."""
    if align_corners:
        return (n + _F32(1)) / _F32(2) * _F32(length - 1)
    return ((n + _F32(1)) * _F32(length) - _F32(1)) / _F32(2)


def _reflect(x, low, high):
    """x reflected off the borders [low, high] until inside (any number of bounces)."""
    span = high - low
    if span <= 0:
        return np.full_like(x, low)
    below, above = x < low, x > high
    dx = np.where(below, low - x, np.where(above, x - high, 0))
    bounces = np.floor(dx / span)
    r = dx - bounces * span
    even = bounces % 2 == 0
    return np.where(below, np.where(even, low + r, high - r),
                    np.where(above, np.where(even, high - r, low + r), x)).astype(x.dtype)


def _taps(x, length, mode, padding_mode, low, high):
    """(indices, weights, inside) per output position for one axis, each [..., taps]."""
    if mode == "nearest":
        index = np.rint(x)[..., None]       # halves to even, as PyTorch
        weights = np.ones_like(index)
    elif mode == "linear":
        x0 = np.floor(x)
        t = (x - x0)[..., None]
        index = x0[..., None] + np.arange(2)
        weights = np.concatenate([1 - t, t], axis=-1)
    else:  # cubic
        x0 = np.floor(x)
        index = x0[..., None] + np.arange(-1, 3)
        weights = _cubic(index - x[..., None], -0.75).astype(x.dtype)
    if padding_mode == "zeros":
        inside = (index >= 0) & (index < length)
    else:
        if padding_mode == "reflection":
            index = np.trunc(_reflect(index, low, high))
        inside = np.ones(index.shape, bool)
    return np.clip(index, 0, length - 1).astype(np.intp), weights, inside


def _check_grid_sample(node, graph):
    mode = node.attrs.get("mode", "linear" if node.since_version >= 20 else "bilinear")
    if mode not in ("nearest", "linear", "bilinear", "cubic", "bicubic"):
        return f"GridSample mode={mode!r} not supported"
    if node.attrs.get("padding_mode", "zeros") not in ("zeros", "border", "reflection"):
        return f"GridSample padding_mode={node.attrs['padding_mode']!r} not supported"
    return None


@kernel("GridSample", since=16, types=FLOATS, check=_check_grid_sample)
def grid_sample(X, grid, *, align_corners=0, mode="linear", padding_mode="zeros"):
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)  # opset 16 names
    x = _widen(X)
    n, c, *dims = x.shape
    nd = len(dims)
    out = grid.shape[1:-1]
    g = grid.astype(_F32)
    per_axis = []
    for i, length in enumerate(dims):
        coord = _denormalize(g[..., nd - 1 - i], length, align_corners)  # the grid lists x (innermost) first
        low, high = (_F32(0), _F32(length - 1)) if align_corners else (_F32(-0.5), _F32(length - 0.5))
        if mode == "nearest":
            coord = np.rint(coord)
        if padding_mode == "border" and mode != "cubic":  # cubic clamps each tap's index instead, as ORT
            coord = np.clip(coord, 0, length - 1)
        elif padding_mode == "reflection":
            coord = _reflect(coord, low, high)
        per_axis.append(_taps(coord, length, mode, padding_mode, low, high))
    batch = np.arange(n).reshape((n,) + (1,) * len(out))
    y = np.zeros((n,) + tuple(out) + (c,), dtype=x.dtype)
    for combo in np.ndindex(*[t[0].shape[-1] for t in per_axis]):
        index = tuple(t[0][..., k] for t, k in zip(per_axis, combo))
        weight = math.prod(t[1][..., k] for t, k in zip(per_axis, combo))
        inside = np.logical_and.reduce([t[2][..., k] for t, k in zip(per_axis, combo)])
        values = np.moveaxis(x, 1, -1)[(batch,) + index]          # (N, *out, C)
        y += (weight * inside)[..., None] * values
    return (np.moveaxis(y, -1, 1).astype(X.dtype, copy=False),)


# --- AffineGrid ---------------------------------------------------------------------------

def affine_base(dims, align_corners):
    """AffineGrid's points before the transform, (prod(dims), nd + 1) float64: the normalized pixel
    centres (or corners) x, y[, z] (the last axis first), then 1. With align_corners an axis of length
    1 is at 1, as stock ORT places it (undefined in the spec: its reference divides by zero and lands
    at -1; PyTorch says 0)."""
    axes = []
    for length in dims:
        if align_corners:
            axes.append(np.linspace(-1, 1, length) if length > 1 else np.ones(1))
        else:
            axes.append((np.arange(length) * 2 + 1) / length - 1)
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack(list(mesh[::-1]) + [np.ones(dims)], axis=-1).reshape(-1, len(dims) + 1)


@kernel("AffineGrid", since=20, types=FLOATS)
def affine_grid(theta, size, *, align_corners=0):
    dims = [int(d) for d in size.reshape(-1)[2:]]
    grid = affine_base(dims, align_corners) @ np.swapaxes(theta.astype(np.float64), 1, 2)
    return (grid.reshape((theta.shape[0],) + tuple(dims) + (len(dims),)).astype(theta.dtype),)


# --- Col2Im -------------------------------------------------------------------------------

@kernel("Col2Im", since=18, types=FLOATS)
def col2im(input, image_shape, block_shape, *, dilations=None, pads=None, strides=None):
    image = [int(d) for d in image_shape.reshape(-1)]
    block = [int(d) for d in block_shape.reshape(-1)]
    nd = len(image)
    dilations, strides = dilations or [1] * nd, strides or [1] * nd
    pads = pads or [0] * (2 * nd)
    n = input.shape[0]
    c = input.shape[1] // math.prod(block)
    blocks = [(i + pads[k] + pads[k + nd] - d * (b - 1) - 1) // s + 1
              for k, (i, b, d, s) in enumerate(zip(image, block, dilations, strides))]
    cols = input.reshape((n, c) + tuple(block) + tuple(blocks))
    # add every block element at its place in the padded image, then crop the padding
    padded = np.zeros((n, c) + tuple(i + pads[k] + pads[k + nd] for k, i in enumerate(image)), dtype=input.dtype)
    for offset in np.ndindex(*block):
        window = tuple(slice(o * d, o * d + (m - 1) * s + 1, s) for o, d, m, s in
                       zip(offset, dilations, blocks, strides))
        padded[(Ellipsis,) + window] += cols[(slice(None), slice(None)) + offset]
    return (padded[(Ellipsis,) + tuple(slice(pads[k], pads[k] + i) for k, i in enumerate(image))],)


# --- DeformConv ---------------------------------------------------------------------------

def _check_deform_conv(node, graph):
    rank = graph.value(node.inputs[0]).shape
    if rank is not None and len(rank) != 4:
        return "DeformConv is implemented for 2-D images (N, C, H, W) only"
    return None


@kernel("DeformConv", since=19, types=FLOATS, check=_check_deform_conv)
def deform_conv(X, W, offset, B=None, mask=None, *, dilations=None, group=1, kernel_shape=None, offset_group=1,
                pads=None, strides=None):
    # A convolution whose taps are displaced by `offset` (per output position and tap), sampled
    # bilinearly (zero outside the image), and weighted by `mask`.
    x = _widen(X)
    n, c, height, width = x.shape
    kh, kw = W.shape[2:]
    sh, sw = strides or (1, 1)
    dh, dw = dilations or (1, 1)
    top, left = (pads or (0, 0, 0, 0))[:2]
    oh, ow = offset.shape[2:]
    off = offset.astype(x.dtype).reshape(n, offset_group, kh, kw, 2, oh, ow)
    weight = np.ones((n, offset_group, kh, kw, oh, ow), x.dtype) if mask is None \
        else mask.astype(x.dtype).reshape(n, offset_group, kh, kw, oh, ow)
    # sampling positions [n, offset_group, kh, kw, oh, ow]
    rows = (np.arange(oh) * sh - top)[:, None] + (np.arange(kh) * dh)[:, None, None, None]
    cols = (np.arange(ow) * sw - left)[None, :] + (np.arange(kw) * dw)[None, :, None, None]
    py, px = rows + off[:, :, :, :, 0], cols + off[:, :, :, :, 1]
    per_group = c // offset_group
    samples = np.zeros((n, offset_group, per_group, kh, kw, oh, ow), x.dtype)
    planes = x.reshape(n, offset_group, per_group, height * width)
    y0, x0 = np.floor(py), np.floor(px)
    for dy in (0, 1):
        for dx in (0, 1):
            yi, xi = y0 + dy, x0 + dx
            w = (1 - np.abs(py - yi)) * (1 - np.abs(px - xi))
            inside = (yi >= 0) & (yi < height) & (xi >= 0) & (xi < width)
            flat = (np.clip(yi, 0, height - 1) * width + np.clip(xi, 0, width - 1)).astype(np.intp)
            # gather each channel of the offset group at the flat positions
            values = np.take_along_axis(planes, flat.reshape(n, offset_group, 1, -1), axis=3)
            samples += values.reshape(samples.shape) * (w * inside * weight)[:, :, None]
    columns = samples.reshape(n, group, (c // group) * kh * kw, oh * ow)
    y = np.matmul(W.astype(x.dtype).reshape(group, W.shape[0] // group, -1), columns)
    y = y.reshape(n, W.shape[0], oh, ow)
    if B is not None:
        y = y + B.astype(x.dtype).reshape(-1, 1, 1)
    return (y.astype(X.dtype, copy=False),)
