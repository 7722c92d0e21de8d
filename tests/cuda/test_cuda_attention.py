"""ORT's LLM contrib ops on the CUDA EP (skipped without a GPU), against stock ORT's CPU EP."""
import numpy as np
import pytest
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

import onnxruntime_ep_seamless as seamless

from kernels.test_attention import (ATTENTION23_CASES, CASE_ID, GQA_SHAPES, ROTARY23_CASES, WINDOW_CASES, attention23,
                                    attention23_float16, gqa_model_feeds, rotary23_case,
                                    window_ragged_batch_and_too_small_a_capacity, window_steps_as_stock)
from kernels.test_normalization import data, model_of
from parity import assert_close, node_model, run_ours, stock_session
from test_cuda_ep import DEVICES, PROBLEM, cuda_session, in_bfloat16, run_on_cuda
from test_cuda_moe import decodes_as_stock_in_one_segment

pytestmark = pytest.mark.skipif(not DEVICES, reason=f"no NVIDIA GPU for the CUDA EP ({PROBLEM or 'none found'})")
TOL = {"rtol": 1e-4, "atol": 1e-5}  # float32 dot products in another summation order than ORT's CPU kernels


def check(model, feeds, **tol):
    ours = run_on_cuda(model, feeds)
    ref = stock_session(model).run(None, feeds)
    for i, (o, r) in enumerate(zip(ours, ref)):
        assert_close(o, r, name=f"output {i}", **(tol or TOL))


@pytest.mark.parametrize("shape", list(GQA_SHAPES))
@pytest.mark.parametrize("packed", [True, False])
def test_gqa_shapes(shape, packed):
    check(*gqa_model_feeds(*GQA_SHAPES[shape], packed=packed))


@pytest.mark.parametrize("attrs", [{"rotary_interleaved": 1}, {"local_window_size": 3}, {"softcap": 2.0},
                                   {"smooth_softmax": 1}, {"scale": 0.3}])
@pytest.mark.parametrize("shape", ["prompt", "decode_growing", "decode_shared_ragged", "subsequent_prompt"])
def test_gqa_attributes(attrs, shape):
    check(*gqa_model_feeds(*GQA_SHAPES[shape], **attrs))


@pytest.mark.parametrize("shape", ["prompt", "decode_growing"])
def test_gqa_partial_rotary_and_no_rotary(shape):
    check(*gqa_model_feeds(*GQA_SHAPES[shape], rot_dim=16, heads=(4, 2, 32)))
    check(*gqa_model_feeds(*GQA_SHAPES[shape], rotary=False))


def with_qk_norm(model, feeds, eps=1e-6):
    """The GQA case with q_norm_weight and k_norm_weight (initializers), as onnxruntime-genai's builder makes Qwen3's
    attention for CUDA, and the feeds of the same case without them: q and k normalised in float64 from the spec
    (each head's h values v / sqrt(mean(v^2) + eps) * w, before the rotary embedding), rounded to their type."""
    from onnx import helper, numpy_helper
    node = model.graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    nh, nkv = attrs["num_heads"], attrs["kv_num_heads"]
    packed = not node.input[1]
    q = feeds["query"]
    h = q.shape[2] // (nh + 2 * nkv if packed else nh)
    wq, wk = [(1 + 0.2 * np.random.default_rng(i).standard_normal(h)).astype(q.dtype) for i in (1, 2)]
    normed = model.__class__()
    normed.CopyFrom(model)
    node = normed.graph.node[0]
    node.input.extend([""] * (14 - len(node.input)) + ["q_norm_weight", "k_norm_weight"])
    node.attribute.append(helper.make_attribute("qk_norm_epsilon", eps))
    normed.graph.initializer.extend([numpy_helper.from_array(wq, "q_norm_weight"),
                                     numpy_helper.from_array(wk, "k_norm_weight")])

    def norm(x, w, heads, first, pitch):  # heads [first, first + heads) of each row of `pitch` heads
        v = x.reshape(x.shape[0], x.shape[1], pitch, h).astype(np.float64).copy()
        part = v[:, :, first:first + heads]
        v[:, :, first:first + heads] = part / np.sqrt((part ** 2).mean(-1, keepdims=True) + eps) * w.astype(np.float64)
        return v.reshape(x.shape).astype(x.dtype)
    plain = dict(feeds)
    if packed:
        plain["query"] = norm(norm(q, wq, nh, 0, nh + 2 * nkv), wk, nkv, nh, nh + 2 * nkv)
    else:
        plain["query"], plain["key"] = norm(q, wq, nh, 0, nh), norm(feeds["key"], wk, nkv, 0, nkv)
    return normed, plain


# GroupQueryAttention's q_norm_weight / k_norm_weight (Qwen3's per-head Q/K RMSNorm, which the builder's -e cuda fuses
# into the op; ORT's CPU kernel refuses them): ours on the GPU against stock's CPU EP without them on q and k normalised
# from the spec. float16: q and k rounded after the norm on both sides, from sums in another order (float32 against
# float64), and the attention's own float16 rounding (test_gqa_float16_prompt_in_tiles): 2e-3.
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("shape", ["prompt", "decode_growing", "decode_shared_ragged", "subsequent_prompt"])
def test_gqa_qk_norm(shape, packed, dtype):
    model, feeds = gqa_model_feeds(*GQA_SHAPES[shape], packed=packed, heads=(4, 2, 64))
    if dtype == np.float16:
        model, feeds = gqa_float16(model, feeds)
    normed, plain = with_qk_norm(model, feeds)
    ours = run_on_cuda(normed, feeds)
    ref = stock_session(model).run(None, plain)
    for i, (o, r) in enumerate(zip(ours, ref)):
        assert_close(o, r, name=f"output {i}", **(TOL if dtype == np.float32 else {"rtol": 2e-3, "atol": 2e-3}))


