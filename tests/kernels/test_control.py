"""Control flow on the CPU EP: If claimed whole, its branches planned like the main graph (parity with stock ORT,
every node on our EP, CPU fallback disabled)."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from parity import assert_close, assert_parity, ep_session, stock_session

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, initializers=(), opset=17, check=True):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if check:  # (onnx's checker wants a shape on the main graph's outputs)
        onnx.checker.check_model(model)
    return model


def _branch(name, nodes, outputs, initializers=()):
    return helper.make_graph(nodes, name, [], outputs, initializer=list(initializers))


def _if_on_input():
    """y = cond ? x + z : x * 2, the branches reading x and z from the outer graph."""
    then = _branch("then", [helper.make_node("Add", ["x", "z"], ["t"])],
                   [helper.make_tensor_value_info("t", F, None)])
    els = _branch("else", [helper.make_node("Mul", ["x", "two"], ["e"])], [helper.make_tensor_value_info("e", F, None)],
                  [numpy_helper.from_array(np.array(2, np.float32), "two")])
    nodes = [helper.make_node("Relu", ["a"], ["x"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=els),
             helper.make_node("Neg", ["y"], ["out"])]
    return _model(nodes, [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                          helper.make_tensor_value_info("a", F, [3, 4]), helper.make_tensor_value_info("z", F, [3, 4])],
                  [helper.make_tensor_value_info("out", F, [3, 4])])


@pytest.mark.parametrize("cond", [True, False])
def test_if_on_a_graph_input(cond):
    rng = np.random.default_rng(0)
    feeds = {"c": np.array(cond), "a": rng.standard_normal((3, 4), np.float32),
             "z": rng.standard_normal((3, 4), np.float32)}
    assert_parity(_if_on_input(), feeds)


def test_if_alternating_condition_in_one_session():
    """The condition is a graph input: its value joins the binding's key, each branch recorded in a program."""
    from onnxruntime_ep_seamless.runtime.native import NATIVES
    rng = np.random.default_rng(1)
    model = _if_on_input()
    ours, ref = ep_session(model), stock_session(model)
    in_c = []
    for i in range(12):
        feeds = {"c": np.array(i % 3 == 0), "a": rng.standard_normal((3, 4), np.float32),
                 "z": rng.standard_normal((3, 4), np.float32)}
        before = NATIVES["cpu"].lib.seamless_native_runs()
        np.testing.assert_array_equal(ours.run(None, feeds)[0], ref.run(None, feeds)[0])
        in_c.append(NATIVES["cpu"].lib.seamless_native_runs() - before)
    assert all(in_c[6:]), in_c


def _if_on_length(limit=6):
    """LongRoPE's pattern: the factors a constant table picked by whether the sequence is longer than a limit,
    the branches only constants (of the same shape)."""
    small, large = np.arange(8, dtype=np.float32).reshape(2, 4), -np.arange(8, dtype=np.float32).reshape(2, 4)
    then = _branch("then", [helper.make_node("Constant", [], ["big"], value=numpy_helper.from_array(large))],
                   [helper.make_tensor_value_info("big", F, [2, 4])])
    els = _branch("else", [helper.make_node("Constant", [], ["little"], value=numpy_helper.from_array(small))],
                  [helper.make_tensor_value_info("little", F, [2, 4])])
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["length"], axis=0),
             helper.make_node("Greater", ["length", "limit"], ["longer"]),
             helper.make_node("If", ["longer"], ["table"], then_branch=then, else_branch=els),
             helper.make_node("MatMul", ["x", "table"], ["out"])]
    inits = [numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array(limit, np.int64), "limit")]
    return _model(nodes, [helper.make_tensor_value_info("x", F, ["b", "s", 2])],
                  [helper.make_tensor_value_info("out", F, ["b", "s", 4])], inits)


@pytest.mark.parametrize("length", [3, 9])
def test_if_on_a_shape_comparison(length):
    x = np.random.default_rng(2).standard_normal((1, length, 2), np.float32)
    assert_parity(_if_on_length(), {"x": x})


