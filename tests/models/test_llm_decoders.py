"""LLM decoders built offline with onnxruntime-genai's model builder (tests/material.py:
tiny random-weight Qwen2 and Llama, 2 layers, hidden 256, vocab 32000; fp32, int8 and int4 for
the CPU EP; and Mistral, Qwen3, Granite, OLMo, Nemotron, SmolLM3, Gemma 2 at vocab 1024, fp32 and int4),
run entirely on our EP (CPU fallback disabled) against stock ORT's CPU EP.

The graphs: com.microsoft GroupQueryAttention (packed QKV, rotary fused, seqlens_k from the
attention mask), SkipSimplifiedLayerNormalization, SimplifiedLayerNormalization, MatMulNBits
(int4/int8, block 32, accuracy_level 4) or MatMul (fp32), plus a few standard ops.

Tolerances (logits are O(1): random weights, |logit| < ~2):
- fp32: every op matches stock to float rounding (different summation orders over K <= 512 and
  over the keys); measured max |diff| 1.6e-6 over 3 x 33 steps: atol 1e-4 on logits, 1e-5 on
  the KV cache.
- int8/int4: both sides quantize each 32-value block of every MatMulNBits input to int8
  (MLAS's accuracy_level 4 path, which we reproduce exactly: op-level parity is ~1e-7). But a
  float difference of one ulp upstream (any op's summation order) can move an activation across
  a rounding boundary of that quantization: one int8 code changes by 1, i.e. that input moves by
  max|block| / 127 (~1% of the block's scale), and through the residual stream and the KV cache
  the logits move by up to ~1% of their scale. Measured over 6 prompts x 8 steps per model:
  runs without such a flip differ by <= 8e-7, runs with one by up to 1.5e-2 on logits (relative
  L2 9e-3) and 8e-3 on the cache. atol 3e-2 on logits and 2e-2 on the cache, plus a relative L2
  bound of 2e-2 on logits, which a wrong kernel (not a rounding flip) would exceed.
Greedy decoding: 16-token prefill, then 32 steps feeding present.* back as past_key_values.*.
Our tokens must equal stock's; where they first differ, stock's own top-2 logit gap there must
be below the logit tolerance (a near-tie: either token is a correct greedy choice), and from
then on the check is teacher-forced: our EP fed stock's tokens must give stock's logits.
"""
from pathlib import Path

import numpy as np
import pytest

import material
from parity import assert_close, ep_session, stock_session

import onnxruntime_ep_seamless as seamless

PREFILL, STEPS = 16, 32
# Qwen2 and Llama at three precisions; the other builder families at fp32 and int4 (Gemma 2's and 3's window-sized
# caches need their capacity from the first step, which these loops' empty past lacks, and LFM2's convolution state
# is no KV cache: test_builder_family_under_onnxruntime_genai)
STATE_FAMILIES = ("gemma2", "gemma3", "lfm2", "lfm2moe", "qwen3_5", "qwen3_5_moe", "gptoss")
WINDOWED = ("gemma2", "gemma3", "gptoss")  # local layers' window-sized KV caches, a capacity of 16
MODELS = [(arch, precision) for arch in material.GENAI_ARCHS for precision in material.GENAI_PRECISIONS] + \
    [(family, precision) for family in material.GENAI_FAMILIES  # those with states or windows: below
     if family not in STATE_FAMILIES for precision in material.GENAI_FAMILY_PRECISIONS]
LOGIT_TOL = {"fp32": 1e-4, "int8": 3e-2, "int4": 3e-2}
CACHE_TOL = {"fp32": 1e-5, "int8": 2e-2, "int4": 2e-2}
REL_L2_TOL = 2e-2


def assert_logits_close(ours, ref, precision, name):
    assert_close(ours, ref, rtol=0, atol=LOGIT_TOL[precision], name=name)
    rel = float(np.linalg.norm(ours - ref) / np.linalg.norm(ref))
    assert rel < REL_L2_TOL, f"{name}: relative L2 difference {rel:.2e} >= {REL_L2_TOL}"


