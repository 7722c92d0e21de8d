"""Parity helpers: run a model on stock ORT's CPU EP and on our EP (CPU fallback disabled).

assert_parity() fails unless every node ran on our EP and every output matches.
With SEAMLESS_PARITY_DIRECT=1 it runs our kernels through the planner without ORT
(a development aid only; CI never sets it).
"""
import os

import numpy as np
import onnx
import onnxruntime as ort

DIRECT = os.environ.get("SEAMLESS_PARITY_DIRECT") == "1"

# Stock ORT multiplies uint8 by int8 on x86 CPUs without AVX-VNNI (AVX2) with vpmaddubsw, which saturates the
# sum of each pair of products at int16 (ORT's quantization docs: "saturation"), so its MatMulInteger and
# QLinearConv are then not exact. Parity data keeps such an int8 operand within these bounds, where no pair
# reaches 2 * 255 * 64 = 32640 < 32767; exactness over the full range is checked against numpy instead.
S8_UNSATURATED = (-64, 63)


def _model_arg(model):
    return model.SerializeToString() if isinstance(model, onnx.ModelProto) else model


def stock_session(model):
    data = _model_arg(model)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def ep_session(model, **options):
    import onnxruntime_ep_seamless as seamless
    data = _model_arg(model)
    so = seamless.session_options(**options)
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.intra_op_num_threads = 1
    return ort.InferenceSession(data, so)


# runs of our session per parity check: the first through the Python plan, the second records the binding's
# native program (exec/program.py RECORD_AFTER), the third runs that program where every node has a native step
OUR_RUNS = 3


def run_ours(model, feeds, runs: int = 1):
    """Outputs of our EP for a model (ModelProto or path), asserting every node ran on it; runs > 1: a list
    of each run's outputs."""
    if DIRECT:
        from direct import run_direct
        return run_direct(model, feeds) if runs == 1 else [run_direct(model, feeds)]
    import onnxruntime_ep_seamless as seamless
    sess = ep_session(model)
    report = seamless.assert_ep_selected(sess)
    assert not report.fallback_nodes, f"nodes ran on ORT's CPU EP: {report.fallback_nodes}"
    if runs == 1:
        return sess.run(None, feeds)
    return [sess.run(None, feeds) for _ in range(runs)]


def assert_native_without_python_steps(model, feeds, capfd):
    """From its OUR_RUNS-th run the binding is answered in C with no node run by its Python kernel (log_partition=1
    names any op that would be such a Python step)."""
    from onnxruntime_ep_seamless.runtime.native import NATIVES
    sess = ep_session(model, log_partition="1")
    for _ in range(OUR_RUNS - 1):  # the Python plan's run, then the recording
        sess.run(None, feeds)
    before = NATIVES["cpu"].lib.seamless_native_runs()
    sess.run(None, feeds)
    assert NATIVES["cpu"].lib.seamless_native_runs() > before, "the third run was not answered in C"
    err = capfd.readouterr().err
    assert "Python step" not in err and "runs through Python" not in err, err


def assert_close(ours, ref, rtol, atol, name="output"):
    ours, ref = np.asarray(ours), np.asarray(ref)
    assert ours.dtype == ref.dtype, f"{name}: dtype {ours.dtype} != stock {ref.dtype}"
    assert ours.shape == ref.shape, f"{name}: shape {ours.shape} != stock {ref.shape}"
    if ref.dtype.kind in "biuO" or ref.dtype == np.bool_:  # O: strings
        np.testing.assert_array_equal(ours, ref, err_msg=name)
    else:
        np.testing.assert_allclose(ours.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol,
                                   equal_nan=True, err_msg=name)


def assert_parity(model: onnx.ModelProto, feeds: dict, rtol=1e-5, atol=1e-6):
    """Our EP (all nodes claimed) gives stock ORT's outputs within tolerance, in every run (the Python plan's
    and the native program's, OUR_RUNS)."""
    ref = stock_session(model).run(None, feeds)
    for run, ours in enumerate(run_ours(model, feeds, OUR_RUNS)):
        assert len(ours) == len(ref)
        for i, (o, r) in enumerate(zip(ours, ref)):
            assert_close(o, r, rtol, atol, f"run {run + 1}, output {i}")
    return ours


def single_node_model(op_type, inputs, outputs, attrs=None, opset=17, domain="", initializers=()):
    """inputs/outputs: list of (name, numpy dtype, shape); a one-node model. An empty name is an
    absent optional input or output: it stays an empty slot on the node, not a graph value."""
    from onnx import helper
    tp = lambda dt: helper.np_dtype_to_tensor_dtype(np.dtype(dt))
    node = helper.make_node(op_type, [i[0] for i in inputs], [o[0] for o in outputs], domain=domain, **(attrs or {}))
    inits = {t.name for t in initializers}
    graph = helper.make_graph(
        [node], op_type.lower(),
        [helper.make_tensor_value_info(n, tp(d), s) for n, d, s in inputs if n and n not in inits],
        [helper.make_tensor_value_info(n, tp(d), s) for n, d, s in outputs if n],
        initializer=list(initializers))
    imports = [helper.make_opsetid("", opset)]
    if domain:
        imports.append(helper.make_opsetid(domain, 1))
    return helper.make_model(graph, opset_imports=imports, ir_version=9)


