"""Convolution, pooling, Resize and sampling ops on CUDA (native/cuda/spatial.cu), NCHW.

Conv is im2col + cuBLAS GEMM (groups as a batched GEMM); ConvTranspose is a GEMM then col2im as
a gather over kernel taps. Window geometry, Resize coordinates and their rounding come from the
CPU kernels' host helpers (kernels/cpu/spatial.py), so both devices agree on shapes and sampling.
Float types compute in float32 and round once (Conv's bias aside: it is added to the GEMM's
rounded output; ConvTranspose sums rounded GEMM columns).
Col2Im adds each block offset's columns into the image by a strided copy and an Add; GridSample sums
its taps per output element as the CPU kernel (spatial.cu's grid_sample); DeformConv samples its
columns bilinearly (spatial.cu's deform) for a GEMM by W. GlobalLpPool, LpPool, MaxUnpool and AffineGrid are
composed of our other kernels.
"""
import math

import numpy as np

from ...runtime.cuda import MAX_DIMS, DeviceTensor, contiguous_strides
from ...runtime.cuda_args import struct_arg, lib as codes
from ..checks import InvalidArgument
from ..cpu.spatial import (affine_base, check_deform_conv, conv_transpose_geometry, geometry, nearest_index,
                           original_coords, pooled_from, stock_max_pool_path)
from ..cpu.spatial import causal_conv_geometry
from ..cpu.spatial import check_causal_conv as cpu_check_causal_conv
from ..cpu.spatial import check_grid_sample as cpu_check_grid_sample
from ..registry import FUSED_DOMAIN, kernel
from .elementwise import (ABS, ADD, GPU_FLOATS, POW, SUFFIX, Scratch, binary, cast_to, check_ints, device_scalar,
                          unary)
from .attention import check_real_lengths
from .matmul import batched_product
from .reduction import L1, L2, MAX_OF, MEAN, reduce
from .shape import MOVABLE, host_ints, scatter_elements

SCRATCH_BYTES = 1 << 28  # im2col/col2im column buffers above this are split into chunks of images
# spatial.cu PoolMode: MaxPool's by stock's path (stock_max_pool_path), the averages, LpPool's sum
POOL_MAX = {"scalar": codes.POOL_MAX_SCALAR, "loop": codes.POOL_MAX_LOOP,
            "vector": (None, None, codes.POOL_MAX_VECTOR_2D, codes.POOL_MAX_VECTOR_3D)}
POOL_AVERAGE, POOL_AVERAGE_WITH_PADS, POOL_SUM = codes.POOL_AVERAGE, codes.POOL_AVERAGE_WITH_PADS, codes.POOL_SUM


_F32 = np.float32
F32, F16 = np.dtype(_F32), np.dtype(np.float16)


def _at(t: DeviceTensor, elements: int) -> DeviceTensor:
    """A view of t starting `elements` elements in (for GEMM operands and chunked launches)."""
    return DeviceTensor(t.ptr + elements * t.dtype.itemsize, t.shape, t.dtype)


def _window(in_shape, out_shape, kernel, strides, dilations, begin, end) -> tuple:
    """args.h Window, padded in front to 3 spatial dims with unit dims."""
    lead = 3 - len(in_shape)
    front = lambda values, unit=1: [unit] * lead + [int(v) for v in values]
    return struct_arg("Window", **{"in": front(in_shape)}, out=front(out_shape), kernel=front(kernel),
                      stride=front(strides), dilation=front(dilations), pad_begin=front(begin, 0),
                      pad_end=front(end, 0))


def _spatial_rank(shape):
    if not 3 <= len(shape) <= 5:
        raise ValueError(f"input of shape {shape}: CUDA convolutions and pools take 1 to 3 spatial dims")


def _window_lists(nd, **lists):
    """Each given per-axis list (kernel_shape, strides, dilations; pads: two per axis) has an entry per spatial
    axis: the windows are computed axis by axis from them."""
    for name, values in lists.items():
        want = 2 * nd if name == "pads" else nd
        if values is not None and len(values) != want:
            raise ValueError(f"Attribute {name} has incorrect size: {len(values)} values for {nd} spatial axes")


