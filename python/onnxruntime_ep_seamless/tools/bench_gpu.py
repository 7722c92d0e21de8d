"""GPU decode benchmark: one EP per process (our CUDA EP, or ORT's CUDA EP from onnxruntime-gpu).

Both peers run the same loop, a prompt then greedy decode steps, in one of four modes:
- growing: the KV cache grows (present fed back as past) through plain `session.run` with host
  arrays, so both pay the same host<->device copies; ORT's CUDA EP runs eagerly, ours with its
  `capture` option (auto: level A, graphs captured inside its partitions; off: eager);
- growing-device: the same, but through IO binding: ORT allocates every output on the GPU
  (`bind_output(name, "cuda")`) and the present OrtValues are bound as the next step's past; ids
  and mask from the host. The growing loops also carry a hybrid decoder's states (LFM2's and Qwen3.5's
  conv and recurrent states, `past.*`) and local layers' window-sized caches (gpt-oss, Gemma), as
  onnxruntime-genai does; the graph and C loops refuse them;
- growing-c: the growing-device loop driven from C (tools/host_decode.c, through the ORT C API of
  this process's onnxruntime), so its bindings cost what a C or C++ application pays; the token comes
  from next_token (--token device only);
- graph: the static-shape mode onnxruntime-genai uses with CUDA graphs: KV buffers of the maximum
  length shared by past and present, a full-length attention mask, IO binding to GPU OrtValues
  updated in place, and the EP's session graph capture (`enable_cuda_graph=1`); the prompt runs
  uncaptured (run option gpu_graph_id=-1), each decode step replays the captured graph.
The next token (`token`): `host`, the argmax of the logits copied to the host (`greedy_token`); or
`device`, an ArgMax node appended to the model (`with_device_argmax`: the EP under test runs it) so a
step copies one int64 to the host, as PyTorch's loop and onnxruntime-genai's do. `batch` sequences (one prompt
length) decode at once in every loop but the C one's and PyTorch's; a step then gives a token of each.
ms/token is the median decode-step time of a round, then the median over rounds (tokens/s: batch / that); run_ms_per_token the
same of the session's run call alone (the rest of a step is the loop's bindings, feeds and token read),
prompt_ms the prompt's step (its run and its token: the time to the first token; a median over every round, the first
of which compiles), prompt_ms_steady the median of the rounds after STEADY_PROMPT_FROM (given more rounds: a binding's
runs before are its warm-ups and capture), session_s the time to create
the session (every loop but the C one, whose session C creates), and for ours in graph
mode gpu_ms_per_token the median GPU time of a replayed step (one more round, timed by events around each
replay in the EP: the run call's GPU share, apart from the host's). `compare` runs
every configuration in CONFIGS as a subprocess (each with its own onnxruntime), `processes` times in
turn, and prints the medians, each configuration's spread over its processes and the speed-ups (for
graph mode also of the run call alone); given the checkpoint the model was built from, PyTorch eager (transformers' model and
KV cache, float16) runs the growing loop as another peer.
"""
from __future__ import annotations

import functools
import itertools
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np


def _session(model_dir: str, ep: str, graph: bool = False, capture: str = "auto", token: str = "host"):
    import onnxruntime as ort
    path = os.path.join(model_dir, "model.onnx")
    model = with_device_argmax(path) if token == "device" else path
    if ep == "seamless":
        import onnxruntime_ep_seamless as seamless
        so = seamless.session_options(device="cuda", capture=capture, **({"enable_cuda_graph": 1} if graph else {}))
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    else:
        so = ort.SessionOptions()
    if token == "device":  # a model given as bytes finds its external weights here
        so.add_session_config_entry("session.model_external_initializers_file_folder_path", model_dir)
    if ep == "seamless":
        sess = ort.InferenceSession(model, so)
        report = seamless.assert_ep_selected(sess, device="cuda")
        return sess, {"claimed_nodes": len(report.ep_nodes), "fallback_nodes": len(report.fallback_nodes)}
    options = {"device_id": "0", **({"enable_cuda_graph": "1"} if graph else {})}
    sess = ort.InferenceSession(model, so, providers=[("CUDAExecutionProvider", options)])
    if sess.get_providers()[0] != "CUDAExecutionProvider":
        raise SystemExit(f"ORT's CUDA EP is not available here (providers: {sess.get_providers()})")
    return sess, {}


def with_device_argmax(path: str) -> bytes:
    """The model at `path` (its external weights left where they are) with one more output, `next_token` =
    ArgMax(logits, axis=-1, keepdims=1): int64 [batch, sequence, 1], the greedy token of each position."""
    import onnx
    model = onnx.load(path, load_external_data=False)
    logits = model.graph.output[0].name
    if logits != "logits" or any(o.name == "next_token" for o in model.graph.output):
        raise ValueError(f"{path}: expected the first output to be 'logits' and no output 'next_token' "
                         "(a decoder as onnxruntime-genai's model builder writes it)")
    model.graph.node.append(onnx.helper.make_node("ArgMax", [logits], ["next_token"], name="bench_next_token",
                                                  axis=-1, keepdims=1))
    model.graph.output.append(onnx.helper.make_tensor_value_info("next_token", onnx.TensorProto.INT64, None))
    return model.SerializeToString()


def greedy_token(logits: np.ndarray) -> int:
    """The argmax of one row of logits. numpy's argmax of float16 converts element by element (~1 ms
    for a 151936-word vocabulary, more than a decode step's GPU time), so float16 is compared as
    integers: its bit pattern ordered like the values (negatives flipped; no NaN in logits)."""
    if logits.dtype != np.float16:
        return int(np.argmax(logits))
    bits = logits.view(np.int16)
    return int(np.argmax(bits ^ ((bits >> 15) & np.int16(0x7FFF))))


