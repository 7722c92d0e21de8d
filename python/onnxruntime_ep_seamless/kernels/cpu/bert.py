"""BERT-family fused ops of ORT's transformer optimizer (com.microsoft): EmbedLayerNormalization
and Attention (the packed-QKV-projection form), shaped per ORT's docs/ContribOperators.md.

float32 and float16; float16 computes in float32 and rounds each output once. Layout names:
B batch, S sequence, N heads, H head size, P past length, T = P + S total key length.
Masks follow ORT's CPU EP (attention_helper PrepareMask): masked keys get `mask_filter_value`
(default -10000, not -inf) added to the scaled scores, once per reason (padding, causal), so a
row whose keys are all masked averages the values as ORT's does.
"""
from __future__ import annotations

import numpy as np

from ..checks import InvalidArgument, first_outside
from ..registry import kernel

F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)
I32 = np.dtype(np.int32)
FLOATS = frozenset([F16, F32])


def _f32(x):
    return x.astype(F32, copy=False)


def _softmax_rows(x):
    m = np.max(x, axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=-1, keepdims=True)


# --- EmbedLayerNormalization ------------------------------------------------------------------


def check_embed(node, graph):
    ins = node.inputs + [""] * (9 - len(node.inputs))
    for i in (0, 1, 7, 8):
        if ins[i]:
            dt = graph.value(ins[i]).dtype
            if dt is not None and dt != I32:
                return f"input {i} of dtype {dt} not supported (int32)"
    dt = graph.value(ins[2]).dtype
    if dt is not None and dt not in FLOATS:
        return f"dtype {dt} not supported (float32, float16)"
    if bool(ins[1]) != bool(ins[4]):
        return "segment_ids and segment_embedding must be given together"
    return None


def embed_shapes(input_ids, segment_ids, word, position, segment, gamma, beta, mask, position_ids):
    """The shapes EmbedLayerNormalization's views and broadcasts assume, as ORT checks them (INVALID_ARGUMENT; the CUDA
    kernel's too)."""
    b, s = input_ids.shape
    hidden = word.shape[-1]
    problem = ("Input 0 and 1 shall have same shape" if segment_ids is not None and segment_ids.shape != (b, s) else
               "Input 0 and 7 (mask) shall have same shape" if mask is not None and mask.shape != (b, s) else
               "position_ids shall have shape (batch_size, sequence_length) or (1, sequence_length)"
               if position_ids is not None and position_ids.shape not in ((b, s), (1, s)) else
               "embeddings shall be 2-D of one hidden size"
               if any(t is not None and (len(t.shape) != 2 or t.shape[1] != hidden) for t in (word, position, segment))
               else "gamma and beta shall be 1-D of the hidden size"
               if any(t is not None and t.shape != (hidden,) for t in (gamma, beta)) else "")
    if problem:
        raise InvalidArgument(f"EmbedLayerNormalization: {problem}: input_ids {input_ids.shape}, segment_ids "
                              f"{None if segment_ids is None else segment_ids.shape}, embeddings {word.shape}, "
                              f"{position.shape}, {None if segment is None else segment.shape}")