def _weights(x, w, b, group, kernel_shape, transposed):
    """Conv's (M, C / group, *kernel) or ConvTranspose's (C, M / group, *kernel) weights and the bias (M,) as the
    GEMMs read them, checked against x (N, C, *spatial) as ORT does."""
    c = x.shape[1]
    if len(w.shape) != len(x.shape):
        raise ValueError(f"X num_dims does not match W num_dims. X: {x.shape} W: {w.shape}")
    if kernel_shape is not None and tuple(kernel_shape) != w.shape[2:]:
        raise ValueError(f"kernel_shape is not compatible with W shape. kernel_shape: {list(kernel_shape)} W: "
                         f"{w.shape}")
    if group < 1 or c % group:
        raise ValueError(f"Input channels C ({c}) are not a multiple of group ({group})")
    if transposed:
        m = w.shape[1] * group
        if w.shape[0] != c:
            raise InvalidArgument(f"filter number not equal to input channel number. filter_number: {w.shape[0]} "
                                  f"num_input_channels: {c}")
        if b is not None and b.shape != (m,):
            raise InvalidArgument(f"Bias shape is not compatible with number of output channels. It should be a 1-D "
                                  f"tensor with size num_output_channels(M). Bias: {b.shape} num_output_channels: {m}")
        return
    m = w.shape[0]
    if w.shape[1] * group != c or m % group:
        raise ValueError(f"Input channels C is not equal to kernel channels * group, or M ({m}) is not a multiple of "
                         f"group. C: {c} kernel channels: {w.shape[1]} group: {group}")
    if b is not None and b.shape != (m,):
        raise ValueError(f"Conv : bias must be a 1D tensor of size output_channels ({m}), got {b.shape}")


def check_spatial(node, graph):
    shape = graph.value(node.inputs[0]).shape
    if shape is not None and not 3 <= len(shape) <= 5:
        return f"{len(shape) - 2} spatial dims (CUDA takes 1 to 3)"
    return None


