"""LinearAttention (ONNX opset 27): recurrent linear attention with optional gating and delta rule.

Q, K, V are packed [B, T, H * D]; the state S is [B, H_kv, d_k, d_v]. Per token t and KV head:
    gated:  S <- exp(g_t) * S                         (g_t: decay, per head or per key dim)
    delta:  v_t <- beta_t * (v_t - S^T k_t)
    always: S <- S + k_t (x) v_t ;  o_t = scale * q_t^T S   (query heads share their KV head's S)
Computed in float32, token by token, as the spec's reference does.
"""
import numpy as np

from ..registry import FLOATS, kernel

_F32 = np.float32
_RULES = ("linear", "gated", "delta", "gated_delta")


def _heads(x, n):
    """[B, T, H * D] -> [B, H, T, D] (float32)."""
    b, t, hd = x.shape
    return x.reshape(b, t, n, hd // n).transpose(0, 2, 1, 3).astype(_F32)


def _check(node, graph):
    rule = node.attrs.get("update_rule", "gated_delta")
    if rule not in _RULES:
        return f"update_rule={rule!r} is not defined"
    return None


@kernel("LinearAttention", since=27, types=FLOATS, check=_check)
def linear_attention(query, key, value, past_state=None, decay=None, beta=None, *, chunk_size=64, kv_num_heads,
                     q_num_heads, scale=0.0, update_rule="gated_delta"):
    # chunk_size only tunes chunked implementations; the result is that of the token-by-token recurrence
    b, t, _ = query.shape
    q, k, v = _heads(query, q_num_heads), _heads(key, kv_num_heads), _heads(value, kv_num_heads)
    d_k, d_v = q.shape[-1], v.shape[-1]
    gated, delta = update_rule in ("gated", "gated_delta"), update_rule in ("delta", "gated_delta")
    if gated:  # per head [B, T, H_kv] or per key dim [B, T, H_kv * d_k] -> [B, H_kv, T, 1 or d_k]
        g = _heads(decay, kv_num_heads)
    if delta:  # [B, T, H_kv or 1] -> [B, H_kv or 1, T, 1]
        rate = beta.reshape(b, t, beta.shape[-1], 1).transpose(0, 2, 1, 3).astype(_F32)
    state = np.zeros((b, kv_num_heads, d_k, d_v), _F32) if past_state is None else past_state.astype(_F32)
    scale = _F32(scale) if scale else _F32(1 / np.sqrt(d_k))
    group = q_num_heads // kv_num_heads
    out = np.zeros((b, q_num_heads, t, d_v), _F32)
    for i in range(t):
        k_t, v_t = k[:, :, i], v[:, :, i]
        if gated:
            state = state * np.exp(g[:, :, i])[..., None]
        if delta:
            v_t = rate[:, :, i] * (v_t - np.einsum("bhdm,bhd->bhm", state, k_t))
        state = state + k_t[..., :, None] * v_t[..., None, :]
        out[:, :, i] = scale * np.einsum("bhd,bhdm->bhm", q[:, :, i], np.repeat(state, group, axis=1))
    y = out.transpose(0, 2, 1, 3).reshape(b, t, q_num_heads * d_v).astype(query.dtype)
    return y, state.astype(query.dtype if past_state is None else past_state.dtype)
