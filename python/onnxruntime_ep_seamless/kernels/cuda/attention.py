"""ONNX Attention (opsets 23-24) on CUDA, composed of our kernels: batched products for Q K^T and
P V (matmul.batched_product), broadcast adds for the masks, the softmax row kernel. float16/bfloat16
inputs compute in float32 and round the outputs once, as the CPU kernel (kernels/cpu/contrib_attention.py).
LinearAttention (opset 27): attention.cu's recurrence, a block per (batch, KV head)."""
import struct

import numpy as np

from ...runtime.cuda import DeviceTensor
from ..cpu.contrib_attention import _check_attention, attention_shapes
from ..cpu.linear_attention import _check as _check_linear_attention
from ..registry import kernel
from .elementwise import ADD, DIV_BY, GPU_FLOATS, MUL_BY, SUFFIX, binary, cast_to, device_scalar, unary, where
from .matmul import batched_product
from .rows import ZERO_MASKED_ROWS, softmax_rows
from .shape import concat, permuted

F32 = np.dtype(np.float32)
TANH = 2  # UnaryOp


def _check(node, graph):
    if len(node.inputs) > 6 and node.inputs[6]:
        return "nonpad_kv_seqlen is not supported on CUDA"
    return _check_attention(node, graph)


@kernel("Attention", since=23, until=24, types=GPU_FLOATS, device="cuda", check=_check)
def attention(rt, stream, Q, K, V, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None, *,
              is_causal=0, kv_num_heads=0, q_num_heads=0, qk_matmul_output_mode=0, scale=None, softcap=0.0,
              softmax_precision=1, _num_outputs=1):
    scratch = []

    def keep(t):
        scratch.append(t)
        return t

    three_d = len(Q.shape) == 3
    attention_shapes(Q, K, V, past_key, past_value, q_num_heads, kv_num_heads)
    if three_d:  # (B, S, N*H) -> (B, N, S, H)
        def heads(x, n):
            view = DeviceTensor(x.ptr, (x.shape[0], x.shape[1], n, x.shape[2] // n), x.dtype)
            return keep(permuted(rt, stream, view, [0, 2, 1, 3]))
        q, k, v = heads(Q, q_num_heads), heads(K, kv_num_heads), heads(V, kv_num_heads)
    else:
        q, k, v = Q, K, V
    if past_key is not None:  # present = past ++ new, in the input type
        k, v = (keep(concat(rt, stream, p, x, axis=2)[0]) for p, x in ((past_key, k), (past_value, v)))
    present_k, present_v = k, v
    b, nq, s, h = q.shape
    nkv, t, hv = k.shape[1], k.shape[2], v.shape[3]
    q, k, v = (keep(cast_to(rt, stream, x, F32)) if x.dtype != F32 else x for x in (q, k, v))
    if nq != nkv:  # grouped heads: query head i reads key/value head i // (nq / nkv)
        k, v = (keep(_repeat_heads(rt, stream, x, nq // nkv)) for x in (k, v))
    sm_scale = float(scale) if scale is not None else 1.0 / float(np.sqrt(np.float32(h)))
    scores = keep(rt.alloc((b, nq, s, t), F32))
    batched_product(rt, stream, q, k, scores, s, t, h, b * nq, s * h, t * h, trans_b=True, alpha=sm_scale)
    qk_out = scores
    if softcap:
        scores = keep(unary(rt, stream, MUL_BY, keep(unary(rt, stream, TANH, keep(unary(
            rt, stream, DIV_BY, scores, float(softcap))))), float(softcap)))
        qk_out = scores if qk_matmul_output_mode == 1 else qk_out
    if attn_mask is not None:
        if attn_mask.shape[-1] != t:
            raise ValueError(f"attn_mask's last dimension {attn_mask.shape[-1]} differs from the {t} keys")
        if attn_mask.dtype == np.bool_:  # True: attend; False: -inf
            scores = keep(where(rt, stream, attn_mask, scores, keep(device_scalar(rt, stream, -np.inf)))[0])
        else:
            mask = keep(cast_to(rt, stream, attn_mask, F32)) if attn_mask.dtype != F32 else attn_mask
            scores = keep(binary(rt, stream, ADD, scores, mask))
    if is_causal:  # query i sees keys j <= i + the past length
        past = past_key.shape[2] if past_key is not None else 0
        future = np.arange(t)[None, :] > (past + np.arange(s))[:, None]
        causal = np.where(future, np.float32(-np.inf), np.float32(0))
        scores = keep(binary(rt, stream, ADD, scores, keep(rt.device(DeviceTensor.on_host(causal), stream))))
    if qk_matmul_output_mode == 2:
        qk_out = scores
    probs = keep(softmax_rows(rt, stream, scores, b * nq * s, t, ZERO_MASKED_ROWS))
    if qk_matmul_output_mode == 3:
        qk_out = probs
    out = keep(rt.alloc((b, nq, s, hv), F32))
    if t:
        batched_product(rt, stream, probs, v, out, s, hv, t, b * nq, s * t, t * hv)
    else:
        rt.zero(out, stream)
    if three_d:
        moved = keep(permuted(rt, stream, out, [0, 2, 1, 3]))
        out = DeviceTensor(moved.ptr, (b, s, nq * hv), F32)
    results = [cast_to(rt, stream, out, Q.dtype), present_k, present_v]
    if _num_outputs > 3:
        results.append(cast_to(rt, stream, qk_out, Q.dtype))
    results = results[:max(_num_outputs, 1)]
    returned = {r.ptr for r in results}
    for x in {x.ptr: x for x in scratch}.values():
        if x.ptr not in returned and x.ptr not in (Q.ptr, K.ptr, V.ptr):
            rt.free(x)  # stream-ordered
    return tuple(results)


def _repeat_heads(rt, stream, x, group):
    """(B, Nkv, T, H) -> (B, Nkv * group, T, H), each head repeated `group` times."""
    b, n, t, h = x.shape
    y = rt.alloc((b, n * group, t, h), x.dtype)
    rt.strided_copy(stream, x, y, (b, n, group, t * h), [n * t * h, t * h, 0, 1], [n * group * t * h, group * t * h,
                                                                                   t * h, 1])
    return y


@kernel("LinearAttention", since=27, types=GPU_FLOATS, device="cuda", check=_check_linear_attention)
def linear_attention(rt, stream, query, key, value, past_state=None, decay=None, beta=None, *, chunk_size=64,
                     kv_num_heads, q_num_heads, scale=0.0, update_rule="gated_delta"):
    """The token-by-token recurrence (chunk_size only tunes chunked implementations), its state in float32."""
    b, t, width = query.shape
    d_k, d_v = width // q_num_heads, value.shape[-1] // kv_num_heads
    gated, delta = update_rule in ("gated", "gated_delta"), update_rule in ("delta", "gated_delta")
    problem = ("heads" if q_num_heads % kv_num_heads or width % q_num_heads or value.shape[-1] % kv_num_heads else
               "key" if key.shape != (b, t, kv_num_heads * d_k) else
               "value" if len(value.shape) != 3 or value.shape[:2] != (b, t) else
               "decay" if gated and (decay is None or len(decay.shape) != 3 or decay.shape[:2] != (b, t) or
                                     decay.shape[-1] not in (kv_num_heads, kv_num_heads * d_k)) else
               "beta" if delta and (beta is None or len(beta.shape) != 3 or beta.shape[:2] != (b, t) or
                                    beta.shape[-1] not in (kv_num_heads, 1)) else
               "past_state" if past_state is not None and tuple(past_state.shape) != (b, kv_num_heads, d_k, d_v) else "")
    if problem:
        raise ValueError(f"LinearAttention ({update_rule}): query {query.shape}, key {key.shape}, value {value.shape}, "
                         f"q_num_heads {q_num_heads}, kv_num_heads {kv_num_heads}: the {problem} input or attribute "
                         "does not fit (see the ONNX spec)")
    out = rt.alloc((b, t, q_num_heads * d_v), query.dtype)
    state = rt.alloc((b, kv_num_heads, d_k, d_v), F32)
    shape = struct.pack("<10if", b, t, q_num_heads, kv_num_heads, d_k, d_v, int(gated), int(delta),
                        int(gated and decay.shape[-1] != kv_num_heads), int(delta and beta.shape[-1] != 1),
                        float(np.float32(scale) if scale else np.float32(1 / np.sqrt(d_k))))
    shared = 4 * (d_k + d_v + (q_num_heads // kv_num_heads) * d_k)
    rt.launch_rows(f"seamless_linear_attention_{SUFFIX[query.dtype]}", b * kv_num_heads, stream, ("ptr", query.ptr),
                   ("ptr", key.ptr), ("ptr", value.ptr), ("ptr", past_state.ptr if past_state is not None else 0),
                   ("ptr", decay.ptr if gated else 0), ("ptr", beta.ptr if delta else 0), ("ptr", out.ptr),
                   ("ptr", state.ptr), ("bytes", shape), shared=shared)
    present = cast_to(rt, stream, state, query.dtype if past_state is None else past_state.dtype)
    if present is not state:
        rt.free(state)  # stream-ordered
    return out, present
