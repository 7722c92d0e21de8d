"""ORT's com.microsoft LLM ops on CUDA: GroupQueryAttention (native/cuda/attention.cu) and the
RMS normalisations SimplifiedLayerNormalization / SkipSimplifiedLayerNormalization (rows.cu).
Semantics and run-time checks are shared with the CPU kernels (kernels/cpu/contrib_attention.py)."""
import struct

import numpy as np

from ..cpu.contrib_attention import gqa_config_problem, gqa_layout
from ..registry import kernel
from .elementwise import GPU_FLOATS, SUFFIX

MAX_SHARED = 48 * 1024  # default dynamic shared memory per block


def _check_gqa(node, graph):
    kv = [graph.value(n).dtype for n in node.inputs[3:5] if n]
    if any(t != graph.value(node.inputs[0]).dtype for t in kv):
        return "KV cache of another type than the query"
    if graph.value(node.inputs[5]).dtype != np.int32:
        return "seqlens_k must be int32"
    return gqa_config_problem(node, graph)


@kernel("GroupQueryAttention", domain="com.microsoft", types=GPU_FLOATS, device="cuda", check=_check_gqa)
def group_query_attention(rt, stream, query, key=None, value=None, past_key=None, past_value=None, seqlens_k=None,
                          total_sequence_length=None, cos_cache=None, sin_cache=None, position_ids=None,
                          attention_bias=None, head_sink=None, k_scale=None, v_scale=None, q_norm_weight=None,
                          k_norm_weight=None, query_seqlens=None, *, num_heads, kv_num_heads, scale=0.0,
                          softcap=0.0, local_window_size=-1, do_rotary=0, rotary_interleaved=0, smooth_softmax=-1,
                          qk_output=0, causal=1, sliding_window_cache=0, kv_cache_bit_width=0, k_quant_type="NONE",
                          v_quant_type="NONE", qk_norm_epsilon=1e-6, q_norm_epsilon=1e-6, k_norm_epsilon=1e-6):
    b, s = query.shape[:2]
    if seqlens_k.shape != (b,):
        raise ValueError(f"seqlens_k of shape {seqlens_k.shape}; expected ({b},)")
    # seqlens_k's values are checked when known on the host; on the GPU the kernels clamp them
    h, first_prompt, present_len, _ = gqa_layout(
        query.shape, key is None, past_key.shape if past_key is not None else None, seqlens_k.host,
        rt.to_host(total_sequence_length, stream), num_heads, kv_num_heads, cos_cache.shape if do_rotary else None)
    if (present_len + h) * 4 > MAX_SHARED:
        raise ValueError(f"CUDA GroupQueryAttention handles up to {MAX_SHARED // 4 - h} cached tokens, got {present_len}")
    dtype = query.dtype
    q = rt.alloc((b, num_heads, s, h), dtype)
    pk = rt.alloc((b, kv_num_heads, present_len, h), dtype)
    pv = rt.alloc((b, kv_num_heads, present_len, h), dtype)
    out = rt.alloc((b, s, num_heads * h), dtype)
    sink = None
    if smooth_softmax == 1 or head_sink is not None:
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
    rt.launch(f"seamless_gqa_copy_past_{suffix}", pk.size, stream,
              ("ptr", past_key.ptr if past_key is not None else 0), ("ptr", past_value.ptr if past_value is not None else 0),
              ("ptr", pk.ptr), ("ptr", pv.ptr), ("ptr", seqlens_k.ptr), ("bytes", shape))
    n = b * s * (num_heads + 2 * kv_num_heads) * h
    rt.launch(f"seamless_gqa_prepare_{suffix}", n, stream, ("ptr", query.ptr),
              ("ptr", key.ptr if key is not None else 0), ("ptr", value.ptr if value is not None else 0),
              ("ptr", cos_cache.ptr if do_rotary else 0), ("ptr", sin_cache.ptr if do_rotary else 0),
              ("ptr", seqlens_k.ptr), ("ptr", q.ptr), ("ptr", pk.ptr), ("ptr", pv.ptr), ("bytes", shape))
    sm_scale = float(scale) if scale != 0.0 else 1.0 / float(np.sqrt(np.float32(h)))
    params = struct.pack("<ffiii", sm_scale, float(softcap), int(local_window_size), int(causal), int(sink is not None))
    rt.launch_rows(f"seamless_gqa_attend_{suffix}", b * num_heads * s, stream, ("ptr", q.ptr), ("ptr", pk.ptr),
                   ("ptr", pv.ptr), ("ptr", seqlens_k.ptr), ("ptr", sink.ptr if sink else 0),
                   ("ptr", out.ptr), ("bytes", shape), ("bytes", params), shared=(present_len + h) * 4)
    for t in [q] + ([sink] if sink else []):
        rt.free(t)  # stream-ordered: reused only by later work on this stream
    return out, pk, pv


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


