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


# ---------------------------------------------------------------- QMoE

def quantized(experts, rows, cols, bits, block, zero_points):
    """Random QMoE weights for one FC: packed q, scales (per block, or per row when block is 0), zero points."""
    pack = 8 // bits
    values = rng.integers(0, 2 ** bits, (experts, rows, cols)).astype(np.uint8)
    padded = np.zeros((experts, rows, -(-cols // pack) * pack), np.uint8)
    padded[..., :cols] = values
    q = np.zeros(padded.shape[:-1] + (padded.shape[-1] // pack,), np.uint8)
    for j in range(pack):
        q |= padded[..., j::pack] << np.uint8(j * bits)
    blocks = -(-cols // block) if block else 1
    scale = 0.3 / 2 ** (bits - 1)  # weights of about +-0.3 at every width
    scales = (scale * (0.5 + rng.random((experts, rows, blocks) if block else (experts, rows)))).astype(np.float32)
    zp = None
    if zero_points:
        count = blocks if block else rows
        raw = rng.integers(0, 2 ** bits, (experts, rows, count) if block else (experts, count)).astype(np.uint8)
        raw = np.concatenate([raw, np.zeros(raw.shape[:-1] + (-count % pack,), np.uint8)], axis=-1)
        zp = np.zeros(raw.shape[:-1] + (raw.shape[-1] // pack,), np.uint8)
        for j in range(pack):
            zp |= raw[..., j::pack] << np.uint8(j * bits)
    return q, scales, zp


def qmoe_inputs(tokens, hidden, experts, inter, act, bits, block, zero_points=False, bias=True, router_weights=False,
                dtype=np.float32):
    fusion = 2 if act == "swiglu" else 1
    x = rng.standard_normal((tokens, hidden)).astype(dtype)
    router = rng.standard_normal((tokens, experts)).astype(dtype)
    q1, s1, z1 = quantized(experts, fusion * inter, hidden, bits, block, zero_points)
    q2, s2, z2 = quantized(experts, hidden, inter, bits, block, zero_points)
    b1 = (0.1 * rng.standard_normal((experts, fusion * inter))).astype(dtype) if bias else None
    b2 = (0.1 * rng.standard_normal((experts, hidden))).astype(dtype) if bias else None
    rw = rng.random((tokens, experts)).astype(dtype) if router_weights else None
    return [x, router, q1, s1.astype(dtype), b1, q2, s2.astype(dtype), b2, None, None, None, z1, z2, None, rw]


QMOE_CONST = (2, 3, 4, 5, 6, 7, 11, 12)


@pytest.mark.parametrize("act,bits,block,zero_points,normalize,router_weights", [
    ("swiglu", 4, 32, False, 1, False),   # the builder's int4 MoE (LFM2-MoE)
    ("swiglu", 4, 32, False, 0, False),   # QMoE renormalizes over the k chosen whatever the attribute says
    ("silu", 4, 0, False, 0, False),      # row-wise scales
    ("gelu", 4, 16, True, 0, False),      # block-wise zero points; the tanh GELU
    ("relu", 2, 0, True, 1, False),       # 2-bit, row-wise zero points
    ("identity", 4, 32, False, 1, True),  # router_weights, normalized
    ("swiglu", 4, 0, True, 0, True)])
def test_qmoe(act, bits, block, zero_points, normalize, router_weights):
    attrs = dict(k=2, activation_type=act, normalize_routing_weights=normalize, expert_weight_bits=bits)
    if block:
        attrs["block_size"] = block
    if act == "swiglu":
        attrs.update(swiglu_fusion=1, activation_alpha=1.702, activation_beta=1.0, swiglu_limit=7.0)
    check_node("QMoE", qmoe_inputs(21, 64, 4, 32, act, bits, block, zero_points, router_weights=router_weights),
               attrs, opset=21, domain="com.microsoft", const=QMOE_CONST, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bits,block,zero_points", [(4, 32, False), (2, 0, True), (8, 16, True)])
def test_qmoe_many_tokens(monkeypatch, bits, block, zero_points):
    # more tokens per expert than a chunk: the native step's GEMMs over dequantized rows
    monkeypatch.setenv("ORT_QMOE_CPU_QNBIT_GEMM", "fp32")  # stock's 8-bit path exact (test_qmoe_8_bit)
    attrs = dict(k=2, activation_type="swiglu", swiglu_fusion=1, expert_weight_bits=bits)
    if block:
        attrs["block_size"] = block
    check_node("QMoE", qmoe_inputs(60, 64, 3, 48, "swiglu", bits, block, zero_points), attrs, opset=21,
               domain="com.microsoft", const=QMOE_CONST, rtol=1e-4, atol=1e-5)


def test_qmoe_one_block_in_fc2():
    # fc2's rows one block long (scales [E, H, 1]): block-wise still, as stock decides from fc1's scales
    attrs = dict(k=2, activation_type="swiglu", swiglu_fusion=1, expert_weight_bits=4, block_size=32)
    check_node("QMoE", qmoe_inputs(7, 64, 4, 32, "swiglu", 4, 32, zero_points=True), attrs, opset=21,
               domain="com.microsoft", const=QMOE_CONST, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("block,zero_points", [(32, False), (16, True)])  # 16: both FCs in MatMulNBits' layout
def test_qmoe_8_bit(monkeypatch, block, zero_points):
    # stock multiplies 8-bit experts with int8-quantized activations (lossy) unless told to dequantize to float32
    monkeypatch.setenv("ORT_QMOE_CPU_QNBIT_GEMM", "fp32")
    attrs = dict(k=3, activation_type="swiglu", swiglu_fusion=1, normalize_routing_weights=1, expert_weight_bits=8,
                 block_size=block)
    check_node("QMoE", qmoe_inputs(9, 64, 5, 32, "swiglu", 8, block, zero_points), attrs, opset=21,
               domain="com.microsoft", const=QMOE_CONST, rtol=1e-4, atol=1e-5)


def test_qmoe_float16_and_odd_widths():
    attrs = dict(k=2, activation_type="swiglu", swiglu_fusion=1, normalize_routing_weights=1, expert_weight_bits=4,
                 block_size=16)
    check_node("QMoE", qmoe_inputs(5, 40, 3, 24, "swiglu", 4, 16, dtype=np.float16), attrs, opset=21,
               domain="com.microsoft", const=QMOE_CONST, rtol=2e-3, atol=2e-3)


def _qmoe_panels_apply(bits, block, *fcs):
    from onnxruntime_ep_seamless.kernels.cpu import native
    return all(native.lib.seamless_matmul_nbits_panels(n, k, bits, block) for n, k in fcs)


@pytest.mark.parametrize("bits,zero_points", [(4, False), (4, True), (8, True)])
@pytest.mark.parametrize("tokens", [1, 5, 40])  # 40 with k 2 of 3 experts: past a chunk, the GEMMs' path
def test_qmoe_panels(monkeypatch, bits, zero_points, tokens):
    # experts of MatMulNBits' layout at widths whose products read panels (kernels/cpu/moe.py qmoe_with_panels): the
    # Python plan's run (the experts dequantized from panels), the native program's (MatMulNBits' kernel on panels,
    # or rows put back for the GEMMs)
    if not _qmoe_panels_apply(bits, 32, (128, 128), (128, 64)):
        pytest.skip("this CPU's kernels read no panels (no AVX2)")
    monkeypatch.setenv("ORT_QMOE_CPU_QNBIT_GEMM", "fp32")  # stock's 8-bit path exact (test_qmoe_8_bit)
    attrs = dict(k=2, activation_type="swiglu", swiglu_fusion=1, expert_weight_bits=bits, block_size=32,
                 activation_alpha=1.702, activation_beta=1.0, swiglu_limit=7.0)
    check_node("QMoE", qmoe_inputs(tokens, 128, 3, 64, "swiglu", bits, 32, zero_points), attrs, opset=21,
               domain="com.microsoft", const=QMOE_CONST, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("zero_points", [False, True])
def test_qmoe_panels_replace_the_row_layout_at_compile(zero_points):
    """plan/fusion.py (kernels/cpu/moe.py qmoe_with_panels): each expert's weights, scales and zero points (float32
    per block) packed as MatMulNBits' panels, which give the rows back (kernels/cpu/quantization.py rows_of_panels);
    the row layout's copies leave the graph. Row-wise scales, 2 bits or zero points fed at run time keep the rows."""
    from onnxruntime_ep_seamless.graph.onnx_import import import_model
    from onnxruntime_ep_seamless.kernels.cpu.moe import QuantizedExperts
    from onnxruntime_ep_seamless.kernels.cpu.quantization import rows_of_panels
    from onnxruntime_ep_seamless.plan.fusion import fuse
    from parity import node_model
    if not _qmoe_panels_apply(4, 32, (128, 128), (128, 64)):
        pytest.skip("this CPU's kernels read no panels (no AVX2)")
    attrs = dict(k=2, activation_type="swiglu", swiglu_fusion=1, expert_weight_bits=4, block_size=32)
    inputs = qmoe_inputs(3, 128, 3, 64, "swiglu", 4, 32, zero_points)
    graph = import_model(node_model("QMoE", inputs, attrs, 21, None, QMOE_CONST, domain="com.microsoft")[0])
    (node,) = fuse(graph, graph.outputs, "cpu")
    assert node.attrs["panels"] == 1
    for at, (q, s, z), rows, cols in ((2, (2, 3, 11), 128, 128), (5, (5, 6, 12), 128, 64)):
        want = QuantizedExperts(inputs[q], inputs[s], inputs[z], 4, 32, 3, rows, cols)
        for name, j in ((f"in{q}", q), (f"in{s}", s), (f"in{z}", z)):
            if inputs[j] is not None:
                assert graph.value(name).const is None and node.inputs[j] == f"{name}.panels"
        zp = graph.value(node.inputs[z]).const if zero_points else [None] * 3
        for e in range(3):
            got = rows_of_panels(graph.value(node.inputs[q]).const[e], graph.value(node.inputs[s]).const[e], zp[e])
            np.testing.assert_array_equal(got[0], inputs[q][e])
            np.testing.assert_array_equal(got[1], inputs[s][e])
            if zero_points:
                np.testing.assert_array_equal(got[2], want.zero[e])
    for change, const in (({"block_size": 0}, QMOE_CONST), ({"expert_weight_bits": 2}, QMOE_CONST),
                          ({}, QMOE_CONST[:-2])):
        kept = qmoe_inputs(3, 128, 3, 64, "swiglu", change.get("expert_weight_bits", 4), change.get("block_size", 32),
                           zero_points=True)
        graph = import_model(node_model("QMoE", kept, {**attrs, **change}, 21, None, const,
                                        domain="com.microsoft")[0])
        assert "panels" not in fuse(graph, graph.outputs, "cpu")[0].attrs


# ---------------------------------------------------------------- QMoE's CUTLASS-prepacked experts (the CUDA EP's)

@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("n,k", [(256, 256), (128, 512), (96, 320)])
def test_raw_experts_undoes_the_builders_cutlass_packing(bits, n, k):
    """kernels/cpu/native.py raw_experts: onnxruntime-genai's builder packs raw QMoE experts [n, k / pack] into
    CUTLASS's SM80 mixed-GEMM layout [k, n / pack] (what ORT's CUDA QMoE reads); ours gives the raw bytes back."""
    packer = pytest.importorskip("onnxruntime_genai.models.quantization.cuda_quantizer")
    from onnxruntime_ep_seamless.kernels.cpu.native import raw_experts
    pack = 8 // bits
    raw = rng.integers(0, 256, (3, n, k // pack), dtype=np.uint8)
    prepacked = np.stack([packer._pack_weights_for_cuda_mixed_gemm(r, n, k, bits).view(np.uint8).reshape(k, n // pack)
                          for r in raw])
    np.testing.assert_array_equal(raw_experts(prepacked, n, k, bits), raw)


@pytest.mark.parametrize("family", ["lfm2moe", "qwen3_5_moe", "gptoss"])
def test_cuda_builds_experts_become_the_cpu_builds(family):
    """The builder's -e cuda int4 MoE decoders ship CUTLASS-prepacked experts (weights_prepacked -1): planned for the
    CUDA EP (no GPU needed), each QMoE reads constants equal to the -e cpu int4 build's raw experts of the same
    checkpoint, byte for byte, with weights_prepacked=0."""
    import material
    import onnx
    from onnx import numpy_helper
    from onnxruntime_ep_seamless.graph.onnx_import import import_path
    from onnxruntime_ep_seamless.plan.fusion import fuse
    cuda, cpu = (material.genai_model_dir(family, "int4", ep) / "model.onnx" for ep in ("cuda", "cpu"))
    if not cuda.exists() or not cpu.exists():
        pytest.skip("builder decoders missing: run tests/material.py")
    graph = import_path(str(cuda))
    raw = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(cpu)).graph.initializer if "experts" in t.name}
    nodes = [n for n in fuse(graph, graph.outputs, "cuda") if n.op_type == "QMoE"]
    assert nodes and all(n.attrs["weights_prepacked"] == 0 for n in nodes)
    for node in nodes:
        for i in (2, 5):
            assert node.inputs[i].endswith(".raw")
            np.testing.assert_array_equal(graph.value(node.inputs[i]).const, raw[node.inputs[i][:-4]])


def _qmoe_graph(fc1_shape, fc2_shape, hidden, **attrs):
    from onnxruntime_ep_seamless.graph.ir import Graph, Node, Value
    graph = Graph([], {}, ["x"], ["y"])
    graph.values["x"] = Value("x", 10, ("tokens", hidden))
    for name, shape in (("fc1", fc1_shape), ("fc2", fc2_shape)):
        graph.values[name] = Value(name, 2, shape, np.zeros(shape, np.uint8))
    for name in ("router", "s1", "s2", "y"):
        graph.values[name] = Value(name, 10, None)
    node = Node("moe", "QMoE", "com.microsoft", 1, ["x", "router", "fc1", "s1", "", "fc2", "s2"], ["y"],
                dict(k=2, activation_type="silu", expert_weight_bits=4, **attrs), index=0)
    return node, graph


@pytest.mark.parametrize("fc1,fc2,attrs,expected", [
    ((8, 128, 64), (8, 256, 32), {}, (False, None)),                     # only raw fits -1: a CPU build, read raw
    ((8, 256, 64), (8, 128, 128), {}, (True, None)),                     # CUTLASS's layout fits -1: as ORT's CUDA EP
    ((8, 256, 64), (8, 128, 128), {"weights_prepacked": 0}, (False, None)),  # 0: raw, whatever the shapes
    ((8, 128, 64), (8, 256, 32), {"weights_prepacked": 1}, (True, "not CUTLASS's layout")),  # 1: a clear decline
    ((8, 256, 64), (8, 128, 128), {"quant_type": "fp4"}, (False, None)),  # not integer experts: not this layout
])
def test_expert_layout_decision(fc1, fc2, attrs, expected):
    """kernels/cuda/moe.py expert_layout: which layout our CUDA QMoE reads the experts in (hidden 256, inter 128)."""
    from onnxruntime_ep_seamless.kernels.cuda.moe import expert_layout
    prepacked, problem = expert_layout(*_qmoe_graph(fc1, fc2, 256, **attrs))
    assert prepacked == expected[0]
    assert (problem is None) if expected[1] is None else expected[1] in problem


# ---------------------------------------------------------------- the sparse mixer and FC3 gating (the CUDA EP's)

def sparse_mixer_reference(logits, jitter_eps=0.01):
    """(chosen, weights) [tokens, 2], float64, from the spec (Phi-3.5-MoE's sparse mixer as ORT's CUDA QMoE routes):
    slot 0 the largest logit, weighted by the softmax over the logits within 2 jitter_eps of it relative to
    max(|logit|, it), the others masked; slot 1 the largest of the rest, the same among all but slot 0's expert."""
    logits = np.asarray(logits, np.float64)
    chosen, weights = np.zeros((len(logits), 2), np.int64), np.zeros((len(logits), 2))
    for t, row in enumerate(logits):
        left = np.ones(len(row), bool)
        for s in range(2):
            best = int(np.flatnonzero(left)[np.argmax(row[left])])
            top = row[best]
            kept = left & ~(top - row > 2 * jitter_eps * np.maximum(np.abs(row), top))
            chosen[t, s], weights[t, s] = best, 1.0 / np.exp(row[kept] - top).sum()
            left[best] = False
    return chosen, weights


def moe_reference(x, logits, fc1, fc2, fc3, b1, b2, b3, act, sparse_mixer, k, qmoe=False):
    """float64 MoE with FC3 gating: sum over the routes of weight * (fc2 . (act(fc1 . x + b1) * (fc3 . x + b3)) + b2);
    fc*: float experts [experts, out, in]. Routes: the sparse mixer's, else the k largest logits weighted by the
    softmax over all (MoE) or over those k (QMoE)."""
    x, logits = (np.asarray(a, np.float64) for a in (x, logits))
    if sparse_mixer:
        chosen, weights = sparse_mixer_reference(logits)
    else:
        chosen = np.argsort(-logits, axis=1, kind="stable")[:, :k]
        picked = np.take_along_axis(logits, chosen, axis=1) if qmoe else logits
        e = np.exp(picked - picked.max(axis=1, keepdims=True))
        weights = np.take_along_axis(e / e.sum(axis=1, keepdims=True), np.arange(k)[None] if qmoe else chosen,
                                     axis=1)
    activations = {"silu": lambda h: h / (1 + np.exp(-h)), "relu": lambda h: np.maximum(h, 0), "identity": lambda h: h}
    y = np.zeros_like(x)
    for t in range(len(x)):
        for e, w in zip(chosen[t], weights[t]):
            h = activations[act](fc1[e] @ x[t] + (b1[e] if b1 is not None else 0))
            if fc3 is not None:
                h = h * (fc3[e] @ x[t] + (b3[e] if b3 is not None else 0))
            y[t] += w * (fc2[e] @ h + (b2[e] if b2 is not None else 0))
    return y


def test_sparse_mixer_reference_is_transformers_phimoe():
    """The reference routing (above) against transformers' Phi-3.5-MoE router in eval mode, ties of the two largest
    logits and logits inside the jitter band included."""
    torch = pytest.importorskip("torch")
    phimoe = pytest.importorskip("transformers.models.phimoe.modeling_phimoe")
    logits = rng.standard_normal((64, 8))
    logits[:8, 3] = logits[:8].max(axis=1) * (1 - 0.005)  # inside the band of the largest
    logits[8:12, 5] = logits[8:12, 2]  # a tie (not the largest)
    weights, experts = phimoe.sparsemixer(torch.tensor(logits), jitter_eps=0.01, training=False, top_k=2)
    chosen, ours = sparse_mixer_reference(logits)
    np.testing.assert_array_equal(chosen, experts.numpy())
    np.testing.assert_allclose(ours, weights.numpy(), rtol=1e-12)


def test_the_cpu_ep_leaves_the_sparse_mixer_and_fc3_to_stock():
    """Stock's CPU MoE ignores use_sparse_mixer (plain top-k) and refuses FC3: our CPU EP declines both, so the
    node is stock's (its answer, its error)."""
    from onnxruntime_ep_seamless.graph.onnx_import import import_model
    from onnxruntime_ep_seamless.kernels.registry import lookup
    from parity import node_model
    inputs = moe_inputs(3, 16, 8, 8, "silu")
    for attrs, fc3, reason in (({"use_sparse_mixer": 1}, False, "ignores it"), ({}, True, "FC3")):
        model, _ = node_model("MoE", inputs + ([inputs[2].copy()] if fc3 else []),
                              dict(k=2, activation_type="silu", **attrs), 21, [np.float32], domain="com.microsoft")
        graph = import_model(model)
        kdef, why = lookup(graph.nodes[0], graph, "cpu")
        assert kdef is None and reason in why


@pytest.mark.parametrize("initializer,expected", [(True, None), (False, "not initializers")])
def test_expert_layout_of_weights_without_data(initializer, expected):
    """When ORT asks what the EP claims, large initializers come without their data (they arrive at Compile): still
    claimed; prepacked expert weights that are graph inputs are declined (nothing to convert at Compile)."""
    from onnxruntime_ep_seamless.kernels.cuda.moe import expert_layout
    node, graph = _qmoe_graph((8, 256, 64), (8, 128, 128), 256)
    for name in ("fc1", "fc2"):
        graph.values[name].const = None
    graph.initializers = ["fc1", "fc2"] if initializer else []
    prepacked, problem = expert_layout(node, graph)
    assert prepacked and ((problem is None) if expected is None else expected in problem)


@pytest.mark.parametrize("prepacked", [1, 2])
def test_qmoe_weights_prepacked_on_the_cpu_is_stocks(prepacked):
    """weights_prepacked=1 selects stock's CPU EP's own prepacked expert layout (it fails this non-SwiGLU node at
    load): declined, so stock's answer (here its error) stands; 2 is out of range: refused at load as stock does."""
    from parity import ep_session, node_model, stock_session
    attrs = dict(k=2, activation_type="silu", expert_weight_bits=4, block_size=32, weights_prepacked=prepacked)
    model, feeds = node_model("QMoE", qmoe_inputs(5, 64, 4, 32, "silu", 4, 32), attrs, 21, [np.float32],
                              domain="com.microsoft", const=QMOE_CONST)
    if prepacked == 1:
        from onnxruntime_ep_seamless.graph.onnx_import import import_model
        from onnxruntime_ep_seamless.kernels.registry import lookup
        graph = import_model(model)
        kdef, why = lookup(graph.nodes[0], graph, "cpu")
        assert kdef is None and "weights_prepacked=1" in why
        with pytest.raises(Exception, match="SwiGLU"):
            stock_session(model).run(None, feeds)
        return
    for make in (stock_session, ep_session):
        with pytest.raises(Exception, match="weights_prepacked must be -1, 0, or 1"):
            make(model).run(None, feeds)