class Const:
    """An input given to the model as an initializer (a constant) instead of a feed."""

    def __init__(self, array):
        self.array = np.asarray(array)


def named_node_model(op, inputs, outputs, attrs=None, opset=17, domain="", const=(), symbolic=False):
    """A one-node model and its feeds. inputs: (name, array or None) pairs, None an absent optional
    input; names in `const` become initializers. outputs: dtypes of out0, out1, ...; None leaves that
    optional output absent. symbolic: input dims as symbols, so ORT cannot fold e.g. Shape into a
    constant. Fed arrays are read-only: kernels must never write into their inputs."""
    from onnx import numpy_helper
    specs, feeds, inits = [], {}, []
    for name, a in inputs:
        if a is None:
            specs.append(("", np.float32, None))
            continue
        a = np.array(a)
        a.flags.writeable = False
        specs.append((name, a.dtype, [f"{name}_{d}" for d in range(a.ndim)] if symbolic else a.shape))
        if name in const:
            inits.append(numpy_helper.from_array(a, name))
        else:
            feeds[name] = a
    outs = [(f"out{j}" if dt is not None else "", dt or np.float32, None) for j, dt in enumerate(outputs)]
    model = single_node_model(op, specs, outs, attrs, opset=opset, domain=domain, initializers=inits)
    return model, feeds


def node_model(op, inputs, attrs=None, opset=17, outputs=None, const=(), symbolic=False, domain=""):
    """named_node_model with inputs in0, in1, ... given as arrays, Const (initializer) or None;
    positions in `const` become initializers too. outputs default to the first input's dtype."""
    named = [(f"in{i}", a.array if isinstance(a, Const) else a) for i, a in enumerate(inputs)]
    consts = {f"in{i}" for i, a in enumerate(inputs) if isinstance(a, Const) or i in const}
    if outputs is None:
        outputs = [np.asarray(next(a for _, a in named if a is not None)).dtype]
    return named_node_model(op, named, outputs, attrs, opset=opset, domain=domain, const=consts,
                            symbolic=symbolic)


def check_node(op, inputs, attrs=None, opset=17, outputs=None, const=(), rtol=1e-5, atol=1e-6, symbolic=False,
               domain=""):
    """One-node parity: node_model() run on stock ORT and on our EP (every node on our EP)."""
    model, feeds = node_model(op, inputs, attrs, opset, outputs, const, symbolic, domain)
    return assert_parity(model, feeds, rtol=rtol, atol=atol)


def greedy_with_states(sess, steps=24, prompt=16, head_size=64, window=0, forced=None):
    """Greedy tokens and each step's last logits of a builder decoder with states (LFM2's convolution states,
    Qwen3.5's conv and recurrent states, fed back like the KV caches; Qwen3.5's 3-D position_ids; window: the
    capacity of the window-sized KV caches of local layers, as onnxruntime-genai allocates them); forced: the tokens
    to feed instead of its own (teacher forcing)."""
    past = {}
    names = {i.name for i in sess.get_inputs()}
    for i in sess.get_inputs():
        dtype = np.float16 if i.type == "tensor(float16)" else np.float32
        if i.name.startswith("past_key_values"):
            rows = window if i.shape[2] == "past_sliding_length" else 0
            past[i.name] = np.zeros((1, i.shape[1], rows, head_size), dtype)
        elif i.name.startswith("past."):
            past[i.name] = np.zeros((1, *i.shape[1:]), dtype)
    ids = np.random.default_rng(0).integers(0, 1000, (1, prompt)).astype(np.int64)
    tokens, logits, total = [], [], prompt
    for _ in range(steps):
        feeds = {"input_ids": ids, "attention_mask": np.ones((1, total), np.int64), **past}
        if "position_ids" in names:  # the T, H and W streams of text tokens: one position each
            feeds["position_ids"] = np.ascontiguousarray(np.broadcast_to(np.arange(total - ids.shape[1], total),
                                                                         (3, 1, ids.shape[1])))
        out = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        logits.append(out["logits"][0, -1])
        tokens.append(int(np.argmax(logits[-1])) if forced is None else forced[len(tokens)])
        for name, value in out.items():
            if name.startswith("present."):
                kv = name.endswith(("key", "value"))
                past[name.replace("present.", "past_key_values." if kv else "past.")] = value
        ids, total = np.array([[tokens[-1]]], np.int64), total + 1
    return tokens, logits