def bench_prompts(length: int, new_lengths: bool = False, batch: int = 1):
    """The prompts the loops decode, round after round, `batch` sequences of one length each (every peer and loop
    the same token ids); with new_lengths each one token shorter than the last (down to 1), so that no round's
    prompt length was seen before."""
    rng = np.random.default_rng(0)
    while True:
        yield rng.integers(0, 1000, (batch, length)).astype(np.int64)
        length = max(1, length - new_lengths)


def last_tokens(out: np.ndarray, device_token: bool) -> list[int]:
    """Each sequence's next token from a step's first output: next_token [batch, n, 1] (device_token), or the
    logits [batch, n, vocab] (the argmax of each sequence's last row)."""
    return [int(t) for t in out[:, -1, 0]] if device_token else [greedy_token(row) for row in out[:, -1]]


def by_sequence(steps: list) -> list:
    """A loop's tokens, a list per step of every sequence's token, as a list per sequence (batch 1: one flat list)."""
    rows = [list(r) for r in zip(*steps)]
    return rows[0] if len(rows) == 1 else rows


def _kv_layout(sess, model_dir: str, cfg: dict | None = None):
    from .bench import kv_geometry
    past = [i for i in sess.get_inputs() if i.name.startswith("past_key_values.")]
    return past, _float_dtype(past[0].type), *kv_geometry(model_dir, past[0].shape, cfg)


def _float_dtype(ort_type: str):
    return np.float16 if ort_type == "tensor(float16)" else np.float32


def _carried(sess, model_dir: str, batch: int):
    """What a builder decoder carries from step to step, empty: each past input's start (the KV caches with no
    rows; a local layer's window-sized cache, `past_sliding_length`, genai_config's window of zero rows, as
    onnxruntime-genai allocates it; the hybrid layers' conv and recurrent states, `past.*`, zeros of their static
    shape) and the present output each is fed from next step (present.N.key -> past_key_values.N.key, present.N.conv
    -> past.N.conv)."""
    from .bench import decoder_config
    cfg = decoder_config(model_dir)
    _, dtype, heads, head_size = _kv_layout(sess, model_dir, cfg)
    window = (cfg.get("sliding_window") or {}).get("window_size", 0)
    start, source = {}, {}
    for i in sess.get_inputs():
        if i.name.startswith("past_key_values."):
            rows = 0
            if i.shape[2] == "past_sliding_length":
                if not window:
                    raise SystemExit(f"{i.name} is a window-sized cache but {model_dir}/genai_config.json gives no "
                                     "sliding_window.window_size")
                rows = window
            start[i.name] = np.zeros((batch, heads, rows, head_size), dtype)
            source[i.name] = i.name.replace("past_key_values.", "present.")
        elif i.name.startswith("past."):
            start[i.name] = np.zeros((batch, *i.shape[1:]), _float_dtype(i.type))
            source[i.name] = i.name.replace("past.", "present.")
    return start, source


def _only_kv_caches(inputs, mode: str) -> None:
    """The graph and C loops carry full-length KV caches only: a decoder with a window-sized cache, states or
    position_ids (gpt-oss, Gemma 2/3, LFM2, Qwen3.5) is refused with the loop that runs it."""
    other = [n for n, dims in inputs if n.startswith("past.") or n == "position_ids"
             or (n.startswith("past_key_values.") and dims[2] == "past_sliding_length")]
    if other:
        raise SystemExit(f"--mode {mode} runs decoders whose only carried inputs are full-length KV caches; this one "
                         f"also takes {other[:3]}: use --mode growing-device (or growing)")


def _positions(rank: int | None, total: int, n: int, batch: int) -> dict:
    """position_ids of position_ids' `rank` (None: the decoder takes none, counting positions from the attention
    mask as the builder's decoders do): [batch, n], or Qwen3.5's [3, batch, n] (the T, H and W streams, one position
    each for text tokens)."""
    if rank is None:
        return {}
    shape = (3, batch, n) if rank == 3 else (batch, n)
    return {"position_ids": np.ascontiguousarray(np.broadcast_to(np.arange(total - n, total), shape))}


NEW_LENGTH_LOOPS = ("growing", "growing-device", "graph")  # the loops that take --new-prompt-lengths


# a prompt's rounds before this one run a new binding's eager warm-ups and capture (ours: exec/cuda_compute.py
# WARMUP_RUNS, then the capture); later rounds replay (or, past MAX_PROMPT tokens, run as the earlier ones did)
STEADY_PROMPT_FROM = 3


