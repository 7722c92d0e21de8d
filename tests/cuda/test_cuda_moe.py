"""com.microsoft MoE and QMoE on the CUDA EP (native/cuda/moe.cu) against stock ORT's CPU EP: routing on the GPU,
the activations, biases, 4- and 8-bit experts with block- or row-wise scales and zero points, float16. The inputs
and the CPU kernels' parity cases are tests/kernels/test_moe.py's."""
import numpy as np
import pytest

from kernels.test_moe import moe_inputs, moe_reference, qmoe_inputs, quantized
from parity import greedy_with_states as greedy  # noqa: F401 (the other CUDA tests import it from here)
from test_cuda_ep import DEVICES, PROBLEM

needs_gpu = pytest.mark.skipif(not DEVICES, reason=f"no NVIDIA GPU for the CUDA EP ({PROBLEM or 'none found'})")
F16 = np.dtype(np.float16)
TOL = {np.dtype(np.float32): {"rtol": 1e-4, "atol": 1e-5}, F16: {"rtol": 2e-3, "atol": 2e-3}}


@pytest.fixture(params=["pairs", "grouped"])
def qmoe_path(request, monkeypatch):
    """A prompt's QMoE both ways: pair by pair (the decode step's kernels) and grouped by expert (moe.cu group, grouped:
    where the layout allows it). Yields the kernels the runs launched in blocks (launch_rows) to assert on."""
    from onnxruntime_ep_seamless.kernels.cuda import moe
    from onnxruntime_ep_seamless.runtime import cuda as runtime_cuda
    monkeypatch.setattr(moe, "GROUPED_PAIRS_AN_EXPERT", 0 if request.param == "grouped" else 1 << 40)
    launched, launch_rows = [], runtime_cuda.CudaRuntime.launch_rows

    def recording(self, name, *args, **kwargs):
        launched.append(name)
        return launch_rows(self, name, *args, **kwargs)
    monkeypatch.setattr(runtime_cuda.CudaRuntime, "launch_rows", recording)
    yield request.param, launched


def _grouped_ran(launched):
    return any(name.startswith("seamless_moe_grouped") for name in launched)


def _check(op, inputs, attrs, dtype, **tolerance):
    from onnxruntime_ep_seamless.graph.onnx_import import import_model
    from onnxruntime_ep_seamless.kernels.registry import lookup
    from parity import node_model
    from test_cuda_ops import check
    model, _ = node_model(op, inputs, attrs, 21, [dtype], domain="com.microsoft")
    graph = import_model(model)
    assert lookup(graph.nodes[0], graph, "cuda", host_rule=False)[0].device == "cuda"  # its CUDA kernel
    check(op, inputs, attrs, 21, [dtype], domain="com.microsoft", **{**TOL[np.dtype(dtype)], **tolerance})


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("act,k,normalize,extra", [
    ("swiglu", 2, 1, {"swiglu_limit": 7.0, "activation_alpha": 1.702, "activation_beta": 1.0}), ("relu", 1, 0, {}),
    ("silu", 3, 1, {}), ("identity", 4, 0, {})])
def test_moe(act, k, normalize, extra, dtype):
    attrs = dict(k=k, activation_type=act, normalize_routing_weights=normalize, **extra)
    if act == "swiglu":
        attrs["swiglu_fusion"] = 1
    _check("MoE", moe_inputs(19, 48, 4, 24, act, dtype=dtype), attrs, dtype)


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("act,bits,block,zero_points", [
    ("swiglu", 4, 32, False), ("gelu", 4, 16, True), ("silu", 4, 0, True), ("relu", 2, 0, False),
    ("identity", 4, 32, True)])
def test_qmoe(act, bits, block, zero_points, dtype, qmoe_path):
    attrs = dict(k=2, activation_type=act, expert_weight_bits=bits)
    if block:
        attrs["block_size"] = block
    if act == "swiglu":
        attrs.update(swiglu_fusion=1, swiglu_limit=7.0)
    _check("QMoE", qmoe_inputs(11, 64, 4, 32, act, bits, block, zero_points, dtype=dtype), attrs, dtype)
    path, launched = qmoe_path  # grouped where the 4-bit blocks are of 32 columns or more (row-wise: 64 and 32)
    assert _grouped_ran(launched) == (path == "grouped" and bits == 4 and block != 16)


