"""Attention and rotary embeddings: com.microsoft GroupQueryAttention, MultiHeadAttention,
RotaryEmbedding; ONNX Attention-23, RotaryEmbedding-23 and LinearAttention-27.

float32 only (ONNX Attention and LinearAttention: float16 too). Layout names: B batch, N query heads, Nkv
key/value heads, S query length, T total (past + new) key length, H head size. Softmax and scores are float32,
as in ORT's CPU EP; the GQA decode path (one query token) runs in native code (native/cpu/attention.c).
"""
from __future__ import annotations

import numpy as np

from ..checks import InvalidArgument, Undefined, first_outside
from ..registry import FLOATS, kernel
from . import native

F32 = np.dtype(np.float32)
I64 = np.dtype(np.int64)


def _softmax_rows(x):
    """Softmax over the last axis (float32); -inf entries get probability 0."""
    m = np.max(x, axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=-1, keepdims=True)


def _softcap(x, softcap):
    return np.float32(softcap) * np.tanh(x / np.float32(softcap)) if softcap > 0 else x


# --- rotary embedding -------------------------------------------------------------------------


def rotate(x, cos, sin, interleaved: bool):
    """Rotary embedding of the first 2*cos.shape[-1] channels of x [..., H]; cos/sin broadcast
    against x[..., :rot/2]. The remaining channels pass through."""
    half = cos.shape[-1]
    rot = 2 * half
    xr = x[..., :rot]
    if interleaved:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
    else:
        x1, x2 = xr[..., :half], xr[..., half:]
    real = x1 * cos - x2 * sin
    imag = x1 * sin + x2 * cos
    if interleaved:
        out = np.stack([real, imag], axis=-1).reshape(xr.shape)
    else:
        out = np.concatenate([real, imag], axis=-1)
    if rot < x.shape[-1]:
        out = np.concatenate([out, x[..., rot:]], axis=-1)
    return out


def _check_float32(node, graph):
    dt = graph.value(node.inputs[0]).dtype
    if dt is not None and dt != F32:
        return f"dtype {dt} not supported (float32 only)"
    return None


def _check_ms_rotary(node, graph):
    reason = _check_float32(node, graph)
    if reason:
        return reason
    if node.attrs.get("is_packed_batching", 0):
        return "is_packed_batching=1 (ragged batches) not supported"
    if node.attrs.get("scale", 1.0) != 1.0:
        return f"scale={node.attrs['scale']} not supported (1.0 only)"
    return None


@kernel("RotaryEmbedding", domain="com.microsoft", check=_check_ms_rotary)
def ms_rotary_embedding(input, position_ids, cos_cache, sin_cache, *, interleaved=0, num_heads=0,
                        rotary_embedding_dim=0, is_packed_batching=0, scale=1.0):
    """input (B, S, N*H) or (B, N, S, H); position_ids (1,) = start offset, or (B, S)."""
    x = input
    b = x.shape[0]
    if x.ndim == 3:
        s = x.shape[1]
        if num_heads:
            h = x.shape[2] // num_heads
        else:
            h = rotary_embedding_dim or 2 * cos_cache.shape[1]
        x = x.reshape(b, s, -1, h)          # B S N H
    else:
        s = x.shape[2]
        x = x.transpose(0, 2, 1, 3)          # B S N H
    pos = position_ids.astype(I64)
    if pos.ndim == 1:  # (1,): the position of the first token; the rest follow
        pos = pos[0] + np.arange(s, dtype=I64)[None, :]
    pos = np.broadcast_to(pos, (b, s))
    check_positions(pos, cos_cache.shape[0])
    rot_half = (rotary_embedding_dim or x.shape[-1]) // 2
    cos = cos_cache[pos][..., None, :rot_half]  # B S 1 rot/2
    sin = sin_cache[pos][..., None, :rot_half]
    y = rotate(x, cos, sin, bool(interleaved))
    y = y.reshape(input.shape) if input.ndim == 3 else y.transpose(0, 2, 1, 3)
    return (np.ascontiguousarray(y, dtype=F32),)


def check_positions(positions, rows: int) -> None:
    """Every position a row of the cos/sin caches (numpy would wrap a negative one)."""
    bad = first_outside(positions, 0, rows)
    if bad:
        raise InvalidArgument(f"position_ids value {bad[1]} at index {bad[0]} is out of range [0, {rows})")


def _check_onnx_rotary(node, graph):
    return _check_float32(node, graph)


@kernel("RotaryEmbedding", since=23, check=_check_onnx_rotary)
def rotary_embedding_23(X, cos_cache, sin_cache, position_ids=None, *, interleaved=0, num_heads=0,
                        rotary_embedding_dim=0):
    """X (B, N, S, H) or (B, S, N*H); caches (P, rot/2) with position_ids, else (B, S, rot/2)."""
    if X.ndim == 4:
        x = X.transpose(0, 2, 1, 3)  # B S N H
    else:
        if not num_heads:
            raise ValueError("num_heads is required for 3-D input")
        x = X.reshape(X.shape[0], X.shape[1], num_heads, -1)
    rot = rotary_embedding_dim or x.shape[-1]
    if position_ids is not None:
        check_positions(position_ids, cos_cache.shape[0])
        cos, sin = cos_cache[position_ids], sin_cache[position_ids]
    else:
        cos, sin = cos_cache, sin_cache
    if cos.shape[-1] != rot // 2:
        raise ValueError(f"cos/sin last dimension {cos.shape[-1]} != rotary_embedding_dim/2 = {rot // 2}")
    y = rotate(x, cos[..., None, :], sin[..., None, :], bool(interleaved))
    y = y.transpose(0, 2, 1, 3) if X.ndim == 4 else y.reshape(X.shape)
    return (np.ascontiguousarray(y, dtype=F32),)


# --- MRotaryEmbedding (com.microsoft): Qwen2-VL/3-VL/3.5's multimodal RoPE ---------------------------------------
#
# Three position streams (T, H, W: position_ids (3, B, S)) index one cos/sin cache; each of the rot/2 columns takes
# its value from the stream that owns it (mrope_streams), then the rotation is RotaryEmbedding's.

HALF_FLOATS = frozenset(map(np.dtype, (np.float16, np.float32)))


def mrope_streams(section, layout: int, half: int) -> np.ndarray:
    """The stream (0 T, 1 H, 2 W) that owns each of the half rotary columns: layout 0 contiguous sections, layout 1
    T everywhere with H and W at every third column from 1 and 2 (the first 3 * section[d] columns)."""
    owner = np.zeros(half, np.int8)
    if layout == 0:
        owner[:] = np.repeat(np.arange(3, dtype=np.int8), section)[:half]
    else:
        for d in (1, 2):
            owner[d:min(3 * section[d], half):3] = d
    return owner


def _check_mrotary(node, graph):
    if node.attrs.get("is_packed_batching", 0):
        return "is_packed_batching=1 (ragged batches) not supported"
    return None