def run_one(model_dir: str, ep: str, steps: int, prompt: int, rounds: int, mode: str = "growing",
            capture: str = "auto", profile: bool = False, token: str = "host", new_lengths: bool = False,
            batch: int = 1) -> dict:
    import onnxruntime as ort
    if new_lengths and mode not in NEW_LENGTH_LOOPS:
        raise SystemExit("--new-prompt-lengths: the growing, growing-device and graph loops only")
    if batch < 1 or (batch > 1 and mode == "growing-c"):
        raise SystemExit("--batch: 1 or more sequences, and the C loop (growing-c) decodes one")
    if mode == "growing-c":
        if token != "device" or profile:
            raise SystemExit("--mode growing-c reads each token from the model's next_token and runs no profile: "
                             "give --token device, without --profile")
        r = _growing_c_rounds(model_dir, ep, capture, steps, prompt, rounds)
        facts = {"capture": capture} if ep == "seamless" else {}
    else:
        t0 = time.perf_counter()
        sess, facts = _session(model_dir, ep, graph=mode == "graph", capture=capture, token=token)
        facts["session_s"] = time.perf_counter() - t0  # creating the session: loading, partitioning, compiling
        if ep == "seamless":
            facts["capture"] = "enable_cuda_graph=1" if mode == "graph" else capture
        device_token = token == "device"
        loop_of = lambda s: functools.partial(_graph_rounds, s, model_dir, ep, device_token, new_lengths, batch) \
            if mode == "graph" \
            else functools.partial(_growing_rounds, s, model_dir, device_token, mode == "growing-device", new_lengths,
                                   batch)
        r = loop_of(sess)(steps, prompt, rounds)
    facts["token"] = token
    facts["tokens"] = r["tokens"]  # the last round's
    # the session's run call alone (what the loop's bindings, feeds and token reads add is the rest), and the
    # prompt's step: its run and its token (the time to the first token)
    facts["run_ms_per_token"] = statistics.median(r["run"]) * 1e3
    facts["prompt_ms"] = statistics.median(r["prompt"]) * 1e3
    facts["prompt_ms_by_round"] = [x * 1e3 for x in r["prompt"]]  # a binding's first runs differ from later ones
    if len(r["prompt"]) > STEADY_PROMPT_FROM:
        facts["prompt_ms_steady"] = statistics.median(r["prompt"][STEADY_PROMPT_FROM:]) * 1e3
    facts["prompt_lengths"] = r.get("prompt_lengths", [prompt] * len(r["prompt"]))
    if r.get("replay_gpu"):  # ours in graph mode: a replay's GPU time (the run call's GPU share)
        facts["gpu_ms_per_token"] = statistics.median(r["replay_gpu"]) * 1e3
    # profiled in a session of its own: a graph mode loop binds new buffers, which a graph captured before cannot
    # take, and CUPTI reported none of the kernels of a graph captured before profiling began (H200, torch 2.9)
    if profile:
        again, _ = _session(model_dir, ep, graph=mode == "graph", capture=capture, token=token)
        facts["kernels"] = kernel_profile(lambda: loop_of(again)(steps, prompt, 1), steps)
    ms = statistics.median(r["step"]) * 1e3  # a step: one token of every sequence
    return {"ep": ep, "mode": mode, "model": model_dir, "ms_per_token": ms, "tokens_per_s": batch * 1e3 / ms,
            "batch": batch, "steps": steps, "prompt": prompt, "rounds": rounds, "onnxruntime": ort.__version__,
            **facts}


def kernel_profile(generate, steps: int, top: int = 25) -> dict:
    """GPU time per decode step by kernel name over one more generation, from CUPTI through
    torch.profiler (it sees every kernel of the process, ours launched by the driver API and those
    inside CUDA graphs included); the prompt's kernels are in the totals too. `shapes`: the same by
    kernel and launch grid (which product of a step: the lm_head's grid is not a layer's)."""
    import tempfile
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        generate()
    kernels = []
    for e in prof.key_averages():
        us = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if us > 0:
            kernels.append((us / steps, e.count / steps, e.key))
    kernels.sort(reverse=True)
    with tempfile.TemporaryDirectory() as tmp:
        prof.export_chrome_trace(os.path.join(tmp, "trace.json"))
        with open(os.path.join(tmp, "trace.json")) as f:
            events = json.load(f).get("traceEvents", [])
    return {"gpu_us_per_step": sum(k[0] for k in kernels), "launches_per_step": sum(k[1] for k in kernels),
            "top": [{"kernel": name[:120], "us_per_step": round(us, 2), "per_step": round(n, 2)}
                    for us, n, name in kernels[:top]],
            "shapes": kernel_shapes(events, steps, top), "in_place": in_place_costs(events, top=top),
            "busy": busy_costs(events, steps, top)}


def _device_work(events: list) -> list:
    """The trace's kernels and device copies as (start, duration, name, grid), by start; copies to or from pageable
    host memory left out (in_place_costs says why)."""
    return sorted((float(e["ts"]), float(e["dur"]), e.get("name", "?"), tuple(e.get("args", {}).get("grid", ())))
                  for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                  and "Pageable" not in e.get("name", ""))


def in_place_costs(events: list, gap_us: float = 15.0, top: int = 25) -> dict | None:
    """What each kernel of a decode step costs where dependent launches overlap a kernel's start with the one
    before (its own duration then includes that wait): the trace's kernels and device copies split into steps at
    host gaps over gap_us, the steps of the count that covers the most kernels kept (the replays; an eager run's
    launches from Python come apart), and per step its GPU span (first start to last end) and, by kernel and
    grid, how far each moves the step's end (its end minus the latest end before it, in order of start), the
    median over steps. Copies to or from pageable host memory (the loop's feeds and token, `top` has them; a
    captured graph's copies are pinned) are left out: whether they fall within gap_us of a step's kernels depends
    on the host's speed, which made steps of two counts and spans not comparable between leases (H200, nineteenth
    session)."""
    work = _device_work(events)
    groups, end = [], None
    for start, dur, name, grid in work:
        if end is None or start - end > gap_us:
            groups.append([])
            end = start + dur
        groups[-1].append((start, dur, name, grid))
        end = max(end, start + dur)
    if not groups:
        return None
    sizes = [len(g) for g in groups]  # eager runs give many short groups: the replays' count covers most kernels
    count = max(set(sizes), key=lambda n: n * sizes.count(n))
    steps = [g for g in groups if len(g) == count]
    costs: dict = {}
    for g in steps:
        latest, per = g[0][0], {}
        for start, dur, name, grid in g:
            per[name, grid] = per.get((name, grid), 0.0) + max(0.0, start + dur - latest)
            latest = max(latest, start + dur)
        for key, us in per.items():
            costs.setdefault(key, []).append(us)
    rows = sorted(((statistics.median(v), key) for key, v in costs.items()), key=lambda r: (-r[0], r[1]))[:top]
    return {"steps": len(steps), "kernels_a_step": count,
            "span_us": round(statistics.median(max(s + d for s, d, _, _ in g) - g[0][0] for g in steps), 2),
            "by_kernel": [{"kernel": name[:120], "grid": list(grid), "us_per_step": round(us, 2)}
                          for us, (name, grid) in rows]}