def model_path(arch, precision):
    path = material.genai_model_dir(arch, precision) / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} missing: run tests/material.py")
    return str(path)


_SESSIONS: dict = {}


@pytest.fixture(scope="module", autouse=True)
def _release_sessions():
    yield
    _SESSIONS.clear()  # release while the EP's Python side is alive, not at interpreter exit


def sessions(arch, precision):
    """(ours, stock) sessions, cached per model for the module."""
    key = (arch, precision)
    if key not in _SESSIONS:
        path = model_path(arch, precision)
        _SESSIONS[key] = (ep_session(path), stock_session(path))
    return _SESSIONS[key]


def layer_count(sess):
    return sum(1 for i in sess.get_inputs() if i.name.startswith("past_key_values.") and i.name.endswith(".key"))


HEAD_SIZE = 64  # hidden 256 / 4 heads in every test decoder; the builder leaves this dim symbolic


def empty_past(sess, batch=1, length=0):
    """Zero KV inputs with the session's KV head count and type (float32 or float16)."""
    dtypes = {"tensor(float)": np.float32, "tensor(float16)": np.float16}
    return {i.name: np.zeros((batch, i.shape[1], length, HEAD_SIZE), dtypes[i.type])
            for i in sess.get_inputs() if i.name.startswith("past_key_values.")}


def step_feeds(tokens, total, past):
    ids = np.asarray(tokens, np.int64).reshape(1, -1)
    return {"input_ids": ids, "attention_mask": np.ones((1, total), np.int64), **past}


def presents_as_past(sess, outputs):
    names = [o.name for o in sess.get_outputs()]
    past = {}
    for name, value in zip(names, outputs):
        if name.startswith("present."):
            past[name.replace("present.", "past_key_values.")] = value
    return past


def prompt(seed=0):
    return np.random.default_rng(seed).integers(0, 1000, PREFILL)  # ids the tokenizer knows


def greedy(sess, prompt_ids, steps, forced=None):
    """Greedy decode: (tokens, logits of each step). With `forced`, feed those tokens instead
    of the argmax (teacher forcing) and still return the argmax of each step."""
    out = sess.run(None, step_feeds(prompt_ids, len(prompt_ids), empty_past(sess)))
    logits, tokens = [out[0][0, -1]], []
    total = len(prompt_ids)
    for step in range(steps):
        tokens.append(int(np.argmax(logits[-1])))
        nxt = forced[step] if forced is not None else tokens[-1]
        total += 1
        out = sess.run(None, step_feeds([nxt], total, presents_as_past(sess, out)))
        logits.append(out[0][0, -1])
    return tokens, logits


def assert_steps_match(ours, stock, ids, precision, steps, max_len=0):
    """Prefill, then `steps - 1` decode steps on stock's greedy tokens: logits and every KV output
    match stock's. max_len > 0: max-length past/present buffers (shared-buffer style)."""
    feeds = step_feeds(ids, len(ids), empty_past(stock, length=max_len))
    for step in range(steps):
        got, want = ours.run(None, feeds), stock.run(None, feeds)
        if max_len:
            assert got[1].shape[2] == max_len
        for out, a, b in zip(stock.get_outputs(), got, want):
            if out.name == "logits":
                assert_logits_close(a, b, precision, f"step {step} logits")
            else:
                assert_close(a, b, rtol=0, atol=CACHE_TOL[precision], name=f"step {step} {out.name}")
        token = int(np.argmax(want[0][0, -1]))
        feeds = step_feeds([token], len(ids) + step + 1, presents_as_past(stock, want))