@needs_gpu
@pytest.mark.parametrize("zero_points", [False, True])
@pytest.mark.parametrize("hidden,inter", [(1088, 64), (4160, 2112)])
def test_qmoe_rows_of_several_passes(zero_points, hidden, inter, qmoe_path):
    """4-bit rows of more 32-column chunks than a warp's lanes: moe.cu's chunked path, blocks of 64 (a scale and zero
    point for two chunks). 1088 columns: 34 chunks, lanes 0 and 1 take two; 4160 and the down product's 2 x 2112
    (its two experts' chunks dealt out together): more than a pass of CHUNKS_IN_FLIGHT chunks a lane."""
    attrs = dict(k=2, activation_type="swiglu", swiglu_fusion=1, swiglu_limit=7.0, expert_weight_bits=4, block_size=64)
    _check("QMoE", qmoe_inputs(5, hidden, 4, inter, "swiglu", 4, 64, zero_points, dtype=F16), attrs, F16)
    assert _grouped_ran(qmoe_path[1]) == (qmoe_path[0] == "grouped")


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("tokens,experts,zero_points", [(96, 8, False), (40, 16, True), (300, 4, False)])
def test_qmoe_prompt_grouped_by_expert(tokens, experts, zero_points, dtype, qmoe_path):
    """A prompt's QMoE both ways (grouped: moe.cu group and grouped): experts with more pairs than a tile of MOE_TILE,
    one with none (its router logit far below), a token whose second pair weighs under 1e-8 (not run), rows of several
    MOE_TILE_ROWS blocks (2 x 192) and of more columns than a window of shared memory (1088: two float16 windows,
    three float32), blocks of 64 with zero points."""
    attrs = dict(k=2, activation_type="swiglu", swiglu_fusion=1, swiglu_limit=7.0, expert_weight_bits=4,
                 block_size=64 if zero_points else 32)
    hidden = 1088 if experts == 4 else 256
    inputs = qmoe_inputs(tokens, hidden, experts, 192, "swiglu", 4, attrs["block_size"], zero_points, dtype=dtype)
    inputs[1][:, 1] = -30  # expert 1 chosen by no token
    inputs[1][0, :], inputs[1][0, 0] = -30, 0  # token 0: its second expert's weight e^-30
    # float32: outputs reach ~100 here (rows of 256-1088 random 4-bit products), so sums taken in another order than
    # stock's differ by ~1e-6 of that (up to 2.7e-5 seen on an H100, both ways alike): atol 1e-4, not TOL's 1e-5
    _check("QMoE", inputs, attrs, dtype, **({"atol": 1e-4} if dtype == np.float32 else {}))
    assert _grouped_ran(qmoe_path[1]) == (qmoe_path[0] == "grouped")


@needs_gpu
@pytest.mark.parametrize("beyond_float16", [False, True])
def test_qmoe_float16_prompt_on_tensor_cores_keeps_float32_activations(beyond_float16, monkeypatch):
    """A float16 prompt's grouped products run on tensor cores (moe.cu grouped_mma), the second from the float32
    activations as two halves: its outputs are the pair-by-pair kernels' (float32 throughout) but for summation order,
    so they round to the same float16 but rarely (one half alone would move ~1e-3 of each activation: a quarter or more
    of the outputs a unit off). beyond_float16: activations of ~1e5 (each pair's row scaled into float16's range)."""
    from onnxruntime_ep_seamless.kernels.cuda import moe
    from onnxruntime_ep_seamless.runtime import cuda as runtime_cuda
    from parity import node_model
    from test_cuda_ep import run_on_cuda
    attrs = dict(k=2, activation_type="identity", expert_weight_bits=4, block_size=32)
    inputs = qmoe_inputs(64, 256, 8, 192, "identity", 4, 32, dtype=F16)
    if beyond_float16:
        inputs[3] = (inputs[3].astype(np.float32) * 3e4).astype(F16)  # fc1's scales: activations ~1e5
        inputs[6] = (inputs[6].astype(np.float32) * 1e-2).astype(F16)
    model, feeds = node_model("QMoE", inputs, attrs, 21, [F16], domain="com.microsoft")
    launched, launch_rows = [], runtime_cuda.CudaRuntime.launch_rows
    monkeypatch.setattr(runtime_cuda.CudaRuntime, "launch_rows",
                        lambda self, name, *a, **kw: (launched.append(name), launch_rows(self, name, *a, **kw))[1])
    outputs = {}
    for path, pairs_an_expert in (("pairs", 1 << 40), ("grouped", 0)):
        monkeypatch.setattr(moe, "GROUPED_PAIRS_AN_EXPERT", pairs_an_expert)
        (outputs[path],) = run_on_cuda(model, feeds)
    assert "seamless_moe_grouped_mma_act_f16" in launched
    ours, pairs = outputs["grouped"].astype(np.float32), outputs["pairs"].astype(np.float32)
    assert np.isfinite(pairs).all() and (not beyond_float16 or np.abs(pairs).max() > 100)
    # a unit in the last place at most; near zero the sums' own rounding in another order (~1e-6 of the largest)
    np.testing.assert_allclose(ours, pairs, rtol=2 ** -10, atol=1e-5 * np.abs(pairs).max())
    assert np.mean(ours != pairs) < 0.02