def busy_costs(events: list, steps: int, top: int = 25) -> dict:
    """The whole trace's GPU busy time per step and, by kernel and grid, the part of it each adds: a kernel's end
    minus the later of its start and the latest end before it (by start). Unlike `top`, a kernel that starts early
    and waits for the one before (a dependent launch) is charged only past that one's end, and unlike `in_place`
    it needs no split into steps, so an eager prompt's kernels, launched apart, count as well (idle gaps are
    nobody's)."""
    work = _device_work(events)
    latest, costs = float("-inf"), {}
    for start, dur, name, grid in work:
        costs[name, grid] = costs.get((name, grid), 0.0) + max(0.0, start + dur - max(latest, start))
        latest = max(latest, start + dur)
    rows = sorted(((us, key) for key, us in costs.items()), key=lambda r: (-r[0], r[1]))[:top]
    return {"busy_us_per_step": round(sum(costs.values()) / steps, 2),
            "by_kernel": [{"kernel": name[:120], "grid": list(grid), "us_per_step": round(us / steps, 2)}
                          for us, (name, grid) in rows]}


def kernel_shapes(events: list, steps: int, top: int = 25) -> list:
    """Kernels of a chrome trace grouped by name and launch grid and block: GPU us per step, launches
    per step, and us per launch, the largest first."""
    groups: dict[tuple, list] = {}
    for e in events:
        if e.get("cat") == "kernel" and e.get("ph") == "X":
            args = e.get("args", {})
            key = (e.get("name", "?"), tuple(args.get("grid", ())), tuple(args.get("block", ())))
            groups.setdefault(key, []).append(float(e.get("dur", 0)))
    rows = sorted(((sum(d), len(d), key) for key, d in groups.items()), reverse=True)[:top]
    return [{"kernel": name[:120], "grid": list(grid), "block": list(block), "us_per_step": round(us / steps, 2),
             "per_step": round(n / steps, 2), "us_per_launch": round(us / n, 2)} for us, n, (name, grid, block) in rows]


def _growing_rounds(sess, model_dir, device_token, on_device, new_lengths, batch, steps, prompt, rounds):
    start, source = _carried(sess, model_dir, batch)
    position_rank = next((len(i.shape) for i in sess.get_inputs() if i.name == "position_ids"), None)
    # the first fetched output gives the token: the logits (host argmax) or next_token (not the logits then)
    outs = ["next_token" if device_token else "logits"] + list(source.values())
    run_times = []
    run, host = (functools.partial(_run_on_device, sess, outs, run_times), lambda out: out.numpy()) if on_device \
        else (functools.partial(_timed, run_times, sess.run, outs), lambda out: out)
    prompts = bench_prompts(prompt, new_lengths, batch)
    r = {"step": [], "run": [], "prompt": [], "prompt_lengths": []}  # seconds: a round's median step, run call; its
    for _ in range(rounds):  # prompt's step
        kv = dict(start)
        ids = next(prompts)
        total, times, tokens = ids.shape[1], [], []
        r["prompt_lengths"].append(total)
        run_times.clear()
        for step in range(steps + 1):
            feeds = {"input_ids": ids, "attention_mask": np.ones((batch, total), np.int64), **kv,
                     **_positions(position_rank, total, ids.shape[1], batch)}
            t0 = time.perf_counter()
            res = run(feeds)
            tokens.append(last_tokens(host(res[0]), device_token))
            (times if step else r["prompt"]).append(time.perf_counter() - t0)  # step 0 is the prompt
            if not step and on_device and res[1].device_name().lower() == "cpu":
                raise RuntimeError(f"{outs[1]} came back in host memory: the growing-device loop would time host "
                                   "copies of the KV cache")
            kv = dict(zip(source, res[1:]))
            ids = np.array(tokens[-1], np.int64).reshape(batch, 1)
            total += 1
        r["step"].append(statistics.median(times))
        r["run"].append(statistics.median(run_times[1:]))  # [0]: the prompt
    return dict(r, tokens=by_sequence(tokens))  # the last round's tokens


def _growing_c_rounds(model_dir: str, ep: str, capture: str, steps: int, prompt: int, rounds: int) -> dict:
    """The growing-device loop driven from C (tools/host_decode.c): the same prompts, bindings and
    token, each ORT call a plain C call, as a C or C++ application feeding presents back makes them."""
    import onnxruntime_ep_seamless as seamless
    from ..runtime.options import validate
    ep_name, options = ("CUDAExecutionProvider", {"device_id": "0"}) if ep == "ort-cuda" else \
        (seamless.get_ep_name("cuda"), {"capture": capture})
    configs = {}
    if ep == "seamless":
        validate(ep_name, options)
        configs["session.disable_cpu_ep_fallback"] = "1"  # every node on our EP, or no session
    prompts = list(itertools.islice(bench_prompts(prompt), rounds))
    return host_decode(model_dir, ep_name, options, configs, prompts, steps, kv_on_device=True, variant="cuda")


