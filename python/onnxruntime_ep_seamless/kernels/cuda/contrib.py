"""The LLM ops on CUDA: com.microsoft GroupQueryAttention and RotaryEmbedding (native/cuda/attention.cu),
ONNX RotaryEmbedding-23, the skip/RMS normalisations (rows.cu), MatMulNBits (and the SwiGLU of two, fused),
GatherBlockQuantized (quant.cu).
Semantics and run-time checks are shared with the CPU kernels (kernels/cpu/contrib_attention.py)."""
import math
import struct
import threading

import numpy as np

from ...graph.ir import Node
from .. import checks
from ..checks import InvalidArgument
from ..cpu.contrib_attention import gqa_config_problem, gqa_layout
from ..cpu.contrib_quantization import validate_nbits_weights
from ..registry import FUSED_DOMAIN, NORMED_PRODUCTS, kernel, lookup
from .elementwise import ADD, GPU_FLOATS, SUFFIX, binary
from .matmul import SMALL_ROWS, _after_norm, _product, column_split, linear, matmul_swiglu, swiglu_of_product
from .rows import norm_check

MAX_SHARED = 48 * 1024  # default dynamic shared memory per block
ATTEND_THREADS = 256    # runtime/cuda.py launch_rows
DECODE_THREADS = 256    # native/cuda/attention.cu gqa_decode: a present row to each head_size / 8 of them
DECODE_HEAD_SIZES = (64, 128)  # gqa_decode compiled for these (16-bit types): an int4 layer 17.6 -> 16.9 us (H200)
ATTEND_TILE = 64        # native/cuda/attention.cu attend_tiles: query tokens a block (a warp per 16)


def _prepare_wide(head_size, rot_half, tensors) -> bool:
    """attention.cu prepare takes eight elements a thread where every row is whole 16-byte groups."""
    return head_size % 8 == 0 and rot_half % 8 == 0 and all(t.ptr % 16 == 0 for t in tensors if t is not None)