@needs_gpu
@pytest.mark.parametrize("op", ["MoE", "QMoE"])
@pytest.mark.parametrize("experts,tie", [(256, True), (300, False), (300, True)])
def test_routing_of_many_experts_and_ties(op, experts, tie):
    """moe.cu's routing: up to 256 experts from registers (pick_held), more by its general loop; equal router logits
    (ties: the lower expert for MoE, the higher for QMoE), -inf ones and -0 beside +0 on both."""
    attrs = dict(k=4, activation_type="silu", normalize_routing_weights=1)
    if op == "MoE":
        inputs = moe_inputs(6, 32, experts, 32, "silu", masked_k=6)
    else:
        attrs.update(expert_weight_bits=4, block_size=32)
        inputs = qmoe_inputs(6, 64, experts, 32, "silu", 4, 32, True)
    router = inputs[1]
    if tie:
        router[:, 7] = router[:, 200] = router[:, 3] = router.max(axis=1) + 1.0  # three-way tie for the first pick
        router[0, :] = -np.inf
        router[0, 5], router[0, 6], router[0, 10], router[0, 11] = -0.0, 0.0, 1.0, 1.0  # -0 and +0 tie
        router[1, :] = -np.inf
        router[1, 9] = router[1, 250] = 0.5
    _check(op, inputs, attrs, np.float32)


@needs_gpu
def test_qmoe_8_bit(monkeypatch):
    monkeypatch.setenv("ORT_QMOE_CPU_QNBIT_GEMM", "fp32")  # stock's exact path (tests/kernels/test_moe.py)
    attrs = dict(k=3, activation_type="swiglu", swiglu_fusion=1, expert_weight_bits=8, block_size=32)
    _check("QMoE", qmoe_inputs(9, 64, 5, 32, "swiglu", 8, 32), attrs, np.float32)


def assert_near_best(tokens, oracle_logits, within=2e-2):
    """Teacher forcing's verdict: each of our tokens is the oracle's best at its step or within `within` of the logits'
    scale of it (float16 activations move a logit by up to ~2e-2 of the scale: a near-tie)."""
    for step, (token, logits) in enumerate(zip(tokens, oracle_logits)):
        logits = np.asarray(logits, np.float32)
        gap = float(logits.max() - logits[token])
        assert gap <= within * float(np.max(np.abs(logits))), f"step {step}: ours {token}, the oracle's best " \
            f"{int(logits.argmax())} by {gap:.4f}"


