"""Parity tests for attention and rotary ops (kernels/cpu/attention.py, native/cpu/attention.c)
against stock ORT's CPU EP: com.microsoft GroupQueryAttention, MultiHeadAttention, RotaryEmbedding;
ONNX Attention-23 and RotaryEmbedding-23. Every model runs entirely on our EP.

Tolerances: scores are dot products over the head size and outputs weighted sums over up to
T keys, accumulated in a different order than MLAS's GEMMs, and exp comes from libm or our
polynomial instead of MLAS's: rtol 1e-5, atol 1e-5 on O(1) values. Rotary embeddings are two
products and a sum per element: rtol 1e-6, atol 1e-6.
"""
import numpy as np
import pytest
from onnx import helper, numpy_helper

from parity import (assert_close, assert_native_without_python_steps, assert_parity, named_node_model, run_ours,
                    stock_session)

rng = np.random.default_rng(11)
MS = "com.microsoft"
F32, I32, I64 = np.float32, np.int32, np.int64
TOL = {"rtol": 1e-5, "atol": 1e-5}


def data(*shape):
    return rng.standard_normal(shape).astype(F32)


def build(op, inputs, n_outputs, attrs, domain="", opset=17, const=()):
    return named_node_model(op, inputs, [F32] * n_outputs, attrs, opset, domain, const)


def rope_caches(max_pos, rot_dim, theta=10000.0):
    inv = 1.0 / theta ** (np.arange(0, rot_dim, 2) / rot_dim)
    ang = np.arange(max_pos)[:, None] * inv[None, :]
    return np.cos(ang).astype(F32), np.sin(ang).astype(F32)


# --- GroupQueryAttention ----------------------------------------------------------------------

NH, KVH, H = 4, 2, 16


def gqa_model_feeds(b, s, past, seqlens, total, packed=True, rotary=True, rot_dim=None, const_cache=True,
                    heads=(NH, KVH, H), **attrs):
    NH, KVH, H = heads
    rot_dim = rot_dim or H
    if packed:
        qkv = [("query", data(b, s, (NH + 2 * KVH) * H)), ("key", None), ("value", None)]
    else:
        qkv = [("query", data(b, s, NH * H)), ("key", data(b, s, KVH * H)), ("value", data(b, s, KVH * H))]
    inputs = qkv + [("past_key", data(b, KVH, past, H)), ("past_value", data(b, KVH, past, H)),
                    ("seqlens_k", np.asarray(seqlens, I32)), ("total_sequence_length", np.array(total, I32))]
    if rotary:
        cos, sin = rope_caches(256, rot_dim)
        inputs += [("cos_cache", cos), ("sin_cache", sin)]
    a = {"num_heads": NH, "kv_num_heads": KVH, "do_rotary": int(rotary), **attrs}
    return build("GroupQueryAttention", inputs, 3, a, domain=MS, const=("cos_cache", "sin_cache") if const_cache else ())


GQA_SHAPES = {  # b, s, past buffer length, seqlens_k, total_sequence_length
    "prompt": (1, 8, 0, [7], 8),
    "prompt_batch": (2, 6, 0, [5, 5], 6),
    "decode_growing": (1, 1, 9, [9], 10),
    "decode_batch_growing": (3, 1, 5, [5, 5, 5], 6),
    "decode_shared_buffer": (1, 1, 32, [12], 13),
    "decode_shared_ragged": (2, 1, 32, [12, 20], 21),
    "subsequent_prompt": (1, 4, 6, [9], 10),
    "subsequent_prompt_shared": (1, 3, 24, [10], 11),
    "single_token_prompt": (1, 1, 0, [0], 1),
    # 12+ query rows a task: the GEMM path (attention.c gqa_attend_block); 70 rows: a block of 60, then 10 by rows
    "long_prompt": (1, 70, 0, [69], 70),
    "long_prompt_batch": (2, 24, 0, [23, 23], 24),
    "long_subsequent_prompt": (1, 20, 30, [49], 50),
}