def test_if_on_a_shape_comparison_as_the_length_grows():
    """Lengths 1..12 in one session: the native programs' families must not carry a branch past the limit."""
    model = _if_on_length()
    ours, ref = ep_session(model), stock_session(model)
    rng = np.random.default_rng(3)
    for length in range(1, 13):
        feeds = {"x": rng.standard_normal((1, length, 2), np.float32)}
        for _ in range(2):  # (MatMul's float32 sums: FMA or not, one ulp apart on some CPUs)
            assert_close(ours.run(None, feeds)[0], ref.run(None, feeds)[0], 1e-6, 1e-6, f"s={length}")
    from onnxruntime_ep_seamless.exec.compute import live_kernels
    limits = [(f.t_min, f.t_max) for k in live_kernels() if "If" in k.name for _, f in k.families]
    assert any(high == 6 for _, high in limits), limits  # a family up to the limit, and one beyond it
    assert any(low > 6 for low, _ in limits), limits


def test_nested_if_and_branches_of_different_shapes():
    inner_then = _branch("it", [helper.make_node("ReduceSum", ["x"], ["r"], keepdims=0)],
                         [helper.make_tensor_value_info("r", F, None)])
    inner_else = _branch("ie", [helper.make_node("Identity", ["x"], ["i"])], [helper.make_tensor_value_info("i", F, None)])
    then = _branch("then", [helper.make_node("If", ["c2"], ["n"], then_branch=inner_then, else_branch=inner_else)],
                   [helper.make_tensor_value_info("n", F, None)])
    els = _branch("else", [helper.make_node("Abs", ["x"], ["a"])], [helper.make_tensor_value_info("a", F, None)])
    model = _model([helper.make_node("If", ["c1"], ["y"], then_branch=then, else_branch=els)],
                   [helper.make_tensor_value_info("c1", TensorProto.BOOL, [1]),
                    helper.make_tensor_value_info("c2", TensorProto.BOOL, []),
                    helper.make_tensor_value_info("x", F, [2, 3])],
                   [helper.make_tensor_value_info("y", F, None)], check=False)
    x = np.random.default_rng(4).standard_normal((2, 3), np.float32)
    for c1, c2 in [(True, True), (True, False), (False, True)]:
        assert_parity(model, {"c1": np.array([c1]), "c2": np.array(c2), "x": x})


@pytest.mark.parametrize("cond", [True, False])
def test_if_over_strings(cond):
    then = _branch("then", [helper.make_node("StringNormalizer", ["s"], ["t"], stopwords=["a"], is_case_sensitive=1)],
                   [helper.make_tensor_value_info("t", TensorProto.STRING, None)])
    els = _branch("else", [helper.make_node("Identity", ["s"], ["e"])], [helper.make_tensor_value_info("e", TensorProto.STRING, None)])
    model = _model([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=els)],
                   [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                    helper.make_tensor_value_info("s", TensorProto.STRING, [2])],
                   [helper.make_tensor_value_info("y", TensorProto.STRING, None)], check=False)
    assert_parity(model, {"c": np.array(cond), "s": np.array(["a", "b"], dtype=object)})


def test_if_on_the_cuda_ep_gets_its_cuda_kernel_never_the_cpu_one():
    """The CUDA EP's host rule (integer and boolean inputs run the CPU kernel) once claimed an If on a boolean
    input, whose CPU kernel then met a graph where it runs plans (found by the conformance suite on the H200): an If
    gets the CUDA EP's own kernel (kernels/cuda/control.py: its branches compiled by the CUDA executor)."""
    from onnxruntime_ep_seamless.graph.onnx_import import import_model
    from onnxruntime_ep_seamless.kernels.registry import lookup
    graph = import_model(_if_on_input())
    node = next(n for n in graph.nodes if n.op_type == "If")
    kdef, reason = lookup(node, graph, "cuda")
    assert kdef is not None and kdef.device == "cuda", reason
    assert lookup(node, graph, "cpu")[0].device == "cpu"


def test_if_condition_with_more_than_one_element_fails_as_stock():
    model = _if_on_input()
    model.graph.input[0].type.tensor_type.shape.dim.add().dim_value = 2
    feeds = {"c": np.array([True, False]), "a": np.ones((3, 4), np.float32), "z": np.ones((3, 4), np.float32)}
    with pytest.raises(Exception) as stock:
        stock_session(model).run(None, feeds)
    with pytest.raises(Exception) as ours:
        ep_session(model).run(None, feeds)
    assert type(ours.value) is type(stock.value)
    assert "exactly one element" in str(ours.value)