def decodes_as_stock_in_one_segment(family, precision, capfd, **how):
    """A builder decoder of tests/material.py greedy on our CUDA EP under capture=auto: stock's tokens (and logits
    within float32 rounding), every decode step one captured segment. how: greedy's arguments."""
    import onnx

    import material
    from parity import stock_session
    from test_cuda_ep import cuda_session
    path = material.genai_model_dir(family, precision) / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} missing: run tests/material.py")
    model = onnx.load(str(path))
    for node in model.graph.node:  # stock's CPU MatMulNBits multiplies int8-quantized activations at level 4
        for a in node.attribute:
            if node.op_type == "MatMulNBits" and a.name == "accuracy_level":
                a.i = 0
    ours = cuda_session(model, capture="auto", log_capture="1")
    tokens, logits = greedy(ours, **how)
    ref_tokens, ref_logits = greedy(stock_session(model), **how)
    assert tokens == ref_tokens
    for step, (o, r) in enumerate(zip(logits, ref_logits)):
        np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-4, err_msg=f"step {step}")
    assert "1 segment(s), 0 seam(s)" in capfd.readouterr().err


@needs_gpu
@pytest.mark.parametrize("precision", ["fp32", "int4"])
def test_builder_lfm2moe_decodes_as_one_captured_segment(precision, capfd):
    decodes_as_stock_in_one_segment("lfm2moe", precision, capfd)


