"""The GPU decode benchmark's host pieces, exercised on the CPU: the greedy token of float16 logits,
and the PyTorch peer with the small Qwen2 checkpoint the CUDA test decoders are built from (the GPU
runs use the same code with device "cuda")."""
import itertools

import numpy as np
import pytest

import material
from onnxruntime_ep_seamless.tools.bench_gpu import greedy_token, run_torch


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_greedy_token_is_numpys_argmax(dtype):
    rng = np.random.default_rng(0)
    rows = [rng.standard_normal(151936) * 8, -rng.random(1000) - 1, np.array([-np.inf, -3.0, np.inf, np.inf]),
            np.array([-2.0, 5.0, 1.0, 5.0, -7.0]), np.full(7, -1.5), np.array([-65504.0, -1.0])]
    for row in rows:
        row = row.astype(dtype)
        assert greedy_token(row) == int(np.argmax(row)), row[:8]


def _decoder_like(folder):
    """logits = x + bias (the bias in an external data file) and one present output, as the builder names them."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    bias = numpy_helper.from_array(np.random.default_rng(0).standard_normal(50).astype(np.float32), "bias")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "bias"], ["logits"]), helper.make_node("Identity", ["x"], ["present.0.key"])],
        "decoder", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 50])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 3, 50]),
         helper.make_tensor_value_info("present.0.key", TensorProto.FLOAT, [1, 3, 50])], [bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.save(model, str(folder / "model.onnx"), save_as_external_data=True, location="model.onnx.data",
              size_threshold=0)
    return folder / "model.onnx", numpy_helper.to_array(bias)


def test_device_argmax_model_appends_next_token_and_leaves_the_model_alone(tmp_path):
    import onnxruntime as ort
    from onnxruntime_ep_seamless.tools.bench_gpu import with_device_argmax
    path, bias = _decoder_like(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    so = ort.SessionOptions()
    so.add_session_config_entry("session.model_external_initializers_file_folder_path", str(tmp_path))
    sess = ort.InferenceSession(with_device_argmax(str(path)), so, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((1, 3, 50)).astype(np.float32)
    logits, present, token = sess.run(None, {"x": x})
    np.testing.assert_array_equal(logits, x + bias)
    assert [o.name for o in sess.get_outputs()] == ["logits", "present.0.key", "next_token"]
    np.testing.assert_array_equal(token, np.argmax(x + bias, axis=-1)[..., None])
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_device_argmax_model_rejects_a_model_without_logits_first(tmp_path):
    import onnx
    from onnxruntime_ep_seamless.tools.bench_gpu import with_device_argmax
    path, _ = _decoder_like(tmp_path)
    model = onnx.load(str(path), load_external_data=False)
    model.graph.output[0].name = "scores"
    model.graph.node[0].output[0] = "scores"
    onnx.save(model, str(tmp_path / "other.onnx"))
    with pytest.raises(ValueError, match="first output to be 'logits'"):
        with_device_argmax(str(tmp_path / "other.onnx"))


def test_growing_loops_on_the_cpu_and_the_device_loops_guard():
    """The growing loop on stock ORT's CPU EP gives steps + 1 greedy tokens and times its prompt and run calls apart;
    its growing-device variant refuses presents that come back in host memory (it would time host copies
    of the KV cache)."""
    import onnxruntime as ort
    from onnxruntime_ep_seamless.tools.bench_gpu import _growing_rounds
    path = material.genai_small_dir("fp32", "cpu") / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    r = _growing_rounds(sess, str(path.parent), False, False, False, 1, 3, 4, 2)
    assert len(r["step"]) == len(r["prompt"]) == 2 and len(r["tokens"]) == 4 and all(0 <= t < 1024 for t in r["tokens"])
    assert all(0 < run <= step for run, step in zip(r["run"], r["step"]))  # the run call is part of a step
    assert r["prompt_lengths"] == [4, 4]
    # --new-prompt-lengths: each round's prompt a token shorter, a length the session has not seen
    assert _growing_rounds(sess, str(path.parent), False, False, True, 1, 3, 4, 3)["prompt_lengths"] == [4, 3, 2]
    with pytest.raises(RuntimeError, match="came back in host memory"):
        _growing_rounds(sess, str(path.parent), False, True, False, 1, 3, 4, 1)


@pytest.mark.parametrize("family", ["qwen3_5_moe", "gptoss", "lfm2"])
def test_growing_loop_carries_states_and_window_caches_as_genai_does(family):
    """A hybrid decoder's conv and recurrent states (past.* fed from present.*), Qwen3.5's 3-D position_ids and
    gpt-oss's window-sized caches: the growing loop on stock ORT's CPU EP gives the tokens of the parity tests' loop
    (tests/parity.py greedy_with_states, whose tokens the family tests hold equal to ours); the graph loop and the C
    loop refuse such a decoder."""
    import onnxruntime as ort
    from parity import greedy_with_states

    from onnxruntime_ep_seamless.tools.bench_gpu import _carried, _graph_rounds, _growing_rounds, host_decode
    folder = material.genai_model_dir(family, "fp32")
    if not (folder / "model.onnx").exists():
        pytest.skip(f"{folder} not prepared (python tests/material.py)")
    sess = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    r = _growing_rounds(sess, str(folder), False, False, False, 1, 8, 20, 1)
    window = 16 if family == "gptoss" else 0
    assert r["tokens"] == greedy_with_states(sess, steps=9, prompt=20, window=window)[0]
    start, source = _carried(sess, str(folder), 2)  # what the loop starts from, and which output feeds each input
    for i in sess.get_inputs():
        if i.name.startswith("past_key_values."):  # 2 KV heads of 64; a local layer's cache its window's rows
            rows = window if i.shape[2] == "past_sliding_length" else 0
            assert start[i.name].shape == (2, 2, rows, 64)
            assert source[i.name] == i.name.replace("past_key_values", "present")
        elif i.name.startswith("past."):
            assert start[i.name].shape == (2, *i.shape[1:]) and not start[i.name].any()
            assert source[i.name] == i.name.replace("past.", "present.")
    assert set(source) == {i.name for i in sess.get_inputs() if i.name.startswith("past")}
    assert any(n.startswith("past.") for n in source) == (family != "gptoss")
    with pytest.raises(SystemExit, match="use --mode growing-device"):
        _graph_rounds(sess, str(folder), "ort-cuda", False, False, 1, 2, 4, 1)
    with pytest.raises(SystemExit, match="use --mode growing-device"):
        host_decode(str(folder), "", {}, {}, [np.zeros((1, 4), np.int64)], 2, kv_on_device=False, variant="cpu")


def test_growing_loop_decodes_a_batch_as_its_sequences_alone(monkeypatch):
    """--batch 3: three prompts decoded at once give each sequence the tokens it gets decoded alone (stock ORT's
    CPU EP, float32; the device-token path reads next_token's rows the same way)."""
    import onnxruntime as ort
    from onnxruntime_ep_seamless.tools import bench_gpu
    path = material.genai_small_dir("fp32", "cpu") / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    prompts = np.random.default_rng(5).integers(0, 1000, (3, 6))
    decode = lambda batch: bench_gpu._growing_rounds(sess, str(path.parent), False, False, False, len(batch), 5, 6, 1)
    monkeypatch.setattr(bench_gpu, "bench_prompts", lambda *a, **k: iter([prompts]))
    together = decode(prompts)["tokens"]
    assert len(together) == 3 and all(len(row) == 6 for row in together)
    for row, alone in zip(prompts, together):
        monkeypatch.setattr(bench_gpu, "bench_prompts", lambda *a, **k: iter([row[None]]))
        assert decode(row[None])["tokens"] == alone
    assert len({tuple(row) for row in together}) > 1  # the rows are not one sequence's tokens repeated
    logits = np.zeros((2, 3, 5), np.float32)
    logits[0, -1, 4], logits[1, -1, 1], logits[1, 0, 2] = 1, 1, 9
    assert bench_gpu.last_tokens(logits, False) == [4, 1]
    assert bench_gpu.last_tokens(np.array([[[7], [2]], [[3], [8]]]), True) == [2, 8]


@pytest.mark.filterwarnings("ignore:.*past_key_values.*:FutureWarning")  # transformers renames it; both work
def test_torch_peer_decodes_greedily_and_reports_ms_per_token():
    checkpoint = material.genai_small_dir("fp16", "cuda").parent / "checkpoint-qwen2-small"
    if not (checkpoint / "model.safetensors").exists():
        pytest.skip(f"{checkpoint} not prepared (python tests/material.py)")
    result = run_torch(str(checkpoint), steps=3, prompt=4, rounds=2, dtype="float32", device="cpu")
    assert result["ep"] == "torch" and result["steps"] == 3 and result["rounds"] == 2
    assert 0 < result["ms_per_token"] and result["tokens_per_s"] == pytest.approx(1e3 / result["ms_per_token"])


def test_compare_takes_the_median_of_processes_run_in_turn(monkeypatch, capsys):
    """--processes N: every configuration's process runs N times, one configuration after the
    other in each turn, and its ms/token (and its run call's) is the median of the N (here from a fake
    subprocess)."""
    import json
    import subprocess
    from onnxruntime_ep_seamless.tools import bench_gpu
    order, times = [], {"seamless": iter([3.0, 1.0, 2.0]), "ort-cuda": iter([4.0, 6.0, 5.0])}

    def fake_run(cmd, **kwargs):
        ep, mode = cmd[cmd.index("--ep") + 1], cmd[cmd.index("--mode") + 1]
        order.append(ep)
        ms = next(times[ep]) if mode == "graph" else 10.0
        gpu = {"gpu_ms_per_token": ms / 4} if (ep, mode) == ("seamless", "graph") else {}  # ours replayed
        return subprocess.CompletedProcess(cmd, 0, json.dumps({"ms_per_token": ms, "tokens_per_s": 1e3 / ms,
                                                                "run_ms_per_token": ms / 2, "prompt_ms": ms * 10,
                                                                "prompt_ms_steady": ms * 5, "session_s": ms,
                                                                "onnxruntime": "x", **gpu}) + "\n", "")

    monkeypatch.setattr(bench_gpu.subprocess, "run", fake_run)
    summary = bench_gpu.compare("m", 8, 4, 1, None, None, processes=3)
    assert order == [ep for _, ep, loop, _ in bench_gpu.CONFIGS if loop != "growing-c"] * 3  # the C loop: token device
    ours, ort = summary["runs"]["ours, enable_cuda_graph=1 (level B)"], summary["runs"]["ORT CUDA EP, enable_cuda_graph=1"]
    assert ours["ms_per_token_by_process"] == [3.0, 1.0, 2.0] and ours["ms_per_token"] == 2.0
    assert ours["run_ms_per_token"] == 1.0 and ours["prompt_ms"] == 20.0  # medians of the processes' too
    assert ours["prompt_ms_steady"] == 10.0
    assert ours["gpu_ms_per_token"] == 0.5 and "gpu_ms_per_token" not in ort
    assert ort["ms_per_token"] == 5.0 and summary["speedups"]["level B / ORT graph (same loop)"] == 2.5
    assert ours["run_ms_per_token_by_process"] == [1.5, 0.5, 1.0]
    assert summary["speedups"]["level B / ORT graph, the run call alone"] == 2.5  # medians 2.5 / 1.0
    out = capsys.readouterr().out
    assert "of 3 processes each" in out and "[processes 1.000-3.000]" in out
    assert "(its run call 1.000; GPU 0.500; prompt 20.0, steady 10.0 ms; session 2.0 s)" in out
    assert ours["session_s"] == 2.0


def test_compare_runs_one_loop_given_a_mode(monkeypatch):
    """--ep both --mode graph: only the graph-mode configurations (ours level B, ORT's CUDA graph),
    and only the speed-up between them."""
    import json
    import subprocess
    from onnxruntime_ep_seamless.tools import bench_gpu
    modes = []

    def fake_run(cmd, **kwargs):
        modes.append(cmd[cmd.index("--mode") + 1])
        ms = 2.0 if cmd[cmd.index("--ep") + 1] == "seamless" else 3.0
        return subprocess.CompletedProcess(cmd, 0, json.dumps({"ms_per_token": ms, "tokens_per_s": 1e3 / ms,
                                                                "onnxruntime": "x"}) + "\n", "")

    monkeypatch.setattr(bench_gpu.subprocess, "run", fake_run)
    summary = bench_gpu.compare("m", 8, 4, 1, None, None, torch_checkpoint="ck", processes=2, modes=["graph"])
    assert modes == ["graph"] * 4 and list(summary["runs"]) == ["ours, enable_cuda_graph=1 (level B)",
                                                                "ORT CUDA EP, enable_cuda_graph=1"]
    assert summary["speedups"] == {"level B / ORT graph (same loop)": 1.5}


def test_compare_with_a_batch_hands_it_to_the_loops_that_decode_one(monkeypatch):
    """--batch 4: every configuration but the C loop's and PyTorch's gets --batch 4, and tokens/s counts the
    four sequences' tokens of a step."""
    import json
    import subprocess
    from onnxruntime_ep_seamless.tools import bench_gpu
    cmds = []

    def fake_run(cmd, **kwargs):
        cmds.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, json.dumps({"ms_per_token": 2.0, "tokens_per_s": 2e3, "batch": 4,
                                                                "onnxruntime": "x"}) + "\n", "")

    monkeypatch.setattr(bench_gpu.subprocess, "run", fake_run)
    summary = bench_gpu.compare("m", 8, 4, 1, None, None, torch_checkpoint="ck", token="device", batch=4)
    loops = [cmd[cmd.index("--mode") + 1] for cmd in cmds]
    assert "growing-c" not in loops and sorted(set(loops)) == ["graph", "growing", "growing-device"]
    assert all(cmd[cmd.index("--batch") + 1] == "4" and "torch" not in cmd for cmd in cmds)
    assert summary["batch"] == 4 and all(r["tokens_per_s"] == 2e3 for r in summary["runs"].values())
    with pytest.raises(SystemExit, match="decodes one sequence"):
        bench_gpu.compare("m", 8, 4, 1, None, None, token="device", batch=4, modes=["growing-c"])