def _decode_passes(s, h, present_len) -> int:
    """Rows a lane group of gqa_decode (a decode step in one launch) takes: 4 where that is one block, else 8:
    half the blocks (after 4000 tokens a step's run call 5-10 % shorter on the H200: docs/benchmarks/gpu.md); 0
    when gqa_decode does not take this shape (a prompt, a head size whose eighths do not divide a warp)."""
    if s != 1 or h % 8 or 32 % (h // 8):
        return 0
    return 8 if present_len > _decode_rows(4, h) else 4


def _decode_rows(passes, h) -> int:
    """Present rows one gqa_decode block takes: `passes` a lane group of head_size / 8 threads."""
    return passes * DECODE_THREADS // (h // 8)


def _check_gqa(node, graph):
    kv = [graph.value(n).dtype for n in node.inputs[3:5] if n]
    if any(t != graph.value(node.inputs[0]).dtype for t in kv):
        return "KV cache of another type than the query"
    if graph.value(node.inputs[5]).dtype != np.int32:
        return "seqlens_k must be int32"
    return gqa_config_problem(node, graph)


@kernel("GroupQueryAttention", domain="com.microsoft", types=GPU_FLOATS, device="cuda", check=_check_gqa,
        host_inputs=(6,), capture="device-indexed")
def group_query_attention(rt, stream, query, key=None, value=None, past_key=None, past_value=None, seqlens_k=None,
                          total_sequence_length=None, cos_cache=None, sin_cache=None, position_ids=None,
                          attention_bias=None, head_sink=None, k_scale=None, v_scale=None, q_norm_weight=None,
                          k_norm_weight=None, query_seqlens=None, *, num_heads, kv_num_heads, scale=0.0,
                          softcap=0.0, local_window_size=-1, do_rotary=0, rotary_interleaved=0, smooth_softmax=-1,
                          qk_output=0, causal=1, sliding_window_cache=0, kv_cache_bit_width=0, k_quant_type="NONE",
                          v_quant_type="NONE", qk_norm_epsilon=1e-6, q_norm_epsilon=1e-6, k_norm_epsilon=1e-6,
                          _readers=(), _output_buffer=None):
    b, s = query.shape[:2]
    _gqa_shapes(query, key, value, past_key, past_value, seqlens_k, total_sequence_length,
                (cos_cache, sin_cache) if do_rotary else None, num_heads, kv_num_heads)
    # seqlens_k's values are checked when known on the host; on the GPU the kernels clamp them
    h, first_prompt, present_len, _ = gqa_layout(
        query.shape, key is None, past_key.shape if past_key is not None else None, seqlens_k.host,
        rt.to_host(total_sequence_length, stream), num_heads, kv_num_heads, cos_cache.shape if do_rotary else None)
    rows = (query, key, value, past_key, past_value, cos_cache, sin_cache)  # read 16 bytes at a time by gqa_decode
    passes = all(t.ptr % 16 == 0 for t in rows if t is not None) and _decode_passes(s, h, present_len)
    smooth = smooth_softmax == 1 or head_sink is not None
    # a prompt in tiles of queries (attention.cu attend_tiles), else a block a query with its scores in shared memory
    tiles = not passes and SUFFIX[query.dtype] in ("f16", "bf16") and h in (64, 128) and softcap == 0.0 and \
        local_window_size <= 0 and not smooth
    shared = (present_len + h + max(ATTEND_THREADS, 8 * h)) * 4  # native/cuda/attention.cu attend
    if not passes and not tiles and shared > MAX_SHARED:
        raise ValueError(f"CUDA GroupQueryAttention handles up to {MAX_SHARED // 4 - h - max(ATTEND_THREADS, 8 * h)} "
                         f"cached tokens for {s} new tokens of head size {h}, got {present_len} (a decode step of one "
                         f"token has no such limit where the head size is 8, 16, 32, 64, 128 or 256, nor a float16 or "
                         f"bfloat16 prompt of head size 64 or 128 without softcap, local window or sink)")
    dtype = query.dtype
    kv_shape = (b, kv_num_heads, present_len, h)
    # the present KV straight into ORT's outputs where the caller takes them (no copy after the run)
    pk, pv = (rt.output(_output_buffer, i, kv_shape, dtype) for i in (1, 2))
    # ... and where those are the past's own buffers (bound as one by the caller), a decode step writes only its new row
    in_place = past_key is not None and past_key.shape == kv_shape and (pk.ptr, pv.ptr) == (past_key.ptr, past_value.ptr)
    out = rt.alloc((b, s, num_heads * h), dtype)
    sink = None
    if smooth:
        sink = rt.alloc((num_heads,), np.float32)
        if head_sink is None:
            rt.zero(sink, stream)
        else:
            rt.launch(f"seamless_cast_{SUFFIX[head_sink.dtype]}_f32", num_heads, stream, ("int64", num_heads),
                      ("ptr", head_sink.ptr), ("ptr", sink.ptr))
    half = cos_cache.shape[1] if do_rotary else 0
    shape = struct.pack("<13i", b, s, num_heads, kv_num_heads, h, present_len, half, int(bool(do_rotary)),
                        int(bool(rotary_interleaved)), int(key is None), int(first_prompt),
                        cos_cache.shape[0] if do_rotary else 0, past_key.shape[2] if past_key is not None else 0)
    suffix = SUFFIX[dtype]
    sm_scale = float(scale) if scale != 0.0 else 1.0 / float(np.sqrt(np.float32(h)))
    # the past read before waiting for the kernel before where no launch of this run writes it (DeviceTensor.settled)
    early = past_key is not None and past_key.settled and past_value is not None and past_value.settled
    # a decode step lets the next kernel launch once its blocks have their inputs where that kernel is a quantized
    # projection (its few weights need little time to stream into L2 ahead), else at once (attention.cu decode)
    late_launch = bool(_readers) and all(op == "MatMulNBits" for op in _readers)
    params = struct.pack("<ffiiiiii", sm_scale, float(softcap), int(local_window_size), int(causal),
                         int(sink is not None), int(early), int(late_launch), int(in_place))
    qkv = [("ptr", query.ptr), ("ptr", key.ptr if key is not None else 0), ("ptr", value.ptr if value is not None else 0),
           ("ptr", cos_cache.ptr if do_rotary else 0), ("ptr", sin_cache.ptr if do_rotary else 0), ("ptr", seqlens_k.ptr)]
    past = [("ptr", past_key.ptr if past_key is not None else 0), ("ptr", past_value.ptr if past_value is not None else 0)]
    scratch = [sink] if sink else []
    if passes:  # one launch, split over keys where the context is long
        splits = -(-present_len // _decode_rows(passes, h))
        partial = rt.alloc((b * num_heads * splits * (h + 2),), np.float32)
        scratch.append(partial)
        known = f"_h{h}" if h in DECODE_HEAD_SIZES and suffix in ("f16", "bf16") else ""  # compiled for that size
        rt.launch_rows(f"seamless_gqa_decode_p{passes}{known}_{suffix}", (splits, b * num_heads), stream, *past, *qkv,
                       ("ptr", sink.ptr if sink else 0), ("ptr", pk.ptr), ("ptr", pv.ptr), ("ptr", out.ptr),
                       ("ptr", partial.ptr), ("ptr", rt.counters(b * num_heads, stream).ptr), ("bytes", shape),
                       ("bytes", params), threads=DECODE_THREADS)
    else:  # the present buffers and q, then a block per query row or per tile of them
        q = rt.alloc((b, num_heads, s, h), dtype)
        scratch.append(q)
        n = pk.size + b * s * (num_heads + 2 * kv_num_heads) * h  # the present buffers, then the new tokens
        wide = _prepare_wide(h, half, (*rows, q, pk, pv))
        rt.launch(f"seamless_gqa_prepare_{suffix}", n // 8 if wide else n, stream, *past, *qkv, ("ptr", q.ptr),
                  ("ptr", pk.ptr), ("ptr", pv.ptr), ("bytes", shape), ("int", int(wide)))
        if tiles:
            rt.launch_rows(f"seamless_gqa_attend_tiles_h{h}_{suffix}", b * num_heads * -(-s // ATTEND_TILE), stream,
                           ("ptr", q.ptr), ("ptr", pk.ptr), ("ptr", pv.ptr), ("ptr", seqlens_k.ptr), ("ptr", out.ptr),
                           ("bytes", shape), ("bytes", params), threads=ATTEND_TILE * 2)  # a warp per 16 queries
        else:
            rt.launch_rows(f"seamless_gqa_attend_{suffix}", b * num_heads * s, stream, ("ptr", q.ptr), ("ptr", pk.ptr),
                           ("ptr", pv.ptr), ("ptr", seqlens_k.ptr), ("ptr", sink.ptr if sink else 0),
                           ("ptr", out.ptr), ("bytes", shape), ("bytes", params), shared=shared)
    for t in scratch:
        rt.free(t)  # stream-ordered: reused only by later work on this stream
    return out, pk, pv


def _gqa_shapes(query, key, value, past_key, past_value, seqlens_k, total_sequence_length, caches, num_heads,
                kv_num_heads):
    """The shapes the kernels address the tensors by, checked as ORT does: query (B, S, N * H) or packed
    (B, S, (N + 2 Nkv) * H), key and value (B, S, Nkv * H), the past (B, Nkv, P, H) both, seqlens_k (B,), one
    total length, cos and sin caches of one shape."""
    if len(query.shape) != 3:
        raise InvalidArgument(f"Input 'query' is expected to have 3 dimensions, got {len(query.shape)}")
    b, s, hidden = query.shape
    heads = num_heads + (2 * kv_num_heads if key is None else 0)
    if hidden % heads:
        raise ValueError(f"query hidden size {hidden} is not a multiple of the {heads} heads it holds")
    h = hidden // heads
    if key is not None:
        for name, t in (("key", key), ("value", value)):
            if t is None or t.shape != (b, s, kv_num_heads * h):
                raise InvalidArgument(f"Input '{name}' of shape {None if t is None else t.shape} must be {(b, s)} by "
                                      f"kv_num_heads * head_size ({kv_num_heads} * {h})")
    if past_key is not None:
        if past_key.shape[:2] != (b, kv_num_heads) or len(past_key.shape) != 4 or past_key.shape[3] != h:
            raise InvalidArgument(f"Input 'past_key' of shape {past_key.shape} must be (batch_size {b}, "
                                  f"kv_num_heads {kv_num_heads}, past length, head_size {h})")
        if past_value.shape != past_key.shape:
            raise InvalidArgument(f"Inputs 'past_key' {past_key.shape} and 'past_value' {past_value.shape} must "
                                  "have the same shape")
    if seqlens_k.shape != (b,):
        raise InvalidArgument(f"seqlens_k must be shape (batch_size {b}), got {seqlens_k.shape}")
    if total_sequence_length.size != 1:
        raise InvalidArgument(f"total_sequence_length must be one value, got shape {total_sequence_length.shape}")
    if caches is not None and (len(caches[0].shape) != 2 or caches[1].shape != caches[0].shape):
        raise InvalidArgument(f"cos_cache and sin_cache must be 2-D of the same shape. Got cos_cache shape "
                              f"{caches[0].shape} and sin_cache shape {caches[1].shape}.")


def _check_rotary(node, graph):
    a = node.attrs
    if a.get("is_packed_batching", 0):
        return "is_packed_batching=1 (ragged batches) not supported"
    if a.get("scale", 1.0) != 1.0:
        return f"scale={a['scale']} not supported (1.0 only)"
    if any(graph.value(name).dtype != graph.value(node.inputs[0]).dtype for name in node.inputs[2:4]):
        return "cos/sin caches of another type than the input"
    if graph.value(node.inputs[1]).dtype != np.int64:
        return "position_ids must be int64"
    return None


@kernel("RotaryEmbedding", domain="com.microsoft", types=GPU_FLOATS, device="cuda", check=_check_rotary,
        capture="device-indexed")
def rotary_embedding(rt, stream, x, position_ids, cos_cache, sin_cache, *, interleaved=0, num_heads=0,
                     rotary_embedding_dim=0, is_packed_batching=0, scale=1.0):
    """x (B, S, N*H) or (B, N, S, H); position_ids (1,) = the first token's position, or (B, S)."""
    if len(x.shape) not in (3, 4) or len(cos_cache.shape) != 2:
        raise InvalidArgument(f"RotaryEmbedding: input of shape {x.shape} (3-D or 4-D expected) and cos_cache of "
                              f"shape {cos_cache.shape} (2-D expected)")
    b = x.shape[0]
    if len(x.shape) == 3:
        s = x.shape[1]
        h = x.shape[2] // num_heads if num_heads else (rotary_embedding_dim or 2 * cos_cache.shape[1])
        n = x.shape[2] // h if h else 0
        if n * h != x.shape[2]:  # the kernel walks the tokens by heads of h
            raise InvalidArgument(f"RotaryEmbedding: hidden size {x.shape[2]} is not a whole number of heads of "
                                  f"size {h}")
    else:
        n, s, h = x.shape[1:]
    rot_half = (rotary_embedding_dim or h) // 2
    if rot_half > cos_cache.shape[1] or 2 * rot_half > h:
        raise ValueError(f"RotaryEmbedding: rotary dimension {2 * rot_half} needs cos/sin caches of width "
                         f"{rot_half} (got {cos_cache.shape[1]}) and a head size of at least that (got {h})")
    return (_rotate(rt, stream, x, position_ids, cos_cache, sin_cache, b, s, n, h, rot_half, interleaved),)


def _rotate(rt, stream, x, position_ids, cos_cache, sin_cache, b, s, n, h, rot_half, interleaved):
    """x (B, S, N*H) or (B, N, S, H) with rotary embedding; position_ids (1,) (the first token's
    position), (B, S), or None (the caches have a row per token)."""
    if sin_cache.shape != cos_cache.shape:
        raise InvalidArgument(f"Inputs 'cos_cache' {cos_cache.shape} and 'sin_cache' {sin_cache.shape} are expected "
                              "to have the same shape")
    first_only = position_ids is not None and position_ids.size == 1  # the others follow
    if position_ids is not None and not first_only and position_ids.shape != (b, s):
        raise InvalidArgument(f"RotaryEmbedding: position_ids of shape {position_ids.shape}; expected (1,) or "
                              f"{(b, s)}")
    rows = cos_cache.shape[0] if position_ids is not None else b * s
    if position_ids is None and cos_cache.size != b * s * cos_cache.shape[-1]:
        raise ValueError(f"RotaryEmbedding without position_ids needs caches of shape {(b, s, rot_half)}, "
                         f"got {cos_cache.shape}")
    if position_ids is not None and position_ids.host is not None:  # checked when known on the host; else clamped
        pos = position_ids.host.reshape(-1)
        pos = pos[0] + np.arange(s) if first_only else pos
        bad = checks.first_outside(pos, 0, rows)
        if bad:
            raise InvalidArgument(f"position_ids value {bad[1]} at index {bad[0]} is out of range [0, {rows}): "
                                  f"positions {pos.min()}..{pos.max()} outside the cos/sin caches' {rows} rows")
    y = rt.alloc(x.shape, x.dtype)
    shape = struct.pack("<10i", b, s, n, h, rot_half, cos_cache.shape[-1], int(bool(interleaved)), int(len(x.shape) == 4),
                        int(first_only), rows)
    rt.launch(f"seamless_rotary_{SUFFIX[x.dtype]}", y.size, stream, ("int64", y.size), ("ptr", x.ptr),
              ("ptr", position_ids.ptr if position_ids is not None else 0), ("ptr", cos_cache.ptr),
              ("ptr", sin_cache.ptr), ("ptr", y.ptr), ("bytes", shape))
    return y


def _check_rotary_23(node, graph):
    if any(graph.value(name).dtype != graph.value(node.inputs[0]).dtype for name in node.inputs[1:3]):
        return "cos/sin caches of another type than the input"
    if len(node.inputs) > 3 and node.inputs[3] and graph.value(node.inputs[3]).dtype != np.int64:
        return "position_ids must be int64"
    return None


@kernel("RotaryEmbedding", since=23, types=GPU_FLOATS, device="cuda", check=_check_rotary_23,
        capture="device-indexed")
def rotary_embedding_23(rt, stream, x, cos_cache, sin_cache, position_ids=None, *, interleaved=0, num_heads=0,
                        rotary_embedding_dim=0):
    """ONNX RotaryEmbedding: x (B, N, S, H) or (B, S, N*H) with num_heads; caches (P, rot/2) with
    position_ids (B, S), else (B, S, rot/2)."""
    if len(x.shape) == 4:
        b, n, s, h = x.shape
    elif num_heads and len(x.shape) == 3:
        b, s = x.shape[:2]
        n, h = num_heads, x.shape[2] // num_heads
        if n * h != x.shape[2]:
            raise ValueError(f"RotaryEmbedding: hidden size {x.shape[2]} is not a multiple of num_heads {n}")
    else:
        raise ValueError(f"RotaryEmbedding: a 4-D input, or a 3-D one with num_heads, expected; got shape {x.shape}")
    rot_half = (rotary_embedding_dim or h) // 2
    if cos_cache.shape[-1] != rot_half or 2 * rot_half > h:
        raise ValueError(f"cos/sin last dimension {cos_cache.shape[-1]} != rotary_embedding_dim/2 = {rot_half}, or "
                         f"the rotary dimension is above the head size {h}")
    return (_rotate(rt, stream, x, position_ids, cos_cache, sin_cache, b, s, n, h, rot_half, interleaved),)


def _skip_norm(rt, stream, x, skip, bias, scale, beta, epsilon, want_sum, simplified, axis=-1):
    axis = checks.axis(axis, len(x.shape))
    cols = math.prod(x.shape[axis:])  # normalised over the axes from `axis` on
    if any(v is not None and v.size != cols for v in (scale, bias, beta)) or (skip is not None and skip.shape != x.shape):
        raise InvalidArgument(f"layer normalisation: scale/beta/bias must have shape {x.shape[axis:]} and skip x's "
                              f"shape {x.shape}; got {[None if v is None else v.shape for v in (scale, beta, bias, skip)]}")
    y = rt.alloc(x.shape, x.dtype)
    total = rt.alloc(x.shape, x.dtype) if want_sum else None
    # rows.cu: eight values a thread in registers where the row and every pointer allow it, else the
    # row in shared memory
    tensors = [t for t in (x, skip, bias, scale, beta, y, total) if t is not None]
    in_registers = cols % 8 == 0 and cols <= 8 * 1024 and all(t.ptr % 16 == 0 for t in tensors)
    if not in_registers and cols * 4 > MAX_SHARED:
        raise ValueError(f"CUDA layer normalisation handles rows of up to {MAX_SHARED // 4} elements "
                         f"(or {8 * 1024} in multiples of 8)")
    launch = dict(threads=-(-cols // 256) * 32) if in_registers else dict(shared=cols * 4)
    ptr = lambda v: ("ptr", v.ptr if v is not None else 0)
    rt.launch_rows(f"seamless_skip_norm{'8' if in_registers else ''}_{SUFFIX[x.dtype]}", x.size // cols if cols else 0,
                   stream, ptr(x), ptr(skip), ptr(bias), ptr(scale), ptr(beta), ptr(y), ptr(total), ("int64", cols),
                   ("float", float(epsilon)), ("int", int(simplified)), **launch)
    return y, total


_check_rms = norm_check("inv_std_var output not produced on CUDA")


@kernel("SimplifiedLayerNormalization", types=GPU_FLOATS, device="cuda", check=_check_rms)
def simplified_layer_norm(rt, stream, x, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    return (_skip_norm(rt, stream, x, None, None, scale, None, epsilon, False, True, axis)[0],)


@kernel("RMSNormalization", since=23, types=GPU_FLOATS, device="cuda", check=_check_rms)
def rms_normalization(rt, stream, x, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    return (_skip_norm(rt, stream, x, None, None, scale, None, epsilon, False, True, axis)[0],)


def _check_skip(node, graph):
    if len(node.outputs) > 1 and any(node.outputs[1:3]):
        return "mean / inv_std_var outputs not produced on CUDA"
    return None


@kernel("SkipSimplifiedLayerNormalization", domain="com.microsoft", types=GPU_FLOATS, device="cuda",
        check=_check_skip)
def skip_simplified_layer_norm(rt, stream, x, skip, gamma, bias=None, *, epsilon=1e-12, _num_outputs=1):
    y, total = _skip_norm(rt, stream, x, skip, bias, gamma, None, epsilon, _num_outputs >= 4, True)
    return (y, None, None, total) if total is not None else (y,)


@kernel("SkipLayerNormalization", domain="com.microsoft", types=GPU_FLOATS, device="cuda", check=_check_skip)
def skip_layer_norm(rt, stream, x, skip, gamma, beta=None, bias=None, *, epsilon=1e-12, _num_outputs=1):
    y, total = _skip_norm(rt, stream, x, skip, bias, gamma, beta, epsilon, _num_outputs >= 4, False)
    return (y, None, None, total) if total is not None else (y,)


def _check_nbits(node, graph):
    a = node.attrs
    if a.get("bits", 4) not in (4, 8):
        return f"bits={a.get('bits')}: 4 and 8 only"
    if len(node.inputs) > 3 and node.inputs[3] and graph.value(node.inputs[3]).dtype != np.uint8:
        return "zero points of a float type: uint8 only on CUDA"
    if len(node.inputs) > 4 and node.inputs[4]:
        return "g_idx not supported"
    if a.get("weight_prepacked", 0):
        return "prepacked weights not supported"
    block = a.get("block_size", 0)
    if block < 16 or block & (block - 1):
        return f"block_size={block}: a power of 2 of at least 16 (the spec's)"
    return None


@kernel("MatMulNBits", domain="com.microsoft", types=GPU_FLOATS, device="cuda", check=_check_nbits,
        validate=validate_nbits_weights)
def matmul_nbits(rt, stream, a, b, scales, zero_points=None, g_idx=None, bias=None, *, K, N, block_size, bits=4,
                 accuracy_level=0, weight_prepacked=0, _norm=None, _output_buffer=None):
    return (_nbits(rt, stream, "", a, [b, scales, zero_points, bias], K, N, block_size, bits, _norm, _output_buffer),)


def _check_swiglu(node, graph):
    """The gate's MatMulNBits must pass MatMulNBits' check (plan/fusion.py makes both alike)."""
    return _check_nbits(Node(node.name, "MatMulNBits", "com.microsoft", 1, node.inputs[:4], node.outputs,
                             node.attrs), graph)


@kernel("MatMulNBitsSwiGLU", domain=FUSED_DOMAIN, types=GPU_FLOATS, device="cuda", check=_check_swiglu)
def matmul_nbits_swiglu(rt, stream, a, gate, gate_scales, gate_zero_points, up, up_scales, up_zero_points, *, K, N,
                        block_size, bits=4, accuracy_level=0, _norm=None):
    """silu(MatMulNBits(a, gate...)) * MatMulNBits(a, up...) in one pass (plan/fusion.py)."""
    return (_nbits(rt, stream, "_swiglu", a, [gate, gate_scales, gate_zero_points, up, up_scales, up_zero_points],
                   K, N, block_size, bits, _norm),)


class RowNorm:
    """An RMS normalisation still to be applied to a product's activations, RMSNorm(x + skip + bias) * gamma
    (plan/fusion.py's NormedProduct): by the product's GEMV kernel itself where it fits (common.cuh's
    RowNorm: the same arithmetic as the norm kernel), else by the norm kernel first (`apply`). `sum`: x + skip
    + bias, made when wanted."""

    def __init__(self, x, skip, bias, gamma, epsilon, want_sum):
        self.x, self.skip, self.bias, self.gamma, self.epsilon, self.want_sum = x, skip, bias, gamma, epsilon, want_sum
        self.sum = None

    def fits(self, k, blocks) -> bool:
        """Whether a GEMV of `blocks` blocks can normalise rows of k activations itself (one 8-value group a
        thread; 16-byte loads). Each block normalises its rows again: beyond NORM_MAX_BLOCKS that costs more
        than the norm kernel (the float16 LM head's 18992 blocks: 76 -> 116 us on the H200)."""
        tensors = [t for t in (self.x, self.skip, self.bias, self.gamma) if t is not None]
        return (k % 8 == 0 and 0 < k <= NORM_MAX_K and blocks <= NORM_MAX_BLOCKS and self.x.shape[-1] == k
                and self.gamma.size == k and (self.bias is None or self.bias.size == k)
                and (self.skip is None or self.skip.shape == self.x.shape) and all(t.ptr % 16 == 0 for t in tensors))

    def argument(self, rt):
        """The kernels' RowNorm argument (allocating the sum)."""
        if self.want_sum:
            self.sum = rt.alloc(self.x.shape, self.x.dtype)
        ptr = lambda t: t.ptr if t is not None else 0
        return ("bytes", struct.pack("<5Qf4x", self.x.ptr, ptr(self.skip), ptr(self.bias), self.gamma.ptr,
                                     ptr(self.sum), float(self.epsilon)))

    def apply(self, rt, stream):
        """The normalised activations, by the norm kernel (the caller frees them)."""
        y, self.sum = _skip_norm(rt, stream, self.x, self.skip, self.bias, self.gamma, None, self.epsilon,
                                 self.want_sum, True)
        return y


NORM_MAX_K = 8 * 256  # common.cuh
NORM_MAX_BLOCKS = 4096


def _check_normed(node, graph):
    """The product's own check (plan/fusion.py's NormedProduct keeps its inputs after the norm's four)."""
    attrs = {k: v for k, v in node.attrs.items() if k not in ("product", "epsilon")}
    inner = Node(node.name, node.attrs.get("product", ""), NORMED_PRODUCTS.get(node.attrs.get("product"), "?"), 1,
                 node.inputs[:1] + node.inputs[4:], node.outputs[:1], attrs)
    kdef, reason = lookup(inner, graph, "cuda", host_rule=False)
    return None if kdef is not None else reason


@kernel("NormedProduct", domain=FUSED_DOMAIN, types=GPU_FLOATS, device="cuda", check=_check_normed)
def normed_product(rt, stream, x, skip, gamma, norm_bias, *weights, product, epsilon=1e-5, K=0, N=0, block_size=0,
                   bits=4, accuracy_level=0, weight_prepacked=0, _num_outputs=1, _output_buffer=None):
    """A product (registry.NORMED_PRODUCTS) of RMSNorm(x + skip + norm_bias) * gamma, and x + skip +
    norm_bias as a second output when the node has one: plan/fusion.py's fusion of a
    (Skip)SimplifiedLayerNormalization into the product reading it, so that a decode step's GEMV normalises its
    rows itself (one launch, not two)."""
    norm = RowNorm(x, skip, norm_bias, gamma, epsilon, _num_outputs > 1)
    nbits = dict(K=K, N=N, block_size=block_size, bits=bits, accuracy_level=accuracy_level)
    run = {"MatMulNBits": lambda: matmul_nbits(rt, stream, x, *weights, **nbits, weight_prepacked=weight_prepacked,
                                               _norm=norm, _output_buffer=_output_buffer),
           "MatMulNBitsSwiGLU": lambda: matmul_nbits_swiglu(rt, stream, x, *weights, **nbits, _norm=norm),
           "Linear": lambda: linear(rt, stream, x, *weights, _norm=norm, _output_buffer=_output_buffer),
           "MatMulSwiGLU": lambda: matmul_swiglu(rt, stream, x, *weights, _norm=norm)}[product]
    (y,) = run()
    return (y, norm.sum) if norm.want_sum else (y,)


# Columns from which float16 4-bit products take the tensor-core kernel: measured on the H200 with its first
# version (docs/benchmarks/gpu.md), it ran a 151936-column LM head in 63 us against 90, but the decoder's
# 896..9728-column projections 1.6-2x slower than a warp a column (fewer warps resident: 110 registers).
MMA_COLUMNS = 16384
TILE_WARPS, TILE_SLOT, TILE_CHUNK = 4, 4864, 608  # quant.cu
TILE_BLOCKS = 528  # the tensor-core kernel's grid: its warps stride over the tiles (the H200: 4 blocks an SM)


def nbits4_tiles(weights, K, N, block_size) -> np.ndarray:
    """quant.cu's tensor-core layout of 4-bit weights (one matrix: packed, scales, zero points; or a SwiGLU's
    two): per tile of 8 columns, per chunk of 128 k, per matrix TILE_CHUNK bytes: lane l's 16 bytes (column l / 4,
    k group l % 4), then lane l < 16's two scales (columns 2 (l % 4) + 0 / 1, group l / 4), then lane l's zero
    point (8 without them). Columns past N and k past K are zeros (scale 0: they add nothing)."""
    tiles, chunks, blocks = -(-N // 8), -(-K // 128), -(-K // block_size)
    groups = np.arange(chunks * 4) * 32  # the first k of each group of 32
    in_k = groups < K
    block_of = np.minimum(groups, K - 1) // block_size
    mats = []
    for packed, scales, zero_points in (weights[i:i + 3] for i in range(0, len(weights), 3)):
        w = np.zeros((tiles * 8, chunks * 64), np.uint8)
        w[:N, :K // 2] = packed.reshape(N, -1)[:, :K // 2]
        w = w.reshape(tiles, 8, chunks, 4, 16).transpose(0, 2, 1, 3, 4).reshape(tiles, chunks, 512)
        sc = np.zeros((tiles * 8, chunks * 4), np.float16)
        sc[:N] = np.where(in_k, scales.reshape(N, blocks)[:, block_of], 0)
        sc = sc.reshape(tiles, 4, 2, chunks, 4).transpose(0, 3, 4, 1, 2).reshape(tiles, chunks, 32).view(np.uint8)
        z = np.full((tiles * 8, chunks * 4), 8, np.uint8)
        if zero_points is not None:
            zp = zero_points.reshape(N, -1)
            z[:N] = (zp[:, block_of // 2] >> ((block_of % 2) * 4).astype(np.uint8)) & 15
        z = z.reshape(tiles, 8, chunks, 4).transpose(0, 2, 1, 3).reshape(tiles, chunks, 32)
        mats.append(np.concatenate([w, sc, z], axis=2))
    return np.ascontiguousarray(np.stack(mats, axis=2)).reshape(-1)


_TILES_LOCK = threading.Lock()


def _tiles(rt, weights, K, N, block_size):
    """The weights in nbits4_tiles' layout on the GPU, made once (on the host, from the constants' host
    copies) and kept with the first of them; None where they are not all constants, or while a CUDA graph is
    captured (an upload waits for the GPU)."""
    packed = weights[::3]
    key = ("nbits4_tiles", K, N, block_size) + tuple(t.ptr for t in packed[1:])
    cached = (packed[0].derived or {}).get(key)
    if cached is not None:
        return cached
    if any(t is not None and t.host is None for t in weights) or rt.lib.seamless_capturing():
        return None
    with _TILES_LOCK:  # two threads' first runs: one layout
        cached = (packed[0].derived or {}).get(key)
        if cached is None:
            cached = rt.upload(nbits4_tiles([None if t is None else t.host for t in weights], K, N, block_size))
            packed[0].derived = {**(packed[0].derived or {}), key: cached}
    return cached


def _nbits(rt, stream, variant, a, weights, K, N, block_size, bits, norm=None, output_buffer=None):
    """native/cuda/quant.cu's MatMulNBits kernels, 256-thread blocks, a block row per row of activations:
    4-bit (K, the block size and the addresses allowing) a warp per column, `split` warps sharing a long K,
    or in float16 with columns enough and constant weights on sm_90, 8 columns a warp on tensor cores
    (TILE_BLOCKS blocks of TILE_WARPS warps, every row at once, the weights in nbits4_tiles' layout); else
    the generic path. More than SMALL_ROWS rows (a prompt): one GEMM on the dequantized weights (_nbits_gemm).
    `norm` (a RowNorm) is applied to a first: by the warp-a-column kernel itself where it fits, else before.
    output_buffer: the kernel's _output_buffer, where its GEMVs may write (rt.output)."""
    _nbits_shapes(a, weights, K, N, block_size, bits)
    m = a.size // K if K else 0
    packed = [weights[0]] + ([weights[3]] if variant else [])
    prompt = m > SMALL_ROWS  # the GEMVs would read the weights once a row: one GEMM instead
    fast = bits == 4 and K % 32 == 0 and block_size % 32 == 0 and all(t.ptr % 16 == 0 for t in [a] + packed)
    matrices = weights if variant else weights[:3]
    mma = (fast and a.dtype == np.float16 and N >= MMA_COLUMNS and rt.hopper and not prompt
           and all(t is None or t.host is not None for t in matrices))  # constants: laid out once for it
    split = column_split(N, -(-K // 1024), 2048) if fast else 1  # 1024 k: a warp's one pass
    columns = 8 // split  # quant.cu NBITS_COLUMNS warps a block
    if norm is not None and (prompt or mma or not fast or not norm.fits(K, m * -(-N // columns))):
        return _after_norm(lambda rt, stream, normed: _nbits(rt, stream, variant, normed, weights, K, N, block_size,
                                                             bits, output_buffer=output_buffer), rt, stream, norm)
    if prompt:
        return _nbits_gemm(rt, stream, variant, a, weights, K, N, block_size, bits)
    y = rt.output(output_buffer, 0, a.shape[:-1] + (N,), a.dtype)
    tiles = _tiles(rt, matrices, K, N, block_size) if mma else None
    if tiles is not None:
        bias = [] if variant else [("ptr", weights[3].ptr if weights[3] is not None else 0)]
        rt.launch_rows("seamless_matmul_nbits4_tiles" + variant + "_f16", min(-(-N // (8 * TILE_WARPS)), TILE_BLOCKS),
                       stream, ("ptr", a.ptr), ("ptr", tiles.ptr), *bias, ("ptr", y.ptr),
                       ("bytes", struct.pack("<4i", m, N, K, -(-K // 128))), threads=TILE_WARPS * 32,
                       shared=2 * TILE_WARPS * TILE_SLOT)
        return y
    tensors = [("ptr", a.ptr), *[("ptr", t.ptr if t is not None else 0) for t in weights], ("ptr", y.ptr)]
    name = ("seamless_matmul_nbits4_x32" if fast else "seamless_matmul_nbits") + variant + ("_norm" if norm else "")
    shape = ("bytes", struct.pack("<6i", m, N, K, block_size, bits, split))
    if norm:  # the activations are the norm's (its x is in its argument)
        rt.launch_rows(name + "_" + SUFFIX[a.dtype], m * -(-N // columns), stream, *tensors[1:], shape,
                       norm.argument(rt), shared=K * a.dtype.itemsize)
    else:
        rt.launch_rows(name + "_" + SUFFIX[a.dtype], m * -(-N // columns), stream, *tensors, shape)
    return y


def _nbits_shapes(a, weights, K, N, block_size, bits):
    """a's rows of K and each matrix's packed weights, scales and zero points of the sizes K, N, block_size and
    bits make (the kernels address them by those), as ORT checks them."""
    if not a.shape or a.shape[-1] != K:
        raise ValueError(f"MatMul dimension mismatch: A {a.shape}, K={K}")
    blocks = -(-K // block_size)
    sizes = {"B": N * blocks * block_size * bits // 8, "scales": N * blocks, "zero_points": N * -(-blocks * bits // 8),
             "bias": N}
    names = ("B", "scales", "zero_points", "bias") if len(weights) == 4 else ("B", "scales", "zero_points") * 2
    for name, t in zip(names, weights):
        if t is not None and t.size != sizes[name]:
            raise ValueError(f"MatMulNBits: {name} of shape {t.shape} does not match the attribute-derived size "
                             f"{sizes[name]} (N={N}, K={K}, bits={bits}, block_size={block_size})")


def _nbits_gemm(rt, stream, variant, a, weights, K, N, block_size, bits):
    """A prompt's MatMulNBits (or the SwiGLU of two): the weights dequantized into one (N, or 2N: gate then up,
    K) matrix of a's type by quant.cu, one cuBLASLt GEMM, then the SwiGLU or the bias. Each weight is rounded
    once to a's type (as ORT's CUDA EP does for prompts); the matrix is scratch, freed stream-ordered."""
    mats = 2 if variant else 1
    w = rt.alloc((mats * N, K), a.dtype)
    shape = ("bytes", struct.pack("<6i", 0, N, K, block_size, bits, 1))
    for i in range(mats):
        packed, scales, zero_points = weights[3 * i:3 * i + 3]
        rt.launch(f"seamless_dequantize_nbits_{SUFFIX[a.dtype]}", N * -(-K // 8), stream, ("ptr", packed.ptr),
                  ("ptr", scales.ptr), ("ptr", zero_points.ptr if zero_points is not None else 0),
                  ("ptr", w.ptr + i * N * K * a.dtype.itemsize), shape)
    m = a.size // K
    product = rt.alloc(a.shape[:-1] + (mats * N,), a.dtype)
    _product(rt, stream, a, w, product, m, mats * N, K, trans_b=True)
    rt.free(w)  # stream-ordered
    if variant:
        y = rt.alloc(a.shape[:-1] + (N,), a.dtype)
        swiglu_of_product(rt, stream, product, y)
    elif weights[3] is not None:  # the bias
        y = binary(rt, stream, ADD, product, weights[3])
    else:
        return product
    rt.free(product)  # stream-ordered
    return y


def _check_gather_bq(node, graph):
    data, a = graph.value(node.inputs[0]), node.attrs
    if data.dtype != np.uint8 or data.shape is None or len(data.shape) != 2:
        return "2-D uint8 data only on CUDA"
    if a.get("bits", 4) not in (4, 8) or a.get("gather_axis", 0) not in (0, -2) or a.get("quantize_axis", 1) not in (1, -1):
        return "bits 4/8, gather_axis 0 and quantize_axis 1 only on CUDA"
    if graph.value(node.inputs[2]).dtype not in GPU_FLOATS:
        return "float16/float32 scales only on CUDA"
    if len(node.inputs) > 3 and node.inputs[3] and graph.value(node.inputs[3]).dtype != np.uint8:
        return "uint8 zero points only on CUDA"
    if graph.value(node.inputs[1]).dtype != np.int64:
        return "int64 indices only on CUDA"
    return None


@kernel("GatherBlockQuantized", domain="com.microsoft", types=frozenset([np.dtype(np.uint8)]), device="cuda",
        check=_check_gather_bq)
def gather_block_quantized(rt, stream, data, indices, scales, zero_points=None, *, bits=4, block_size=128,
                           quantize_axis=1, gather_axis=0):
    """An index out of range gives a row of zeros (quant.cu), as stock ORT answers too."""
    width = data.shape[1] * 8 // bits
    blocks = -(-width // block_size)
    if scales.shape != (data.shape[0], blocks) or (zero_points is not None and
                                                  zero_points.shape != (data.shape[0], -(-blocks * bits // 8))):
        raise ValueError(f"GatherBlockQuantized: data shape {data.shape} and scales shape {scales.shape} (zero points "
                         f"{None if zero_points is None else zero_points.shape}) do not match: ({data.shape[0]}, "
                         f"{blocks}) scales for blocks of {block_size} expected")
    y = rt.alloc(indices.shape + (width,), scales.dtype)
    rt.launch(f"seamless_gather_block_quantized_{SUFFIX[scales.dtype]}", y.size, stream, ("ptr", data.ptr),
              ("ptr", indices.ptr), ("ptr", scales.ptr), ("ptr", zero_points.ptr if zero_points is not None else 0),
              ("ptr", y.ptr), ("bytes", struct.pack("<3q2i", data.shape[0], width, indices.size, block_size, bits)))
    return (y,)