def _chunk(images, bytes_per_image):
    """Images per column buffer: all when they fit in SCRATCH_BYTES, else as many as fit (at least one)."""
    return max(1, min(images, SCRATCH_BYTES // max(bytes_per_image, 1)))


# --- Conv / ConvTranspose -----------------------------------------------------------------


@kernel("Conv", since=1, types=GPU_FLOATS, device="cuda", check=check_spatial)
def conv(rt, stream, x, w, b=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
         strides=None):
    _spatial_rank(x.shape)
    nd = len(x.shape) - 2
    _weights(x, w, b, group, kernel_shape, transposed=False)
    _window_lists(nd, strides=strides, dilations=dilations, pads=pads)
    n, c = x.shape[:2]
    m, kernel = w.shape[0], w.shape[2:]
    strides, dilations = list(strides or [1] * nd), list(dilations or [1] * nd)
    begin, end, out = geometry(x.shape[2:], kernel, strides, dilations, pads, auto_pad)
    y = rt.alloc((n, m) + tuple(out), x.dtype)
    if not y.size:
        return (y,)
    mg, taps, length = m // group, math.prod(kernel), math.prod(out)
    depth = c // group * taps                       # GEMM depth of one group: its channels x kernel taps
    cols_per_image = c * taps * length               # im2col of one image: (C * taps, L)
    # a 1x1 kernel with unit strides and no padding reads x as it is: x is its own im2col
    direct = taps == 1 and all(s == 1 for s in strides) and not any(begin) and not any(end)
    chunk = n if direct else _chunk(n, cols_per_image * x.dtype.itemsize)
    cols = None if direct else rt.alloc((chunk, c * taps, length), x.dtype)
    window = _window(x.shape[2:], out, kernel, strides, dilations, begin, end)
    in_per_image = c * math.prod(x.shape[2:])
    for first in range(0, n, chunk):
        count = min(chunk, n - first)
        if direct:
            src = _at(x, first * in_per_image)
        else:
            total = count * cols_per_image
            rt.launch(f"seamless_im2col_{x.dtype.itemsize}", total, stream, ("int64", total),
                      ("ptr", _at(x, first * in_per_image).ptr), ("ptr", cols.ptr), window)
            src = cols
        if group == 1:  # one GEMM for the chunk: the same W against each image's columns
            rt.gemm(stream, w, src, _at(y, first * m * length), m, length, depth, batch=count, stride_a=0,
                    stride_b=cols_per_image)
        else:  # per image, the groups as a batch: W_g (M/g, depth) . cols_g (depth, L)
            for i in range(count):
                rt.gemm(stream, w, _at(src, i * cols_per_image), _at(y, (first + i) * m * length), mg, length, depth,
                        batch=group, stride_a=mg * depth, stride_b=depth * length)
    if cols is not None:
        rt.free(cols)  # stream-ordered: the GEMMs reading it are queued
    if b is not None:
        rt.launch(f"seamless_conv_bias_{SUFFIX[x.dtype]}", y.size, stream, ("int64", y.size), ("ptr", y.ptr),
                  ("ptr", b.ptr), ("int64", m), ("int64", length))
    return (y,)


@kernel("ConvTranspose", since=1, types=GPU_FLOATS, device="cuda", check=check_spatial)
def conv_transpose(rt, stream, x, w, b=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                   output_padding=None, output_shape=None, pads=None, strides=None):
    _spatial_rank(x.shape)
    nd = len(x.shape) - 2
    _weights(x, w, b, group, kernel_shape, transposed=True)
    _window_lists(nd, strides=strides, dilations=dilations, pads=pads, output_padding=output_padding)
    n, c = x.shape[:2]
    in_shape, kernel = x.shape[2:], w.shape[2:]
    cg, mg = c // group, w.shape[1]
    m = mg * group
    strides, dilations = list(strides or [1] * nd), list(dilations or [1] * nd)
    begin, out = conv_transpose_geometry(in_shape, kernel, strides, dilations, pads, auto_pad, output_padding,
                                          output_shape)
    y = rt.alloc((n, m) + tuple(out), x.dtype)
    if not y.size:
        return (y,)
    taps, length, out_plane = math.prod(kernel), math.prod(in_shape), math.prod(out)
    cols_per_image = m * taps * length               # per image W^T . x: (M * taps, L_in)
    chunk = _chunk(n, cols_per_image * x.dtype.itemsize)
    cols = rt.alloc((chunk, m * taps, length), x.dtype)
    if cg == 0 or length == 0:
        rt.zero(cols, stream)                        # nothing to multiply: no contributions, bias only
    window = _window(in_shape, out, kernel, strides, dilations, begin, [0] * nd)
    for first in range(0, n, chunk):
        count = min(chunk, n - first)
        # W is (C, M/g, *kernel): group g's rows read as (C/g, M/g * taps) give W_g^T with trans_a
        if cg and length:
            if group == 1:
                rt.gemm(stream, w, _at(x, first * c * length), cols, m * taps, length, c, batch=count, stride_a=0,
                        stride_b=c * length, trans_a=True)
            else:
                for i in range(count):
                    rt.gemm(stream, w, _at(x, (first + i) * c * length), _at(cols, i * cols_per_image), mg * taps,
                            length, cg, batch=group, stride_a=cg * mg * taps, stride_b=cg * length, trans_a=True)
        total = count * m * out_plane
        rt.launch(f"seamless_col2im_{SUFFIX[x.dtype]}", total, stream, ("int64", total), ("ptr", cols.ptr),
                  ("ptr", b.ptr if b is not None else 0), ("ptr", _at(y, first * m * out_plane).ptr), ("int64", m),
                  window)
    rt.free(cols)
    return (y,)


# --- pooling ------------------------------------------------------------------------------


def _pool(rt, stream, x, mode, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode, storage_order=0):
    """mode: a PoolMode, or POOL_MAX (by stock's path)."""
    _spatial_rank(x.shape)
    nd = len(x.shape) - 2
    _window_lists(nd, kernel_shape=kernel_shape, strides=strides, dilations=dilations, pads=pads)
    strides, dilations = list(strides or [1] * nd), list(dilations or [1] * nd)
    begin, end, out = geometry(x.shape[2:], kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    y = rt.alloc(x.shape[:2] + tuple(out), x.dtype)
    if mode is POOL_MAX:
        path = stock_max_pool_path(x.dtype, x.shape[2:], kernel_shape, strides, dilations, begin, end, storage_order)
        if path == "global":
            _global_max_pool(rt, stream, x, y)
            return (y,)
        mode = POOL_MAX["vector"][nd] if path == "vector" else POOL_MAX[path]
    rt.launch(f"seamless_pool_{SUFFIX[x.dtype]}", y.size, stream, ("int64", y.size), ("ptr", x.ptr), ("ptr", y.ptr),
              ("int", mode), _window(x.shape[2:], out, kernel_shape, strides, dilations, begin, end))
    return (y,)


def _check_max_pool(node, graph):
    if len(node.outputs) > 1 and node.outputs[1]:
        return "MaxPool's Indices output is not produced on CUDA"
    return check_spatial(node, graph)


@kernel("MaxPool", since=1, types=GPU_FLOATS, device="cuda", check=_check_max_pool)
def max_pool(rt, stream, x, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape, pads=None,
             storage_order=0, strides=None):
    return _pool(rt, stream, x, POOL_MAX, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode, storage_order)


@kernel("AveragePool", since=1, types=GPU_FLOATS, device="cuda", check=check_spatial)
def average_pool(rt, stream, x, *, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None,
                 kernel_shape, pads=None, strides=None):
    mode = POOL_AVERAGE_WITH_PADS if count_include_pad else POOL_AVERAGE
    return _pool(rt, stream, x, mode, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)


@kernel("GlobalLpPool", since=2, types=GPU_FLOATS, device="cuda",
        check=lambda n, g: None if n.attrs.get("p", 2) in (1, 2) else f"p={n.attrs.get('p')} (1 or 2)")
def global_lp_pool(rt, stream, x, *, p=2):
    s = Scratch(rt, x)
    y = s(reduce(rt, stream, L1 if p == 1 else L2, s(cast_to(rt, stream, x, F32)), list(range(2, len(x.shape))), 1))
    return s.done(cast_to(rt, stream, y, x.dtype))


@kernel("LpPool", since=2, types=GPU_FLOATS, device="cuda", check=check_spatial)
def lp_pool(rt, stream, x, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape, p=2, pads=None,
            strides=None):
    """(sum of |x|^p over the window)^(1/p) in float32; padding adds nothing."""
    s = Scratch(rt, x)
    exponent, root = (s(device_scalar(rt, stream, v)) for v in (float(p), 1.0 / p))
    powered = s(binary(rt, stream, POW, s(unary(rt, stream, ABS, s(cast_to(rt, stream, x, F32)))), exponent))
    (total,) = _pool(rt, stream, powered, POOL_SUM, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    return s.done(cast_to(rt, stream, s(binary(rt, stream, POW, s(total), root)), x.dtype))


@kernel("MaxUnpool", since=9, types=MOVABLE, device="cuda", host_inputs=(2,))
def max_unpool(rt, stream, x, indices, output_shape=None, *, kernel_shape, pads=None, strides=None,
               _gpu_check=None):
    """x scattered to the flat positions `indices` of the pooled-from shape (zeros elsewhere), then
    placed at the start of output_shape, as the spec's reference does (kernels/cpu/spatial.py)."""
    if indices.shape != x.shape:  # an index per value
        raise ValueError(f"Index tensor shape should be same as that of the input data tensor to unpool: "
                         f"{indices.shape} and {x.shape}")
    inferred = pooled_from(x.shape, kernel_shape, strides, pads)
    size = math.prod(inferred)
    check_ints(rt, stream, indices, 0, size - 1, _gpu_check,
               f"Index value out of bounds. Got: {{value}}. Valid range is [0, {size}).")
    s = Scratch(rt, x, indices)
    flat = s(rt.alloc((math.prod(inferred),), x.dtype))
    rt.zero(flat, stream)
    (y,) = scatter_elements(rt, stream, flat, DeviceTensor(indices.ptr, (indices.size,), indices.dtype),
                            DeviceTensor(x.ptr, (x.size,), x.dtype), axis=0)
    y = DeviceTensor(y.ptr, inferred, y.dtype)
    if output_shape is None:
        return s.done(y)
    s(y)
    shape = tuple(int(d) for d in rt.to_host(output_shape, stream).reshape(-1))
    if len(shape) != len(inferred) or any(o < i for o, i in zip(shape, inferred)):
        raise ValueError(f"MaxUnpool: output_shape {shape} is smaller than the unpooled shape {inferred}")
    out = rt.alloc(shape, x.dtype)
    rt.zero(out, stream)
    rt.strided_copy(stream, y, out, inferred, contiguous_strides(inferred), contiguous_strides(shape))
    return s.done(out)


# --- Resize -------------------------------------------------------------------------------


def _check_resize(node, graph):
    a = node.attrs
    mode = a.get("mode", "nearest")
    if mode not in ("nearest", "linear"):
        return f"Resize mode={mode!r} not supported on CUDA (nearest and linear are)"
    if a.get("coordinate_transformation_mode") == "tf_crop_and_resize":
        return "Resize coordinate_transformation_mode='tf_crop_and_resize' not supported on CUDA"
    if a.get("antialias", 0):
        return "Resize antialias=1 not supported on CUDA"
    if a.get("exclude_outside", 0):
        return "Resize exclude_outside=1 not supported on CUDA"
    if a.get("keep_aspect_ratio_policy", "stretch") != "stretch":
        return f"Resize keep_aspect_ratio_policy={a['keep_aspect_ratio_policy']!r} not supported on CUDA"
    shape = graph.value(node.inputs[0]).shape
    if shape is not None and len(shape) > MAX_DIMS:
        return f"rank {len(shape)} above the CUDA kernels' limit of {MAX_DIMS}"
    if "axes" in a:
        rank = len(shape) if shape is not None else None
        if rank is None or [ax + rank if ax < 0 else ax for ax in a["axes"]] != list(range(rank)):
            return "Resize axes other than all axes in order are not supported on CUDA"
    return None


def _resize(rt, stream, x, scales, sizes, mode, coordinate_mode, nearest_mode):
    """x resized over all axes; scales/sizes are host values. Output shape and scales as in the CPU
    kernel (float32); each axis' sampling positions and weights become tables the kernel reads."""
    rank = len(x.shape)
    if rank > MAX_DIMS:
        raise ValueError(f"rank {rank} above the CUDA kernels' limit of {MAX_DIMS}")
    if sizes is not None:
        out_shape = [int(s) for s in sizes]
        if not x.size and math.prod(out_shape):  # an empty axis has no element to sample
            raise ValueError(f"Resize of an empty input {x.shape} to a non-empty output {tuple(out_shape)}")
        scale = [_F32(o) / _F32(i) for o, i in zip(out_shape, x.shape)]
    elif scales is not None:
        scale = [_F32(s) for s in scales]
        out_shape = [int(np.floor(s * _F32(i))) for s, i in zip(scale, x.shape)]
    else:
        raise ValueError("Resize needs scales or sizes")
    if len(out_shape) != rank:
        raise ValueError(f"Resize of a rank-{rank} input with {len(out_shape)} scales/sizes")
    if any(d < 0 for d in out_shape):
        raise ValueError(f"Resize to a negative size: {out_shape}")
    y = rt.alloc(out_shape, x.dtype)
    if not y.size:
        return (y,)
    lo, hi, weight, offsets, blended = [], [], [], [], 0
    for d, (n_in, n_out, s) in enumerate(zip(x.shape, out_shape, scale)):
        offsets.append(sum(len(t) for t in lo))
        coords = original_coords(coordinate_mode, n_out, n_in, s, 0.0, 1.0)
        if mode == "nearest":
            index = np.clip(nearest_index(coords, nearest_mode, s), 0, n_in - 1).astype(np.int64)
            lo.append(index)
            hi.append(index)
            weight.append(np.zeros(n_out, _F32))
        else:  # linear: the two neighbours of the clamped coordinate, as the CPU kernel
            clamped = np.clip(coords, 0, n_in - 1)
            left = clamped.astype(np.int64)
            w = (clamped - left).astype(_F32)
            lo.append(left)
            hi.append(np.minimum(left + 1, n_in - 1))
            weight.append(w)
            if w.any():
                blended |= 1 << d
    index_table = np.concatenate(lo + hi)
    weight_table = np.concatenate(weight)
    positions = len(weight_table)
    index_d = rt.device(DeviceTensor.on_host(index_table), stream)
    weight_d = rt.device(DeviceTensor.on_host(weight_table), stream)
    axes = struct_arg("ResizeAxes", in_strides=contiguous_strides(x.shape), out_dims=list(out_shape),
                      table_offset=offsets, rank=rank, blended=blended)
    rt.launch(f"seamless_resize_{SUFFIX[x.dtype]}", y.size, stream, ("int64", y.size), ("ptr", x.ptr), ("ptr", y.ptr),
              ("ptr", index_d.ptr), ("ptr", _at(index_d, positions).ptr), ("ptr", weight_d.ptr), axes)
    rt.free(index_d)  # stream-ordered: the launch reading them is queued
    rt.free(weight_d)
    return (y,)


def _floats(rt, stream, t):
    """A float (scales) input's values on the host; None when absent or empty (an absent input)."""
    if t is None or t.size == 0:
        return None
    return [float(v) for v in np.asarray(rt.to_host(t, stream)).reshape(-1)]


@kernel("Resize", since=10, until=10, types=GPU_FLOATS, device="cuda", check=_check_resize, host_inputs=(1,))
def resize_10(rt, stream, x, scales, *, mode="nearest"):
    # Upsample-9 generalized: asymmetric coordinates, ORT's "simple" nearest rounding
    return _resize(rt, stream, x, _floats(rt, stream, scales), None, mode, "asymmetric", "simple")


@kernel("Upsample", since=7, until=8, types=GPU_FLOATS, device="cuda", check=_check_resize)
def upsample_7(rt, stream, x, *, mode="nearest", scales):
    return _resize(rt, stream, x, [float(v) for v in scales], None, mode, "asymmetric", "simple")


@kernel("Upsample", since=9, until=9, types=GPU_FLOATS, device="cuda", check=_check_resize, host_inputs=(1,))
def upsample_9(rt, stream, x, scales, *, mode="nearest"):
    return resize_10(rt, stream, x, scales, mode=mode)


@kernel("Resize", since=11, types=GPU_FLOATS, device="cuda", check=_check_resize, host_inputs=(1, 2, 3))
def resize_11(rt, stream, x, roi=None, scales=None, sizes=None, *, antialias=0, axes=None,
              coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.75, exclude_outside=0,
              extrapolation_value=0.0, keep_aspect_ratio_policy="stretch", mode="nearest",
              nearest_mode="round_prefer_floor"):
    # roi only matters to tf_crop_and_resize (declined)
    sizes = host_ints(rt, stream, sizes) if sizes is not None and sizes.size else None
    return _resize(rt, stream, x, _floats(rt, stream, scales), sizes, mode, coordinate_transformation_mode,
                   nearest_mode)


@kernel("Col2Im", since=18, types=GPU_FLOATS, device="cuda", host_inputs=(1, 2))
def col2im(rt, stream, input, image_shape, block_shape, *, dilations=None, pads=None, strides=None):
    """Each block element's column values added at its places in the padded image, one block offset
    after another as kernels/cpu/spatial.py's loop (a strided copy into a zeroed image, then an Add:
    the CPU EP's sums, in its order), then the padding cropped."""
    image, block = host_ints(rt, stream, image_shape), host_ints(rt, stream, block_shape)
    nd = len(image)
    dilations, strides, pads = dilations or [1] * nd, strides or [1] * nd, pads or [0] * (2 * nd)
    per_block = math.prod(block)
    if len(input.shape) != 3 or not per_block or input.shape[1] % per_block:
        raise ValueError(f"Col2Im: input {input.shape} for block {block}: [N, C * {per_block}, L] expected")
    n, c = input.shape[0], input.shape[1] // per_block
    blocks = [(i + pads[k] + pads[k + nd] - d * (b - 1) - 1) // s + 1
              for k, (i, b, d, s) in enumerate(zip(image, block, dilations, strides))]
    if math.prod(blocks) != input.shape[2]:
        raise ValueError(f"Col2Im: {input.shape[2]} columns, but image {image}, block {block}, pads {pads}, "
                         f"strides {strides} and dilations {dilations} make {math.prod(blocks)}")
    padded_shape = (n, c) + tuple(i + pads[k] + pads[k + nd] for k, i in enumerate(image))
    cols = contiguous_strides((n, c) + tuple(block) + tuple(blocks))
    image_strides = contiguous_strides(padded_shape)
    total, part = rt.alloc(padded_shape, input.dtype), rt.alloc(padded_shape, input.dtype)
    rt.zero(total, stream)
    for offset in np.ndindex(*block):
        rt.zero(part, stream)
        rt.strided_copy(stream, input, part, (n, c) + tuple(blocks),
                        cols[:2] + [cols[2 + nd + k] for k in range(nd)],
                        image_strides[:2] + [strides[k] * image_strides[2 + k] for k in range(nd)],
                        sum(o * cols[2 + k] for k, o in enumerate(offset)),
                        sum(o * dilations[k] * image_strides[2 + k] for k, o in enumerate(offset)))
        added = binary(rt, stream, ADD, total, part)
        rt.free(total)
        total = added
    y = rt.alloc((n, c) + tuple(image), input.dtype)
    rt.strided_copy(stream, total, y, y.shape, image_strides, contiguous_strides(y.shape),
                    sum(pads[k] * image_strides[2 + k] for k in range(nd)))
    rt.free(total)
    rt.free(part)
    return (y,)


def _check_grid_sample(node, graph):
    problem = cpu_check_grid_sample(node, graph)
    if problem:
        return problem
    x, grid = graph.value(node.inputs[0]), graph.value(node.inputs[1])
    if x.dtype != grid.dtype:
        return f"a {grid.dtype} grid for {x.dtype} data: the same type only on CUDA"
    if x.shape is not None and not 3 <= len(x.shape) <= 5:
        return f"{len(x.shape)}-D data: 1 to 3 spatial axes on CUDA"
    return None


@kernel("GridSample", since=16, types=GPU_FLOATS, device="cuda", check=_check_grid_sample)
def grid_sample(rt, stream, X, grid, *, align_corners=0, mode="linear", padding_mode="zeros"):
    """spatial.cu's grid_sample: a thread per output element, its taps in the CPU kernel's order."""
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)  # opset 16 names
    n, c, *dims = X.shape
    nd = len(dims)
    if len(grid.shape) != nd + 2 or grid.shape[0] != n or grid.shape[-1] != nd:
        raise ValueError(f"GridSample: a grid of shape {grid.shape} for data {X.shape}: ({n}, *out, {nd}) expected")
    if 0 in dims and grid.size:  # taps are clamped into each axis: an empty one has none
        raise ValueError(f"Input spatial dimensions must be non-empty for sampling, got {X.shape}")
    out = tuple(grid.shape[1:-1])
    y = rt.alloc((n, c) + out, X.dtype)
    shape = struct_arg("GridSampleShape", n=n, c=c, points=math.prod(out), nd=nd, dims=dims + [1] * (3 - nd),
                       mode=("nearest", "linear", "cubic").index(mode),
                       padding=("zeros", "border", "reflection").index(padding_mode), align=int(bool(align_corners)))
    rt.launch(f"seamless_grid_sample_{SUFFIX[X.dtype]}", y.size, stream, ("ptr", X.ptr), ("ptr", grid.ptr),
              ("ptr", y.ptr), shape)
    return (y,)


@kernel("AffineGrid", since=20, types=GPU_FLOATS, device="cuda", host_inputs=(1,))
def affine_grid(rt, stream, theta, size, *, align_corners=0):
    """The base points (kernels/cpu/spatial.py's, made on the host for the size) times each batch's
    theta transposed: one batched product, the base shared by every batch (stride 0)."""
    dims = [int(d) for d in rt.to_host(size, stream).reshape(-1)[2:]]
    nd, batch = len(dims), theta.shape[0]
    if theta.shape[1:] != (nd, nd + 1):
        raise ValueError(f"AffineGrid: theta of shape {theta.shape} for a {nd}-D size: "
                         f"({batch}, {nd}, {nd + 1}) expected")
    s = Scratch(rt, theta, size)
    base = s(rt.device(DeviceTensor.on_host(affine_base(dims, align_corners).astype(theta.dtype)), stream))
    points = math.prod(dims)
    y = rt.alloc((batch,) + tuple(dims) + (nd,), theta.dtype)
    batched_product(rt, stream, base, theta, y, points, nd, nd + 1, batch, 0, nd * (nd + 1), trans_b=True)
    return s.done(y)


@kernel("DeformConv", since=19, types=GPU_FLOATS, device="cuda", check=check_deform_conv)
def deform_conv(rt, stream, X, W, offset, B=None, mask=None, *, dilations=None, group=1, kernel_shape=None,
                offset_group=1, pads=None, strides=None):
    """spatial.cu's deform columns (float32), then per image one batched GEMM by W's groups, the bias added."""
    n, c, height, width = X.shape
    out_channels, per_group, kh, kw = W.shape
    oh, ow = offset.shape[2:] if len(offset.shape) == 4 else (0, 0)
    problem = ("channels" if c % group or c % offset_group or out_channels % group or per_group * group != c else
               "offset" if tuple(offset.shape) != (n, offset_group * 2 * kh * kw, oh, ow) else
               "mask" if mask is not None and tuple(mask.shape) != (n, offset_group * kh * kw, oh, ow) else
               "bias" if B is not None and tuple(B.shape) != (out_channels,) else
               "input" if (height == 0 or width == 0) and oh * ow else "")
    if problem:
        raise ValueError(f"DeformConv: X {X.shape}, W {W.shape}, offset {offset.shape}, mask "
                         f"{None if mask is None else mask.shape}, group {group}, offset_group {offset_group}: the "
                         f"{problem} shapes disagree (see the ONNX spec)")
    sh, sw = strides or (1, 1)
    dh, dw = dilations or (1, 1)
    top, left = (pads or (0, 0, 0, 0))[:2]
    columns = rt.alloc((n, c, kh, kw, oh, ow), F32)
    rt.launch(f"seamless_deform_columns_{SUFFIX[X.dtype]}", columns.size, stream, ("ptr", X.ptr), ("ptr", offset.ptr),
              ("ptr", mask.ptr if mask is not None else 0), ("ptr", columns.ptr),
              struct_arg("DeformShape", n=n, c=c, height=height, width=width, oh=oh, ow=ow, kh=kh, kw=kw, stride_h=sh,
                         stride_w=sw, dilation_h=dh, dilation_w=dw, top=top, left=left, offset_groups=offset_group))
    weights = W if W.dtype == F32 else cast_to(rt, stream, W, F32)
    y = rt.alloc((n, out_channels, oh, ow), F32)
    k, plane, per_out = per_group * kh * kw, oh * ow, out_channels // group
    for b in range(n):  # W's groups times this image's groups of columns
        batched_product(rt, stream, weights, DeviceTensor(columns.ptr + b * c * kh * kw * plane * 4, (group, k, plane), F32),
                        DeviceTensor(y.ptr + b * out_channels * plane * 4, (group, per_out, plane), F32),
                        per_out, plane, k, group, per_out * k, k * plane)
    if B is not None:
        bias = B if B.dtype == F32 else cast_to(rt, stream, B, F32)
        biased = binary(rt, stream, ADD, y, DeviceTensor(bias.ptr, (out_channels, 1, 1), F32))
        for t in (y,) + ((bias,) if bias is not B else ()):
            rt.free(t)
        y = biased
    for t in (columns,) + ((weights,) if weights is not W else ()):
        rt.free(t)  # stream-ordered
    if X.dtype != F32:
        narrow = cast_to(rt, stream, y, X.dtype)
        rt.free(y)
        y = narrow
    return (y,)


@kernel("GlobalAveragePool", since=1, types=GPU_FLOATS, device="cuda")
def global_average_pool(rt, stream, x):
    return (reduce(rt, stream, MEAN, x, list(range(2, len(x.shape))), True),)


def _global_max_pool(rt, stream, x, y):
    """y (N, C, 1...) = each plane's maximum as MLAS's global kernel takes it (NaN and -inf included), a warp a
    plane."""
    rt.launch_rows(f"seamless_global_max_pool_{SUFFIX[x.dtype]}", x.shape[0] * x.shape[1], stream, ("ptr", x.ptr),
                   ("ptr", y.ptr), ("int64", math.prod(x.shape[2:])), threads=32)


@kernel("GlobalMaxPool", since=1, types=GPU_FLOATS, device="cuda")
def global_max_pool(rt, stream, x):
    if x.dtype not in (F32, F16):  # stock's MLAS path is float32 and float16's
        return (reduce(rt, stream, MAX_OF, x, list(range(2, len(x.shape))), True),)
    y = rt.alloc(x.shape[:2] + (1,) * (len(x.shape) - 2), x.dtype)
    _global_max_pool(rt, stream, x, y)
    return (y,)


# --- CausalConvWithState (channels first, or token major: the fused node; channels_last=1 runs the CPU kernel on the
# host) ------------------------------------------------------------------------------------------------------------

def check_causal_conv_cuda(node, graph):
    return cpu_check_causal_conv(node, graph) or ("channels_last=1 is not supported on CUDA"
                                                   if node.attrs.get("channels_last", 0) else None)


def _causal_conv(rt, stream, x, weight, bias, past, activation, dilation, real_lengths, token_major=False, pieces=1,
                 value=0, in_gate=-1, out_gate=-1):
    """x and y (B, C, L), or token major: x (B, L, pieces * C), y (B, L, C) (args.h ConvPieces); the state (B, C,
    span) either way."""
    channels_first = x.shape
    if token_major and len(x.shape) == 3:
        if pieces > 1 and len(weight.shape) == 3 and x.shape[2] != pieces * weight.shape[0]:  # the folded Split's
            raise InvalidArgument(f"x's last dim {x.shape[2]} is not {pieces} blocks of the {weight.shape[0]} "
                                  f"channels its Split made")
        channels_first = (x.shape[0], x.shape[2] // pieces, x.shape[1])
    batch, channels, length, k, state_shape = causal_conv_geometry(
        channels_first, weight.shape, None if bias is None else bias.shape, None if past is None else past.shape,
        dilation, 0)
    check_real_lengths(real_lengths, batch)
    y = rt.alloc((batch, length, channels) if token_major else x.shape, x.dtype)
    state = rt.alloc(state_shape, x.dtype)
    rows = batch * channels
    rt.launch(f"seamless_causal_conv_{SUFFIX[x.dtype]}", rows * (length + state_shape[2]), stream,
              ("int64", rows), ("int64", channels), ("int64", length), ("int64", k), ("int64", dilation),
              ("int", int(activation in ("silu", "swish"))),
              struct_arg("ConvPieces", token_major=int(token_major), pieces=pieces, value=value, in_gate=in_gate,
                         out_gate=out_gate),
              ("ptr", x.ptr), ("ptr", weight.ptr), ("ptr", bias.ptr if bias is not None else 0),
              ("ptr", past.ptr if past is not None else 0),
              ("ptr", real_lengths.ptr if real_lengths is not None else 0), ("ptr", y.ptr), ("ptr", state.ptr))
    return y, state


@kernel("CausalConvWithState", since=27, types=GPU_FLOATS, device="cuda", check=check_causal_conv_cuda)
def causal_conv_with_state_27(rt, stream, x, weight, bias=None, past_state=None, real_lengths=None, *,
                              activation="none"):
    """real_lengths: no input of the op (kernels/cuda/attention.py check_real_lengths)."""
    return _causal_conv(rt, stream, x, weight, bias, past_state, activation, 1, real_lengths)


@kernel("CausalConvWithState", domain="com.microsoft", types=GPU_FLOATS, device="cuda", check=check_causal_conv_cuda)
def causal_conv_with_state_ms(rt, stream, x, weight, bias=None, past_state=None, real_lengths=None, *,
                              activation="none", dilation=1,
                              channels_last=0, ndim=1, state_window=0, state_update_capacity=0, state_length=0,
                              state_channels_last=-1, input_channel_offset=0, input_channels=0):
    return _causal_conv(rt, stream, x, weight, bias, past_state, activation, dilation, real_lengths)


@kernel("CausalConvWithState", domain=FUSED_DOMAIN, types=GPU_FLOATS, device="cuda")
def token_major_causal_conv(rt, stream, x, weight, bias=None, past_state=None, real_lengths=None, *,
                            activation="none", dilation=1, pieces=1, value=0, in_gate=-1, out_gate=-1):
    """plan/fusion.py token_major_causal_conv: x (B, L, pieces * C) and y (B, L, C), the Transposes around
    com.microsoft's (or ONNX's) channels-first node folded into the kernel's indexing, and LFM2's Split and gating
    Muls; the state channels first as the node's."""
    return _causal_conv(rt, stream, x, weight, bias, past_state, activation, dilation, real_lengths, True, pieces,
                        value, in_gate, out_gate)
