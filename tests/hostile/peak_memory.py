"""Peak resident memory of one run, stock ORT's CPU EP vs ours, each in a fresh process.

    python peak_memory.py stock|ours CASE      prints {"case", "peak_mib"}: the rise of the process's resident
                                               high-water mark over the run (the outputs returned included)
"""
import json
import sys

import numpy as np
from onnx import TensorProto, helper

MIB = 1 << 20


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":")) * 1024


def _model(nodes, x_shape, extra_inits=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "m"][:len(x_shape)])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=list(extra_inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString()


def expand_512mib():
    """(1, 4096) float32 expanded to (32768, 4096): a 512 MiB output."""
    shape = helper.make_tensor("s", TensorProto.INT64, [2], [32768, 4096])
    return _model([helper.make_node("Expand", ["x", "s"], ["y"])], (1, 4096), [shape]), \
        {"x": np.ones((1, 4096), np.float32)}


def elementwise_chain():
    """Relu, Mul, Add, Exp over a 128 MiB float32 input."""
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [-1.0])
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Mul", ["a", "two"], ["b"]),
             helper.make_node("Add", ["b", "one"], ["c"]), helper.make_node("Exp", ["c"], ["y"])]
    return _model(nodes, (8192, 4096), [two, one]), {"x": np.full((8192, 4096), 0.25, np.float32)}


def binary_chain():
    """Add, Mul, Sub, Div of two 128 MiB float32 inputs."""
    nodes = [helper.make_node("Add", ["x", "z"], ["a"]), helper.make_node("Mul", ["a", "x"], ["b"]),
             helper.make_node("Sub", ["b", "z"], ["c"]), helper.make_node("Div", ["c", "x"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n", "m"])
                                           for n in ("x", "z")],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString()
    return model, {"x": np.full((8192, 4096), 0.25, np.float32), "z": np.full((8192, 4096), 0.5, np.float32)}


CASES = {f.__name__: f for f in (expand_512mib, elementwise_chain, binary_chain)}


def main(side: str, name: str) -> None:
    import onnxruntime as ort
    model, feeds = CASES[name]()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    if side == "stock":
        sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    else:
        import onnxruntime_ep_seamless as seamless
        so = seamless.session_options(base=so)
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        sess = ort.InferenceSession(model, so)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the high-water mark: what follows is the run's alone
    before = _status("VmRSS")
    outputs = sess.run(None, feeds)
    peak = _status("VmHWM") - before
    print(json.dumps({"case": name, "peak_mib": round(peak / MIB, 1), "output_mib": round(outputs[0].nbytes / MIB, 1)}))


if __name__ == "__main__":
    main(*sys.argv[1:])
