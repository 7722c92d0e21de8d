"""The CPU EP's native programs (exec/program.py, native/cpu/program.c, ep_plugin/cpu_runner.c): a binding of
input shapes seen twice is recorded, and its later runs are answered in C with the same results as stock ORT,
stock's errors for bad data, and nothing the caller passed modified."""
import re
import threading
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxruntime_ep_seamless as seamless
from onnxruntime_ep_seamless.exec import program
from onnxruntime_ep_seamless.runtime.native import NATIVES
from parity import assert_close, ep_session, stock_session

ROOT = Path(__file__).resolve().parents[2]


def native_runs() -> int:
    return NATIVES["cpu"].lib.seamless_native_runs()


def runs_in_c(sess, feeds) -> tuple[list, int]:
    """One run's outputs and how many Computes C answered during it."""
    before = native_runs()
    out = sess.run(None, feeds)
    return out, native_runs() - before


def demo_feeds(rng, batch=2, seq=16):
    return {"input_ids": rng.integers(0, 100, (batch, seq)).astype(np.int64)}


def test_a_binding_is_answered_in_c_from_its_third_run():
    ours, stock = ep_session(seamless.DEMO_MODEL), stock_session(seamless.DEMO_MODEL)
    rng = np.random.default_rng(0)
    answered = []
    for _ in range(5):
        feeds = demo_feeds(rng)
        out, n = runs_in_c(ours, feeds)
        answered.append(n)
        assert_close(out[0], stock.run(None, feeds)[0], 1e-5, 1e-5)
    assert answered == [0, 0, 1, 1, 1]
    # another binding of the same ranks and types: recorded the first time (a family may come of it)
    feeds = demo_feeds(rng, seq=7)
    assert [runs_in_c(ours, feeds)[1] for _ in range(3)] == [0, 1, 1]


def test_bad_data_gets_stocks_error_in_c_and_the_program_still_runs():
    ours, stock = ep_session(seamless.DEMO_MODEL), stock_session(seamless.DEMO_MODEL)
    feeds = demo_feeds(np.random.default_rng(1))
    for _ in range(3):
        ours.run(None, feeds)
    bad = feeds["input_ids"].copy()
    bad[1, 3] = 1000
    bad.flags.writeable = False
    before = native_runs()
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument) as ours_error:
        ours.run(None, {"input_ids": bad})
    assert native_runs() == before + 1  # C found it
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument) as stock_error:
        stock.run(None, {"input_ids": bad})
    message = "indices element out of data bounds, idx=1000 must be within the inclusive range [-100,99]"
    assert message in str(ours_error.value) and message in str(stock_error.value)
    assert "(Gather)" in str(ours_error.value)  # the node is named
    assert bad[1, 3] == 1000
    out, n = runs_in_c(ours, feeds)
    assert n == 1
    assert_close(out[0], stock.run(None, feeds)[0], 1e-5, 1e-5)


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9 if opset <= 21 else 11)


