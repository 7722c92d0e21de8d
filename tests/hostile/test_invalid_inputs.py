"""Invalid and tricky inputs (cases.py), each run on stock ORT's CPU EP and on ours (fallback disabled) in
worker subprocesses. Ours must end as stock does: the same outputs, or an error of the same stage and ORT
status class whose message names the node; never a signal or a hang, never a changed input. Where stock
itself crashes, ours may answer or refuse, but must not crash.
"""
import json
import os
import queue
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from cases import CASES

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
CASE_TIMEOUT = 60  # seconds a case may take before it counts as a hang


def run_side(side: str, names: list) -> dict:
    """Every case's result on one side; a worker that dies, or spends CASE_TIMEOUT seconds on one case (a hang), is
    restarted after the case it was on."""
    results, pending = {}, list(names)
    while pending:
        proc = subprocess.Popen([sys.executable, WORKER, side, *pending], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout] + [lines.put(None)],
                         daemon=True).start()
        errors: list = []
        threading.Thread(target=lambda: errors.append(proc.stderr.read()), daemon=True).start()
        current, hung = None, False
        while True:
            try:
                line = lines.get(timeout=CASE_TIMEOUT)
            except queue.Empty:  # no line for a whole case's time
                proc.kill()
                hung = True
                break
            if line is None:
                break
            if not line.startswith("{"):
                continue
            record = json.loads(line)
            if "start" in record:
                current = record["start"]
            else:
                results[record["case"]] = record
                current = None
        proc.wait()
        err = errors[0] if errors else ""
        if current is None:
            if proc.returncode != 0 and not hung:
                raise RuntimeError(f"{side} worker failed outside a case (rc {proc.returncode}):\n{err[-3000:]}")
            pending = [n for n in pending if n not in results]
            if pending:  # finished without reporting some cases
                raise RuntimeError(f"{side} worker skipped {pending}:\n{err[-3000:]}")
            break
        results[current] = {"case": current, "outcome": "hang" if hung else "crash", "error": "",
                            "message": f"returncode {proc.returncode}: {err[-2000:]}"}
        pending = pending[pending.index(current) + 1:]
    return results


def _has_gpu() -> bool:
    try:
        import onnxruntime_ep_seamless as seamless
        return bool(seamless.get_devices("cuda"))
    except Exception:  # no CUDA variant built, or no NVIDIA GPU
        return False


@pytest.fixture(scope="module")
def outcomes(request):
    """Every side's outcome of the cases this session's tests ask for (all of them, or those `-k` selects)."""
    sides = ["stock", "ours"] + (["cuda"] if _has_gpu() else [])
    selected = {item.callspec.params["name"] for item in request.session.items
                if item.module is request.module and "name" in getattr(getattr(item, "callspec", None), "params", {})}
    names = [name for name in CASES if name in selected]
    with ThreadPoolExecutor(len(sides)) as pool:
        return dict(zip(sides, pool.map(lambda side: run_side(side, names), sides)))


def _same_outputs(stock_outputs, our_outputs) -> str:
    if len(stock_outputs) != len(our_outputs):
        return f"{len(our_outputs)} outputs, stock {len(stock_outputs)}"
    for i, ((sd, ss, sv), (od, os_, ov)) in enumerate(zip(stock_outputs, our_outputs)):
        if (sd, ss) != (od, os_):
            return f"output {i}: {od} {os_}, stock {sd} {ss}"
        s = np.array([np.nan if v is None else v for v in sv], dtype=np.float64 if sd.startswith(("float", "bfloat"))
                     else object)
        o = np.array([np.nan if v is None else v for v in ov], dtype=s.dtype)
        if s.dtype == object:
            if list(s) != list(o):
                return f"output {i}: {list(o)[:8]} != stock {list(s)[:8]}"
            continue
        if sd == "float16":  # both round once from float32 sums taken in different orders: rarely one ulp apart
            # (plus the float32 sums' own difference where they cancel: a few float32 ulps of the largest output)
            ulp = np.spacing(np.abs(s).astype(np.float16)).astype(np.float64) + 2.0 ** -20 * np.nanmax(np.abs(s),
                                                                                                     initial=0)
            same = (o == s) | (np.isnan(o) & np.isnan(s))
            if np.mean(~same) > 0.01 or not np.all(same | (np.abs(o - s) <= ulp)):
                return f"output {i}: {np.mean(~same):.1%} of float16 values differ from stock's"
            continue
        if not np.allclose(o, s, rtol=1e-5, atol=1e-6, equal_nan=True):
            return f"output {i}: {o[:8]} != stock {s[:8]}"
    return ""


@pytest.mark.parametrize("name", list(CASES))
def test_ours_ends_as_stock_does(outcomes, name):
    check_outcome(outcomes["stock"][name], outcomes["ours"][name])


@pytest.mark.cuda
@pytest.mark.parametrize("name", list(CASES))
def test_the_cuda_ep_ends_as_stock_does(outcomes, name):
    if "cuda" not in outcomes:
        pytest.skip("no NVIDIA GPU for the CUDA EP")
    ours = outcomes["cuda"][name]
    if ours["outcome"] == "not-claimed":  # ops the CUDA EP leaves to others: nothing of ours ran
        pytest.skip(ours["message"][:200])
    check_outcome(outcomes["stock"][name], ours)


def check_outcome(stock: dict, ours: dict) -> None:
    assert ours["outcome"] not in ("crash", "hang"), f"ours: {ours['outcome']}: {ours['message']}"
    assert ours["outcome"] != "not-claimed", ours["message"]
    assert not ours.get("fed_changed"), "ours modified a fed input"
    if stock["outcome"] in ("crash", "hang"):
        return  # stock has no answer to match; ours did not crash
    assert ours["outcome"] == stock["outcome"], (
        f"ours: {ours['outcome']} {ours.get('error')} {ours.get('message', '')[:600]}\n"
        f"stock: {stock['outcome']} {stock.get('error')} {stock.get('message', '')[:600]}")
    if stock["outcome"] == "ok":
        problem = _same_outputs(stock["outputs"], ours["outputs"])
        assert not problem, problem
    else:
        assert ours["error"] == stock["error"], (
            f"ours raised {ours['error']}: {ours['message'][:600]}\nstock raised {stock['error']}: "
            f"{stock['message'][:600]}")
        if stock["outcome"] == "run-error":
            assert "node" in ours["message"], f"our message names no node: {ours['message'][:600]}"
