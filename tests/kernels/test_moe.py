"""com.microsoft MoE on the CPU EP against stock: routing (softmax, top-k, normalized or not), the activations,
biases, SwiGLU's alpha/beta/limit, 2-D and 3-D tokens, float16."""
import numpy as np
import pytest

from parity import check_node

rng = np.random.default_rng(7)


def moe_inputs(tokens, hidden, experts, inter, act, dtype=np.float32, bias=True, masked_k=0, shape3=False):
    x = rng.standard_normal((1, tokens, hidden) if shape3 else (tokens, hidden)).astype(dtype)
    router = rng.standard_normal((tokens, experts)).astype(dtype)
    if masked_k:  # as the builder's routers leave them: -inf outside each token's top k
        threshold = np.sort(router, axis=1)[:, -masked_k][:, None]
        router = np.where(router >= threshold, router, -np.inf).astype(dtype)
    fusion = 2 if act == "swiglu" else 1
    fc1 = (0.3 * rng.standard_normal((experts, fusion * inter, hidden))).astype(dtype)
    fc2 = (0.3 * rng.standard_normal((experts, hidden, inter))).astype(dtype)
    b1 = (0.1 * rng.standard_normal((experts, fusion * inter))).astype(dtype) if bias else None
    b2 = (0.1 * rng.standard_normal((experts, hidden))).astype(dtype) if bias else None
    return [x, router, fc1, b1, fc2, b2]


@pytest.mark.parametrize("act,k,normalize,extra", [
    ("swiglu", 2, 1, {}), ("swiglu", 2, 0, {}), ("swiglu", 3, 1, {"activation_alpha": 1.702, "activation_beta": 1.0,
                                                                "swiglu_limit": 7.0}),
    ("relu", 2, 1, {}), ("silu", 1, 0, {}), ("identity", 4, 1, {})])
def test_moe(act, k, normalize, extra):
    attrs = dict(k=k, activation_type=act, normalize_routing_weights=normalize, **extra)
    if act == "swiglu":
        attrs["swiglu_fusion"] = 1
    check_node("MoE", moe_inputs(9, 16, 4, 8, act), attrs, opset=21, domain="com.microsoft", const=(2, 3, 4, 5))


def test_moe_many_tokens():
    # more tokens per expert than the native step's chunk (program.h SEAMLESS_MOE_CHUNK), odd widths
    attrs = dict(k=3, activation_type="swiglu", swiglu_fusion=1, normalize_routing_weights=1)
    check_node("MoE", moe_inputs(70, 37, 4, 19, "swiglu"), attrs, opset=21, domain="com.microsoft",
               const=(2, 3, 4, 5))


def test_moe_masked_router_3d_no_bias_and_float16():
    attrs = dict(k=2, activation_type="swiglu", swiglu_fusion=1, normalize_routing_weights=1)
    check_node("MoE", moe_inputs(6, 16, 8, 8, "swiglu", bias=False, masked_k=2, shape3=True), attrs, opset=21,
               domain="com.microsoft", const=(2, 3, 4, 5))
    check_node("MoE", moe_inputs(6, 16, 4, 8, "swiglu", dtype=np.float16), attrs, opset=21, domain="com.microsoft",
               const=(2, 3, 4, 5), rtol=2e-3, atol=2e-3)