@pytest.mark.parametrize("shape", list(GQA_SHAPES))
@pytest.mark.parametrize("packed", [True, False])
def test_gqa_shapes(shape, packed):
    model, feeds = gqa_model_feeds(*GQA_SHAPES[shape], packed=packed)
    assert_parity(model, feeds, **TOL)


@pytest.mark.parametrize("attrs", [
    {"rotary_interleaved": 1},
    {"local_window_size": 3},
    {"softcap": 2.0},
    {"smooth_softmax": 1},
    {"scale": 0.3},
    {"softcap": 1.5, "local_window_size": 2, "rotary_interleaved": 1},
    {"causal": 0},
], ids=lambda a: "-".join(f"{k}={v}" for k, v in a.items()))
@pytest.mark.parametrize("shape", ["prompt", "decode_growing", "decode_shared_ragged", "subsequent_prompt", "long_prompt",
                                   "long_subsequent_prompt"])
def test_gqa_attributes(attrs, shape):
    model, feeds = gqa_model_feeds(*GQA_SHAPES[shape], **attrs)
    assert_parity(model, feeds, **TOL)


@pytest.mark.parametrize("shape", ["prompt", "decode_shared_ragged"])
def test_gqa_without_rotary(shape):
    model, feeds = gqa_model_feeds(*GQA_SHAPES[shape], rotary=False)
    assert_parity(model, feeds, **TOL)


@pytest.mark.parametrize("shape", ["prompt", "decode_growing"])
@pytest.mark.parametrize("interleaved", [0, 1])
def test_gqa_partial_rotary(shape, interleaved):
    """Rotary on the first 16 of 32 channels (ORT needs cos_cache width a multiple of 8)."""
    model, feeds = gqa_model_feeds(*GQA_SHAPES[shape], rot_dim=16, heads=(4, 2, 32), rotary_interleaved=interleaved)
    assert_parity(model, feeds, **TOL)


@pytest.mark.parametrize("shape", ["prompt", "decode_shared_ragged", "long_prompt"])
def test_gqa_head_sink(shape):
    model, feeds = gqa_model_feeds(*GQA_SHAPES[shape])
    sink = data(NH)
    node = model.graph.node[0]
    node.input.extend([""] * (11 - len(node.input)) + ["head_sink"])
    model.graph.input.append(helper.make_tensor_value_info("head_sink", 1, [NH]))
    feeds["head_sink"] = sink
    assert_parity(model, feeds, **TOL)


@pytest.mark.parametrize("shape", [(1, 1, 130, [130], 131), (1, 16, 0, [15], 16), (2, 1, 200, [150, 199], 200)],
                         ids=["decode", "prompt", "decode_shared_ragged"])
def test_gqa_qwen_shapes(shape):
    """The shapes of the Qwen2.5-0.5B decoder (14 query heads, 2 KV heads, head size 64)."""
    model, feeds = gqa_model_feeds(*shape, heads=(14, 2, 64))
    assert_parity(model, feeds, **TOL)


def test_gqa_padded_prompt_valid_rows():
    """A right-padded batch prompt: rows past seqlens_k[b] are unspecified, compare the rest."""
    model, feeds = gqa_model_feeds(2, 6, 0, [5, 3], 6)
    ref = stock_session(model).run(None, feeds)
    ours = run_ours(model, feeds)
    for b, valid in enumerate([6, 4]):
        assert_close(ours[0][b, :valid], ref[0][b, :valid], name=f"output batch {b}", **TOL)
        assert_close(ours[1][b, :, :valid], ref[1][b, :, :valid], name=f"present_key batch {b}", **TOL)
        assert_close(ours[2][b, :, :valid], ref[2][b, :, :valid], name=f"present_value batch {b}", **TOL)


