"""Models on the CUDA EP (skipped without a GPU): every node on our EP, outputs within tolerance
of stock ORT's CPU EP. Models come from the test material cache (on a GPU machine without it:
tests/gpu_material.py)."""
from pathlib import Path

import numpy as np
import onnx
import pytest

import material
from parity import assert_close, stock_session
from test_cuda_ep import DEVICES, PROBLEM, run_on_cuda

pytestmark = pytest.mark.skipif(not DEVICES, reason=f"no NVIDIA GPU for the CUDA EP ({PROBLEM or 'none found'})")


def model_path(path: Path) -> str:
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    return str(path)


# cuBLAS accumulates in another order than MLAS: float32 agrees to ~1e-5 of the values' scale
RTOL, ATOL = 1e-4, 1e-4


@pytest.mark.parametrize("name", material.LIGHT_MODELS)
def test_light_cnn(name):
    path = model_path(material.light_model(name)[0])
    model = onnx.load(path)
    inits = {i.name for i in model.graph.initializer}
    (inp,) = [i for i in model.graph.input if i.name not in inits]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    x = (np.arange(np.prod(shape)) % 255 / 255.0).astype(np.float32).reshape(shape)  # onnx's dummy input
    (ours,) = run_on_cuda(path, {inp.name: x})
    (ref,) = stock_session(path).run(None, {inp.name: x})
    # conv stacks accumulate rounding differently from MLAS: relative 1e-4 of the output scale
    assert_close(ours, ref, rtol=1e-4, atol=1e-5, name=name)


@pytest.mark.parametrize("export", ["minilm_op17.onnx", "minilm_dynamo_op23.onnx"])
def test_minilm_real_weights(export):
    path = model_path(material.minilm_dir() / export)
    feeds = material.minilm_inputs(["A plugin execution provider runs this sentence.", "Short one.",
                                    "Real weights, real tokenizer, real activations."])
    (ours,) = run_on_cuda(path, feeds)
    (ref,) = stock_session(path).run(None, feeds)
    keep = feeds["attention_mask"].astype(bool)  # padded positions carry no meaning
    assert_close(ours[keep], ref[keep], RTOL, ATOL, "last_hidden_state")


@pytest.mark.parametrize("export", [name for name, *_ in material.TINY_DECODERS])
@pytest.mark.parametrize("batch,seq,past", [(2, 5, 3), (1, 1, 7), (1, 6, 0)])
def test_tiny_llama(export, batch, seq, past):
    from models.test_real_models import llama_feeds
    path = model_path(material.tiny_llama_dir() / export)
    feeds = llama_feeds(batch, seq, past)
    ours = run_on_cuda(path, feeds)
    ref = stock_session(path).run(None, feeds)
    for i, (o, r) in enumerate(zip(ours, ref)):
        assert_close(o, r, RTOL, ATOL, f"output {i}")


GREEDY_STEPS = 32


@pytest.mark.parametrize("precision", ["fp16", "int4"])
def test_builder_qwen2_cuda_greedy_tokens(precision):
    """The model builder's `-e cuda` Qwen2 (float16 activations and KV, fp16 or int4 weights): 32 greedy
    steps on our CUDA EP give stock ORT CPU's tokens running the same file. Where the two first differ,
    the fp32 build of the same checkpoint, fed the shared prefix, must see a near-tie between them."""
    import onnxruntime_ep_seamless as seamless
    from models.test_llm_decoders import greedy
    from test_cuda_ep import cuda_session
    path = model_path(material.genai_small_dir(precision, "cuda") / "model.onnx")
    ids = np.random.default_rng(0).integers(0, 1000, 8)
    ours_session = cuda_session(path)
    report = seamless.assert_ep_selected(ours_session, device="cuda")
    assert not report.fallback_nodes, report
    ours, ours_logits = greedy(ours_session, ids, GREEDY_STEPS)
    ref, ref_logits = greedy(stock_session(path), ids, GREEDY_STEPS)
    ours_logits, ref_logits = ([v.astype(np.float32) for v in logits] for logits in (ours_logits, ref_logits))
    same = next((k for k in range(GREEDY_STEPS) if ours[k] != ref[k]), GREEDY_STEPS)
    for k in range(min(same + 1, GREEDY_STEPS)):  # same context up to the first difference
        # float16 activations: the two EPs differ by a few float16 ulps of the logits' scale
        scale = float(np.max(np.abs(ref_logits[k])))
        np.testing.assert_allclose(ours_logits[k], ref_logits[k], rtol=0, atol=2e-2 * scale, err_msg=f"step {k}")
    if same == GREEDY_STEPS:
        return
    oracle_path = model_path(material.genai_small_dir("fp32", "cpu") / "model.onnx")
    oracle = greedy(stock_session(oracle_path), np.concatenate([ids, ref[:same]]), 0)[1][0]
    a, b = ours[same], ref[same]
    # the reduced-precision model moves logits away from fp32 by `drift`; a tie is a gap within that
    drift = float(np.max(np.abs(ref_logits[same][[a, b]] - oracle[[a, b]])))
    scale = float(np.max(np.abs(ref_logits[same])))
    assert abs(oracle[a] - oracle[b]) <= 2 * drift + 2e-2 * scale, (
        f"step {same}: ours {a}, stock {b}; fp32 logits {oracle[a]:.4f} vs {oracle[b]:.4f} (not a near-tie)")


