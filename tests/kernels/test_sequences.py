"""Sequences and optionals on the CPU EP: the sequence ops inside a fused node (Python lists), sequence and
optional graph inputs read through the ABI, and the boundary the plugin EP API draws (no sequence or optional
can leave a compiled node)."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from parity import assert_parity, ep_session, run_ours, stock_session

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def model_of(nodes, inputs, outputs, opset=18):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def tensor(name, elem=F, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def sequence(name, elem=F):
    return helper.make_tensor_sequence_value_info(name, elem, None)


def optional(name, elem=F):
    return helper.make_value_info(name, helper.make_optional_type_proto(helper.make_tensor_type_proto(elem, None)))


def x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _split_insert_at_concat():
    m = model_of([helper.make_node("SplitToSequence", ["x", "split"], ["seq"], axis=1),
                  helper.make_node("SequenceInsert", ["seq", "y", "pos"], ["seq2"]),
                  helper.make_node("SequenceAt", ["seq2", "pos"], ["at"]),
                  helper.make_node("SequenceLength", ["seq2"], ["n"]),
                  helper.make_node("ConcatFromSequence", ["seq2"], ["cat"], axis=1)],
                 [tensor("x", F, [2, 6]), tensor("split", I64, [3]), tensor("y", F, [2, 1]), tensor("pos", I64, [])],
                 [tensor("at"), tensor("n", I64), tensor("cat")])
    return m, {"x": x(2, 6), "split": np.array([1, 2, 3], np.int64), "y": x(2, 1, seed=1)}


@pytest.mark.parametrize("pos", [0, 1, 3, -1, -3])
def test_split_insert_at_concat(pos):
    m, feeds = _split_insert_at_concat()
    assert_parity(m, {**feeds, "pos": np.array(pos, np.int64)})


@pytest.mark.parametrize("pos", [4, -4])
def test_insert_beyond_the_sequence_fails_as_stock(pos):
    m, feeds = _split_insert_at_concat()
    feeds["pos"] = np.array(pos, np.int64)
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument) as stock:
        stock_session(m).run(None, feeds)
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument) as ours:
        ep_session(m).run(None, feeds)
    assert f"Invalid sequence index ({pos}) specified for sequence of size (3)" in str(stock.value)
    assert f"Invalid sequence index ({pos}) specified for sequence of size (3)" in str(ours.value)


@pytest.mark.parametrize("keepdims", [0, 1])
def test_construct_erase_stack(keepdims):
    m = model_of([helper.make_node("SplitToSequence", ["x"], ["parts"], axis=0, keepdims=keepdims),
                  helper.make_node("SequenceErase", ["parts"], ["fewer"]),
                  helper.make_node("ConcatFromSequence", ["fewer"], ["stacked"], axis=1, new_axis=1),
                  helper.make_node("SequenceConstruct", ["a", "b", "a"], ["abc"]),
                  helper.make_node("SequenceErase", ["abc", "one"], ["ac"]),
                  helper.make_node("ConcatFromSequence", ["ac"], ["joined"], axis=-1)],
                 [tensor("x", F, [4, 3]), tensor("a", F, [2, 2]), tensor("b", F, [2, 2]), tensor("one", I64, [])],
                 [tensor("stacked"), tensor("joined")])
    assert_parity(m, {"x": x(4, 3), "a": x(2, 2, seed=1), "b": x(2, 2, seed=2), "one": np.array(1, np.int64)})


def test_empty_sequence_grows_and_split_by_a_scalar():
    m = model_of([helper.make_node("SequenceEmpty", [], ["s0"], dtype=F),
                  helper.make_node("SequenceInsert", ["s0", "a"], ["s1"]),
                  helper.make_node("SplitToSequence", ["b", "two"], ["parts"]),
                  helper.make_node("SequenceAt", ["parts", "last"], ["tail"]),
                  helper.make_node("SequenceInsert", ["s1", "tail"], ["s2"]),
                  helper.make_node("ConcatFromSequence", ["s2"], ["out"], axis=0)],
                 [tensor("a", F, [1, 3]), tensor("b", F, [5, 3]), tensor("two", I64, []), tensor("last", I64, [])],
                 [tensor("out")])
    assert_parity(m, {"a": x(1, 3), "b": x(5, 3, seed=1), "two": np.array(2, np.int64),
                      "last": np.array(-1, np.int64)})


def test_sequence_input_read_through_the_abi():
    m = model_of([helper.make_node("SequenceLength", ["s"], ["n"]),
                  helper.make_node("SequenceAt", ["s", "i"], ["item"]),
                  helper.make_node("ConcatFromSequence", ["s"], ["all"], axis=0)],
                 [sequence("s"), tensor("i", I64, [])], [tensor("n", I64), tensor("item"), tensor("all")])
    items = [x(2, 3), x(1, 3, seed=1), x(4, 3, seed=2)]
    assert_parity(m, {"s": items, "i": np.array(-2, np.int64)})
    assert_parity(m, {"s": items[:1], "i": np.array(0, np.int64)})


def test_optional_input_with_and_without_a_value():
    m = model_of([helper.make_node("OptionalHasElement", ["o"], ["has"]),
                  helper.make_node("Identity", ["has"], ["has2"])],
                 [optional("o")], [tensor("has2", TensorProto.BOOL)])
    assert_parity(m, {"o": x(2, 2)})
    assert_parity(m, {"o": None})
    get = model_of([helper.make_node("OptionalGetElement", ["o"], ["v"]), helper.make_node("Neg", ["v"], ["y"])],
                   [optional("o")], [tensor("y")])
    assert_parity(get, {"o": x(3)})


def test_optional_get_element_of_nothing_fails_as_stock():
    m = model_of([helper.make_node("OptionalGetElement", ["o"], ["y"])], [optional("o")], [tensor("y")])
    with pytest.raises(Exception) as stock:
        stock_session(m).run(None, {"o": None})
    with pytest.raises(Exception) as ours:
        ep_session(m).run(None, {"o": None})
    assert type(ours.value) is type(stock.value)
    assert "OptionalGetElement" in str(ours.value) and "contains no data" in str(ours.value)


def test_a_sequence_leaving_the_partition_is_declined_with_the_reason():
    import onnxruntime_ep_seamless as seamless
    m = model_of([helper.make_node("SplitToSequence", ["x"], ["seq"], axis=0)], [tensor("x", F, [2, 2])],
                 [sequence("seq")])
    with pytest.raises(Exception, match="explicitly disabled"):
        ep_session(m)
    so = seamless.session_options()
    sess = ort.InferenceSession(m.SerializeToString(), so)
    report = seamless.partition_report(sess)
    assert report.fallback_nodes and not report.ep_nodes
    assert any("no way to hand ORT a sequence" in r for r in report.declined.values()), report.declined


def test_string_sequences():
    m = model_of([helper.make_node("SplitToSequence", ["words"], ["seq"], axis=0, keepdims=0),
                  helper.make_node("SequenceAt", ["seq", "i"], ["w"]),
                  helper.make_node("StringConcat", ["w", "w"], ["ww"])],
                 [tensor("words", TensorProto.STRING, [3]), tensor("i", I64, [])],
                 [tensor("ww", TensorProto.STRING)], opset=20)
    words = np.array(["a", "bc", "d\u00e9"], object)
    for i in (0, 2, -1):
        assert_parity(m, {"words": words, "i": np.array(i, np.int64)})


def test_inputs_are_never_changed():
    m = model_of([helper.make_node("SequenceErase", ["s", "zero"], ["t"]),
                  helper.make_node("SequenceLength", ["t"], ["n"])],
                 [sequence("s"), tensor("zero", I64, [])], [tensor("n", I64)])
    items = [x(2), x(2, seed=1)]
    (n,) = run_ours(m, {"s": items, "zero": np.array(0, np.int64)})
    assert n == 1 and len(items) == 2


def test_a_loop_carries_a_sequence_inside_the_fused_node():
    """A Loop that grows a sequence (SequenceInsert each iteration, carried from SequenceEmpty) and a
    ConcatFromSequence after it: the sequence never leaves our fused node, so the whole model is ours."""
    body = helper.make_graph([helper.make_node("Cast", ["i"], ["fi"], to=F),
                              helper.make_node("Mul", ["x", "fi"], ["row"]),
                              helper.make_node("SequenceInsert", ["seq_in", "row"], ["seq_out"]),
                              helper.make_node("Identity", ["c_in"], ["c_out"])], "body",
                             [tensor("i", I64, []), tensor("c_in", TensorProto.BOOL, []), sequence("seq_in")],
                             [tensor("c_out", TensorProto.BOOL, []), sequence("seq_out")])
    m = model_of([helper.make_node("SequenceEmpty", [], ["empty"], dtype=F),
                  helper.make_node("Loop", ["m", "", "empty"], ["rows"], body=body),
                  helper.make_node("ConcatFromSequence", ["rows"], ["cat"], axis=0, new_axis=1)],
                 [tensor("x", F, [3]), tensor("m", I64, [])], [tensor("cat")])
    for trips in (1, 4):
        assert_parity(m, {"x": x(3), "m": np.array(trips, np.int64)})
