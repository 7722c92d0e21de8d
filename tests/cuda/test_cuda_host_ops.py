"""The CUDA kernels run on the host (kernels/cuda/elementwise.py on_host): ops whose output shape depends on the data (NonZero, Unique,
NonMaxSuppression) on float inputs, and MelWeightMatrix and TfIdfVectorizer, computed on the host inside
the CUDA partition (skipped without a GPU), against stock ORT's CPU EP (test_cuda_capture.py: such a
partition is left eager by capture=auto)."""
import numpy as np
import pytest

from parity import Const
from test_cuda_ep import DEVICES, PROBLEM
from test_cuda_ops import F16, F32, I32, I64, check

pytestmark = pytest.mark.skipif(not DEVICES, reason=f"no NVIDIA GPU for the CUDA EP ({PROBLEM or 'none found'})")
rng = np.random.default_rng(31)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("shape", [(3, 4), (5,), (0, 3)])
def test_non_zero(dtype, shape):
    x = (rng.standard_normal(shape) * (rng.random(shape) > 0.5)).astype(dtype)
    check("NonZero", [x], outputs=[I64], exact=True)


@pytest.mark.parametrize("sorted_", [0, 1])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_unique(sorted_, axis):
    x = rng.integers(0, 3, (4, 3)).astype(F32)
    x[2] = x[0]  # a repeated row
    attrs = {"sorted": sorted_} if axis is None else {"sorted": sorted_, "axis": axis}
    check("Unique", [x], attrs, opset=11, outputs=[F32, I64, I64, I64], exact=True)


@pytest.mark.parametrize("center_point_box", [0, 1])
def test_non_max_suppression(center_point_box):
    boxes = rng.uniform(0, 10, (2, 12, 4)).astype(F32)
    if center_point_box:
        boxes[..., 2:] = rng.uniform(1, 4, (2, 12, 2))
    scores = rng.uniform(0, 1, (2, 3, 12)).astype(F32)
    limits = [Const(np.array([4], I64)), Const(np.array([0.3], F32)), Const(np.array([0.2], F32))]
    check("NonMaxSuppression", [boxes, scores, *limits], {"center_point_box": center_point_box}, opset=11,
          outputs=[I64], exact=True)


def test_mel_weight_matrix():
    # the edges a graph input (on the GPU: read back); with every input a constant ORT folds the node away
    sizes = [Const(np.array(v, I64)) for v in (8, 64, 8000)]
    check("MelWeightMatrix", sizes + [np.array(100, F32), np.array(3000, F32)], opset=17, outputs=[F32],
          rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
def test_tfidf_vectorizer(mode):
    # 1- and 2-grams, skips up to 1, weights; the token ids a graph input (on the GPU: read back)
    x = np.array([[1, 1, 3, 3, 3, 7], [8, 6, 7, 5, 6, 8]], I32)
    attrs = {"mode": mode, "min_gram_length": 1, "max_gram_length": 2, "max_skip_count": 1,
             "ngram_counts": [0, 4], "ngram_indexes": [0, 1, 2, 3, 4, 5, 6],
             "pool_int64s": [2, 3, 5, 4, 5, 6, 7, 8, 6, 7], "weights": [1.0, 0.5, 2.0, 1.0, 0.25, 1.5, 3.0]}
    check("TfIdfVectorizer", [x], attrs, opset=9, outputs=[F32], exact=True)


def test_tree_ensemble():
    # a tree of two splits over x's first two features (ai.onnx.ml opset 5), x a graph input (on the GPU):
    # weights 1, 2, 3, 1, 2 (every leaf; -0.2 on a split)
    from onnx import TensorProto, helper, numpy_helper
    from test_cuda_ep import run_on_cuda
    from parity import stock_session
    tensor = numpy_helper.from_array
    node = helper.make_node(
        "TreeEnsemble", ["x"], ["y"], domain="ai.onnx.ml", aggregate_function=1, n_targets=1, tree_roots=[0],
        nodes_featureids=[0, 1], nodes_modes=tensor(np.array([0, 0], np.uint8)),
        nodes_splits=tensor(np.array([0.5, -0.2], F32)), nodes_truenodeids=[0, 1], nodes_trueleafs=[1, 1],
        nodes_falsenodeids=[1, 2], nodes_falseleafs=[0, 1], leaf_targetids=[0, 0, 0],
        leaf_weights=tensor(np.array([1.0, 2.0, 3.0], F32)))
    graph = helper.make_graph([node], "tree", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 5)],
                              ir_version=10)
    x = rng.standard_normal((5, 3)).astype(F32)
    x[:, 0], x[:, 1] = [0.2, 0.9, 1.5, -1.0, 0.7], [0.0, -0.5, 0.3, 2.0, -0.2]  # every leaf, a split's value
    feeds = {"x": x}
    (ours,) = run_on_cuda(model, feeds)
    np.testing.assert_array_equal(ours, stock_session(model).run(None, feeds)[0])