@pytest.mark.parametrize("precision", ["fp16", "int4"])
def test_onnxruntime_genai_drives_the_cuda_ep(precision):
    """onnxruntime-genai's Generator on our CUDA EP, registered as a plugin library and appended as the model's
    provider (docs/user-guide.md): the graph is wholly ours (fallback disabled), and each of genai's 24 greedy tokens
    is stock's best at its step or a near-tie (stock's CPU EP on the same file, fed genai's tokens)."""
    og = pytest.importorskip("onnxruntime_genai")
    import onnxruntime_ep_seamless as seamless
    from models.test_llm_decoders import greedy
    from onnxruntime_ep_seamless.tools.bench import register_for_genai
    from test_cuda_ep import cuda_session
    from test_cuda_moe import assert_near_best
    folder = material.genai_small_dir(precision, "cuda")
    path = model_path(folder / "model.onnx")
    report = seamless.assert_ep_selected(cuda_session(path), device="cuda")
    assert not report.fallback_nodes, report
    name = register_for_genai(og, "cuda")
    prompt, steps = np.random.default_rng(0).integers(0, 1000, 8).astype(np.int32), 24
    config = og.Config(str(folder))
    config.clear_providers()
    config.append_provider(name)
    model = og.Model(config)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + steps, min_length=len(prompt) + steps, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(prompt)
    while not generator.is_done():
        generator.generate_next_token()
    tokens = [int(t) for t in generator.get_sequence(0)[len(prompt):]]
    del generator, model
    assert len(tokens) == steps
    assert_near_best(tokens, greedy(stock_session(path), prompt, steps, forced=tokens)[1])


@pytest.mark.parametrize("family", ["qwen3", "phi3"])  # tests/gpu_material.py CUDA_BUILD_DECODERS
def test_builder_family_cuda_build_greedy_tokens(family, capfd):
    """A builder family's `-e cuda -p fp16` graph (its own fused ops: Qwen3's Q/K norms inside GroupQueryAttention,
    which stock's CPU EP refuses; Phi-3's LongRoPE If) greedy on our CUDA EP under capture=auto, every node ours,
    each decode step one captured segment; the oracle is the same checkpoint's fp32 CPU build on stock's CPU EP fed
    our tokens (teacher forcing): at every step our token is its best or within a near-tie of it (float16
    activations move a logit by up to ~2e-2 of the logits' scale, as in test_builder_qwen2_cuda_greedy_tokens)."""
    import onnxruntime_ep_seamless as seamless
    from models.test_llm_decoders import greedy
    from test_cuda_ep import cuda_session
    from test_cuda_moe import assert_near_best
    ours_session = cuda_session(model_path(material.genai_model_dir(family, "fp16", "cuda") / "model.onnx"),
                                capture="auto", log_capture="1")
    report = seamless.assert_ep_selected(ours_session, device="cuda")
    assert not report.fallback_nodes, report
    ids = np.random.default_rng(0).integers(0, 1000, 8)
    tokens, _ = greedy(ours_session, ids, GREEDY_STEPS)
    oracle = stock_session(model_path(material.genai_model_dir(family, "fp32") / "model.onnx"))
    assert_near_best(tokens, greedy(oracle, ids, GREEDY_STEPS, forced=tokens)[1])
    assert "1 segment(s), 0 seam(s)" in capfd.readouterr().err