def test_outputs_that_are_inputs_shapes_or_one_value_twice():
    # y0: x itself, y1: x's shape (static for the binding), y2 and y3: one value computed once
    model = _model([helper.make_node("Identity", ["x"], ["y0"]), helper.make_node("Shape", ["x"], ["y1"]),
                    helper.make_node("Add", ["x", "x"], ["s"]), helper.make_node("Identity", ["s"], ["y2"]),
                    helper.make_node("Reshape", ["s", "flat"], ["y3"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
                   [helper.make_tensor_value_info("y0", TensorProto.FLOAT, None),
                    helper.make_tensor_value_info("y1", TensorProto.INT64, None),
                    helper.make_tensor_value_info("y2", TensorProto.FLOAT, None),
                    helper.make_tensor_value_info("y3", TensorProto.FLOAT, None)],
                   [helper.make_tensor("flat", TensorProto.INT64, [1], [-1])])
    ours, stock = ep_session(model), stock_session(model)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    for run in range(4):
        out, n = runs_in_c(ours, {"x": x + run})
        assert n == (run >= 2)
        for o, r in zip(out, stock.run(None, {"x": x + run})):
            assert_close(o, r, 0, 0)


def test_a_shape_from_the_runs_data_stays_in_python():
    model = _model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6]),
                    helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    ours = ep_session(model)
    x = np.arange(6, dtype=np.float32)
    for shape in ([2, 3], [2, 3], [3, 2], [3, 2], [6, 1]):
        out, n = runs_in_c(ours, {"x": x, "shape": np.array(shape, np.int64)})
        assert n == 0 and out[0].shape == tuple(shape)


def test_more_bindings_than_the_runner_holds():
    # unfused (fusion=0: the encoder_attention fusion keeps the scores inside one step), the attention's scores grow
    # with seq squared: no family; each binding is recorded (at once while the class may still yield a family, then
    # at its second run) and the oldest make room
    ours, stock = ep_session(seamless.DEMO_MODEL, fusion="0"), stock_session(seamless.DEMO_MODEL)
    rng = np.random.default_rng(2)
    for seq in range(1, program.MAX_BINDINGS + 5):
        feeds = demo_feeds(rng, batch=1, seq=seq)
        answered = [runs_in_c(ours, feeds) for _ in range(3)]
        assert answered[0][1] == 0 and answered[2][1] == 1
        for out, _ in answered:
            assert_close(out[0], stock.run(None, feeds)[0], 1e-5, 1e-5)


def family_runs() -> int:
    return NATIVES["cpu"].lib.seamless_family_runs()


def test_a_growing_input_is_answered_by_a_family():
    # a cache that grows by one row a run, as a decoder's KV: every argument affine in its length
    model = _model([helper.make_node("Concat", ["past", "x"], ["present"], axis=1),
                    helper.make_node("Mul", ["present", "two"], ["m"]),
                    helper.make_node("ReduceSum", ["m", "axes"], ["s"], keepdims=0),
                    helper.make_node("Transpose", ["m"], ["t"], perm=[0, 2, 1])],
                   [helper.make_tensor_value_info("past", TensorProto.FLOAT, [1, "n", 4]),
                    helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4])],
                   [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("present", "s", "t")],
                   [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
                    helper.make_tensor("axes", TensorProto.INT64, [1], [1])])
    ours, stock = ep_session(model), stock_session(model)
    rng = np.random.default_rng(5)
    past = np.zeros((1, 0, 4), np.float32)
    by_family = []
    for _ in range(24):
        feeds = {"past": past, "x": rng.standard_normal((1, 1, 4)).astype(np.float32)}
        before = family_runs()
        out = ours.run(None, feeds)
        by_family.append(family_runs() - before)
        for o, r in zip(out, stock.run(None, feeds)):
            assert_close(o, r, 1e-6, 1e-6)
        past = out[0]
    # the first lengths through Python (three of them recorded), then the family
    assert by_family[:2] == [0, 0] and all(by_family[6:]), by_family