def test_compare_with_new_prompt_lengths_runs_the_loops_that_take_them(monkeypatch):
    """--new-prompt-lengths: the growing, growing-device and graph loops feed each round's prompt a new length; compare
    runs those configurations and hands them the flag (the C loop would refuse it)."""
    import json
    import subprocess
    from onnxruntime_ep_seamless.tools import bench_gpu
    cmds = []

    def fake_run(cmd, **kwargs):
        cmds.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, json.dumps({"ms_per_token": 1.0, "tokens_per_s": 1e3,
                                                                "onnxruntime": "x"}) + "\n", "")

    monkeypatch.setattr(bench_gpu.subprocess, "run", fake_run)
    summary = bench_gpu.compare("m", 8, 4, 1, None, None, token="device", new_lengths=True)
    assert {c[c.index("--mode") + 1] for c in cmds} == {"growing", "growing-device", "graph"}
    assert all("--new-prompt-lengths" in c for c in cmds) and summary["new_prompt_lengths"]
    with pytest.raises(SystemExit, match="growing, growing-device and graph loops only"):
        bench_gpu.run_one("m", "seamless", 8, 4, 1, mode="growing-c", token="device", new_lengths=True)


def test_compare_hands_the_profile_to_every_onnx_loop_that_runs_one(monkeypatch):
    """--profile with --ep both: each configuration's process profiles its kernels (the C loop runs no profile and
    PyTorch's none of ours), so the JSON holds each one's "kernels"."""
    import json
    import subprocess
    from onnxruntime_ep_seamless.tools import bench_gpu
    cmds = []

    def fake_run(cmd, **kwargs):
        cmds.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, json.dumps({"ms_per_token": 1.0, "tokens_per_s": 1e3,
                                                                "onnxruntime": "x", "kernels": {"gpu_us_per_step": 1}})
                                           + "\n", "")

    monkeypatch.setattr(bench_gpu.subprocess, "run", fake_run)
    summary = bench_gpu.compare("m", 8, 4, 1, None, None, torch_checkpoint="ck", token="device", profile=True)
    loop = lambda c: c[c.index("--mode") + 1]
    assert all(("--profile" in c) == (loop(c) != "growing-c" and "torch" not in c) for c in cmds)
    assert any(loop(c) == "growing-c" for c in cmds) and any("--profile" in c for c in cmds)
    assert all("kernels" in r for r in summary["runs"].values())