def mrotary_geometry(x_shape, pos_shape, cache_shape, sin_shape, num_heads: int, rotary_embedding_dim: int,
                     section, layout: int) -> tuple[int, int, int]:
    """(num_heads, head_size, rotary dim) of an MRotaryEmbedding, or stock's INVALID_ARGUMENT (its CheckInputs)."""
    def fail(text):
        raise InvalidArgument(f"MRotaryEmbedding: {text}")
    if len(x_shape) not in (3, 4):
        fail(f"Input 'x' is expected to have 3 or 4 dimensions, got {len(x_shape)}")
    if len(pos_shape) != 3 or pos_shape[0] != 3:
        fail(f"'position_ids' is expected to have shape (3, batch_size, sequence_length), got {len(pos_shape)} "
             f"dimensions" + (f" with dim[0]={pos_shape[0]}" if pos_shape else ""))
    for name, shape in (("cos_cache", cache_shape), ("sin_cache", sin_shape)):
        if len(shape) != 2:
            fail(f"Input '{name}' is expected to have 2 dimensions, got {len(shape)}")
    if tuple(cache_shape) != tuple(sin_shape):
        fail("Inputs 'cos_cache' and 'sin_cache' are expected to have the same shape")
    if rotary_embedding_dim > 0 and num_heads == 0:
        fail("num_heads must be provided if rotary_embedding_dim is specified")
    if len(x_shape) == 4:
        batch, num_heads, seq, head = x_shape
    else:
        batch, seq, hidden = x_shape
        if num_heads <= 0:
            fail("num_heads must be greater than 0 for rank-3 input")
        if hidden % num_heads:
            fail(f"hidden_size={hidden} must be divisible by num_heads={num_heads} for rank-3 input")
        head = hidden // num_heads
    rot = rotary_embedding_dim or head
    if rot > head:
        fail("rotary_embedding_dim must be less than or equal to head_size")
    if rot // 2 != cache_shape[1]:
        fail(f"Input 'cos_cache' dimension 1 should be same as head_size / 2 or rotary_embedding_dim / 2, got "
             f"{cache_shape[1]}")
    if pos_shape[1] != batch:
        fail(f"Input 'position_ids' dimension 1 should be batch_size, got {pos_shape[1]}")
    if pos_shape[2] != seq:
        fail(f"Input 'position_ids' dimension 2 should be sequence_length, got {pos_shape[2]}")
    if len(section) != 3:
        fail(f"'mrope_section' attribute must have exactly 3 elements, got {len(section)}")
    if any(v < 0 or v > 2**31 - 1 for v in section):
        fail("'mrope_section' values must be non-negative and fit in int32")
    if sum(section) != rot // 2:
        fail(f"sum of 'mrope_section' ({sum(section)}) must equal rotary_embedding_dim / 2 ({rot // 2})")
    if layout not in (0, 1):
        fail(f"'mrope_layout' must be 0 (Sectioned) or 1 (Interleaved), got {layout}")
    if seq > cache_shape[0]:
        raise Undefined("Updating cos_cache and sin_cache in MRotaryEmbedding is not currently supported")
    return num_heads, head, rot


def check_mrope_positions(position_ids, rows: int) -> None:
    for stream in range(3):
        bad = first_outside(position_ids[stream].reshape(-1), 0, rows)
        if bad:
            raise InvalidArgument(f"MRotaryEmbedding: position_ids value {bad[1]} at stream {stream}, index {bad[0]} "
                                  f"is out of range [0, {rows})")