@pytest.mark.parametrize("arch,precision", MODELS)
def test_fully_claimed(arch, precision):
    ours, _ = sessions(arch, precision)
    report = seamless.assert_ep_selected(ours)
    assert not report.fallback_nodes and not report.declined, report
    ops = {op for _, op in report.ep_nodes}
    assert "com.microsoft::GroupQueryAttention" in ops
    assert {"com.microsoft::SkipSimplifiedLayerNormalization", "com.microsoft::SkipLayerNormalization"} & ops
    assert ("com.microsoft::MatMulNBits" in ops) == (precision != "fp32")


@pytest.mark.parametrize("arch,precision", MODELS)
def test_prefill_and_decode_parity(arch, precision):
    """Logits and the whole KV cache after a 16-token prefill and two decode steps."""
    assert_steps_match(*sessions(arch, precision), prompt(1), precision, steps=3)


@pytest.mark.parametrize("arch,precision", MODELS)
def test_greedy_decode_matches_stock(arch, precision):
    ours, stock = sessions(arch, precision)
    ids = prompt(2)
    want_tokens, want_logits = greedy(stock, ids, STEPS)
    got_tokens, _ = greedy(ours, ids, STEPS)
    assert_greedy_matches(got_tokens, want_tokens, want_logits, precision)
    # teacher-forced on stock's tokens: the logits of every step match
    from onnxruntime_ep_seamless.runtime.native import NATIVES
    lib = NATIVES["cpu"].lib
    native_runs, family_runs = lib.seamless_native_runs(), lib.seamless_family_runs()
    _, forced_logits = greedy(ours, ids, STEPS, forced=want_tokens)
    for step, (a, b) in enumerate(zip(forced_logits, want_logits)):
        assert_logits_close(a, b, precision, f"teacher-forced step {step} logits")
    # the decode steps ran in C: recorded bindings, and exec/program.py's family of the decode binding
    assert lib.seamless_native_runs() - native_runs >= STEPS and lib.seamless_family_runs() - family_runs >= STEPS // 2


def assert_greedy_matches(got_tokens, want_tokens, want_logits, precision):
    """Our greedy tokens are stock's, or part from them where stock's top-2 logits are a near-tie."""
    if got_tokens != want_tokens:
        k = next(i for i, (a, b) in enumerate(zip(got_tokens, want_tokens)) if a != b)
        top2 = np.sort(want_logits[k])[-2:]
        assert top2[1] - top2[0] < LOGIT_TOL[precision], (
            f"step {k}: ours chose {got_tokens[k]}, stock {want_tokens[k]}, and stock's top-2 logit gap "
            f"{top2[1] - top2[0]:.2e} is not a near-tie (tolerance {LOGIT_TOL[precision]})")


@pytest.mark.parametrize("family", STATE_FAMILIES)
def test_state_family_int4_greedy_matches_stock(family):
    """The int4 builds of the families with states or windows (their fp32 builds: under onnxruntime-genai below),
    by session.run with their states fed back: fully claimed, greedy tokens stock's up to a near-tie, and
    teacher-forced on stock's tokens every step's logits stock's."""
    from parity import greedy_with_states
    path = model_path(family, "int4")
    ours, stock = ep_session(path), stock_session(path)
    report = seamless.assert_ep_selected(ours)
    assert not report.fallback_nodes and not report.declined, report
    window = 16 if family in WINDOWED else 0
    want_tokens, want_logits = greedy_with_states(stock, steps=STEPS, window=window)
    got_tokens, _ = greedy_with_states(ours, steps=STEPS, window=window)
    assert_greedy_matches(got_tokens, want_tokens, want_logits, "int4")
    _, forced_logits = greedy_with_states(ours, steps=STEPS, window=window, forced=want_tokens)
    for step, (a, b) in enumerate(zip(forced_logits, want_logits)):
        assert_logits_close(a, b, "int4", f"teacher-forced step {step} logits")


