"""Which kernels the CUDA EP launches for a fused norm + product (plan/fusion.py's NormedProduct), for
wide products and for GroupQueryAttention, decided on the host: checked without a GPU (a recording runtime stands in for
runtime/cuda.py), so CI guards the choices; what the kernels compute is tests/cuda/test_cuda_attention.py's
(on a GPU)."""
import struct

import cffi
import numpy as np
import pytest

from cuda_sources import launch_mismatches
from onnxruntime_ep_seamless.kernels.checks import InvalidArgument
from onnxruntime_ep_seamless.kernels.cuda.attention import group_query_attention
from onnxruntime_ep_seamless.kernels.cuda.matmul import linear, linear_argmax
from onnxruntime_ep_seamless.kernels.cuda.normalization import normed_product
from onnxruntime_ep_seamless.runtime.cuda import CudaRuntime, DeviceTensor
from onnxruntime_ep_seamless.runtime.cuda_args import ffi, struct_arg

F16 = np.dtype(np.float16)
ORT_TENSOR = 1 << 40  # an address the recorder never allocates: ORT's output tensor offered to a kernel


class Recorder:
    """runtime/cuda.py's allocation and launch calls, recorded: `launches` names each kernel launched
    (cuBLASLt's GEMM as "gemm") with its keyword arguments (dynamic shared memory); each launch's arguments are held
    to its kernel's parameters as native/cuda declares them (tests/cuda_sources.py)."""

    hopper = True  # sm_90: the tensor-core LM head kernel
    multiprocessors = 132  # an H100's or H200's: a wave of the x32 kernel is 660 blocks
    lib = type("Lib", (), {"seamless_capturing": staticmethod(lambda: 0)})

    def __init__(self):
        self.top, self.launches, self.args = 4096, [], []

    def alloc(self, shape, dtype):
        dtype = np.dtype(dtype)
        ptr, self.top = self.top, self.top + (int(np.prod(shape)) * dtype.itemsize + 255) // 256 * 256
        return DeviceTensor(ptr, tuple(shape), dtype)

    def constant(self, shape, dtype=F16):  # a model's weight: with its host copy
        t = self.alloc(shape, dtype)
        return DeviceTensor(t.ptr, t.shape, t.dtype, np.zeros(shape, dtype))

    def upload(self, array):
        t = self.alloc(array.shape, array.dtype)
        return DeviceTensor(t.ptr, t.shape, t.dtype, array)

    def free(self, t):
        assert t.ptr != ORT_TENSOR, "a kernel freed ORT's output tensor"

    output = CudaRuntime.output

    def launch_rows(self, name, rows, stream, *args, **kw):
        assert not launch_mismatches(name, args, ffi.sizeof)
        self.launches.append((name, rows, kw))
        self.args.append(args)

    def launch(self, name, n, stream, *args):
        assert not launch_mismatches(name, args, ffi.sizeof)
        self.launches.append((name, n, {}))
        self.args.append(args)

    def gemm(self, stream, *args, **how):
        self.launches.append(("gemm", 0, {}))

    def strided_copy(self, stream, *args):
        self.launches.append(("strided_copy", 0, {}))

    def counters(self, n, stream):
        return self.alloc((n,), np.uint32)

    @staticmethod
    def to_host(t, stream):
        return t.host


