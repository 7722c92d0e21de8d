"""If on the CUDA EP (kernels/cuda/control.py, exec/cuda_compute.py Branch): claimed whole with its branches, the
branch picked on the host where the condition is known there, and inside a captured graph, where the condition is
computed on the GPU, two conditional graph nodes (ep_plugin/cuda_capture.c), so the model stays one segment. The
first tests need no GPU (the placement, the capture report, the executor over the fake glue of
test_cuda_host_path); the rest run on the GPU against stock ORT's CPU EP."""
import re

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxruntime_ep_seamless as seamless
from onnxruntime_ep_seamless.exec import cuda_compute
from onnxruntime_ep_seamless.graph.onnx_import import import_model
from onnxruntime_ep_seamless.partition import partition
from onnxruntime_ep_seamless.runtime import cuda as runtime_cuda
from onnxruntime_ep_seamless.tools.capture_report import analyse, render
from test_cuda_host_path import FakeEp, FakeGlue, ffi
from test_cuda_ep import DEVICES, PROBLEM

F32 = TensorProto.FLOAT


def branch(name, op, value, extra=()):
    """A branch reading x from the outer graph: Relu(x op c), then `extra` nodes on its result."""
    const = numpy_helper.from_array(np.asarray(value, np.float32), f"{name}_c")
    nodes = [helper.make_node(op, ["x", f"{name}_c"], [f"{name}_m"]), helper.make_node("Relu", [f"{name}_m"],
                                                                                         [f"{name}_y"])]
    out = f"{name}_y"
    for k, (op2, attrs) in enumerate(extra):
        nodes.append(helper.make_node(op2, [out], [f"{name}_e{k}"], **attrs))
        out = f"{name}_e{k}"
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, F32, None)], initializer=[const])