def host_decode(model_dir: str, ep_name: str, options: dict, configs: dict, prompts: list, steps: int,
                kv_on_device: bool, variant: str) -> dict:
    """Runs tools/host_decode.c's loop on the decoder in `model_dir` (onnxruntime-genai's builder's: its
    model.onnx with next_token, as with_device_argmax makes it; the KV shape by kv_geometry) in a
    session of EP `ep_name` ("": ORT's CPU EP) with `options` and session `configs`, one round per prompt,
    through the ORT this process's onnxruntime is (our `variant` library registered with it). Returns
    _growing_rounds' dict: each round's median step and run call, its prompt's step, the last round's tokens
    (and every round's, `rounds_tokens`)."""
    import onnx
    import onnxruntime_ep_seamless as seamless
    from .bench import kv_geometry
    seamless.register(variant)  # the loop calls ORT through the API table ORT gave our library
    from ..runtime.native import NATIVES
    ffi, lib = NATIVES[variant].ffi, NATIVES[variant].lib
    model = with_device_argmax(os.path.join(model_dir, "model.onnx"))
    configs = {**configs, "session.model_external_initializers_file_folder_path": model_dir}  # its weights
    inputs = onnx.load_from_string(model).graph.input
    _only_kv_caches([(i.name, [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]) for i in inputs],
                    "growing-c")
    past = [i for i in inputs if i.name.startswith("past_key_values.")]
    heads, head_size = kv_geometry(model_dir, [d.dim_param or d.dim_value for d in past[0].type.tensor_type.shape.dim])
    keep = []  # every cdata the loop reads, alive until it returns

    def strings(items):
        items = list(items)
        keep.extend(ffi.new("char[]", x.encode()) for x in items)
        array = ffi.new("char*[]", keep[len(keep) - len(items):] or [ffi.NULL])
        keep.append(array)
        return array

    rounds, prompt_len = len(prompts), prompts[0].size
    loop = ffi.new("SeamlessDecodeLoop*")
    loop.ep = strings([ep_name])[0]
    loop.ep_keys, loop.ep_values, loop.ep_options = strings(options), strings(map(str, options.values())), len(options)
    loop.config_keys, loop.config_values, loop.configs = strings(configs), strings(configs.values()), len(configs)
    model_buffer = ffi.from_buffer(model)
    loop.model, loop.model_bytes = model_buffer, len(model)
    loop.kv_names = strings([p.name for p in past] + [p.name.replace("past_key_values", "present") for p in past])
    loop.kv_count, loop.kv_type = len(past), past[0].type.tensor_type.elem_type
    loop.kv_heads, loop.head_size = heads, head_size
    loop.kv_on_device = int(kv_on_device)
    prompt_ids = np.ascontiguousarray(np.concatenate([p.ravel() for p in prompts]), np.int64)
    loop.prompts, loop.prompt_len = ffi.from_buffer("int64_t[]", prompt_ids), prompt_len
    loop.steps, loop.rounds = steps, rounds
    tokens = np.zeros((rounds, steps + 1), np.int64)
    prompt_s, step_s, run_s = np.zeros(rounds), np.zeros((rounds, steps)), np.zeros((rounds, steps))
    error = ffi.new("char[]", 4096)
    out = ffi.new("SeamlessDecodeTimes*")
    out.tokens, out.prompt_s = ffi.from_buffer("int64_t[]", tokens), ffi.from_buffer("double[]", prompt_s)
    out.step_s, out.run_s = ffi.from_buffer("double[]", step_s), ffi.from_buffer("double[]", run_s)
    out.error, out.error_len = error, 4096
    if lib.seamless_host_decode(loop, out):
        raise RuntimeError(f"the C decode loop failed: {ffi.string(error).decode('utf-8', 'replace')}")
    return {"step": list(np.median(step_s, axis=1)), "run": list(np.median(run_s, axis=1)), "prompt": list(prompt_s),
            "tokens": tokens[-1].tolist(), "rounds_tokens": tokens.tolist()}


def _timed(seconds: list, fn, *args):
    """fn(*args), its wall time appended to `seconds`."""
    t0 = time.perf_counter()
    result = fn(*args)
    seconds.append(time.perf_counter() - t0)
    return result


def _run_on_device(sess, outs, run_times, feeds):
    """One run of the growing-device loop: arrays from the host, OrtValues (the last presents) bound as
    they are, every output in `outs` allocated by ORT on the GPU; the outputs' OrtValues."""
    import onnxruntime as ort
    b = sess.io_binding()
    for name, v in feeds.items():
        if isinstance(v, ort.OrtValue):
            b.bind_ortvalue_input(name, v)
        else:
            b.bind_cpu_input(name, v)
    for name in outs:
        b.bind_output(name, "cuda", 0)
    _timed(run_times, sess.run_with_iobinding, b)
    return b.get_outputs()


