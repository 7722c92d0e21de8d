"""Runs invalid-input cases (tests/hostile/cases.py) on one side, in this process, one JSON line a case.

    python worker.py stock|ours|cuda [CASE ...]     (ours: our CPU EP; cuda: our CUDA EP)

Each line: {"case", "outcome": "ok" | "load-error" | "run-error", "error": ORT's exception class, "message",
"outputs": [[dtype, shape, values as a list], ...], "fed_changed": whether a fed array was modified}. A case that
kills the process (a signal) prints nothing: the parent sees which case was running from the "start" line.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402


def _session(side: str, model: bytes):
    import onnxruntime as ort
    if side == "stock":
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    import onnxruntime_ep_seamless as seamless
    device = "cuda" if side == "cuda" else "cpu"
    so = seamless.session_options(device)
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model, so)
    fallback = seamless.partition_report(sess, device).fallback_nodes
    if fallback:
        raise AssertionError(f"nodes ran on ORT's CPU EP: {fallback}")
    return sess


def _jsonable(array: np.ndarray):
    a = np.asarray(array)
    values = a.astype(np.float64) if a.dtype.kind in "fc" else a
    return [str(a.dtype), list(a.shape), [None if (isinstance(v, float) and np.isnan(v)) else v
                                          for v in values.reshape(-1).tolist()]]


def run_case(side: str, name: str) -> dict:
    from cases import CASES
    model, feeds = CASES[name]()
    before = {k: np.array(v, copy=True) for k, v in feeds.items()}
    result = {"case": name}
    try:
        sess = _session(side, model)
    except AssertionError as exc:
        return {**result, "outcome": "not-claimed", "error": "", "message": str(exc)}
    except Exception as exc:
        declined = side != "stock" and "fallback to CPU EP has been explicitly disabled" in str(exc)
        return {**result, "outcome": "not-claimed" if declined else "load-error", "error": type(exc).__name__,
                "message": str(exc)}
    try:
        outputs = sess.run(None, feeds)
        result.update(outcome="ok", outputs=[_jsonable(o) for o in outputs])
    except Exception as exc:
        result.update(outcome="run-error", error=type(exc).__name__, message=str(exc))
    result["fed_changed"] = any(not np.array_equal(before[k], np.asarray(v), equal_nan=before[k].dtype.kind in "fc")
                                for k, v in feeds.items())
    return result


def main(argv):
    side, names = argv[0], argv[1:]
    if not names:
        from cases import CASES
        names = list(CASES)
    for name in names:
        print(json.dumps({"start": name}), flush=True)
        print(json.dumps(run_case(side, name)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