def test_gqa_declines_quantized_cache_input():
    import onnxruntime as ort

    import onnxruntime_ep_seamless as seamless
    model, feeds = gqa_model_feeds(*GQA_SHAPES["prompt"])
    node = model.graph.node[0]
    node.input.extend([""] * (14 - len(node.input)) + ["qn", "kn"])
    model.graph.initializer.extend([numpy_helper.from_array(data(H), "qn"), numpy_helper.from_array(data(H), "kn")])
    sess = ort.InferenceSession(model.SerializeToString(), seamless.session_options())
    report = seamless.partition_report(sess)
    assert any("q_norm_weight" in r for r in report.declined.values()), report


# --- MultiHeadAttention -----------------------------------------------------------------------


def mha(b, s, l, n=4, h=8, bias=False, mask=None, attn_bias=None, past=0, present=False, **attrs):
    inputs = [("query", data(b, s, n * h)), ("key", data(b, l, n * h)), ("value", data(b, l, n * h)),
              ("bias", data(3 * n * h) if bias else None)]
    t = past + l
    if mask == "2d":
        m = np.ones((b, t), I32)
        m[0, -2:] = 0
        inputs.append(("key_padding_mask", m))
    elif mask == "1d":
        inputs.append(("key_padding_mask", np.array([t - 1] + [t] * (b - 1), I32)))
    elif mask == "3d":
        m = (rng.random((b, s, t)) > 0.3).astype(I32)
        m[..., 0] = 1
        inputs.append(("key_padding_mask", m))
    else:
        inputs.append(("key_padding_mask", None))
    inputs.append(("attention_bias", data(*attn_bias[:2], s, t) if attn_bias else None))
    if past:
        inputs += [("past_key", data(b, n, past, h)), ("past_value", data(b, n, past, h))]
    outs = 3 if (past or present) else 1
    const = ("bias",) if bias is True else ()  # a model's bias is an initializer; bias="input": a graph input
    return build("MultiHeadAttention", inputs, outs, {"num_heads": n, **attrs}, domain=MS, const=const)


MHA_CASES = [
    dict(b=2, s=5, l=5),
    dict(b=2, s=5, l=5, bias=True),
    dict(b=2, s=5, l=5, bias="input"),
    dict(b=1, s=3, l=7),                                    # cross attention
    dict(b=2, s=4, l=4, mask="2d"),
    dict(b=2, s=4, l=4, mask="1d"),
    dict(b=2, s=4, l=4, mask="3d"),
    dict(b=2, s=4, l=4, attn_bias=(1, 4)),
    dict(b=2, s=4, l=4, attn_bias=(2, 1), mask="2d"),
    dict(b=1, s=4, l=4, unidirectional=1),
    dict(b=2, s=1, l=1, past=6, unidirectional=1),
    dict(b=2, s=3, l=3, past=5, unidirectional=1, mask="2d"),
    dict(b=1, s=4, l=4, present=True),
    dict(b=2, s=4, l=4, scale=0.2, mask_filter_value=-1000.0, mask="2d"),
    dict(b=1, s=40, l=40, attn_bias=(1, 4)),                # rows of 16+ keys
    dict(b=1, s=1, l=1, past=40, unidirectional=1, present=True),
]
# the cases ONNX Attention's native step runs (kernels/cpu/steps.py multi_head_attention: key padding masks as a
# float mask by the binary and Where steps, the bias by binary steps); unidirectional prompts: Python steps
MHA_NATIVE = [c for c in MHA_CASES if not (c.get("unidirectional") and c["s"] > 1) and c.get("bias") != "input"]
MHA_ID = lambda c: ",".join(f"{k}={v}" for k, v in c.items())


@pytest.mark.parametrize("case", MHA_CASES, ids=MHA_ID)
def test_multi_head_attention(case):
    model, feeds = mha(**case)
    assert_parity(model, feeds, **TOL)


@pytest.mark.parametrize("case", MHA_NATIVE, ids=MHA_ID)
def test_multi_head_attention_runs_natively(case, capfd):
    assert_native_without_python_steps(*mha(**case), capfd)