def run(product, m, k, n, want_sum=True, output_buffer=None):
    """normed_product on activations (1, m, k) with a skip input: the runtime's launches and the outputs."""
    rt = Recorder()
    x, skip, gamma = rt.alloc((1, m, k), F16), rt.alloc((1, m, k), F16), rt.constant((k,))
    if product.startswith("MatMulNBits"):
        q, scales = rt.constant((n, k // 32, 16), np.uint8), rt.constant((n * k // 32,))
        weights = ([q, scales, None, None, rt.constant((n,))] if product == "MatMulNBits" else
                   [q, scales, None, q, scales, None])
        attrs = dict(K=k, N=n, block_size=32, bits=4)
    else:
        weights, attrs = [rt.constant((2 * n if product == "MatMulSwiGLU" else n, k))], {}
    out = normed_product(rt, None, x, skip, gamma, None, *weights, product=product, epsilon=1e-6,
                         _num_outputs=2 if want_sum else 1, _output_buffer=output_buffer, **attrs)
    return rt.launches, out


def offer(asked):
    """A kernel's _output_buffer (registry.PLAN_FACTS) offering ORT_TENSOR, each request appended to `asked`."""
    return lambda i, shape, dtype: asked.append((i, shape, np.dtype(dtype))) or DeviceTensor(ORT_TENSOR, shape, dtype)


# the products that end a decoder (its LM head) write into ORT's output tensor: by their GEMV (a batch's rows
# too), the tensor-core kernel or cuBLAS, the norm inside or before; a prompt's GEMM of dequantized weights keeps
# its own product
@pytest.mark.parametrize("product,m,k,n,direct", [
    ("MatMulNBits", 1, 896, 1152, True), ("MatMulNBits", 1, 896, 16392, True), ("MatMulNBits", 1, 2112, 1152, True),
    ("MatMulNBits", 8, 896, 1152, True), ("MatMulNBits", 16, 896, 151936, True), ("MatMulNBits", 17, 896, 1152, False),
    ("Linear", 1, 896, 1152, True), ("Linear", 1, 896, 151936, True),
    ("Linear", 5, 896, 1152, True)])
def test_a_products_result_goes_into_the_output_tensor_offered(product, m, k, n, direct):
    asked = []
    _, (y,) = run(product, m, k, n, want_sum=False, output_buffer=offer(asked))
    assert (y.ptr == ORT_TENSOR) == direct and y.shape == (1, m, n)
    assert asked == ([(0, (1, m, n), F16)] if direct else [])


def test_a_linear_layers_bias_is_added_by_cublas_before_it_rounds():
    """Into ORT's output tensor by cuBLASLt's bias epilogue; a bias not 16-byte aligned is added to the product
    kept in float32: either way the sum is rounded once, as stock's."""
    rt, asked = Recorder(), []
    (y,) = linear(rt, None, rt.alloc((1, 5, 64), F16), rt.constant((40, 64)), rt.constant((40,)),
                  _output_buffer=offer(asked))
    assert [name for name, _, _ in rt.launches] == ["gemm"] and y.ptr == ORT_TENSOR and y.shape == (1, 5, 40)
    assert asked == [(0, (1, 5, 40), F16)]
    rt, asked = Recorder(), []
    bias = rt.constant((41,))
    (y,) = linear(rt, None, rt.alloc((1, 5, 64), F16), rt.constant((40, 64)),
                  DeviceTensor(bias.ptr + 2, (40,), bias.dtype), _output_buffer=offer(asked))
    assert rt.launches[0][0] == "gemm" and y.ptr != ORT_TENSOR and (y.shape, y.dtype) == ((1, 5, 40), F16)
    assert asked == []


@pytest.mark.parametrize("keepdims", [0, 1])
def test_argmax_writes_into_the_output_tensor_offered(keepdims):
    from onnxruntime_ep_seamless.kernels.cuda.reduction import argmax
    rt, asked = Recorder(), []
    (y,) = argmax(rt, None, rt.alloc((1, 1, 151936), F16), axis=-1, keepdims=keepdims, _output_buffer=offer(asked))
    shape = (1, 1, 1) if keepdims else (1, 1)
    assert y.ptr == ORT_TENSOR and y.shape == shape and asked == [(0, shape, np.dtype(np.int64))]
    assert [name for name, _, _ in rt.launches] == ["seamless_select_chunk_f16"]


# LinearArgMax: up to 4 rows on tensor cores the product's launch picks its rows' ArgMax as it stores them, at any
# width (16 columns a block), and a one-block kernel writes the indices; else Linear's own choice, then the ArgMax
# kernel
@pytest.mark.parametrize("m,k,n,names", [
    (1, 896, 151936, ["seamless_linear_tc16_argmax_f16", "seamless_linear_picked"]),  # an LM head, its next token
    (4, 1024, 40, ["seamless_linear_tc16_argmax_f16", "seamless_linear_picked"]),
    (5, 896, 151936, ["gemm", "seamless_select_chunk_f16"]),                 # a prompt's rows
    (1, 2112, 151936, ["gemm", "seamless_select_chunk_f16"]),                # K past TC_MAX_K
    (1, 904, 40, ["seamless_linear_f16", "seamless_select_f16"])])          # K not in chunks of 32
def test_a_products_argmax_is_picked_in_its_launch_where_tensor_cores_take_it(m, k, n, names):
    rt, asked = Recorder(), []
    y, i = linear_argmax(rt, None, rt.alloc((1, m, k), F16), rt.constant((n, k)), keepdims=1, select_last_index=1,
                         _output_buffer=offer(asked))
    assert [name for name, _, _ in rt.launches] == names
    assert y.ptr == i.ptr == ORT_TENSOR and (y.shape, i.shape) == ((1, m, n), (1, m, 1))
    assert asked == [(0, (1, m, n), F16), (1, (1, m, 1), np.dtype(np.int64))]
    if len(names) == 2 and names[1] == "seamless_linear_picked":
        (name, blocks, kw), args = rt.launches[0], rt.args[0]
        assert blocks == -(-n // 16) and kw == {"shared": 8 * -(-k // 256) * 2 * 512}
        assert args[-1] == ("int", 1)  # prefer_last: select_last_index


def test_a_products_argmax_takes_its_bias_in_the_same_launch():
    rt = Recorder()
    a, w, bias = rt.alloc((1, 1, 896), F16), rt.constant((151936, 896)), rt.constant((151936,))
    linear_argmax(rt, None, a, w, bias)
    assert [name for name, _, _ in rt.launches] == ["seamless_linear_tc16_argmax_f16", "seamless_linear_picked"]
    assert rt.args[0][:3] == (("ptr", a.ptr), ("ptr", w.ptr), ("ptr", bias.ptr))


NBITS = {"MatMulNBits": "seamless_matmul_nbits4_x32", "MatMulNBitsSwiGLU": "seamless_matmul_nbits4_x32_swiglu",
         "Linear": "seamless_linear_tc", "MatMulSwiGLU": "seamless_linear_tc16_swiglu"}


@pytest.mark.parametrize("product,m", [(p, m) for p in NBITS for m in (1, 4) if m == 1 or not p.startswith("MatMulNBits")])
def test_a_decode_step_normalises_inside_the_product(product, m):
    launches, (y, total) = run(product, m, 896, 1152)
    rows = 1 if product.startswith("MatMulNBits") else m  # a block's rows: one (a grid row each), or all
    # matmul.cu's Linear (on tensor cores at this K) also stages its weights there: 8 warps, 16 bytes a lane a
    # matrix and group of 8 columns (the SwiGLU's 2 a block) for each of its 4 chunks of 32 k (every 8th of the 28)
    staged = 0 if product.startswith("MatMulNBits") else 8 * 512 * 4 * (2 * 2 if product == "MatMulSwiGLU" else 1)
    assert [(name, kw) for name, _, kw in launches] == [(NBITS[product] + "_norm_f16",
                                                         {"shared": 896 * 2 * rows + staged})]
    assert y.shape == (1, m, 1152) and total.shape == (1, m, 896)  # the residual sum, written by the kernel
    launches, out = run(product, m, 896, 1152, want_sum=False)
    assert len(launches) == 1 and len(out) == 1


@pytest.mark.parametrize("product,m,k,n,then", [
    ("MatMulNBits", 1, 2112, 1152, "seamless_matmul_nbits4_x32_f16"),         # K above 2048 (8 a thread)
    ("MatMulNBits", 2, 896, 1152, "seamless_matmul_nbits4_rows_f16"),        # a batch's rows: no norm inside
    ("MatMulNBits", 4, 896, 1152, "seamless_matmul_nbits4_mma_rows_f16"),    # from MMA_ROWS_FROM on tensor cores
    ("MatMulNBitsSwiGLU", 16, 896, 4864, "seamless_matmul_nbits4_mma_rows_swiglu_f16"),
    ("MatMulNBitsSwiGLU", 17, 896, 4864, "seamless_dequantize_nbits_f16"),   # a prompt's: one GEMM
    ("MatMulNBits", 1, 896, 16392, "seamless_matmul_nbits4_tiles_f16"),      # the tensor-core LM head
    ("Linear", 5, 896, 1152, "gemm"),                                        # more rows than the GEMV takes
    ("Linear", 1, 2112, 1152, "seamless_linear_f16"),
    ("Linear", 1, 896, 40000, "seamless_linear_tc_f16"),                     # 5000 blocks
    ("MatMulSwiGLU", 1, 2112, 1152, "seamless_linear_swiglu_f16"),
])
def test_the_norm_kernel_runs_first_where_the_product_cannot_take_it(product, m, k, n, then):
    launches, (y, total) = run(product, m, k, n)
    names = [name for name, _, _ in launches]
    assert names[:2] == ["seamless_skip_norm8_f16", then], names
    assert y.shape[-1] == n and total.shape == (1, m, k)


@pytest.mark.parametrize("dtype,k,name,blocks,shared", [
    (np.float16, 896, "seamless_linear_tc_f16", 144, 8 * 4 * 512),     # tensor cores: 8 columns a block
    (np.float16, 1024, "seamless_linear_tc_f16", 144, 8 * 4 * 512),
    (np.float16, 904, "seamless_linear_f16", 288, 8 * 2 * 512),           # K not in chunks of 32: a warp a column,
    (np.float16, 1056, "seamless_linear_f16", 288, 8 * 3 * 512),          # or K past TC_MAX_K (split over 2 warps)
    (np.float32, 896, "seamless_linear_f32", 288, 0),                     # float32: no tensor cores, nothing staged
])
def test_a_linear_layer_takes_tensor_cores_where_k_is_short(dtype, k, name, blocks, shared):
    rt = Recorder()
    a, w = rt.alloc((1, 1, k), dtype), rt.constant((1152, k), dtype)
    (y,) = linear(rt, None, a, w)
    assert rt.launches == [(name, blocks, {"shared": shared})] and y.shape == (1, 1, 1152)


@pytest.mark.parametrize("product,bias", [("MatMulNBits", False), ("MatMulNBits", True), ("MatMulNBitsSwiGLU", False)])
@pytest.mark.parametrize("m", [1, 2, 9, 16, 17])
def test_a_prompts_nbits_product_is_one_gemm_on_dequantized_weights(product, bias, m):
    """One row: the GEMV; 2 to NBITS_GEMV_ROWS (a batch's decode step): the weights read once for the rows, below
    MMA_ROWS_FROM by the GEMV's passes for NBITS_ROWS rows a block, from it on tensor cores; more: the weights
    dequantized (each matrix of a SwiGLU into its half of one scratch matrix), one GEMM, then the SwiGLU or the
    bias."""
    from onnxruntime_ep_seamless.kernels.cuda.quantization import matmul_nbits, matmul_nbits_swiglu
    rt, k, n = Recorder(), 896, 1152
    q, scales = rt.constant((n, k // 32, 16), np.uint8), rt.constant((n * k // 32,))
    a = rt.alloc((1, m, k), F16)
    if product == "MatMulNBits":
        (y,) = matmul_nbits(rt, None, a, q, scales, None, None, rt.constant((n,)) if bias else None, K=k, N=n,
                            block_size=32)
    else:
        (y,) = matmul_nbits_swiglu(rt, None, a, q, scales, None, q, scales, None, K=k, N=n, block_size=32)
    names = [name for name, _, _ in rt.launches]
    swiglu = "_swiglu" if product != "MatMulNBits" else ""
    if m == 1:
        assert names == ["seamless_matmul_nbits4_x32" + swiglu + "_f16"]
    elif m < 4:  # MMA_ROWS_FROM: 8 warps a block, a column each (K 896: one warp's pass), 8 rows
        assert rt.launches == [("seamless_matmul_nbits4_rows" + swiglu + "_f16", n // 8, {})]
        assert rt.args[0][-1] == struct_arg("NBits", m=m, n=n, k=k, block=32, bits=4, split=1)
    elif m <= 16:  # on tensor cores, every row: 8 columns a warp, 8 warps a tile (28 groups of 32 k over them)
        assert rt.launches == [("seamless_matmul_nbits4_mma_rows" + swiglu + "_f16", n // 8, {})]
        assert rt.args[0][-1] == struct_arg("NBits", m=m, n=n, k=k, block=32, bits=4, split=8)
    else:
        tail = {"MatMulNBitsSwiGLU": ["seamless_swiglu_f16"]}.get(product, ["seamless_binary_f16"] if bias else [])
        mats = 2 if product == "MatMulNBitsSwiGLU" else 1
        assert names == ["seamless_dequantize_nbits_f16"] * mats + ["gemm"] + tail, names
    assert y.shape == (1, m, n)


@pytest.mark.parametrize("m", [2, 9, 16])
def test_a_float32_batchs_nbits_product_reads_the_weights_once_for_8_rows(m):
    """No tensor cores for float32 activations: the GEMV's passes for NBITS_ROWS (8) rows a block, a column a warp
    (K 2112: 3 passes, 2 warps a column), the blocks of the second 8 rows after the first's."""
    from onnxruntime_ep_seamless.kernels.cuda.quantization import matmul_nbits
    rt, k, n = Recorder(), 2112, 1152
    q, scales = rt.constant((n, k // 32, 16), np.uint8), rt.constant((n * k // 32,), np.float32)
    (y,) = matmul_nbits(rt, None, rt.alloc((m, k), np.float32), q, scales, None, None, None, K=k, N=n, block_size=32)
    assert rt.launches == [("seamless_matmul_nbits4_rows_f32", -(-m // 8) * (n // 4), {})] and y.shape == (m, n)
    assert rt.args[0][-1] == struct_arg("NBits", m=m, n=n, k=k, block=32, bits=4, split=2)


@pytest.mark.parametrize("k,n,staged", [(896, 9728, 8 * 4 * 512), (4864, 896, 8 * 5 * 512), (8192, 4096, 0)])
def test_a_linear_layers_weights_go_through_shared_memory_where_they_fit(k, n, staged):
    """matmul.cu's Linear copies a lane's weights to shared memory before waiting for the kernel before
    (passes over k x 16 bytes a lane, 8 warps), up to STAGED_MAX bytes a block; else it streams them."""
    import struct
    rt = Recorder()
    linear(rt, None, rt.alloc((1, 1, k), F16), rt.constant((n, k)))
    [(name, _, kw)], [args] = rt.launches, rt.args
    packed = next(v for kind, v in args if kind == "bytes")
    assert struct.unpack("<5i", packed)[4] == int(staged > 0) and kw == {"shared": staged}


# Past the tensor cores' K the GEMV streams the weights (or stages them: linear_row, one row, up to 5 passes), the
# most warps a column (up to 8, up to the passes over K) that keep n * split within 4096 warps: (m, k, n, product,
# kernel, split, staged bytes), Llama-3.2-1B's layer (q|k|v with its norm, o, gate|up with its norm, down),
# Llama-3.1-8B's down projection, and two rows of the 1B's down projection
@pytest.mark.parametrize("m,k,n,product,name,split,staged", [
    (1, 2048, 3072, "Linear", "seamless_linear_norm_f16", 1, 0),
    (1, 2048, 2048, None, "seamless_linear_f16", 2, 8 * 4 * 512),
    (1, 2048, 8192, "MatMulSwiGLU", "seamless_linear_swiglu_norm_f16", 1, 0),
    (1, 8192, 2048, None, "seamless_linear_f16", 2, 0),
    (1, 14336, 4096, None, "seamless_linear_f16", 1, 0),
    (2, 8192, 2048, None, "seamless_linear_f16", 2, 0),
])
def test_a_long_products_weights_are_streamed_split_to_fill_the_gpu(m, k, n, product, name, split, staged):
    if product:
        launches, _ = run(product, m, k, n, want_sum=False)
        normed = m * k * 2
    else:
        rt = Recorder()
        linear(rt, None, rt.alloc((1, m, k), F16), rt.constant((n, k)))
        launches, normed = rt.launches, 0
    [(launched, blocks, kw)] = launches
    assert (launched, blocks, kw) == (name, n // (8 // split), {"shared": normed + staged})


def test_products_of_65536_columns_and_more_go_to_cublas():
    rt = Recorder()
    linear(rt, None, rt.alloc((1, 1, 896), F16), rt.constant((65536, 896)))
    linear(rt, None, rt.alloc((1, 1, 896), F16), rt.constant((65535, 896)))
    assert [name for name, _, _ in rt.launches] == ["gemm", "seamless_linear_tc_f16"]


def gqa(s, heads, kv_heads, head_size, past, seqlens, settled=False, recorder=None, readers=(), present=None,
        **attrs):
    """group_query_attention of s new tokens (packed q|k|v, rotary) on a KV buffer of `past` rows (settled: a
    run's input; readers: the ops reading its output; present(kv): the (key, value) buffers ORT holds for its
    present outputs, given the past's; attrs: more of its attributes): its launches (name, grid, keyword
    arguments)."""
    rt, b = recorder or Recorder(), len(seqlens)
    ints = lambda v: DeviceTensor(1, np.shape(v), np.dtype(np.int32), np.asarray(v, np.int32))
    query = rt.alloc((b, s, (heads + 2 * kv_heads) * head_size), F16)
    kv = [rt.alloc((b, kv_heads, past, head_size), F16) for _ in range(2)]
    for t in kv:
        t.settled = settled
    cos, sin = rt.constant((32768, head_size // 2)), rt.constant((32768, head_size // 2))
    buffers = present(kv) if present else None
    out, pk, pv = group_query_attention(rt, None, query, None, None, *kv, ints(seqlens), ints(max(seqlens) + 1), cos,
                                        sin, num_heads=heads, kv_num_heads=kv_heads, do_rotary=1, _readers=readers,
                                        _output_buffer=buffers and (lambda i, shape, dtype: buffers[i - 1]), **attrs)
    if buffers:
        assert (pk, pv) == buffers  # written where ORT holds them: nothing copied after the run
    assert out.shape == (b, s, heads * head_size) and pk.shape == pv.shape == (b, kv_heads, max(past, s), head_size)
    return rt.launches


def test_a_decode_step_of_attention_is_one_launch_split_over_keys():
    # a block per query head and 4 rows a group of head_size / 8 lanes (128 rows at head size 64) where that is
    # one block, else 8 (half the blocks); head sizes 64 and 128 have kernels of their own
    assert gqa(1, 14, 2, 64, 145, [100]) == [("seamless_gqa_decode_p8_h64_f16", (1, 14),
                                              {"threads": 256, "shared": 0})]
    assert gqa(1, 14, 2, 64, 256, [255])[0][:2] == ("seamless_gqa_decode_p8_h64_f16", (1, 14))
    assert gqa(1, 14, 2, 64, 128, [100])[0][:2] == ("seamless_gqa_decode_p4_h64_f16", (1, 14))
    assert gqa(1, 14, 2, 64, 257, [255])[0][:2] == ("seamless_gqa_decode_p8_h64_f16", (2, 14))
    # from DECODE_GROUPED_BLOCKS (128) blocks of KV heads and splits a block per KV head: 16-bit head sizes 64 and
    # 128 stream their rows through shared memory in about STREAM_BLOCKS (264) blocks, up to 4 query heads a block
    # (here 17 splits for 2 x 8 KV heads, each of 32 KiB: 4 stages of 16 rows' keys and values)
    assert gqa(1, 32, 8, 128, 4096, [4000, 17])[0] == ("seamless_gqa_decode_stream_h128_f16", (17, 16),
                                                       {"threads": 256, "shared": 32768})
    assert gqa(1, 32, 8, 128, 1024, [1000])[0][:2] == ("seamless_gqa_decode_p8_h128_f16", (8, 32))  # 64 blocks
    assert gqa(1, 8, 8, 64, 20000, [19999])[0][:2] == ("seamless_gqa_decode_p8_h64_f16", (79, 8))  # no groups
    assert gqa(1, 16, 1, 64, 100, [99])[0][:2] == ("seamless_gqa_decode_p4_h64_f16", (1, 16))  # any heads a KV head
    assert gqa(1, 14, 2, 32, 100, [99])[0][:2] == ("seamless_gqa_decode_p4_f16", (1, 14))  # any head size
    # no shared-memory bound on the context, unlike a prompt's attention a block a query (a row of scores)
    # (7 query heads a KV head: 2 blocks a split, side by side, 66 splits)
    assert gqa(1, 14, 2, 64, 20000, [19999])[0][:2] == ("seamless_gqa_decode_stream_h64_f16", (132, 2))
    # other head sizes keep gqa_decode_grouped: a block per KV head and split, its query heads in turn
    assert gqa(1, 14, 2, 32, 40000, [30000])[0][:2] == ("seamless_gqa_decode_grouped_p8_f16", (79, 2))
    with pytest.raises(ValueError, match="handles up to 11424 cached tokens for 2 new tokens of head size 96"):
        gqa(2, 14, 2, 96, 20000, [19999])


@pytest.mark.parametrize("settled", [False, True])
def test_a_decode_step_reads_a_settled_past_before_waiting_for_the_kernel_before(settled):
    # AttendParams.early: only a past that no launch of this run writes (a run's input) may be read early
    rt = Recorder()
    gqa(1, 14, 2, 64, 145, [100], settled=settled, recorder=rt)
    kind, params = rt.args[-1][-1]
    assert kind == "bytes" and struct.unpack("<ffiiiiii", params)[5] == int(settled)


@pytest.mark.parametrize("shared", [True, False])
def test_a_decode_step_writes_only_its_new_row_where_the_present_is_the_pasts_buffer(shared):
    # AttendParams.in_place: the caller bound past and present to one buffer (else the whole present is written)
    rt = Recorder()
    other = lambda kv: tuple(rt.alloc(t.shape, t.dtype) for t in kv)
    gqa(1, 14, 2, 64, 145, [100], recorder=rt, present=(lambda kv: tuple(kv)) if shared else other)
    assert struct.unpack("<ffiiiiii", rt.args[-1][-1][1])[7] == int(shared)


@pytest.mark.parametrize("readers,late", [(("MatMulNBits",), 1), (("MatMul",), 0), (("MatMulNBits", "Add"), 0), ((), 0)])
def test_a_decode_step_lets_a_quantized_projection_launch_once_it_has_its_inputs(readers, late):
    # AttendParams.late_launch: the next kernel's few weights need little time in L2 ahead of its wait
    rt = Recorder()
    gqa(1, 14, 2, 64, 145, [100], recorder=rt, readers=readers)
    assert struct.unpack("<ffiiiiii", rt.args[-1][-1][1])[6] == late


def test_a_run_with_settled_inputs_starts_with_a_launch_that_waits_for_all_work_before_it():
    # runtime/cuda.py begin_run: the next launch on that stream (only) is not a dependent launch
    ffi = cffi.FFI()
    seen = []

    class Lib:
        @staticmethod
        def seamless_cuda_launch(fn, gx, gy, block, shared, stream, packed, nbytes, offsets, count, dependent):
            seen.append((int(ffi.cast("uintptr_t", stream)), dependent))

    rt = CudaRuntime.__new__(CudaRuntime)
    rt.ffi, rt.lib, rt.dependent, rt._barriers, rt._plain, rt._layouts, rt._shared = ffi, Lib, 1, set(), set(), {}, {}
    rt.native = type("Native", (), {"check": staticmethod(lambda status: None)})
    rt.function = lambda name: None
    one, two = ffi.cast("void*", 16), ffi.cast("void*", 32)
    rt.begin_run(one)
    for stream in (two, one, one):
        rt.launch("seamless_cast_f16_f32", 1, stream, ("int64", 1))
    assert seen == [(32, 1), (16, 0), (16, 1)]


def test_kernel_arguments_are_packed_at_their_c_alignment_into_one_buffer():
    # runtime/cuda.py _launch: seamless_cuda_launch reads argument i at byte offsets[i] of one packed buffer
    ffi, seen = cffi.FFI(), []

    class Lib:
        @staticmethod
        def seamless_cuda_launch(fn, gx, gy, block, shared, stream, packed, nbytes, offsets, count, dependent):
            seen.append(((gx, gy, block, shared), bytes(packed), [offsets[i] for i in range(count)]))
            assert nbytes == len(packed)

        @staticmethod
        def seamless_cuda_allow_shared(fn, nbytes):  # the kernel's dynamic shared memory allowed: not a launch
            pass

    rt = CudaRuntime.__new__(CudaRuntime)
    rt.ffi, rt.lib, rt.dependent, rt._barriers, rt._plain, rt._layouts, rt._shared = ffi, Lib, 0, set(), set(), {}, {}
    rt.native = type("Native", (), {"check": staticmethod(lambda status: None)})
    rt.function = lambda name: None
    shape = struct.pack("<5i", 7, 8, 9, 10, 11)  # a struct of 20 bytes, at a multiple of 8
    args = [("int", -3), ("bytes", shape), ("ptr", 0xDEAD0000BEEF), ("float", 0.5), ("int64", -(1 << 40))]
    rt.launch_rows("k", (5, 2), None, *args, shared=96, threads=128)
    rt.launch_rows("k", (5, 2), None, *args, shared=96, threads=128)  # the same kinds: the cached layout
    (grid, packed, offsets), again = seen
    assert grid == (5, 2, 128, 96) and again == seen[0]
    assert offsets == [0, 8, 32, 40, 48]
    assert struct.unpack_from("<i", packed, 0)[0] == -3
    assert packed[8:28] == shape
    assert struct.unpack_from("<Q", packed, 32)[0] == 0xDEAD0000BEEF
    assert struct.unpack_from("<f", packed, 40)[0] == 0.5
    assert struct.unpack_from("<q", packed, 48)[0] == -(1 << 40)


@pytest.mark.parametrize("s,head_size", [
    (4, 96),    # a prompt of a head size the tiles do not take
    (1, 48),    # 6 lanes a row do not divide a warp
    (1, 512),   # nor do 64
])
def test_other_attention_shapes_prepare_then_attend(s, head_size):
    names = [name for name, _, _ in gqa(s, 4, 2, head_size, 64, [40])]
    assert names == ["seamless_gqa_prepare_f16", "seamless_gqa_attend_f16"]


@pytest.mark.parametrize("s,seqlens", [(1, [40]), (1, [9, 3000]), (12, [11]), (5, [400])])
def test_a_window_sized_cache_attends_over_a_work_buffer_then_keeps_its_newest_rows(s, seqlens):
    # sliding_window_cache=1: the past's C = 16 rows and the s new ones in a work buffer, attention over it, then the
    # newest rows into the present buffers (ORT's, which may be the past's: the work buffer is read whole first)
    # whatever the total length (beyond C); not gqa_decode, which writes the present rows in place
    launches = gqa(s, 4, 2, 64, 16, seqlens, present=lambda kv: tuple(kv), local_window_size=8, sliding_window_cache=1)
    names = [name for name, _, _ in launches]
    assert names == ["seamless_gqa_prepare_f16", "seamless_gqa_attend_f16", "seamless_gqa_window_keep_f16"]
    assert launches[1][2]["shared"] == (16 + s + 64 + 512) * 4  # scores of the work buffer's C + s rows


@pytest.mark.parametrize("s,head_size,past", [(4, 64, 64), (40, 128, 64), (2, 64, 20000), (70, 256, 70)])
def test_a_float16_prompt_attends_in_tiles_of_64_queries(s, head_size, past):
    # a block per (batch, head, 64 query tokens) on tensor cores, the keys through shared memory: no context limit
    launches = gqa(s, 4, 2, head_size, past, [past - 1])
    assert [(name, grid) for name, grid, _ in launches] == [
        ("seamless_gqa_prepare_f16", launches[0][1]), (f"seamless_gqa_attend_tiles_h{head_size}_f16", 4 * -(-s // 64))]


@pytest.mark.parametrize("K,N,block_size,zero_points,matrices", [(896, 40, 32, False, 1), (224, 19, 32, True, 1),
                                                                  (1024, 16, 64, True, 2), (2112, 24, 128, True, 1)])
def test_the_tensor_core_layout_gives_each_lane_its_weights_scales_and_zero_points(K, N, block_size, zero_points,
                                                                                   matrices):
    """quantization.nbits4_tiles, read back lane by lane as quantization.cu's tiles kernel reads it, is the dequantized matrix:
    lane l's 16 bytes are column l / 4's 32 k of group l % 4; lane l < 16's scale pair is for columns 2 (l % 4) and
    + 1 of group l / 4; lane l's zero point is its column's. Past N and K: zeros, scale 0."""
    from onnxruntime_ep_seamless.kernels.cuda.quantization import TILE_CHUNK, nbits4_tiles
    rng, blocks = np.random.default_rng(0), -(-K // block_size)
    weights, dense = [], []
    for _ in range(matrices):
        q = rng.integers(0, 16, (N, blocks * block_size)).astype(np.uint8)
        scales = rng.standard_normal(N * blocks).astype(np.float16)
        z = rng.integers(0, 16, (N, blocks + blocks % 2)).astype(np.uint8) if zero_points else None
        weights += [(q[:, 0::2] | q[:, 1::2] << 4).reshape(N, blocks, -1), scales,
                    (z[:, 0::2] | z[:, 1::2] << 4).reshape(-1) if zero_points else None]
        zz = np.repeat(z[:, :blocks], block_size, 1).astype(np.float32) if zero_points else 8.0
        dense.append((q - zz) * np.repeat(scales.reshape(N, blocks).astype(np.float32), block_size, 1))
    tiles, chunks = -(-N // 8), -(-K // 128)
    rec = nbits4_tiles(weights, K, N, block_size).reshape(tiles, chunks, matrices, TILE_CHUNK)
    for w in range(matrices):
        got = np.zeros((tiles * 8, chunks * 128), np.float32)
        for t in range(tiles):
            for c in range(chunks):
                lanes, pairs = rec[t, c, w, :512].reshape(32, 16), rec[t, c, w, 512:576].view(np.float16).reshape(16, 2)
                for lane in range(32):
                    col, g = lane >> 2, lane & 3
                    q = np.stack([lanes[lane] & 15, lanes[lane] >> 4], 1).reshape(-1).astype(np.float32)
                    scale = pairs[g * 4 + col // 2, col % 2].astype(np.float32)
                    got[t * 8 + col, c * 128 + g * 32:c * 128 + g * 32 + 32] = (q - rec[t, c, w, 576 + lane]) * scale
        np.testing.assert_allclose(got[:N, :K], dense[w][:, :K], rtol=1e-6, atol=1e-6)
        assert not got[N:].any() and not got[:, K:].any()


@pytest.mark.parametrize("n,k,split", [
    (2048, 2048, 2), (2048, 8192, 2), (3072, 2048, 2),  # Llama-3.2-1B's o, down, q|k|v: two warps a column
    (896, 4864, 4), (896, 896, 1), (9728, 896, 1),      # Qwen2.5-0.5B's down (5 passes: not 8), o, gate|up
    (151936, 896, 1)])                                  # an LM head: one warp a column
def test_int4_gemv_warps_a_column(n, k, split):
    """quantization.cu's 4-bit GEMV: warps sharing a column (kernels/cuda/quantization.py column_split, as measured on
    the H200 on both widths: docs/benchmarks/gpu.md, session 41)."""
    from onnxruntime_ep_seamless.kernels.cuda.quantization import GEMV_WARPS, column_split
    assert column_split(n, -(-k // 1024), GEMV_WARPS) == split


# (k, n, SMs, kernel, blocks): Llama-3.1-8B's q|k|v and Phi-4-mini's down projection (768 blocks: past a wave of 5
# blocks an SM on 132 SMs, within one of 6) take the 40-register form; the 1B's o and down, the 8B's o and down
# (512), the 0.5B's down (448) and a 8192-column product (1024: two waves either way) the plain one, as does any
# grid where the driver told no SM count
@pytest.mark.parametrize("k,n,sms,kernel,blocks", [
    (4096, 6144, 132, "x32_r40", 768), (8192, 3072, 132, "x32_r40", 768),
    (2048, 2048, 132, "x32", 512), (8192, 2048, 132, "x32", 512), (4096, 4096, 132, "x32", 512),
    (14336, 4096, 132, "x32", 512), (4864, 896, 132, "x32", 448), (2048, 8192, 132, "x32", 1024),
    (4096, 6144, 0, "x32", 768), (4096, 6144, 108, "x32", 768)])
def test_an_int4_gemv_one_wave_past_5_blocks_an_sm_takes_40_registers(k, n, sms, kernel, blocks):
    """quantization.cu's x32_r40 where 6 blocks an SM make the grid one wave (an H100, session 56: 768 blocks
    14.5 -> 10.8 us; grids of one wave either way no faster)."""
    from onnxruntime_ep_seamless.kernels.cuda.quantization import matmul_nbits
    rt = Recorder()
    rt.multiprocessors = sms
    q, scales = rt.constant((n, k // 32, 16), np.uint8), rt.constant((n * k // 32,))
    matmul_nbits(rt, None, rt.alloc((1, 1, k), F16), q, scales, None, None, None, K=k, N=n, block_size=32)
    assert [(name, rows) for name, rows, _ in rt.launches] == [(f"seamless_matmul_nbits4_{kernel}_f16", blocks)]


@pytest.mark.parametrize("q_heads,kv_heads,d_k,d_v,kernel,blocks,shared", [
    # two tokens' buffers of (k, exp(decay), the readers' q) rows and the readers' q.k, float4-aligned
    (16, 16, 128, 128, "k128", 2 * 16 * 16, 8 * (3 * 128 + 4)),  # Qwen3.5-2B: 16 blocks of 8 columns a head
    (16, 32, 128, 128, "k128", 2 * 32 * 16, 8 * (3 * 128 + 4)),  # 35B-A3B: more value heads than query heads
    (8, 2, 64, 20, "k64", 2 * 2 * 3, 8 * (6 * 64 + 4)),          # GQA: 4 readers; 20 columns in 3 blocks
    (40, 1, 128, 64, "k128", 2 * 8, 8 * (42 * 128 + 40)),        # 40 readers: 42.3 KiB
    (48, 1, 128, 64, "", 2, 4 * (128 + 64 + 48 * 128)),          # 48 readers' rows exceed 48 KiB: the state in memory
    (2, 2, 16, 8, "", 2 * 2, 4 * (16 + 8 + 16))])                 # d_k 16: the state in memory
def test_linear_attention_launch(q_heads, kv_heads, d_k, d_v, kernel, blocks, shared):
    """com.microsoft LinearAttention on CUDA: attention.cu's column kernel (run_columns, a warp of 8 state columns a
    block, d_k 32, 64 or 128, two tokens' rows in 48 KiB of shared memory) or the kernel with the state in memory."""
    from onnxruntime_ep_seamless.kernels.cuda.attention import ms_linear_attention
    rt = Recorder()
    b, t = 2, 5
    k_heads = min(q_heads, kv_heads)  # dividing kv_heads
    q, k, v = (rt.alloc((b, t, heads * d), F16) for heads, d in ((q_heads, d_k), (k_heads, d_k), (kv_heads, d_v)))
    decay, beta = rt.alloc((b, t, kv_heads), F16), rt.alloc((b, t, kv_heads), F16)
    out, state = ms_linear_attention(rt, 0, q, k, v, None, decay, beta, q_num_heads=q_heads, kv_num_heads=kv_heads)
    assert out.shape == (b, t, max(q_heads, kv_heads) * d_v) and state.shape == (b, kv_heads, d_k, d_v)
    name = f"seamless_linear_attention_{kernel}_f16" if kernel else "seamless_linear_attention_f16"
    assert rt.launches == [(name, blocks, {"shared": shared, "threads": 32} if kernel else {"shared": shared})]


@pytest.mark.parametrize("t,slab,per_key", [(64, 0, False), (1000, 0, False), (150, 1, False), (1000, 0, True)])
def test_linear_attention_prompt_in_chunks(t, slab, per_key, monkeypatch):
    """A prompt of LINEAR_CHUNK (64) tokens or more takes attention.cu's chunked recurrence: chunk_prepare a block of
    128 threads a (batch, KV head, chunk), chunk_scan a block of 128 a (batch, KV head, 32 state columns), then
    chunk_output a block of 128 a (batch, KV head, chunk, 32 columns); past CHUNK_SLAB_BYTES of prepared chunks (here
    1: a chunk a slab) in slabs, the state carried between them. A decay per key stays on the column kernel."""
    from onnxruntime_ep_seamless.kernels.cuda import attention
    if slab:
        monkeypatch.setattr(attention, "CHUNK_SLAB_BYTES", slab)
    rt, shapes = Recorder(), []
    alloc = rt.alloc
    rt.alloc = lambda shape, dtype: shapes.append(tuple(shape)) or alloc(shape, dtype)
    b, q_heads, kv_heads, d_k, d_v = 1, 16, 32, 128, 128  # Qwen3.5-2B's linear attention
    q, k, v = (rt.alloc((b, t, heads * d_k), F16) for heads in (q_heads, q_heads, kv_heads))
    decay = rt.alloc((b, t, kv_heads * (d_k if per_key else 1)), F16)
    attention.ms_linear_attention(rt, 0, q, k, v, None, decay, rt.alloc((b, t, kv_heads), F16), q_num_heads=q_heads,
                                  kv_num_heads=kv_heads)
    if per_key:
        assert [name for name, *_ in rt.launches] == ["seamless_linear_attention_k128_f16"]
        return
    chunks = -(-t // 64)
    prepare = ("seamless_linear_chunk_prepare_k128_f16", {"shared": 4 * (2 * 64 * 132 + 2 * 64 + 64 * 64),
                                                          "threads": 128})  # 82.5 KiB
    scan = ("seamless_linear_chunk_scan_k128_f16", b * kv_heads * 4,
            {"shared": 4 * (128 * 32 + 64 * 32 + 2 * 64 * 128), "threads": 128})  # 88 KiB
    slabs = chunks if slab else 1
    output = ("seamless_linear_chunk_output_k128_f16", b * kv_heads * chunks // slabs * 4, {"threads": 128})
    assert rt.launches == [(prepare[0], b * kv_heads * chunks // slabs, prepare[1]), scan, output] * slabs
    floats = 64 * (2 * 128 + 128 + 1 * (128 + 64)) + 4 + 128 * 128  # attention.cu ChunkLayout
    assert (chunks // slabs * b * kv_heads * floats,) in shapes
    assert ((b, kv_heads, d_k, d_v) in shapes[-1:]) == bool(slab)  # the float32 carry: only between slabs


@pytest.mark.parametrize("domain", ["com.microsoft", ""])
def test_causal_conv_between_transposes_is_token_major(domain):
    """Transpose -> CausalConvWithState -> Transpose (Qwen3.5's short convolution) plans as one token-major node
    (plan/fusion.py token_major_causal_conv), whose kernel reads and writes (batch, position, channel): one launch,
    no copies; the state stays channels first."""
    from test_cuda_spatial import token_major_conv_model
    from onnxruntime_ep_seamless.graph.onnx_import import import_model
    from onnxruntime_ep_seamless.kernels.cuda.spatial import token_major_causal_conv
    from onnxruntime_ep_seamless.kernels.registry import FUSED_DOMAIN
    from onnxruntime_ep_seamless.plan.fusion import fuse
    graph = import_model(token_major_conv_model(F16, 1, 48, 150, 4, "silu", domain)[0])
    (node,) = fuse(graph, list(graph.outputs), "cuda")
    assert (node.op_type, node.domain, node.inputs[0], node.outputs) == \
        ("CausalConvWithState", FUSED_DOMAIN, "x", ["y", "present"])
    assert [n.op_type for n in fuse(graph, list(graph.outputs), "cpu")] == ["Transpose", "CausalConvWithState",
                                                                            "Transpose"]
    rt = Recorder()
    y, state = token_major_causal_conv(rt, 0, rt.alloc((2, 150, 48), F16), rt.constant((48, 1, 4)),
                                       rt.constant((48,)), rt.alloc((2, 48, 3), F16), activation="silu")
    assert y.shape == (2, 150, 48) and state.shape == (2, 48, 3)
    assert rt.launches == [("seamless_causal_conv_f16", 2 * 48 * (150 + 3), {})]
    assert rt.args[0][:7] == (("int64", 96), ("int64", 48), ("int64", 150), ("int64", 4), ("int64", 1), ("int", 1),
                              struct_arg("ConvPieces", token_major=1, pieces=1, value=0, in_gate=-1, out_gate=-1))
    with pytest.raises(InvalidArgument, match="past_state must have shape"):
        token_major_causal_conv(rt, 0, rt.alloc((2, 150, 48), F16), rt.constant((48, 1, 4)), None,
                                rt.alloc((2, 3, 48), F16))


def test_gated_causal_conv_is_one_token_major_node():
    """LFM2's Transpose -> Split in three -> Mul -> CausalConvWithState -> Mul -> Transpose plans as one token-major
    node reading the projection's blocks itself (args.h ConvPieces); not where a block has another reader. The
    kernel checks that x holds the three blocks of the weight's channels."""
    from test_cuda_spatial import gated_conv_model
    from onnxruntime_ep_seamless.graph.onnx_import import import_model
    from onnxruntime_ep_seamless.kernels.cuda.spatial import token_major_causal_conv
    from onnxruntime_ep_seamless.kernels.registry import FUSED_DOMAIN
    from onnxruntime_ep_seamless.plan.fusion import fuse
    graph = import_model(gated_conv_model(F16, 1, 48, 150, 3, "none", "com.microsoft")[0])
    (node,) = fuse(graph, list(graph.outputs), "cuda")
    assert (node.op_type, node.domain, node.inputs[0], node.outputs) == \
        ("CausalConvWithState", FUSED_DOMAIN, "x", ["y", "present"])
    assert {k: node.attrs[k] for k in ("pieces", "value", "in_gate", "out_gate")} == \
        {"pieces": 3, "value": 0, "in_gate": 2, "out_gate": 1}
    shared = import_model(gated_conv_model(F16, 1, 48, 150, 3, "none", "com.microsoft", shared=True)[0])
    assert "Split" in [n.op_type for n in fuse(shared, list(shared.outputs), "cuda")]
    rt = Recorder()
    y, state = token_major_causal_conv(rt, 0, rt.alloc((2, 150, 144), F16), rt.constant((48, 1, 3)),
                                       rt.constant((48,)), rt.alloc((2, 48, 2), F16), **node.attrs)
    assert y.shape == (2, 150, 48) and state.shape == (2, 48, 2)
    assert rt.launches == [("seamless_causal_conv_f16", 2 * 48 * (150 + 2), {})]
    assert rt.args[0][6] == struct_arg("ConvPieces", token_major=1, pieces=3, value=0, in_gate=2, out_gate=1)
    with pytest.raises(InvalidArgument, match="not 3 blocks of the 48 channels"):
        token_major_causal_conv(rt, 0, rt.alloc((2, 150, 96), F16), rt.constant((48, 1, 3)), None,
                                rt.alloc((2, 48, 2), F16), **node.attrs)


@pytest.mark.parametrize("rank4", [False, True])
def test_gated_delta_net_launch(rank4):
    """GatedDeltaNet on CUDA: attention.cu's kernel for the head size, a block per (request, value head), a thread per
    state row; the CPU kernel's checks (kernels/cpu/attention.py gdn_geometry) before any launch."""
    from onnxruntime_ep_seamless.kernels.cuda.attention import gated_delta_net
    rt = Recorder()
    lead = (2, 5) if rank4 else (10,)
    q, k, v = rt.alloc(lead + (2, 32), F16), rt.alloc(lead + (2, 32), F16), rt.alloc(lead + (4, 48), F16)
    decay, beta = rt.alloc(lead + (4,), np.float32), rt.alloc(lead + (4,), np.float32)
    a_log, dt_bias = rt.constant((4,), np.float32), rt.constant((4,), np.float32)
    attrs = dict(gate_activation="softplus", beta_activation="sigmoid", qk_l2_norm=1)
    out, state = gated_delta_net(rt, 0, q, k, v, None, decay, beta, rt.alloc((2, 4, 48, 32), np.float32), a_log,
                                 dt_bias, **attrs)
    assert out.shape == lead + (4, 48) and state.shape == (2, 4, 48, 32)
    assert rt.launches == [("seamless_gated_delta_net_k32_f16", 8, {"threads": 64})]
    with pytest.raises(ValueError, match="initial_state must be"):
        gated_delta_net(rt, 0, q, k, v, None, decay, beta, rt.alloc((2, 4, 32, 48), np.float32), a_log, dt_bias,
                        **attrs)
    with pytest.raises(ValueError, match="initial_state is required"):
        gated_delta_net(rt, 0, q, k, v, None, decay, beta, None, a_log, dt_bias, **attrs)


@pytest.mark.parametrize("inter,dealt", [(512, True), (992, True), (1024, False), (2880, False)])
def test_qmoe_down_deals_chunks_on_rows_under_1024_columns(inter, dealt):
    """moe.cu's down product: rows of fewer 32-column chunks than a warp has lanes (Qwen3.5-MoE's 512) deal every
    chosen expert's chunks to the lanes at once (down_dealt: faster there, slower on gpt-oss's 2880: session 43's
    H200 runs); up launches a warp per MOE_UP_ROWS rows of an expert."""
    from onnxruntime_ep_seamless.kernels.cuda.moe import MOE_UP_ROWS, qmoe
    rt, tokens, hidden, experts, k = Recorder(), 3, 256, 8, 2
    x, router = rt.alloc((tokens, hidden), F16), rt.alloc((tokens, experts), F16)
    w1, s1 = rt.constant((experts, 2 * inter, hidden // 2), np.uint8), rt.constant((experts, 2 * inter, hidden // 32))
    w2, s2 = rt.constant((experts, hidden, inter // 2), np.uint8), rt.constant((experts, hidden, inter // 32))
    qmoe(rt, None, x, router, w1, s1, None, w2, s2, k=k, activation_type="swiglu", swiglu_fusion=1,
         expert_weight_bits=4, block_size=32)
    launched = {name: n for name, n, _ in rt.launches}
    assert ("seamless_moe_down_dealt_f16" in launched) == dealt
    assert ("seamless_moe_down_f16" in launched) == (not dealt)
    assert launched["seamless_moe_up_f16"] == tokens * k * -(-2 * inter // MOE_UP_ROWS) * 32


@pytest.mark.parametrize("dims,src,dst,offsets,kernel,n,narrow", [
    ((4, 3, 64), (192, 64, 1), (384, 128, 1), (0, 64), "seamless_copy_16", 96, 1),  # a Concat's piece: rows line up
    ((4, 3, 64), (192, 64, 1), (384, 128, 1), (0, 3), "seamless_copy_2", 768, 1),   # ... but for its offset
    ((4, 3, 60), (180, 60, 1), (360, 120, 1), (0, 0), "seamless_copy_2", 720, 1),   # rows of 120 bytes
    ((4, 1, 3, 64), (192, 192, 64, 1), (192, 192, 64, 1), (0, 0), "seamless_copy_16", 96, 1),  # one run
    ((64, 12), (1, 64), (12, 1), (0, 0), "seamless_copy_2", 768, 1),                # a transpose
    ((12, 64), (0, 1), (64, 1), (0, 0), "seamless_copy_16", 96, 1),                 # an Expand of rows
    ((64, 12), (1, 0), (12, 1), (0, 0), "seamless_copy_2", 768, 1),                 # ... of columns
    ((2, 1 << 30), (1, 2), (1 << 30, 1), (0, 0), "seamless_copy_2", 1 << 31, 0)])   # indices past 2^30: 64-bit
def test_strided_copies_merge_runs_and_move_16_bytes_where_rows_line_up(dims, src, dst, offsets, kernel, n, narrow):
    rt = Recorder()
    x, y = rt.alloc((1 << 20,), F16), rt.alloc((1 << 20,), F16)  # 16-byte aligned addresses
    CudaRuntime.strided_copy(rt, None, x, y, dims, src, dst, *offsets)
    (name, count, _), args = rt.launches[0], rt.args[0]
    assert (name, count, args[0], args[-1]) == (kernel, n, ("int64", n), ("int", narrow))
