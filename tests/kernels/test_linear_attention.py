"""Parity tests for the ops of Qwen3.5-class hybrid decoders (the builder's linear-attention layers) against stock ORT's
CPU EP: com.microsoft LinearAttention (every update rule; GQA, inverse GQA, fewer K than V heads; per-head and
per-key decay), LinearAttentionGate, GatedRMSNorm and MRotaryEmbedding (both section layouts, partial rotary, 3-D and
4-D input). Every model runs entirely on our EP.

Tolerances: the recurrence's readouts are dot products over d_k of states built over T tokens, summed in another
order than stock's loops or MLAS GEMMs: rtol 1e-5, atol 1e-5 on O(1) values. The gates and the norm are a few
float32 operations per element (exp/log from numpy's libm rather than stock's): rtol 1e-5, atol 1e-6. Rotary
embeddings are two products and a sum per element: rtol 1e-6, atol 1e-6. float16 outputs: one rounding apart.
"""
import numpy as np
import pytest

from parity import assert_parity, named_node_model

rng = np.random.default_rng(23)
MS = "com.microsoft"
F16, F32, I64 = np.float16, np.float32, np.int64


def data(*shape, scale=1.0, dtype=F32):
    return (scale * rng.standard_normal(shape)).astype(dtype)


def l2(x, d):
    """Rows of d along the last axis normalized (the builder L2-normalizes K for the delta rules)."""
    shaped = x.reshape(*x.shape[:-1], -1, d)
    return (shaped / np.linalg.norm(shaped, axis=-1, keepdims=True)).reshape(x.shape).astype(x.dtype)


# --- LinearAttention ---------------------------------------------------------------------------------------------

def linear_attention(b, t, q_heads, kv_heads, k_heads, d_k, d_v, rule="gated_delta", past=True, decay="head",
                     beta="head", scale=0.0):
    inputs = [("query", data(b, t, q_heads * d_k, scale=0.5)), ("key", l2(data(b, t, k_heads * d_k), d_k)),
              ("value", data(b, t, kv_heads * d_v)),
              ("past_state", data(b, kv_heads, d_k, d_v, scale=0.3) if past else None)]
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    width = kv_heads if decay == "head" else kv_heads * d_k
    inputs.append(("decay", -np.abs(data(b, t, width, scale=0.5)) if gated else None))
    inputs.append(("beta", (1 / (1 + np.exp(-data(b, t, kv_heads if beta == "head" else 1)))).astype(F32)
                   if delta else None))
    while inputs[-1][1] is None:
        inputs.pop()
    attrs = dict(q_num_heads=q_heads, kv_num_heads=kv_heads, update_rule=rule)
    if scale:
        attrs["scale"] = scale
    return named_node_model("LinearAttention", inputs, [F32, F32], attrs, opset=21, domain=MS)


@pytest.mark.parametrize("heads", [(2, 4, 2), (4, 2, 2), (4, 4, 4), (4, 4, 2), (1, 4, 1)],
                         ids=["inverse_gqa", "gqa", "mha", "fewer_k_heads", "one_query_head"])
@pytest.mark.parametrize("t", [1, 5])
def test_linear_attention_heads(heads, t):
    assert_parity(*linear_attention(2, t, *heads, 8, 6), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rule,past,decay,beta", [
    ("linear", False, "head", "head"), ("gated", True, "key", "head"), ("delta", True, "head", "one"),
    ("gated_delta", False, "key", "one"), ("gated_delta", True, "head", "head")])
def test_linear_attention_rules(rule, past, decay, beta):
    assert_parity(*linear_attention(1, 4, 2, 2, 2, 16, 16, rule, past, decay, beta, scale=0.7), rtol=1e-5, atol=1e-5)


def test_linear_attention_builder_widths():
    # Qwen3.5's: 16 key heads, 32 value heads of 128 (d_k * d_v over MLAS's GEMM threshold), a prompt then a step
    for t in (7, 1):
        assert_parity(*linear_attention(1, t, 16, 32, 16, 128, 128, scale=1.0), rtol=1e-5, atol=1e-5)