def _graph_rounds(sess, model_dir, ep, device_token, new_lengths, batch, steps, prompt, rounds):
    import onnxruntime as ort
    _only_kv_caches([(i.name, i.shape) for i in sess.get_inputs()], "graph")
    past, dtype, heads, head_size = _kv_layout(sess, model_dir)
    max_len = prompt + steps + 1
    if ep == "seamless":
        import onnxruntime_ep_seamless as seamless
        memory = seamless.get_devices("cuda")[0].memory_info(ort.OrtDeviceMemoryType.DEFAULT)
        empty = lambda shape, dtype: ort.OrtValue.ortvalue_from_shape_and_type(shape, dtype, memory_info=memory)
    else:
        empty = lambda shape, dtype: ort.OrtValue.ortvalue_from_shape_and_type(shape, dtype, "cuda", 0)
    gpu = lambda a: _filled(empty(a.shape, a.dtype), a)
    kv = {i.name: gpu(np.zeros((batch, heads, max_len, head_size), dtype)) for i in past}
    vocab = sess.get_outputs()[0].shape[-1]
    logits_dtype = np.float16 if "float16" in sess.get_outputs()[0].type else np.float32

    # outputs the EP writes whole: left unfilled (a long prompt's logits are gigabytes)
    outputs = lambda n: (empty((batch, n, vocab), logits_dtype), empty((batch, n, 1), np.int64) if device_token else None)
    token_of = lambda out: last_tokens(out[1 if device_token else 0].numpy(), device_token)  # out: (logits, next_token)
    binding = functools.partial(shared_kv_binding, sess, kv)
    uncaptured, replayed = ort.RunOptions(), ort.RunOptions()
    uncaptured.add_run_config_entry("gpu_graph_id", "-1")
    step_ids, step_mask = gpu(np.zeros((batch, 1), np.int64)), gpu(np.zeros((batch, max_len), np.int64))
    step_out = outputs(1)
    step = binding(step_ids, step_mask, *step_out)  # the same addresses every step: the graph's
    prompts = bench_prompts(prompt, new_lengths, batch)

    def decode_round(r):  # r: seconds, a round's median step and run call, and its prompt's step
        ids = next(prompts)
        total = ids.shape[1]
        prompt_out = outputs(total)
        prompt_binding = binding(gpu(ids), gpu(np.ones((batch, total), np.int64)), *prompt_out)
        t0 = time.perf_counter()
        sess.run_with_iobinding(prompt_binding, uncaptured)
        tokens, times, run_times = [token_of(prompt_out)], [], []
        r["prompt"].append(time.perf_counter() - t0)
        r["prompt_lengths"].append(total)
        for _ in range(steps):
            total += 1
            t0 = time.perf_counter()
            step_ids.update_inplace(np.array(tokens[-1], np.int64).reshape(batch, 1))
            step_mask.update_inplace(np.broadcast_to(np.arange(max_len) < total, (batch, max_len)).astype(np.int64))
            _timed(run_times, sess.run_with_iobinding, step, replayed)
            tokens.append(token_of(step_out))
            times.append(time.perf_counter() - t0)
        r["step"].append(statistics.median(times))
        r["run"].append(statistics.median(run_times))
        return by_sequence(tokens)

    fresh = lambda: {"step": [], "run": [], "prompt": [], "prompt_lengths": []}
    r = fresh()
    for _ in range(rounds):
        tokens = decode_round(r)
    if ep == "seamless":  # one more round, its replays timed on the GPU (the timing's host cost kept out of r)
        replay_timing(True)
        decode_round(fresh())
        r["replay_gpu"] = replay_timing(False)
    return dict(r, tokens=tokens)  # the last round's tokens


def replay_timing(on: bool) -> list[float]:
    """Our EP's replay timing (ep_plugin/cuda_capture.c): on, each level B replay records its graph's GPU time;
    off, the times recorded since (seconds, in order)."""
    from ..runtime.native import NATIVES
    native = NATIVES["cuda"]
    count = native.lib.seamless_replay_timing(int(on))
    if on:
        return []
    times = native.ffi.new("float[]", count)
    return [us * 1e-6 for us in times[0:native.lib.seamless_replay_times(times, count)]]


def shared_kv_binding(sess, kv: dict, ids, mask, logits, next_token=None):
    """IO binding of a decoder step (GPU OrtValues): the ids, mask and logits (and next_token, given), and
    each KV buffer in `kv` (by past input name) bound as both its past input and its present output."""
    b = sess.io_binding()
    b.bind_ortvalue_input("input_ids", ids)
    b.bind_ortvalue_input("attention_mask", mask)
    for name, value in kv.items():
        b.bind_ortvalue_input(name, value)
        b.bind_ortvalue_output(name.replace("past_key_values", "present"), value)  # one buffer
    b.bind_ortvalue_output("logits", logits)
    if next_token is not None:
        b.bind_ortvalue_output("next_token", next_token)
    return b


def _filled(value, array):
    value.update_inplace(np.ascontiguousarray(array))
    return value


def run_torch(checkpoint: str, steps: int, prompt: int, rounds: int, dtype: str = "float16",
              device: str = "cuda") -> dict:
    """PyTorch eager on the checkpoint the ONNX model was built from: transformers' model with its
    own KV cache, the same prompt/greedy loop (the host reads each token, as in the ONNX loops)."""
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=getattr(torch, dtype)).to(device).eval()
    prompts = bench_prompts(prompt)
    per_round = []
    with torch.inference_mode():
        for _ in range(rounds):
            out = model(input_ids=torch.tensor(next(prompts), device=device), use_cache=True)
            token, times = int(out.logits[0, -1].argmax()), []
            for _ in range(steps):
                t0 = time.perf_counter()
                out = model(input_ids=torch.tensor([[token]], device=device), past_key_values=out.past_key_values,
                            use_cache=True)
                token = int(out.logits[0, -1].argmax())
                times.append(time.perf_counter() - t0)
            per_round.append(statistics.median(times))
    ms = statistics.median(per_round) * 1e3
    return {"ep": "torch", "mode": "eager", "model": checkpoint, "ms_per_token": ms, "tokens_per_s": 1e3 / ms,
            "steps": steps, "prompt": prompt, "rounds": rounds, "torch": torch.__version__, "dtype": dtype}


# What `compare` runs, each in its own process: (label, ep, mode, our capture option)
CONFIGS = [
    ("ours, capture=auto (level A)", "seamless", "growing", "auto"),
    ("ours, capture=off (launch programs)", "seamless", "growing", "off"),
    ("ours, enable_cuda_graph=1 (level B)", "seamless", "graph", "auto"),
    ("ORT CUDA EP, eager", "ort-cuda", "growing", None),
    ("ORT CUDA EP, enable_cuda_graph=1", "ort-cuda", "graph", None),
    ("ours, capture=auto (level A), KV on the GPU", "seamless", "growing-device", "auto"),
    ("ORT CUDA EP, eager, KV on the GPU", "ort-cuda", "growing-device", None),
    ("ours, capture=auto (level A), KV on the GPU, C loop", "seamless", "growing-c", "auto"),
    ("ORT CUDA EP, eager, KV on the GPU, C loop", "ort-cuda", "growing-c", None),
]


