"""Writes demo_model.onnx (a small transformer encoder layer, fixed random weights, seed 0) and
add.onnx (one Add node, for `check`).

Dev-time only (needs `onnx`): python -m onnxruntime_ep_seamless.demo.build_demo_model
"""
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

HIDDEN, HEADS, FFN, VOCAB = 32, 2, 64, 100


def build():
    rng = np.random.default_rng(0)
    w = lambda *shape: numpy_helper.from_array((0.2 * rng.standard_normal(shape)).astype(np.float32))
    inits = {
        "embed": w(VOCAB, HIDDEN), "ln_scale": numpy_helper.from_array((1 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32)),
        "ln_bias": w(HIDDEN), "wq": w(HIDDEN, HIDDEN), "wk": w(HIDDEN, HIDDEN), "wv": w(HIDDEN, HIDDEN),
        "wo": w(HIDDEN, HIDDEN), "w1": w(HIDDEN, FFN), "b1": w(FFN), "w2": w(FFN, HIDDEN), "b2": w(HIDDEN),
        "heads_shape": numpy_helper.from_array(np.array([0, 0, HEADS, HIDDEN // HEADS], np.int64)),
        "merge_shape": numpy_helper.from_array(np.array([0, 0, HIDDEN], np.int64)),
        "scale": numpy_helper.from_array(np.array(1 / np.sqrt(HIDDEN // HEADS), np.float32)),
        "sqrt2": numpy_helper.from_array(np.array(np.sqrt(2), np.float32)),
        "one": numpy_helper.from_array(np.array(1, np.float32)),
        "half": numpy_helper.from_array(np.array(0.5, np.float32)),
    }
    for name, tensor in inits.items():
        tensor.name = name
    n = helper.make_node
    nodes = [
        n("Gather", ["embed", "input_ids"], ["x"]),
        n("LayerNormalization", ["x", "ln_scale", "ln_bias"], ["h"], axis=-1, epsilon=1e-5),
        *[n("MatMul", ["h", f"w{p}"], [f"{p}0"]) for p in "qkv"],
        *[n("Reshape", [f"{p}0", "heads_shape"], [f"{p}1"]) for p in "qkv"],
        n("Transpose", ["q1"], ["q"], perm=[0, 2, 1, 3]),
        n("Transpose", ["k1"], ["kt"], perm=[0, 2, 3, 1]),
        n("Transpose", ["v1"], ["v"], perm=[0, 2, 1, 3]),
        n("MatMul", ["q", "kt"], ["s0"]), n("Mul", ["s0", "scale"], ["s"]),
        n("Softmax", ["s"], ["p"], axis=-1),
        n("MatMul", ["p", "v"], ["a0"]), n("Transpose", ["a0"], ["a1"], perm=[0, 2, 1, 3]),
        n("Reshape", ["a1", "merge_shape"], ["a2"]), n("MatMul", ["a2", "wo"], ["a"]),
        n("Add", ["x", "a"], ["r"]),
        n("MatMul", ["r", "w1"], ["f0"]), n("Add", ["f0", "b1"], ["f1"]),
        n("Div", ["f1", "sqrt2"], ["g0"]), n("Erf", ["g0"], ["g1"]), n("Add", ["g1", "one"], ["g2"]),
        n("Mul", ["f1", "g2"], ["g3"]), n("Mul", ["g3", "half"], ["g"]),
        n("MatMul", ["g", "w2"], ["f2"]), n("Add", ["f2", "b2"], ["f3"]),
        n("Add", ["r", "f3"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "seamless_demo_encoder",
                              [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", HIDDEN])],
                              initializer=list(inits.values()))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8,
                             producer_name="onnxruntime-ep-seamless demo")


def build_add():
    info = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, ["n"])
    graph = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"])], "add", [info("x"), info("y")], [info("z")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


if __name__ == "__main__":
    for name, model in (("demo_model.onnx", build()), ("add.onnx", build_add())):
        out = Path(__file__).with_name(name)
        save(model, str(out))
        print(out, out.stat().st_size, "bytes")
