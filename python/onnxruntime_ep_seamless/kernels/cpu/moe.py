"""Mixture of experts (com.microsoft MoE): each token's top-k experts by the router's softmax, each expert an
FFN (fc1, the activation, fc2), their outputs summed with the routing weights. Float16 through float32."""
import numpy as np

from ..checks import InvalidArgument
from ..registry import FLOATS, kernel

_ACTIVATIONS = ("relu", "silu", "swiglu", "identity")


def check_moe(node, graph):
    attrs = node.attrs
    if attrs.get("activation_type", "relu") not in _ACTIVATIONS:
        return f"activation_type {attrs['activation_type']!r} is not relu, silu, swiglu or identity"
    if attrs.get("use_sparse_mixer", 0):
        return "use_sparse_mixer=1 is not supported"
    if attrs.get("swiglu_limit_after_activation", 0):
        return "swiglu_limit_after_activation=1 is CUDA's"
    if any(node.inputs[6:8]):
        return "separate fc3 weights are not supported"
    return None


def validate_moe(node, graph):
    """What stock's CPU kernel refuses when it loads the model (FAIL)."""
    if node.attrs.get("k", 1) < 1:
        raise ValueError(f"MoE attribute 'k' must be >= 1, got {node.attrs['k']}")
    if node.attrs.get("activation_type") == "swiglu" and node.attrs.get("swiglu_fusion", 0) != 1:
        raise ValueError("CPU MoE only supports interleaved SwiGLU format. Please set swiglu_fusion=1.")


def _expect(name: str, array, shape: tuple) -> None:
    if array is not None and tuple(array.shape) != shape:
        braces = lambda dims: "{" + ",".join(str(d) for d in dims) + "}"
        raise InvalidArgument(f"Input '{name}' is expected to have shape {braces(shape)}, got {braces(array.shape)}")


def moe_geometry(x, router_probs, fc1, fc1_bias, fc2, fc2_bias, fusion: int, k: int) -> tuple[int, int, int]:
    """(tokens, experts, inter_size) with stock's checks: the experts from router_probs, inter_size from fc2."""
    hidden = x.shape[-1]
    tokens = x.size // hidden if hidden else 0
    if router_probs.ndim != 2 or fc2.ndim != 3 or x.ndim not in (2, 3):
        raise InvalidArgument(f"MoE: input {x.shape}, router_probs {router_probs.shape} and fc2_experts_weights "
                              f"{fc2.shape} must be 2-D or 3-D, 2-D and 3-D")
    experts, inter = router_probs.shape[1], fc2.shape[2]
    _expect("router_probs", router_probs, (tokens, experts))
    _expect("fc1_experts_weights", fc1, (experts, fusion * inter, hidden))
    _expect("fc1_experts_bias", fc1_bias, (experts, fusion * inter))
    _expect("fc2_experts_weights", fc2, (experts, hidden, inter))
    _expect("fc2_experts_bias", fc2_bias, (experts, hidden))
    if k > experts:
        raise ValueError(f"MoE attribute 'k' must be <= num_experts; got k={k}, num_experts={experts}")
    return tokens, experts, inter


def _activation(h, kind, alpha, beta, limit):
    if kind == "relu":
        return np.maximum(h, 0)
    if kind == "silu":
        return h / (1 + np.exp(-h))
    if kind == "identity":
        return h
    gate, lin = h[..., 0::2], h[..., 1::2]  # swiglu: gate and linear interleaved (swiglu_fusion=1, as stock's CPU)
    if limit is not None:
        gate, lin = np.minimum(gate, limit), np.clip(lin, -limit, limit)
    return gate / (1 + np.exp(-alpha * gate)) * (lin + beta)


@kernel("MoE", domain="com.microsoft", types=FLOATS, check=check_moe, validate=validate_moe)
def moe(x, router_probs, fc1_experts_weights, fc1_experts_bias=None, fc2_experts_weights=None,
        fc2_experts_bias=None, fc3_experts_weights=None, fc3_experts_bias=None, *, k=1, activation_type="relu",
        activation_alpha=1.0, activation_beta=0.0, normalize_routing_weights=0, swiglu_fusion=0, swiglu_limit=None,
        use_sparse_mixer=0, swiglu_limit_after_activation=0):
    tokens, _, _ = moe_geometry(x, router_probs, fc1_experts_weights, fc1_experts_bias, fc2_experts_weights,
                                fc2_experts_bias, 2 if activation_type == "swiglu" else 1, k)
    rows = x.reshape(tokens, x.shape[-1]).astype(np.float32)
    logits = router_probs.astype(np.float32)
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs = e / e.sum(axis=1, keepdims=True)
    top = np.argsort(-probs, axis=1, kind="stable")[:, :k]
    weights = np.take_along_axis(probs, top, axis=1)
    if normalize_routing_weights:
        weights = weights / weights.sum(axis=1, keepdims=True)
    out = np.zeros_like(rows)
    for expert in np.unique(top):
        tokens, slot = np.nonzero(top == expert)
        h = rows[tokens] @ fc1_experts_weights[expert].astype(np.float32).T
        if fc1_experts_bias is not None:
            h = h + fc1_experts_bias[expert].astype(np.float32)
        h = _activation(h, activation_type, activation_alpha, activation_beta, swiglu_limit)
        y = h @ fc2_experts_weights[expert].astype(np.float32).T
        if fc2_experts_bias is not None:
            y = y + fc2_experts_bias[expert].astype(np.float32)
        np.add.at(out, tokens, weights[tokens, slot][:, None] * y)
    return (out.reshape(x.shape).astype(x.dtype),)
