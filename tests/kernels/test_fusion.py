"""plan/fusion.py's decisions per device (the math of each fused kernel is checked against stock ORT
where it runs: the CPU parity tests, tests/cuda/test_cuda_contrib.py)."""
import numpy as np
import pytest

from kernels.test_contrib_quantization import swiglu_nbits_model
from onnxruntime_ep_seamless.graph.onnx_import import import_model
from onnxruntime_ep_seamless.plan.fusion import fuse


def fused_ops(model, device):
    graph = import_model(model)
    return [n.op_type for n in fuse(graph, graph.outputs, device)]


@pytest.mark.parametrize("silu", ["sigmoid", "quick_gelu"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("matmul", [False, True])
def test_swiglu_of_two_matmuls_is_one_node_on_cuda(silu, dtype, matmul):
    model, _ = swiglu_nbits_model(64, 16, 32, zero_points=True, dtype=dtype, silu=silu, matmul=matmul)
    graph = import_model(model)
    nodes = fuse(graph, graph.outputs, "cuda")
    assert [n.op_type for n in nodes] == ["MatMulSwiGLU" if matmul else "MatMulNBitsSwiGLU"]
    if matmul:  # one [gate | up] matrix
        gate_up = graph.value(nodes[0].inputs[1]).const
        np.testing.assert_array_equal(gate_up, np.concatenate([graph.value("gate_w").const, graph.value("up_w").const], 1))


def test_swiglu_is_not_fused_where_no_kernel_runs_it_or_a_part_is_read_elsewhere():
    model, _ = swiglu_nbits_model(64, 16, 32)
    assert fused_ops(model, "cpu") == ["MatMulNBits", "MatMulNBits", "QuickGelu", "Mul"]  # no CPU kernel: SiLU only
    model, _ = swiglu_nbits_model(64, 16, 32, matmul=True)
    graph = import_model(model)
    assert [n.op_type for n in fuse(graph, graph.outputs, "cpu")] == ["MatMul", "MatMul", "QuickGelu", "Mul"]
    assert set(graph.values) == {v.name for v in import_model(model).values.values()}  # no joined weights left
    model, _ = swiglu_nbits_model(64, 16, 32, gate_out=True)  # the gate's product is an output
    assert fused_ops(model, "cuda") == ["MatMulNBits", "MatMulNBits", "QuickGelu", "Mul"]
    model, _ = swiglu_nbits_model(64, 16, 32)
    model.graph.node[1].attribute[-1].i = 16  # up's block_size differs from the gate's
    assert "MatMulNBitsSwiGLU" not in fused_ops(model, "cuda")