# --- ONNX Attention-23 ------------------------------------------------------------------------


def attention23(b, qn, kvn, s, l, h=8, three_d=False, past=0, mask=None, n_out=1, **attrs):
    if three_d:
        q, k, v = data(b, s, qn * h), data(b, l, kvn * h), data(b, l, kvn * h)
        attrs.update(q_num_heads=qn, kv_num_heads=kvn)
    else:
        q, k, v = data(b, qn, s, h), data(b, kvn, l, h), data(b, kvn, l, h)
    t = past + l
    inputs = [("Q", q), ("K", k), ("V", v)]
    if mask == "bool":
        m = rng.random((s, t)) > 0.3
        m[:, 0] = True
        inputs.append(("attn_mask", m))
    elif mask == "bool_dead_row":
        m = rng.random((b, 1, s, t)) > 0.3
        m[0, 0, 1, :] = False
        inputs.append(("attn_mask", m))
    elif mask == "float":
        inputs.append(("attn_mask", data(b, qn, s, t)))
    else:
        inputs.append(("attn_mask", None))
    if past:
        inputs += [("past_key", data(b, kvn, past, h)), ("past_value", data(b, kvn, past, h))]
        n_out = max(n_out, 3)
    model, feeds = build("Attention", inputs, n_out, attrs, opset=23)
    if n_out == 4 and not past:  # present outputs absent, qk output present
        node = model.graph.node[0]
        node.output[1] = node.output[2] = ""
        del model.graph.output[1:3]
    return model, feeds


ATTENTION23_CASES = [
    dict(b=2, qn=4, kvn=4, s=5, l=5),
    dict(b=2, qn=4, kvn=2, s=5, l=5),
    dict(b=1, qn=6, kvn=1, s=3, l=7, three_d=True),
    dict(b=2, qn=4, kvn=2, s=4, l=4, is_causal=1),
    dict(b=1, qn=4, kvn=2, s=1, l=1, past=6, is_causal=1),
    dict(b=1, qn=4, kvn=2, s=3, l=3, past=4, is_causal=1, three_d=True),
    dict(b=2, qn=2, kvn=2, s=4, l=6, mask="bool"),
    dict(b=2, qn=2, kvn=2, s=4, l=6, mask="bool_dead_row"),
    dict(b=2, qn=2, kvn=2, s=4, l=6, mask="float", is_causal=1),
    dict(b=2, qn=2, kvn=1, s=4, l=4, softcap=3.0, scale=0.5),
    dict(b=1, qn=2, kvn=2, s=4, l=4, n_out=4),
    dict(b=1, qn=2, kvn=2, s=4, l=4, n_out=4, softcap=2.0, qk_matmul_output_mode=1),
    dict(b=1, qn=2, kvn=2, s=4, l=4, n_out=4, mask="float", qk_matmul_output_mode=2),
    dict(b=1, qn=2, kvn=2, s=4, l=4, n_out=4, mask="bool", is_causal=1, qk_matmul_output_mode=3),
    # rows of 16+ keys (the softmax's vector lanes) and more than one block of 60 query rows (sdpa.c ATTENTION_ROWS)
    dict(b=1, qn=3, kvn=3, s=66, l=66, three_d=True),
    dict(b=1, qn=2, kvn=1, s=70, l=70, mask="float", is_causal=1),
    dict(b=1, qn=2, kvn=2, s=20, l=20, past=17, mask="bool_dead_row", is_causal=1),
    # keys a multiple of 128: the score rows are 16 floats further apart than the keys (sdpa.c)
    dict(b=1, qn=2, kvn=1, s=70, l=128, mask="float", is_causal=1),
    dict(b=1, qn=2, kvn=2, s=61, l=200, past=56, mask="bool", n_out=4),
]
CASE_ID = lambda c: ",".join(f"{k}={v}" for k, v in c.items())