# the families whose -e cuda graph stock's CPU EP cannot run (GroupQueryAttention with Q/K norms: "implemented only on
# the CUDA and WebGPU EPs"): their oracles are test_builder_family_cuda_build_greedy_tokens's (qwen3) and
# test_cuda_moe.py's (lfm2moe); gemma3's and lfm2's have none yet
QK_NORM_FAMILIES = ("qwen3", "gemma3", "lfm2", "lfm2moe")
WINDOW_FAMILIES = ("gemma2", "gemma3", "gptoss")  # local layers: window-sized KV caches of 16 rows (tests/material.py)


@pytest.mark.parametrize("family,precision", [(f, p) for f in material.GENAI_FAMILIES if f not in QK_NORM_FAMILIES
                                              for p in material.GENAI_FAMILY_CUDA_PRECISIONS])
def test_builder_family_cuda_build_matches_stock_on_its_graph(family, precision, capfd):
    """Every builder family's `-e cuda` graph (float16; int4: MatMulNBits and, for the MoE families, CUTLASS-prepacked
    QMoE experts) greedy on our CUDA EP under capture=auto for 24 steps after a 16-token prompt: every node ours, each
    decode step one captured segment. The oracle is stock's CPU EP on the same graph (its experts raw:
    test_cuda_moe.raw_experts_model), fed our tokens: float16 both, so each token is its best or within 2e-2 of the
    logits' scale (as test_builder_family_cuda_build_greedy_tokens). The -e cpu builds are no oracle for int4: the
    builder quantizes for CUDA otherwise (other scales)."""
    import onnxruntime_ep_seamless as seamless
    from test_cuda_ep import cuda_session
    from test_cuda_moe import assert_near_best, greedy, raw_experts_model
    path = material.genai_model_dir(family, precision, "cuda") / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} missing: run tests/material.py (tests/gpu_material.py pack-cuda-graphs)")
    window = 16 if family in WINDOW_FAMILIES else 0
    ours = cuda_session(str(path), capture="auto", log_capture="1")
    report = seamless.assert_ep_selected(ours, device="cuda")
    assert not report.fallback_nodes, report
    tokens, _ = greedy(ours, steps=24, window=window)
    assert_near_best(tokens, greedy(stock_session(raw_experts_model(path)), steps=24, window=window, forced=tokens)[1])
    assert "1 segment(s), 0 seam(s)" in capfd.readouterr().err


@pytest.mark.parametrize("precision", ["fp16", "int4"])
@pytest.mark.parametrize("max_len", [0, 64])  # growing KV, and max-length (shared-buffer style) KV
@pytest.mark.parametrize("capture", ["off", "auto"])  # eager launches, and the captured graph
def test_builder_decode_step_steady_state(precision, max_len, capture):
    """A decode step repeated with the same inputs reaches a steady state that allocates no GPU
    memory from the driver and reads no GPU value on the host (nothing waits for the stream)."""
    from models.test_llm_decoders import empty_past, presents_as_past, step_feeds
    from onnxruntime_ep_seamless.runtime.native import NATIVES
    from onnxruntime_ep_seamless.runtime.cuda import CudaRuntime
    from test_cuda_ep import cuda_session
    session = cuda_session(model_path(material.genai_small_dir(precision, "cuda") / "model.onnx"), capture=capture)
    ids = np.random.default_rng(0).integers(0, 1000, 8)
    out = session.run(None, step_feeds(ids, len(ids), empty_past(session, length=max_len)))
    feeds = step_feeds([int(np.argmax(out[0][0, -1]))], len(ids) + 1, presents_as_past(session, out))
    first = session.run(None, feeds)
    for _ in range(3):  # warm-up: the scratch cache fills
        session.run(None, feeds)
    runtime, lib = CudaRuntime._instances[0], NATIVES["cuda"].lib  # the first GPU: the session's
    reads, allocations = runtime.host_reads, lib.seamless_cuda_device_allocations()
    for _ in range(3):
        again = session.run(None, feeds)
    assert runtime.host_reads == reads, f"{runtime.host_reads - reads} host reads in 3 steady-state steps"
    assert lib.seamless_cuda_device_allocations() == allocations, "driver allocations in the steady state"
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)  # and the same results every time


