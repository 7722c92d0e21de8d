"""Benchmarks: our EP against stock ORT's CPU EP, in the same process, alternating.

Each round times `runs` calls of one session, then the other; the result per EP is the
median over rounds of the per-round median, so a noisy moment hits both peers alike.
"""
from __future__ import annotations

import json
import platform
import statistics
import time


def _time_runs(session, feeds, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def compare_latency(model, feeds_fn, runs: int, rounds: int, threads: int, warmup: int = 20) -> dict:
    import onnxruntime as ort

    import onnxruntime_ep_seamless as seamless

    def options(so):
        so.intra_op_num_threads = threads
        return so

    ours = ort.InferenceSession(model, options(seamless.session_options()))
    report = seamless.assert_ep_selected(ours)
    stock = ort.InferenceSession(model, options(ort.SessionOptions()), providers=["CPUExecutionProvider"])
    feeds = feeds_fn(stock)
    for _ in range(warmup):
        ours.run(None, feeds)
        stock.run(None, feeds)
    t_ours, t_stock = [], []
    for _ in range(rounds):
        t_ours.append(_time_runs(ours, feeds, runs))
        t_stock.append(_time_runs(stock, feeds, runs))
    med_ours, med_stock = statistics.median(t_ours), statistics.median(t_stock)
    import numpy as np
    return {
        "ours_ms": med_ours * 1e3, "stock_ms": med_stock * 1e3, "ratio": med_ours / med_stock,
        "runs": runs, "rounds": rounds, "intra_op_threads": threads,
        "claimed_nodes": len(report.ep_nodes), "fallback_nodes": len(report.fallback_nodes),
        "onnxruntime": ort.__version__, "numpy": np.__version__, "python": platform.python_version(),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
    }


def print_result(title: str, r: dict, json_path: str | None) -> None:
    unit, scale = ("µs", 1e3) if r["stock_ms"] < 1 else ("ms", 1)
    print(f"{title}: ours {r['ours_ms'] * scale:.2f} {unit}, stock ORT CPU {r['stock_ms'] * scale:.2f} {unit}, "
          f"ratio {r['ratio']:.2f}x  (median of {r['rounds']} rounds x {r['runs']} runs, "
          f"{r['intra_op_threads']} intra-op thread(s), {r['claimed_nodes']} nodes on our EP, "
          f"{r['fallback_nodes']} elsewhere; onnxruntime {r['onnxruntime']})")
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"benchmark": title, **r}, f, indent=2)
