"""User CUDA kernels (kernels/user.py, register_kernel(device="cuda")) on the H200: a custom op whose kernel is CuPy
on the run's stream, captured by capture=auto (replays read each run's inputs); CUDA C source compiled with NVRTC
through cuda.core (cuda_source_kernel) in place of our Gelu inside the builder's Gemma 2 decoder, greedy as stock in
one captured segment a step; PyTorch on the same tensors through __cuda_array_interface__; errors named."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxruntime_ep_seamless as seamless
from test_cuda_ep import DEVICES, PROBLEM, cuda_session

pytestmark = pytest.mark.skipif(not DEVICES, reason=f"no NVIDIA GPU for the CUDA EP ({PROBLEM or 'none found'})")
F32 = np.float32


@pytest.fixture(autouse=True)
def clean_registry():
    from onnxruntime_ep_seamless.kernels import user
    yield
    for k in user.registered_kernels():
        seamless.unregister_kernel(k.op_type, domain=k.domain)


def scale_model():
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]),
                               helper.make_node("Scale", ["r"], ["s"], domain="my.domain", alpha=3.0),
                               helper.make_node("Neg", ["s"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.domain", 1)],
                             ir_version=9).SerializeToString()


def run_all(sess, rounds=6):
    rng = np.random.default_rng(1)
    for i in range(rounds):  # capture=auto captures a binding after its warm-up runs: later runs are replays
        x = rng.standard_normal((4, 8)).astype(F32)
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_allclose(y, -3.0 * np.maximum(x, 0), rtol=1e-6, err_msg=f"run {i}")


def test_a_cupy_kernel_on_the_runs_stream_is_captured(capfd):
    cp = pytest.importorskip("cupy")

    def scale(stream, inputs, outputs, *, alpha=1.0):
        with cp.cuda.Stream.from_external(stream):  # the CUDA stream protocol (__cuda_stream__)
            cp.multiply(cp.asarray(inputs[0]), cp.float32(alpha), out=cp.asarray(outputs[0]))

    seamless.register_kernel("Scale", scale, domain="my.domain", device="cuda", inputs=[F32], outputs=[F32],
                             shape=lambda s: [s])
    run_all(cuda_session(scale_model(), capture="auto", log_capture="1"))
    err = capfd.readouterr().err
    assert "1 segment(s), 0 seam(s)" in err


def test_a_torch_kernel_reads_and_writes_our_tensors():
    torch = pytest.importorskip("torch")

    def scale(stream, inputs, outputs, *, alpha=1.0):
        with torch.cuda.stream(torch.cuda.ExternalStream(stream.handle)):
            x, y = torch.as_tensor(inputs[0], device="cuda"), torch.as_tensor(outputs[0], device="cuda")
            torch.mul(x, alpha, out=y)

    seamless.register_kernel("Scale", scale, domain="my.domain", device="cuda", inputs=[F32], outputs=[F32],
                             shape=lambda s: [s])
    run_all(cuda_session(scale_model(), capture="off"))


GELU = r"""
extern "C" __global__ void gelu_tanh(const float* x, float* y, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) {
    float v = x[i];
    y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
  }
}
extern "C" __global__ void gelu_erf(const float* x, float* y, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.7071067811865476f));
}
"""


def test_nvrtc_source_in_place_of_our_gelu_in_a_captured_decoder(capfd):
    pytest.importorskip("cuda.core")
    from test_cuda_moe import decodes_as_stock_in_one_segment
    calls = []
    kernels = {a: seamless.cuda_source_kernel(GELU, f"gelu_{a}") for a in ("tanh", "erf")}

    def gelu(stream, inputs, outputs, *, approximate="none"):
        calls.append(approximate)
        kernels["tanh" if approximate == "tanh" else "erf"](stream, inputs, outputs)

    seamless.register_kernel("Gelu", gelu, device="cuda", shape=lambda s: [s],
                             supports=lambda node: None if node.input_types[0] == F32 else "float32 only")
    decodes_as_stock_in_one_segment("gemma2", "fp32", capfd, window=16)
    assert calls and set(calls) == {"tanh"}  # Gemma 2's MLP; replays call no Python


def test_an_exception_in_a_user_cuda_kernel_names_it():
    def broken(stream, inputs, outputs, **attrs):
        raise ZeroDivisionError("on purpose")

    seamless.register_kernel("Scale", broken, domain="my.domain", device="cuda", inputs=[F32], outputs=[F32],
                             shape=lambda s: [s])
    sess = cuda_session(scale_model(), capture="off")
    with pytest.raises(Exception, match=r"the user kernel .*broken raised ZeroDivisionError: on purpose"):
        sess.run(None, {"x": np.ones((4, 8), F32)})