def _loop_model(with_m=True, with_cond=True, scan_rank=1):
    """y, ys = Loop(M, cond, y0): each iteration y = y + x * i, cond = sum(y) < limit; ys stacks y * 2."""
    v = lambda n, t=F, s=None: helper.make_tensor_value_info(n, t, s)
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=F),
         helper.make_node("Mul", ["x", "fi"], ["xi"]),
         helper.make_node("Add", ["y_in", "xi"], ["y_out"]),
         helper.make_node("ReduceSum", ["y_out"], ["total"], keepdims=0),
         helper.make_node("Less", ["total", "limit"], ["c_out"]),
         helper.make_node("Mul", ["y_out", "two"], ["scan"])],
        "body", [v("i", TensorProto.INT64, []), v("c_in", TensorProto.BOOL, []), v("y_in", F, [2])],
        [v("c_out", TensorProto.BOOL, []), v("y_out", F, [2]), v("scan", F, [2])],
        initializer=[numpy_helper.from_array(np.array(2, np.float32), "two")])
    node = helper.make_node("Loop", ["m" if with_m else "", "c" if with_cond else "", "y0"], ["y", "ys"], body=body)
    inputs = ([v("m", TensorProto.INT64, [])] if with_m else []) + ([v("c", TensorProto.BOOL, [])] if with_cond else [])
    return _model([node], inputs + [v("y0", F, [2]), v("x", F, [2]), v("limit", F, [])],
                  [v("y", F, [2]), v("ys", F, ["n", 2])], check=False)


@pytest.mark.parametrize("m, cond, limit", [(5, True, 1e9), (0, True, 1e9), (5, False, 1e9), (20, True, 30.0),
                                            (None, True, 30.0), (7, None, 1e9)])
def test_loop(m, cond, limit):
    model = _loop_model(m is not None, cond is not None)
    feeds = {"y0": np.array([1, 2], np.float32), "x": np.array([0.5, 1.5], np.float32),
             "limit": np.array(limit, np.float32)}
    if m is not None:
        feeds["m"] = np.array(m, np.int64)
    if cond is not None:
        feeds["c"] = np.array(cond)
    assert_parity(model, feeds)


def _scan_model(directions=(0, 1), out_axis=0):
    """A running sum over the rows of two inputs (one read backwards), the partial sums stacked."""
    v = lambda n, s=None: helper.make_tensor_value_info(n, F, s)
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "a"], ["t"]), helper.make_node("Add", ["t", "b"], ["s_out"]),
         helper.make_node("Mul", ["s_out", "w"], ["o"])],
        "body", [v("s_in", [3]), v("a", [3]), v("b", [3])], [v("s_out", [3]), v("o", [3])])
    node = helper.make_node("Scan", ["s0", "xa", "xb"], ["s", "os"], body=body, num_scan_inputs=2,
                            scan_input_directions=list(directions), scan_output_axes=[out_axis])
    return _model([node], [v("s0", [3]), v("xa", ["n", 3]), v("xb", ["n", 3]), v("w", [3])],
                  [v("s", [3]), v("os", None)], opset=17, check=False)


@pytest.mark.parametrize("directions, out_axis, n", [((0, 0), 0, 4), ((0, 1), 1, 5), ((1, 1), -1, 1)])
def test_scan(directions, out_axis, n):
    rng = np.random.default_rng(6)
    feeds = {"s0": rng.standard_normal(3, np.float32), "xa": rng.standard_normal((n, 3), np.float32),
             "xb": rng.standard_normal((n, 3), np.float32), "w": rng.standard_normal(3, np.float32)}
    assert_parity(_scan_model(directions, out_axis), feeds)


@pytest.mark.parametrize("lens", [None, [3, 1, 2]])
def test_scan_opset8_with_sequence_lengths(lens):
    v = lambda n, s=None, t=F: helper.make_tensor_value_info(n, t, s)
    body = helper.make_graph([helper.make_node("Add", ["s_in", "a"], ["s_out"]),
                              helper.make_node("Neg", ["s_out"], ["o"])],
                             "body", [v("s_in", [2]), v("a", [2])], [v("s_out", [2]), v("o", [2])])
    node = helper.make_node("Scan", ["lens" if lens else "", "s0", "xa"], ["s", "os"], body=body, num_scan_inputs=1,
                            directions=[1])
    model = _model([node], ([v("lens", [3], TensorProto.INT64)] if lens else []) + [v("s0", [3, 2]), v("xa", [3, 3, 2])],
                   [v("s", [3, 2]), v("os", [3, 3, 2])], opset=8, check=False)
    rng = np.random.default_rng(7)
    feeds = {"s0": rng.standard_normal((3, 2), np.float32), "xa": rng.standard_normal((3, 3, 2), np.float32)}
    if lens:
        feeds["lens"] = np.array(lens, np.int64)
    assert_parity(model, feeds)