@pytest.mark.parametrize("op, limit", [("Div", 8), ("Max", 13), ("Less", 11), ("Floor", 8)])
def test_a_family_ends_where_a_comparison_of_its_length_would_answer_otherwise(op, limit):
    """A value folded from the length through a piecewise op (an integer division, Max, a comparison, a rounding)
    answers alike in the four recordings: the family must stop where it would change, and a new one take over."""
    length = [helper.make_node("Shape", ["x"], ["shape"]), helper.make_node("Gather", ["shape", "one"], ["n"], axis=0)]
    piece = {"Div": [helper.make_node("Div", ["n", "k"], ["q"]), helper.make_node("Cast", ["q"], ["f"], to=1)],
             "Max": [helper.make_node("Max", ["n", "k"], ["q"]), helper.make_node("Cast", ["q"], ["f"], to=1)],
             "Less": [helper.make_node("Less", ["n", "k"], ["q"]), helper.make_node("Cast", ["q"], ["f"], to=1)],
             "Floor": [helper.make_node("Cast", ["n"], ["nf"], to=1), helper.make_node("Div", ["nf", "kf"], ["r"]),
                       helper.make_node("Floor", ["r"], ["f"])]}[op]
    model = _model(length + piece + [helper.make_node("Mul", ["x", "f"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "n"])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                   [helper.make_tensor("one", TensorProto.INT64, [], [1]),
                    helper.make_tensor("k", TensorProto.INT64, [], [8 if op in ("Div", "Floor") else limit]),
                    helper.make_tensor("kf", TensorProto.FLOAT, [], [8.0])])
    ours, stock = ep_session(model), stock_session(model)
    by_family = []
    for n in range(2, 3 * limit):
        x = np.full((1, n), 1.5, np.float32)
        before = family_runs()
        assert_close(ours.run(None, {"x": x})[0], stock.run(None, {"x": x})[0], 0, 0, f"length {n}")
        by_family.append(family_runs() - before)
    assert any(by_family[:limit - 2]), by_family  # a family answered below the limit, and stopped there


def test_a_family_checks_data_as_its_bindings_do():
    # a table that grows by a row a run, gathered with indices from the data: the family's gather checks them
    model = _model([helper.make_node("Gather", ["table", "i"], ["y"])],
                   [helper.make_tensor_value_info("table", TensorProto.FLOAT, ["n", 3]),
                    helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    ours, stock = ep_session(model), stock_session(model)
    for n in range(1, 10):
        table = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
        i = np.array([0, n - 1], np.int64)
        assert_close(ours.run(None, {"table": table, "i": i})[0], stock.run(None, {"table": table, "i": i})[0], 0, 0)
    before = family_runs()
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument, match="idx=12 must be within"):
        ours.run(None, {"table": np.zeros((12, 3), np.float32), "i": np.array([0, 12], np.int64)})
    assert family_runs() == before + 1


def test_the_option_keeps_every_run_in_python():
    ours = ep_session(seamless.DEMO_MODEL, native_program="0")
    feeds = demo_feeds(np.random.default_rng(3))
    assert [runs_in_c(ours, feeds)[1] for _ in range(4)] == [0, 0, 0, 0]


def test_concurrent_runs_of_one_binding():
    ours, stock = ep_session(seamless.DEMO_MODEL), stock_session(seamless.DEMO_MODEL)
    rng = np.random.default_rng(4)
    feeds = [demo_feeds(rng) for _ in range(8)]
    expected = [stock.run(None, f)[0] for f in feeds]
    for _ in range(2):
        ours.run(None, feeds[0])
    errors = []

    def worker(t):
        try:
            for i in range(50):
                k = (t + i) % len(feeds)
                assert_close(ours.run(None, feeds[k])[0], expected[k], 1e-5, 1e-5)
        except Exception as exc:  # reported below
            errors.append(exc)
    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_python_and_c_agree_on_the_runners_limits():
    runner = (ROOT / "ep_plugin" / "cpu_runner.c").read_text()
    assert int(re.search(r"#define RUNNER_BINDINGS (\d+)", runner).group(1)) == program.MAX_BINDINGS
    from onnxruntime_ep_seamless.exec.compute import MAX_RANK
    assert int(re.search(r"#define RUNNER_RANK (\d+)", runner).group(1)) >= MAX_RANK
    assert int(re.search(r"#define RUNNER_VALUE_BYTES (\d+)", runner).group(1)) == program.VALUE_BYTES


def _topk_model(k_constant: bool):
    return _model([helper.make_node("TopK", ["x", "k"], ["v", "i"]), helper.make_node("Relu", ["v"], ["r"])],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])]
                  + ([] if k_constant else [helper.make_tensor_value_info("k", TensorProto.INT64, [1])]),
                  [helper.make_tensor_value_info("r", TensorProto.FLOAT, None),
                   helper.make_tensor_value_info("i", TensorProto.INT64, None)],
                  [helper.make_tensor("k", TensorProto.INT64, [1], [3])] if k_constant else [])


def test_log_partition_says_why_a_node_runs_through_python(capfd):
    # k from the run's data sets the outputs' sizes: the partition can have no program
    ep_session(_topk_model(False), log_partition="1").run(None, {"x": np.arange(8, dtype=np.float32),
                                                                  "k": np.array([3], np.int64)})
    err = capfd.readouterr().err
    assert re.search(r"fused node '.*' runs through Python: node '.*' \(TopK\): its output shapes follow the run's "
                     r"data", err), err