@pytest.mark.parametrize("arch,precision", [("qwen2", "int4"), ("llama", "fp32")])
def test_shared_max_length_kv_buffers(arch, precision):
    """past_present_share_buffer style (what onnxruntime-genai does): past/present are
    max-length buffers, the attention mask says how much of them is valid."""
    assert_steps_match(*sessions(arch, precision), prompt(3), precision, steps=4, max_len=64)


@pytest.mark.parametrize("arch", material.GENAI_ARCHS)
def test_fp32_matches_transformers(arch):
    """The fp32 build on our EP against the HF torch model it was built from (validates the
    harness and the builder's graph, not only parity with stock ORT)."""
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM
    checkpoint = material.genai_model_dir(arch, "fp32").parent / f"checkpoint-{arch}"
    if not checkpoint.exists():
        pytest.skip("checkpoint missing: run tests/material.py")
    ours, _ = sessions(arch, "fp32")
    ids = prompt(4)
    out = ours.run(None, step_feeds(ids, PREFILL, empty_past(ours)))
    hf = AutoModelForCausalLM.from_pretrained(str(checkpoint)).eval()
    with torch.no_grad():
        ref = hf(torch.tensor(ids[None], dtype=torch.int64)).logits.numpy()
    assert_close(out[0], ref, rtol=0, atol=1e-4, name="logits vs transformers")


def test_bench_decode_command(tmp_path, capsys):
    """`python -m onnxruntime_ep_seamless bench decode MODEL_DIR`: both EPs, ratio, JSON."""
    import json

    from onnxruntime_ep_seamless.tools.cli import main
    model_dir = str(material.genai_model_dir("qwen2", "int4"))
    model_path(*("qwen2", "int4"))
    out = tmp_path / "decode.json"
    assert main(["bench", "decode", model_dir, "--steps", "4", "--decode-rounds", "1", "--json", str(out)]) == 0
    printed = capsys.readouterr()
    assert "ms/token" in printed.out and "ratio ours/stock" in printed.out
    assert "decode [" in printed.err  # the progress bar
    result = json.loads(out.read_text())
    assert result["benchmark"] == "decode" and result["steps"] == 4 and result["fallback_nodes"] == 0
    assert result["ours_ms_per_token"] > 0 and result["stock_ms_per_token"] > 0
    assert result["prefill_lengths"] == [16]
    # --new-prompt-lengths: each round's prompt a length neither session has seen (the warm-up's has 16 tokens)
    assert main(["bench", "decode", model_dir, "--steps", "2", "--decode-rounds", "3", "--new-prompt-lengths",
                 "--json", str(out)]) == 0
    assert "(new lengths: 15 down to 13)" in capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["prefill_lengths"] == [15, 14, 13] and len(result["ours_prefill_ms_rounds"]) == 3