def test_gqa_qk_norm_weight_of_another_size_is_a_clear_error():
    from onnx import numpy_helper
    model, feeds = gqa_model_feeds(*GQA_SHAPES["decode_growing"], heads=(4, 2, 64))
    normed, _ = with_qk_norm(model, feeds)
    for init in normed.graph.initializer:
        if init.name.endswith("norm_weight"):
            init.CopyFrom(numpy_helper.from_array(np.ones(63, np.float32), init.name))
    with pytest.raises(InvalidArgument, match="q_norm_weight must hold head_size \\(64\\) values"):
        run_on_cuda(normed, feeds)


@pytest.mark.parametrize("shape", ["prompt", "subsequent_prompt"])
def test_gqa_prompt_element_by_element(shape, monkeypatch):
    # attention.cu prepare's general path (rows not in whole 16-byte groups): ORT's GQA allows none such, so forced
    from onnxruntime_ep_seamless.kernels.cuda import attention
    monkeypatch.setattr(attention, "_prepare_wide", lambda *args: False)
    check(*gqa_model_feeds(*GQA_SHAPES[shape]))
    check(*gqa_model_feeds(*GQA_SHAPES[shape], rot_dim=16, heads=(4, 2, 32), rotary_interleaved=1))


# rows of a multiple of 8 up to 8192 are normalised in registers, others in shared memory
# attention.cu's value sums: 16-byte loads in groups of head_size / 8 lanes where that divides a warp
# (16, 32, 64, 128), else a thread per channel (48; ORT's GQA takes multiples of 16 only)
@pytest.mark.parametrize("head_size", [48, 64, 128])
@pytest.mark.parametrize("shape", ["prompt", "decode_shared_ragged", "subsequent_prompt"])
def test_gqa_head_sizes(head_size, shape):
    check(*gqa_model_feeds(*GQA_SHAPES[shape], heads=(4, 2, head_size)))


# a decode step is one launch (attention.cu gqa_decode), split over keys from 256 rows at head size 64:
# ragged batch rows (one row's splits all past its length), a KV buffer longer than the context
@pytest.mark.parametrize("heads", [(14, 2, 64), (16, 2, 128), (8, 8, 32), (16, 1, 64)])
@pytest.mark.parametrize("b,past,seqlens,rotary", [(1, 200, [150], True), (3, 40, [39, 0, 20], True),
                                                   (2, 700, [699, 300], False)])
def test_gqa_decode_in_one_launch(heads, b, past, seqlens, rotary):
    check(*gqa_model_feeds(b, 1, past, seqlens, max(seqlens) + 1, heads=heads, rotary=rotary))


def test_gqa_decode_beyond_a_prompts_context_limit():
    check(*gqa_model_feeds(1, 1, 12000, [11990], 11991, rotary=False, heads=(14, 2, 64)))


# Long contexts: a block per KV head and split (attention.cu gqa_decode_grouped) once those blocks reach
# DECODE_GROUPED_BLOCKS, each query head of the group in turn over the rows kept in registers: ragged rows (one
# row's splits mostly past its length), head sizes 64 and 128, a local window, softcap, smooth softmax (its
# sink), float16 (the inputs rounded to float16, stock in float32 from them: the prompt tiles' tolerance), a group
# of 16 query heads (combined eight at a time, a warp each)
@pytest.mark.parametrize("heads,b,past,seqlens,attrs", [((14, 2, 64), 2, 9000, [8990, 4000], {}),
                                                        ((32, 2, 64), 2, 9000, [8999, 3000], {"smooth_softmax": 1}),
                                                        ((16, 2, 128), 2, 5000, [4999, 2500], {}),
                                                        ((8, 2, 64), 2, 9000, [8999, 8999], {"local_window_size": 700}),
                                                        ((8, 2, 64), 2, 9000, [8999, 100], {"softcap": 30.0}),
                                                        ((8, 2, 64), 2, 9000, [8999, 5000], {"smooth_softmax": 1})])
@pytest.mark.parametrize("float16", [False, True])
def test_gqa_decode_grouped_for_long_contexts(heads, b, past, seqlens, attrs, float16):
    model, feeds = gqa_model_feeds(b, 1, past, seqlens, max(seqlens) + 1, rotary=False, heads=heads, **attrs)
    if float16:
        check(*gqa_float16(model, feeds), rtol=2e-3, atol=2e-3)
    else:
        check(model, feeds)


def gqa_float16(model, feeds):
    """The float32 GQA case in float16: its float inputs, outputs, caches and feeds."""
    from onnx import numpy_helper
    for vi in list(model.graph.input) + list(model.graph.output):
        if vi.type.tensor_type.elem_type == 1:
            vi.type.tensor_type.elem_type = 10
    for init in model.graph.initializer:
        a = numpy_helper.to_array(init)
        if a.dtype == np.float32:
            init.CopyFrom(numpy_helper.from_array(a.astype(np.float16), init.name))
    return model, {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in feeds.items()}