def ms_attention_shapes(input, weights, bias, mask_index, past, n, qkv_hidden_sizes):
    """Attention's Q/K/V hidden sizes, with the shapes its views assume checked as ORT does (the CUDA kernel's too)."""
    b, s, hidden = input.shape
    if len(weights.shape) != 2 or weights.shape[0] != hidden:
        raise InvalidArgument(f"Input 1 dimension 0 should have same length as dimension 2 of input 0: weights "
                              f"{weights.shape}, input {input.shape}")
    width = weights.shape[1]
    dq, dk, dv = (width // 3,) * 3 if qkv_hidden_sizes is None else (int(v) for v in qkv_hidden_sizes)
    if dq + dk + dv != width or dq % n or dk % n or dv % n or dq != dk:  # the projections' columns, by heads
        raise ValueError(f"Attention: weights of width {width} for Q/K/V hidden sizes {dq}, {dk}, {dv} of {n} heads "
                         "(their sum, each a multiple of num_heads, Q's and K's equal)")
    if bias is not None and bias.shape != (width,):
        raise InvalidArgument(f"Input 'bias' dimension 0 should have same length as dimension 1 of input 'weights' "
                              f"({width}), got {bias.shape}")
    if past is not None and (len(past.shape) != 5 or past.shape[:3] != (2, b, n) or past.shape[4] != dk // n):
        raise InvalidArgument(f"Input 'past' of shape {past.shape} must be (2, {b}, {n}, past length, {dk // n})")
    t = s + (past.shape[3] if past is not None else 0)
    if mask_index is not None and mask_index.shape not in ((b,), (2 * b,), (b, t), (b, s, t)):
        raise InvalidArgument(f"Inputs 'mask_index' of shape {mask_index.shape} must be ({b},), ({2 * b},), ({b}, {t}) "
                              f"or ({b}, {s}, {t}) (batch_size, sequence_length, total_sequence_length)")
    return dq, dk, dv


def _lookup_rows(table, ids, what):
    bad = first_outside(ids, 0, table.shape[0])
    if bad:
        raise InvalidArgument(f"input index out of range: {what} {bad[1]} outside [0, {table.shape[0]})")
    return _f32(table)[ids]


@kernel("EmbedLayerNormalization", domain="com.microsoft", types=FLOATS, type_input=2, check=check_embed)
def embed_layer_normalization(input_ids, segment_ids, word_embedding, position_embedding, segment_embedding=None,
                              gamma=None, beta=None, mask=None, position_ids=None, *, epsilon=1e-12,
                              mask_index_type=1):
    """LayerNorm(word[input_ids] + position[position_ids or 0..S-1] + segment[segment_ids]) over
    the hidden axis; mask_index (B,) int32 is the count of mask == 1 per row (0 without a mask);
    embedding_sum the sum before normalization."""
    embed_shapes(input_ids, segment_ids, word_embedding, position_embedding, segment_embedding, gamma, beta, mask,
                 position_ids)
    b, s = input_ids.shape
    dtype = word_embedding.dtype
    emb = _lookup_rows(word_embedding, input_ids, "input_ids")
    if position_ids is None:
        pos = np.broadcast_to(np.arange(s, dtype=np.int64), (b, s))
    else:
        pos = np.broadcast_to(position_ids.reshape(-1, s), (b, s))
    emb = emb + _lookup_rows(position_embedding, pos, "position_ids")
    if segment_ids is not None and segment_embedding is not None:
        emb = emb + _lookup_rows(segment_embedding, segment_ids, "segment_ids")
    hidden = emb.shape[-1]
    mean = emb.sum(axis=-1, keepdims=True) / np.float32(hidden)
    centred = emb - mean
    std = np.sqrt(np.square(centred).sum(axis=-1, keepdims=True) / np.float32(hidden) + np.float32(epsilon))
    y = centred / std * _f32(gamma)
    if beta is not None:
        y = y + _f32(beta)
    if mask is not None:
        mask_index = np.count_nonzero(mask.reshape(b, -1) == 1, axis=1).astype(I32)
    else:
        mask_index = np.zeros(b, I32)
    return y.astype(dtype), mask_index, emb.astype(dtype)


# --- Attention (com.microsoft) ----------------------------------------------------------------


def check_ms_attention(node, graph):
    ins = node.inputs + [""] * (7 - len(node.inputs))
    x = graph.value(ins[0])
    if x.dtype is not None and x.dtype not in FLOATS:
        return f"dtype {x.dtype} not supported (float32, float16)"
    if x.shape is not None and len(x.shape) != 3:
        return f"input of rank {len(x.shape)} not supported (3-D)"
    if node.attrs.get("do_rotary", 0):
        return "do_rotary not supported"
    if node.attrs.get("past_present_share_buffer", 0):
        return "past_present_share_buffer not supported"
    if ins[6]:
        return "past_sequence_length (shared KV buffer) not supported"
    if ins[4] and not (len(node.outputs) > 1 and node.outputs[1]):
        return "a past without its present output (stock ORT fails such a run)"
    if ins[3]:
        m = graph.value(ins[3])
        if m.dtype is not None and m.dtype != I32:
            return f"mask_index of dtype {m.dtype} not supported (int32)"
        if m.shape is not None and len(m.shape) not in (1, 2, 3):
            return f"mask_index of rank {len(m.shape)} not supported (1-D, 2-D, 3-D)"
    sizes = node.attrs.get("qkv_hidden_sizes")
    if ins[4] and sizes is not None and len(set(sizes)) != 1:
        return "past state with differing qkv_hidden_sizes not supported"
    return None


@kernel("Attention", domain="com.microsoft", types=FLOATS, check=check_ms_attention)
def ms_attention(input, weights, bias=None, mask_index=None, past=None, attention_bias=None,
                 past_sequence_length=None, *, num_heads, qkv_hidden_sizes=None, unidirectional=0,
                 mask_filter_value=-10000.0, scale=0.0, do_rotary=0, rotary_embedding_dim=0,
                 past_present_share_buffer=0):
    """softmax(Q K^T * scale + mask) V with [Q K V] = input @ weights + bias; present (2,B,N,T,H)."""
    ms_attention_shapes(input, weights, bias, mask_index, past, num_heads, qkv_hidden_sizes)
    out_dtype = input.dtype
    b, s, _ = input.shape
    qkv = np.matmul(_f32(input), _f32(weights))
    if bias is not None:
        qkv = qkv + _f32(bias)
    if qkv_hidden_sizes is None:
        dq = dk = dv = weights.shape[1] // 3
    else:
        dq, dk, dv = (int(v) for v in qkv_hidden_sizes)
    if out_dtype == F16:  # ORT holds the projections in float16
        qkv = qkv.astype(F16).astype(F32)
    n = num_heads
    hq, hv = dq // n, dv // n
    q = qkv[..., :dq].reshape(b, s, n, hq).transpose(0, 2, 1, 3)
    k = qkv[..., dq:dq + dk].reshape(b, s, n, dk // n).transpose(0, 2, 1, 3)
    v = qkv[..., dq + dk:].reshape(b, s, n, hv).transpose(0, 2, 1, 3)
    p = 0
    if past is not None:
        p = past.shape[3]
        k = np.concatenate([_f32(past[0]), k], axis=2)
        v = np.concatenate([_f32(past[1]), v], axis=2)
    t = p + s
    sm_scale = np.float32(scale if scale != 0.0 else 1.0 / np.sqrt(np.float32(hq)))
    scores = np.matmul(q, k.transpose(0, 1, 3, 2)) * sm_scale                    # B N S T
    fill = np.float32(mask_filter_value)
    add = None
    if mask_index is not None:
        m = mask_index
        keys = np.arange(t)
        if m.ndim == 1:  # (B,) end positions, or (2B,) end then start positions
            end = m[:b].reshape(b, 1)
            masked = keys[None, :] >= end
            if m.shape[0] == 2 * b:
                masked = masked | (keys[None, :] < m[b:].reshape(b, 1))
            elif m.shape[0] != b:
                raise ValueError(f"mask_index of shape {m.shape} for batch {b}")
            add = np.where(masked, fill, np.float32(0))[:, None, None, :]
        elif m.ndim == 2:  # (B, T) raw mask
            add = np.where(m > 0, np.float32(0), fill)[:, None, None, :]
        else:              # (B, S, T)
            add = np.where(m > 0, np.float32(0), fill)[:, None, :, :]
    if unidirectional:
        future = np.arange(t)[None, :] > (p + np.arange(s))[:, None]
        causal = np.where(future, fill, np.float32(0))
        add = causal if add is None else add + causal
    if add is not None:
        scores = scores + add
    if attention_bias is not None:
        scores = scores + _f32(attention_bias)
    probs = _softmax_rows(scores)
    out = np.matmul(probs, v).transpose(0, 2, 1, 3).reshape(b, s, n * hv)
    present = np.stack([k, v]) if k.shape == v.shape else None
    return (np.ascontiguousarray(out, dtype=out_dtype),
            None if present is None else np.ascontiguousarray(present, dtype=out_dtype))
