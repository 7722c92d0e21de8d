"""The native CPU kernels (native/cpu/*.c) behind numpy-shaped functions: one binding of the library.

Native kernels split their work into tasks for ORT's intra-op thread pool when they run inside
the EP's Compute (runtime/parallel.py), and run serially when called directly.
"""
from __future__ import annotations

import math
import os
import weakref

import numpy as np

from ...runtime import parallel
from ...runtime.options import AMX_ENV, env_flag
from ...graph.ir import c_order
from .. import native_cpu_module

ffi, lib = native_cpu_module()


def _pool():
    """(parallel_for, context) as void pointers: ORT's intra-op pool inside a Compute, else NULLs."""
    fn, ctx = parallel.current()
    return ffi.cast("void*", fn), ffi.cast("void*", ctx)


def erf(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype == np.float16:  # computed in float32 and rounded, as ORT does
        return erf(x.astype(np.float32)).astype(np.float16)
    x = c_order(x)
    y = np.empty_like(x)
    if x.dtype == np.float64:
        lib.seamless_erf_f64(ffi.cast("double*", ffi.from_buffer(x)), ffi.cast("double*", ffi.from_buffer(y)), x.size)
    else:
        lib.seamless_erf_f32(_ptr(x), _ptr(y), x.size, *_pool())
    return y


def _ptr(a: np.ndarray):
    if a.dtype != np.float32:  # the C kernels read a.size floats: any other element size is out of bounds
        raise TypeError(f"native kernel: float32 expected, got {a.dtype}")
    return ffi.cast("float*", ffi.from_buffer(a))


def _require(ok: bool, what: str) -> None:
    """The wrappers' last line of defence: the C kernels trust the extents they are given."""
    if not ok:
        raise ValueError(f"native kernel: {what}")


def _f32_array(a, size: int, what: str) -> np.ndarray:
    a = c_order(np.asarray(a, dtype=np.float32))
    _require(a.size == size, f"{what} has {a.size} elements, expected {size}")
    return a


def softmax_last_axis(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis of a float32 array."""
    x = c_order(x)
    _require(x.dtype == np.float32 and x.ndim >= 1, f"softmax of {x.dtype} {x.shape}")
    y = np.empty_like(x)
    cols = x.shape[-1]
    lib.seamless_softmax_f32(_ptr(x), _ptr(y), x.size // cols, cols, *_pool())
    return y


def layer_norm_trailing(x: np.ndarray, scale: np.ndarray, bias, cols: int, eps: float):
    """LayerNormalization over the trailing `cols` elements of float32 x; returns (y, mean, inv_std)."""
    x = c_order(x)
    _require(x.dtype == np.float32 and cols > 0 and x.size % cols == 0, f"layer norm of {x.shape} over {cols}")
    scale = _f32_array(scale, cols, "scale")
    bias = None if bias is None else _f32_array(bias, cols, "bias")
    rows = x.size // cols
    y = np.empty_like(x)
    mean, inv_std = np.empty(rows, np.float32), np.empty(rows, np.float32)
    lib.seamless_layernorm_f32(_ptr(x), _ptr(scale), ffi.NULL if bias is None else _ptr(bias), _ptr(y),
                               _ptr(mean), _ptr(inv_std), rows, cols, eps, *_pool())
    return y, mean, inv_std


def aligned_empty(size: int, dtype=np.float32, align: int = 64) -> np.ndarray:
    """An uninitialised 1-D array whose data starts on a cache line: the GEMM's panel loads then never straddle
    two lines (numpy aligns to 16 bytes only; straddling costs ~15% of a GEMM's time)."""
    dtype = np.dtype(dtype)
    raw = np.empty(size * dtype.itemsize + align, np.uint8)
    start = -raw.ctypes.data % align
    return raw[start:start + size * dtype.itemsize].view(dtype)


def pack_b(b: np.ndarray, trans_b: bool = False) -> np.ndarray:
    """B (K x N, or N x K with trans_b) in the GEMM's panel layout."""
    b = c_order(np.asarray(b, dtype=np.float32))
    n, k = b.shape if trans_b else b.shape[::-1]
    packed = aligned_empty(lib.seamless_sgemm_packed_size(k, n))
    lib.seamless_sgemm_pack_b(_ptr(b), k, n, b.shape[1], int(trans_b), _ptr(packed))
    return packed


def split_b(packed: np.ndarray, k: int, n: int) -> np.ndarray | None:
    """The packed B's (K x n) bf16 split for the AMX tiles (float32 accuracy), or None: no AMX on this machine, K too
    small to pay, B not finite, or SEAMLESS_AMX=0."""
    size = lib.seamless_sgemm_split_size(k, n)
    if not size or not env_flag(AMX_ENV):
        return None
    split = aligned_empty(size, np.uint16)
    return None if lib.seamless_sgemm_split_b(_ptr(packed), k, n, _u16(split)) else split


def _u16(a: np.ndarray):
    _require(a.dtype == np.uint16, "a uint16 array")
    return ffi.cast("uint16_t*", ffi.from_buffer(a))


def sgemm(a: np.ndarray, packed: np.ndarray, n: int, bias=None, split=None) -> np.ndarray:
    """a (M x K float32) times the packed B (K x n) (on the AMX tiles where its split is given and they pay), plus
    bias (n,) if given."""
    a = c_order(a)
    m, k = a.shape
    _require(a.dtype == np.float32 and packed.dtype == np.float32, "sgemm operands must be float32")
    _require(packed.size == lib.seamless_sgemm_packed_size(k, n), f"packed B does not hold {k} x {n}")
    _require(split is None or split.size == lib.seamless_sgemm_split_size(k, n), f"split B does not hold {k} x {n}")
    if bias is not None:
        bias = _f32_array(bias, n, "bias")
    c = np.empty((m, n), np.float32)
    if m and n:
        lib.seamless_sgemm(m, n, k, _ptr(a), ffi.NULL, k, _ptr(packed), ffi.NULL if split is None else _u16(split),
                           ffi.NULL if bias is None else _ptr(bias),
                           ffi.NULL, _ptr(c), n, *_pool())
    return c


def sgemm_batched(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float32 matmul of (..., M, K) by (..., K, N) with broadcast batch dims."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    m, k = a.shape[-2:]
    n = b.shape[-1]
    _require(b.shape[-2] == k and a.dtype == b.dtype == np.float32, f"sgemm of {a.shape} by {b.shape}")
    items = int(np.prod(batch, dtype=np.int64))
    a3 = c_order(np.broadcast_to(a, batch + (m, k))).reshape(items, m, k)
    b3 = c_order(np.broadcast_to(b, batch + (k, n))).reshape(items, k, n)
    c = np.empty((items, m, n), np.float32)
    if c.size and lib.seamless_sgemm_batched(items, m, n, k, _ptr(a3), k, m * k, _ptr(b3), n, k * n, 0,
                                             _ptr(c), n, m * n, *_pool()):
        raise MemoryError("native GEMM: out of memory for packing scratch")
    return c.reshape(batch + (m, n))


TRANSPOSE_SHARE = 1 << 23  # bytes from which a transpose is shared among threads (the C call releases the GIL)


def transpose_2d(x: np.ndarray) -> np.ndarray:
    """x.T of a 2-D array, contiguous: in tiles (numpy's copy of a transposed view reads one element a cache line),
    large ones in blocks of rows on the machine's cores (at Compile no ORT pool runs); numpy's for element sizes the
    kernel does not take."""
    x = c_order(np.asarray(x))
    if x.ndim != 2 or x.dtype.itemsize not in (1, 2, 4, 8) or x.dtype.hasobject:
        return np.ascontiguousarray(x.T)
    rows, cols = x.shape
    y = np.empty((cols, rows), x.dtype)
    src, dst, size = ffi.cast("char*", ffi.from_buffer(x)), ffi.cast("char*", ffi.from_buffer(y)), x.dtype.itemsize

    def block(r0, r1):  # rows [r0, r1) of x: columns [r0, r1) of y
        lib.seamless_transpose_2d(src + r0 * cols * size, dst + r0 * size, r1 - r0, cols, rows, size, *_pool())

    if x.size:
        _row_blocks(block, rows, x.nbytes, align=32)
    return y


def _row_blocks(fn, rows: int, nbytes: int, align: int = 1) -> list:
    """fn(r0, r1) over blocks of [0, rows) (cut at multiples of `align`) on the machine's cores, one block per
    TRANSPOSE_SHARE bytes up to 16 (the C calls release the GIL; at Compile no ORT pool runs): their results."""
    threads = min(os.cpu_count() or 1, 16, max(1, nbytes // TRANSPOSE_SHARE))
    if threads == 1:
        return [fn(0, rows)]
    from concurrent.futures import ThreadPoolExecutor
    cuts = [rows * i // threads // align * align for i in range(threads)] + [rows]
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(fn, cuts[:-1], cuts[1:]))


def raw_experts(prepacked: np.ndarray, n: int, k: int, bits: int) -> np.ndarray:
    """QMoE expert weights [experts, k, n / pack] uint8 in CUTLASS's SM80 mixed-GEMM layout (what ORT's CUDA QMoE
    reads for weights_prepacked -1 and 1) in the raw layout [experts, n, k / pack], on the machine's cores."""
    prepacked = c_order(np.asarray(prepacked, np.uint8))
    experts, pack = prepacked.shape[0], 8 // bits
    _require(prepacked.size == experts * k * n // pack, f"{prepacked.shape} is not [experts, {k}, {n} / {pack}]")
    raw = np.empty((experts, n, k // pack), np.uint8)
    src, dst = ffi.cast("uint8_t*", ffi.from_buffer(prepacked)), ffi.cast("uint8_t*", ffi.from_buffer(raw))
    failed = max(_row_blocks(lambda r0, r1: lib.seamless_raw_experts(src, dst, n, k, bits, r0, r1), experts * n,
                             raw.nbytes))
    if failed == 2:
        raise MemoryError("out of host memory converting QMoE experts")
    _require(not failed, f"no CUTLASS layout of {bits}-bit experts [{k}, {n}] (k a multiple of 64, n of {16 // bits})")
    return raw


def gelu(x: np.ndarray) -> np.ndarray:
    """x/2 (1 + erf(x / sqrt 2)) for float32 x."""
    x = c_order(x)
    y = np.empty_like(x)
    lib.seamless_gelu_f32(_ptr(x), _ptr(y), x.size, *_pool())
    return y


def channel_affine(x: np.ndarray, scale: np.ndarray, shift: np.ndarray, relu: bool) -> np.ndarray:
    """x * scale + shift per channel (axis 1) of float32 x [N, C, ...], then Relu where relu (ChannelAffine)."""
    x, scale, shift = c_order(x), c_order(scale), c_order(shift)
    _require(x.dtype == scale.dtype == shift.dtype == np.float32 and x.ndim >= 2
             and scale.shape == shift.shape == (x.shape[1],),
             f"ChannelAffine of {x.dtype} {x.shape} by {scale.dtype} {scale.shape} and {shift.dtype} {shift.shape}")
    y = np.empty_like(x)
    n, c = x.shape[:2]
    lib.seamless_channel_affine_f32(_ptr(x), _ptr(scale), _ptr(shift), _ptr(y), n, c, x.size // max(n * c, 1),
                                    int(relu), *_pool())
    return y


def max_roi_pool(x: np.ndarray, rois: np.ndarray, pooled_h: int, pooled_w: int, scale: float) -> np.ndarray:
    """MaxRoiPool of float32 x [N, C, H, W] over rois [R, 5] (batch indices checked by the caller): [R, C, ph, pw]."""
    x, rois = c_order(x), c_order(rois)
    _require(x.dtype == rois.dtype == np.float32 and x.ndim == 4 and rois.ndim == 2 and rois.shape[1] == 5
             and pooled_h > 0 and pooled_w > 0, f"MaxRoiPool of X {x.shape} over rois {rois.shape}")
    y = np.empty((rois.shape[0], x.shape[1], pooled_h, pooled_w), np.float32)
    bad = lib.seamless_max_roi_pool_f32(_ptr(x), *x.shape, _ptr(rois), rois.shape[0], pooled_h, pooled_w, scale,
                                        _ptr(y))
    _require(bad == 0, f"MaxRoiPool: the batch index of roi {bad - 1} is out of range")
    return y


def non_max_suppression(boxes: np.ndarray, scores: np.ndarray, max_per_class: int, iou_threshold: float,
                        score_threshold, center_point_box: int) -> np.ndarray:
    """ONNX NonMaxSuppression of float32 boxes [B, N, 4] and scores [B, C, N]: the [batch, class, box]
    rows kept. score_threshold: a float, or None for none."""
    boxes, scores = c_order(boxes), c_order(scores)
    batches, classes, n = scores.shape
    _require(boxes.dtype == scores.dtype == np.float32 and boxes.shape == (batches, n, 4) and n < 2 ** 31,
             f"NonMaxSuppression of boxes {boxes.shape} and scores {scores.shape}")
    per_class = min(max(max_per_class, 0), n)
    selected = np.empty(batches * classes * per_class, np.int32)
    counts = np.empty(batches * classes, np.int64)
    selected_p, counts_p = _i32(selected), _i64(counts)
    total = lib.seamless_nms_f32(_ptr(boxes), _ptr(scores), batches, classes, n, per_class, iou_threshold,
                                 score_threshold is not None, score_threshold or 0.0, int(center_point_box),
                                 selected_p, counts_p)
    if total < 0:
        raise MemoryError("NonMaxSuppression: out of memory for its scratch")
    rows = np.empty((total, 3), np.int64)
    if total:
        lib.seamless_nms_rows(selected_p, counts_p, batches, classes, _i64(rows))
    return rows


class TfIdfTrie:
    """TfIdfVectorizer's pool as a trie in the native hash table, checked once, used by tfidf(): node i > 0 is
    the edge parent[i] -> i on id item[i]; node i ends the n-gram of output column column[i] (-1: none), whose
    weight is weight[i] (weight None: ones)."""

    def __init__(self, parent, item, column, out_cols: int, weight=None):
        parent, item = c_order(np.asarray(parent, np.int32)), c_order(np.asarray(item, np.int64))
        self.column = c_order(np.asarray(column, np.int64))
        self.weight = None if weight is None else c_order(np.asarray(weight, np.float32))
        _require(parent.ndim == 1 and parent.shape == item.shape == self.column.shape and 1 <= parent.size < 2 ** 31
                 and ((parent[1:] >= 0) & (parent[1:] < parent.size)).all() and -1 <= int(self.column.min())
                 and int(self.column.max()) < out_cols and (weight is None or self.weight.shape == parent.shape),
                 "TfIdfVectorizer trie")
        cap = 16
        while cap < 2 * parent.size:
            cap *= 2
        self.mask, self.out_cols = cap - 1, out_cols
        self.has_children = np.zeros(parent.size, np.uint8)
        self.has_children[parent[1:]] = 1
        self.slots = np.full(2 * cap, -1, np.int64)
        lib.seamless_tfidf_table(_i32(parent), _i64(item), parent.size, _i64(self.slots), self.mask)


def _i32(a):
    return ffi.from_buffer("int32_t[]", a)


def _i64(a):
    return ffi.from_buffer("int64_t[]", a)


def tfidf(x: np.ndarray, trie: TfIdfTrie, min_gram: int, max_gram: int, max_skip: int, mode: int) -> np.ndarray:
    """TfIdfVectorizer of integer ids x [rows, cols]: float32 [rows, trie.out_cols]. mode 0 TF, 1 IDF, 2 TFIDF
    (the trie's weights, or ones)."""
    x = c_order(x.astype(np.int64, copy=False))
    _require(x.ndim == 2 and 1 <= min_gram <= max_gram and max_skip >= 0, "TfIdfVectorizer arguments")
    rows, cols = x.shape
    out = np.zeros((rows, trie.out_cols), np.float32)
    if x.size:
        weight = ffi.NULL if trie.weight is None or mode == 0 else _ptr(trie.weight)
        lib.seamless_tfidf_f32(_i64(x), rows, cols, _i64(trie.slots), trie.mask, _i64(trie.column),
                               ffi.cast("uint8_t*", ffi.from_buffer(trie.has_children)), min_gram, max_gram,
                               min(max_skip, cols), mode, weight, _ptr(out), trie.out_cols)
    return out


RNN_ACTIVATIONS = {"Sigmoid": 0, "Tanh": 1, "Relu": 2}


def _rnn_args(xw, d, order, lens, steps, states, y, gates):
    """The checked arguments the rnn.c kernels share: xw [seq, batch, dirs * gates * n] float32, direction d's
    projections in its columns [d * gates * n, (d + 1) * gates * n); order [seq, batch] int64 source steps or
    None; lens [batch] int64 or None; states [batch, n] float32 (updated); y: the layer's Y [seq, dirs, batch, n]
    (direction d written) or None. Returns the kernel's leading arguments and (y pointer, y row step)."""
    seq, batch, cols = xw.shape
    n = states[0].shape[1] if states[0].ndim == 2 else -1
    _require(xw.dtype == np.float32 and xw.flags.c_contiguous and 0 <= steps <= seq and n >= 0 and
             0 <= d and (d + 1) * gates * n <= cols, "rnn xw")
    _require(all(s.dtype == np.float32 and s.flags.c_contiguous and s.shape == (batch, n) for s in states),
             "rnn states")
    if order is not None:
        _require(order.dtype == np.int64 and order.flags.c_contiguous and order.shape == (seq, batch) and
                 (not order.size or 0 <= order.min() <= order.max() < seq), "rnn order")
    if lens is not None:
        _require(lens.dtype == np.int64 and lens.flags.c_contiguous and lens.shape == (batch,), "rnn lens")
    if y is not None:
        _require(y.dtype == np.float32 and y.flags.c_contiguous and y.ndim == 4 and y.shape[0] == seq and
                 y.shape[2:] == (batch, n) and d < y.shape[1], "rnn y")
    head = (steps, batch, n, _ptr(xw) + d * gates * n, cols, ffi.NULL if order is None else _i64(order),
            ffi.NULL if lens is None else _i64(lens))
    return head, (ffi.NULL if y is None else _ptr(y) + d * batch * n, 0 if y is None else y.shape[1] * batch * n)


def _packed_r(packed, n, cols):
    """R^T (n x cols) of one direction, packed by pack_b."""
    _require(packed.dtype == np.float32 and packed.size == lib.seamless_sgemm_packed_size(n, cols), "rnn packed R")
    return _ptr(packed)


def rnn_direction(xw, d, order, lens, steps, packed_r, clip, act, h, y):
    """Direction d of an RNN layer (native/cpu/rnn.c) over `steps` loop steps: loop step t of batch row b reads
    its projections at xw[order[t, b], b] (order None: t) and writes y[order[t, b], d, b]; rows past lens keep
    their state. packed_r: pack_b(R[d], trans_b=True); act: an RNN_ACTIVATIONS name; h updated in place."""
    head, (y_ptr, y_step) = _rnn_args(xw, d, order, lens, steps, [h], y, 1)
    n = h.shape[1]
    gates = np.empty_like(h)
    lib.seamless_rnn_f32(*head, _packed_r(packed_r, n, n), clip is not None, clip or 0.0, RNN_ACTIVATIONS[act],
                         _ptr(h), y_ptr, y_step, _ptr(gates))


def gru_direction(xw, d, order, lens, steps, packed_zr, packed_h, rb_h, linear_before_reset, clip, acts, h, y):
    """One direction of a GRU layer, as rnn_direction; packed_zr, packed_h: R's update-and-reset rows and candidate
    rows, transposed and packed; rb_h: the candidate's recurrence bias [n] (used with linear_before_reset)."""
    head, (y_ptr, y_step) = _rnn_args(xw, d, order, lens, steps, [h], y, 3)
    n = h.shape[1]
    rb_h = _f32_array(rb_h, n, "rb_h")
    gates, rh = np.empty((h.shape[0], 3 * n), np.float32), np.empty_like(h)
    acts = np.array([RNN_ACTIVATIONS[a] for a in acts], np.int32)
    _require(acts.size == 2, "GRU activations")
    lib.seamless_gru_f32(*head, _packed_r(packed_zr, n, 2 * n), _packed_r(packed_h, n, n), _ptr(rb_h),
                         int(linear_before_reset), clip is not None, clip or 0.0, _i32(acts), _ptr(h), y_ptr, y_step,
                         _ptr(gates), _ptr(rh))


def lstm_direction(xw, d, order, lens, steps, packed_r, peepholes, clip, acts, h, c, y):
    """One direction of an LSTM layer, as rnn_direction; peepholes [3n] or None; h and c updated in place."""
    head, (y_ptr, y_step) = _rnn_args(xw, d, order, lens, steps, [h, c], y, 4)
    n = h.shape[1]
    peepholes = None if peepholes is None else _f32_array(peepholes, 3 * n, "peepholes")
    gates, tmp = np.empty((h.shape[0], 4 * n), np.float32), np.empty(n, np.float32)
    acts = np.array([RNN_ACTIVATIONS[a] for a in acts], np.int32)
    _require(acts.size == 3, "LSTM activations")
    lib.seamless_lstm_f32(*head, _packed_r(packed_r, n, 4 * n), ffi.NULL if peepholes is None else _ptr(peepholes),
                          clip is not None, clip or 0.0, _i32(acts), _ptr(h), _ptr(c), y_ptr, y_step, _ptr(gates),
                          _ptr(tmp))


# --- contrib ops: MatMulNBits, GatherBlockQuantized, QuickGelu, RMS normalization, GroupQueryAttention ----

F32 = np.dtype(np.float32)
U8 = np.dtype(np.uint8)
_NULL = ffi.NULL


def _f32(a):
    """A C-contiguous float32 array (a view when it already is one)."""
    return a if a.dtype is F32 and a.flags.c_contiguous else np.ascontiguousarray(a, dtype=F32)


def _fp(a):
    if a.dtype != F32:  # the C kernels read float32 elements: any other size would be out of bounds
        raise TypeError(f"native kernel: float32 expected, got {a.dtype}")
    return ffi.cast("float*", ffi.from_buffer(a))


def _optional_fp(a):
    return _NULL if a is None else _fp(a)


# --- MatMulNBits ------------------------------------------------------------------------------

HAS_MATMUL_NBITS = hasattr(lib, "seamless_matmul_nbits_f32")  # 4- and 8-bit weights


class _Weights:
    """Raw pointers to a MatMulNBits node's weight-side inputs (B, scales, zero points, bias),
    resolved once per set of arrays. Holds weak references only: the plan owns the arrays."""
    __slots__ = ("refs", "args")

    def __init__(self, arrays, args):
        self.refs = [weakref.ref(a) if a is not None else None for a in arrays]
        self.args = args

    def valid(self, arrays) -> bool:
        return all((r is None and a is None) or (r is not None and r() is a) for r, a in zip(self.refs, arrays))


_WEIGHTS: dict = {}


def _address(a, ctype):
    return ffi.cast(ctype, a.__array_interface__["data"][0])


def check_nbits_weights(B, scales, zero_points, bias, bits, block_size, K, N):
    """Sizes the kernel will read (a wrong shape must be an error, never an out-of-bounds read)."""
    nb = -(-K // block_size)
    want = {"B": (B, N * nb * block_size * bits // 8), "scales": (scales, N * nb),
            "zero_points": (zero_points, N * (-(-nb * bits // 8)) if zero_points is not None and
                            zero_points.dtype == U8 else N * nb),
            "bias": (bias, N)}
    for name, (a, size) in want.items():
        if a is not None and a.size != size:
            raise ValueError(f"MatMulNBits: {name} has {a.size} elements, expected {size} (K={K}, N={N}, "
                             f"bits={bits}, block_size={block_size})")


def _weights(B, scales, zero_points, bias, bits, block_size, K, N):
    arrays = (B, scales, zero_points, bias)
    key = (*map(id, arrays), bits, block_size, K, N)
    w = _WEIGHTS.get(key)
    if w is not None and w.valid(arrays):
        return w.args
    check_nbits_weights(B, scales, zero_points, bias, bits, block_size, K, N)
    fixed = [B if B.flags.c_contiguous else np.ascontiguousarray(B), _f32(scales),
             None if zero_points is None else (np.ascontiguousarray(zero_points) if zero_points.dtype == U8
                                               else _f32(zero_points)),
             None if bias is None else _f32(bias)]
    zp = fixed[2]
    args = (_address(fixed[0], "uint8_t*"), _address(fixed[1], "float*"),
            _address(zp, "uint8_t*") if zp is not None and zp.dtype == U8 else _NULL,
            _address(zp, "float*") if zp is not None and zp.dtype == F32 else _NULL,
            _NULL if fixed[3] is None else _address(fixed[3], "float*"))
    if any(f is not a for f, a in zip(fixed, arrays)):
        return args + (fixed,)  # converted copies: not cacheable, the caller keeps them alive
    if len(_WEIGHTS) > 4096:
        _WEIGHTS.clear()
    _WEIGHTS[key] = _Weights(arrays, args)
    return args


def nbits_int8(accuracy_level, zero_points, panels) -> bool:
    """Whether MatMulNBits computes as stock ORT's MLAS CompInt8 (A quantized to int8), else CompFp32:
    accuracy_level 4 with uint8 or default zero points (panels' zero points are float32, unpacked from uint8 ones)."""
    return accuracy_level == 4 and (bool(panels) or zero_points is None or zero_points.dtype == U8)


def nbits_panels(B, scales, zero_points, bits, block_size, K, N, in_place=False):
    """(B, scales, zero points) with every 32 columns side by side, the layout this CPU's kernels read in place
    (AVX2 or AVX-512 VNNI: native/cpu/quantization.c), as new arrays of their sizes (zero points: float32 [N, nb], or
    None for the default), or, in_place, the arrays given rearranged (their owner's own copies, read by no one else:
    no fresh pages to fault in, no second copy at once); None where they read none for this shape."""
    if not lib.seamless_matmul_nbits_panels(N, K, bits, block_size):
        return None
    check_nbits_weights(B, scales, zero_points, None, bits, block_size, K, N)
    b, s = c_order(np.asarray(B, U8)), _f32(scales)
    z = None if zero_points is None else _f32(zero_points)
    if in_place:
        pb, ps, pz = b, s, z
    else:
        pb, ps = aligned_empty(b.size, U8).reshape(b.shape), aligned_empty(s.size).reshape(s.shape)
        pz = None if z is None else aligned_empty(z.size).reshape(z.shape)
    row_bytes, nb = b.size // N, s.size // N
    pointers = [(_address(a, "uint8_t*"), row_bytes) for a in (b, pb)] + \
        [(_optional_fp(a), nb) for a in (s, z, ps, pz)]

    def block(r0, r1):  # rows [r0, r1), r0 a multiple of 32
        at = [p + r0 * size if p != _NULL else p for p, size in pointers]
        return lib.seamless_matmul_nbits_pack_panels(at[0], at[2], at[3], r1 - r0, K, bits, block_size, at[1],
                                                     at[4], at[5])
    _require(max(_row_blocks(block, N, b.nbytes, align=32)) == 0, "MatMulNBits panels")
    for a in (pb, ps, pz):
        if a is not None:
            a.flags.writeable = False
    return pb, ps, pz


def matmul_nbits(a2d, B, scales, zero_points, bias, bits, block_size, K, N, int8: bool, panels: bool = False) -> np.ndarray:
    a2d = _f32(a2d)
    m = a2d.shape[0]
    if a2d.ndim != 2 or a2d.shape[1] != K:
        raise ValueError(f"MatMul dimension mismatch: A {a2d.shape}, K={K}")
    y = np.empty((m, N), F32)
    w = _weights(B, scales, zero_points, bias, bits, block_size, K, N)  # pointers[, arrays to keep alive]
    rc = lib.seamless_matmul_nbits_f32(ffi.from_buffer("float[]", a2d), m, K, w[0], w[1], w[2], w[3], w[4],
                                       ffi.from_buffer("float[]", y), N, bits, block_size, int8, panels, *_pool())
    if rc:
        raise (MemoryError if rc == 2 else ValueError)(f"MatMulNBits native kernel failed (code {rc})")
    return y


HAS_GATHER_BLOCK_QUANTIZED = hasattr(lib, "seamless_gather_block_quantized_f32")


def gather_block_quantized(data, indices, scales, zero_points, bits, block_size, panels=False) -> np.ndarray:
    """Rows of a 2-D uint8 table quantized along its rows (gather_axis 0, quantize_axis 1; panels: data and scales
    packed as a tied LM head's panels, nbits_panels)."""
    rows = data.shape[0]
    cols = data.shape[1] * (8 // bits)
    nb = -(-cols // block_size)  # the C kernel's block count: a partial last block has a scale too
    if scales.size != rows * nb or (zero_points is not None and zero_points.size != rows * (-(-nb * bits // 8))):
        raise ValueError(f"GatherBlockQuantized: scales {scales.shape} / zero points do not match data {data.shape}")
    idx = np.ascontiguousarray(indices, dtype=np.int64)
    out = np.empty((*idx.shape, cols), F32)
    data = np.ascontiguousarray(data)
    scales = _f32(scales)
    zp = None if zero_points is None else np.ascontiguousarray(zero_points)
    if lib.seamless_gather_block_quantized_f32(ffi.from_buffer("uint8_t[]", data), rows, cols,
                                               ffi.from_buffer("int64_t[]", idx), idx.size, _fp(scales),
                                               _NULL if zp is None else ffi.from_buffer("uint8_t[]", zp), bits,
                                               block_size, panels, _fp(out)):
        raise MemoryError("GatherBlockQuantized: out of memory")
    return out


HAS_QUICK_GELU = hasattr(lib, "seamless_quick_gelu_f32")


def quick_gelu(x, alpha: float) -> np.ndarray:
    x = _f32(x)
    y = np.empty(x.shape, F32)
    lib.seamless_quick_gelu_f32(_fp(x), _fp(y), x.size, float(alpha), *_pool())
    return y


# --- RMS normalization ------------------------------------------------------------------------


_HAS_RMS = hasattr(lib, "seamless_skip_rmsnorm_f32")


def has_rms_norm() -> bool:
    return _HAS_RMS


def skip_rms_norm(x, skip, bias, gamma, eps, cols, want_sum=False):
    """RMS norm over the trailing `cols` elements of float32 x (after adding skip and bias):
    returns (y, inv_rms per row) or, with want_sum, (y, inv_rms, x + skip + bias)."""
    x = _f32(x)
    rows = x.size // cols
    y = np.empty(x.shape, F32)
    inv = np.empty(rows, F32)
    s = np.empty(x.shape, F32) if want_sum else None
    skip = None if skip is None else _f32(skip)
    bias = None if bias is None else _f32(bias)
    # the extents the C kernel reads: whole rows of x and skip (skip broadcast over x's rows), one gamma/bias row
    if (cols <= 0 or x.size % cols or gamma.size != cols or (bias is not None and bias.size != cols) or
            (skip is not None and (skip.size == 0 or skip.size % cols or x.size % skip.size))):
        raise ValueError(f"RMS norm over {cols}: x {x.shape}, skip {None if skip is None else skip.shape}, gamma "
                         f"{gamma.shape}, bias {None if bias is None else bias.shape} do not fit")
    gamma = _f32(gamma)
    lib.seamless_skip_rmsnorm_f32(_fp(x), _optional_fp(skip), 0 if skip is None else skip.size // cols,
                                  _optional_fp(bias), _fp(gamma), _fp(y), _optional_fp(s), _fp(inv), rows, cols,
                                  float(eps), *_pool())
    return (y, inv, s) if want_sum else (y, inv)


# --- GroupQueryAttention ----------------------------------------------------------------------

_HAS_GQA = hasattr(lib, "seamless_gqa_f32")
I32 = np.dtype(np.int32)


def has_gqa() -> bool:
    return _HAS_GQA


def attention_scale(scale, h: int) -> np.float32:
    """ONNX Attention's scale: the attribute, else 1 / sqrt(head size) in float32 (as the numpy path)."""
    return np.float32(scale if scale is not None else 1.0 / np.sqrt(np.float32(h)))


def onnx_attention(q, k, v, past_k, past_v, mask, dims, strides, out_shape, causal, scale, softcap):
    """ONNX Attention by seamless_onnx_attention_f32 (dims, strides, out_shape: attention.py native_attention_layout):
    (output, present_key, present_value, the scaled product Q.K^T)."""
    b, nq, nkv, s, l, p, h, hv = dims
    q, k, v = c_order(q), c_order(k), c_order(v)
    out = np.empty(out_shape, np.float32)
    present_k, present_v = np.empty((b, nkv, l + p, h), np.float32), np.empty((b, nkv, l + p, hv), np.float32)
    qk = np.empty((b, nq, s, l + p), np.float32)
    mask = None if mask is None else c_order(mask)
    dims_c, strides_c = ffi.new("int64_t[]", [int(d) for d in dims]), ffi.new("int64_t[]", [int(d) for d in strides])
    rc = lib.seamless_onnx_attention_f32(
        _ptr(q), _ptr(k), _ptr(v), _optional_fp(None if past_k is None else c_order(past_k)),
        _optional_fp(None if past_v is None else c_order(past_v)),
        _NULL if mask is None else ffi.cast("void*", ffi.from_buffer(mask)),
        int(mask is not None and mask.dtype == np.bool_),
        _ptr(out), _ptr(present_k), _ptr(present_v), _ptr(qk), dims_c, strides_c, int(bool(causal)),
        float(attention_scale(scale, h)), float(softcap), *_pool())
    if rc:
        raise MemoryError("out of memory for ONNX Attention's scores")
    return out, present_k, present_v, qk


def gqa(query, key, value, past_key, past_value, seqlens_k, first_prompt, present_len, num_heads, kv_num_heads, h,
        scale, softcap, window, causal, sink, cos_cache, sin_cache, interleaved, window_cache=False):
    """Native GroupQueryAttention. query: (B, S, N*H), or packed (B, S, (N + 2 Nkv) H) with key None;
    cos_cache None: no rotary (positions follow GQA's rule, computed in C); window_cache: sliding_window_cache=1
    (present_len: the cache's capacity).
    Returns (output, present_key, present_value)."""
    query = _f32(query)
    b, s = query.shape[:2]
    if key is None:
        if query.shape[2] < (num_heads + 2 * kv_num_heads) * h:
            raise ValueError(f"GroupQueryAttention: packed QKV width {query.shape[2]} too small")
        q_row = k_row = v_row = query.shape[2]
        base = ffi.from_buffer("float[]", query)
        qp, kp, vp = base, base + num_heads * h, base + (num_heads + kv_num_heads) * h
    else:
        key, value = _f32(key), _f32(value)
        if key.shape[:2] != (b, s) or value.shape[:2] != (b, s) or min(key.shape[2], value.shape[2]) < kv_num_heads * h:
            raise ValueError(f"GroupQueryAttention: key {key.shape} / value {value.shape} do not match query "
                             f"{query.shape} with {kv_num_heads} KV heads of size {h}")
        q_row, k_row, v_row = query.shape[2], key.shape[2], value.shape[2]
        qp, kp, vp = _fp(query), _fp(key), _fp(value)
    past_len = 0
    pk = pv = _NULL
    if past_key is not None:
        past_key, past_value = _f32(past_key), _f32(past_value)
        past_len = past_key.shape[2]
        want = (b, kv_num_heads, past_len, h)
        if past_key.shape != want or past_value.shape != want:
            raise ValueError(f"GroupQueryAttention: past_key {past_key.shape} / past_value {past_value.shape}, "
                             f"expected {want}")
        pk, pv = _fp(past_key), _fp(past_value)
    out = np.empty((b, s, num_heads * h), F32)
    present_k = np.empty((b, kv_num_heads, present_len, h), F32)
    present_v = np.empty((b, kv_num_heads, present_len, h), F32)
    seqlens = seqlens_k if seqlens_k.dtype == I32 and seqlens_k.flags.c_contiguous else \
        np.ascontiguousarray(seqlens_k, dtype=I32)
    cos = sin = _NULL
    half = 0
    if cos_cache is not None:
        cos_cache, sin_cache = _f32(cos_cache), _f32(sin_cache)
        if cos_cache.ndim != 2 or sin_cache.shape != cos_cache.shape:
            raise ValueError(f"GroupQueryAttention: cos_cache {cos_cache.shape} / sin_cache {sin_cache.shape}")
        cos, sin = _fp(cos_cache), _fp(sin_cache)
        half = cos_cache.shape[1]
    sink = None if sink is None else _f32(sink)
    rc = lib.seamless_gqa_f32(qp, kp, vp, q_row, k_row, v_row, pk, pv, past_len, _fp(present_k), _fp(present_v),
                              present_len, _fp(out), ffi.from_buffer("int32_t[]", seqlens), int(first_prompt), b, s,
                              num_heads, kv_num_heads, h, cos, sin, half, int(interleaved), _NULL, scale,
                              float(softcap), int(window), int(causal), int(window_cache), _optional_fp(sink),
                              *_pool())
    if rc:
        raise (MemoryError if rc == 2 else ValueError)(f"GroupQueryAttention native kernel failed (code {rc}: "
                                                       f"{'out of memory' if rc == 2 else 'seqlens_k out of range'})")
    return out, present_k, present_v


def conv_args(x_shape, w: np.ndarray, bias, group: int, strides, dilations, begin, out, direct=True, relu=False,
              rows=True, channels=True):
    """SeamlessConvArgs for x (N, C, *spatial, 1-3 dims) and the weights w (M, C/group, *kernel) float32, shapes
    already checked to agree; returns (args, what they point at). direct=False: im2col even where the taps can be
    read in place (seamless_conv_direct); rows=False: the positions as the GEMM's columns even where they would be its
    rows (seamless_conv_rows); channels=False: not the output channels as vector lanes (seamless_conv_channels); the
    same outputs every way. relu: Relu on the output (FusedConv)."""
    nd = len(x_shape) - 2
    n, c, m = x_shape[0], x_shape[1], w.shape[0]
    mg, kernel = m // group, w.shape[2:]
    k = (c // group) * math.prod(kernel)
    _require(1 <= nd <= 3 and w.ndim == nd + 2 and w.shape[1] * group == c and mg * group == m, "conv geometry")
    weights = _f32_array(w, m * k, "weights").reshape(-1)  # flat: each group's rows sliced at g mg k below
    args = ffi.new("SeamlessConvArgs*")
    args.n, args.c, args.m, args.group, args.k, args.l = n, c, m, group, k, math.prod(out)
    args.weights = ffi.cast("float*", ffi.from_buffer(weights))
    fields = ("in_shape", "out_shape", "kernel", "stride", "dilation", "pad")
    dims = [d for d in zip(x_shape[2:], out, kernel, strides, dilations, begin)]
    # a spatial dim of one element, read by a kernel of one unpadded tap, is a leading dim of 1 too (as fewer spatial
    # dims are): the last dim left is the longest run im2col copies (Magika's [N, C, L, 1] by a [5, 1] kernel)
    unit = (1, 1, 1, None, None, 0)
    dims = [d for d in dims if any(u is not None and v != u for v, u in zip(d, unit))] or dims[-1:]
    lead = 3 - len(dims)  # fewer spatial dims: leading dims of 1 (padded by 0)
    for i, field in enumerate(fields):
        getattr(args, field)[0:3] = [0 if field == "pad" else 1] * lead + [int(d[i]) for d in dims]
    args.direct = direct and lib.seamless_conv_direct(args)
    args.relu = int(relu)
    args.channels = channels and lib.seamless_conv_channels(args)
    if args.channels or rows and lib.seamless_conv_rows(args):  # each group's weights transposed, packed as B, once
        size = lib.seamless_sgemm_packed_size(k, mg)
        packed = np.empty(group * size, np.float32)
        for g in range(group):
            lib.seamless_sgemm_pack_b(_ptr(weights[g * mg * k:]), k, mg, k, 1, _ptr(packed[g * size:]))
        args.packed_rows = ffi.cast("float*", ffi.from_buffer(packed))
    else:  # each group's rows packed as the GEMM reads them, once
        packed = np.empty(m * k, np.float32)
        for g in range(group):
            lib.seamless_sgemm_pack_a(mg, k, _ptr(weights[g * mg * k:]), k, _ptr(packed[g * mg * k:]))
        args.packed_weights = ffi.cast("float*", ffi.from_buffer(packed))
    kept = [weights, packed]
    if bias is not None:
        bias = _f32_array(bias, m, "bias")
        args.bias = ffi.cast("float*", ffi.from_buffer(bias))
        kept.append(bias)
    return args, kept


def conv_scratch_floats(args) -> int:
    return lib.seamless_conv_scratch_floats(args)


def conv(x: np.ndarray, args, z: np.ndarray | None = None) -> np.ndarray:
    """y (N, M, *out) of float32 x by seamless_conv_f32 (args: conv_args for x's shape); z: None, or float32 of y's
    elements, added to the output before the Relu (FusedConv's residual)."""
    x = c_order(x)
    _require(x.dtype == np.float32 and x.size == args.n * args.c * math.prod(args.in_shape[0:3]), "conv input")
    y = np.empty((args.n, args.m, args.l), np.float32)
    if z is not None:
        z = c_order(z)
        _require(z.dtype == np.float32 and z.size == y.size, "conv residual")
    scratch = np.empty(conv_scratch_floats(args), np.float32)
    lib.seamless_conv_f32(args, _ptr(x), ffi.NULL if z is None else _ptr(z), _ptr(y), _ptr(scratch), *_pool())
    return y
