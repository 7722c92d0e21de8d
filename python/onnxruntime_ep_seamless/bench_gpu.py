"""GPU decode benchmark: one EP per process (our CUDA EP, or ORT's CUDA EP from onnxruntime-gpu).

Both peers run the same loop: a prompt, then greedy decode steps with the KV cache growing
(present fed back as past) through plain `session.run` with host arrays, so both pay the same
host<->device copies. ms/token is the median decode-step time of a round, then the median over
rounds. `compare` runs both peers as subprocesses (each with its own onnxruntime) and prints the
ratio.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np


def _session(model: str, ep: str):
    import onnxruntime as ort
    if ep == "seamless":
        import onnxruntime_ep_seamless as seamless
        so = seamless.session_options(device="cuda")
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        sess = ort.InferenceSession(model, so)
        report = seamless.assert_ep_selected(sess, device="cuda")
        return sess, {"claimed_nodes": len(report.ep_nodes), "fallback_nodes": len(report.fallback_nodes)}
    sess = ort.InferenceSession(model, providers=[("CUDAExecutionProvider", {"device_id": "0"})])
    if sess.get_providers()[0] != "CUDAExecutionProvider":
        raise SystemExit(f"ORT's CUDA EP is not available here (providers: {sess.get_providers()})")
    return sess, {}


def run_one(model_dir: str, ep: str, steps: int, prompt: int, rounds: int) -> dict:
    import onnxruntime as ort
    model = os.path.join(model_dir, "model.onnx")
    sess, facts = _session(model, ep)
    past = [i for i in sess.get_inputs() if i.name.startswith("past_key_values.")]
    dtype = np.float16 if "float16" in past[0].type else np.float32
    heads, head_size = past[0].shape[1], past[0].shape[3]
    heads = heads if isinstance(heads, int) else 2
    head_size = head_size if isinstance(head_size, int) else 64
    outs = [o.name for o in sess.get_outputs()]
    rng = np.random.default_rng(0)
    per_round = []
    for _ in range(rounds):
        kv = {i.name: np.zeros((1, heads, 0, head_size), dtype) for i in past}
        ids = rng.integers(0, 1000, (1, prompt)).astype(np.int64)
        total, times = prompt, []
        for step in range(steps + 1):
            feeds = {"input_ids": ids, "attention_mask": np.ones((1, total), np.int64), **kv}
            t0 = time.perf_counter()
            res = sess.run(None, feeds)
            if step:  # step 0 is the prompt
                times.append(time.perf_counter() - t0)
            kv = {n.replace("present", "past_key_values"): v for n, v in zip(outs[1:], res[1:])}
            ids = np.array([[int(np.argmax(res[0][0, -1]))]], np.int64)
            total += 1
        per_round.append(statistics.median(times))
    ms = statistics.median(per_round) * 1e3
    return {"ep": ep, "model": model_dir, "ms_per_token": ms, "tokens_per_s": 1e3 / ms, "steps": steps,
            "prompt": prompt, "rounds": rounds, "onnxruntime": ort.__version__, **facts}


def compare(model_dir: str, steps: int, prompt: int, rounds: int, peer_pythonpath: str | None,
            json_path: str | None) -> dict:
    """Both peers, each in its own process; peer_pythonpath puts onnxruntime-gpu first for ORT's EP."""
    results = {}
    for ep in ("seamless", "ort-cuda"):
        env = dict(os.environ)
        if ep == "ort-cuda" and peer_pythonpath:
            env["PYTHONPATH"] = peer_pythonpath + os.pathsep + env.get("PYTHONPATH", "")
        cmd = [sys.executable, "-m", "onnxruntime_ep_seamless", "bench", "decode-gpu", model_dir, "--ep", ep,
               "--steps", str(steps), "--prefill", str(prompt), "--decode-rounds", str(rounds), "--json", "-"]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode:
            raise SystemExit(f"{ep} failed:\n{proc.stderr[-3000:]}")
        results[ep] = json.loads(proc.stdout.strip().splitlines()[-1])
    ours, peer = results["seamless"]["ms_per_token"], results["ort-cuda"]["ms_per_token"]
    summary = {"ratio_ms_per_token": ours / peer, **results}
    print(f"decode on GPU, {os.path.basename(model_dir.rstrip('/'))}: ours {ours:.3f} ms/token, "
          f"ORT CUDA EP {peer:.3f} ms/token ({results['ort-cuda']['onnxruntime']}), ratio {ours / peer:.2f}x "
          f"({steps} steps after a {prompt}-token prompt, median of {rounds} rounds, growing KV through "
          f"session.run with host arrays; our EP: {results['seamless'].get('claimed_nodes')} nodes, eager, no capture)")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(summary, f, indent=2)
    return summary