# --- LinearAttentionGate, GatedRMSNorm ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("with_beta", [True, False])
def test_linear_attention_gate(dtype, with_beta):
    heads = 6
    a = data(2, 3, heads, scale=4.0, dtype=dtype)  # softplus on both sides of 0, large arguments too
    inputs = [("a", a), ("dt_bias", data(heads)), ("decay_scale", -np.exp(data(heads))),
              ("b", data(2, 3, heads, scale=3.0, dtype=dtype) if with_beta else None)]
    model, feeds = named_node_model("LinearAttentionGate", inputs, [dtype, dtype] if with_beta else [dtype], {},
                                    opset=21, domain=MS, const=("dt_bias", "decay_scale"))
    tol = 1e-3 if dtype == F16 else 1e-5
    assert_parity(model, feeds, rtol=tol, atol=tol if dtype == F16 else 1e-6)


@pytest.mark.parametrize("activation", ["silu", "swish", "sigmoid"])
@pytest.mark.parametrize("dtype", [F32, F16])
def test_gated_rms_norm(activation, dtype):
    # scale of 8 over rows of 3 heads: the norm runs per head of the packed last axis
    inputs = [("X", data(2, 5, 24, dtype=dtype)), ("scale", data(8, dtype=dtype)),
              ("gate", data(2, 5, 24, dtype=dtype))]
    model, feeds = named_node_model("GatedRMSNorm", inputs, [dtype], dict(activation=activation, epsilon=1e-6),
                                    opset=21, domain=MS, const=("scale",))
    tol = 2e-3 if dtype == F16 else 1e-5
    assert_parity(model, feeds, rtol=tol, atol=tol if dtype == F16 else 1e-6)


# --- MRotaryEmbedding ----------------------------------------------------------------------------------------------

def rope_caches(max_pos, half, theta=10000.0):
    ang = np.arange(max_pos)[:, None] * (1.0 / theta ** (np.arange(half) / half))[None, :]
    return np.cos(ang).astype(F32), np.sin(ang).astype(F32)


