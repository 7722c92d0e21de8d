"""Fused ops of ORT's transformer optimizer (com.microsoft EmbedLayerNormalization and Attention) on CUDA,
composed of our kernels: Gather, broadcast arithmetic, the LayerNormalization row kernel, a cuBLASLt GEMM and
the ONNX Attention composition (attention.py, which also has MultiHeadAttention). float16 computes in float32
and rounds each output once, ORT's float16 QKV projection included; masks as in the CPU kernels
(kernels/cpu/bert.py, attention.py: masked keys get mask_filter_value, not -inf)."""
import numpy as np

from ...runtime.cuda import DeviceTensor
from ..cpu.bert import FLOATS, check_embed, check_ms_attention, embed_shapes, ms_attention_shapes
from ..registry import kernel
from .attention import attention
from .elementwise import (ADD, COMPARE, LOGIC, Scratch, binary, cast_to, check_ints, compare, device_scalar, logic,
                          where)
from .normalization import layer_norm
from .reduction import reduce
from .shape import gather, permuted

F32, F16, I32, I64 = (np.dtype(t) for t in (np.float32, np.float16, np.int32, np.int64))
EQUAL, LESS, GREATER, GREATER_OR_EQUAL = (COMPARE[op][0] for op in ("Equal", "Less", "Greater", "GreaterOrEqual"))
SUM = 0  # ReduceOp


@kernel("EmbedLayerNormalization", domain="com.microsoft", types=FLOATS, type_input=2, device="cuda",
        check=check_embed)
