"""Qwen3.5's hybrid layers on the CUDA EP against stock ORT's CPU EP: com.microsoft LinearAttention (attention.cu's
recurrence: GQA, inverse GQA, fewer K than V heads, every rule), LinearAttentionGate and GatedRMSNorm
(normalization.cu), MRotaryEmbedding (attention.cu), GatedAdd; then the builder's Qwen3.5 and Qwen3.5-MoE decoders
greedy under capture=auto, each decode step one captured segment."""
import numpy as np
import pytest

from test_cuda_ep import DEVICES, PROBLEM
from test_cuda_moe import decodes_as_stock_in_one_segment

needs_gpu = pytest.mark.skipif(not DEVICES, reason=f"no NVIDIA GPU for the CUDA EP ({PROBLEM or 'none found'})")
F16, F32, I64 = np.float16, np.float32, np.int64
MS = "com.microsoft"
rng = np.random.default_rng(5)


def data(*shape, scale=1.0, dtype=F32):
    return (scale * rng.standard_normal(shape)).astype(dtype)


def _check(op, inputs, attrs, outputs, **tol):
    from test_cuda_ops import check
    check(op, inputs, attrs, 21, outputs, domain=MS, **tol)


@needs_gpu
@pytest.mark.parametrize("heads", [(2, 4, 2), (4, 2, 2), (4, 4, 2)], ids=["inverse_gqa", "gqa", "fewer_k_heads"])
@pytest.mark.parametrize("rule", ["gated_delta", "linear", "delta", "gated"])
@pytest.mark.parametrize("t", [1, 6, 150])  # 150: d_k 64 and 128 in chunks of 64 tokens (the last one partial)
@pytest.mark.parametrize("d_k,d_v", [(16, 8), (64, 48), (128, 128)])  # attention.cu run; run_columns (d_k 64, 128)
def test_linear_attention(heads, rule, t, d_k, d_v):
    q_heads, kv_heads, k_heads = heads
    b = 2
    key = data(b, t, k_heads * d_k).reshape(b, t, k_heads, d_k)
    key = (key / np.linalg.norm(key, axis=-1, keepdims=True)).reshape(b, t, -1).astype(F32)
    inputs = [data(b, t, q_heads * d_k, scale=0.5), key, data(b, t, kv_heads * d_v),
              data(b, kv_heads, d_k, d_v, scale=0.3),
              -np.abs(data(b, t, kv_heads * d_k if rule == "gated" else kv_heads)) if "gated" in rule else None,
              (1 / (1 + np.exp(-data(b, t, kv_heads)))).astype(F32) if "delta" in rule else None]
    while inputs[-1] is None:
        inputs.pop()
    _check("LinearAttention", inputs, dict(q_num_heads=q_heads, kv_num_heads=kv_heads, update_rule=rule),
           [F32, F32], rtol=1e-4, atol=1e-5)


@needs_gpu
@pytest.mark.parametrize("rule", ["gated_delta", "linear"])
def test_linear_attention_prompt_in_slabs(rule, monkeypatch):
    """A prompt's chunks prepared a slab at a time (here one chunk a slab), the state carried between the slabs in
    float32: the same values as stock's."""
    from onnxruntime_ep_seamless.kernels.cuda import attention
    monkeypatch.setattr(attention, "CHUNK_SLAB_BYTES", 1)
    b, t, heads, d_k, d_v = 1, 200, 2, 32, 40
    key = data(b, t, heads, d_k)
    key = (key / np.linalg.norm(key, axis=-1, keepdims=True)).reshape(b, t, -1).astype(F32)
    inputs = [data(b, t, heads * d_k, scale=0.5), key, data(b, t, heads * d_v), data(b, heads, d_k, d_v, scale=0.3)]
    if rule == "gated_delta":
        inputs += [-np.abs(data(b, t, heads, scale=0.1)), (1 / (1 + np.exp(-data(b, t, heads)))).astype(F32)]
    _check("LinearAttention", inputs, dict(q_num_heads=heads, kv_num_heads=heads, update_rule=rule), [F32, F32],
           rtol=1e-4, atol=1e-4)


@needs_gpu
@pytest.mark.parametrize("dtype", [F32, F16])
def test_gate_and_gated_norm(dtype):
    tol = dict(rtol=2e-3, atol=2e-3) if dtype == F16 else dict(rtol=1e-5, atol=1e-5)
    _check("LinearAttentionGate", [data(2, 3, 6, scale=4.0, dtype=dtype), data(6), -np.exp(data(6)),
                                   data(2, 3, 6, dtype=dtype)], {}, [dtype, dtype], **tol)
    for activation in ("silu", "sigmoid"):
        _check("GatedRMSNorm", [data(2, 5, 24, dtype=dtype), data(8, dtype=dtype), data(2, 5, 24, dtype=dtype)],
               dict(activation=activation, epsilon=1e-6), [dtype], **tol)
    _check("GatedAdd", [data(2, 3, 16, dtype=dtype), data(2, 3, 16, dtype=dtype),
                        (1 / (1 + np.exp(-data(2, 3, 1)))).astype(dtype)], {}, [dtype], **tol)


