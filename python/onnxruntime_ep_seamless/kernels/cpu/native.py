"""Native CPU kernels (native/cpu/*.c) behind numpy-shaped functions."""
import numpy as np

from ...runtime import parallel
from .. import _native_cpu_module, c_order

ffi, lib = _native_cpu_module()


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


def pack_b(b: np.ndarray, trans_b: bool = False) -> np.ndarray:
    """B (K x N, or N x K with trans_b) in the GEMM's panel layout."""
    b = c_order(np.asarray(b, dtype=np.float32))
    n, k = b.shape if trans_b else b.shape[::-1]
    packed = np.empty(lib.seamless_sgemm_packed_size(k, n), np.float32)
    lib.seamless_sgemm_pack_b(_ptr(b), k, n, b.shape[1], int(trans_b), _ptr(packed))
    return packed


def sgemm(a: np.ndarray, packed: np.ndarray, n: int, bias=None) -> np.ndarray:
    """a (M x K float32) times the packed B (K x n), plus bias (n,) if given."""
    a = c_order(a)
    m, k = a.shape
    _require(a.dtype == np.float32 and packed.dtype == np.float32, "sgemm operands must be float32")
    _require(packed.size == lib.seamless_sgemm_packed_size(k, n), f"packed B does not hold {k} x {n}")
    if bias is not None:
        bias = _f32_array(bias, n, "bias")
    c = np.empty((m, n), np.float32)
    if m and n:
        lib.seamless_sgemm(m, n, k, _ptr(a), k, _ptr(packed), ffi.NULL if bias is None else _ptr(bias),
                           _ptr(c), n, *_pool())
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


def gelu(x: np.ndarray) -> np.ndarray:
    """x/2 (1 + erf(x / sqrt 2)) for float32 x."""
    x = c_order(x)
    y = np.empty_like(x)
    lib.seamless_gelu_f32(_ptr(x), _ptr(y), x.size, *_pool())
    return y