def mrotary(layout, section, rank, rot_dim=0, interleaved=0, dtype=F32, scale=None, b=2, s=3, n=3, h=16):
    x = data(b, s, n * h, dtype=dtype) if rank == 3 else data(b, n, s, h, dtype=dtype)
    t = rng.integers(0, 40, (b, s))
    positions = np.stack([t, t + rng.integers(0, 3, (b, s)), t + rng.integers(0, 5, (b, s))]).astype(I64)
    cos, sin = rope_caches(48, (rot_dim or h) // 2)
    attrs = dict(mrope_section=section, mrope_layout=layout, interleaved=interleaved, num_heads=n)
    if rot_dim:
        attrs["rotary_embedding_dim"] = rot_dim
    if scale is not None:
        attrs["scale"] = scale
    inputs = [("input", x), ("position_ids", positions), ("cos_cache", cos.astype(dtype)),
              ("sin_cache", sin.astype(dtype))]
    return named_node_model("MRotaryEmbedding", inputs, [dtype], attrs, opset=21, domain=MS,
                            const=("cos_cache", "sin_cache"))


@pytest.mark.parametrize("layout,section", [(0, [2, 3, 3]), (1, [2, 3, 3]), (1, [4, 2, 2]), (0, [8, 0, 0])])
@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("interleaved", [0, 1])
def test_mrotary_embedding(layout, section, rank, interleaved):
    assert_parity(*mrotary(layout, section, rank, interleaved=interleaved), rtol=1e-6, atol=1e-6)


def test_mrotary_embedding_partial_scaled_and_float16():
    # the builder's Qwen3.5 layer: rotary on 16 of 64 channels, interleaved sections [2, 3, 3]
    assert_parity(*mrotary(1, [2, 3, 3], 3, rot_dim=16, h=64), rtol=1e-6, atol=1e-6)
    assert_parity(*mrotary(1, [2, 3, 3], 3, rot_dim=16, h=64, scale=0.5), rtol=1e-6, atol=1e-6)
    assert_parity(*mrotary(0, [2, 3, 3], 4, dtype=F16), rtol=2e-3, atol=2e-3)


# --- GatedAdd (Qwen3.5-MoE's shared expert joining the routed experts) ---------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16])
def test_gated_add(dtype):
    inputs = [("X", data(2, 3, 16, dtype=dtype)), ("Y", data(2, 3, 16, dtype=dtype)),
              ("gate", (1 / (1 + np.exp(-data(2, 3, 1)))).astype(dtype))]
    model, feeds = named_node_model("GatedAdd", inputs, [dtype], {}, opset=21, domain=MS)
    assert_parity(model, feeds, rtol=0, atol=0)  # one product and one sum, each rounded as stock rounds them


# --- GatedDeltaNet (com.microsoft): token-major, its gates and L2 norms fused ------------------------------------

def gated_delta_net(batch=2, seq=5, h_q=2, h_v=4, d_k=8, d_v=6, rule="gated_delta", gate="softplus", beta="sigmoid",
                    l2_norm=1, dtype=F32, per_key=False, rank4=False, ragged=None, packed=False, state=True,
                    scale=0.0):
    tokens = batch * seq if ragged is None else ragged[-1]
    shape = (lambda *d: (batch, seq, *d)) if rank4 else (lambda *d: (tokens, *d))
    q, k, v = data(*shape(h_q, d_k), dtype=dtype), data(*shape(h_q, d_k), dtype=dtype), data(*shape(h_v, d_v),
                                                                                               dtype=dtype)
    if not l2_norm:  # the delta rules need unit keys (the schema: normalize upstream or set qk_l2_norm)
        k = l2(k, d_k)
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    inputs = [("query", np.concatenate([x.reshape(*x.shape[:-2], -1) for x in (q, k, v)], -1) if packed else q),
              ("key", None if packed else k), ("value", None if packed else v),
              ("cu_seqlens", None if ragged is None else np.array(ragged, np.int32)),
              ("decay", data(*shape(h_v, d_k) if per_key else shape(h_v)) if gated else None),
              ("beta", data(*shape(h_v)) if delta else None),
              ("initial_state", data(batch, h_v, d_v, d_k, scale=0.3) if state else None),
              ("a_log", data(h_v) if gate != "none" else None),
              ("dt_bias", data(*((h_v, d_k) if per_key else (h_v,))) if gate != "none" else None)]
    if gate == "none" and gated:  # an effective log-space decay: negative
        inputs[4] = ("decay", -np.abs(inputs[4][1]))
    if beta == "none" and delta:
        inputs[5] = ("beta", (1 / (1 + np.exp(-inputs[5][1]))).astype(F32))
    while inputs[-1][1] is None:
        inputs.pop()
    attrs = dict(update_rule=rule, gate_activation=gate, beta_activation=beta, qk_l2_norm=l2_norm)
    if scale:
        attrs["scale"] = scale
    return named_node_model("GatedDeltaNet", inputs, [dtype, F32], attrs, opset=21, domain=MS,
                            const=("a_log", "dt_bias"))


@pytest.mark.parametrize("case", [
    {}, {"l2_norm": 0}, {"rule": "linear", "gate": "none", "beta": "none"}, {"rule": "gated", "beta": "none"},
    {"rule": "delta", "gate": "none"}, {"gate": "none", "beta": "none"}, {"gate": "sigmoid"}, {"gate": "qwen"},
    {"per_key": True}, {"rank4": True}, {"dtype": F16}, {"h_q": 4, "h_v": 4}, {"ragged": [0, 3, 3, 9]},
    {"ragged": [0, 2, 7], "state": False}, {"ragged": [0, 4, 7], "packed": True}, {"packed": True, "rank4": True},
    {"scale": 0.3}, {"seq": 1}],
    ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "qwen3.5")
def test_gated_delta_net(case):
    """Every update rule, both fused gates (softplus alias qwen, sigmoid alias kda), the sigmoid beta, the query/key
    L2 norms, per-key decay, [B, S] token axes, ragged requests (cu_seqlens; no initial state: zeros), packed q|k|v,
    inverse GQA and plain heads, float16."""
    if case.get("ragged"):
        case = {"batch": len(case["ragged"]) - 1, **case}
    model, feeds = gated_delta_net(**case)
    tol = 2e-3 if case.get("dtype") == F16 else 1e-5
    assert_parity(model, feeds, rtol=tol, atol=tol)


@pytest.mark.parametrize("case,error", [
    ({"rule": "linear", "gate": "none"}, "decay input presence must match update_rule"),
    ({"seq": 5, "ragged": None, "state": False}, "initial_state is required"),
])
def test_gated_delta_net_errors(case, error):
    """What stock's kernel refuses, refused as it does (FAIL, the node named)."""
    from parity import ep_session, stock_session
    model, feeds = gated_delta_net(**case)
    if case.get("rule") == "linear":  # a decay the linear rule does not take
        import onnx
        node = model.graph.node[0]
        model.graph.input.append(onnx.helper.make_tensor_value_info("decay", onnx.TensorProto.FLOAT, [10, 4]))
        node.input[4] = "decay"
        feeds["decay"] = data(10, 4)
    for make in (stock_session, ep_session):
        with pytest.raises(Exception, match=error):
            make(model).run(None, feeds)


@pytest.mark.parametrize("case", [{}, {"l2_norm": 0}, {"rule": "linear", "gate": "none", "beta": "none"},
                                  {"rule": "delta", "gate": "none"}, {"rank4": True}, {"h_q": 4, "h_v": 4}],
                         ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "qwen3.5")
def test_gated_delta_net_is_native(case, capfd):
    """GatedDeltaNet's uniform float32 exports (the builder's Qwen3.5 one among them) as native steps (its gates, the
    query/key norms, the state transposed, LinearAttention's recurrence): no Python step from the third run on."""
    from parity import assert_native_without_python_steps
    assert_native_without_python_steps(*gated_delta_net(**case), capfd)


def qwen3_5_layer_parts(dtype, t, heads, kv_heads, d_k, d_v):
    """Qwen3.5's linear attention as its export writes it (q, k and v split from one row; q and k each through
    Reshape, LpNormalization, Reshape; q times 1/sqrt(d_k)), and its full attention's MRotaryEmbedding between
    Casts to float32 and back: the model in dtype."""
    from onnx import TensorProto, helper, numpy_helper
    kind = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    k_heads = min(heads, kv_heads)  # as many key heads as query heads, or as value heads where fewer (GQA)
    widths = [heads * d_k, k_heads * d_k, kv_heads * d_v]
    const = lambda name, v: numpy_helper.from_array(np.asarray(v), name)  # noqa: E731
    inits = [const("widths", np.array(widths, I64)), const("q_flat", np.array([0, 0, heads, d_k], I64)),
             const("k_flat", np.array([0, 0, k_heads, d_k], I64)), const("q_unflat", np.array([0, 0, heads * d_k], I64)),
             const("k_unflat", np.array([0, 0, k_heads * d_k], I64)), const("scale", np.array(d_k ** -0.5, dtype)),
             const("cos", np.cos(np.arange(max(64, t))[:, None] * 0.1 * np.arange(8)).astype(F32)),  # a row a position
             const("sin", np.sin(np.arange(max(64, t))[:, None] * 0.1 * np.arange(8)).astype(F32))]
    nodes = [helper.make_node("Split", ["x", "widths"], ["q0", "k0", "v"], axis=-1)]
    for name in ("q", "k"):
        nodes += [helper.make_node("Reshape", [f"{name}0", f"{name}_flat"], [f"{name}1"]),
                  helper.make_node("LpNormalization", [f"{name}1"], [f"{name}2"], axis=-1, p=2),
                  helper.make_node("Reshape", [f"{name}2", f"{name}_unflat"], [f"{name}3" if name == "q" else "k"])]
    nodes += [helper.make_node("Mul", ["q3", "scale"], ["q"]),
              helper.make_node("LinearAttention", ["q", "k", "v", "past", "decay", "beta"], ["out", "present"],
                               domain=MS, q_num_heads=heads, kv_num_heads=kv_heads, update_rule="gated_delta",
                               scale=1.0),
              helper.make_node("Cast", ["x"], ["x32"], to=TensorProto.FLOAT),
              helper.make_node("MRotaryEmbedding", ["x32", "positions", "cos", "sin"], ["r32"], domain=MS,
                               mrope_section=[4, 2, 2], num_heads=1, rotary_embedding_dim=16),
              helper.make_node("Cast", ["r32"], ["rotated"], to=kind)]
    width = sum(widths)
    inputs = [helper.make_tensor_value_info("x", kind, [1, t, width]),
              helper.make_tensor_value_info("past", kind, [1, kv_heads, d_k, d_v]),
              helper.make_tensor_value_info("decay", kind, [1, t, kv_heads]),
              helper.make_tensor_value_info("beta", kind, [1, t, kv_heads]),
              helper.make_tensor_value_info("positions", TensorProto.INT64, [3, 1, t])]
    outputs = [helper.make_tensor_value_info(n, kind, None) for n in ("out", "present", "rotated")]
    return helper.make_model(helper.make_graph(nodes, "qwen3_5_parts", inputs, outputs, inits),
                             opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])
