"""Run an ONNX model through our planner and kernels directly, without ORT (kernel development aid)."""
import numpy as np
import onnx

from onnxruntime_ep_seamless.graph.onnx_import import import_model
from onnxruntime_ep_seamless.plan.planner import Plan


def run_direct(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    graph = import_model(model)
    plan = Plan(graph, graph.inputs, graph.outputs, "direct")
    return [np.asarray(x) for x in plan.run(*[feeds[n] for n in graph.inputs])]