@kernel("RotaryEmbedding", domain="com.microsoft", types=GPU_FLOATS, device="cuda", check=_check_rotary)
def rotary_embedding(rt, stream, x, position_ids, cos_cache, sin_cache, *, interleaved=0, num_heads=0,
                     rotary_embedding_dim=0, is_packed_batching=0, scale=1.0):
    """x (B, S, N*H) or (B, N, S, H); position_ids (1,) = the first token's position, or (B, S)."""
    b = x.shape[0]
    if len(x.shape) == 3:
        s = x.shape[1]
        h = x.shape[2] // num_heads if num_heads else (rotary_embedding_dim or 2 * cos_cache.shape[1])
        n = x.shape[2] // h
    else:
        n, s, h = x.shape[1:]
    rot_half = (rotary_embedding_dim or h) // 2
    if rot_half > cos_cache.shape[1] or 2 * rot_half > h:
        raise ValueError(f"RotaryEmbedding: rotary dimension {2 * rot_half} needs cos/sin caches of width "
                         f"{rot_half} (got {cos_cache.shape[1]}) and a head size of at least that (got {h})")
    first_only = position_ids.size == 1  # the first token's position; the others follow
    if not first_only and position_ids.shape != (b, s):
        raise ValueError(f"RotaryEmbedding: position_ids of shape {position_ids.shape}; expected (1,) or {(b, s)}")
    if position_ids.host is not None:  # checked when known on the host; on the GPU the kernel clamps
        pos = position_ids.host.reshape(-1)
        pos = pos[0] + np.arange(s) if first_only else pos
        if pos.size and (pos.min() < 0 or pos.max() >= cos_cache.shape[0]):
            raise ValueError(f"RotaryEmbedding: positions {pos.min()}..{pos.max()} outside the cos/sin caches' "
                             f"{cos_cache.shape[0]} rows")
    y = rt.alloc(x.shape, x.dtype)
    shape = struct.pack("<10i", b, s, n, h, rot_half, cos_cache.shape[1], int(bool(interleaved)), int(len(x.shape) == 4),
                        int(first_only), cos_cache.shape[0])
    rt.launch(f"seamless_rotary_{SUFFIX[x.dtype]}", y.size, stream, ("int64", y.size), ("ptr", x.ptr),
              ("ptr", position_ids.ptr), ("ptr", cos_cache.ptr), ("ptr", sin_cache.ptr), ("ptr", y.ptr), ("bytes", shape))
    return (y,)


def _skip_norm(rt, stream, x, skip, bias, scale, beta, epsilon, want_sum, simplified):
    cols = x.shape[-1]
    if any(v is not None and v.size != cols for v in (scale, bias, beta)) or (skip is not None and skip.shape != x.shape):
        raise ValueError("CUDA layer normalisation needs scale/beta/bias of the last axis' size and skip of x's shape")
    if cols * 4 > MAX_SHARED:
        raise ValueError(f"CUDA layer normalisation handles rows of up to {MAX_SHARED // 4} elements")
    y = rt.alloc(x.shape, x.dtype)
    total = rt.alloc(x.shape, x.dtype) if want_sum else None
    ptr = lambda v: ("ptr", v.ptr if v is not None else 0)
    rt.launch_rows(f"seamless_skip_norm_{SUFFIX[x.dtype]}", x.size // cols if cols else 0, stream, ptr(x), ptr(skip),
                   ptr(bias), ptr(scale), ptr(beta), ptr(y), ptr(total), ("int64", cols), ("float", float(epsilon)),
                   ("int", int(simplified)), shared=cols * 4)
    return y, total


def _last_axis_only(node, graph):
    shape = graph.value(node.inputs[0]).shape
    axis = node.attrs.get("axis", -1)
    if len(node.outputs) > 1 and any(node.outputs[1:]):
        return "inv_std_var output not produced on CUDA"
    return None if axis == -1 or (shape is not None and axis == len(shape) - 1) else "last axis only on CUDA"


@kernel("SimplifiedLayerNormalization", types=GPU_FLOATS, device="cuda", check=_last_axis_only)
def simplified_layer_norm(rt, stream, x, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    return (_skip_norm(rt, stream, x, None, None, scale, None, epsilon, False, True)[0],)


def _check_skip(node, graph):
    if len(node.outputs) > 1 and any(node.outputs[1:3]):
        return "mean / inv_std_var outputs not produced on CUDA"
    return None


@kernel("SkipSimplifiedLayerNormalization", domain="com.microsoft", types=GPU_FLOATS, device="cuda",
        check=_check_skip)
def skip_simplified_layer_norm(rt, stream, x, skip, gamma, bias=None, *, epsilon=1e-5, _num_outputs=1):
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
    return None


@kernel("MatMulNBits", domain="com.microsoft", types=GPU_FLOATS, device="cuda", check=_check_nbits)
def matmul_nbits(rt, stream, a, b, scales, zero_points=None, g_idx=None, bias=None, *, K, N, block_size, bits=4,
                 accuracy_level=0, weight_prepacked=0):
    m = a.size // K if K else 0
    y = rt.alloc(a.shape[:-1] + (N,), a.dtype)
    rt.launch_rows(f"seamless_matmul_nbits_{SUFFIX[a.dtype]}", m * N, stream, ("ptr", a.ptr), ("ptr", b.ptr),
                   ("ptr", scales.ptr), ("ptr", zero_points.ptr if zero_points is not None else 0),
                   ("ptr", bias.ptr if bias is not None else 0), ("ptr", y.ptr),
                   ("bytes", struct.pack("<5i", m, N, K, block_size, bits)))
    return (y,)


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
    width = data.shape[1] * 8 // bits
    y = rt.alloc(indices.shape + (width,), scales.dtype)
    rt.launch(f"seamless_gather_block_quantized_{SUFFIX[scales.dtype]}", y.size, stream, ("ptr", data.ptr),
              ("ptr", indices.ptr), ("ptr", scales.ptr), ("ptr", zero_points.ptr if zero_points is not None else 0),
              ("ptr", y.ptr), ("bytes", struct.pack("<3q2i", data.shape[0], width, indices.size, block_size, bits)))
    return (y,)
