"""Matrix products: MatMul, Gemm, MatMulInteger, Einsum, plan/fusion.py's MatMulBias; Det."""
import numpy as np

from .. import constants
from ..checks import InvalidArgument
from ..registry import FLOATS, FUSED_DOMAIN, NUMERIC, kernel
from .elementwise import via_float32

INT8S = frozenset(map(np.dtype, (np.int8, np.uint8)))


F32 = np.dtype(np.float32)
NATIVE_MIN_MACS = 1 << 16  # below this, a call to numpy costs less than the native GEMM's set-up


def _large(a, b) -> bool:
    return a.size * b.shape[-1] >= NATIVE_MIN_MACS


def _sgemm(a, b, bias=None, trans_b=False):
    """float32 a (..., K) times a 2-D b: the native GEMM (b packed once when constant) for large
    products, numpy for small ones."""
    if not _large(a, b.T if trans_b else b):
        y = np.matmul(a, b.T if trans_b else b)
        return y + bias if bias is not None else y
    from . import native
    n = b.shape[0] if trans_b else b.shape[1]
    packed, split = native_packed(b, trans_b)
    rows = int(np.prod(a.shape[:-1], dtype=np.int64))  # not -1: ambiguous when K == 0
    y = native.sgemm(a.reshape(rows, a.shape[-1]), packed, n, bias, split)
    return y.reshape(a.shape[:-1] + (n,))


def native_packed(b, trans_b=False):
    """B's GEMM panels and, once per constant, their split for the AMX tiles (None: a B that is not constant, or no
    split here)."""
    from . import native
    if not constants.is_constant(b):
        return native.pack_b(b, trans_b), None

    def pack(w):
        packed = native.pack_b(w, trans_b)
        k, n = w.shape[::-1] if trans_b else w.shape
        return packed, native.split_b(packed, k, n)
    return constants.derived(b, f"sgemm_b{int(trans_b)}", pack)


def check_inner_dims(a, b, op="MatMul") -> None:
    """ONNX MatMul's operands agree on K (1-D operands promoted as numpy does); before any native GEMM reads."""
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"{op}: scalar operands are not allowed, got shapes {a.shape} and {b.shape}")
    k_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if a.shape[-1] != k_b:
        raise ValueError(f"{op} dimension mismatch: A {a.shape}, B {b.shape}")


@kernel("MatMul", since=1, types=NUMERIC)
@via_float32
def matmul(a, b):
    check_inner_dims(a, b)
    if a.dtype == F32 and b.dtype == F32 and a.ndim >= 2 and b.ndim >= 2:
        # the native GEMM on ORT's thread pool: no BLAS threads competing with it
        if b.ndim == 2:
            return (_sgemm(a, b),)
        if _large(a, b):
            from .native import sgemm_batched
            return (sgemm_batched(a, b),)
    # numpy.matmul is ONNX MatMul: 1-D operands are promoted and the added axis dropped,
    # leading axes broadcast.
    return (np.matmul(a, b),)


@kernel("Gemm", since=7, types=NUMERIC)
@via_float32
def gemm(a, b, c=None, *, alpha=1.0, beta=1.0, transA=0, transB=0):
    dtype = a.dtype
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"Gemm: A and B must be 2-D, got shapes {a.shape} and {b.shape}")
    (m, k), (k_b, n) = a.shape[::-1] if transA else a.shape, b.shape[::-1] if transB else b.shape
    if k != k_b:
        raise InvalidArgument(f"GEMM: Dimension mismatch, W: {b.shape} K: {k} N:{n}")
    if c is not None and beta != 0.0:
        try:
            np.broadcast_shapes(c.shape, (m, n))
        except ValueError:
            raise InvalidArgument(f"Gemm: Invalid bias shape for broadcast: {c.shape} to {(m, n)}") from None
    if dtype == F32 and b.dtype == F32:
        y = _sgemm(a.T if transA else a, b, trans_b=bool(transB))
    else:
        y = np.matmul(a.T if transA else a, b.T if transB else b)
    if alpha != 1.0:
        y = alpha * y
    if c is not None and beta != 0.0:  # beta=0 ignores C entirely (even NaN/inf in it)
        y = y + (c if beta == 1.0 else beta * c)
    return (y.astype(dtype, copy=False),)  # integer Gemm with float alpha/beta computes wider


@kernel("MatMulInteger", since=10, types=INT8S)
def matmul_integer(a, b, a_zero_point=None, b_zero_point=None):
    check_inner_dims(a, b, "MatMulInteger")
    a = a.astype(np.int32)
    b = b.astype(np.int32)
    if a_zero_point is not None:
        a_zero_point = a_zero_point.astype(np.int32)
        if a_zero_point.ndim == 1 and a_zero_point.size > 1:
            a_zero_point = a_zero_point.reshape(-1, 1)  # one zero point per row of A
        a = a - a_zero_point
    if b_zero_point is not None:
        b = b - b_zero_point.astype(np.int32)  # per column of B broadcasts as-is
    # float64 BLAS is exact here: |products| < 2**16, so sums stay far below 2**53.
    return (np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.int32),)


@kernel("Einsum", since=12, types=NUMERIC)
@via_float32
def einsum(*inputs, equation):
    # ONNX allows spaces in the equation; implicit output (no "->") orders letters like numpy.
    try:
        return (np.einsum(equation.replace(" ", ""), *inputs, optimize=len(inputs) > 1),)
    except ValueError as exc:  # operands that do not fit the equation
        raise InvalidArgument(f"Einsum operands {[a.shape for a in inputs]} do not fit {equation!r}: {exc}") from exc


# the kernel of plan/fusion.py's MatMulBias (never seen in a model; same math as the pattern)
@kernel("MatMulBias", domain=FUSED_DOMAIN)
@via_float32
def matmul_bias(a, w, bias):
    # float16: the product and the bias added in float32, rounded once (ORT's fused Gemm)
    check_inner_dims(a, w)
    return (_sgemm(a, w, bias=np.ascontiguousarray(bias)),)


# --- linear algebra beyond products -------------------------------------------------------


@kernel("Det", since=11, types=FLOATS)
@via_float32
def det(X):
    # determinants of the trailing [M, M] matrices
    return (np.linalg.det(X).astype(X.dtype, copy=False),)