# A float16 prompt of head size 64, 128 or 256 (Qwen3.5's full attention) attends in tiles of 64 queries on tensor
# cores (attention.cu attend_tiles): tiles and warps partial and whole, many tiles of keys (64 at head size 64, 32 at
# 128, 16 at 256),
# batches, a prompt after cached tokens, no rotary; 14 query heads on 2 KV heads. Stock computes in float32 from
# the float16 inputs and rounds once; ours sums in float32 too but rounds the softmax weights to float16 for
# their product with the values (as flash-attention kernels do: 2^-11 relative each): 2e-3.
@pytest.mark.parametrize("b,s,past,seqlens,total,heads,rotary", [(1, 40, 0, [39], 40, (14, 2, 64), True),
                                                                 (2, 70, 0, [69, 69], 70, (14, 2, 64), True),
                                                                 (1, 33, 0, [32], 33, (4, 2, 128), True),
                                                                 (1, 37, 24, [60], 61, (14, 2, 64), True),
                                                                 (1, 64, 0, [63], 64, (4, 1, 64), False),
                                                                 (1, 250, 0, [249], 250, (14, 2, 64), True),
                                                                 (1, 150, 90, [239], 240, (4, 2, 128), True),
                                                                 (2, 70, 0, [69, 69], 70, (4, 2, 256), True),
                                                                 (1, 37, 24, [60], 61, (8, 2, 256), False)])
def test_gqa_float16_prompt_in_tiles(b, s, past, seqlens, total, heads, rotary):
    check(*gqa_float16(*gqa_model_feeds(b, s, past, seqlens, total, heads=heads, rotary=rotary)), rtol=2e-3,
          atol=2e-3)


def test_gqa_float16_prompt_beyond_a_query_blocks_context_limit():
    # a KV buffer of 11800 tokens fails a block a query (below: more than 11712); tiles of queries have no limit
    check(*gqa_float16(*gqa_model_feeds(1, 2, 11800, [11712], 11713, rotary=False, heads=(4, 2, 64))), rtol=2e-3,
          atol=2e-3)


def test_gqa_prompt_context_beyond_shared_memory_is_a_clear_error():
    # a prompt's query row keeps its scores in shared memory (docs/cuda.md): 11712 cached tokens at head size 64
    # (11711 past + 2 new = the total of 11713 keys: a valid growing cache, as stock ORT demands)
    model, feeds = gqa_model_feeds(1, 2, 11711, [11712], 11713, rotary=False, heads=(4, 2, 64))
    with pytest.raises(Exception, match="handles up to 11712 cached tokens for 2 new tokens of head size 64, got 11713"):
        run_on_cuda(model, feeds)


# A window-sized KV cache (sliding_window_cache=1: Gemma 2/3's and gpt-oss's local layers) through steps of a decoder
# loop, the cache's capacity exceeded (attention.cu: a work buffer of the past's rows and the new ones, then the
# newest kept); float16 rounds each value once as stock does
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("capacity,window,rotary,steps", WINDOW_CASES)
def test_gqa_window_sized_cache(capacity, window, rotary, steps, dtype):
    tol = {"rtol": 1e-4, "atol": 1e-5} if dtype == np.float32 else {"rtol": 2e-3, "atol": 2e-3, "present_tol": (2e-3, 2e-3)}
    window_steps_as_stock(run_on_cuda, capacity, window, rotary, steps, dtype, **tol)


def test_gqa_window_sized_cache_ragged_batch_and_too_small_a_capacity():
    window_ragged_batch_and_too_small_a_capacity(run_on_cuda)


@pytest.mark.parametrize("family", ["gptoss", "gemma2", "gemma3"])
@pytest.mark.parametrize("precision", ["fp32", "int4"])
def test_builder_window_cache_decoder_decodes_as_one_captured_segment(family, precision, capfd):
    # 16 prompt tokens and 24 greedy ones through local layers' caches of 16 rows (onnxruntime-genai's allocation)
    decodes_as_stock_in_one_segment(family, precision, capfd, window=16)


@pytest.mark.parametrize("shape", [(2, 5, 64), (3, 896), (2, 3, 30), (2, 9000)])
def test_simplified_layer_normalization(shape):
    check(*model_of("SimplifiedLayerNormalization", [("x", data(*shape)), ("scale", data(shape[-1]))], 1,
                    {"epsilon": 1e-6}))


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("h", [64, 30])
def test_skip_simplified_layer_normalization(bias, h):
    arrays = [("x", data(2, 5, h)), ("skip", data(2, 5, h)), ("gamma", data(h))]
    if bias:
        arrays.append(("bias", data(h)))
    f32 = np.float32
    check(*model_of("SkipSimplifiedLayerNormalization", arrays, 4, {"epsilon": 1e-6}, domain="com.microsoft",
                    out_dtypes=[f32, None, None, f32]))  # y and the input+skip(+bias) sum
    check(*model_of("SkipSimplifiedLayerNormalization", arrays, 1, {"epsilon": 1e-6}, domain="com.microsoft"))


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("block_size", [16, 32, 128])
@pytest.mark.parametrize("m", [1, 7])
def test_matmul_nbits(bits, block_size, m):
    from kernels.test_quantization import matmul_nbits_case
    check(*matmul_nbits_case((m, 256), 256, 96, bits, block_size))


@pytest.mark.parametrize("bits", [4, 8])
def test_matmul_nbits_zero_points_bias_ragged_k(bits):
    from kernels.test_quantization import matmul_nbits_case
    check(*matmul_nbits_case((3, 200), 200, 40, bits, 32, zp_mode="uint8", bias=True))