def test_kernel_shapes_groups_a_traces_kernels_by_launch_grid():
    """--profile's `shapes`: one row per kernel and grid (a decode step's lm_head apart from its
    layers' products), times per step and per launch; memcpys and host events are not kernels."""
    from onnxruntime_ep_seamless.tools.bench_gpu import kernel_shapes
    k = lambda grid, dur: {"ph": "X", "cat": "kernel", "name": "seamless_linear_f16", "dur": dur,
                           "args": {"grid": grid, "block": [256, 1, 1]}}
    events = [k([576, 1, 1], 4.0), k([576, 1, 1], 6.0), k([75968, 1, 1], 90.0),
              {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH", "dur": 50.0},
              {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "dur": 1.0}]
    rows = kernel_shapes(events, steps=2)
    assert [(r["grid"], r["us_per_step"], r["per_step"], r["us_per_launch"]) for r in rows] == \
        [([75968, 1, 1], 45.0, 0.5, 90.0), ([576, 1, 1], 5.0, 1.0, 5.0)]
    assert rows[0]["kernel"] == "seamless_linear_f16" and rows[0]["block"] == [256, 1, 1]


def test_in_place_costs_splits_a_trace_into_steps_and_charges_each_kernel_what_it_adds_to_the_end():
    """--profile's `in_place`: with dependent launches a kernel starts before the one before it ends, so its own
    duration is not its cost; its cost is how far it moves the step's end. Steps are split at host gaps, and only
    those of the count covering the most kernels (the replays, not the prompt or an eager run's lone launches) kept."""
    from onnxruntime_ep_seamless.tools.bench_gpu import in_place_costs
    k = lambda ts, dur, name, grid=(1, 1, 1), cat="kernel": {"ph": "X", "cat": cat, "name": name, "ts": ts,
                                                             "dur": dur, "args": {"grid": list(grid)}}
    copy = lambda ts, name: k(ts, 1.0, name, (), "gpu_memcpy")
    # the loop's copies to and from pageable memory are left out (near the kernels or not: the host's speed), the
    # graph's own copies counted
    step = lambda t0: [copy(t0 - 3, "Memcpy HtoD (Pageable -> Device)"), k(t0, 10.0, "a"), k(t0 + 5, 10.0, "b"),
                       k(t0 + 6, 2.0, "c"), k(t0 + 16, 4.0, "b", (2, 1, 1)),
                       copy(t0 + 21, "Memcpy DtoD (Device -> Device)"), copy(t0 + 24, "Memcpy DtoH (Device -> Pageable)")]
    prompt = [k(0.0, 50.0, "gemm"), k(49.0, 30.0, "a")]
    eager = [k(1000.0 + 40 * i, 2.0, "a") for i in range(4)]  # launches from Python, apart: more groups, fewer kernels
    events = prompt + step(200.0) + step(300.0) + eager + [{"ph": "X", "cat": "cpu_op", "name": "aten::empty",
                                                             "ts": 5.0, "dur": 1000.0}]
    costs = in_place_costs(events)
    assert (costs["steps"], costs["kernels_a_step"], costs["span_us"]) == (2, 5, 22.0)
    assert [(r["kernel"], r["grid"], r["us_per_step"]) for r in costs["by_kernel"]] == [
        ("a", [1, 1, 1], 10.0), ("b", [1, 1, 1], 5.0), ("b", [2, 1, 1], 5.0),
        ("Memcpy DtoD (Device -> Device)", [], 2.0), ("c", [1, 1, 1], 0.0)]
    assert in_place_costs([]) is None


def test_busy_costs_charge_each_kernel_the_busy_time_it_adds():
    """--profile's `busy`: a dependent launch that starts early is charged only past the end of the one it waits
    for, an idle gap is nobody's, pageable copies are left out; per step."""
    from onnxruntime_ep_seamless.tools.bench_gpu import busy_costs
    k = lambda ts, dur, name, cat="kernel": {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur,
                                             "args": {"grid": [1, 1, 1]}}
    events = [k(0.0, 100.0, "scan"), k(10.0, 120.0, "output"),  # output waits beside scan: 30 of its own
              k(200.0, 10.0, "prepare"),  # after an idle gap: its duration
              k(205.0, 1.0, "Memcpy HtoD (Pageable -> Device)", "gpu_memcpy"), k(212.0, 2.0, "inside")]
    costs = busy_costs(events, steps=2)
    assert costs["busy_us_per_step"] == (100 + 30 + 10 + 2) / 2
    assert [(r["kernel"], r["us_per_step"]) for r in costs["by_kernel"]] == \
        [("scan", 50.0), ("output", 15.0), ("prepare", 5.0), ("inside", 1.0)]


def test_the_c_decode_loop_gives_the_python_loops_tokens():
    """bench's growing-c mode drives tools/host_decode.c: the growing loop in C through ORT's C API. On the
    CPU, with our CPU EP (CPU fallback disabled: every node on it, or no session) and with ORT's CPU EP, it gives
    the tokens of the Python loop on ORT's CPU EP, round by round, and times each prompt, step and run call."""
    import onnxruntime as ort
    from onnxruntime_ep_seamless.tools.bench_gpu import _growing_rounds, bench_prompts, host_decode, with_device_argmax
    folder = material.genai_small_dir("fp32", "cpu")
    if not (folder / "model.onnx").exists():
        pytest.skip(f"{folder} not prepared (python tests/material.py)")
    so = ort.SessionOptions()
    so.add_session_config_entry("session.model_external_initializers_file_folder_path", str(folder))
    sess = ort.InferenceSession(with_device_argmax(str(folder / "model.onnx")), so, providers=["CPUExecutionProvider"])
    python = _growing_rounds(sess, str(folder), True, False, False, 1, 5, 4, 2)
    prompts = list(itertools.islice(bench_prompts(4), 2))  # _growing_rounds'
    ours = host_decode(str(folder), "SeamlessCPUExecutionProvider", {}, {"session.disable_cpu_ep_fallback": "1"},
                       prompts, 5, kv_on_device=False, variant="cpu")
    stock = host_decode(str(folder), "", {}, {}, prompts, 5, kv_on_device=False, variant="cpu")
    assert ours["tokens"] == stock["tokens"] == python["tokens"] and len(ours["tokens"]) == 6
    assert ours["rounds_tokens"] == stock["rounds_tokens"] and ours["rounds_tokens"][0] != ours["rounds_tokens"][1]
    for r in (ours, stock):
        assert len(r["step"]) == len(r["run"]) == len(r["prompt"]) == 2
        assert all(0 < run <= step for run, step in zip(r["run"], r["step"])) and all(p > 0 for p in r["prompt"])


def test_the_c_decode_loop_reports_what_it_cannot_run():
    from onnxruntime_ep_seamless.tools.bench_gpu import host_decode
    folder = material.genai_small_dir("fp32", "cpu")
    if not (folder / "model.onnx").exists():
        pytest.skip(f"{folder} not prepared (python tests/material.py)")
    prompts = [np.arange(4, dtype=np.int64).reshape(1, 4)]
    with pytest.raises(RuntimeError, match="ORT lists no EP device of NoSuchExecutionProvider: register its library"):
        host_decode(str(folder), "NoSuchExecutionProvider", {}, {}, prompts, 2, kv_on_device=False, variant="cpu")
    with pytest.raises(RuntimeError, match="CreateSessionFromArray: .*unknown provider option.*no_such_option"):
        host_decode(str(folder), "SeamlessCPUExecutionProvider", {"no_such_option": "1"}, {}, prompts, 2,
                    kv_on_device=False, variant="cpu")


def test_one_peer_runs_one_loop_and_the_c_loop_needs_the_device_token(capsys):
    from onnxruntime_ep_seamless.tools.cli import main
    assert main(["bench", "decode-gpu", "m", "--ep", "seamless", "--mode", "graph", "--mode", "growing-c"]) == 2
    assert "one peer runs one loop" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="give --token device"):
        main(["bench", "decode-gpu", "m", "--ep", "seamless", "--mode", "growing-c"])
    with pytest.raises(SystemExit, match="give --token device"):
        main(["bench", "decode-gpu", "m", "--ep", "both", "--mode", "growing-c"])


