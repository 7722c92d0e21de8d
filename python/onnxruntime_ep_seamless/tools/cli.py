"""Command line: demo, run MODEL, check, bench, conformance, coverage, capture-report.   python -m onnxruntime_ep_seamless --help"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

from .. import DEMO_MODEL, __version__

SMOKE_MODEL = os.path.join(os.path.dirname(DEMO_MODEL), "add.onnx")
NUMPY_OF = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
            "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
            "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}


def random_feeds(session, dims: dict[str, int], seed: int = 0, given: dict | None = None) -> dict:
    """Inputs for a session: symbolic dims from `dims` (default 1), floats ~ N(0, 1), integers in
    [0, 100) except masks (1) and token type ids (0), as transformer models expect; `given`: an input's
    (shape or None, value or None) instead (bench's --shape and --value)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for inp in session.get_inputs():
        dtype = NUMPY_OF.get(inp.type)
        if dtype is None:
            raise SystemExit(f"input {inp.name!r} has type {inp.type}; pass it in an .npz file with --inputs")
        shape, value = (given or {}).get(inp.name, (None, None))
        if shape is None:
            shape = [d if isinstance(d, int) and d >= 0 else dims.get(str(d), 1) for d in inp.shape]
        if value is not None:
            feeds[inp.name] = np.full(shape, value, dtype)
        elif np.issubdtype(dtype, np.integer):
            low, high = (1, 2) if "mask" in inp.name else (0, 1) if "type" in inp.name else (0, 100)
            feeds[inp.name] = rng.integers(low, high, shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[inp.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            feeds[inp.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def median_ms(session, feeds, runs: int) -> float:
    session.run(None, feeds)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def compare(model: str, feeds: dict | None, dims: dict[str, int], runs: int, options: dict) -> int:
    import onnxruntime as ort

    import onnxruntime_ep_seamless as seamless
    so = seamless.session_options(**options)
    ours = ort.InferenceSession(model, so)
    stock_so = ort.SessionOptions()
    stock = ort.InferenceSession(model, stock_so, providers=["CPUExecutionProvider"])
    feeds = feeds or random_feeds(stock, dims)
    report = seamless.assert_ep_selected(ours)
    print(report)
    got, want = ours.run(None, feeds), stock.run(None, feeds)
    for out, a, b in zip(stock.get_outputs(), got, want):
        a, b = np.asarray(a), np.asarray(b)
        diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0
        print(f"output {out.name}: shape {list(a.shape)} {a.dtype}, max |diff| vs stock ORT CPU = {diff:.3g}")
    if runs:
        t_ours, t_stock = median_ms(ours, feeds, runs), median_ms(stock, feeds, runs)
        print(f"latency (median of {runs}): ours {t_ours:.3f} ms, stock ORT CPU {t_stock:.3f} ms, "
              f"ratio {t_ours / t_stock:.2f}x")
    return 0


def cmd_demo(args) -> int:
    print(f"onnxruntime-ep-seamless {__version__}: demo on the embedded encoder layer ({DEMO_MODEL})")
    return compare(DEMO_MODEL, None, {"batch": 2, "seq": 16}, args.runs, {})


def cmd_run(args) -> int:
    feeds = dict(np.load(args.inputs)) if args.inputs else None
    dims = dict((k, int(v)) for k, v in (d.split("=") for d in args.dim))
    options = dict(o.split("=", 1) for o in args.option)
    return compare(args.model, feeds, dims, args.runs, options)


def cmd_check(args) -> int:
    problems = []
    print(f"onnxruntime-ep-seamless {__version__}")
    print(f"python {platform.python_version()} ({sys.executable}), numpy {np.__version__}")
    try:
        import onnxruntime as ort
        print(f"onnxruntime {ort.__version__} ({os.path.dirname(ort.__file__)})")
    except ImportError:
        print("onnxruntime: not installed")
        problems.append("install onnxruntime >= 1.23: pip install onnxruntime")
        ort = None
    import onnxruntime_ep_seamless as seamless
    try:
        print(f"library: {seamless.get_library_path()}")
    except FileNotFoundError as exc:
        problems.append(str(exc))
    if ort is not None and not problems:
        try:
            devices = seamless.get_devices()
            for d in devices:
                print(f"device: {d.ep_name} on {d.device.type} (vendor {d.device.vendor!r}), "
                      f"version {d.ep_metadata.get('version')}")
            if not devices:
                problems.append("the EP offers no device")
            _smoke(ort, seamless)
            print("smoke test: one Add node ran on SeamlessCPUExecutionProvider with CPU fallback disabled")
        except Exception as exc:  # report, don't crash: this command exists to diagnose
            problems.append(f"{type(exc).__name__}: {exc}")
        _check_cuda(ort, seamless)
    for p in problems:
        print(f"PROBLEM: {p}")
    print("OK" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


def _check_cuda(ort, seamless) -> None:
    """The CUDA variant, where this installation has it: its GPUs and a smoke test, or why not
    (information, not a problem: the CPU EP works without it)."""
    try:
        seamless.get_library_path("cuda")
    except (FileNotFoundError, ValueError):
        print("CUDA variant: not in this installation (onnxruntime-ep-seamless-cu13 has it)")
        return
    try:
        gpus = seamless.get_devices("cuda")
        if not gpus:
            seamless.session_options(device="cuda")  # raises with the reason
        for d in gpus:
            print(f"CUDA device: {d.ep_metadata.get('cuda_device_name')} (GPU {d.ep_metadata.get('cuda_device_id')}, "
                  f"compute capability {d.ep_metadata.get('cuda_compute_capability')})")
        _smoke(ort, seamless, "cuda")
        print("CUDA smoke test: one Add node ran on SeamlessCUDAExecutionProvider with CPU fallback disabled")
    except Exception as exc:
        print(f"CUDA variant: not usable here: {exc}")


def _smoke(ort, seamless, device: str = "cpu"):
    so = seamless.session_options(device=device)
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    sess = ort.InferenceSession(SMOKE_MODEL, so)
    x = np.arange(4, dtype=np.float32)
    (y,) = sess.run(None, {"x": x, "y": x})
    if not np.array_equal(y, x + x):
        raise RuntimeError(f"smoke test gave {y}, expected {x + x}")
    seamless.assert_ep_selected(sess, device)


def cmd_bench(args) -> int:
    if args.what == "decode":
        return cmd_bench_decode(args)
    if args.what == "decode-gpu":
        return cmd_bench_gpu(args)
    if args.what == "genai":
        return cmd_bench_genai(args)
    if args.what == "gemm":
        from .bench import gemm_benchmark
        rows = gemm_benchmark(args.threads, args.rounds)
        for r in rows:
            print(f"  {r['m']:5d} x {r['k']:5d} x {r['n']:6d}: ours {r['ours_gflops']:6.1f} GFLOP/s, stock ORT "
                  f"{r['stock_gflops']:6.1f}, ratio (time) {r['ratio']:.2f}x")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"benchmark": "gemm", "threads": args.threads, "rows": rows}, f, indent=2)
        return 0
    if args.what == "layers-gpu":
        from .bench_layers import layers_benchmark
        rows = layers_benchmark(tuple(int(t) for t in args.tokens.split(",")), rounds=args.rounds,
                                profile=args.profile)
        for r in rows:
            print(f"  {r['case']}, {r['tokens']} token(s): {r['us_per_layer']:.1f} us a layer (captured, "
                  f"{r['layers']} layers a model)")
            for k in ((r.get("kernels") or {}).get("in_place") or {}).get("by_kernel", [])[:8]:
                print(f"      {k['us_per_layer']:8.2f} us a layer in place: {k['kernel']} {k['grid']}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"benchmark": "layers-gpu", "rows": rows}, f, indent=2)
        return 0
    if args.what == "profile":
        from .bench import print_profile, program_profile
        if not args.model_dir:
            print("usage: python -m onnxruntime_ep_seamless bench profile MODEL [--dim NAME=SIZE]", file=sys.stderr)
            return 2
        dims = dict((k, int(v)) for k, v in (d.split("=") for d in args.dim))
        print_profile(program_profile(args.model_dir, lambda sess: random_feeds(sess, dims, given=_given(args)),
                                      args.threads), args.json)
        return 0
    if args.what == "ops":
        return cmd_bench_ops(args)
    if args.what == "user-kernel":
        if not _has_onnx("bench user-kernel (it builds its one-node model)"):
            return 2
        from .bench import user_kernel_benchmark
        r = user_kernel_benchmark(args.runs, args.rounds, args.threads)
        print(f"one Tan node [16] float32 on our EP: our Python kernel {r['ours_us']:.2f} us a run, a user kernel "
              f"(np.tan) {r['user_us']:.2f} us, ratio {r['ratio']:.2f}x  (median of {r['rounds']} rounds x "
              f"{r['runs']} runs, {r['intra_op_threads']} intra-op thread(s); onnxruntime {r['onnxruntime']})")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"benchmark": "user-kernel", **r}, f, indent=2)
        return 0
    from .bench import compare_latency, print_result
    if args.what == "overhead":
        model, dims, title = SMOKE_MODEL, {"n": 16}, "per-run overhead, one Add node [16] float32"
    elif args.what == "demo":
        model, dims, title = DEMO_MODEL, {"batch": 2, "seq": 16}, "the README demo (an encoder layer, 29 nodes)"
    else:
        model, title = args.what, f"latency of {os.path.basename(args.what)}"
        dims = dict((k, int(v)) for k, v in (d.split("=") for d in args.dim))
        title += "".join(f", {k}={v}" for k, v in dims.items())
        if args.device == "cuda":
            return cmd_bench_model_gpu(args, model, dims, title)
    result = compare_latency(model, lambda sess: random_feeds(sess, dims, given=_given(args)), args.runs, args.rounds,
                             args.threads)
    print_result(title, result, args.json)
    return 0


def cmd_bench_model_gpu(args, model: str, dims: dict, title: str) -> int:
    from .bench_gpu import model_latency
    try:
        r = model_latency(model, lambda sess: random_feeds(sess, dims, given=_given(args)), args.runs, args.rounds,
                          args.peer_pythonpath)
    except RuntimeError as e:  # no GPU for our CUDA EP: say why, no traceback
        print(f"bench --device cuda: {e}", file=sys.stderr)
        return 2
    print(f"{title}: our CUDA EP {r['ours_ms']:.3f} ms a run, ORT's CUDA EP ({r['ort_cuda_onnxruntime']}) "
          f"{r['ort_cuda_ms']:.3f} ms, ratio {r['ratio']:.2f}x (median of {r['rounds']} rounds x {r['runs']} runs, "
          f"alternating; {r['claimed_nodes']} nodes ours; session {r['session_s']:.2f} s vs {r['ort_cuda_session_s']:.2f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=2)
    return 0


def _given(args) -> dict:
    """bench's --shape NAME=2x512 and --value NAME=16000: name -> (shape or None, value or None)."""
    given: dict = {}
    for text in args.shape:
        name, dims = text.split("=")
        given[name] = ([int(d) for d in dims.split("x")], given.get(name, (None, None))[1])
    for text in args.value:
        name, value = text.split("=")
        given[name] = (given.get(name, (None, None))[0], float(value))
    return given


def cmd_bench_ops(args) -> int:
    if not _has_onnx("bench ops (it builds its single-op models)"):
        return 2
    from .bench import ops_benchmark, print_ops_result
    print_ops_result(ops_benchmark(args.runs, args.rounds, args.threads), args.json)
    return 0


def cmd_bench_gpu(args) -> int:
    from .bench_gpu import compare, run_one, run_torch
    if not args.model_dir and args.ep != "torch":
        print("usage: python -m onnxruntime_ep_seamless bench decode-gpu MODEL_DIR [--ep both]", file=sys.stderr)
        return 2
    if args.token == "device" and args.ep != "torch" and \
            not _has_onnx("--token device (it adds an ArgMax to the model)"):
        return 2
    if args.ep == "both":
        if args.chart:  # before the runs, not after them
            from .plotting import pyplot
            pyplot("bench decode-gpu --chart")
        compare(args.model_dir, args.steps, args.prefill, args.decode_rounds, args.peer_pythonpath, args.json,
                args.torch_checkpoint, args.chart, args.processes, args.mode, args.token, args.new_prompt_lengths,
                args.profile, args.batch)
        return 0
    if args.ep == "torch":
        if args.batch != 1:
            print("--ep torch decodes one sequence: leave out --batch", file=sys.stderr)
            return 2
        if not args.torch_checkpoint:
            print("--ep torch needs --torch-checkpoint DIR (the checkpoint the model was built from)", file=sys.stderr)
            return 2
        result = run_torch(args.torch_checkpoint, args.steps, args.prefill, args.decode_rounds, args.torch_dtype,
                           args.torch_device)
    else:
        if args.mode and len(args.mode) > 1:
            print("one peer runs one loop: give --mode once (several with --ep both)", file=sys.stderr)
            return 2
        result = run_one(args.model_dir, args.ep, args.steps, args.prefill, args.decode_rounds,
                         args.mode[0] if args.mode else "growing",
                         args.capture, args.profile, args.token, args.new_prompt_lengths, args.batch)
    print(json.dumps(result) if args.json == "-" else result)
    if args.json and args.json != "-":
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m onnxruntime_ep_seamless", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="run the embedded model on our EP and on stock ORT CPU; compare")
    p.add_argument("--runs", type=int, default=200, help="timed runs per EP (0: skip timing)")
    p.set_defaults(fn=cmd_demo)
    p = sub.add_parser("run", help="run MODEL on our EP and on stock ORT CPU; compare outputs and latency")
    p.add_argument("model")
    p.add_argument("--inputs", help=".npz file with one array per input name (default: random)")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE", help="size of a symbolic dim")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="provider option")
    p.add_argument("--runs", type=int, default=20)
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser("bench", help="latency of our EP vs stock ORT CPU in this process, alternating")
    p.add_argument("what", help="'overhead' (one-node model), 'demo' (the README demo's model), 'ops' (single-op "
                                "models: NonMaxSuppression, TfIdfVectorizer, LSTM, TopK, MatMulNBits, activations, "
                                "Attention, GroupQueryAttention prompts), 'decode' (LLM "
                                "decoding, see below), 'genai' (the same driven by onnxruntime-genai's Generator), "
                                "'gemm' (float32 products of MiniLM's and decoders' shapes), 'user-kernel' (a user's "
                                "Python kernel against ours), 'layers-gpu' "
                                "(Qwen3.5-35B-A3B's and gpt-oss-20b's QMoE layers and Qwen3.5's LinearAttention on "
                                "the CUDA EP, captured), "
                                "'profile' MODEL (the time of each step of its native programs, per op) or a model path")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE", help="size of a symbolic dim")
    p.add_argument("--shape", action="append", default=[], metavar="INPUT=2x512", help="an input's shape")
    p.add_argument("--value", action="append", default=[], metavar="INPUT=NUMBER",
                   help="an input filled with this number (e.g. silero-vad's sr=16000)")
    p.add_argument("--runs", type=int, default=200, help="runs per round and EP (ops: at most, ~50 ms a round)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads for both EPs")
    p.add_argument("--json", help="write the result as JSON here")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="a model path: cpu (ours vs stock ORT's CPU EP, alternating) or cuda (our CUDA EP vs ORT's CUDA "
                        "EP, alternating rounds, ORT's in a worker process: see --peer-pythonpath)")
    p.set_defaults(fn=cmd_bench)
    p = sub.add_parser("check", help="versions, library path, devices, a smoke test; says what is wrong")
    p.set_defaults(fn=cmd_check)
    _add_conformance_commands(sub)
    _add_decode_options(sub)
    args = parser.parse_args(argv)
    return args.fn(args)


# --- conformance, coverage -------------------------------------------------------------------

def _add_conformance_commands(sub) -> None:
    from .conformance import DATA_VERSIONS, DEFAULT_DATA_VERSION
    p = sub.add_parser("conformance", help="every ONNX backend node test through our EP (fallback disabled), "
                                           "next to stock ORT: claimed / passed / failed / declined, per op")
    p.add_argument("--data", choices=DATA_VERSIONS, default=DEFAULT_DATA_VERSION,
                   help="the onnx release whose node-test data to run (downloaded once into the test cache)")
    p.add_argument("--select", metavar="REGEX", help="only the cases whose name matches")
    p.add_argument("--no-per-op", dest="per_op", action="store_false", help="totals and declined ops only")
    p.add_argument("--list", choices=("failed", "declined", "passed", "all"), help="also list these cases")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="our EP to run them on (stock ORT's CPU EP stays the yardstick)")
    p.set_defaults(fn=cmd_conformance)
    p = sub.add_parser("coverage", help="the op x element-type table of the kernel registry")
    p.add_argument("--markdown", action="store_true", help="as docs/op-coverage.md")
    p.set_defaults(fn=cmd_coverage)
    p = sub.add_parser("capture-report", help="CUDA EP: partitions, CUDA-graph segments and seams of MODEL "
                                              "(no GPU needed)")
    p.add_argument("model", help="an .onnx file")
    p.add_argument("--png", metavar="FILE", help="also draw a timeline of each partition: its nodes in order (on the "
                                                 "GPU, on the host, seams), its segments, each seam's node and reason "
                                                 "(needs matplotlib)")
    p.set_defaults(fn=cmd_capture_report)


def _has_onnx(what: str) -> bool:
    """Whether the onnx package (not a dependency of ours) is there; if not, says on stderr that `what` needs it."""
    try:
        import onnx  # noqa: F401
    except ImportError:
        print(f"{what} needs the onnx package: pip install onnx", file=sys.stderr)
        return False
    return True


def cmd_conformance(args) -> int:
    if not _has_onnx("the conformance suite (it reads the test models and data)"):
        return 2
    from . import conformance
    node_dir = conformance.onnx_data_dir(args.data) / "node"
    if not node_dir.is_dir():
        print(f"downloading the onnx {args.data} wheel (its node-test data) into {conformance.cache_dir()} ...",
              file=sys.stderr, flush=True)
    results = conformance.run_suite(args.data, select=args.select, progress=conformance.ProgressBar(sys.stderr),
                                    device=args.device)
    print(conformance.summary(results, per_op=args.per_op, title=f"ONNX node tests from onnx {args.data}, "
                                                                   f"our {args.device} EP with CPU fallback disabled"))
    if args.list:
        print()
        for r in results:
            if args.list == "all" or r.status == args.list:
                print(f"{r.status:8s} {r.name} ({r.op}){': ' + r.detail if r.detail else ''}")
    return 1 if any(r.status == "failed" for r in results) else 0


def cmd_capture_report(args) -> int:
    if not _has_onnx("capture-report (it reads the model file)"):
        return 2
    if not os.path.isfile(args.model):
        print(f"capture-report: no model file {args.model!r}", file=sys.stderr)
        return 2
    from .capture_report import analyse, render, write_png
    from ..graph.onnx_import import import_path
    if args.png:  # before the report, not after it
        from .plotting import pyplot
        pyplot("capture-report --png")
    parts, declined = analyse(import_path(args.model))
    print(render(parts, declined))
    if args.png:
        write_png(parts, args.png, os.path.basename(args.model))
        print(f"timeline: {args.png}")
    return 0


def cmd_coverage(args) -> int:
    from .coverage import render
    sys.stdout.write(render(markdown=args.markdown))
    return 0


# --- bench decode ----------------------------------------------------------------------------

def _add_decode_options(sub) -> None:
    p = sub.choices["bench"]
    p.add_argument("model_dir", nargs="?", metavar="MODEL_DIR",
                   help="with 'decode': an onnxruntime-genai model folder (model.onnx, genai_config.json)")
    p.add_argument("--steps", type=int, default=128, help="decode: greedy steps after the prefill")
    p.add_argument("--prefill", type=int, default=16, help="decode: prompt tokens")
    p.add_argument("--tokens", default="1,16",
                   help="layers-gpu: the token counts a layer runs, comma-separated (a prompt's from ~512 a QMoE "
                        "layer of 256 experts: its products grouped by expert)")
    p.add_argument("--decode-rounds", type=int, default=3, help="decode, genai: whole generations per EP")
    p.add_argument("--max-length", type=int, help="genai: the search's max_length (default: prompt + steps), the "
                   "rows of the KV buffers where past and present share them")
    p.add_argument("--share-buffer", choices=["on", "off"],
                   help="genai: the search option past_present_share_buffer (default: the model's genai_config)")
    p.add_argument("--cuda-graph", action="store_true",
                   help="genai --device cuda: both providers with enable_cuda_graph=1")
    p.add_argument("--ep", choices=["both", "seamless", "ort-cuda", "torch"], default="both",
                   help="decode-gpu: which peer (both: our EP in each capture mode, ORT's CUDA EP eager and with its "
                        "CUDA graph, and PyTorch given --torch-checkpoint, each in its own process, with speed-ups); "
                        "genai: both, or seamless for our EP alone (e.g. --device cuda with genai's CPU build)")
    p.add_argument("--capture", choices=["auto", "off"], default="auto",
                   help="decode-gpu --ep seamless --mode growing, growing-device or growing-c: our EP's capture option")
    p.add_argument("--profile", action="store_true",
                   help="decode-gpu, one peer: GPU time per step by kernel, by kernel and launch grid, and each "
                        "kernel's cost in place (how far it moves a decode step's end: dependent launches overlap "
                        "kernels) with the step's GPU span, and the busy time each kernel adds over the whole run "
                        "(`busy`: an eager prompt's too) (torch.profiler, CUPTI) in the JSON; layers-gpu: each "
                        "kernel's cost in place a layer")
    p.add_argument("--processes", type=int, default=1,
                   help="decode-gpu --ep both: run every configuration's process this many times, in turn; "
                        "ms/token is the median (the host's speed varies between processes)")
    p.add_argument("--new-prompt-lengths", action="store_true",
                   help="decode, and decode-gpu's growing, growing-device and graph loops: each round's prompt one token "
                        "shorter than the last (from --prefill), so the prompt's time is the time to the first token of "
                        "a prompt length the session has not seen; each round's is in the JSON")
    p.add_argument("--batch", type=int, default=1,
                   help="decode-gpu: sequences decoded at once (every loop but growing-c and PyTorch's), each with the "
                        "prompt length of --prefill; ms/token is then a step's time, tokens/s counts every sequence's")
    p.add_argument("--chart", metavar="PNG", help="decode-gpu --ep both: a bar chart of tokens/s (needs matplotlib)")
    p.add_argument("--torch-checkpoint", metavar="DIR",
                   help="decode-gpu: the Hugging Face checkpoint the model was built from; adds PyTorch eager as a peer")
    p.add_argument("--torch-dtype", default="float16", choices=["float16", "bfloat16", "float32"],
                   help="decode-gpu --ep torch: the weights' type")
    p.add_argument("--torch-device", default="cuda", help="decode-gpu --ep torch: the torch device")
    p.add_argument("--peer-pythonpath", help="decode-gpu, a model with --device cuda: a folder with onnxruntime-gpu, put "
                                             "first for ORT's CUDA EP")
    p.add_argument("--token", choices=["host", "device"], default="host",
                   help="decode-gpu: where the ONNX loops choose the next token: host (the logits copied to the host, "
                        "numpy's argmax) or device (an ArgMax node appended to the model, run by the EP under test; "
                        "one int64 copied a step, as PyTorch's loop and onnxruntime-genai do)")
    p.add_argument("--mode", choices=["growing", "growing-device", "growing-c", "graph"], action="append",
                   help="decode-gpu: growing KV through session.run (our EP: --capture; one peer's default), the same "
                        "through IO binding with every output on the GPU (the KV cache stays there), that loop driven "
                        "from C through ORT's C API (growing-c, --token device), or shared "
                        "max-length KV buffers with IO binding and the EP's CUDA graph capture (enable_cuda_graph=1); "
                        "with --ep both only the configurations of the loops given (repeat --mode; default: every loop)")
    p.epilog = ("bench decode MODEL_DIR [--steps N] [--threads N] [--json F]: greedy LLM decoding, ms/token of "
                "our EP and stock ORT's CPU EP in this process, alternating whole generations. "
                "bench genai MODEL_DIR [--steps N] [--prefill N] [--device cuda] [--max-length N] [--share-buffer on|off] "
                "[--cuda-graph] [--ep seamless] [--json F]: the same driven by "
                "onnxruntime-genai's Generator (our EP registered as its plugin library), with the time to the first "
                "token; --device cuda: our CUDA EP against genai's own cuda provider (onnxruntime-genai-cuda); "
                "--ep seamless: ours alone. "
                "bench decode-gpu MODEL_DIR [--ep both] [--peer-pythonpath DIR] [--json F] [--chart PNG]: the same on "
                "an NVIDIA GPU, our CUDA EP (capture=auto, eager, enable_cuda_graph=1, capture=auto with the KV cache on "
                "the GPU) against ORT's CUDA EP from onnxruntime-gpu (eager, enable_cuda_graph=1, eager with the KV cache "
                "on the GPU), each in its own process; --token device picks the tokens on the GPU. Each result has "
                "ms_per_token, run_ms_per_token (the session's run call alone), prompt_ms (the time to the first "
                "token, median of every round) with more than 3 rounds prompt_ms_steady (of rounds 4 on: after a new "
                "prompt binding's warm-ups and capture) and session_s (creating the session; not for the C loop), ours with enable_cuda_graph=1 also gpu_ms_per_token (a replayed step's GPU time); "
                "--processes N runs each configuration N times in turn and reports medians and the spread")


def cmd_bench_genai(args) -> int:
    from .bench import genai_benchmark, print_genai_result
    if not args.model_dir:
        print("usage: python -m onnxruntime_ep_seamless bench genai MODEL_DIR [--steps N] [--device cuda]",
              file=sys.stderr)
        return 2
    try:
        import onnxruntime_genai  # noqa: F401
    except ImportError:
        print("bench genai needs onnxruntime-genai: pip install onnxruntime-genai", file=sys.stderr)
        return 2
    if args.ep not in ("both", "seamless"):
        print(f"bench genai: --ep {args.ep} is for decode-gpu; genai runs both or seamless (ours alone)", file=sys.stderr)
        return 2
    share = {None: None, "on": True, "off": False}[args.share_buffer]
    print_genai_result(genai_benchmark(args.model_dir, args.steps, args.prefill, args.decode_rounds,
                                       device=args.device, max_length=args.max_length, share_buffer=share,
                                       cuda_graph=args.cuda_graph, ours_only=args.ep == "seamless"), args.json)
    return 0


def cmd_bench_decode(args) -> int:
    from .bench import decode_benchmark, print_decode_result
    if not args.model_dir:
        print("usage: python -m onnxruntime_ep_seamless bench decode MODEL_DIR [--steps N]", file=sys.stderr)
        return 2
    result = decode_benchmark(args.model_dir, args.steps, args.prefill, args.threads, args.decode_rounds,
                              new_lengths=args.new_prompt_lengths)
    print_decode_result(result, args.json)
    return 0