@pytest.mark.parametrize("block_size", [32, 128])
@pytest.mark.parametrize("K", [2112, 1088])
def test_matmul_nbits_wide_path_over_several_warps(block_size, K):
    # 4 bits, K a multiple of 32: 32 k per lane, K spread over 4 (2112) or 2 (1088) warps a column, the
    # last pass partial (and with block_size 128, the last block of K is half full)
    from kernels.test_quantization import matmul_nbits_case
    check(*matmul_nbits_case((2, K), K, 24, 4, block_size, zp_mode="uint8", bias=True))


# float16 4-bit: a warp a column (split 4 at K 2112, 1 at 896), columns not a multiple of 8; from 16384 columns on
# tensor cores (quantization.cu's tiles path, constant weights laid out once): a last 128-k chunk partial or alone (224,
# 128), rows 1..3, block sizes 32 and 64; weights that are inputs, not constants (const_b=False: a warp a column)
@pytest.mark.parametrize("m,K,N,block_size,zp_mode,bias,const_b", [(1, 2112, 37, 128, "uint8", True, True),
                                                                   (1, 896, 1152, 32, "uint8", False, True),
                                                                   (3, 224, 16392, 32, None, False, True),
                                                                   (1, 128, 16392, 32, "uint8", True, True),
                                                                   (2, 1024, 16400, 64, "uint8", True, True),
                                                                   (1, 256, 16392, 32, "uint8", False, False)])
def test_matmul_nbits_float16(m, K, N, block_size, zp_mode, bias, const_b):
    from kernels.test_quantization import matmul_nbits_case
    # stock's output is the float32 sum rounded to float16 (checked against float64 here), ours a float32
    # sum in another order rounded once: at most one float16 step apart (9.8e-4 relative)
    check(*matmul_nbits_case((m, K), K, N, 4, block_size, zp_mode=zp_mode, bias=bias, const_b=const_b,
                             dtype=np.float16), rtol=1e-3, atol=1e-3)


# A prompt (more rows than quantization.py's GEMVs take: NBITS_GEMV_ROWS in 4 bits with K and the block size by 32,
# else SMALL_ROWS): the weights dequantized once, one GEMM. float32
# cases: 4-bit block 16, 8-bit with zero points, bias and a partial last block (K 200), 4-bit K 2112 (TOL: the
# same float32 products, summed in another order). float16: each weight rounded to float16 once (2^-11 relative,
# ~2e-3 absolute over 2112 terms), the product and the bias add each rounded (an ulp at 16..32 is 0.016): a
# numpy model of that path is 0.031 from stock at outputs up to 32, hence atol 4e-2.
@pytest.mark.parametrize("m,K,N,bits,block_size,zp_mode,bias,dtype", [(7, 256, 96, 4, 16, None, False, np.float32),
                                                                      (6, 200, 40, 8, 32, "uint8", True, np.float32),
                                                                      (17, 2112, 24, 4, 128, "uint8", True, np.float32),
                                                                      (20, 2112, 37, 4, 128, "uint8", True, np.float16),
                                                                      (17, 224, 16392, 4, 32, None, False, np.float16)])
def test_matmul_nbits_prompt(m, K, N, bits, block_size, zp_mode, bias, dtype):
    from kernels.test_quantization import matmul_nbits_case
    model, feeds = matmul_nbits_case((m, K), K, N, bits, block_size, zp_mode=zp_mode, bias=bias, dtype=dtype)
    check(model, feeds, **({"rtol": 1e-3, "atol": 4e-2} if dtype == np.float16 else TOL))


# A batch's decode step: 2 to 16 rows of 4-bit products, the weights read once for the rows. float16 on tensor cores
# (quantization.cu matmul_nbits4_mma_rows: 8 columns a warp, N = 37 and 16392 leave a last tile part-filled, K 2112
# spread over the warps of a tile), the one-row kernel's tolerance (test_matmul_nbits_float16: unrounded weights,
# float32 sums in another order). float32 and bfloat16 by the CUDA-core kernel, 8 rows a block (9, 16: two blocks
# of rows), the one-row kernel's arithmetic.
@pytest.mark.parametrize("m", [2, 5, 9, 16])
@pytest.mark.parametrize("K,N,block_size,zp_mode,bias,dtype", [(2112, 37, 128, "uint8", True, np.float16),
                                                               (896, 1152, 32, None, False, np.float16),
                                                               (224, 16392, 32, "uint8", True, np.float16),
                                                               (2112, 37, 128, "uint8", True, np.float32)])
def test_matmul_nbits_batch_rows(m, K, N, block_size, zp_mode, bias, dtype):
    from kernels.test_quantization import matmul_nbits_case
    model, feeds = matmul_nbits_case((m, K), K, N, 4, block_size, zp_mode=zp_mode, bias=bias, dtype=dtype)
    check(model, feeds, **({"rtol": 1e-3, "atol": 1e-3} if dtype == np.float16 else TOL))


def test_matmul_nbits_batch_rows_bfloat16():
    from kernels.test_quantization import matmul_nbits_case
    check_bfloat16(*matmul_nbits_case((9, 2112), 2112, 37, 4, 128, zp_mode="uint8", bias=True), rtol=2e-2, atol=2e-2)


# plan/fusion.py's MatMulNBitsSwiGLU (tests/kernels/test_fusion.py: this model becomes that one node)
@pytest.mark.parametrize("K,N,block_size,zero_points,dtype", [(2112, 40, 128, True, np.float32),
                                                              (200, 40, 16, True, np.float32),
                                                              (256, 40, 32, False, np.float16),
                                                              (256, 16392, 32, True, np.float16)])
