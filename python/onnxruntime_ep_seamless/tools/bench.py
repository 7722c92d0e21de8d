"""Benchmarks: our EP against stock ORT's CPU EP, in the same process, alternating.

Each round times `runs` calls of one session, then the other; the result per EP is the
median over rounds of the per-round median, so a noisy moment hits both peers alike.
"""
from __future__ import annotations

import json
import platform
import statistics
import time


def time_runs(session, feeds, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _alternate(first, second, feeds, runs: int, rounds: int, warmup: int) -> tuple[float, float]:
    """The two sessions' median run times (s): warmed up together, then rounds timing one, then the other."""
    for _ in range(warmup):
        first.run(None, feeds)
        second.run(None, feeds)
    t_first, t_second = [], []
    for _ in range(rounds):
        t_first.append(time_runs(first, feeds, runs))
        t_second.append(time_runs(second, feeds, runs))
    return statistics.median(t_first), statistics.median(t_second)


def compare_latency(model, feeds_fn, runs: int, rounds: int, threads: int, warmup: int = 20,
                    fallback: bool = True) -> dict:
    """fallback=False: our session refuses to hand a node to ORT's CPU EP (session.disable_cpu_ep_fallback)."""
    import onnxruntime as ort

    import onnxruntime_ep_seamless as seamless

    def options(so):
        so.intra_op_num_threads = threads
        return so

    ours_options = options(seamless.session_options())
    if not fallback:
        ours_options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    ours = ort.InferenceSession(model, ours_options)
    report = seamless.assert_ep_selected(ours)
    stock = ort.InferenceSession(model, options(ort.SessionOptions()), providers=["CPUExecutionProvider"])
    med_ours, med_stock = _alternate(ours, stock, feeds_fn(stock), runs, rounds, warmup)
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


# --- ops: single-node models of the ops that ran far slower than stock ORT ---------------------------


def _node_model(op, inputs, outputs, attrs, constants=(), opset=17, domain="") -> bytes:
    """A one-node model: inputs (name, numpy dtype, shape), outputs (name, numpy dtype), constants as initializers
    (after the inputs; ("", None) an absent optional input between them)."""
    import numpy as np
    from onnx import helper, numpy_helper
    tensor_type = lambda dt: helper.np_dtype_to_tensor_dtype(np.dtype(dt))
    graph = helper.make_graph(
        [helper.make_node(op, [i[0] for i in inputs] + [c[0] for c in constants], [o[0] for o in outputs],
                          domain=domain, **attrs)],
        op, [helper.make_tensor_value_info(n, tensor_type(dt), shape) for n, dt, shape in inputs],
        [helper.make_tensor_value_info(n, tensor_type(dt), None) for n, dt in outputs],
        [numpy_helper.from_array(value, name) for name, value in constants if name])
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(graph, opset_imports=imports).SerializeToString()


def user_kernel_benchmark(runs: int, rounds: int, threads: int, warmup: int = 20) -> dict:
    """The per-call cost of a user's Python kernel (kernels/user.py) against our own Python kernel of the same op:
    a one-node Tan model (a Python step of the native program: Tan has no native step; Cos, this benchmark's op
    before session 42 gave it one, has) on our EP, with our kernel and with `np.tan` registered in its place,
    alternating rounds; every node on our EP in both."""
    import numpy as np
    import onnxruntime as ort

    import onnxruntime_ep_seamless as seamless
    model = _node_model("Tan", [("x", np.float32, [16])], [("y", np.float32)], {})

    def session():
        so = seamless.session_options()
        so.intra_op_num_threads = threads
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        return ort.InferenceSession(model, so)

    ours = session()
    seamless.register_kernel("Tan", lambda x: np.tan(x))
    try:
        user = session()
    finally:
        seamless.unregister_kernel("Tan")
    feeds = {"x": np.linspace(0, 1, 16, dtype=np.float32)}
    if not np.array_equal(ours.run(None, feeds)[0], user.run(None, feeds)[0]):
        raise RuntimeError("the user kernel's Tan differs from ours")
    med_ours, med_user = _alternate(ours, user, feeds, runs, rounds, warmup)
    return {"ours_us": med_ours * 1e6, "user_us": med_user * 1e6, "ratio": med_user / med_ours, "runs": runs,
            "rounds": rounds, "intra_op_threads": threads, "onnxruntime": ort.__version__}


def _nms_case(classes, boxes, rng):
    """Detector-like: boxes 10-120 px wide on a 1000 px image, scores mostly low (uniform^4)."""
    import numpy as np
    center, size = rng.uniform(0, 1000, (boxes, 2)), rng.uniform(10, 120, (boxes, 2))
    corners = np.concatenate([center - size / 2, center + size / 2], axis=1)[:, [1, 0, 3, 2]]  # y1 x1 y2 x2
    feeds = {"boxes": corners.astype(np.float32)[None], "scores": (rng.random((1, classes, boxes)) ** 4).astype(
        np.float32)}
    thresholds = [("max_output_boxes_per_class", np.array([100], np.int64)),
                  ("iou_threshold", np.array([0.5], np.float32)), ("score_threshold", np.array([0.05], np.float32))]
    return (f"NonMaxSuppression {classes} class(es) x {boxes} boxes, <=100 a class, IoU 0.5, score > 0.05",
            _node_model("NonMaxSuppression", [(k, v.dtype, v.shape) for k, v in feeds.items()],
                        [("selected", np.int64)], {}, thresholds), feeds)


def _tfidf_case(rows, ids, mode, max_skip, rng):
    """Text-like: ids from a Zipf distribution over a 5000-id vocabulary; the pool: the 1000 commonest ids,
    and the 1000 bigrams and 500 trigrams commonest in a sample of such text."""
    import numpy as np
    sample = np.minimum(rng.zipf(1.2, 200_000), 5000) - 1
    pool, counts = [list(range(1000))], [0]
    for n, keep in ((2, 1000), (3, 500)):
        grams = np.stack([sample[i:len(sample) - n + 1 + i] for i in range(n)], axis=1)
        unique, seen = np.unique(grams, axis=0, return_counts=True)
        counts.append(counts[-1] + len(pool[-1]))
        pool.append(unique[np.argsort(-seen, kind="stable")[:keep]].reshape(-1).tolist())
    grams = 1000 + len(pool[1]) // 2 + len(pool[2]) // 3
    attrs = {"mode": mode, "min_gram_length": 1, "max_gram_length": 3, "max_skip_count": max_skip,
             "ngram_counts": counts, "ngram_indexes": list(range(grams)), "pool_int64s": sum(pool, []),
             "weights": rng.uniform(0.5, 2.0, grams).astype(np.float32).tolist()}
    x = (np.minimum(rng.zipf(1.2, (rows, ids)), 5000) - 1).astype(np.int64)
    return (f"TfIdfVectorizer [{rows}, {ids}] ids, 1-3-grams, skip <= {max_skip}, {mode}",
            _node_model("TfIdfVectorizer", [("x", np.int64, x.shape)], [("y", np.float32)], attrs), {"x": x})


def _lstm_case(seq, batch, width, hidden, direction, rng):
    import numpy as np
    dirs = 2 if direction == "bidirectional" else 1
    weights = [("W", rng.standard_normal((dirs, 4 * hidden, width)) * 0.1),
               ("R", rng.standard_normal((dirs, 4 * hidden, hidden)) * 0.1),
               ("B", rng.standard_normal((dirs, 8 * hidden)) * 0.1)]
    x = rng.standard_normal((seq, batch, width)).astype(np.float32)
    return (f"LSTM seq {seq}, batch {batch}, input {width}, hidden {hidden}, {direction}",
            _node_model("LSTM", [("X", np.float32, x.shape)], [("Y", np.float32), ("Y_h", np.float32),
                                                                  ("Y_c", np.float32)],
                        {"hidden_size": hidden, "direction": direction},
                        [(n, w.astype(np.float32)) for n, w in weights], opset=14), {"X": x})


def _topk_case(rows, cols, k, rng):
    import numpy as np
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    return (f"TopK [{rows}, {cols}], k = {k}, last axis",
            _node_model("TopK", [("x", np.float32, x.shape)], [("values", np.float32), ("indices", np.int64)], {},
                        [("k", np.array([k], np.int64))]), {"x": x})


def _matmul_nbits_case(k, n, rng, level=0, rows=1, block=32, zero_points=False):
    """A decode step's product (one row of A; more: a prompt's), 4-bit B; accuracy_level 0 (float32 arithmetic, as
    QMoE's experts run) or 4 (A quantized to int8: the builder's int4 decoders); zero_points: uint8 ones (asymmetric
    int4: GPTQ/AWQ conversions)."""
    import numpy as np
    b = rng.integers(0, 256, (n, k // block, block // 2)).astype(np.uint8)
    scales = (0.01 * rng.random(n * k // block)).astype(np.float32)
    weights = [("B", b), ("scales", scales)]
    if zero_points:
        weights.append(("zero_points", rng.integers(0, 256, (n, -(-k // block // 2))).astype(np.uint8)))
    a = rng.standard_normal((rows, k)).astype(np.float32)
    return (f"MatMulNBits [{rows}, {k}] x 4-bit [{k}, {n}], blocks of {block}, accuracy_level {level}"
            + (", uint8 zero points" if zero_points else ""),
            _node_model("MatMulNBits", [("A", np.float32, a.shape)], [("Y", np.float32)],
                        {"K": k, "N": n, "bits": 4, "block_size": block, "accuracy_level": level},
                        weights, domain="com.microsoft"), {"A": a})


def _qmoe_cases(hidden, inter, rng, experts=32, k=4) -> list:
    """A QMoE layer of 4-bit experts in blocks of 32 (the builder's int4 CPU export: the default zero point), SwiGLU
    with its limit, each token to the top k: a decode step's and a 16-token prompt's (one model, its token count
    symbolic)."""
    import numpy as np
    block = 32
    weights = []
    for n, rows, cols in (("1", 2 * inter, hidden), ("2", hidden, inter)):
        weights += [(f"fc{n}", rng.integers(0, 256, (experts, rows, cols // 2), np.uint8)),
                    (f"s{n}", (0.02 * rng.random((experts, rows, cols // block))).astype(np.float32))]
    weights.insert(2, ("", None))  # no fc1 bias
    attrs = {"k": k, "activation_type": "swiglu", "swiglu_fusion": 1, "activation_alpha": 1.702,
             "activation_beta": 1.0, "swiglu_limit": 7.0, "expert_weight_bits": 4, "block_size": block}
    model = _node_model("QMoE", [("x", np.float32, ["tokens", hidden]), ("router", np.float32, ["tokens", experts])],
                        [("y", np.float32)], attrs, weights, opset=21, domain="com.microsoft")
    return [(f"QMoE [{tokens}, {hidden}], {experts} experts of 4-bit [{2 * inter}, {hidden}] + [{hidden}, {inter}], "
             f"top {k}", model, {"x": rng.standard_normal((tokens, hidden)).astype(np.float32),
                                 "router": rng.standard_normal((tokens, experts)).astype(np.float32)})
            for tokens in (1, 16)]


def _attention_case(rng):
    """ONNX Attention (opset 23) over a BERT-sized layer: q, k, v [1, 128, 384] as 12 heads, a float mask."""
    import numpy as np
    feeds = {n: rng.standard_normal((1, 128, 384)).astype(np.float32) for n in "qkv"}
    feeds["mask"] = np.where(rng.random((1, 1, 128, 128)) < 0.9, 0.0, -1e4).astype(np.float32)
    return ("Attention (opset 23) [1, 128, 384], 12 heads, float mask",
            _node_model("Attention", [(n, np.float32, v.shape) for n, v in feeds.items()], [("y", np.float32)],
                        {"q_num_heads": 12, "kv_num_heads": 12}, opset=23), feeds)


def _gqa_prompt_case(tokens, rng):
    """GroupQueryAttention over a first prompt of a Qwen2.5-0.5B-shaped layer: 14 query heads, 2 KV heads of 64,
    causal, no rotary (the attention alone)."""
    import numpy as np
    feeds = {"query": rng.standard_normal((1, tokens, 14 * 64)).astype(np.float32),
             "key": rng.standard_normal((1, tokens, 2 * 64)).astype(np.float32),
             "value": rng.standard_normal((1, tokens, 2 * 64)).astype(np.float32),
             "past_key": np.zeros((1, 2, 0, 64), np.float32), "past_value": np.zeros((1, 2, 0, 64), np.float32),
             "seqlens_k": np.array([tokens - 1], np.int32), "total_sequence_length": np.array(tokens, np.int32)}
    return (f"GroupQueryAttention over a {tokens}-token prompt, 14 / 2 heads of 64",
            _node_model("GroupQueryAttention", [(n, v.dtype, v.shape) for n, v in feeds.items()],
                        [("y", np.float32), ("present_key", np.float32), ("present_value", np.float32)],
                        {"num_heads": 14, "kv_num_heads": 2}, domain="com.microsoft"), feeds)


def op_cases() -> list:
    """(title, model, feeds) of the single-op models `bench ops` times: fixed shapes of typical use, seeded."""
    import numpy as np
    rng = np.random.default_rng(0)
    return [_nms_case(1, 1000, rng), _nms_case(80, 1000, rng), _nms_case(1, 5000, rng),
            _tfidf_case(1, 4000, "TFIDF", 0, rng), _tfidf_case(8, 512, "TF", 2, rng),
            _lstm_case(64, 4, 128, 128, "bidirectional", rng), _lstm_case(128, 1, 64, 256, "forward", rng),
            _topk_case(4, 32000, 50, rng), _matmul_nbits_case(256, 1024, rng), _matmul_nbits_case(2048, 2048, rng),
            # the int8 path at the tiny decoders' LM head, a 0.5B decoder's MLP, a 1B-wide one's
            _matmul_nbits_case(256, 32000, rng, 4), _matmul_nbits_case(896, 4864, rng, 4),
            _matmul_nbits_case(2048, 8192, rng, 4),
            # a 16-token prompt through the 0.5B decoder's MLP, blocks of 32 (the builder's) and of 128
            _matmul_nbits_case(896, 4864, rng, 4, 16), _matmul_nbits_case(896, 4864, rng, 4, 16, 128),
            # asymmetric int4 (uint8 zero points): a decode step's and a prompt's
            _matmul_nbits_case(896, 4864, rng, 4, zero_points=True),
            _matmul_nbits_case(896, 4864, rng, 4, 16, zero_points=True),
            # the experts of a gpt-oss-20b layer and of an LFM2-8B-A1B-wide one (MatMulNBits' float path): a decode
            # step's and a prompt's
            *_qmoe_cases(2880, 2880, np.random.default_rng(1)), *_qmoe_cases(2048, 1792, np.random.default_rng(1)),
            # activations of a BERT-sized MLP over 128 tokens (GELU's tanh form: Gemma's GeGLU, GPT-2)
            _activation_case("Tanh", {}, rng), _activation_case("Gelu", {"approximate": "tanh"}, rng, opset=20),
            # attention on the GEMM: a BERT-sized layer's, a decoder prompt's
            _attention_case(rng), _gqa_prompt_case(200, rng), _gqa_prompt_case(1000, rng)]


def _activation_case(op, attrs, rng, opset=17):
    import numpy as np
    x = (2 * rng.standard_normal((128, 1536))).astype(np.float32)
    return (f"{op} {attrs or ''} [128, 1536]".replace("  ", " "),
            _node_model(op, [("x", np.float32, x.shape)], [("y", np.float32)], attrs, opset=opset), {"x": x})


def ops_benchmark(runs: int, rounds: int, threads: int, budget_s: float = 0.05, progress: bool = True) -> dict:
    """Each op_cases() model on our EP (no fallback) and stock ORT's CPU EP, alternating (compare_latency);
    per case at most `runs` runs a round, fewer where a round would pass budget_s."""
    import sys

    import onnxruntime as ort
    results = []
    for title, model, feeds in op_cases():
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        t0 = time.perf_counter()
        sess.run(None, feeds)
        case_runs = max(1, min(runs, int(budget_s / max(time.perf_counter() - t0, 1e-6))))
        r = compare_latency(model, lambda _: feeds, case_runs, rounds, threads, warmup=min(20, case_runs),
                            fallback=False)
        results.append({"case": title, **r})
        if progress:
            print(f"  {title}: {r['ratio']:.2f}x", file=sys.stderr)
    return {"cases": results, "rounds": rounds, "intra_op_threads": threads}


def print_ops_result(r: dict, json_path: str | None) -> None:
    cases = r["cases"]
    width = max(len(c["case"]) for c in cases)
    print(f"single-op models, our EP (CPU fallback disabled) vs stock ORT CPU EP, {r['intra_op_threads']} intra-op "
          f"thread(s), median of {r['rounds']} rounds (onnxruntime {cases[0]['onnxruntime']})")
    print(f"{'op':{width}}  {'ours':>11}  {'stock':>10}  ratio")
    for c in cases:
        print(f"{c['case']:{width}}  {c['ours_ms']:8.3f} ms  {c['stock_ms']:7.3f} ms  {c['ratio']:5.2f}x")
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"benchmark": "ops", **r}, f, indent=2)


# --- decode: autoregressive LLM decoding (onnxruntime-genai model builder layout) ---------------


class ProgressBar:
    """A plain-text progress bar on a stream ('\\r'-updated on a terminal, a few lines otherwise)."""

    def __init__(self, total: int, label: str, stream=None, width: int = 30):
        import sys
        self.total, self.label, self.width = max(total, 1), label, width
        self.stream = stream or sys.stderr
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self.done = 0
        self._last_decile = -1

    def update(self, n: int = 1, note: str = "") -> None:
        self.done = min(self.done + n, self.total)
        filled = self.width * self.done // self.total
        line = f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} {note}"
        if self.tty:
            self.stream.write("\r" + line)
            self.stream.flush()
        elif self.done * 10 // self.total != self._last_decile:
            self._last_decile = self.done * 10 // self.total
            self.stream.write(line + "\n")
            self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def decoder_config(model_dir: str) -> dict:
    """The `model.decoder` section of a builder-style decoder's genai_config.json ({} without the file)."""
    import os
    path = os.path.join(model_dir, "genai_config.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f).get("model", {}).get("decoder", {})


def kv_geometry(model_dir: str, past_shape, cfg: dict | None = None) -> tuple[int, int]:
    """(KV heads, head size) of a builder-style decoder: from its genai_config.json (`cfg`: its decoder_config, when
    read already), else from the static dims of a past input's shape (batch, heads, length, head size)."""
    cfg = decoder_config(model_dir) if cfg is None else cfg
    heads = cfg.get("num_key_value_heads") or (past_shape[1] if isinstance(past_shape[1], int) else None)
    head_size = cfg.get("head_size") or (past_shape[3] if isinstance(past_shape[3], int) else None)
    if not heads or not head_size:
        raise SystemExit(f"cannot tell the decoder's KV heads / head size: no genai_config.json in {model_dir} "
                         "and symbolic dims in its past inputs")
    return int(heads), int(head_size)


def _decoder_io(session, model_dir):
    """Names and KV geometry of a builder-style decoder: (past names, present names, kv heads, head size)."""
    past = [i for i in session.get_inputs() if i.name.startswith("past_key_values.")]
    if not past:
        raise SystemExit("bench decode: the model has no past_key_values.* inputs (not a builder-style decoder)")
    heads, head_size = kv_geometry(model_dir, past[0].shape)
    presents = {o.name for o in session.get_outputs()}
    names = [(p.name, p.name.replace("past_key_values.", "present.")) for p in past]
    missing = [n for _, n in names if n not in presents]
    if missing:
        raise SystemExit(f"bench decode: outputs {missing[:3]} missing (expected present.* for each past input)")
    return names, heads, head_size


class _Decoder:
    """One EP's greedy generation state: feeds present.* back as past_key_values.* each step."""

    def __init__(self, session, names, heads, head_size, prompt):
        self.session, self.names = session, names
        self.inputs = {i.name for i in session.get_inputs()}
        self.out_index = {o.name: k for k, o in enumerate(session.get_outputs())}
        self.heads, self.head_size, self.prompt = heads, head_size, prompt

    def _feeds(self, ids, total, past):
        import numpy as np
        feeds = {"input_ids": np.asarray(ids, np.int64).reshape(1, -1), **past}
        if "attention_mask" in self.inputs:
            feeds["attention_mask"] = np.ones((1, total), np.int64)
        if "position_ids" in self.inputs:
            feeds["position_ids"] = np.arange(total - len(ids), total, dtype=np.int64).reshape(1, -1)
        return feeds

    def prefill(self, prompt=None) -> float:
        """A generation's first run: `prompt` (default the decoder's) after an empty past."""
        import numpy as np
        prompt = self.prompt if prompt is None else prompt
        past = {p: np.zeros((1, self.heads, 0, self.head_size), np.float32) for p, _ in self.names}
        self.total = len(prompt)
        return self._run(self._feeds(prompt, self.total, past))

    def step(self) -> float:
        self.total += 1
        return self._run(self._feeds([self.token], self.total, self.past))

    def _run(self, feeds) -> float:
        import numpy as np
        t0 = time.perf_counter()
        out = self.session.run(None, feeds)
        elapsed = time.perf_counter() - t0
        self.token = int(np.argmax(out[self.out_index["logits"]][0, -1]))
        self.past = {p: out[self.out_index[q]] for p, q in self.names}
        return elapsed


def decode_benchmark(model_dir: str, steps: int, prefill: int, threads: int, rounds: int = 3,
                     progress: bool = True, new_lengths: bool = False) -> dict:
    """Greedy decoding of `steps` tokens after a `prefill`-token prompt on our EP and on stock ORT's
    CPU EP, in this process, alternating: each round runs one EP's whole generation, then the
    other's (which goes first alternates between rounds). ms/token is the mean decode-step time of
    a generation; reported: the median over rounds. new_lengths: the warm-up's prompt has `prefill` tokens and each
    round's one fewer than the last (down to 1), so every timed prompt has a length neither session has seen."""
    import os

    import numpy as np
    import onnxruntime as ort

    import onnxruntime_ep_seamless as seamless
    path = os.path.join(model_dir, "model.onnx") if os.path.isdir(model_dir) else model_dir
    model_dir = os.path.dirname(path)

    def options(so):
        so.intra_op_num_threads = threads
        return so

    t0 = time.perf_counter()
    ours = ort.InferenceSession(path, options(seamless.session_options()))
    load_ours = time.perf_counter() - t0
    report = seamless.assert_ep_selected(ours)
    t0 = time.perf_counter()
    stock = ort.InferenceSession(path, options(ort.SessionOptions()), providers=["CPUExecutionProvider"])
    load_stock = time.perf_counter() - t0
    names, heads, head_size = _decoder_io(stock, model_dir)
    prompt = np.random.default_rng(0).integers(0, 1000, prefill)
    peers = {"ours": _Decoder(ours, names, heads, head_size, prompt),
             "stock": _Decoder(stock, names, heads, head_size, prompt)}
    for dec in peers.values():  # warm-up: a prefill and a few steps each
        dec.prefill()
        for _ in range(min(steps, 4)):
            dec.step()
    bar = ProgressBar(2 * rounds * steps, "decode") if progress else None
    per_round = {k: [] for k in peers}
    prefill_ms = {k: [] for k in peers}
    tokens = {}
    lengths = [max(1, prefill - 1 - r) if new_lengths else prefill for r in range(rounds)]
    for r in range(rounds):
        # one whole generation per EP, then the other's; who goes first alternates. (Step-by-step
        # interleaving would leave the idle session's intra-op threads spinning on the same cores.)
        for k in (["ours", "stock"] if r % 2 == 0 else ["stock", "ours"]):
            prefill_ms[k].append(peers[k].prefill(prompt[:lengths[r]]) * 1e3)
            times, gen = [], []
            for _ in range(steps):
                times.append(peers[k].step())
                gen.append(peers[k].token)
                if bar:
                    bar.update(1, f"round {r + 1}/{rounds} {k}")
            per_round[k].append(statistics.mean(times) * 1e3)
            tokens[k] = gen
    if bar:
        bar.close()
    ms = {k: statistics.median(v) for k, v in per_round.items()}
    same = next((i for i, (a, b) in enumerate(zip(tokens["ours"], tokens["stock"])) if a != b), steps)
    return {
        "model": path, "steps": steps, "prefill_tokens": prefill, "rounds": rounds, "intra_op_threads": threads,
        "ours_ms_per_token": ms["ours"], "stock_ms_per_token": ms["stock"], "ratio": ms["ours"] / ms["stock"],
        "ours_tokens_per_s": 1e3 / ms["ours"], "stock_tokens_per_s": 1e3 / ms["stock"],
        "ours_ms_per_token_rounds": per_round["ours"], "stock_ms_per_token_rounds": per_round["stock"],
        "ours_prefill_ms": statistics.median(prefill_ms["ours"]),
        "stock_prefill_ms": statistics.median(prefill_ms["stock"]),
        "ours_prefill_ms_rounds": prefill_ms["ours"], "stock_prefill_ms_rounds": prefill_ms["stock"],
        "prefill_lengths": lengths,
        "ours_session_load_s": load_ours, "stock_session_load_s": load_stock,
        "greedy_tokens_identical": f"{same}/{steps}",  # the common prefix of the two greedy sequences
        "claimed_nodes": len(report.ep_nodes), "fallback_nodes": len(report.fallback_nodes),
        "onnxruntime": ort.__version__, "numpy": np.__version__, "python": platform.python_version(),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "cpus": os.cpu_count(),
    }


def register_for_genai(og, device: str = "cpu") -> str:
    """Our EP's library for `device` registered with onnxruntime-genai (once a process: genai refuses a second
    registration of the name); its EP name, for config.append_provider."""
    import onnxruntime_ep_seamless as seamless
    name = seamless.get_ep_name(device)
    try:
        og.register_execution_provider_library(name, seamless.get_library_path(device))
    except RuntimeError as exc:
        if "already registered" not in str(exc):
            raise
    return name


GENAI_PEERS = {"cpu": "ORT's CPU EP", "cuda": "ORT's CUDA EP (onnxruntime-genai's cuda provider)"}


def genai_benchmark(model_dir: str, steps: int, prefill: int, rounds: int = 5, progress: bool = True,
                    device: str = "cpu", max_length: int | None = None, share_buffer: bool | None = None,
                    cuda_graph: bool = False, ours_only: bool = False) -> dict:
    """Greedy generation driven by onnxruntime-genai's Generator (as its users run a model): our EP for `device`
    registered as a plugin library and appended as the model's provider, against the same model on stock ORT's
    EP for the device (genai's own "cuda" provider: onnxruntime-genai-cuda's build), in this process, alternating
    whole generations; `ours_only`: our EP alone (on CUDA with genai's CPU build, which has no cuda provider). On
    CUDA genai keeps our EP's KV cache in host memory (it knows only its own providers' devices), of `max_length`
    rows where past and present share buffers (`share_buffer`: the search option past_present_share_buffer, None:
    the model's genai_config). `cuda_graph`: both providers with enable_cuda_graph=1. ms/token: the mean generate_next_token time after the first token; the time to the first
    token is the prompt's (append_tokens and the first generate_next_token)."""
    import numpy as np
    import onnxruntime_genai as og
    name = register_for_genai(og, device)
    max_length = max_length or prefill + steps
    if max_length < prefill + steps:
        raise SystemExit(f"bench genai: --max-length {max_length} is shorter than the prompt and steps "
                         f"({prefill} + {steps})")
    models = {}
    for peer in ("ours",) if ours_only else ("ours", "stock"):
        config = og.Config(model_dir)
        config.clear_providers()
        provider = name if peer == "ours" else "cuda" if device == "cuda" else None
        if provider:
            config.append_provider(provider)
        if provider and cuda_graph:
            config.set_provider_option(provider, "enable_cuda_graph", "1")
        try:
            models[peer] = og.Model(config)
        except Exception as exc:  # genai's RuntimeError: a CPU build asked for cuda, no GPU, a model built for another EP
            who = f"our EP ({name})" if peer == "ours" else GENAI_PEERS[device]
            hint = " (onnxruntime-genai-cuda is genai's CUDA build)" if device == "cuda" and peer == "stock" else ""
            raise SystemExit(f"bench genai: onnxruntime-genai could not load {model_dir} on {who}{hint}: {exc}")
    prompt = np.random.default_rng(0).integers(0, 1000, prefill).astype(np.int32)

    def generate(model):
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=max_length, do_sample=False)
        if share_buffer is not None:
            params.set_search_options(past_present_share_buffer=share_buffer)
        generator = og.Generator(model, params)
        steps_left = steps
        t0 = time.perf_counter()
        generator.append_tokens(prompt)
        generator.generate_next_token()
        first = time.perf_counter() - t0
        times = []
        while steps_left > 1 and not generator.is_done():  # max_length may leave room for more
            t0 = time.perf_counter()
            generator.generate_next_token()
            times.append(time.perf_counter() - t0)
            steps_left -= 1
        return first, statistics.mean(times), [int(t) for t in generator.get_sequence(0)[prefill:]]

    for model in models.values():  # warm-up: a generation each
        generate(model)
    bar = ProgressBar(len(models) * rounds, "genai") if progress else None
    per_round = {k: [] for k in models}
    first_ms = {k: [] for k in models}
    tokens = {}
    for r in range(rounds):
        for k in (list(models) if r % 2 == 0 else list(models)[::-1]):
            first, mean, tokens[k] = generate(models[k])
            first_ms[k].append(first * 1e3)
            per_round[k].append(mean * 1e3)
            if bar:
                bar.update(1, f"round {r + 1}/{rounds} {k}")
    if bar:
        bar.close()
    result = {"model": model_dir, "device": device, "stock": None if ours_only else GENAI_PEERS[device],
              "steps": steps, "prefill_tokens": prefill, "rounds": rounds, "max_length": max_length,
              "past_present_share_buffer": "genai_config" if share_buffer is None else share_buffer,
              "enable_cuda_graph": cuda_graph}
    for k in models:
        result.update({f"{k}_ms_per_token": statistics.median(per_round[k]),
                       f"{k}_first_token_ms": statistics.median(first_ms[k]), f"{k}_ms_per_token_rounds": per_round[k]})
    if not ours_only:
        same = next((i for i, (a, b) in enumerate(zip(tokens["ours"], tokens["stock"])) if a != b),
                    len(tokens["ours"]))
        result.update(ratio=result["ours_ms_per_token"] / result["stock_ms_per_token"],
                      greedy_tokens_identical=f"{same}/{len(tokens['ours'])}")
    return {**result, "ours_tokens": tokens["ours"], "onnxruntime_genai": og.__version__,
            "python": platform.python_version(), "machine": f"{platform.machine()} {platform.processor() or ''}".strip()}


def print_genai_result(r: dict, json_path: str | None) -> None:
    print(f"onnxruntime-genai {r['onnxruntime_genai']} Generator, {r['model']}: {r['prefill_tokens']}-token prompt, "
          f"then {r['steps']} greedy tokens, {r['rounds']} rounds; max_length {r['max_length']}, "
          f"past_present_share_buffer {r['past_present_share_buffer']}, enable_cuda_graph {int(r['enable_cuda_graph'])}; "
          f"stock: {r['stock'] or 'not run (--ep seamless)'}")
    for k, label in (("ours", "ours     "), ("stock", "stock ORT")):
        if f"{k}_ms_per_token" in r:
            print(f"  {label} {r[f'{k}_ms_per_token']:8.3f} ms/token, first token {r[f'{k}_first_token_ms']:.1f} ms")
    if "ratio" in r:
        print(f"  ratio ours/stock {r['ratio']:.2f}x   (first {r['greedy_tokens_identical']} greedy tokens identical)")
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"benchmark": "genai", **r}, f, indent=2)


def program_profile(model: str, feeds_fn, threads: int, repeats: int = 5) -> dict:
    """Where a model's time goes on our CPU EP: the session's run, and each step of the native programs its runs
    recorded, timed alone (the step run repeats times over the recording's buffers, on one thread), summed per
    op. Partitions that run through Python are listed with the reason."""
    import collections

    import numpy as np
    import onnxruntime as ort

    import onnxruntime_ep_seamless as seamless
    from ..exec.compute import live_kernels
    from ..kernels.cpu import native as native_cpu
    ffi, lib = native_cpu.ffi, native_cpu.lib
    before = {id(k) for k in live_kernels()}
    so = seamless.session_options()
    so.intra_op_num_threads = threads
    session = ort.InferenceSession(model, so)
    feeds = feeds_fn(session)
    for _ in range(3):  # the second run records the binding, the third runs its program
        session.run(None, feeds)
    run_ms = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        session.run(None, feeds)
        run_ms.append((time.perf_counter() - t0) * 1e3)
    per_op, calls, python, program_ms = collections.Counter(), collections.Counter(), [], 0.0
    error = ffi.new("char[]", lib.SEAMLESS_PROGRAM_ERROR)
    for kernel in live_kernels():
        if id(kernel) in before:
            continue
        if kernel.why_python or not kernel.programs:
            python.append(f"{kernel.name}: {kernel.why_python or 'no binding recorded'}")
            continue
        if any(n not in feeds for n in kernel.plan.input_names):
            python.append(f"{kernel.name}: reads values of other partitions (not profiled)")
            continue
        _, program = list(kernel.programs.values())[-1]
        inputs = [np.ascontiguousarray(feeds[n]) for n in kernel.plan.input_names]
        outputs = [np.empty(shape, dtype) for shape, dtype in zip(program.out_shapes, kernel.out_dtypes)]
        io = ffi.new("void*[]", [ffi.cast("void*", ffi.from_buffer(a)) if a.nbytes else ffi.NULL
                                 for a in inputs + outputs] or [ffi.NULL])
        arena = native_cpu.aligned_empty(max(program.c.arena_bytes, 1), np.uint8)
        arena_ptr = ffi.cast("char*", ffi.from_buffer(arena))
        one = ffi.new("SeamlessProgram*")
        one[0] = program.c[0]
        one.n_steps = 1
        for i in range(program.c.n_steps):
            one.steps = program.c.steps + i
            t0 = time.perf_counter()
            for _ in range(repeats):
                if lib.seamless_program_run(one, io, arena_ptr, ffi.NULL, ffi.NULL, error, len(error)):
                    raise RuntimeError(ffi.string(error).decode())
            ms = (time.perf_counter() - t0) / repeats * 1e3
            label = ffi.string(program.c.steps[i].label).decode()
            op = label[label.rfind("(") + 1:-1] if label.endswith(")") else label
            per_op[op] += ms
            calls[op] += 1
            program_ms += ms
    return {"model": model, "threads": threads, "run_ms": statistics.median(run_ms), "steps_ms": program_ms,
            "per_op_ms": dict(per_op.most_common()), "calls": dict(calls), "python": python}


def print_profile(r: dict, json_path: str | None) -> None:
    print(f"{r['model']}: session.run {r['run_ms']:.3f} ms ({r['threads']} intra-op thread(s)); the native "
          f"programs' steps, each timed alone on one thread: {r['steps_ms']:.3f} ms")
    for op, ms in r["per_op_ms"].items():
        print(f"  {ms:9.3f} ms {100 * ms / max(r['steps_ms'], 1e-9):5.1f}%  {r['calls'][op]:4d} x {op}")
    for line in r["python"]:
        print(f"  through Python: {line}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"benchmark": "profile", **r}, f, indent=2)


GEMM_SHAPES = ((128, 384, 1536), (128, 1536, 384), (128, 384, 384),  # MiniLM b1 s128: FFN up, down, projections
               (16, 896, 4864), (512, 896, 4864), (512, 4864, 896),  # a 0.5B decoder's MLP, 16- and 512-token prompts
               (16, 256, 32000))                                       # the tiny decoders' LM head over a prompt


def gemm_benchmark(threads: int, rounds: int = 5) -> list[dict]:
    """float32 A [M, K] times a constant B [K, N]: our EP's GEMM (a single-node MatMul model, so the run is the
    native program's one GEMM step) and stock ORT's MLAS, alternating in this process; GFLOP/s of the medians."""
    import numpy as np
    from onnx import helper, numpy_helper
    rows = []
    for m, k, n in GEMM_SHAPES:
        rng = np.random.default_rng(0)
        w = rng.standard_normal((k, n)).astype(np.float32)
        graph = helper.make_graph([helper.make_node("MatMul", ["a", "w"], ["y"])], "gemm",
                                  [helper.make_tensor_value_info("a", 1, [m, k])],
                                  [helper.make_tensor_value_info("y", 1, [m, n])], [numpy_helper.from_array(w, "w")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString()
        result = compare_latency(model, lambda sess: {"a": rng.standard_normal((m, k)).astype(np.float32)},
                                 max(3, int(5e8 / (2 * m * k * n))), rounds, threads, warmup=3)
        flop = 2 * m * k * n
        rows.append({"m": m, "k": k, "n": n, "ours_gflops": flop / result["ours_ms"] / 1e6,
                     "stock_gflops": flop / result["stock_ms"] / 1e6, "ratio": result["ratio"]})
    return rows


def print_decode_result(r: dict, json_path: str | None) -> None:
    lengths = r.get("prefill_lengths", [])
    fresh = f" (new lengths: {lengths[0]} down to {lengths[-1]})" if len(set(lengths)) > 1 else ""
    print(f"decode {r['model']}: {r['prefill_tokens']}-token prefill{fresh}, then {r['steps']} greedy steps, "
          f"{r['rounds']} rounds, {r['intra_op_threads']} intra-op thread(s)")
    print(f"  ours      {r['ours_ms_per_token']:8.2f} ms/token ({r['ours_tokens_per_s']:.1f} tokens/s), "
          f"prefill {r['ours_prefill_ms']:.1f} ms")
    print(f"  stock ORT {r['stock_ms_per_token']:8.2f} ms/token ({r['stock_tokens_per_s']:.1f} tokens/s), "
          f"prefill {r['stock_prefill_ms']:.1f} ms")
    print(f"  ratio ours/stock {r['ratio']:.2f}x   ({r['claimed_nodes']} nodes on our EP, {r['fallback_nodes']} "
          f"elsewhere; first {r['greedy_tokens_identical']} greedy tokens identical; onnxruntime {r['onnxruntime']})")
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"benchmark": "decode", **r}, f, indent=2)