@needs_gpu
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("dtype", [F32, F16])
def test_mrotary_embedding(layout, rank, dtype):
    b, s, n, h, rot = 2, 3, 3, 32, 16
    t = rng.integers(0, 40, (b, s))
    positions = np.stack([t, t + 1, t + 2]).astype(I64)
    ang = np.arange(48)[:, None] * (1.0 / 10000 ** (np.arange(rot // 2) / (rot // 2)))[None, :]
    x = data(b, s, n * h, dtype=dtype) if rank == 3 else data(b, n, s, h, dtype=dtype)
    attrs = dict(mrope_section=[2, 3, 3] if layout else [4, 2, 2], mrope_layout=layout, num_heads=n,
                 rotary_embedding_dim=rot)
    tol = dict(rtol=2e-3, atol=2e-3) if dtype == F16 else dict(rtol=1e-6, atol=1e-6)
    _check("MRotaryEmbedding", [x, positions, np.cos(ang).astype(dtype), np.sin(ang).astype(dtype)], attrs, [dtype],
           **tol)


@needs_gpu
@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("t,heads,kv_heads,d_k,d_v", [(1, 16, 16, 128, 128), (7, 2, 4, 32, 32), (5, 4, 4, 64, 96),
                                                       (3, 8, 2, 32, 32),  # GQA: 4 q rows a block, 1 warp
                                                       (100, 2, 4, 128, 128)])  # in chunks
def test_qwen3_5_fusions_are_their_nodes_bit_for_bit(dtype, t, heads, kv_heads, d_k, d_v):
    """plan/fusion.py normed_linear_attention (LpNormalization's rows and q's scale taken in the recurrence's loads)
    and rotary_in_float (MRotaryEmbedding between Casts: float16 only) give the bytes the nodes they replace give
    (fusion=0), and stock's values; the plan has the fused nodes."""
    from kernels.test_linear_attention import qwen3_5_layer_parts
    from onnxruntime_ep_seamless.graph.onnx_import import import_model
    from onnxruntime_ep_seamless.plan.fusion import fuse
    from parity import stock_session
    from test_cuda_ep import cuda_session
    model = qwen3_5_layer_parts(dtype, t, heads, kv_heads, d_k, d_v)
    x = data(1, t, (heads + min(heads, kv_heads)) * d_k + kv_heads * d_v)
    x[0, 0, :d_k] = 0  # a zero q head: LpNormalization leaves it zero
    feeds = {"x": x, "past": data(1, kv_heads, d_k, d_v, scale=0.3), "decay": -np.abs(data(1, t, kv_heads)),
             "beta": (1 / (1 + np.exp(-data(1, t, kv_heads)))).astype(F32)}
    feeds = {**{k: v.astype(dtype) for k, v in feeds.items()},
             "positions": np.broadcast_to(np.arange(t), (3, 1, t)).astype(I64).copy()}
    graph = import_model(model)
    fused = {n.op_type: n.domain for n in fuse(graph, list(graph.outputs), "cuda")}
    assert "LpNormalization" not in fused and "NormedLinearAttention" in fused
    assert ("Cast" in fused) == (dtype == F32)  # float32: no Casts to fold
    ours = cuda_session(model).run(None, feeds)
    unfused = cuda_session(model, fusion="0").run(None, feeds)
    # stock: the float32 model (its CPU EP has no float16 LpNormalization)
    reference = stock_session(qwen3_5_layer_parts(F32, t, heads, kv_heads, d_k, d_v)).run(
        None, {k: v.astype(F32) if v.dtype == dtype else v for k, v in feeds.items()})
    for name, o, u, r in zip(("out", "present", "rotated"), ours, unfused, reference):
        np.testing.assert_array_equal(o, u, err_msg=name)
        tol = 1e-2 if dtype == F16 else 1e-5  # float16 values against float32 arithmetic
        np.testing.assert_allclose(o.astype(F32), r.astype(F32), rtol=tol, atol=tol, err_msg=name)


@needs_gpu
@pytest.mark.parametrize("family", ["qwen3_5", "qwen3_5_moe"])
@pytest.mark.parametrize("precision", ["fp32", "int4"])
def test_builder_qwen3_5_decodes_as_one_captured_segment(family, precision, capfd):
    decodes_as_stock_in_one_segment(family, precision, capfd)


@needs_gpu
@pytest.mark.parametrize("case", [
    {}, {"d_k": 64, "d_v": 48}, {"d_k": 128, "d_v": 128, "h_q": 4, "h_v": 4}, {"l2_norm": 0},
    {"rule": "linear", "gate": "none", "beta": "none"}, {"rule": "gated", "beta": "none"}, {"rule": "delta", "gate": "none"},
    {"gate": "none", "beta": "none"}, {"gate": "sigmoid"}, {"per_key": True}, {"rank4": True}, {"dtype": F16},
    {"seq": 1}, {"scale": 0.3}], ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "qwen3.5")
def test_gated_delta_net(case):
    """com.microsoft GatedDeltaNet on attention.cu's kernel (uniform requests) against stock's CPU kernel: every
    update rule, both fused gates, the sigmoid beta, the q/k L2 norms, per-key decay, [B, S] token axes, float16."""
    from kernels.test_linear_attention import gated_delta_net
    from onnxruntime_ep_seamless.graph.onnx_import import import_model
    from onnxruntime_ep_seamless.kernels.registry import lookup
    from parity import stock_session
    from test_cuda_ep import run_on_cuda
    case = {"d_k": 32, "d_v": 16, **case}
    model, feeds = gated_delta_net(**case)
    graph = import_model(model)
    assert lookup(graph.nodes[0], graph, "cuda", host_rule=False)[0].device == "cuda"  # attention.cu's kernel
    ours, ref = run_on_cuda(model, feeds), stock_session(model).run(None, feeds)
    tol = 3e-3 if case.get("dtype") == F16 else 1e-4
    for o, r in zip(ours, ref):
        np.testing.assert_allclose(o.astype(F32), r.astype(F32), rtol=tol, atol=tol)


@needs_gpu
def test_builder_gated_delta_net_export_greedy_tokens(capfd):
    """Qwen3.5's -e cuda export with linear_attn_op=gated_delta_net greedy on our CUDA EP under capture=auto: every
    node ours, each decode step one captured segment; the oracle is the default export of the same checkpoint
    (LinearAttention, its gate and L2 norm nodes) on our CUDA EP, fed our tokens: the same model in another graph,
    float16 both (a token the oracle's best or within 2e-2 of the logits' scale, as test_cuda_models.py)."""
    import material
    import onnxruntime_ep_seamless as seamless
    from test_cuda_ep import cuda_session
    from test_cuda_moe import assert_near_best, greedy
    gdn, default = material.genai_gdn_dir() / "model.onnx", material.genai_model_dir("qwen3_5", "fp16", "cuda")
    if not gdn.exists() or not (default / "model.onnx").exists():
        pytest.skip("the Qwen3.5 -e cuda exports missing: run tests/material.py")
    ours = cuda_session(str(gdn), capture="auto", log_capture="1")
    report = seamless.assert_ep_selected(ours, device="cuda")
    assert not report.fallback_nodes, report
    tokens, _ = greedy(ours, steps=32)
    assert_near_best(tokens, greedy(cuda_session(str(default / "model.onnx")), steps=32, forced=tokens)[1])
    assert "1 segment(s), 0 seam(s)" in capfd.readouterr().err


@needs_gpu
@pytest.mark.parametrize("family,lengths", [("qwen3_5", (9, 13)), ("lfm2", (9, 13)), ("qwen3_5", (70, 100))])
def test_builder_hybrid_first_prompt_of_a_new_length_replays_its_bucket(family, lengths):
    """A hybrid's first prompts padded to a bucket (exec/cuda_capture.py prompt_padding): a 9-token prompt is captured
    at the bucket of 16 after its eager runs, then a 13-token one is answered by that graph in C at its first run
    (70 and 100 tokens at the bucket of 128: the linear attention in chunks, the second one partly padding). Each
    run's logits and conv and recurrent states equal stock's (within float32 rounding): the padded run's recurrences
    stop at the real length (their kernels read it from seqlens_k)."""
    import material
    from onnxruntime_ep_seamless.exec.cuda_compute import WARMUP_RUNS, CudaKernel
    from parity import stock_session
    from test_cuda_ep import cuda_session
    path = material.genai_model_dir(family, "fp32") / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} missing: run tests/material.py")
    ours, stock = cuda_session(str(path), capture="auto"), stock_session(str(path))

    def first_prompt(sess, n):
        feeds = {"input_ids": np.random.default_rng(n).integers(0, 1000, (1, n)).astype(I64),
                 "attention_mask": np.ones((1, n), I64)}
        for i in sess.get_inputs():
            if i.name.startswith("past"):  # empty KV caches (the configs' head size 64, as parity.py's), zero states
                shape = (1, i.shape[1], 0, 64) if i.name.startswith("past_key_values") else (1, *i.shape[1:])
                feeds[i.name] = np.zeros(shape, F32)
            elif i.name == "position_ids":
                feeds[i.name] = np.ascontiguousarray(np.broadcast_to(np.arange(n), (3, 1, n)))
        return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))

    first, second = lengths
    for n in [first] * (WARMUP_RUNS + 1) + [second]:
        calls = CudaKernel.compute_calls
        out, ref = first_prompt(ours, n), first_prompt(stock, n)
        if n == second:
            assert CudaKernel.compute_calls == calls  # no Python: the bucket's graph replayed
        for name, r in ref.items():
            np.testing.assert_allclose(out[name], r, rtol=1e-4, atol=1e-4, err_msg=f"{name}, prompt of {n}")