@pytest.mark.parametrize("m", [3, 6, 17])  # 6: a batch's rows (K 200: a prompt's); 17: one GEMM on the dequantized
def test_swiglu_of_two_matmul_nbits(K, N, block_size, zero_points, dtype, m):  # gate | up
    from kernels.test_quantization import swiglu_nbits_model
    model, feeds = swiglu_nbits_model(K, N, block_size, zero_points, dtype, m=m)
    # float32: products of two K-term sums up to ~3000 summed in another order (stock ORT's CPU result is within
    # 4.4e-5 relative of a float64 reference here). float16: the reference rounds the gate, its sigmoid, the
    # SiLU and the product (8e-4 relative, 0.03 absolute from float64 at values up to 73); ours rounds once. A
    # prompt's GEMM rounds the gate and up products to float16 as the reference does, from weights rounded to
    # float16: where the two round a gate to neighbouring float16 values the output moves by |up| times that
    # ulp (up to ~34 x 0.0039 at gates of 4..8; seen: 0.068), hence atol 0.15 there.
    gemm = m > 16 or K % 32 or block_size % 32
    tol = {"rtol": 3e-4, "atol": 1e-3} if dtype == np.float32 else {"rtol": 5e-3, "atol": 0.15 if gemm else 5e-2}
    check(model, feeds, **tol)


# plan/fusion.py's MatMulSwiGLU: few rows in one pass of matmul.cu's Linear kernel, more by one GEMM
# by [gate | up], then silu(gate) * up in one pass
# 1 or 4 rows: tensor cores, 16 columns a block (N = 40: the last block's second 8 past N)
@pytest.mark.parametrize("m,N", [(1, 40), (4, 40), (5, 40), (5, 36)])  # 5 rows, N = 36: the SwiGLU a column a thread
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_swiglu_of_two_matmuls(dtype, m, N):
    from kernels.test_quantization import swiglu_nbits_model
    model, feeds = swiglu_nbits_model(96, N, 32, dtype=dtype, m=m, matmul=True)
    # float32: GEMMs summed in another order (values up to ~10); float16: the reference rounds the gate,
    # its sigmoid, the SiLU and the product, ours the GEMM's outputs and the result
    check(model, feeds, **({"rtol": 1e-4, "atol": 1e-4} if dtype == np.float32 else {"rtol": 4e-3, "atol": 1e-2}))


# matmul.cu linear_row: one float16 row of a product by a constant too long for tensor cores (K > TC_MAX_K), its
# weights staged, up to 5 passes over K, in straight-line code with the same sums in the same order as linear's loop
# over passes, which takes two rows: bitwise the two-row run's first row (and within rounding of float64). (K, N):
# Qwen2.5-0.5B's down projection (4 warps a column, 5 passes); a last pass part-filled; 5 passes of 8 warps a
# column; 6 (linear's stream: a control).
@pytest.mark.parametrize("K,N", [(4864, 896), (2112, 40), (10240, 24), (10496, 24)])
@pytest.mark.parametrize("product", ["matmul", "matmul_bias", "matmul_swiglu"])
def test_one_rows_product_is_the_row_loops(product, K, N):
    from onnx import helper, numpy_helper
    from kernels.test_quantization import swiglu_nbits_model
    rng = np.random.default_rng(K + N)
    if product == "matmul_swiglu":
        model, feeds = swiglu_nbits_model(K, N, 32, dtype=np.float16, m=1, matmul=True)
        g, u = (numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer)
        for v in [*model.graph.input, *model.graph.output, *model.graph.value_info]:
            v.type.tensor_type.shape.dim[0].dim_param = "m"  # one row or two
    else:
        w, b = (rng.standard_normal((K, N)) * 0.05).astype(np.float16), rng.standard_normal(N).astype(np.float16)
        bias = product == "matmul_bias"
        nodes = [helper.make_node("MatMul", ["A", "w"], ["P" if bias else "Y"])]
        nodes += [helper.make_node("Add", ["P", "b"], ["Y"])] if bias else []
        t = helper.np_dtype_to_tensor_dtype(np.dtype(np.float16))
        graph = helper.make_graph(nodes, "product", [helper.make_tensor_value_info("A", t, ["m", K])],
                                  [helper.make_tensor_value_info("Y", t, ["m", N])],
                                  initializer=[numpy_helper.from_array(w, "w")] + ([numpy_helper.from_array(b, "b")]
                                                                                 if bias else []))
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
        feeds = {"A": rng.standard_normal((1, K)).astype(np.float16)}
    a = feeds["A"]
    (one,) = run_on_cuda(model, feeds)
    (two,) = run_on_cuda(model, {"A": np.concatenate([a, a])})
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_array_equal(two[0], two[1])
    x = a.astype(np.float64)
    if product == "matmul_swiglu":
        gate = x @ g
        want = gate / (1 + np.exp(-gate)) * (x @ u)
    else:
        want = x @ w.astype(np.float64) + (b if bias else 0)
    # a float16 rounding of float32 sums
    np.testing.assert_allclose(one.astype(np.float64), want, rtol=2e-3, atol=2e-3 * np.abs(want).max())