@pytest.mark.parametrize("case", ATTENTION23_CASES, ids=CASE_ID)
def test_attention_23(case):
    model, feeds = attention23(**case)
    assert_parity(model, feeds, **TOL)


# --- RotaryEmbedding --------------------------------------------------------------------------

ROT_TOL = {"rtol": 1e-6, "atol": 1e-6}


def ms_rotary_case(layout, positions, interleaved):
    """com.microsoft RotaryEmbedding over 3 heads of 16: x (B, S, N*H) or (B, N, S, H); positions an
    offset (1,) or per token (B, S); caches as initializers."""
    b, s, n, h = 2, 5, 3, 16
    x = data(b, s, n * h) if layout == "3d" else data(b, n, s, h)
    pos = np.array([7], I64) if positions == "offset" else rng.integers(0, 40, (b, s)).astype(I64)
    cos, sin = rope_caches(64, h)
    return build("RotaryEmbedding", [("x", x), ("pos", pos), ("cos", cos), ("sin", sin)], 1,
                 {"interleaved": interleaved}, domain=MS, const=("cos", "sin"))


def ms_rotary_partial_case(interleaved, dtype=F32):
    """Rotary on the first 16 of 32 channels, positions from offset 3; x and caches of `dtype`."""
    b, s, n, h, rot = 1, 4, 2, 32, 16
    cos, sin = (c.astype(dtype) for c in rope_caches(32, rot))
    model, feeds = build("RotaryEmbedding", [("x", data(b, s, n * h).astype(dtype)), ("pos", np.array([3], I64)),
                                             ("cos", cos), ("sin", sin)], 1,
                         {"interleaved": interleaved, "num_heads": n, "rotary_embedding_dim": rot}, domain=MS)
    model.graph.output[0].type.tensor_type.elem_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return model, feeds


@pytest.mark.parametrize("layout", ["3d", "4d"])
@pytest.mark.parametrize("positions", ["offset", "per_token"])
@pytest.mark.parametrize("interleaved", [0, 1])
def test_ms_rotary_embedding(layout, positions, interleaved):
    assert_parity(*ms_rotary_case(layout, positions, interleaved), **ROT_TOL)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_ms_rotary_embedding_partial(interleaved):
    assert_parity(*ms_rotary_partial_case(interleaved), **ROT_TOL)


ROTARY23_CASES = [
    dict(layout="4d", pos=True),
    dict(layout="3d", pos=True),
    dict(layout="4d", pos=False),
    dict(layout="3d", pos=True, interleaved=1),
    dict(layout="4d", pos=True, rot=8),
    dict(layout="3d", pos=False, rot=8, interleaved=1),
]