def embed_layer_normalization(rt, stream, input_ids, segment_ids, word_embedding, position_embedding,
                              segment_embedding=None, gamma=None, beta=None, mask=None, position_ids=None, *,
                              epsilon=1e-12, mask_index_type=1, _num_outputs=2, _gpu_check=None):
    """LayerNorm(word[ids] + position[position_ids or 0..S-1] + segment[segment_ids]); mask_index (B,) int32
    counts mask == 1 per row (zeros without a mask); embedding_sum is the sum before normalising.
    Out-of-range ids read zero rows and are reported (checked on the GPU before the lookups)."""
    b, s = input_ids.shape
    dtype = word_embedding.dtype
    embed_shapes(input_ids, segment_ids, word_embedding, position_embedding, segment_embedding, gamma, beta, mask,
                  position_ids)
    sc = Scratch(rt, input_ids, segment_ids, word_embedding, position_embedding, segment_embedding, gamma, beta, mask,
                 position_ids)

    def rows(table, ids, what):  # table[ids] in float32
        check_ints(rt, stream, ids, 0, table.shape[0] - 1, _gpu_check,
                   f"input index out of range: {what} {{value}} outside [0, {table.shape[0]})")
        return sc(cast_to(rt, stream, sc(gather(rt, stream, table, sc(cast_to(rt, stream, ids, I64)), axis=0)[0]), F32))

    if position_ids is None:
        positions = sc(rt.device(DeviceTensor.on_host(np.arange(s, dtype=np.int64)), stream))
    else:
        positions = DeviceTensor(position_ids.ptr, (position_ids.size // s, s), position_ids.dtype)
    words = rows(word_embedding, input_ids, "input_ids")
    emb = sc(binary(rt, stream, ADD, words, rows(position_embedding, positions, "position_ids")))
    if segment_ids is not None and segment_embedding is not None:
        emb = sc(binary(rt, stream, ADD, emb, rows(segment_embedding, segment_ids, "segment_ids")))
    scale, shift = (sc(cast_to(rt, stream, t, F32)) if t is not None else None for t in (gamma, beta))
    (y,) = layer_norm(rt, stream, emb, scale, shift, epsilon=epsilon)
    results = [cast_to(rt, stream, sc(y), dtype)]
    if mask is not None:
        ones = sc(cast_to(rt, stream, sc(compare(rt, stream, EQUAL, mask, sc(device_scalar(rt, stream, 1, mask.dtype)))),
                          I32))
        results.append(reduce(rt, stream, SUM, DeviceTensor(ones.ptr, (b, mask.size // b), I32), [1], 0))
    else:
        count = rt.alloc((b,), I32)
        rt.zero(count, stream)
        results.append(count)
    if _num_outputs > 2:
        results.append(cast_to(rt, stream, emb, dtype))
    return sc.done(*results[:max(_num_outputs, 1)])


def _heads(rt, stream, qkv, b, s, width, offset, n, h):
    """Columns [offset, offset + n * h) of the (B*S, width) projections as (B, N, S, h)."""
    y = rt.alloc((b, n, s, h), qkv.dtype)
    rt.strided_copy(stream, qkv, y, (b, n, s, h), (s * width, h, width, 1), (n * s * h, s * h, h, 1), offset, 0)
    return y


def _mask_add(rt, stream, sc, mask_index, b, s, t, past, unidirectional, attention_bias, fill):
    """The float32 additive mask of the scores (broadcast against (B, N, S, T)), or None."""
    zero, filled = sc(device_scalar(rt, stream, 0.0)), sc(device_scalar(rt, stream, fill))
    add = None
    if mask_index is not None:
        m = mask_index
        if len(m.shape) == 1:  # (B,) end positions, or (2B,) end then start positions
            keys = sc(rt.device(DeviceTensor.on_host(np.arange(t, dtype=np.int32).reshape(1, t)), stream))
            masked = sc(compare(rt, stream, GREATER_OR_EQUAL, keys, DeviceTensor(m.ptr, (b, 1), m.dtype)))
            if m.shape[0] == 2 * b:
                start = DeviceTensor(m.ptr + b * m.dtype.itemsize, (b, 1), m.dtype)
                masked = sc(logic(rt, stream, LOGIC["Or"], masked, sc(compare(rt, stream, LESS, keys, start)))[0])
            add = sc(where(rt, stream, masked, filled, zero)[0])
            add = DeviceTensor(add.ptr, (b, 1, 1, t), F32)
        else:  # (B, T) or (B, S, T) raw mask: nonzero attends
            keep = sc(compare(rt, stream, GREATER, m, sc(device_scalar(rt, stream, 0, m.dtype))))
            add = sc(where(rt, stream, keep, zero, filled)[0])
            add = DeviceTensor(add.ptr, (b, 1, 1, t) if len(m.shape) == 2 else (b, 1, s, t), F32)
    if unidirectional:
        future = np.arange(t)[None, :] > (past + np.arange(s))[:, None]
        causal = sc(rt.device(DeviceTensor.on_host(np.where(future, np.float32(fill), np.float32(0))), stream))
        add = causal if add is None else sc(binary(rt, stream, ADD, add, causal))
    if attention_bias is not None:
        bias = sc(cast_to(rt, stream, attention_bias, F32))
        add = bias if add is None else sc(binary(rt, stream, ADD, add, bias))
    return add


@kernel("Attention", domain="com.microsoft", types=FLOATS, device="cuda", check=check_ms_attention)
def ms_attention(rt, stream, input, weights, bias=None, mask_index=None, past=None, attention_bias=None,
                 past_sequence_length=None, *, num_heads, qkv_hidden_sizes=None, unidirectional=0,
                 mask_filter_value=-10000.0, scale=0.0, do_rotary=0, rotary_embedding_dim=0,
                 past_present_share_buffer=0, _num_outputs=1):
    """softmax(Q K^T * scale + mask) V with [Q K V] = input @ weights + bias; present (2, B, N, T, H)."""
    dtype = input.dtype
    b, s, hidden = input.shape
    dq, dk, dv = ms_attention_shapes(input, weights, bias, mask_index, past, num_heads, qkv_hidden_sizes)
    width, n = weights.shape[1], num_heads
    sc = Scratch(rt, input, weights, bias, mask_index, past, attention_bias)
    qkv = sc(rt.alloc((b * s, width), F32))
    rt.gemm(stream, sc(cast_to(rt, stream, input, F32)), sc(cast_to(rt, stream, weights, F32)), qkv, b * s, width,
            hidden)
    if bias is not None:
        qkv = sc(binary(rt, stream, ADD, qkv, sc(cast_to(rt, stream, bias, F32))))
    if dtype == F16:  # ORT holds the projections in float16
        qkv = sc(cast_to(rt, stream, sc(cast_to(rt, stream, qkv, F16)), F32))
    q = sc(_heads(rt, stream, qkv, b, s, width, 0, n, dq // n))
    k = sc(_heads(rt, stream, qkv, b, s, width, dq, n, dk // n))
    v = sc(_heads(rt, stream, qkv, b, s, width, dq + dk, n, dv // n))
    p, past_k, past_v = 0, None, None
    if past is not None:
        _, _, _, p, h = past.shape
        half = b * n * p * h
        past_k = sc(cast_to(rt, stream, DeviceTensor(past.ptr, (b, n, p, h), dtype), F32))
        past_v = sc(cast_to(rt, stream, DeviceTensor(past.ptr + half * dtype.itemsize, (b, n, p, h), dtype), F32))
    add = _mask_add(rt, stream, sc, mask_index, b, s, p + s, p, unidirectional, attention_bias, mask_filter_value)
    out, present_k, present_v = (sc(t) for t in attention(rt, stream, q, k, v, add, past_k, past_v,
                                                          scale=scale if scale != 0.0 else None, _num_outputs=3))
    moved = sc(permuted(rt, stream, out, [0, 2, 1, 3]))  # (B, N, S, hv) -> (B, S, N * hv)
    results = [cast_to(rt, stream, DeviceTensor(moved.ptr, (b, s, dv), F32), dtype)]
    if _num_outputs > 1:
        if present_k.shape != present_v.shape:
            raise ValueError("Attention: a present state needs keys and values of one size (qkv_hidden_sizes)")
        present = rt.alloc((2,) + present_k.shape, dtype)
        for i, x in enumerate((present_k, present_v)):
            cast = sc(cast_to(rt, stream, x, dtype))
            rt.copy(present.ptr + i * cast.nbytes, cast.ptr, cast.nbytes, stream)
        results.append(present)
    return sc.done(*results)