def test_growing_kv_reuses_device_memory():
    """Fed back as past, each step's present tensors are a little longer than the last: the caching
    allocator's size classes let them reuse the blocks freed a step before for several steps (an
    exact-size cache would take a new block from the driver for every present of every step)."""
    from models.test_llm_decoders import empty_past, presents_as_past, step_feeds
    from onnxruntime_ep_seamless.runtime.native import NATIVES
    from test_cuda_ep import cuda_session
    session = cuda_session(model_path(material.genai_small_dir("fp16", "cuda") / "model.onnx"), capture="off")
    ids = list(np.random.default_rng(0).integers(0, 1000, 40))
    out = session.run(None, step_feeds(ids, len(ids), empty_past(session)))
    presents, lib, allocations = len(out) - 1, NATIVES["cuda"].lib, None
    for step in range(20):
        if step == 4:
            allocations = lib.seamless_cuda_device_allocations()
        ids.append(int(np.argmax(out[0][0, -1])))
        out = session.run(None, step_feeds(ids[-1:], len(ids), presents_as_past(session, out)))
    new = lib.seamless_cuda_device_allocations() - allocations
    assert new < 16 * presents / 2, f"{new} driver allocations in 16 growing steps of {presents} presents"


@pytest.mark.parametrize("precision", ["fp16", "int4"])
def test_released_sessions_give_their_gpu_memory_back(precision):
    """ORT releasing a session releases its compiled nodes, which give their weights (and the layouts kernels
    made of them) back to the caching allocator once the GPU is done with them: after each session of one
    model is created, run and released, the memory in use is what it was before, but for less than a quarter
    of the model's weights (the counters of each session's stream, runtime/cuda.py CudaRuntime.counters, are
    kept for good; a leak keeps all the weights)."""
    import gc
    from models.test_llm_decoders import empty_past, step_feeds
    from onnxruntime_ep_seamless.runtime.native import NATIVES
    from test_cuda_ep import cuda_session
    folder = material.genai_small_dir(precision, "cuda")
    path, lib = model_path(folder / "model.onnx"), NATIVES["cuda"].lib
    weights = (folder / "model.onnx.data").stat().st_size
    ids, in_use = list(np.random.default_rng(0).integers(0, 1000, 8)), [lib.seamless_cuda_device_bytes_in_use()]
    for _ in range(3):
        session = cuda_session(path, capture="off")
        session.run(None, step_feeds(ids, len(ids), empty_past(session)))
        del session
        gc.collect()
        in_use.append(lib.seamless_cuda_device_bytes_in_use())
    kept = np.diff(in_use).tolist()
    assert max(kept) < weights / 4, f"bytes each session kept in use after its release: {kept}; weights {weights}"


def test_nodes_around_an_if_ort_runs():
    """An If the CUDA EP declines (its then_branch passes a value through strings, which the CUDA EP leaves to the
    CPU), nor its branches' nodes: ORT's CPU EP runs them, and hands the If's output to our Neg in host memory (no
    copy): read as device memory it was an illegal address, the GPU context lost for the process (compute-sanitizer:
    seamless_unary_f32 reading a host pointer). Inputs in host memory are uploaded."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels"))
    import onnxruntime as ort
    from onnx import TensorProto, helper
    import onnxruntime_ep_seamless as seamless
    from test_control import _if_on_input
    model = _if_on_input()
    then = next(a.g for n in model.graph.node if n.op_type == "If" for a in n.attribute if a.name == "then_branch")
    then.node[0].output[0] = "t0"
    then.node.extend([helper.make_node("Cast", ["t0"], ["ts"], to=TensorProto.STRING),
                      helper.make_node("Cast", ["ts"], ["t"], to=TensorProto.FLOAT)])
    sess = ort.InferenceSession(model.SerializeToString(), seamless.session_options(device="cuda"))
    report = seamless.partition_report(sess, device="cuda")
    assert sorted(op for _, op in report.ep_nodes) == ["Neg", "Relu"], report
    assert sorted(op for _, op, _ in report.fallback_nodes) == ["Add", "Cast", "Cast", "If", "Mul"], report
    rng = np.random.default_rng(0)
    for k in range(6):  # past capture=auto's warm-up: such a node runs eagerly
        feeds = {"c": np.array(k % 2 == 0), "a": rng.standard_normal((3, 4), np.float32),
                 "z": rng.standard_normal((3, 4), np.float32)}
        assert_close(sess.run(None, feeds)[0], stock_session(model).run(None, feeds)[0], 1e-6, 1e-6)