def test_the_chart_draws_each_configurations_tokens_per_second(tmp_path):
    from onnxruntime_ep_seamless.tools.bench_gpu import write_chart
    summary = {"steps": 128, "runs": {"ours, enable_cuda_graph=1 (level B)": {"tokens_per_s": 1980.3},
                                      "ORT CUDA EP, enable_cuda_graph=1": {"tokens_per_s": 891.3}}}
    write_chart(summary, "int4-cuda", str(tmp_path / "c.png"))
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_chart_without_matplotlib_is_refused_before_any_run(monkeypatch):
    import sys
    from onnxruntime_ep_seamless.tools import bench_gpu
    from onnxruntime_ep_seamless.tools.cli import main
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setattr(bench_gpu, "compare", lambda *a, **k: pytest.fail("the runs started"))
    with pytest.raises(SystemExit, match="bench decode-gpu --chart draws with matplotlib, which is not installed"):
        main(["bench", "decode-gpu", "m", "--ep", "both", "--chart", "c.png"])


def test_the_device_token_without_onnx_is_a_clear_error():
    import subprocess
    import sys
    code = ("import sys; sys.modules['onnx'] = None; from onnxruntime_ep_seamless.tools.cli import main; "
            "sys.exit(main(['bench', 'decode-gpu', 'm', '--ep', 'seamless', '--token', 'device']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 2 and "--token device (it adds an ArgMax to the model) needs the onnx package" in proc.stderr


def test_kv_geometry_from_the_config_else_static_dims(tmp_path):
    import json
    from onnxruntime_ep_seamless.tools.bench import kv_geometry
    assert kv_geometry(str(tmp_path), ["batch", 2, "past", 64]) == (2, 64)
    with pytest.raises(SystemExit, match="no genai_config.json in .* and symbolic dims"):
        kv_geometry(str(tmp_path), ["batch", 2, "past", "kv_cache_dim"])
    (tmp_path / "genai_config.json").write_text(json.dumps({"model": {"decoder": {"num_key_value_heads": 4,
                                                                                   "head_size": 128}}}))
    assert kv_geometry(str(tmp_path), ["batch", 2, "past", "kv_cache_dim"]) == (4, 128)


def test_the_c_loops_result_has_the_python_loops_fields(monkeypatch):
    """run_one reports the C loop (its rounds faked here; the H200 runs the real one) with the same fields and
    medians as the other loops."""
    from onnxruntime_ep_seamless.tools import bench_gpu
    fake = {"step": [3e-3, 1e-3, 2e-3], "run": [2e-3, 5e-4, 1e-3], "prompt": [9e-3, 7e-3, 8e-3], "tokens": [5, 6]}
    monkeypatch.setattr(bench_gpu, "_growing_c_rounds", lambda *args: fake)
    r = bench_gpu.run_one("m", "seamless", 1, 4, 3, mode="growing-c", capture="auto", token="device")
    assert r["ms_per_token"] == pytest.approx(2.0) and r["run_ms_per_token"] == pytest.approx(1.0)
    assert r["prompt_ms"] == pytest.approx(8.0) and r["tokens"] == [5, 6] and r["tokens_per_s"] == pytest.approx(500)
    assert r["prompt_ms_by_round"] == pytest.approx([9.0, 7.0, 8.0])  # each round's, in order
    assert "prompt_ms_steady" not in r  # no round after a binding's warm-ups and capture
    fake["prompt"] += [5e-3, 4e-3, 6e-3]  # rounds 4-6: replays
    r = bench_gpu.run_one("m", "seamless", 1, 4, 6, mode="growing-c", capture="auto", token="device")
    assert r["prompt_ms"] == pytest.approx(6.5) and r["prompt_ms_steady"] == pytest.approx(5.0)
    assert (r["mode"], r["capture"], r["token"]) == ("growing-c", "auto", "device") and "gpu_ms_per_token" not in r
    assert "capture" not in bench_gpu.run_one("m", "ort-cuda", 1, 4, 3, mode="growing-c", token="device")


def test_bench_model_on_cuda_says_why_it_cannot_run(tmp_path):
    """`bench MODEL --device cuda` without a GPU for our CUDA EP exits 2 with the reason; ORT's CUDA EP worker run by
    a plain onnxruntime (no CUDA EP) stops with what to install, rather than timing ORT's CPU EP."""
    import subprocess
    import sys

    import onnxruntime_ep_seamless as seamless
    from onnx import TensorProto, helper
    path = tmp_path / "add.onnx"
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
                     .SerializeToString())
    if not seamless.get_devices("cuda"):
        proc = subprocess.run([sys.executable, "-m", "onnxruntime_ep_seamless", "bench", str(path), "--device", "cuda",
                               "--runs", "2", "--rounds", "1"], capture_output=True, text=True)
        assert proc.returncode == 2 and "bench --device cuda: SeamlessCUDAExecutionProvider offers no device" in \
            proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    import onnxruntime as ort
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has ORT's CUDA EP")
    np.savez(tmp_path / "feeds.npz", x=np.ones(4, np.float32))
    proc = subprocess.run([sys.executable, "-m", "onnxruntime_ep_seamless.tools.bench_gpu", "peer", str(path),
                           str(tmp_path / "feeds.npz"), "2", "0"], capture_output=True, text=True, input="round\n")
    assert proc.returncode and "ORT's CUDA EP is not available here" in proc.stderr and not proc.stdout, proc.stderr