def test_bench_genai_command(tmp_path, capsys):
    """`bench genai MODEL_DIR`: onnxruntime-genai's Generator drives our EP (registered as its plugin library)."""
    import json

    pytest.importorskip("onnxruntime_genai")
    from onnxruntime_ep_seamless.tools.cli import main
    model_path("qwen2", "int4")
    out = tmp_path / "genai.json"
    assert main(["bench", "genai", str(material.genai_model_dir("qwen2", "int4")), "--steps", "8",
                 "--decode-rounds", "1", "--max-length", "40", "--share-buffer", "off", "--json", str(out)]) == 0
    assert "ratio ours/stock" in capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["benchmark"] == "genai" and result["ours_ms_per_token"] > 0 and result["stock_ms_per_token"] > 0
    assert result["max_length"] == 40 and result["past_present_share_buffer"] is False
    assert result["greedy_tokens_identical"] == "8/8"  # 8 tokens although max_length leaves room for more
    # --ep seamless: ours alone (how genai's CPU build measures our CUDA EP), the same tokens, no ratio
    args = ["bench", "genai", str(material.genai_model_dir("qwen2", "int4")), "--steps", "8", "--decode-rounds", "1",
            "--max-length", "40", "--share-buffer", "off", "--ep", "seamless", "--json", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "not run (--ep seamless)" in printed and "ratio" not in printed and "stock ORT " not in printed
    alone = json.loads(out.read_text())
    assert alone["stock"] is None and "stock_ms_per_token" not in alone and "ratio" not in alone
    assert alone["ours_ms_per_token"] > 0 and alone["ours_tokens"] == result["ours_tokens"]
    assert main(args[:-4] + ["--ep", "torch"]) == 2  # decode-gpu's peers are not genai's


def test_bench_genai_says_which_peer_could_not_load_the_model(monkeypatch):
    """`bench genai` where onnxruntime-genai refuses a peer (a CPU build of genai asked for its cuda provider, no
    GPU for our CUDA EP): one line naming the peer and genai's reason, not a traceback."""
    og = pytest.importorskip("onnxruntime_genai")
    from onnxruntime_ep_seamless.tools.bench import genai_benchmark

    def refuse(config):
        raise RuntimeError("Unknown provider name 'cuda'")
    monkeypatch.setattr(og, "Model", refuse)
    folder = str(material.genai_model_dir("qwen2", "int4"))
    with pytest.raises(SystemExit, match=r"could not load .* on our EP \(SeamlessCPUExecutionProvider\): Unknown"):
        genai_benchmark(folder, 2, 4, device="cpu")


def test_bench_profile_command(capsys):
    """`bench profile MODEL`: every step of the decode program, timed per op."""
    from onnxruntime_ep_seamless.tools.cli import main
    dims = ["batch_size=1", "sequence_length=1", "past_sequence_length=8", "total_sequence_length=9",
            "kv_cache_dim=64"]
    assert main(["bench", "profile", model_path("qwen2", "int4"), *[a for d in dims for a in ("--dim", d)]]) == 0
    printed = capsys.readouterr().out
    assert "com.microsoft::MatMulNBits" in printed and "through Python" not in printed


def test_concurrent_runs_of_one_session():
    """Compute on several threads at once (ORT allows concurrent Run calls): native kernels use
    each call's own kernel context and thread pool; results equal the sequential ones."""
    import threading
    ours, _ = sessions("qwen2", "int4")
    inputs = [step_feeds(prompt(10 + i), PREFILL, empty_past(ours)) for i in range(4)]
    want = [ours.run(None, f)[0] for f in inputs]
    got = [None] * len(inputs)

    def work(i):
        for _ in range(3):
            got[i] = ours.run(None, inputs[i])[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(a, b, err_msg=f"thread {i}")


def test_bad_seqlens_in_a_native_program_get_stocks_error():
    """An attention mask summing past the total length (seqlens_k out of range), fed to a binding that runs as a
    native program: GroupQueryAttention's check in C answers as stock does, and the program still runs after."""
    from onnxruntime_ep_seamless.runtime.native import NATIVES
    ours, stock = sessions("qwen2", "fp32")
    ids = prompt(4)[:8]
    good = step_feeds(ids, len(ids), empty_past(stock))
    for _ in range(3):  # the second run records the binding, the third runs its program
        ours.run(None, good)
    bad = dict(good, attention_mask=np.full((1, len(ids)), 2, np.int64))
    with pytest.raises(Exception) as stock_error:
        stock.run(None, bad)
    before = NATIVES["cpu"].lib.seamless_native_runs()
    with pytest.raises(type(stock_error.value), match="seqlens_k"):
        ours.run(None, bad)
    assert NATIVES["cpu"].lib.seamless_native_runs() == before + 1
    assert_logits_close(ours.run(None, good)[0], stock.run(None, good)[0], "fp32", "logits after the error")


@pytest.mark.parametrize("family,precision", [(family, "fp32") for family in material.GENAI_FAMILIES]
                         + [(family, "int4") for family in ("lfm2moe", "qwen3_5", "qwen3_5_moe", "gptoss")])
def test_builder_family_under_onnxruntime_genai(family, precision):
    """Each of the builder's dense families in tests/material.py (Gemma 2's and 3's local layers with a window-sized KV
    cache, GroupQueryAttention sliding_window_cache=1; Qwen3's q/k norms; Nemotron's squared ReLU and LayerNorm; …):
    fully claimed, onnxruntime-genai's greedy tokens over a 20-token prompt (past Gemma 2's window of 16) and 30
    more equal to stock's, the decode steps run in C as one family."""
    og = pytest.importorskip("onnxruntime_genai")
    from onnxruntime_ep_seamless.runtime.native import NATIVES
    from onnxruntime_ep_seamless.tools.bench import register_for_genai
    path = material.genai_model_dir(family, precision)
    if not (path / "model.onnx").exists():
        pytest.skip(f"{path} missing: run tests/material.py")
    report = seamless.assert_ep_selected(ep_session(str(path / "model.onnx")))
    assert not report.fallback_nodes and not report.declined, report
    name = register_for_genai(og)
    prompt = np.random.default_rng(0).integers(0, 1000, 20).astype(np.int32)
    tokens, lib = {}, NATIVES["cpu"].lib
    family_runs = lib.seamless_family_runs()
    for peer in ("ours", "stock"):
        config = og.Config(str(path))
        config.clear_providers()
        if peer == "ours":
            config.append_provider(name)
        model = og.Model(config)
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=50, min_length=50, do_sample=False)  # 50 tokens, even past a random model's end token
        generator = og.Generator(model, params)
        generator.append_tokens(prompt)
        while not generator.is_done():
            generator.generate_next_token()
        tokens[peer] = list(generator.get_sequence(0))
        del generator, model
    assert tokens["ours"] == tokens["stock"] and len(tokens["ours"]) == 50
    assert lib.seamless_family_runs() - family_runs >= 20


@pytest.mark.parametrize("family,precision", [(family, "fp32") for family in material.GENAI_FAMILIES]
                         + [(family, "int4") for family in ("lfm2moe", "qwen3_5", "qwen3_5_moe", "gptoss")])
def test_builder_family_decodes_without_python_steps(family, precision, capfd):
    """Every node of the builder's decoders has a native step (their states, MoE experts, linear attention and
    window-sized caches included): from the third step the decode runs in C with no node run by its Python kernel
    (log_partition=1 names any op that would be one)."""
    from onnxruntime_ep_seamless.runtime.native import NATIVES
    from parity import greedy_with_states
    path = material.genai_model_dir(family, precision) / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} missing: run tests/material.py")
    sess = ep_session(str(path), log_partition="1")
    before = NATIVES["cpu"].lib.seamless_native_runs()
    greedy_with_states(sess, steps=8, window=16 if family in WINDOWED else 0)
    assert NATIVES["cpu"].lib.seamless_native_runs() > before, "no decode step ran in C"
    err = capfd.readouterr().err
    assert "Python step" not in err and "runs through Python" not in err, err

def test_provider_options_through_onnxruntime_genai():
    """Our options given as onnxruntime-genai provider options (docs/user-guide.md) reach the EP: a misspelt one fails
    the model's creation with the EP's error naming the valid ones, a valid one is taken."""
    og = pytest.importorskip("onnxruntime_genai")
    from onnxruntime_ep_seamless.tools.bench import register_for_genai
    path = Path(model_path("qwen2", "int4")).parent
    name = register_for_genai(og)
    for option, error in (("native_progam", "unknown provider option"), ("native_program", None)):
        config = og.Config(str(path))
        config.clear_providers()
        config.append_provider(name)
        config.set_provider_option(name, option, "1")
        if error:
            with pytest.raises(RuntimeError, match=f"{error}.*native_program"):
                og.Model(config)
        else:
            og.Model(config)