def compare(model_dir: str, steps: int, prompt: int, rounds: int, peer_pythonpath: str | None,
            json_path: str | None, torch_checkpoint: str | None = None, chart_path: str | None = None,
            processes: int = 1, modes: list | None = None, token: str = "host", new_lengths: bool = False,
            profile: bool = False, batch: int = 1) -> dict:
    """Every configuration in CONFIGS (and PyTorch eager given the checkpoint the model was built
    from), or those of the loops in `modes`, each in its own process, `processes` times in turn (the
    host's speed varies between processes): a configuration's ms/token is the median of its
    processes'. peer_pythonpath puts onnxruntime-gpu first for ORT's EP; `token` picks where the ONNX loops
    choose the next token (PyTorch's loop takes the argmax on the device either way). profile: each ONNX
    configuration but the C loop's (which runs none) adds its per-kernel profile (run_one's "kernels")."""
    samples: dict[str, list] = {}
    configs = CONFIGS + ([("PyTorch eager", "torch", "growing", None)] if torch_checkpoint else [])
    configs = [c for c in configs if (not modes or c[2] in modes) and (c[2] != "growing-c" or token == "device")
               and (not new_lengths or c[2] in NEW_LENGTH_LOOPS)
               and (batch == 1 or c[1] != "torch" and c[2] != "growing-c")]  # the loops that decode a batch
    if not configs:
        raise SystemExit("no configuration runs these options: --mode growing-c reads each token from the model's "
                         "next_token (give --token device) and decodes one sequence (no --batch)")
    for label, ep, loop, capture in configs * processes:
        env = dict(os.environ)
        if ep == "ort-cuda" and peer_pythonpath:
            env["PYTHONPATH"] = peer_pythonpath + os.pathsep + env.get("PYTHONPATH", "")
        cmd = [sys.executable, "-m", "onnxruntime_ep_seamless", "bench", "decode-gpu", model_dir, "--ep", ep,
               "--steps", str(steps), "--prefill", str(prompt), "--decode-rounds", str(rounds), "--mode", loop,
               "--token", token, "--batch", str(batch), "--json", "-"] + (["--capture", capture] if capture else []) + \
            (["--torch-checkpoint", torch_checkpoint] if ep == "torch" else []) + \
            (["--new-prompt-lengths"] if new_lengths and ep != "torch" else []) + \
            (["--profile"] if profile and ep != "torch" and loop != "growing-c" else [])
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode:
            raise SystemExit(f"{label} failed:\n{proc.stderr[-3000:]}")
        samples.setdefault(label, []).append(json.loads(proc.stdout.strip().splitlines()[-1]))
    runs = {}
    for label, results in samples.items():
        median = statistics.median(r["ms_per_token"] for r in results)
        runs[label] = dict(results[0], ms_per_token=median, tokens_per_s=results[0].get("batch", 1) * 1e3 / median,
                           ms_per_token_by_process=[r["ms_per_token"] for r in results])
        for key in ("run_ms_per_token", "prompt_ms", "prompt_ms_steady", "gpu_ms_per_token", "session_s"):  # the ONNX
            # loops' (the run call alone; the prompt's step; creating the session) and ours in graph mode (a replay's GPU
            # time)
            if key in results[0]:
                runs[label][key] = statistics.median(r[key] for r in results)
        if "run_ms_per_token" in results[0]:
            runs[label]["run_ms_per_token_by_process"] = [r["run_ms_per_token"] for r in results]
    ms = {label: r["ms_per_token"] for label, r in runs.items()}
    (ours_a, ours_off, ours_b, ort_eager, ort_graph, ours_a_gpu, ort_eager_gpu, ours_a_c, ort_eager_c) = \
        (CONFIGS[i][0] for i in range(9))
    pairs = {"level A / ORT eager (same loop)": (ours_a, ort_eager), "level B / ORT graph (same loop)": (ours_b, ort_graph),
             "capture=off / ORT eager (same loop)": (ours_off, ort_eager),
             "level A / ORT eager, KV on the GPU (same loop)": (ours_a_gpu, ort_eager_gpu),
             "level A / ORT eager, KV on the GPU, C loop (same loop)": (ours_a_c, ort_eager_c),
             "level A / ORT graph": (ours_a, ort_graph), "level A, KV on the GPU / ORT graph": (ours_a_gpu, ort_graph),
             "level A, KV on the GPU, C loop / ORT graph": (ours_a_c, ort_graph),
             "level A, KV on the GPU, C loop / level B": (ours_a_c, ours_b),
             "level A / PyTorch eager": (ours_a, "PyTorch eager")}
    # speed-ups (tokens/s ours / tokens/s peer) of the configurations that ran: above 1 we are faster
    ratios = {name: ms[peer] / ms[ours] for name, (ours, peer) in pairs.items() if ours in ms and peer in ms}
    if all("run_ms_per_token" in runs.get(label, {}) for label in (ours_b, ort_graph)):  # what the EPs do of a step
        ratios["level B / ORT graph, the run call alone"] = (runs[ort_graph]["run_ms_per_token"]
                                                             / runs[ours_b]["run_ms_per_token"])
    ort = next(runs[label] for label in (ort_eager, ort_graph, ort_eager_gpu) if label in runs)
    summary = {"model": model_dir, "batch": batch, "steps": steps, "prompt": prompt, "rounds": rounds,
               "processes": processes,
               "token": token, "new_prompt_lengths": new_lengths, "onnxruntime_gpu": ort["onnxruntime"], "speedups": ratios, "runs": runs}
    name = os.path.basename(model_dir.rstrip("/"))
    print(f"decode on GPU, {name}: {steps} steps after a {prompt}-token prompt"
          + (f", {batch} sequences at once (ms/token: a step's time)" if batch > 1 else "")
          + f", the next token chosen on the {token}, "
          f"median of {rounds} rounds" + (f" and of {processes} processes each" if processes > 1 else ""))
    for label, r in runs.items():
        gpu = f"; GPU {r['gpu_ms_per_token']:.3f}" if "gpu_ms_per_token" in r else ""
        session = f"; session {r['session_s']:.1f} s" if "session_s" in r else ""
        steady = f", steady {r['prompt_ms_steady']:.1f}" if "prompt_ms_steady" in r else ""
        run = f" (its run call {r['run_ms_per_token']:.3f}{gpu}; prompt {r['prompt_ms']:.1f}{steady} ms{session})" \
            if "prompt_ms" in r else ""
        each = r["ms_per_token_by_process"]  # the host's speed varies between processes: their spread
        spread = f" [processes {min(each):.3f}-{max(each):.3f}]" if len(each) > 1 else ""
        print(f"  {label:52s} {r['ms_per_token']:8.3f} ms/token {r['tokens_per_s']:8.1f} tokens/s{run}{spread}")
    for label, x in ratios.items():
        print(f"  speed-up {label}: {x:.2f}x")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(summary, f, indent=2)
    if chart_path:
        write_chart(summary, name, chart_path)
    return summary