def rotary23_case(layout, pos, rot=16, interleaved=0):
    """ONNX RotaryEmbedding over 3 heads of 16: x 4-D or 3-D; cos/sin indexed by position_ids, or
    given per token (B, S, rot/2) without them."""
    b, s, n, h = 2, 5, 3, 16
    x = data(b, n, s, h) if layout == "4d" else data(b, s, n * h)
    attrs = {"interleaved": interleaved}
    if layout == "3d":
        attrs["num_heads"] = n
    if rot != h:
        attrs["rotary_embedding_dim"] = rot
    if pos:
        cos, sin = rope_caches(64, rot)
        inputs = [("x", x), ("cos", cos), ("sin", sin), ("pos", rng.integers(0, 64, (b, s)).astype(I64))]
    else:
        angles = rng.random((b, s, rot // 2)).astype(F32) * 6
        inputs = [("x", x), ("cos", np.cos(angles)), ("sin", np.sin(angles))]
    return build("RotaryEmbedding", inputs, 1, attrs, opset=23)


@pytest.mark.parametrize("case", ROTARY23_CASES, ids=CASE_ID)
def test_rotary_embedding_23(case):
    assert_parity(*rotary23_case(**case), **ROT_TOL)


@pytest.mark.parametrize("shape", ["prompt", "decode_shared_ragged", "subsequent_prompt"])
@pytest.mark.parametrize("attrs", [{}, {"local_window_size": 3, "softcap": 2.0, "rotary_interleaved": 1},
                                   {"smooth_softmax": 1, "causal": 0}], ids=["plain", "window", "smooth"])
def test_gqa_numpy_reference_matches_native(shape, attrs, monkeypatch):
    """The numpy GQA (the readable reference, used when the native library lacks the kernel)
    agrees with the native kernel; called directly, without ORT."""
    import onnx

    from onnxruntime_ep_seamless.kernels.cpu import attention as ca, native
    model, feeds = gqa_model_feeds(*GQA_SHAPES[shape], **attrs)
    node = model.graph.node[0]
    kw = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    args = [feeds.get(n, inits.get(n)) if n else None for n in node.input]
    native_out = ca.group_query_attention(*args, **kw)
    monkeypatch.setattr(native, "has_gqa", lambda: False)
    numpy_out = ca.group_query_attention(*args, **kw)
    for a, b in zip(native_out, numpy_out):
        np.testing.assert_allclose(a, b, **TOL)


def attention23_float16(three_d):
    """A causal grouped-head Attention-23 case in float16."""
    model, feeds = attention23(b=2, qn=4, kvn=2, s=3, l=5, three_d=three_d, is_causal=1)
    feeds = {k: v.astype(np.float16) for k, v in feeds.items()}
    for vi in list(model.graph.input) + list(model.graph.output):
        vi.type.tensor_type.elem_type = 10
    return model, feeds


@pytest.mark.parametrize("three_d", [False, True])
def test_attention_23_float16(three_d):
    """float16 computes in float32 and rounds the outputs once."""
    assert_parity(*attention23_float16(three_d), rtol=2e-3, atol=2e-3)


# --- GroupQueryAttention with a window-sized KV cache (sliding_window_cache=1, Gemma 2's local layers) -------------
# The past holds the L(T) most recent positions at rows [0, L) of a buffer of capacity C >= W (local_window_size);
# rows [L, C) are unspecified, so only the output and the resident rows are compared. Each step feeds stock's own
# present back, as a decoder loop does.


def _window_gqa(b, s, capacity, window, rotary, nh=4, nkv=2, h=16, dtype=np.float32):
    cos = sin = None
    inputs = [("q", np.zeros((b, s, nh * h), dtype)), ("k", np.zeros((b, s, nkv * h), dtype)),
              ("v", np.zeros((b, s, nkv * h), dtype)), ("pk", np.zeros((b, nkv, capacity, h), dtype)),
              ("pv", np.zeros((b, nkv, capacity, h), dtype)), ("sl", np.zeros(b, np.int32)),
              ("tot", np.zeros(1, np.int32))]
    attrs = {"num_heads": nh, "kv_num_heads": nkv, "local_window_size": window, "sliding_window_cache": 1,
             "softcap": 30.0}
    if rotary:
        r = np.random.default_rng(5)
        cos, sin = (r.random((64, h // 2)).astype(dtype) for _ in range(2))
        inputs += [("cos", cos), ("sin", sin)]
        attrs["do_rotary"] = 1
    model, _ = named_node_model("GroupQueryAttention", inputs, [dtype] * 3, attrs, domain="com.microsoft",
                                const={"cos", "sin"}, symbolic=True)
    return model


def _resident(t, capacity, window):
    g = capacity - window + 1
    return t if t <= capacity else t - g * -(-(t - capacity) // g)


WINDOW_CASES = [
    (8, 8, False, [5, 1, 1, 3, 1, 1, 1, 1, 7, 1, 1, 2, 1]),   # C = W: eviction one position a step
    (10, 6, True, [5, 1, 1, 3, 1, 1, 1, 1, 7, 1, 1, 2, 1]),   # slack: G = 5 positions evicted at once
    (8, 4, False, [12, 1, 1, 1]),                            # a prompt longer than the capacity
]


def window_steps_as_stock(run, capacity, window, rotary, steps, dtype=np.float32, rtol=1e-5, atol=1e-5,
                          present_tol=None):
    """Steps of `steps` new tokens through a window-sized cache, each fed stock's present of the step before, as a
    decoder loop does: run(model, feeds) (ours) against stock on the output and the resident rows (within
    present_tol, default a tenth of the output's)."""
    present_tol = present_tol or (rtol / 10, atol / 10)
    rng = np.random.default_rng(capacity + window)
    b, nh, nkv, h = 1, 4, 2, 16
    past_k = np.zeros((b, nkv, capacity, h), dtype)
    past_v = past_k.copy()
    model = _window_gqa(b, 1, capacity, window, rotary, dtype=dtype)  # symbolic dims: one model for every step
    t = 0
    for step, s in enumerate(steps):
        t += s
        feeds = {"q": rng.standard_normal((b, s, nh * h)).astype(dtype),
                 "k": rng.standard_normal((b, s, nkv * h)).astype(dtype),
                 "v": rng.standard_normal((b, s, nkv * h)).astype(dtype), "pk": past_k, "pv": past_v,
                 "sl": np.array([t - 1], np.int32), "tot": np.array([t], np.int32)}
        ref = stock_session(model).run(None, feeds)
        ours = run(model, feeds)
        resident = _resident(t, capacity, window)
        assert_close(ours[0], ref[0], rtol, atol, f"step {step}: output")
        for i in (1, 2):
            assert_close(ours[i][:, :, :resident], ref[i][:, :, :resident], *present_tol, f"step {step}: present {i}")
        past_k, past_v = ref[1], ref[2]


@pytest.mark.parametrize("capacity,window,rotary,steps", WINDOW_CASES)
def test_gqa_window_sized_cache_as_stock(capacity, window, rotary, steps):
    window_steps_as_stock(run_ours, capacity, window, rotary, steps)


def test_gqa_window_sized_cache_ragged_batch_and_too_small_a_capacity():
    window_ragged_batch_and_too_small_a_capacity(run_ours)


def window_ragged_batch_and_too_small_a_capacity(run_ours):
    rng = np.random.default_rng(3)
    capacity, window = 8, 4
    model = _window_gqa(2, 1, capacity, window, False)
    past = [rng.standard_normal((2, 2, capacity, 16)).astype(np.float32) for _ in range(2)]
    for lens in ([5, 9], [11, 3]):
        feeds = {"q": rng.standard_normal((2, 1, 64)).astype(np.float32),
                 "k": rng.standard_normal((2, 1, 32)).astype(np.float32),
                 "v": rng.standard_normal((2, 1, 32)).astype(np.float32), "pk": past[0], "pv": past[1],
                 "sl": np.array(lens, np.int32) - 1, "tot": np.array([max(lens)], np.int32)}
        ref, ours = stock_session(model).run(None, feeds), run_ours(model, feeds)
        assert_close(ours[0], ref[0], 1e-5, 1e-5)
        for i, t in enumerate(lens):
            resident = _resident(t, capacity, window)
            assert_close(ours[1][i, :, :resident], ref[1][i, :, :resident], 1e-6, 1e-6)
    small = _window_gqa(1, 1, 4, 6, False)  # W > C: stock's INVALID_ARGUMENT
    feeds = {"q": np.zeros((1, 1, 64), np.float32), "k": np.zeros((1, 1, 32), np.float32),
             "v": np.zeros((1, 1, 32), np.float32), "pk": np.zeros((1, 2, 4, 16), np.float32),
             "pv": np.zeros((1, 2, 4, 16), np.float32), "sl": np.array([2], np.int32), "tot": np.array([3], np.int32)}
    import onnxruntime as ort
    for run in (lambda: stock_session(small).run(None, feeds), lambda: run_ours(small, feeds)):
        with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument, match="local_window_size"):
            run()