# TensorProto type, opset, value range (float4e2m1: stock's CPU EP has no Cast for it)
SUB_BYTE = {"uint4": (21, 23, [0, 15]), "int4": (22, 23, [-8, 7]), "uint2": (25, 25, [0, 3]), "int2": (26, 25, [-2, 1])}


@pytest.mark.parametrize("name", list(SUB_BYTE))
def test_sub_byte_values_stay_packed_on_the_gpu(name):
    """Sub-byte values (int4, int2, ...) live on the GPU packed, as ORT holds them; their nodes run their CPU
    kernels on the host (no CUDA kernel takes them). One computed inside the partition (x cast there and back, then a
    GPU Mul), one leaving it as a graph output and one coming in as a graph input: 15 elements, so the last byte is
    partly filled."""
    import ml_dtypes
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    import onnxruntime_ep_seamless as seamless
    from onnxruntime_ep_seamless.tools.conformance import _Exotic, run_session
    elem, opset, (low, high) = SUB_BYTE[name]
    nodes = [helper.make_node("Cast", ["x"], ["c"], to=elem), helper.make_node("Cast", ["c"], ["f"], to=1),
             helper.make_node("Mul", ["f", "two"], ["y"]), helper.make_node("Cast", ["q"], ["z"], to=1),
             helper.make_node("Add", ["z", "x"], ["w"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5]),
                                           helper.make_tensor_value_info("q", elem, [3, 5])],
                              [helper.make_tensor_value_info(n, t, [3, 5]) for n, t in
                               (("y", TensorProto.FLOAT), ("c", elem), ("w", TensorProto.FLOAT))],
                              [numpy_helper.from_array(np.array(2, F32), "two")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=11 if opset < 25 else 13).SerializeToString()
    try:
        stock = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    except Exception as e:  # an onnxruntime older than the opset
        pytest.skip(f"stock ORT {ort.__version__} cannot load opset {opset}: {str(e)[:80]}")
    so = seamless.session_options(device="cuda")
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    ours = ort.InferenceSession(model, so)
    report = seamless.assert_ep_selected(ours, device="cuda")
    assert not report.fallback_nodes, report
    for run in range(4):
        x = rng.integers(low, high + 1, (3, 5)).astype(F32)
        q = rng.integers(low, high + 1, (3, 5)).astype(F32).astype(getattr(ml_dtypes, name))
        feeds = {"x": x, "q": _Exotic(elem, q)}
        got, want = run_session(ours, feeds), run_session(stock, feeds)
        for g, w in zip(got, want):
            g, w = (v.array if isinstance(v, _Exotic) else v for v in (g, w))
            np.testing.assert_array_equal(g.view(np.uint8) if g.dtype.itemsize == 1 else g,
                                          w.view(np.uint8) if w.dtype.itemsize == 1 else w, err_msg=f"run {run}")


def test_sequences_and_optionals_inside_the_partition_match_stock():
    """A sequence built from GPU values and an optional (tests/test_capture_report.py sequence_model) run on the host
    inside the CUDA partition, every node ours: stock's outputs."""
    from test_capture_report import sequence_model
    from test_cuda_control import sessions
    ours, stock = sessions(sequence_model())  # every node ours, fallback disabled
    for run in range(4):
        feeds = {"x": rng.standard_normal((2, 3)).astype(F32), "z": rng.standard_normal((2, 3)).astype(F32)}
        np.testing.assert_array_equal(ours.run(None, feeds)[0], stock.run(None, feeds)[0], err_msg=f"run {run}")