@kernel("MRotaryEmbedding", domain="com.microsoft", types=HALF_FLOATS, check=_check_mrotary)
def m_rotary_embedding(input, position_ids, cos_cache, sin_cache, *, mrope_section, num_heads=0,
                       rotary_embedding_dim=0, interleaved=0, mrope_layout=0, is_packed_batching=0, scale=1.0):
    """input (B, S, N*H) or (B, N, S, H); position_ids (3, B, S); caches (P, rot/2)."""
    n, h, rot = mrotary_geometry(input.shape, position_ids.shape, cos_cache.shape, sin_cache.shape, num_heads,
                                 rotary_embedding_dim, list(mrope_section), mrope_layout)
    check_mrope_positions(position_ids, cos_cache.shape[0])
    b = input.shape[0]
    x = (input.reshape(b, input.shape[1], n, h) if input.ndim == 3 else input.transpose(0, 2, 1, 3)).astype(F32)
    owner = mrope_streams(list(mrope_section), mrope_layout, rot // 2)
    cols = np.arange(rot // 2)

    def combined(cache):  # (B, S, rot/2): column c from stream owner[c]'s position
        per_stream = cache.astype(F32)[position_ids]  # 3 B S rot/2
        return (per_stream[owner, :, :, cols].transpose(1, 2, 0) * np.float32(scale)).astype(cache.dtype).astype(F32)
    y = rotate(x, combined(cos_cache)[..., None, :], combined(sin_cache)[..., None, :], bool(interleaved))
    y = y.reshape(input.shape) if input.ndim == 3 else y.transpose(0, 2, 1, 3)
    return (np.ascontiguousarray(y, dtype=input.dtype),)


# --- GroupQueryAttention ----------------------------------------------------------------------

_GQA_UNSUPPORTED_INPUTS = {9: "position_ids", 10: "attention_bias", 12: "k_scale", 13: "v_scale",
                           14: "q_norm_weight", 15: "k_norm_weight", 16: "query_seqlens"}


def _check_gqa(node, graph):
    past = node.inputs[3] if len(node.inputs) > 3 else ""
    if past and graph.value(past).dtype not in (None, F32):
        return f"KV cache of dtype {graph.value(past).dtype} not supported (float32 only)"
    return _check_float32(node, graph) or gqa_config_problem(node, graph)


def gqa_config_problem(node, graph, qk_norm=False):
    """Why this GroupQueryAttention configuration is not implemented (element types aside), or None. qk_norm: the
    kernel takes q_norm_weight and k_norm_weight (the CUDA one, as ORT's; ORT's CPU kernel refuses them)."""
    a = node.attrs
    for i, name in _GQA_UNSUPPORTED_INPUTS.items():
        if len(node.inputs) > i and node.inputs[i] and not (qk_norm and i in (14, 15)):
            return f"input {name} not supported"
    norms = [len(node.inputs) > i and bool(node.inputs[i]) for i in (14, 15)]
    if norms[0] != norms[1]:
        return "q_norm_weight and k_norm_weight must be given together"
    for name in ("kv_cache_bit_width", "k_quant_type", "v_quant_type"):
        if name in a and a[name] not in ("NONE", b"NONE"):
            return f"quantized KV cache ({name}={a[name]!r}) not supported"
    if a.get("sliding_window_cache", 0) and a.get("local_window_size", -1) <= 0:
        return "sliding_window_cache=1 needs local_window_size > 0"
    if a.get("qk_output", 0):
        return f"qk_output={a['qk_output']} not supported"
    causal = a.get("causal", 1)
    if causal not in (0, 1):
        return f"causal={causal} (must be 0 or 1)"
    if not causal and a.get("local_window_size", -1) != -1:
        return "local_window_size with causal=0 is invalid"
    nh, kvh = a.get("num_heads", 0), a.get("kv_num_heads", 0)
    if nh <= 0 or kvh <= 0 or nh % kvh:
        return f"num_heads={nh} must be a positive multiple of kv_num_heads={kvh}"
    if a.get("do_rotary", 0) and not (len(node.inputs) > 8 and node.inputs[7] and node.inputs[8]):
        return "do_rotary=1 needs cos_cache and sin_cache"
    past = [node.inputs[i] if len(node.inputs) > i else "" for i in (3, 4)]
    if bool(past[0]) != bool(past[1]):
        return "past_key and past_value must be given together"
    return None


def _gqa_positions(seqlens_k, b, s, first_prompt):
    """Rotary position of each query token: 0.. for the first prompt, past_len.. afterwards."""
    if first_prompt:
        return np.broadcast_to(np.arange(s, dtype=I64), (b, s))
    past = seqlens_k.astype(I64) + 1 - s
    return past[:, None] + np.arange(s, dtype=I64)[None, :]


def gqa_layout(query_shape, packed: bool, past_shape, seqlens_k, total_sequence_length, num_heads: int,
               kv_num_heads: int, cos_shape, window_cache: int = 0):
    """Head size, whether this is the first prompt, the present length and seqlens_k as a list,
    with the run-time checks ORT makes (shared by the CPU and CUDA kernels). seqlens_k None: its
    values are not known on the host (the CUDA kernels read them on the GPU), only shapes are checked.
    window_cache: local_window_size W of a window-sized cache (sliding_window_cache=1), whose present length is the
    past's capacity C >= W."""
    b, s = query_shape[:2]
    h = query_shape[2] // (num_heads + 2 * kv_num_heads) if packed else query_shape[2] // num_heads
    total = int(np.asarray(total_sequence_length).reshape(-1)[0])
    lens = None if seqlens_k is None else np.asarray(seqlens_k).reshape(-1).tolist()
    past_buf = past_shape[2] if past_shape is not None else 0
    if s > 1 and s != total:
        if b != 1:
            raise ValueError("batch_size must be 1 when sequence_length > 1 and past context is given")
        first_prompt = False
    else:
        first_prompt = s == total
    present_len = max(total, past_buf)
    if window_cache:
        if past_buf < window_cache:
            raise InvalidArgument(f"sliding_window_cache=1 needs a KV cache capacity (past_key dimension 2, {past_buf}) "
                                  f"of at least local_window_size ({window_cache})")
        present_len = past_buf
    elif total != past_buf + s and total > past_buf:  # what the present buffer is allocated for
        raise InvalidArgument(f"total_sequence_length must equal past_sequence_length + kv_sequence_length for a "
                              f"dynamic cache, or be no greater than past_sequence_length for a static cache. Got "
                              f"total_sequence_length={total}, past_sequence_length={past_buf}, "
                              f"kv_sequence_length={s}.")
    if lens is not None:
        if len(lens) != b:
            raise InvalidArgument(f"seqlens_k must be shape (batch_size): {len(lens)} values for batch {b}")
        bound = max(total, present_len)  # stock's: a static cache's length where it passes the total
        for i, n in enumerate(lens):
            if not 0 <= n < bound:
                raise InvalidArgument(f"seqlens_k[{i}] = {n} is out of range [0, {bound})")
        if not first_prompt and min(lens) + 1 < s:
            raise InvalidArgument(f"seqlens_k {lens} shorter than the {s} new tokens")
    if cos_shape is not None:
        half = cos_shape[1]
        if half * 2 > h or half % 8:
            raise InvalidArgument(f"cos_cache dimension 1 ({half}) must be <= head_size / 2 and a multiple of 8")
        if cos_shape[0] < total:  # every position is below the total length (seqlens_k is checked against it)
            raise InvalidArgument(f"cos_cache dimension 0 shall not be less than total_sequence_length: "
                                  f"{cos_shape[0]} < {total}")
    return h, first_prompt, present_len, lens


@kernel("GroupQueryAttention", domain="com.microsoft", check=_check_gqa)
def group_query_attention(query, key=None, value=None, past_key=None, past_value=None, seqlens_k=None,
                          total_sequence_length=None, cos_cache=None, sin_cache=None, position_ids=None,
                          attention_bias=None, head_sink=None, k_scale=None, v_scale=None, q_norm_weight=None,
                          k_norm_weight=None, query_seqlens=None, *, num_heads, kv_num_heads, scale=0.0,
                          softcap=0.0, local_window_size=-1, do_rotary=0, rotary_interleaved=0, smooth_softmax=-1,
                          qk_output=0, causal=1, sliding_window_cache=0, kv_cache_bit_width=0, k_quant_type="NONE",
                          v_quant_type="NONE", qk_norm_epsilon=1e-6, q_norm_epsilon=1e-6, k_norm_epsilon=1e-6):
    b, s = query.shape[:2]
    nkv = kv_num_heads
    window_cache = local_window_size if sliding_window_cache else 0
    h, first_prompt, present_len, lens = gqa_layout(query.shape, key is None, past_key.shape if past_key is not None
                                                    else None, seqlens_k, total_sequence_length, num_heads, nkv,
                                                    cos_cache.shape if do_rotary else None, window_cache)
    if past_key is None and not first_prompt:
        raise ValueError("past_key/past_value are required after the first prompt")
    half = cos_cache.shape[1] if do_rotary else 0
    sm_scale = float(scale) if scale != 0.0 else 1.0 / float(np.sqrt(np.float32(h)))
    sink = None
    if smooth_softmax == 1 or head_sink is not None:
        sink = np.zeros(num_heads, F32) if head_sink is None else head_sink.astype(F32).reshape(num_heads)
    if native.has_gqa():
        return native.gqa(query, key, value, past_key, past_value, seqlens_k, first_prompt, present_len, num_heads,
                          nkv, h, sm_scale, softcap, local_window_size, causal, sink,
                          cos_cache if do_rotary else None, sin_cache, rotary_interleaved, bool(window_cache))
    seqlens = np.asarray(lens, np.int64)
    sm_scale = np.float32(sm_scale)
    smooth = sink is not None
    pos = _gqa_positions(seqlens, b, s, first_prompt) if do_rotary else None
    if key is None:  # packed QKV: (B, S, (N + 2 Nkv) H)
        q = query[:, :, :num_heads * h]
        k = query[:, :, num_heads * h:(num_heads + nkv) * h]
        v = query[:, :, (num_heads + nkv) * h:]
    else:
        q, k, v = query, key, value
    q = q.reshape(b, s, num_heads, h)
    k = k.reshape(b, s, nkv, h)
    v = v.reshape(b, s, nkv, h)
    if do_rotary:
        cos, sin = cos_cache[pos][:, :, None, :half], sin_cache[pos][:, :, None, :half]
        q = rotate(q, cos, sin, bool(rotary_interleaved))
        k = rotate(k, cos, sin, bool(rotary_interleaved))
    q = np.ascontiguousarray(q.transpose(0, 2, 1, 3), dtype=F32)   # B N S H
    k = np.ascontiguousarray(k.transpose(0, 2, 1, 3), dtype=F32)   # B Nkv S H
    v = np.ascontiguousarray(v.transpose(0, 2, 1, 3), dtype=F32)
    present_k = np.zeros((b, nkv, present_len, h), F32)
    present_v = np.zeros((b, nkv, present_len, h), F32)
    out = np.empty((b, s, num_heads, h), F32)
    group = num_heads // nkv
    for bi in range(b):
        t = int(seqlens[bi]) + 1
        p = 0 if first_prompt else t - s
        if window_cache:  # the past's resident rows, then the new tokens; present: the most recent of them
            resident = _window_resident(p, present_len, window_cache)
            kk = np.concatenate([past_key[bi, :, :resident], k[bi]], axis=1) if p else k[bi]
            vv = np.concatenate([past_value[bi, :, :resident], v[bi]], axis=1) if p else v[bi]
            keep = _window_resident(t, present_len, window_cache)
            present_k[bi, :, :keep], present_v[bi, :, :keep] = kk[:, -keep:], vv[:, -keep:]
            first = p - resident                                             # the position of kk's row 0
        else:
            if p > 0:
                present_k[bi, :, :p] = past_key[bi, :, :p]
                present_v[bi, :, :p] = past_value[bi, :, :p]
            present_k[bi, :, p:p + s] = k[bi]
            present_v[bi, :, p:p + s] = v[bi]
            kk, vv = present_k[bi, :, :t], present_v[bi, :, :t]              # Nkv T H
            first = 0
        rows = kk.shape[1]
        qq = q[bi].reshape(nkv, group * s, h)
        scores = np.matmul(qq, kk.transpose(0, 2, 1)) * sm_scale             # Nkv (g S) rows
        scores = _softcap(scores, softcap).reshape(nkv, group, s, rows)
        keys = first + np.arange(rows)[None, :]                              # absolute positions
        if causal:
            causal_len = p + np.arange(s)[:, None] + 1                          # S 1
            allowed = keys < causal_len
            if local_window_size > 0:
                allowed &= keys >= causal_len - local_window_size
        else:
            allowed = np.ones((s, t), bool)
        scores = np.where(allowed, scores, np.float32(-np.inf))
        if smooth:
            sk = sink.reshape(nkv, group, 1, 1)
            m = np.maximum(scores.max(axis=-1, keepdims=True), sk)
            e = np.exp(scores - m)
            probs = e / (e.sum(axis=-1, keepdims=True) + np.exp(sk - m))
        else:
            probs = _softmax_rows(scores)
        o = np.matmul(probs.reshape(nkv, group * s, rows), vv)               # Nkv (g S) H
        out[bi] = o.reshape(num_heads, s, h).transpose(1, 0, 2)
    return out.reshape(b, s, num_heads * h), present_k, present_v


def _window_resident(t: int, capacity: int, window: int) -> int:
    """How many of a window-sized cache's rows hold positions after t tokens (sliding_window_cache=1): all up to
    the capacity C, then eviction of G = C - W + 1 at a time, so that the W most recent always stay."""
    if t <= capacity:
        return t
    g = capacity - window + 1
    return t - g * -(-(t - capacity) // g)


# --- MultiHeadAttention -----------------------------------------------------------------------


def check_mha(node, graph):
    reason = _check_float32(node, graph)
    if reason:
        return reason
    ins = node.inputs + [""] * (10 - len(node.inputs))
    q = graph.value(ins[0])
    if q.shape is not None and len(q.shape) != 3:
        return "packed QKV (5-D query) not supported"
    if not ins[1] or not ins[2]:
        return "key and value are required (packed QKV/KV not supported)"
    for i in (1, 2):
        shp = graph.value(ins[i]).shape
        if shp is not None and len(shp) != 3:
            return "key/value must be 3-D (packed KV and BNSH cross-attention keys not supported)"
    if ins[8]:
        return "past_sequence_length (shared KV buffer) not supported"
    if ins[9]:
        return "cache_indirection (beam search) not supported"
    if bool(ins[6]) != bool(ins[7]):
        return "past_key and past_value must be given together"
    mask = graph.value(ins[4]) if ins[4] else None
    if mask is not None and mask.shape is not None and len(mask.shape) not in (1, 2, 3):
        return f"key_padding_mask of rank {len(mask.shape)} not supported"
    if len(node.outputs) > 3 and node.outputs[3]:
        return "output qk not supported"
    return None


def mha_shapes(query, key, value, bias, mask, past_key, past_value, n):
    """The shapes MultiHeadAttention's views assume, as ORT checks them (INVALID_ARGUMENT)."""
    b, s, d = query.shape
    length, dv = key.shape[1], value.shape[2]
    p = past_key.shape[2] if past_key is not None and len(past_key.shape) == 4 else 0
    t = p + length
    problem = ("hidden sizes must be multiples of num_heads" if d % n or dv % n else
               "Input 'query' and 'key' shall have same dim 0 (batch) and 2 (hidden_size)"
               if key.shape != (b, length, d) else
               "Input 'key' and 'value' shall have same dim 0 (batch) and 1 (kv_sequence_length)"
               if value.shape[:2] != (b, length) else
               "Input 'bias' length is expected to be 2 * hidden_size + hidden_size_v"
               if bias is not None and bias.shape != (2 * d + dv,) else
               "Input 'key_padding_mask' shape is not expected"
               if mask is not None and mask.shape not in ((b,), (b, length), (b, t), (b, s, t)) else
               "Inputs 'past_key' and 'past_value' shall be (batch, num_heads, past length, head size)"
               if past_key is not None and (past_key.shape != (b, n, p, d // n) or past_value.shape != (b, n, p, dv // n))
               else "")
    if problem:
        raise InvalidArgument(f"MultiHeadAttention: {problem}: query {query.shape}, key {key.shape}, value "
                              f"{value.shape}, bias {None if bias is None else bias.shape}, key_padding_mask "
                              f"{None if mask is None else mask.shape}, past_key "
                              f"{None if past_key is None else past_key.shape}, num_heads {n}")


@kernel("MultiHeadAttention", domain="com.microsoft", check=check_mha)
def multi_head_attention(query, key, value, bias=None, key_padding_mask=None, attention_bias=None, past_key=None,
                         past_value=None, past_sequence_length=None, cache_indirection=None, *, num_heads,
                         unidirectional=0, scale=0.0, mask_filter_value=-10000.0):
    mha_shapes(query, key, value, bias, key_padding_mask, past_key, past_value, num_heads)
    b, s, d = query.shape
    l, dv = key.shape[1], value.shape[2]
    h, hv = d // num_heads, dv // num_heads
    if bias is not None:
        query = query + bias[:d]
        key = key + bias[d:2 * d]
        value = value + bias[2 * d:]
    q = query.reshape(b, s, num_heads, h).transpose(0, 2, 1, 3)
    k = key.reshape(b, l, num_heads, h).transpose(0, 2, 1, 3)
    v = value.reshape(b, l, num_heads, hv).transpose(0, 2, 1, 3)
    p = 0
    if past_key is not None:
        p = past_key.shape[2]
        k = np.concatenate([past_key, k], axis=2)
        v = np.concatenate([past_value, v], axis=2)
    t = p + l
    sm_scale = np.float32(scale if scale != 0.0 else 1.0 / np.sqrt(np.float32(h)))
    scores = np.matmul(q, k.transpose(0, 1, 3, 2)) * sm_scale                  # B N S T
    fill = np.float32(mask_filter_value)
    add = np.zeros((b, 1, s, t), F32)
    if key_padding_mask is not None:
        m = key_padding_mask
        if m.ndim == 1 and m.shape[0] == b:          # right padding: valid lengths
            keep = np.arange(t)[None, :] < m[:, None]
            add = np.where(keep[:, None, None, :], add, fill)
        elif m.ndim == 1:
            raise ValueError(f"key_padding_mask of shape {m.shape} (left-padding/packed forms) not supported")
        elif m.ndim == 2:                              # (B, L) or (B, T) raw 0/1 mask
            if m.shape[1] == l and l != t:
                m = np.concatenate([np.ones((b, p), m.dtype), m], axis=1)
            add = np.where((m > 0)[:, None, None, :], add, fill)
        else:                                          # (B, S, T)
            add = np.where((m > 0)[:, None, :, :], add, fill)
    if unidirectional and s > 1:
        future = np.arange(t)[None, :] > (p + np.arange(s))[:, None]
        add = np.where(future, fill, add)
    if attention_bias is not None:
        scores = scores + (attention_bias + add)
    elif key_padding_mask is not None or (unidirectional and s > 1):
        scores = scores + add
    probs = _softmax_rows(scores)
    out = np.matmul(probs, v).transpose(0, 2, 1, 3).reshape(b, s, num_heads * hv)
    return (np.ascontiguousarray(out, dtype=F32), np.ascontiguousarray(k, dtype=F32),
            np.ascontiguousarray(v, dtype=F32))


# --- ONNX Attention (opsets 23-24) -----------------------------------------------------------

F16 = np.dtype(np.float16)


def attention_shapes(Q, K, V, past_key, past_value, q_num_heads, kv_num_heads):
    """The shapes the products and views assume (as ORT's attention_helper checks them, FAIL): Q, K, V of one rank
    (3 or 4) and batch, heads dividing the hidden sizes and the query heads a multiple of the key heads, Q and K of
    one head size, K and V of one length, the past (B, Nkv, P, H) as K's and V's heads."""
    rank = len(Q.shape)
    if rank not in (3, 4) or len(K.shape) != rank or len(V.shape) != rank:
        raise ValueError(f"Attention: Q {Q.shape}, K {K.shape} and V {V.shape} must all be 3-D or all 4-D")
    if rank == 3:
        if not q_num_heads or not kv_num_heads or Q.shape[2] % q_num_heads or K.shape[2] % kv_num_heads or \
                V.shape[2] % kv_num_heads:
            raise ValueError(f"Attention: hidden sizes {Q.shape[2]}, {K.shape[2]}, {V.shape[2]} must be multiples of "
                             f"q_num_heads {q_num_heads} and kv_num_heads {kv_num_heads}")
        (b, _, nq, h), (_, t, nkv, hk), (_, tv, nv, hv) = ((x.shape[0], x.shape[1], n, x.shape[2] // n) for x, n in
                                                          ((Q, q_num_heads), (K, kv_num_heads), (V, kv_num_heads)))
    else:
        (b, nq, _, h), (_, nkv, t, hk), (_, nv, tv, hv) = Q.shape, K.shape, V.shape
    pasts = [(p, x) for p, x in ((past_key, hk), (past_value, hv)) if p is not None]
    if K.shape[0] != b or V.shape[0] != b or nkv != nv or nkv == 0 or nq % nkv or hk != h or tv != t or any(
            len(p.shape) != 4 or p.shape[:2] != (b, nkv) or p.shape[3] != x or p.shape[2] != pasts[0][0].shape[2]
            for p, x in pasts):
        raise ValueError(f"Attention: Q {Q.shape}, K {K.shape}, V {V.shape}, past_key "
                         f"{None if past_key is None else past_key.shape}, past_value "
                         f"{None if past_value is None else past_value.shape}: batch, heads, head size or lengths "
                         "disagree")


def check_attention(node, graph):
    for i in (0, 1, 2):
        dt = graph.value(node.inputs[i]).dtype
        if dt is not None and dt not in (F32, F16):
            return f"dtype {dt} not supported (float32, float16)"
    sp = node.attrs.get("softmax_precision")
    if sp not in (None, 1):
        return f"softmax_precision={sp} not supported (float32 only)"
    mode = node.attrs.get("qk_matmul_output_mode", 0)
    if mode not in (0, 1, 2, 3):
        return f"qk_matmul_output_mode={mode} invalid"
    if len(node.inputs) > 3 and node.inputs[3]:
        mdt = graph.value(node.inputs[3]).dtype
        if mdt is not None and mdt not in (np.dtype(np.bool_), F32, F16):
            return f"attn_mask of dtype {mdt} not supported (bool, float32, float16)"
    return None


def native_attention_layout(q_shape, k_shape, v_shape, past_shape, mask, q_heads: int, kv_heads: int):
    """(dims, strides, out_shape) of seamless_onnx_attention_f32 for shapes attention_shapes accepted, or None where
    it does not apply (a mask that does not broadcast to (B, Nq, S, T): the numpy path raises numpy's error)."""
    if len(q_shape) == 3:
        b, s = q_shape[:2]
        nq, nkv, h, l, hv = q_heads, kv_heads, q_shape[2] // q_heads, k_shape[1], v_shape[2] // kv_heads
        rows = [(s * nq * h, h, nq * h), (l * nkv * h, h, nkv * h), (l * nkv * hv, hv, nkv * hv),
                (s * nq * hv, hv, nq * hv)]
        out_shape = (b, s, nq * hv)
    else:
        (b, nq, s, h), (_, nkv, l, _), hv = q_shape, k_shape, v_shape[3]
        rows = [(nq * s * h, s * h, h), (nkv * l * h, l * h, h), (nkv * l * hv, l * hv, hv), (nq * s * hv, s * hv, hv)]
        out_shape = (b, nq, s, hv)
    t = l + (past_shape[2] if past_shape is not None else 0)
    mask_strides = [0, 0, 0, 0]
    if mask is not None:
        if len(mask) > 4:
            return None
        shape = (1,) * (4 - len(mask)) + tuple(mask)
        step = 1
        for d in range(3, -1, -1):
            if shape[d] not in (1, (b, nq, s, t)[d]):
                return None
            mask_strides[d] = 0 if shape[d] == 1 else step
            step *= shape[d]
    dims = [b, nq, nkv, s, l, t - l, h, hv]
    return dims, [v for r in rows for v in r] + mask_strides, out_shape


@kernel("Attention", since=23, until=24, check=check_attention)
def attention(Q, K, V, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None, *, is_causal=0,
              kv_num_heads=0, q_num_heads=0, qk_matmul_output_mode=0, scale=None, softcap=0.0, softmax_precision=1):
    """ONNX Attention; float16 computes in float32 and rounds the outputs once. Opset 24 adds
    nonpad_kv_seqlen (keys past it are padding) and masks shorter than the keys (padded with -inf). float32 without
    nonpad_kv_seqlen, its qk output the scaled product (mode 0): native/cpu/sdpa.c, as its native step."""
    attention_shapes(Q, K, V, past_key, past_value, q_num_heads, kv_num_heads)
    if (all(x is None or x.dtype == F32 for x in (Q, K, V, past_key, past_value)) and nonpad_kv_seqlen is None
            and qk_matmul_output_mode == 0 and (attn_mask is None or attn_mask.dtype in (F32, np.dtype(np.bool_)))):
        layout = native_attention_layout(Q.shape, K.shape, V.shape, shape_or_none(past_key),
                                         shape_or_none(attn_mask), q_num_heads, kv_num_heads)
        if layout is not None:
            return native.onnx_attention(Q, K, V, past_key, past_value, attn_mask, *layout, is_causal, scale, softcap)
    out_dtype = Q.dtype
    Q, K, V = (x.astype(F32, copy=False) for x in (Q, K, V))
    if past_key is not None:
        past_key, past_value = past_key.astype(F32, copy=False), past_value.astype(F32, copy=False)
    three_d = Q.ndim == 3
    if three_d:
        b, s = Q.shape[:2]
        q = Q.reshape(b, s, q_num_heads, -1).transpose(0, 2, 1, 3)
        k = K.reshape(b, K.shape[1], kv_num_heads, -1).transpose(0, 2, 1, 3)
        v = V.reshape(b, V.shape[1], kv_num_heads, -1).transpose(0, 2, 1, 3)
    else:
        q, k, v = Q, K, V
    b, nq, s, h = q.shape
    nkv = k.shape[1]
    p = 0
    if past_key is not None:
        p = past_key.shape[2]
        k = np.concatenate([past_key, k], axis=2)
        v = np.concatenate([past_value, v], axis=2)
    present_k, present_v = k, v
    t = k.shape[2]
    if nq != nkv:  # grouped heads: query head i reads key/value head i // (nq / nkv)
        k = np.repeat(k, nq // nkv, axis=1)
        v = np.repeat(v, nq // nkv, axis=1)
    sm_scale = np.float32(scale if scale is not None else 1.0 / np.sqrt(np.float32(h)))
    qk = np.matmul(q, k.transpose(0, 1, 3, 2)) * sm_scale                     # B N S T
    qk_out = qk
    scores = _softcap(qk, softcap)
    if qk_matmul_output_mode == 1:
        qk_out = scores
    bias = None
    if attn_mask is not None:
        bias = np.where(attn_mask, np.float32(0), np.float32(-np.inf)) if attn_mask.dtype == np.bool_ \
            else attn_mask.astype(F32)
        if bias.shape[-1] < t:  # opset 24: a shorter mask is padded with -inf
            pad = np.full(bias.shape[:-1] + (t - bias.shape[-1],), -np.inf, F32)
            bias = np.concatenate([bias, pad], axis=-1)
    keys = np.arange(t)
    if nonpad_kv_seqlen is not None:  # opset 24: keys past each batch entry's length are padding
        valid = np.asarray(nonpad_kv_seqlen).reshape(b, 1)
        pad = np.where(keys[None, :] < valid, np.float32(0), np.float32(-np.inf)).reshape(b, 1, 1, t)
        bias = pad if bias is None else bias + pad
    if is_causal:
        # bottom-right aligned: query i sees keys j <= i + offset (past length, or for an external
        # cache given by nonpad_kv_seqlen, its valid length minus the query length)
        offset = (np.asarray(nonpad_kv_seqlen).reshape(b, 1, 1) - s) if nonpad_kv_seqlen is not None and p == 0 \
            else np.full((1, 1, 1), p)
        future = keys[None, None, :] > (offset + np.arange(s)[None, :, None])
        causal = np.where(future, np.float32(-np.inf), np.float32(0))[:, None]   # B|1 1 S T
        bias = causal if bias is None else bias + causal
    if bias is not None:
        scores = scores + bias
    if qk_matmul_output_mode == 2:
        qk_out = scores
    m = np.max(scores, axis=-1, keepdims=True)
    dead = np.isneginf(m)                      # fully masked row: zeros, not NaN
    e = np.exp(scores - np.where(dead, np.float32(0), m))
    denom = np.sum(e, axis=-1, keepdims=True)
    probs = np.where(dead, np.float32(0), e / np.where(dead, np.float32(1), denom))
    if qk_matmul_output_mode == 3:
        qk_out = probs
    out = np.matmul(probs, v)                                                   # B N S Hv
    if three_d:
        out = out.transpose(0, 2, 1, 3).reshape(b, s, -1)
    cast = lambda x: np.ascontiguousarray(x, dtype=out_dtype)
    return cast(out), cast(present_k), cast(present_v), cast(qk_out)


# --- LinearAttention (ONNX opset 27 and com.microsoft) -------------------------------------------------------------
#
# Recurrent linear attention with optional gating and delta rule. Q, K, V are packed [B, T, H * D]; the state S is
# [B, H_kv, d_k, d_v]. Per token t and KV head:
#     gated:  S <- exp(g_t) * S                         (g_t: decay, per head or per key dim)
#     delta:  v_t <- beta_t * (v_t - S^T k_t)
#     always: S <- S + k_t (x) v_t ;  o_t = scale * q_t^T S
# Query heads share their KV head's S (GQA); with more KV heads than query heads (inverse GQA, Qwen3.5) each KV head
# reads query head h_kv * H_q / H_kv and writes its own output; K may have fewer heads than V (K head h_kv / (H_kv /
# H_k)). Computed in float32, token by token, as the reference does.

_F32 = np.float32


_RULES = ("linear", "gated", "delta", "gated_delta")


def _heads(x, n):
    """[B, T, H * D] -> [B, H, T, D] (float32)."""
    b, t, hd = x.shape
    return x.reshape(b, t, n, hd // n).transpose(0, 2, 1, 3).astype(_F32)


def check_linear_attention(node, graph):
    rule = node.attrs.get("update_rule", "gated_delta")
    if rule not in _RULES:
        return f"update_rule={rule!r} is not defined"
    if node.attrs.get("state_window", 0):
        return "state_window > 0 (per-token states; stock's CPU EP has no kernel for it either)"
    return None


def linear_recurrence(query, key, value, past_state, decay, beta, q_heads: int, kv_heads: int, scale: float,
                      rule: str):
    """(output [B, T, max(H_q, H_kv) * d_v], present state), float32; the shapes as linear_attention_geometry says."""
    b, t, _ = query.shape
    d_k = query.shape[2] // q_heads
    k_heads = key.shape[2] // d_k
    q, k, v = _heads(query, q_heads), _heads(key, k_heads), _heads(value, kv_heads)
    k = np.repeat(k, kv_heads // k_heads, axis=1)
    d_v = v.shape[-1]
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gated:  # per head [B, T, H_kv] or per key dim [B, T, H_kv * d_k] -> [B, H_kv, T, 1 or d_k]
        g = _heads(decay, kv_heads)
    if delta:  # [B, T, H_kv or 1] -> [B, H_kv or 1, T, 1]
        rate = beta.reshape(b, t, beta.shape[-1], 1).transpose(0, 2, 1, 3).astype(_F32)
    state = np.zeros((b, kv_heads, d_k, d_v), _F32) if past_state is None else past_state.astype(_F32)
    scale = _F32(scale) if scale else _F32(1 / np.sqrt(d_k))
    if q_heads >= kv_heads:  # query head j reads the state of KV head j // group
        reader = np.arange(q_heads) // (q_heads // kv_heads)
    else:  # KV head h reads query head h * H_q / H_kv
        q = q[:, np.arange(kv_heads) * q_heads // kv_heads]
        reader = np.arange(kv_heads)
    out = np.zeros((b, q.shape[1], t, d_v), _F32)
    for i in range(t):
        k_t, v_t = k[:, :, i], v[:, :, i]
        if gated:
            state = state * np.exp(g[:, :, i])[..., None]
        if delta:
            v_t = rate[:, :, i] * (v_t - np.einsum("bhdm,bhd->bhm", state, k_t))
        state = state + k_t[..., :, None] * v_t[..., None, :]
        out[:, :, i] = scale * np.einsum("bhd,bhdm->bhm", q[:, :, i], state[:, reader])
    return out.transpose(0, 2, 1, 3).reshape(b, t, -1), state


@kernel("LinearAttention", since=27, types=FLOATS, check=check_linear_attention)
def linear_attention(query, key, value, past_state=None, decay=None, beta=None, *, chunk_size=64, kv_num_heads,
                     q_num_heads, scale=0.0, update_rule="gated_delta"):
    # chunk_size only tunes chunked implementations; the result is that of the token-by-token recurrence
    y, state = linear_recurrence(query, key, value, past_state, decay, beta, q_num_heads, kv_num_heads, scale,
                                 update_rule)
    return y.astype(query.dtype), state.astype(query.dtype if past_state is None else past_state.dtype)


def linear_attention_geometry(q_shape, k_shape, v_shape, past_shape, decay_shape, beta_shape, q_heads: int,
                              kv_heads: int, rule: str) -> tuple[int, int, int]:
    """(d_k, d_v, K's heads) of a com.microsoft LinearAttention, or stock's failure (its checks, in its order)."""
    def require(ok, text):
        if not ok:
            raise ValueError(text)
    require(len(q_shape) == 3, f"query must be 3D [B, T, H*D], got {len(q_shape)}D")
    require(len(k_shape) == 3 and len(v_shape) == 3, "key and value must be 3D")
    require(k_shape[0] == q_shape[0] and v_shape[0] == q_shape[0], "batch size mismatch")
    require(k_shape[1] == q_shape[1] and v_shape[1] == q_shape[1], "sequence length mismatch")
    d_k = q_shape[2] // q_heads
    require(q_shape[2] == q_heads * d_k, "query hidden size must be divisible by q_num_heads")
    require(d_k > 0 and k_shape[2] % d_k == 0, "key hidden size must be divisible by d_k")
    k_heads = k_shape[2] // d_k
    d_v = v_shape[2] // kv_heads
    require(v_shape[2] == kv_heads * d_v, "value hidden size must be divisible by kv_num_heads")
    require(rule not in ("gated", "gated_delta") or decay_shape is not None,
            f"decay input is required for update_rule={rule}")
    require(rule not in ("delta", "gated_delta") or beta_shape is not None,
            f"beta input is required for update_rule={rule}")
    b, t = q_shape[:2]
    for name, shape, widths, text in (("decay", decay_shape, (kv_heads * d_k, kv_heads), "H_kv or H_kv*d_k"),
                                      ("beta", beta_shape, (kv_heads, 1), "H_kv or 1")):
        if shape is not None:
            require(len(shape) == 3, f"{name} must be rank 3 (B, T, ...), got rank {len(shape)}")
            require(tuple(shape[:2]) == (b, t), f"{name} dims 0/1 must match (B={b}, T={t}), got "
                                                f"({shape[0]}, {shape[1]})")
            require(shape[2] in widths, f"{name} last dim must be {text}")
    state = (b, kv_heads, d_k, d_v)
    if past_shape is not None and tuple(past_shape) != state:
        raise InvalidArgument(
            f"Input 'past_state' is expected to have shape {{{','.join(map(str, state))}}}, got "
            f"{{{','.join(map(str, past_shape))}}}. LinearAttention uses (batch_size, kv_num_heads, d_k, d_v) when the "
            "state_window attribute is absent or 0, and (state_window, batch_size, kv_num_heads, d_k, d_v) otherwise.")
    if q_heads >= kv_heads:
        require(q_heads % kv_heads == 0, "q_num_heads must be divisible by kv_num_heads")
    else:
        require(kv_heads % q_heads == 0, "kv_num_heads must be divisible by q_num_heads (inverse GQA)")
    require(k_heads > 0 and kv_heads % k_heads == 0, "kv_num_heads must be divisible by n_k_heads")
    return d_k, d_v, k_heads


def _check_ms_linear_attention(node, graph):
    reason = check_linear_attention(node, graph) or _check_float32(node, graph)
    if reason:
        return reason
    if node.attrs.get("q_num_heads", 0) <= 0 or node.attrs.get("kv_num_heads", 0) <= 0:
        return "q_num_heads and kv_num_heads must be positive (stock refuses the model)"
    return None


def shape_or_none(x):
    return None if x is None else x.shape


@kernel("LinearAttention", domain="com.microsoft", check=_check_ms_linear_attention)
def ms_linear_attention(query, key, value, past_state=None, decay=None, beta=None, *, q_num_heads, kv_num_heads,
                        update_rule="gated_delta", scale=0.0, chunk_size=64, state_window=0):
    """Stock's float32 kernel: past_state absent means zeros; output (B, T, max(H_q, H_kv) * d_v)."""
    linear_attention_geometry(query.shape, key.shape, value.shape, shape_or_none(past_state), shape_or_none(decay),
                              shape_or_none(beta), q_num_heads, kv_num_heads, update_rule)
    y, state = linear_recurrence(query, key, value, past_state, decay, beta, q_num_heads, kv_num_heads, scale,
                                 update_rule)
    return np.ascontiguousarray(y, F32), state


# --- LinearAttentionGate (com.microsoft): the gated-delta recurrence's gates ------------------------------------------


def _check_gate(node, graph):
    if len(node.outputs) > 1 and node.outputs[1] and (len(node.inputs) < 4 or not node.inputs[3]):
        return "the beta output without the b input (stock fails every run)"
    return None


def gate_shapes(a_shape, dt_bias_size: int, decay_scale_size: int, b_shape) -> None:
    """LinearAttentionGate's inputs as stock checks them."""
    if len(a_shape) < 1:
        raise ValueError("a must have rank >= 1")
    heads = a_shape[-1]
    if heads <= 0:
        raise ValueError("a last dimension must be positive")
    for name, size in (("dt_bias", dt_bias_size), ("decay_scale", decay_scale_size)):
        if size != heads:
            raise ValueError(f"{name} must have {heads} elements, got {size}")
    if b_shape is not None and tuple(b_shape) != tuple(a_shape):
        raise ValueError("b must have the same shape as a")


@kernel("LinearAttentionGate", domain="com.microsoft", types=HALF_FLOATS, check=_check_gate)
@np.errstate(over="ignore")
def linear_attention_gate(a, dt_bias, decay_scale, b=None):
    """decay = decay_scale * softplus(a + dt_bias) over the last axis's heads; beta = sigmoid(b); float32 inside."""
    gate_shapes(a.shape, dt_bias.size, decay_scale.size, None if b is None else b.shape)
    heads = a.shape[-1]
    biased = a.astype(F32) + dt_bias.reshape(heads).astype(F32)
    decay = decay_scale.reshape(heads).astype(F32) * np.logaddexp(_F32(0), biased)
    beta = None if b is None else _F32(1) / (_F32(1) + np.exp(-b.astype(_F32)))
    return decay.astype(a.dtype), None if beta is None else beta.astype(a.dtype)


# --- GatedDeltaNet (com.microsoft): LinearAttention's recurrence, token-major, its gates and norms fused -----------
#
# query [T, H_q, d_k], key [T, H_k = H_q, d_k], value [T, H_v, d_v] (or [B, S, ...]; or query alone: packed q|k|v
# [T, 2 H_q d_k + H_v d_v]), T = B * S tokens request by request (uniform, B from initial_state; or ragged by
# cu_seqlens); decay [T, H_v (x d_k)] and beta [T, H_v]; the state [B, H_v, d_v, d_k] (V-major), always float32.
# The recurrence is linear_recurrence's, H_v the state's heads (each query/key head shared by H_v / H_q of them).

_GATES = ("none", "softplus", "qwen", "sigmoid", "kda")


def check_gated_delta_net(node, graph):
    a = node.attrs
    if a.get("update_rule", "gated_delta") not in _RULES:
        return f"update_rule={a['update_rule']!r} is not defined"
    if a.get("gate_activation", "none") not in _GATES or a.get("beta_activation", "none") not in ("none", "sigmoid"):
        return f"gate_activation {a.get('gate_activation')!r} / beta_activation {a.get('beta_activation')!r}"
    if a.get("state_update_capacity", 0) or any(node.inputs[9:]) or any(node.outputs[2:]):
        return "compact state updates (state_update_capacity, capture_count, state_update) are not supported"
    return None


def _gdn_tokens(x, name, rank4):
    """[T, ...] from query's layout (rank 4: [B, S, ...] flattened)."""
    if x is None:
        return None
    if rank4:
        if x.ndim < 3:
            raise ValueError(f"{name} must have a [batch, sequence] token axis")
        return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])
    return x


def gdn_geometry(q, k, v, ragged, leading, state, decay, beta, a_log_size, dt_bias_size, rule, gate) -> tuple:
    """(tokens, h_q, d_k, h_v, d_v, batch) of a GatedDeltaNet whose query, key and value are token-major [T, H, D]
    (shapes), as stock's kernel checks them (its messages: FAIL). ragged: the requests cu_seqlens gives, else None;
    leading: B of a [B, S] token axis, else None; state, decay, beta: shapes or None; a_log/dt_bias: sizes or None."""
    tokens, h_q, d_k = q
    h_v, d_v = v[1:]
    if tuple(k) != tuple(q) or v[0] != tokens:
        raise ValueError(f"key {tuple(k)} must be query's {tuple(q)} and value {tuple(v)} of {tokens} tokens")
    if h_q <= 0 or h_v % h_q:
        raise ValueError(f"num_heads_v ({h_v}) must be a positive multiple of num_heads_q ({h_q})")
    if ragged is None and state is None:
        raise ValueError("cu_seqlens is absent, so initial_state is required to determine batch size")
    batch = ragged if ragged is not None else leading if leading is not None else state[0]
    if ragged is None and (batch <= 0 or tokens % batch):
        raise ValueError(f"total_tokens ({tokens}) must be divisible by batch ({batch})")
    state_shape = (batch, h_v, d_v, d_k)
    if state is not None and tuple(state) != state_shape:
        raise ValueError(f"initial_state must be [batch, num_heads_v, head_size_v, head_size_qk] = {state_shape}, got "
                         f"{tuple(state)}")
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if (decay is not None) != gated:
        raise ValueError("decay input presence must match update_rule")
    if (beta is not None) != delta:
        raise ValueError("beta input presence must match update_rule")
    if gated and int(np.prod(decay)) not in (tokens * h_v, tokens * h_v * d_k):
        raise ValueError(f"decay must be [T, {h_v}] or [T, {h_v}, {d_k}] for update_rule={rule}")
    if delta and int(np.prod(beta)) != tokens * h_v:
        raise ValueError(f"beta must be [T, {h_v}] for update_rule={rule}")
    if gated and gate != "none" and (a_log_size != h_v or dt_bias_size not in (h_v, h_v * d_k)):
        raise ValueError(f"gate_activation={gate!r} needs a_log [{h_v}] and dt_bias [{h_v}] or [{h_v}, {d_k}]")
    return tokens, h_q, d_k, h_v, d_v, batch


@kernel("GatedDeltaNet", domain="com.microsoft", types=HALF_FLOATS, check=check_gated_delta_net)
@np.errstate(over="ignore")
def gated_delta_net(query, key=None, value=None, cu_seqlens=None, decay=None, beta=None, initial_state=None,
                    a_log=None, dt_bias=None, capture_count=None, state_update_active=None, *, update_rule="gated_delta",
                    gate_activation="none", beta_activation="none", qk_l2_norm=0, scale=0.0, chunk_size=64,
                    gate_lower_bound=-5.0, state_update_capacity=0):
    packed = key is None and value is None
    rank4 = query.ndim == (3 if packed else 4)  # the token axis spelled [B, S]
    if query.ndim + packed not in (3, 4):
        raise ValueError(f"query must be rank {3 - packed} [T, ...] or rank {4 - packed} [B, S, ...], got rank "
                         f"{query.ndim}")
    if rank4 and cu_seqlens is not None:
        raise ValueError("cu_seqlens requires the rank-3 (token-major) layout")
    if packed:  # q|k|v in one: the heads from initial_state
        if initial_state is None or initial_state.ndim != 4:
            raise ValueError("packed QKV requires a rank-4 initial_state to determine the head counts")
        _, h_v, d_v, d_k = initial_state.shape
        rows = query.reshape(-1, query.shape[-1])
        h_q = (rows.shape[1] - h_v * d_v) // (2 * d_k) if d_k else 0
        if h_q <= 0 or rows.shape[1] != 2 * h_q * d_k + h_v * d_v:
            raise ValueError(f"packed QKV width {rows.shape[1]} is not 2 * H_q * {d_k} + {h_v} * {d_v}")
        q = rows[:, :h_q * d_k].reshape(-1, h_q, d_k)
        k = rows[:, h_q * d_k:2 * h_q * d_k].reshape(-1, h_q, d_k)
        v = rows[:, 2 * h_q * d_k:].reshape(-1, h_v, d_v)
    elif key is None or value is None:
        raise ValueError("key and value are both given or both absent (packed QKV)")
    else:
        q, k, v = (_gdn_tokens(x, n, rank4) for x, n in ((query, "query"), (key, "key"), (value, "value")))
        if q.ndim != 3 or k.ndim != 3 or v.ndim != 3:
            raise ValueError("query, key and value must be [T, heads, head_size]")
    starts = None if cu_seqlens is None else np.asarray(cu_seqlens).reshape(-1).astype(np.int64)
    if starts is not None and (len(starts) < 2 or starts[0] != 0 or starts[-1] != q.shape[0] or
                               np.any(np.diff(starts) < 0)):
        raise ValueError(f"cu_seqlens must start at 0 and end at total_tokens ({q.shape[0]}), never decreasing")
    tokens, h_q, d_k, h_v, d_v, batch = gdn_geometry(
        q.shape, k.shape, v.shape, None if starts is None else len(starts) - 1, query.shape[0] if rank4 else None,
        shape_or_none(initial_state), shape_or_none(decay), shape_or_none(beta),
        None if a_log is None else a_log.size, None if dt_bias is None else dt_bias.size, update_rule, gate_activation)
    if starts is None:
        starts = np.arange(batch + 1) * (tokens // batch)
    state_shape = (batch, h_v, d_v, d_k)
    gated, delta = update_rule in ("gated", "gated_delta"), update_rule in ("delta", "gated_delta")
    g = _gdn_tokens(decay, "decay", rank4)
    rate = _gdn_tokens(beta, "beta", rank4)
    if gated:
        g = g.reshape(tokens, h_v, -1).astype(_F32)
        if gate_activation != "none":
            a = np.exp(a_log.reshape(h_v, 1).astype(_F32))
            x = g + dt_bias.reshape(h_v, -1).astype(_F32)
            g = (-a * np.logaddexp(_F32(0), x) if gate_activation in ("softplus", "qwen")
                 else _F32(gate_lower_bound) / (_F32(1) + np.exp(-a * x)))
        g = g.reshape(tokens, -1)
    if delta:
        rate = rate.reshape(tokens, h_v).astype(_F32)
        if beta_activation == "sigmoid":
            rate = _F32(1) / (_F32(1) + np.exp(-rate))
    q, k = q.astype(_F32), k.astype(_F32)
    if qk_l2_norm:
        q, k = (x / np.sqrt(np.maximum((x * x).sum(-1, keepdims=True), _F32(1e-12))) for x in (q, k))
    out = np.zeros((tokens, max(h_q, h_v), d_v), _F32)
    final = np.zeros(state_shape, _F32)
    for b in range(batch):
        t0, t1 = int(starts[b]), int(starts[b + 1])
        if t0 == t1:  # a request without tokens keeps its state
            final[b] = 0 if initial_state is None else initial_state[b]
            continue
        flat = lambda x, w: None if x is None else x[t0:t1].reshape(1, t1 - t0, w)  # noqa: E731
        past = None if initial_state is None else initial_state[b:b + 1].astype(_F32).transpose(0, 1, 3, 2)
        y, state = linear_recurrence(flat(q, h_q * d_k), flat(k, h_q * d_k), flat(v.astype(_F32), h_v * d_v), past,
                                     flat(g, g.shape[1]) if gated else None, flat(rate, h_v) if delta else None,
                                     h_q, h_v, scale, update_rule)
        out[t0:t1] = y.reshape(t1 - t0, -1, d_v)
        final[b] = state[0].transpose(0, 2, 1)
    out = out.reshape(*query.shape[:2], *out.shape[1:]) if rank4 else out
    return out.astype(query.dtype), final