def raw_experts_model(path):
    """The model at `path` with its QMoE experts in the raw layout (weights_prepacked=0): a -e cuda graph stock's CPU
    EP can run (kernels/cpu/native.py raw_experts, checked against the builder's packer in tests/kernels)."""
    import onnx
    from onnx import helper, numpy_helper

    from onnxruntime_ep_seamless.kernels.cpu.native import raw_experts
    model = onnx.load(str(path))
    inits = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "QMoE":
            bits = next((a.i for a in node.attribute if a.name == "expert_weight_bits"), 4)
            for name in (n for i, n in enumerate(node.input) if i in (2, 5, 8) and n):
                held = numpy_helper.to_array(inits[name])
                raw = raw_experts(held, held.shape[2] * 8 // bits, held.shape[1], bits)
                inits[name].CopyFrom(numpy_helper.from_array(raw, name))
            node.attribute.append(helper.make_attribute("weights_prepacked", 0))
    return model


@needs_gpu
def test_builder_lfm2moe_cuda_int4_build(capfd):
    """LFM2-MoE's `-e cuda -p int4` graph, its QMoE experts in CUTLASS's layout (the builder's default for CUDA,
    converted at Compile), greedy on our CUDA EP under capture=auto: every node ours, each decode step one captured
    segment. Stock's CPU EP cannot run this graph (GroupQueryAttention with Q/K norms; the other MoE families' graphs
    are checked on themselves: test_cuda_models.py test_builder_family_cuda_build_matches_stock_on_its_graph), so the
    oracle is the `-e cpu -p int4` build of the same checkpoint (the same quantized experts, raw: tests/kernels), fed
    our tokens: at every step our token is its best or within a near-tie (float16 activations move a logit by up to
    ~2e-2 of the logits' scale, as in test_cuda_models.py; a router's near-tie at the last prompt token can move the
    logits more, not the token)."""
    import onnx

    import material
    import onnxruntime_ep_seamless as seamless
    from parity import stock_session
    from test_cuda_ep import cuda_session
    cuda, cpu = (material.genai_model_dir("lfm2moe", "int4", ep) / "model.onnx" for ep in ("cuda", "cpu"))
    if not cuda.exists() or not cpu.exists():
        pytest.skip(f"{cuda} or {cpu} missing: run tests/material.py")
    ours = cuda_session(str(cuda), capture="auto", log_capture="1")
    report = seamless.assert_ep_selected(ours, device="cuda")
    assert not report.fallback_nodes, report
    tokens, _ = greedy(ours, steps=40)
    model = onnx.load(str(cpu))
    for node in model.graph.node:  # stock's CPU MatMulNBits multiplies int8-quantized activations at level 4
        for a in node.attribute:
            if node.op_type == "MatMulNBits" and a.name == "accuracy_level":
                a.i = 0
    assert_near_best(tokens, greedy(stock_session(model), steps=40, forced=tokens)[1])
    assert "1 segment(s), 0 seam(s)" in capfd.readouterr().err


def _dequantized(q, scales, bits, block, cols):
    """float64 [experts, rows, cols] of QMoE's packed weights (the lowest bits first, no zero points: 2^(bits-1))."""
    values = np.stack([(q >> (j * bits)) & (2 ** bits - 1) for j in range(8 // bits)], -1).reshape(*q.shape[:2], -1)
    values = values.astype(np.float64)
    return np.repeat(scales.astype(np.float64), block, axis=2)[..., :cols] * (values[..., :cols] - 2 ** (bits - 1))


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("op", ["MoE", "QMoE"])
@pytest.mark.parametrize("sparse_mixer,fc3", [(1, True), (1, False), (0, True)])
def test_sparse_mixer_and_fc3_gating(op, sparse_mixer, fc3, dtype, qmoe_path):
    """Phi-3.5-MoE's routing and its separate up projection (FC3: act(fc1 . x) * (fc3 . x)), which ORT's CUDA kernels
    have and its CPU EP not, against the float64 reference from the spec (tests/kernels/test_moe.py, its routing
    checked against transformers' PhiMoE): 4-bit block-wise experts, biases on MoE."""
    from test_cuda_ep import run_on_cuda
    from parity import node_model
    tokens, hidden, experts, inter, bits, block = 13, 64, 8, 32, 4, 32
    attrs = dict(k=2, activation_type="silu", use_sparse_mixer=sparse_mixer)
    if op == "MoE":
        x, router, fc1, b1, fc2, b2 = moe_inputs(tokens, hidden, experts, inter, "silu", dtype=dtype)
        fc3_, b3 = moe_inputs(tokens, hidden, experts, inter, "silu", dtype=dtype)[2:4] if fc3 else (None, None)
        inputs = [x, router, fc1, b1, fc2, b2] + ([fc3_, b3] if fc3 else [])
        floats = [None if a is None else a.astype(np.float64) for a in (fc1, fc2, fc3_, b1, b2, b3)]
    else:
        x, router, q1, s1, _, q2, s2, *_ = qmoe_inputs(tokens, hidden, experts, inter, "silu", bits, block,
                                                       bias=False, dtype=dtype)
        q3, s3, _ = quantized(experts, inter, hidden, bits, block, False)
        inputs = [x, router, q1, s1, None, q2, s2, None] + ([q3, s3.astype(dtype)] if fc3 else [])
        attrs.update(expert_weight_bits=bits, block_size=block, weights_prepacked=0)
        floats = [_dequantized(q, s, bits, block, cols) for q, s, cols in ((q1, s1, hidden), (q2, s2, inter))] + \
            [_dequantized(q3, s3.astype(dtype), bits, block, hidden) if fc3 else None, None, None, None]
    model, feeds = node_model(op, inputs, attrs, 21, [dtype], domain="com.microsoft")
    (y,) = run_on_cuda(model, feeds)
    expected = moe_reference(x, router, *floats, "silu", sparse_mixer, 2, qmoe=op == "QMoE")
    tol = 1e-4 if dtype == np.float32 else 3e-3
    np.testing.assert_allclose(y.astype(np.float64), expected, rtol=tol, atol=tol * np.abs(expected).max())
    assert _grouped_ran(qmoe_path[1]) == (op == "QMoE" and qmoe_path[0] == "grouped")


def phimoe_oracle(model_dir, checkpoint):
    """transformers' float32 PhiMoE of `checkpoint` with the weights the export at `model_dir` holds (the builder's
    int4 products dequantized: MatMulNBits and the QMoE experts, raw_experts undoing their CUTLASS layout; its float16
    norms and embeddings): what the export computes, in float32, by another implementation."""
    import onnx
    import torch
    import transformers
    from onnx import numpy_helper

    from onnxruntime_ep_seamless.kernels.cpu.native import raw_experts
    w = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(model_dir / "model.onnx")).graph.initializer}

    def dequantized(q, scales):  # 4-bit [..., rows, cols / 2] low nibble first, zero point 8, blocks of 32
        values = np.stack([q & 15, q >> 4], -1).reshape(*q.shape[:-1], -1).astype(np.float64)
        return np.repeat(scales.astype(np.float64), 32, axis=-1)[..., :values.shape[-1]] * (values - 8)

    def product(name):
        q = w[f"{name}.MatMul.weight_Q4"]
        return dequantized(q.reshape(q.shape[0], -1), w[f"{name}.MatMul.weight_scales"])

    def experts(layer, i):
        pre = w[f"model.layers.{layer}.moe.weight_{i}"]
        return dequantized(raw_experts(pre, pre.shape[2] * 2, pre.shape[1], 4), w[f"model.layers.{layer}.moe.scales_{i}"])
    model = transformers.PhimoeForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32).eval()
    t = lambda a: torch.tensor(np.asarray(a, np.float32))  # noqa: E731
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(t(w["model.embed_tokens.weight"]))
        for i, layer in enumerate(model.model.layers):
            for norm in ("input_layernorm", "post_attention_layernorm"):
                getattr(layer, norm).weight.copy_(t(w[f"model.layers.{i}.{norm}.weight"]))
                getattr(layer, norm).bias.copy_(t(w[f"model.layers.{i}.{norm}.bias"]))
            attn, qkv = layer.self_attn, product(f"model.layers.{i}.attn.qkv_proj")
            q_rows, k_rows = attn.q_proj.weight.shape[0], attn.k_proj.weight.shape[0]
            attn.q_proj.weight.copy_(t(qkv[:q_rows]))
            attn.k_proj.weight.copy_(t(qkv[q_rows:q_rows + k_rows]))
            attn.v_proj.weight.copy_(t(qkv[q_rows + k_rows:]))
            attn.o_proj.weight.copy_(t(product(f"model.layers.{i}.attn.o_proj")))
            layer.mlp.router.weight.copy_(t(product(f"model.layers.{i}.moe.gate")))
            layer.mlp.experts.gate_up_proj.copy_(t(np.concatenate([experts(i, 1), experts(i, 3)], axis=1)))
            layer.mlp.experts.down_proj.copy_(t(experts(i, 2)))
        last = len(model.model.layers)
        model.model.norm.weight.copy_(t(w[f"model.layers.{last}.final_norm_layernorm.weight"]))
        model.model.norm.bias.copy_(t(w[f"model.layers.{last}.final_norm_layernorm.bias"]))
        model.lm_head.weight.copy_(t(product("lm_head")))
    return model


@needs_gpu
def test_builder_phimoe_greedy_matches_pytorch(capfd):
    """PhiMoE's export (FC3 gating and the sparse mixer: no stock EP runs it) greedy on our CUDA EP under capture=auto,
    every node ours, one captured segment a step; the oracle is transformers' float32 model with the export's weights
    (phimoe_oracle) fed our tokens, up to 32 positions (LongRoPE's short factors, which transformers picks for one
    call over at most that many). Tolerance: float16 activations move a logit by ~2e-2 of the logits' scale (the
    dense tests'), and the sparse mixer's mask band (2 jitter_eps relative to the largest logit) turns such rounding
    into a changed expert weight: each token within 5e-2 of the scale of the oracle's best, and 3 in 4 its best."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import material
    import onnxruntime_ep_seamless as seamless
    from test_cuda_ep import cuda_session
    path = material.genai_model_dir("phimoe", "int4", "cuda")
    checkpoint = path.parent / "checkpoint-phimoe"
    if not (path / "model.onnx").exists() or not (checkpoint / "model.safetensors").exists():
        pytest.skip(f"{path} or its checkpoint missing: run tests/material.py")
    ours = cuda_session(str(path / "model.onnx"), capture="auto", log_capture="1")
    report = seamless.assert_ep_selected(ours, device="cuda")
    assert not report.fallback_nodes, report
    tokens, _ = greedy(ours, steps=16, prompt=16)
    prompt = np.random.default_rng(0).integers(0, 1000, (1, 16))  # greedy's
    with torch.no_grad():
        logits = phimoe_oracle(path, checkpoint)(torch.tensor(np.concatenate([prompt[0], tokens[:-1]])[None])).logits
    logits = logits[0, 15:].numpy()
    gaps = [float((row.max() - row[token]) / np.abs(row).max()) for token, row in zip(tokens, logits)]
    assert max(gaps) <= 5e-2, gaps
    assert sum(int(row.argmax()) == token for token, row in zip(tokens, logits)) >= 3 * len(tokens) // 4, gaps
    assert "1 segment(s), 0 seam(s)" in capfd.readouterr().err