def if_model(condition="gpu", then=None, else_=None, shape=(4, 8), opset=18):
    """x -> If -> Sigmoid -> y. condition "gpu": ReduceSum(x) > 0 (computed on the GPU); "host": x's first dim == 4
    (known from the shapes)."""
    if condition == "gpu":
        nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), helper.make_node("Greater", ["s", "zero"],
                                                                                         ["c"])]
    else:
        nodes = [helper.make_node("Shape", ["x"], ["xs"], start=0, end=1),
                 helper.make_node("Equal", ["xs", "four"], ["c1"]),
                 helper.make_node("Squeeze", ["c1"], ["c"])]
    nodes += [helper.make_node("If", ["c"], ["y0"], name="choose", then_branch=then or branch("then", "Mul", 2.0),
                               else_branch=else_ or branch("else", "Add", 1.5)),
              helper.make_node("Sigmoid", ["y0"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0, np.float32), "zero"), numpy_helper.from_array(np.array([4]), "four")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, ["n", shape[1]])],
                              [helper.make_tensor_value_info("y", F32, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


# --- without a GPU ------------------------------------------------------------------------------------

def test_an_if_on_a_gpu_condition_is_one_segment_with_conditional_nodes():
    parts, declined = analyse(import_model(if_model("gpu")))
    text = render(parts, declined)
    assert not declined and len(parts) == 1 and parts[0].segments == 1, text
    (step,) = [s for s in parts[0].steps if s.node.op_type == "If"]
    assert step.conditional and not step.seam and set(step.branches) == {"then_branch", "else_branch"}
    assert "If 'choose' (then_branch 2 node(s), else_branch 2 node(s)): its condition is computed on the GPU" in text


def test_an_if_on_a_host_condition_picks_its_branch_there():
    parts, _ = analyse(import_model(if_model("host")))
    (step,) = [s for s in parts[0].steps if s.node.op_type == "If"]
    assert not step.conditional and not step.seam and parts[0].segments == 1
    assert "its condition is known on the host" in render(parts, {})


def test_a_seam_inside_a_branch_is_the_ifs():
    """NonZero runs on the host (its output's shape depends on the data): inside a branch it makes the If a seam."""
    then = branch("then", "Mul", 2.0, extra=[("NonZero", {}), ("Cast", {"to": F32})])
    else_ = branch("else", "Add", 1.5, extra=[("NonZero", {}), ("Cast", {"to": F32})])
    parts, _ = analyse(import_model(if_model("gpu", then, else_)))
    (step,) = [s for s in parts[0].steps if s.node.op_type == "If"]
    assert "its then_branch's node" in step.seam and parts[0].segments == 2


def loop_model(scan=False, swap=False, limit=None, trips=3):
    """y = y0 + k x after k iterations: k = the trip count (None: the graph input m, on the GPU), or (with `limit`) the
    first k at which sum(y) >= limit (the condition computed on the GPU by the body). scan: the running y stacked as a
    scan output too; swap: two carried values exchanged every iteration (a, b) -> (b + x, a)."""
    body_nodes = [helper.make_node("Add", ["y_in", "x"], ["y_out"])]
    carried_in = [helper.make_tensor_value_info("y_in", F32, [2, 3])]
    carried_out = [helper.make_tensor_value_info("y_out", F32, [2, 3])]
    if limit is None:
        body_nodes.append(helper.make_node("Identity", ["c_in"], ["c_out"]))
    else:
        body_nodes += [helper.make_node("ReduceSum", ["y_out"], ["total"], keepdims=0),
                       helper.make_node("Less", ["total", "limit"], ["c_out"])]
    if swap:
        body_nodes += [helper.make_node("Add", ["b_in", "x"], ["a_next"]), helper.make_node("Identity", ["a_in"],
                                                                                            ["b_out"])]
        carried_in += [helper.make_tensor_value_info("a_in", F32, [2, 3]), helper.make_tensor_value_info("b_in", F32,
                                                                                                       [2, 3])]
        carried_out += [helper.make_tensor_value_info("a_next", F32, [2, 3]),
                        helper.make_tensor_value_info("b_out", F32, [2, 3])]
    scans = []
    if scan:
        body_nodes.append(helper.make_node("Identity", ["y_out"], ["y_scan"]))
        scans = [helper.make_tensor_value_info("y_scan", F32, [2, 3])]
    body = helper.make_graph(body_nodes, "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                                                  helper.make_tensor_value_info("c_in", TensorProto.BOOL, [])]
                             + carried_in, [helper.make_tensor_value_info("c_out", TensorProto.BOOL, [])]
                             + carried_out + scans)
    ins = ["m", "", "y0"] + (["a0", "b0"] if swap else [])
    outs = ["y"] + (["a", "b"] if swap else []) + (["ys"] if scan else [])
    nodes = [helper.make_node("Relu", ["x0"], ["x"]), helper.make_node("Loop", ins, outs, name="repeat", body=body)]
    graph_ins = [helper.make_tensor_value_info(n, F32, [2, 3]) for n in ["x0", "y0"] + (["a0", "b0"] if swap else [])]
    inits = [numpy_helper.from_array(np.array(limit or 0, np.float32), "limit")]
    if trips is None:
        graph_ins.append(helper.make_tensor_value_info("m", TensorProto.INT64, []))
    else:
        inits.append(numpy_helper.from_array(np.array(trips, np.int64), "m"))
    graph = helper.make_graph(nodes, "g", graph_ins, [helper.make_tensor_value_info(n, F32, None) for n in outs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def scan_model(opset=18, **attrs):
    """A running sum over xs' scan axis: s = s0 + sum of the slices, os its value after each slice (Relu'd)."""
    body = helper.make_graph([helper.make_node("Add", ["s_in", "v"], ["s_out"]),
                              helper.make_node("Relu", ["s_out"], ["o"])], "body",
                             [helper.make_tensor_value_info("s_in", F32, [2]), helper.make_tensor_value_info("v", F32, [2])],
                             [helper.make_tensor_value_info("s_out", F32, [2]), helper.make_tensor_value_info("o", F32, [2])])
    scan = helper.make_graph([helper.make_node("Scan", ["s0", "xs"], ["s", "os"], name="sum", body=body,
                                               num_scan_inputs=1, **attrs)], "g",
                             [helper.make_tensor_value_info("s0", F32, [2]),
                              helper.make_tensor_value_info("xs", F32, ["n", 2] if not attrs else [2, "n"])],
                             [helper.make_tensor_value_info("s", F32, [2]), helper.make_tensor_value_info("os", F32, None)])
    model = helper.make_model(scan, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


def test_branches_declared_with_different_shapes_make_the_if_a_seam():
    then = branch("then", "Mul", 2.0)
    then.output[0].CopyFrom(helper.make_tensor_value_info(then.output[0].name, F32, [4, 8]))
    else_ = branch("else", "Add", 1.5, extra=[("ReduceSum", {"keepdims": 1})])
    else_.output[0].CopyFrom(helper.make_tensor_value_info(else_.output[0].name, F32, [1, 1]))
    parts, _ = analyse(import_model(if_model("gpu", then, else_)))
    (step,) = [s for s in parts[0].steps if s.node.op_type == "If"]
    assert "its branches give output 0 different shapes ([4, 8] and [1, 1])" in step.seam and parts[0].segments == 2


def test_the_cuda_ep_claims_if_loop_and_scan_whole():
    for model in (if_model("gpu"), loop_model(), scan_model()):
        result = partition(import_model(model), "cuda")
        assert result.claimed == result.total and not result.declined
    parts, _ = analyse(import_model(scan_model()))
    assert parts[0].segments == 1 and "Scan 'sum' (body 2 node(s)): its iterations follow the shapes" in render(parts, {})


def test_a_loop_is_a_while_node_or_in_line_or_a_seam():
    """A WHILE node without scan outputs; with them, in line where its trip count is known on the host (its condition
    passes through the body), else a seam."""
    parts, _ = analyse(import_model(loop_model(limit=20.0)))
    (step,) = [s for s in parts[0].steps if s.node.op_type == "Loop"]
    assert step.conditional and not step.seam and parts[0].segments == 1
    assert "Loop 'repeat' (body 3 node(s)): a conditional WHILE node when captured" in render(parts, {})
    parts, _ = analyse(import_model(loop_model(scan=True)))
    (step,) = [s for s in parts[0].steps if s.node.op_type == "Loop"]
    assert not step.conditional and not step.seam and parts[0].segments == 1
    assert "trip count known on the host): in line when captured" in render(parts, {})
    parts, _ = analyse(import_model(loop_model(scan=True, limit=20.0, trips=50)))
    (step,) = [s for s in parts[0].steps if s.node.op_type == "Loop"]
    assert "scan outputs" in step.seam and parts[0].segments == 2


class ControlGlue(FakeGlue):
    """The fake glue, with a float32 input, a condition the host reads back as `cond`, and the conditional-node
    calls recorded."""

    def __init__(self):
        super().__init__()
        self.cond, self.calls = True, []

    def seamless_get_inputs(self, ctx, n, data, nbytes, types, ranks, dims, max_rank, changed, status):
        for i, (ptr, shape, dtype) in enumerate(self.feed):
            code = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
            data[i], types[i], ranks[i] = ffi.cast("void*", ptr), code, len(shape)
            for axis, size in enumerate(shape):
                dims[i * max_rank + axis] = size
        return 0

    def seamless_cuda_copy(self, dst, src, nbytes, stream):
        if nbytes == 1 and not self.device(dst):  # the condition read back
            ffi.cast("uint8_t*", dst)[0] = int(self.cond)
        return super().seamless_cuda_copy(dst, src, nbytes, stream)

    def seamless_conditional_handles(self, stream, handles, n):
        self.calls.append("handles")
        for k in range(n):
            handles[k] = 11 + k
        return ffi.NULL

    def seamless_conditional_nodes(self, stream, handles, n, loop, bodies):
        self.calls.append("while" if loop else "nodes")
        for k in range(n):
            bodies[k] = ffi.cast("void*", 21 + k)
        return ffi.NULL

    def seamless_body_begin(self, body, out):
        self.calls.append(("body", int(ffi.cast("uintptr_t", body))))
        out[0] = ffi.cast("void*", 30 + len(self.calls))
        return ffi.NULL

    def seamless_body_end(self, stream):
        self.calls.append("end")
        return ffi.NULL

    def seamless_cuda_launch(self, fn, gx, gy, block, shared, stream, packed, nbytes, offsets, count, dependent):
        self.calls.append((self.names[int(ffi.cast("uintptr_t", fn))], int(ffi.cast("uintptr_t", stream)),
                           dependent))
        return super().seamless_cuda_launch(fn, gx, gy, block, shared, stream, packed, nbytes, offsets, count,
                                            dependent)


def control_kernel(monkeypatch, model, options, logs=None):
    """The model as one fused node over ControlGlue: (kernel, glue); logs: a list the EP's log messages go to."""
    monkeypatch.setattr(runtime_cuda, "FATBIN", __file__)  # the module load is faked: any file will do
    monkeypatch.setattr(runtime_cuda.CudaRuntime, "_instances", {})
    ep = FakeEp(options)
    if logs is not None:
        ep.log = lambda level, message: logs.append(message)
    ep.native.lib = glue = ControlGlue()
    graph = import_model(model)
    return cuda_compute.CudaKernel(ep, graph, list(graph.inputs), list(graph.outputs)), glue


def test_the_executor_runs_the_branch_the_condition_picks_then_captures_both_as_conditional_bodies(monkeypatch):
    softmax = branch("else", "Add", 1.5, extra=[("Softmax", {"axis": -1})])  # a kernel of its own: else ran
    kernel, glue = control_kernel(monkeypatch, if_model("gpu", else_=softmax), {"capture": "auto"})
    launched = lambda: " ".join(c[0] for c in glue.calls if isinstance(c, tuple) and c[0] != "body")
    for run, cond in enumerate([True, False]):  # the two warm-up runs: eager, the condition read back
        glue.feed, glue.outputs, glue.calls, glue.cond = [(1 << 36, (4, 8), np.float32)], [None], [], cond
        kernel.compute(None)
        assert ("softmax" in launched()) != cond, launched()
        assert "handles" not in glue.calls
    glue.calls = []
    kernel.compute(None)  # the third: captured
    assert glue.replays == 1 and "segment" in glue.launches
    steps = [c if not isinstance(c, tuple) else c[0] for c in glue.calls]
    at = steps.index("handles")
    assert steps[at + 1:at + 3] == ["seamless_if_branches", "nodes"] and steps[at + 3] == "body"
    bodies = [c for c in glue.calls if isinstance(c, tuple) and c[0] == "body"]
    assert [b[1] for b in bodies] == [21, 22] and steps.count("end") == 2
    in_then, in_else = ([c for c in glue.calls if isinstance(c, tuple) and len(c) == 3
                         and c[1] == 30 + glue.calls.index(body) + 1] for body in bodies)  # ControlGlue's streams
    assert in_then and all(c[2] == 0 for c in in_then + in_else)  # a body's launches are plain ones
    assert not any("softmax" in c[0] for c in in_then) and any("softmax" in c[0] for c in in_else), glue.calls
    assert kernel.rt.host_reads == 2  # the warm-ups read the condition back; the capture does not


def test_branches_without_nodes_give_their_constants(monkeypatch):
    """ORT folds a branch's Constant nodes into initializers of the subgraph (the builder's LongRoPE If): a branch of no
    nodes whose outputs are its constants (found on the H200: the fused node failed with a KeyError)."""
    def constant_branch(name, value):
        const = numpy_helper.from_array(np.full((4, 8), value, np.float32), f"{name}_cache")
        return helper.make_graph([], name, [], [helper.make_tensor_value_info(f"{name}_cache", F32, [4, 8])],
                                 initializer=[const])
    model = if_model("host", then=constant_branch("large", 2.0), else_=constant_branch("small", 0.5))
    kernel, glue = control_kernel(monkeypatch, model, {"capture": "auto"})
    (branches,) = [fn.keywords for node, fn, _, _ in kernel.steps if node.op_type == "If"]
    for attr, name in (("then_branch", "large_cache"), ("else_branch", "small_cache")):
        assert branches[attr].constants[name].host[0, 0] == (2.0 if attr == "then_branch" else 0.5)
    glue.feed, glue.outputs = [(1 << 36, (4, 8), np.float32)], [None]
    kernel.compute(None)  # the host's condition (4 rows) picks then_branch: its constant, uploaded at Compile
    assert glue.outputs == [(4, 8)]


def refusing_else():
    """An else_branch that refuses a 4 x 8 input: x reshaped to 3 rows."""
    shape = numpy_helper.from_array(np.array([3, -1], np.int64), "rows3")
    return helper.make_graph([helper.make_node("Reshape", ["x", "rows3"], ["r"]), helper.make_node("Relu", ["r"], ["e"])],
                             "else", [], [helper.make_tensor_value_info("e", F32, None)], initializer=[shape])


def test_a_branch_that_refuses_the_shapes_fails_the_run_when_taken(monkeypatch):
    """silero-vad's If picks a 16 or 8 kHz network by the sample rate: with a 16 kHz chunk the 8 kHz branch refuses
    the shapes (stock fails such a run). The binding is still captured: the refusing branch's body is a kernel that
    reports the error, so a replay that takes it fails the run as an eager run does."""
    kernel, glue = control_kernel(monkeypatch, if_model("gpu", else_=refusing_else()), {"capture": "auto"})
    for run in range(3):
        glue.feed, glue.outputs, glue.calls, glue.cond = [(1 << 36, (4, 8), np.float32)], [None], [], True
        kernel.compute(None)
    steps = [c if not isinstance(c, tuple) else c[0] for c in glue.calls]  # the third run, captured
    bodies = [i for i, c in enumerate(steps) if c == "body"]
    assert len(bodies) == 2 and glue.replays == 1
    assert "seamless_branch_refused" in steps[bodies[1]:] and "seamless_branch_refused" not in steps[:bodies[1]]


def test_silero_vad_is_captured_with_its_8_khz_branch_refused(monkeypatch):
    """silero_vad.onnx (an If on the sample rate around the 16 and 8 kHz networks) on a 16 kHz chunk over the fake
    glue: two eager runs reading the condition back, then one capture with both branches, the 8 kHz one a body that
    reports its refusal."""
    import material
    import onnx
    path = material.silero_dir() / "silero_vad.onnx"
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    kernel, glue = control_kernel(monkeypatch, onnx.load(str(path)), {"capture": "auto"})
    shapes = {"input": ((1, 576), np.float32), "state": ((2, 1, 128), np.float32), "sr": ((), np.int64)}
    for run in range(3):
        glue.feed = [(1 << 36 | k << 16, *shapes[name]) for k, name in enumerate(kernel.input_names)]
        glue.outputs, glue.calls, glue.cond = [None] * len(kernel.output_names), [], True
        kernel.compute(None)
    steps = [c if not isinstance(c, tuple) else c[0] for c in glue.calls]
    bodies = [i for i, c in enumerate(steps) if c == "body"]
    assert len(bodies) == 2 and glue.replays == 1 and kernel.rt.host_reads == 2
    assert "seamless_branch_refused" in steps[bodies[1]:]
    assert glue.outputs[kernel.output_names.index("output")] == (1, 1)


def test_capture_off_runs_an_if_on_a_gpu_condition_eagerly(monkeypatch):
    """A launch program issues launches from C in order: it cannot branch on a GPU value, so such a partition keeps
    running through Python (the condition read back), never recorded."""
    logs = []
    kernel, glue = control_kernel(monkeypatch, if_model("gpu"), {"capture": "off", "log_capture": 1}, logs)
    assert not kernel.listed and not kernel.capture
    assert any("capture=off runs it through Python: a launch program cannot hold 'choose' (If" in m for m in logs), logs
    kernel, glue = control_kernel(monkeypatch, if_model("host"), {"capture": "off"})
    assert kernel.listed and kernel.capture


def test_the_executor_runs_a_loop_from_the_host_then_captures_it_as_a_while_node(monkeypatch):
    kernel, glue = control_kernel(monkeypatch, loop_model(trips=3), {"capture": "auto"})
    adds = lambda: sum(1 for c in glue.calls if isinstance(c, tuple) and c[0] == "seamless_binary_f32")
    for run in range(2):  # eager: the body launched once an iteration, its condition read back each time
        glue.feed, glue.outputs, glue.calls, glue.cond = [(1 << 36, (2, 3), np.float32), (1 << 36 | 4096, (2, 3),
                                                                                           np.float32)], [None], [], True
        kernel.compute(None)
        assert adds() == 3 and "handles" not in glue.calls
    reads = kernel.rt.host_reads
    glue.calls = []
    kernel.compute(None)  # captured: one WHILE node, its body launched once (at capture)
    steps = [c if not isinstance(c, tuple) else c[0] for c in glue.calls]
    at = steps.index("handles")
    assert steps[at + 1:at + 4] == ["seamless_loop_start", "while", "body"] and adds() == 1
    assert steps.index("seamless_loop_next") < steps.index("end") and kernel.rt.host_reads == reads
    assert glue.replays == 1


def test_the_executor_keeps_sequences_and_optionals_on_the_host(monkeypatch):
    """Sequences and optionals built inside a CUDA partition are held on the host between their CPU kernels (never
    uploaded) and the tensor they end in goes back to the GPU: over the fake glue the run completes and asks ORT for
    the concatenation's shape."""
    from test_capture_report import sequence_model
    kernel, glue = control_kernel(monkeypatch, sequence_model(), {"capture": "auto"})
    for run in range(3):
        glue.feed = [(1 << 36, (2, 3), np.float32), (1 << 36 | 4096, (2, 3), np.float32)]
        glue.outputs, glue.calls = [None], []
        kernel.compute(None)
        assert glue.outputs == [(6, 3)] and glue.replays == 0  # host seams: never captured


# --- on the GPU ----------------------------------------------------------------------------------------

gpu = pytest.mark.skipif(not DEVICES, reason=f"no NVIDIA GPU for the CUDA EP ({PROBLEM or 'none found'})")


def sessions(model, **options):
    so = seamless.session_options(device="cuda", **options)
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    ours = ort.InferenceSession(model.SerializeToString(), so)
    report = seamless.assert_ep_selected(ours, device="cuda")
    assert not report.fallback_nodes, report
    return ours, ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@gpu
@pytest.mark.parametrize("capture", ["auto", "off"])
def test_an_if_on_the_gpu_matches_stock_at_every_run(capture):
    """Signs alternate, so each branch runs eagerly, captured and replayed; capture=auto replays one segment with
    no Python per run once captured."""
    ours, stock = sessions(if_model("gpu"), capture=capture)
    rng = np.random.default_rng(0)
    before_calls, before_replays = None, cuda_compute.segment_replays()
    for run in range(12):
        x = rng.standard_normal((4, 8)).astype(np.float32) + (1.0 if run % 2 else -1.0)
        if run == 4:
            before_calls = cuda_compute.CudaKernel.compute_calls
        got, = ours.run(None, {"x": x})
        want, = stock.run(None, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"run {run}")
    if capture == "auto":
        assert cuda_compute.CudaKernel.compute_calls == before_calls  # every run after the capture: C replays
        assert cuda_compute.segment_replays() - before_replays >= 8


@gpu
def test_an_if_on_a_host_condition_is_captured_with_its_branch():
    ours, stock = sessions(if_model("host"), capture="auto")
    rng = np.random.default_rng(1)
    for run in range(8):
        x = rng.standard_normal((4 if run < 5 else 3, 8)).astype(np.float32)
        np.testing.assert_allclose(ours.run(None, {"x": x})[0], stock.run(None, {"x": x})[0], rtol=1e-6, atol=1e-6)


@gpu
def test_branches_of_different_shapes_run_eagerly_with_stock_results():
    """A conditional node's bodies must leave one shape; branches that do not are not captured (the binding runs
    eagerly from then on), with stock's outputs either way."""
    then = branch("then", "Mul", 2.0, extra=[("ReduceSum", {"keepdims": 1})])
    ours, stock = sessions(if_model("gpu", then=then), capture="auto")
    rng = np.random.default_rng(2)
    for run in range(6):
        x = rng.standard_normal((4, 8)).astype(np.float32) + (1.0 if run % 2 else -1.0)
        got, want = ours.run(None, {"x": x})[0], stock.run(None, {"x": x})[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@gpu
def test_session_graph_capture_holds_an_if_on_the_gpu():
    """ORT's own graph capture (enable_cuda_graph=1) captures the If as conditional nodes too: a replayed graph
    still takes the branch each input asks for."""
    if tuple(map(int, ort.__version__.split(".")[:2])) < (1, 26):
        pytest.skip("session graph capture needs onnxruntime >= 1.26")
    model = if_model("gpu")
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 4
    ours, stock = sessions(model, enable_cuda_graph=1)
    mem = DEVICES[0].memory_info(ort.OrtDeviceMemoryType.DEFAULT)
    x_gpu = ort.OrtValue.ortvalue_from_shape_and_type((4, 8), np.float32, memory_info=mem)
    y_gpu = ort.OrtValue.ortvalue_from_shape_and_type((4, 8), np.float32, memory_info=mem)
    binding = ours.io_binding()
    binding.bind_ortvalue_input("x", x_gpu)
    binding.bind_ortvalue_output("y", y_gpu)
    rng = np.random.default_rng(3)
    for run in range(8):
        x = rng.standard_normal((4, 8)).astype(np.float32) + (1.0 if run % 2 else -1.0)
        x_gpu.update_inplace(x)
        ours.run_with_iobinding(binding)
        np.testing.assert_allclose(y_gpu.numpy(), stock.run(None, {"x": x})[0], rtol=1e-6, atol=1e-6,
                                   err_msg=f"run {run}")


LOOPS = {"trips": dict(trips=4), "trips-on-gpu": dict(trips=None), "limit": dict(limit=30.0, trips=50),
         "swap": dict(swap=True), "scan": dict(scan=True), "scan-until": dict(scan=True, limit=30.0, trips=50)}


@gpu
@pytest.mark.parametrize("kind", list(LOOPS))
def test_a_loop_on_the_gpu_matches_stock_at_every_run(kind):
    """trips: a constant trip count; trips-on-gpu: a trip count fed to the session, read on the GPU; limit: the body's condition, computed on the GPU, ends the loop after a number of
    iterations each input decides; swap: carried values exchanged each iteration (the copies staged); scan: a scan
    output, in line (its trip count known); scan-until: a scan output and a condition from the body (eager). Captured
    (all but scan-until), a run replays with no Python."""
    ours, stock = sessions(loop_model(**LOOPS[kind]), capture="auto")
    rng = np.random.default_rng(4)
    before_calls = None
    for run in range(8):
        feeds = {n: (rng.random((2, 3), np.float32) * (0.5 + run)).astype(np.float32)
                 for n in ["x0", "y0"] + (["a0", "b0"] if kind == "swap" else [])}
        if kind == "trips-on-gpu":
            feeds["m"] = np.array(run % 4, np.int64)  # 0 to 3 iterations, one captured graph
        if run == 4:
            before_calls = cuda_compute.CudaKernel.compute_calls
        for got, want in zip(ours.run(None, feeds), stock.run(None, feeds)):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"{kind} run {run}")
    if kind != "scan-until":
        assert cuda_compute.CudaKernel.compute_calls == before_calls


def test_a_loop_of_a_fixed_trip_count_with_scan_outputs_is_captured_in_line(monkeypatch):
    kernel, glue = control_kernel(monkeypatch, loop_model(scan=True, trips=3), {"capture": "auto"})
    for run in range(3):
        glue.feed, glue.outputs, glue.calls = [(1 << 36, (2, 3), np.float32), (1 << 36 | 4096, (2, 3), np.float32)], \
            [None, None], []
        kernel.compute(None)
    launched = [c[0] for c in glue.calls if isinstance(c, tuple) and c[0] != "body"]
    assert "handles" not in glue.calls and launched.count("seamless_binary_f32") == 3  # 3 iterations, captured
    assert glue.replays == 1 and kernel.rt.host_reads == 0 and glue.outputs == [(2, 3), (3, 2, 3)]


def nested_model():
    """A Loop (3 iterations) whose body holds an If on its carried value: y += x where sum(y) > 0, else y -= x."""
    then = helper.make_graph([helper.make_node("Add", ["y_in", "x"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", F32, [2, 3])])
    else_ = helper.make_graph([helper.make_node("Sub", ["y_in", "x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", F32, [2, 3])])
    body = helper.make_graph([helper.make_node("ReduceSum", ["y_in"], ["total"], keepdims=0),
                              helper.make_node("Greater", ["total", "zero"], ["positive"]),
                              helper.make_node("If", ["positive"], ["y_out"], name="step", then_branch=then,
                                               else_branch=else_),
                              helper.make_node("Identity", ["c_in"], ["c_out"])], "body",
                             [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                              helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("y_in", F32, [2, 3])],
                             [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("y_out", F32, [2, 3])])
    graph = helper.make_graph([helper.make_node("Loop", ["m", "", "y0"], ["y"], name="repeat", body=body)], "g",
                              [helper.make_tensor_value_info("x", F32, [2, 3]), helper.make_tensor_value_info("y0", F32,
                                                                                                             [2, 3])],
                              [helper.make_tensor_value_info("y", F32, [2, 3])],
                              [numpy_helper.from_array(np.array(3, np.int64), "m"),
                               numpy_helper.from_array(np.array(0, np.float32), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def test_an_if_inside_a_loop_is_captured_as_nested_conditional_nodes(monkeypatch):
    kernel, glue = control_kernel(monkeypatch, nested_model(), {"capture": "auto"})
    for run in range(3):
        glue.feed, glue.outputs, glue.calls = [(1 << 36, (2, 3), np.float32), (1 << 36 | 4096, (2, 3), np.float32)], \
            [None], []
        kernel.compute(None)
    steps = [c if not isinstance(c, tuple) else c[0] for c in glue.calls]  # the third run, captured
    while_at, if_at = steps.index("while"), steps.index("nodes")
    assert steps[while_at - 1] == "seamless_loop_start" and steps[if_at - 1] == "seamless_if_branches"
    assert while_at < if_at < steps.index("seamless_loop_next")  # the If's nodes inside the Loop's body
    assert steps.count("body") == 3 and steps.count("end") == 3 and glue.replays == 1


def test_the_executor_runs_a_scan_slice_by_slice(monkeypatch):
    kernel, glue = control_kernel(monkeypatch, scan_model(), {"capture": "auto"})
    glue.feed, glue.outputs, glue.calls = [(1 << 36, (2,), np.float32), (1 << 36 | 4096, (5, 2), np.float32)], \
        [None, None], []
    kernel.compute(None)
    launched = [c[0] for c in glue.calls if isinstance(c, tuple) and c[0] != "body"]
    assert launched.count("seamless_binary_f32") == 5 and launched.count("seamless_unary_f32") == 5
    assert launched.count("seamless_copy_4") == 10  # each slice taken out, each output slice stacked
    assert glue.outputs == [(2,), (5, 2)] and kernel.rt.host_reads == 0


@gpu
@pytest.mark.parametrize("attrs", [{}, dict(scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[1],
                                            scan_output_directions=[1])])
def test_a_scan_on_the_gpu_matches_stock_and_replays(attrs):
    ours, stock = sessions(scan_model(**attrs), capture="auto")
    rng = np.random.default_rng(5)
    for run in range(6):
        n = 3 if run < 4 else 5 + run
        feeds = {"s0": rng.standard_normal(2).astype(np.float32),
                 "xs": rng.standard_normal((n, 2) if not attrs else (2, n)).astype(np.float32)}
        if run == 3:
            before = cuda_compute.CudaKernel.compute_calls
        for got, want in zip(ours.run(None, feeds), stock.run(None, feeds)):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"run {run}")
        if run == 3:
            assert cuda_compute.CudaKernel.compute_calls == before  # the 4th run of 3 slices: replayed


@gpu
def test_a_refusing_branch_fails_a_replay_that_takes_it_as_stock_fails():
    """Captured with the then_branch's input shapes (the else_branch refuses them): replays taking then_branch match
    stock; one taking else_branch fails with the reshape's error, as stock's run does, and the session goes on."""
    ours, stock = sessions(if_model("gpu", else_=refusing_else()), capture="auto")
    rng = np.random.default_rng(6)
    for run in range(6):
        x = np.abs(rng.standard_normal((4, 8))).astype(np.float32) + 0.1
        np.testing.assert_allclose(ours.run(None, {"x": x})[0], stock.run(None, {"x": x})[0], rtol=1e-6, atol=1e-6)
    with pytest.raises(Exception):
        stock.run(None, {"x": -x})
    with pytest.raises(Exception) as got:
        ours.run(None, {"x": -x})
    assert "refuses these shapes" in str(got.value)
    np.testing.assert_allclose(ours.run(None, {"x": x})[0], stock.run(None, {"x": x})[0], rtol=1e-6, atol=1e-6)


@gpu
@pytest.mark.parametrize("name", ["if_condition_of_two_elements", "if_condition_empty",
                                  "if_branches_of_different_shapes", "loop_trip_count_not_scalar",
                                  "loop_condition_not_scalar", "loop_negative_trip_count"])
def test_bad_control_inputs_end_as_stock(name):
    """tests/hostile's cases for If and Loop, each run past the capture: stock's error (its status and cause) or its
    outputs."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hostile"))
    import cases
    model, feeds = cases.CASES[name]()
    so = seamless.session_options(device="cuda")
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    try:
        stock = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    except Exception as e:  # refused at load (ONNX's shape inference): ours too
        with pytest.raises(type(e)):
            ort.InferenceSession(model, so)
        return
    ours = ort.InferenceSession(model, so)
    for _ in range(4):
        try:
            want = stock.run(None, feeds)
        except Exception as e:
            with pytest.raises(type(e)) as got:
                ours.run(None, feeds)
            # the cause, past stock's source position and function ("if.cc:295 Compute ")
            cause = re.sub(r"^\S+:\d+ \S+ ", "", str(e).split("Status Message: ")[-1])[:40]
            assert cause in str(got.value), (str(e), str(got.value))
            continue
        for g, w in zip(ours.run(None, feeds), want):
            np.testing.assert_array_equal(g, w)


@gpu
@pytest.mark.parametrize("threshold", [32, 64])
def test_phi3s_longrope_decodes_as_stock_across_its_threshold(threshold, capfd):
    """The builder's small Phi-3 on our CUDA EP (capture=auto): one partition with its LongRoPE If, stock's tokens and
    logits while the total length crosses the threshold (prompt 10 tokens, 70 steps). With 64 the decode steps run
    padded to capacities 64 and 128, captured and replayed: the host's answer for a capacity holds for every length it
    serves; with 32 the steps are not padded (exec/cuda_capture.py _length_threshold)."""
    from test_capture_report import phi3_with_threshold
    from test_cuda_ep import cuda_session
    from test_cuda_moe import greedy
    from parity import stock_session
    model = phi3_with_threshold(threshold)
    ours = cuda_session(model, capture="auto", log_capture="1")
    before = cuda_compute.segment_replays()
    tokens, logits = greedy(ours, steps=70, prompt=10)
    replays = cuda_compute.segment_replays() - before
    ref_tokens, ref_logits = greedy(stock_session(model), steps=70, prompt=10)
    assert tokens == ref_tokens
    for step, (o, r) in enumerate(zip(logits, ref_logits)):
        np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-4, err_msg=f"step {step}")
    assert "1 segment(s), 0 seam(s)" in capfd.readouterr().err
    assert (replays > 50) == (threshold == 64), replays


@gpu
@pytest.mark.parametrize("export", ["silero_vad.onnx", "silero_vad_16k_op15.onnx", "silero_vad_half.onnx",
                                    "silero_vad_op18_ifless.onnx", "silero_vad_16k_sequence.onnx",
                                    "silero_vad_openvino_16k.onnx"])
@pytest.mark.parametrize("rate", [16000, 8000])
def test_silero_vad_chunks_as_stock_on_the_gpu(export, rate):
    """silero-vad's exports (an If on the sample rate around both networks, Ifs inside them, an LSTM) on the CUDA
    EP, every node ours, chunk after chunk with the state fed back: stock CPU's answers, and from the fourth chunk on
    every run replays its captured binding from C (no Python)."""
    import material
    import onnx
    from models.test_silero import run_chunks
    path = material.silero_dir() / export
    if not path.exists():
        pytest.skip(f"{path} missing: run tests/material.py")
    ours, stock = sessions(onnx.load(str(path)), capture="auto")
    calls = {}
    # the recurrent state carries each chunk's rounding (GPU sums in another order) into the next: after 7 chunks
    # a state element of 0.05 was 1.5e-5 off (atol 5e-5)
    run_chunks(ours, stock, export, rate, 10, atol=5e-5,
               before=lambda k: calls.setdefault(k, cuda_compute.CudaKernel.compute_calls))
    assert cuda_compute.CudaKernel.compute_calls == calls[3]