# plan/fusion.py's LinearArgMax: a product by a constant and the ArgMax of its last axis (a greedy decoder's LM head
# and next token). Up to 4 rows matmul.cu's linear_tc picks each row's ArgMax as it stores the product (a 64-bit key
# a row raised by each block; a one-block kernel after it writes the indices and resets the keys): the index must be
# ArgMax's of the logits as stored, in its order: ties (a column repeated in another block, or all equal) to the lower
# index, the higher with select_last_index; NaN below every number (stock's loop keeps a value unless a strictly
# greater one comes), 0 where a row starts with NaN. Two runs a session: the second's picks must not
# see the first's keys. The last of K's 64 activations is 1, so the weights' last row acts as a bias (an Add after
# the MatMul would be ORT's Gemm before our EP sees it). N = 151936: an LM head's 9496 blocks; 1000: the last block
# part-filled; 5 rows: Linear, then the ArgMax kernel.
@pytest.mark.parametrize("N", [1000, 151936])
@pytest.mark.parametrize("m", [1, 4, 5])
@pytest.mark.parametrize("case", ["random", "tie", "equal", "nan", "nan_first"])
@pytest.mark.parametrize("last", [0, 1])
def test_a_products_argmax_is_picked_as_it_is_stored(N, m, case, last, monkeypatch):
    from onnx import helper, numpy_helper
    from onnxruntime_ep_seamless.runtime.cuda import CudaRuntime
    launched, launch_rows = [], CudaRuntime.launch_rows
    monkeypatch.setattr(CudaRuntime, "launch_rows", lambda self, name, *args, **kw:
                        (launched.append(name), launch_rows(self, name, *args, **kw))[1])
    rng, K = np.random.default_rng(N + m), 64
    w = (rng.standard_normal((K, N)) * 0.1).astype(np.float16)
    if case == "tie":  # column 7 again at N - 3, both far above the rest
        w[:, N - 3], w[-1, [7, N - 3]] = w[:, 7], 30
    elif case == "equal":
        w[:] = 0
    elif case == "nan":
        w[-1, [N // 2, 3, N - 2]] = np.nan
    elif case == "nan_first":
        w[-1, [0, N // 2]] = np.nan
    t = helper.np_dtype_to_tensor_dtype(np.dtype(np.float16))
    nodes = [helper.make_node("MatMul", ["A", "w"], ["Y"]),
             helper.make_node("ArgMax", ["Y"], ["I"], axis=-1, keepdims=1, select_last_index=last)]
    graph = helper.make_graph(nodes, "pick", [helper.make_tensor_value_info("A", t, ["m", K])],
                              [helper.make_tensor_value_info("Y", t, ["m", N]),
                               helper.make_tensor_value_info("I", helper.np_dtype_to_tensor_dtype(np.dtype(np.int64)),
                                                             ["m", 1])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    sess = cuda_session(model)
    assert not seamless.assert_ep_selected(sess, device="cuda").fallback_nodes
    want = {"tie": N - 3 if last else 7, "equal": N - 1 if last else 0, "nan_first": 0}.get(case)
    for _ in range(2):
        a = rng.standard_normal((m, K)).astype(np.float16)
        a[:, -1] = 1
        y, i = sess.run(None, {"A": a})
        best = np.nanargmax(y[:, ::-1], axis=1) if last else np.nanargmax(y, axis=1)  # NaN skipped
        np.testing.assert_array_equal(i[:, 0], np.where(np.isnan(y[:, 0]), 0, N - 1 - best if last else best))
        if want is not None:
            assert (i == want).all(), (i, want)
        ref = a.astype(np.float64) @ w.astype(np.float64)
        np.testing.assert_allclose(y.astype(np.float64), ref, rtol=2e-3, atol=2e-3 * np.nanmax(np.abs(ref)))
    assert ("seamless_linear_tc16_argmax_f16" in launched) == (m <= 4), launched


# plan/fusion.py's NormedProduct: a decode step's GEMV normalises its rows itself (MatMulNBits' 4-bit
# warp-a-column kernel; Linear's up to 4 rows; K <= 2048), else the norm kernel runs first (5 rows of a
# MatMul, K = 2112). Both run the norm kernel's arithmetic: bitwise the unfused plan's outputs (the norm's
# output made a graph output keeps the nodes apart), and stock's within test_swiglu_of_two_matmul_nbits'
# tolerances (float16: the products' sums in another order, rounded once; SwiGLU's reference rounds more).
@pytest.mark.parametrize("norm", ["skip", "simple", "rms"])
@pytest.mark.parametrize("product", ["nbits", "nbits_swiglu", "matmul", "matmul_swiglu"])
@pytest.mark.parametrize("dtype,m,K", [(np.float16, 1, 896), (np.float32, 2, 64), (np.float16, 5, 64),
                                       (np.float16, 1, 2112)])
def test_rms_norm_in_the_product(product, norm, dtype, m, K):
    import copy
    from onnx import helper
    from kernels.test_quantization import normed_product_model
    model, feeds = normed_product_model(product, norm, K=K, N=40, m=m, dtype=dtype)
    ours = run_on_cuda(model, feeds)
    apart = copy.deepcopy(model)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    apart.graph.output.append(helper.make_tensor_value_info("A", elem, None))
    for i, (fused, unfused) in enumerate(zip(ours, run_on_cuda(apart, feeds))):
        np.testing.assert_array_equal(fused, unfused, err_msg=f"output {i}")
    for i, (o, r) in enumerate(zip(ours, stock_session(model).run(None, feeds))):
        assert_close(o, r, name=f"output {i}", **({"rtol": 3e-4, "atol": 1e-3} if dtype == np.float32 else
                                                  {"rtol": 5e-3, "atol": 5e-2}))


@pytest.mark.parametrize("bits,zp", [(4, False), (4, True), (8, True)])
def test_gather_block_quantized(bits, zp):
    from kernels.test_quantization import gbq_case
    check(*gbq_case(50, 64, bits, 32, zp, np.array([[0, 49], [-1, 7]], np.int64)))


# --- the Gelus: tanh and erf from CUDA's libdevice, not MLAS's approximations: a few float32 ulps
ACT_TOL = {"rtol": 1e-5, "atol": 1e-6}


@pytest.mark.parametrize("bias", [False, True])
def test_fast_gelu(bias):
    arrays = [("x", data(2, 7, 64, scale=3.0))] + ([("bias", data(64))] if bias else [])
    check(*model_of("FastGelu", arrays, 1, domain="com.microsoft"), **ACT_TOL)


@pytest.mark.parametrize("alpha", [None, 1.0, 1.702])
def test_quick_gelu(alpha):
    check(*model_of("QuickGelu", [("x", data(3, 100, scale=4.0))], 1, {} if alpha is None else {"alpha": alpha},
                    domain="com.microsoft"), **ACT_TOL)


def test_ms_gelu():
    check(*model_of("Gelu", [("x", data(2, 5, 96, scale=3.0))], 1, domain="com.microsoft"), **ACT_TOL)


def test_bias_gelu():
    check(*model_of("BiasGelu", [("a", data(2, 5, 96, scale=3.0)), ("b", data(96))], 1, domain="com.microsoft"),
          **ACT_TOL)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_20(approximate):
    check(*model_of("Gelu", [("x", data(4, 33, scale=3.0))], 1, {"approximate": approximate}, opset=20), **ACT_TOL)


@pytest.mark.parametrize("op", ["FastGelu", "QuickGelu"])
def test_gelu_float16(op):
    x = data(4, 64, scale=3.0).astype(np.float16)
    # computed in float32 and rounded once on both sides: one float16 ulp
    check(*model_of(op, [("x", x)], 1, domain="com.microsoft", out_dtypes=[np.float16]), rtol=1e-3, atol=1e-3)


def test_fast_gelu_bias_of_the_wrong_length_is_stocks_error():
    model, feeds = model_of("FastGelu", [("x", data(2, 8)), ("bias", data(3))], 1, domain="com.microsoft")
    with pytest.raises(InvalidArgument, match="Input 1 dimension 0 should have same length as the last dimension"):
        run_on_cuda(model, feeds)


@pytest.mark.parametrize("beta,bias", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("h", [48, 20])
def test_skip_layer_normalization(beta, bias, dtype, h):
    arrays = [("x", data(2, 4, h)), ("skip", data(2, 4, h)), ("gamma", data(h)), ("beta", data(h) if beta else None),
              ("bias", data(h) if bias else None)]
    arrays = [(n, None if a is None else a.astype(dtype)) for n, a in arrays]
    model, feeds = model_of("SkipLayerNormalization", arrays, 4, {"epsilon": 1e-5}, domain="com.microsoft",
                            out_dtypes=[dtype, None, None, dtype])
    # float16: float32 statistics on both sides, then one rounding of values up to ~6: a float16 ulp
    check(model, feeds, **(TOL if dtype == np.float32 else {"rtol": 1e-3, "atol": 4e-3}))


# --- RotaryEmbedding: two products and a sum per element, the same on both sides
@pytest.mark.parametrize("layout", ["3d", "4d"])
@pytest.mark.parametrize("positions", ["offset", "per_token"])
@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding(layout, positions, interleaved):
    from kernels.test_attention import ms_rotary_case
    check(*ms_rotary_case(layout, positions, interleaved), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding_partial(dtype, interleaved):
    from kernels.test_attention import ms_rotary_partial_case
    # float16: float32 arithmetic and one rounding on both sides
    check(*ms_rotary_partial_case(interleaved, dtype),
          **({"rtol": 1e-6, "atol": 1e-6} if dtype == np.float32 else {"rtol": 1e-3, "atol": 1e-3}))


def test_rotary_embedding_position_outside_the_cache():
    """Positions known on the host are checked before any launch; positions that live on the GPU (a feed) are read
    there without waiting for the host, clamped to the cache, and reported: the run fails with stock's status."""
    import onnxruntime as ort
    from kernels.test_attention import build, rope_caches
    cos, sin = rope_caches(8, 16)
    inputs = [("x", data(1, 2, 16)), ("pos", np.array([7], np.int64)), ("cos", cos), ("sin", sin)]
    model, feeds = build("RotaryEmbedding", inputs, 1, {}, domain="com.microsoft", const=("pos", "cos", "sin"))
    with pytest.raises(Exception, match=r"positions 7..8 outside the cos/sin caches' 8 rows"):
        run_on_cuda(model, feeds)
    model, feeds = build("RotaryEmbedding", inputs, 1, {}, domain="com.microsoft", const=("cos", "sin"))
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument,
                       match=r"RotaryEmbedding.*position_ids value 8 is out of range \[0, 8\).*found on the GPU"):
        run_on_cuda(model, feeds)


@pytest.mark.parametrize("case", ROTARY23_CASES, ids=CASE_ID)
def test_rotary_embedding_23(case):
    check(*rotary23_case(**case), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case", ATTENTION23_CASES, ids=CASE_ID)
def test_attention_23(case):
    check(*attention23(**case))


@pytest.mark.parametrize("three_d", [False, True])
def test_attention_23_float16(three_d):
    check(*attention23_float16(three_d), rtol=2e-3, atol=2e-3)  # float32 inside on both sides, rounded once


@pytest.mark.parametrize("shape,axis", [((2, 5, 64), -1), ((2, 3, 4, 8), -2)])
def test_rms_normalization_23(shape, axis):
    scale = data(*shape[axis:])
    check(*model_of("RMSNormalization", [("x", data(*shape)), ("scale", scale)], 1, {"axis": axis, "epsilon": 1e-5},
                    opset=23))


# --- bfloat16: stock ORT CPU has no bfloat16 kernels for these ops. The model is run in bfloat16 on our
# EP (float inputs cast to bfloat16 on the GPU, outputs cast back) and compared with stock's float32
# model on the same bfloat16-rounded inputs and weights.
def as_bfloat16(model, feeds):
    """(the model in bfloat16 with float32 ends, the float32 reference model with its weights rounded to
    bfloat16, feeds rounded to bfloat16)."""
    import ml_dtypes
    from onnx import ModelProto, numpy_helper
    rounded = lambda a: a.astype(ml_dtypes.bfloat16).astype(np.float32) if a.dtype == np.float32 else a
    ref = ModelProto()
    ref.CopyFrom(model)
    for init in ref.graph.initializer:
        init.CopyFrom(numpy_helper.from_array(rounded(numpy_helper.to_array(init)), init.name))
    return in_bfloat16(model), ref, {k: rounded(v) for k, v in feeds.items()}


def check_bfloat16(model, feeds, rtol, atol):
    import ml_dtypes
    ours_model, ref_model, rounded = as_bfloat16(model, feeds)
    ours = run_on_cuda(ours_model, rounded)
    ref = stock_session(ref_model).run(None, rounded)
    for i, (o, r) in enumerate(zip(ours, ref)):
        assert_close(o, r.astype(ml_dtypes.bfloat16).astype(np.float32), name=f"output {i}", rtol=rtol, atol=atol)


# bfloat16 keeps 8 bits: one rounding is 2^-8 = 0.4 % relative; attention rounds the rotated keys and the
# cached values once more before the products (the reference keeps them in float32): 2 % relative/absolute.
@pytest.mark.parametrize("shape", ["prompt", "decode_growing", "decode_shared_ragged"])
def test_gqa_bfloat16(shape):
    check_bfloat16(*gqa_model_feeds(*GQA_SHAPES[shape]), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("head_size", [64, 256])
def test_gqa_bfloat16_prompt_in_tiles(head_size):
    check_bfloat16(*gqa_model_feeds(2, 45, 0, [44, 44], 45, heads=(4, 2, head_size)), rtol=2e-2, atol=2e-2)


def test_matmul_nbits_bfloat16():
    from kernels.test_quantization import matmul_nbits_case
    # the products of bfloat16 activations and dequantized weights sum in float32, rounded once
    check_bfloat16(*matmul_nbits_case((7, 64), 64, 24, 4, 32), rtol=1e-2, atol=1e-2)


def test_skip_simplified_layer_norm_and_rotary_bfloat16():
    from kernels.test_attention import ms_rotary_case
    arrays = [("x", data(2, 5, 64)), ("skip", data(2, 5, 64)), ("gamma", data(64))]
    check_bfloat16(*model_of("SkipSimplifiedLayerNormalization", arrays, 1, {"epsilon": 1e-6}, domain="com.microsoft"),
                   rtol=1e-2, atol=1e-2)  # float32 statistics, one rounding of the output
    check_bfloat16(*ms_rotary_case("3d", "per_token", 0), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("rule,per_key_decay,past", [("gated_delta", False, True), ("gated_delta", True, False),
                                                     ("linear", False, False), ("delta", False, True),
                                                     ("gated", True, True)])
def test_linear_attention(rule, per_key_decay, past):
    # opset 27, newer than stock ORT: against our CPU EP (the spec's token-by-token recurrence in float32);
    # float32 sums of 8 terms in another order
    rng = np.random.default_rng(17)
    b, t, q_heads, kv_heads, d_k, d_v = 2, 5, 4, 2, 8, 6
    f32 = np.float32
    inputs = [(rng.standard_normal((b, t, heads * d)) * 0.5).astype(f32)
              for heads, d in ((q_heads, d_k), (kv_heads, d_k), (kv_heads, d_v))]
    inputs.append(rng.standard_normal((b, kv_heads, d_k, d_v)).astype(f32) if past else None)
    inputs.append(-rng.uniform(0, 0.5, (b, t, kv_heads * (d_k if per_key_decay else 1))).astype(f32)
                  if "gated" in rule else None)
    inputs.append(rng.uniform(0, 1, (b, t, kv_heads)).astype(f32) if "delta" in rule else None)
    model, feeds = node_model("LinearAttention", inputs, {"kv_num_heads": kv_heads, "q_num_heads": q_heads,
                                                          "update_rule": rule}, 27, [f32, f32])
    try:
        ref = run_ours(model, feeds)
    except Exception as e:  # an onnxruntime older than opset 27 refuses the model
        if "opset" not in str(e).lower() and "LinearAttention" not in str(e):
            raise
        pytest.skip(f"this onnxruntime does not take opset 27: {str(e)[:80]}")
    for i, (o, r) in enumerate(zip(run_on_cuda(model, feeds), ref)):
        assert_close(o, r, 1e-5, 1e-5, f"output {i}")