def test_a_node_without_a_native_step_is_a_python_step_of_the_program(capfd):
    model = _model([helper.make_node("CumSum", ["x", "axis"], ["c"]), helper.make_node("Relu", ["c"], ["r"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
                   [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)],
                   [helper.make_tensor("axis", TensorProto.INT64, [], [0])])
    ours, stock = ep_session(model, log_partition="1"), stock_session(model)
    rng = np.random.default_rng(6)
    answered = []
    for _ in range(4):
        feeds = {"x": rng.standard_normal(8).astype(np.float32)}
        out, n = runs_in_c(ours, feeds)
        answered.append(n)
        for o, r in zip(out, stock.run(None, feeds)):
            assert_close(o, r, 0, 0)
    assert answered == [0, 0, 1, 1]
    assert "runs as a native program with 1 Python step(s): CumSum" in capfd.readouterr().err


@pytest.mark.parametrize("op,attrs,index_shape,good,bad,expected", [
    # native steps that check the indices in C, as the Python kernels report the first bad one
    ("GatherND", {}, [2, 1], [[0], [3]], [[0], [9]], [0, 3]),
    ("GatherND", {}, [2, 1], [[-4], [3]], [[-5], [9]], [0, 3]),
    ("GatherElements", {"axis": 0}, [2], [0, 3], [0, 9], [0, 3]),
    ("GatherElements", {"axis": 0}, [2], [-4, 3], [0, -5], [0, 3]),
    ("ScatterElements", {"axis": 0, "reduction": "add"}, [2], [0, 3], [9, 0], [10, 1, 2, 14]),
    ("ScatterElements", {"axis": 0}, [2], [-1, 0], [-5, 0], [11, 1, 2, 10])])
def test_a_steps_error_is_stocks(op, attrs, index_shape, good, bad, expected):
    scatter = op == "ScatterElements"
    model = _model([helper.make_node(op, ["x", "i", "u"] if scatter else ["x", "i"], ["y"], **attrs)],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
                    helper.make_tensor_value_info("i", TensorProto.INT64, index_shape)]
                   + ([helper.make_tensor_value_info("u", TensorProto.FLOAT, [2])] if scatter else []),
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    ours, stock = ep_session(model), stock_session(model)
    x, u = np.arange(4, dtype=np.float32), np.array([10, 11], np.float32)
    feeds = lambda i: {"x": x, "i": np.array(i, np.int64), **({"u": u} if scatter else {})}
    for _ in range(3):
        ours.run(None, feeds(good))
    with pytest.raises(Exception) as stock_error:
        stock.run(None, feeds(bad))
    before = native_runs()
    with pytest.raises(type(stock_error.value), match=f"\\({op}\\)"):
        ours.run(None, feeds(bad))
    assert native_runs() == before + 1
    assert_close(ours.run(None, feeds(good))[0], np.array(expected, np.float32), 0, 0)
    assert_close(x, np.arange(4, dtype=np.float32), 0, 0)  # the input never changed


def test_a_rotary_position_outside_the_caches_gets_stocks_error_in_c():
    """ONNX RotaryEmbedding's native step checks each position against the caches' rows before reading a row: stock's
    error (INVALID_ARGUMENT, its message), answered in C, and the program runs on after it."""
    b, s, n, h = 1, 3, 2, 8
    model = _model([helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"], num_heads=n)],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, s, n * h]),
                    helper.make_tensor_value_info("cos", TensorProto.FLOAT, [16, h // 2]),
                    helper.make_tensor_value_info("sin", TensorProto.FLOAT, [16, h // 2]),
                    helper.make_tensor_value_info("pos", TensorProto.INT64, [b, s])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], opset=23)
    rng = np.random.default_rng(3)
    angles = rng.random((16, h // 2)).astype(np.float32)
    feeds = lambda pos: {"x": rng.standard_normal((b, s, n * h)).astype(np.float32), "cos": np.cos(angles),  # noqa: E731
                         "sin": np.sin(angles), "pos": np.array([pos], np.int64)}
    ours, stock = ep_session(model), stock_session(model)
    for _ in range(3):
        ours.run(None, feeds([0, 1, 2]))
    bad = feeds([0, 16, 2])
    with pytest.raises(Exception) as stock_error:
        stock.run(None, bad)
    before = native_runs()
    with pytest.raises(type(stock_error.value), match=r"position_ids value 16 at index 1 is out of range \[0, 16\)"):
        ours.run(None, bad)
    assert native_runs() == before + 1
    good = feeds([3, 4, 5])
    assert_close(ours.run(None, good)[0], stock.run(None, good)[0], 1e-6, 1e-6)


def test_a_partition_with_many_inputs_and_outputs_runs_in_c():
    # more inputs and outputs than the runner reads on its stack (a 24-layer decoder has 50 inputs)
    n = 40
    model = _model([helper.make_node("Add", [f"x{i}", "one"], [f"y{i}"]) for i in range(n)],
                   [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [2]) for i in range(n)],
                   [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None) for i in range(n)],
                   [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])
    ours = ep_session(model)
    feeds = {f"x{i}": np.full(2, i, np.float32) for i in range(n)}
    answered = [runs_in_c(ours, feeds) for _ in range(3)]
    assert [c for _, c in answered] == [0, 0, 1]
    for i, y in enumerate(answered[2][0]):
        assert_close(y, np.full(2, i + 1, np.float32), 0, 0)