def write_chart(summary: dict, title: str, path: str) -> None:
    """Tokens/s of each configuration as horizontal bars (matplotlib)."""
    from .plotting import pyplot
    plt = pyplot("bench decode-gpu --chart")
    labels = list(summary["runs"])
    speeds = [summary["runs"][k]["tokens_per_s"] for k in labels]
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(labels) + 1.2))
    ax.barh(labels[::-1], speeds[::-1], color=["#2e7d32" if k.startswith("ours") else "#9e9e9e" for k in labels][::-1])
    for y, v in enumerate(speeds[::-1]):
        ax.text(v, y, f" {v:.0f}", va="center")
    ax.set_xlabel("tokens/s (higher is better)")
    ax.set_title(f"{title}: greedy decode, {summary['steps']} tokens")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# --- one model's latency against ORT's CUDA EP (bench MODEL --device cuda) ---------------------

def model_latency(model: str, feeds_fn, runs: int, rounds: int, peer_pythonpath: str | None,
                  warmup: int = 20) -> dict:
    """Median run time of `model` on our CUDA EP (capture=auto, every node ours) and on ORT's CUDA EP, rounds
    alternating: ORT's in a worker process (its own onnxruntime: onnxruntime-gpu first on its path with
    peer_pythonpath), ours here. Inputs and outputs are host arrays (session.run), as an application passes them:
    feeds_fn(our session)'s, the same for both."""
    import tempfile

    import onnxruntime as ort

    import onnxruntime_ep_seamless as seamless
    from .bench import time_runs
    so = seamless.session_options(device="cuda")
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    t0 = time.perf_counter()
    ours = ort.InferenceSession(model, so)
    session_s = time.perf_counter() - t0
    report = seamless.assert_ep_selected(ours, device="cuda")
    feeds = feeds_fn(ours)
    with tempfile.TemporaryDirectory() as tmp:
        np.savez(os.path.join(tmp, "feeds.npz"), **feeds)
        env = dict(os.environ)
        if peer_pythonpath:
            env["PYTHONPATH"] = peer_pythonpath + os.pathsep + env.get("PYTHONPATH", "")
        peer = subprocess.Popen([sys.executable, "-m", "onnxruntime_ep_seamless.tools.bench_gpu", "peer", model,
                                 os.path.join(tmp, "feeds.npz"), str(runs), str(warmup)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        try:
            peer_info = json.loads(peer.stdout.readline() or "null")
            if peer_info is None:
                raise SystemExit("ORT's CUDA EP worker failed (its error is above)")
            for _ in range(warmup):
                ours.run(None, feeds)
            ours_s, peer_s = [], []
            for _ in range(rounds):
                ours_s.append(time_runs(ours, feeds, runs))
                peer.stdin.write("round\n")
                peer.stdin.flush()
                peer_s.append(float(peer.stdout.readline()))
        finally:
            peer.stdin.close()
            peer.wait()
    ours_ms, peer_ms = statistics.median(ours_s) * 1e3, statistics.median(peer_s) * 1e3
    return {"benchmark": "model-gpu", "model": os.path.basename(model), "ours_ms": ours_ms, "ort_cuda_ms": peer_ms,
            "ratio": ours_ms / peer_ms, "runs": runs, "rounds": rounds, "ours_ms_by_round": [s * 1e3 for s in ours_s],
            "ort_cuda_ms_by_round": [s * 1e3 for s in peer_s], "claimed_nodes": len(report.ep_nodes),
            "session_s": session_s, **peer_info, "onnxruntime": ort.__version__}


def _peer_worker(model: str, feeds_path: str, runs: int, warmup: int) -> None:
    """ORT's CUDA EP on the model: says its set-up (one JSON line), then times `runs` runs per 'round' line read."""
    import onnxruntime as ort

    from .bench import time_runs
    t0 = time.perf_counter()
    sess = ort.InferenceSession(model, providers=[("CUDAExecutionProvider", {"device_id": "0"})])
    session_s = time.perf_counter() - t0
    if sess.get_providers()[0] != "CUDAExecutionProvider":
        raise SystemExit(f"ORT's CUDA EP is not available here (providers: {sess.get_providers()}): give "
                         "--peer-pythonpath a folder with onnxruntime-gpu")
    feeds = dict(np.load(feeds_path))
    for _ in range(warmup):
        sess.run(None, feeds)
    print(json.dumps({"ort_cuda_onnxruntime": ort.__version__, "ort_cuda_session_s": session_s}), flush=True)
    for line in sys.stdin:
        if line.strip() == "round":
            print(time_runs(sess, feeds, runs), flush=True)


if __name__ == "__main__" and sys.argv[1:2] == ["peer"]:
    _peer_worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
