"""Kernels a user writes in Python (kernels/user.py, `seamless.register_kernel`): a custom-domain op loads and runs
on the CPU EP with fallback disabled (ORT >= 1.24 learns its schema from the EP's factory), an override of a
built-in op runs in place of ours (fusions and native steps leave its nodes alone), supports() declines with a
reason, the shape rule is checked, and bad registrations or results get clear errors."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxruntime_ep_seamless as seamless
from parity import ep_session

F32 = np.float32
ORT_VERSION = tuple(int(p) for p in ort.__version__.split(".")[:2])
needs_custom_domains = pytest.mark.skipif(ORT_VERSION < (1, 24), reason="custom-op domains need onnxruntime >= 1.24")


@pytest.fixture(autouse=True)
def clean_registry():
    from onnxruntime_ep_seamless.kernels import user
    yield
    for k in user.registered_kernels():
        seamless.unregister_kernel(k.op_type, domain=k.domain)


def model(nodes, inputs, outputs, domains=(("my.domain", 1),), opset=17):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs])
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in domains]
    return helper.make_model(graph, opset_imports=imports, ir_version=9).SerializeToString()


def session(data, **options):
    sess = ep_session(data, **options)
    report = seamless.assert_ep_selected(sess)
    assert not report.fallback_nodes, report
    return sess


@needs_custom_domains
def test_a_custom_domain_op_runs_on_the_ep():
    calls = []

    def add_scaled(x, y, *, alpha=1.0):
        calls.append(x.shape)
        return x + np.float32(alpha) * y

    seamless.register_kernel("AddScaled", add_scaled, domain="my.domain", inputs=[F32, F32], outputs=[F32])
    data = model([helper.make_node("Relu", ["x"], ["r"]),
                  helper.make_node("AddScaled", ["r", "y"], ["s"], domain="my.domain", alpha=0.5),
                  helper.make_node("Mul", ["s", "s"], ["z"])],
                 [("x", TensorProto.FLOAT, ["n", 3]), ("y", TensorProto.FLOAT, ["n", 3])],
                 [("z", TensorProto.FLOAT, None)])
    sess = session(data)
    rng = np.random.default_rng(0)
    for n in (2, 5, 2, 2, 2):  # new shapes, then a binding answered by the native program (the op a Python step)
        x, y = rng.standard_normal((n, 3)).astype(F32), rng.standard_normal((n, 3)).astype(F32)
        (z,) = sess.run(None, {"x": x, "y": y})
        np.testing.assert_allclose(z, (np.maximum(x, 0) + 0.5 * y) ** 2, rtol=1e-6)
    assert len(calls) >= 5


@needs_custom_domains
def test_an_any_typed_custom_op_takes_the_type_of_its_input():
    seamless.register_kernel("Twice", lambda x: x + x, domain="my.domain", inputs=[None], outputs=[None])
    for onnx_type, dtype in ((TensorProto.FLOAT, F32), (TensorProto.INT64, np.int64)):
        data = model([helper.make_node("Twice", ["x"], ["y"], domain="my.domain")], [("x", onnx_type, [4])],
                     [("y", onnx_type, [4])])
        x = np.arange(4).astype(dtype)
        (y,) = session(data).run(None, {"x": x})
        assert y.dtype == dtype and (y == 2 * x).all()


@needs_custom_domains
def test_a_custom_ops_optional_input_may_be_left_out():
    def affine(x, scale, bias=None):
        return x * scale + (0 if bias is None else bias)

    seamless.register_kernel("Affine", affine, domain="my.domain", inputs=[F32, F32, F32], outputs=[F32],
                             optional_inputs=1)
    x, s, b = (np.full(3, v, F32) for v in (2.0, 3.0, 1.0))
    for names, want in ((["x", "s", "b"], 7.0), (["x", "s", ""], 6.0), (["x", "s"], 6.0)):
        data = model([helper.make_node("Affine", names, ["y"], domain="my.domain")],
                     [(n, TensorProto.FLOAT, [3]) for n in names if n], [("y", TensorProto.FLOAT, [3])])
        feeds = {n: v for n, v in zip(("x", "s", "b"), (x, s, b)) if n in names}
        (y,) = session(data).run(None, feeds)
        assert (y == want).all(), names


@needs_custom_domains
def test_ort_learns_a_custom_ops_output_shapes_from_its_shape_rule():
    # the shape rule answers ORT's shape inference: the node after the custom op sees a static shape (the model
    # declares none); a rule that reads attributes is not asked (ORT hands the EP only types and shapes)
    seen = []
    seamless.register_kernel("Pair", lambda x: np.stack([x, x], -1), domain="my.domain", inputs=[None],
                             outputs=[None], shape=lambda s: [(*s, 2)])
    seamless.register_kernel("Relu", lambda x: np.maximum(x, 0), supports=lambda node: seen.append(node.input_shapes))
    data = model([helper.make_node("Pair", ["x"], ["p"], domain="my.domain"), helper.make_node("Relu", ["p"], ["y"])],
                 [("x", TensorProto.FLOAT, [3])], [("y", TensorProto.FLOAT, None)])
    (y,) = session(data).run(None, {"x": np.array([-1, 0, 2], F32)})
    assert y.shape == (3, 2) and (y[:, 0] == [0, 0, 2]).all()
    assert ((3, 2),) in seen, seen


@needs_custom_domains
def test_a_custom_op_its_kernel_declines_fails_the_session_with_the_reason():
    seamless.register_kernel("Twice", lambda x: x + x, domain="my.domain", inputs=[None], outputs=[None],
                             supports=lambda node: None if node.input_types[0] == F32 else "float32 only here")
    data = model([helper.make_node("Twice", ["x"], ["y"], domain="my.domain")], [("x", TensorProto.INT32, [4])],
                 [("y", TensorProto.INT32, [4])])
    with pytest.raises(Exception, match="float32 only here"):
        ep_session(data)


def test_an_override_runs_in_place_of_ours_in_python_and_natively_recorded_programs(capfd):
    calls = []

    def hard_sigmoid(x):  # not Sigmoid: the test sees whose kernel ran
        calls.append(1)
        return np.clip(x * np.float32(0.25) + np.float32(0.5), 0, 1).astype(F32)

    seamless.register_kernel("Sigmoid", hard_sigmoid)
    # x * Sigmoid(x) is one SiLU node after our fusions (plan/fusion.py silu): not with a Sigmoid a user's kernel runs
    data = model([helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])],
                 [("x", TensorProto.FLOAT, ["n", 3])], [("y", TensorProto.FLOAT, None)], domains=())
    sess = session(data, log_partition=1)
    x = np.linspace(-3, 3, 6, dtype=F32).reshape(2, 3)
    for _ in range(5):  # the third run of a binding is answered by its native program: the kernel a Python step
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_allclose(y, x * np.clip(x * 0.25 + 0.5, 0, 1), rtol=1e-6)
    assert len(calls) == 5
    assert "user kernel test_user_kernels.test_an_override_runs_in_place_of_ours_in_python_and_natively_recorded_" \
           "programs.<locals>.hard_sigmoid runs 1 x Sigmoid" in capfd.readouterr().err


def test_an_override_that_declines_leaves_the_node_to_ours():
    calls = []

    def relu(x):
        calls.append(1)
        return np.maximum(x, 0)

    seamless.register_kernel("Relu", relu, supports=lambda node: "only rank 1" if len(node.input_shapes[0]) != 1
                             else None)
    data = model([helper.make_node("Relu", ["x"], ["y"])], [("x", TensorProto.FLOAT, [2, 2])],
                 [("y", TensorProto.FLOAT, [2, 2])], domains=())
    (y,) = session(data).run(None, {"x": -np.ones((2, 2), F32)})
    assert not calls and (y == 0).all()


def test_inputs_are_read_only_and_bad_results_are_clear_errors():
    def in_place(x):
        x += 1
        return x

    seamless.register_kernel("Neg", in_place)
    data = model([helper.make_node("Neg", ["x"], ["y"])], [("x", TensorProto.FLOAT, [3])],
                 [("y", TensorProto.FLOAT, [3])], domains=())
    x = np.zeros(3, F32)
    with pytest.raises(Exception, match="user kernel .*in_place.*read-only"):
        session(data).run(None, {"x": x})
    assert (x == 0).all()
    seamless.unregister_kernel("Neg")
    seamless.register_kernel("Neg", lambda x: (-x).astype(np.float64))
    with pytest.raises(Exception, match=r"returned output 0 of type float64; the model's output is float32"):
        session(data).run(None, {"x": x})
    seamless.unregister_kernel("Neg")
    seamless.register_kernel("Neg", lambda x: -x[:2], shape=lambda s: [s])
    data = model([helper.make_node("Neg", ["x"], ["y"])], [("x", TensorProto.FLOAT, ["n"])],
                 [("y", TensorProto.FLOAT, None)], domains=())
    with pytest.raises(Exception, match=r"returned output 0 of shape \(2,\); its shape rule says \(3,\)"):
        session(data).run(None, {"x": x})


def test_an_error_inside_a_native_program_names_the_user_kernel():
    def picky(x):
        if x[0] > 100:
            raise OverflowError("too large")
        return -x

    seamless.register_kernel("Neg", picky)
    data = model([helper.make_node("Neg", ["x"], ["y"])], [("x", TensorProto.FLOAT, [3])],
                 [("y", TensorProto.FLOAT, [3])], domains=())
    sess = session(data)
    for _ in range(4):  # recorded, then answered by the binding's native program (the kernel a Python step there)
        (y,) = sess.run(None, {"x": np.ones(3, F32)})
        assert (y == -1).all()
    with pytest.raises(Exception, match=r"the user kernel .*picky raised OverflowError: too large"):
        sess.run(None, {"x": np.full(3, 1000, F32)})
    (y,) = sess.run(None, {"x": np.ones(3, F32)})  # the session goes on
    assert (y == -1).all()


def test_a_shape_rule_that_disagrees_with_the_model_fails_the_session():
    seamless.register_kernel("Neg", lambda x: -x, shape=lambda s: [(s[0] + 1,)])
    data = model([helper.make_node("Neg", ["x"], ["y"])], [("x", TensorProto.FLOAT, [3])],
                 [("y", TensorProto.FLOAT, [3])], domains=())
    with pytest.raises(Exception, match=r"shape rule says \(4,\) for output 0 \('y'\); the model declares \(3,\)"):
        ep_session(data)


@pytest.mark.parametrize("how,error", [
    (dict(fn=3), "fn must be callable"),
    (dict(fn=lambda x: x, domain="ai.seamless"), "the EP's own"),
    (dict(fn=lambda x: x, since=5, until=2), "opset range"),
    (dict(fn=lambda x, *, _hidden=1: x), "start with '_'"),
    (dict(fn=lambda x: x, domain="my.domain"), "declare the op's schema"),
    (dict(fn=lambda x: x, domain="my.domain", inputs=[F32, F32], outputs=[F32]), "does not take that many"),
    (dict(fn=lambda x, y: x, domain="my.domain", inputs=[None, None], outputs=[None]), "one input of any type"),
    (dict(fn=lambda x: x, domain="my.domain", inputs=["no such type"], outputs=[F32]), "not a numpy dtype"),
    (dict(fn=lambda x: x, inputs=[F32], outputs=[F32]), "ORT has the schema of ai.onnx::Op"),
    (dict(fn=lambda x: x, shape=7), "shape must be callable"),
    (dict(fn=lambda x: x, domain="my.domain", inputs=[F32], outputs=[F32], optional_inputs=2), "must count some"),
    (dict(fn=lambda x: x, optional_inputs=1), "ORT has the schema of ai.onnx::Op"),
])
def test_bad_registrations_are_refused_at_once(how, error):
    if "domain" in how and how["domain"] == "my.domain" and ORT_VERSION < (1, 24):
        error = "needs onnxruntime >= 1.24"
    fn = how.pop("fn")
    with pytest.raises((ValueError, TypeError), match=error):
        seamless.register_kernel("Op", fn, **how)
    from onnxruntime_ep_seamless.kernels import user
    assert not user.registered_kernels()


# --- CUDA kernels: what is checked without a GPU -------------------------------------------------

def _cuda_noop(stream, inputs, outputs, **attrs):
    pass


@pytest.mark.parametrize("how,error", [
    (dict(fn=_cuda_noop), "needs a shape rule"),
    (dict(fn=_cuda_noop, shape=lambda s: [s], capture="sometimes"), "capture must be one of"),
    (dict(fn=lambda x: x, shape=lambda s: [s]), r"fn\(stream, inputs, outputs, \*\*attributes\)"),
    (dict(fn=_cuda_noop, shape=lambda s: [s], device="tpu"), "device must be 'cpu' or 'cuda'"),
])
def test_bad_cuda_registrations_are_refused_at_once(how, error):
    how.setdefault("device", "cuda")
    with pytest.raises(ValueError, match=error):
        seamless.register_kernel("Op", how.pop("fn"), **how)


@pytest.mark.parametrize("capture,seams", [("static", 0), ("device-indexed", 0), ("host", 1)])
def test_a_user_cuda_kernel_is_placed_on_the_gpu_with_its_capture_class(capture, seams):
    # the capture report (no GPU needed): a static kernel is no seam; one that reads GPU values on the host is
    from onnx import load_from_string

    from onnxruntime_ep_seamless.graph.onnx_import import import_model
    from onnxruntime_ep_seamless.tools.capture_report import analyse
    seamless.register_kernel("Gelu", _cuda_noop, device="cuda", shape=lambda s: [s], capture=capture)
    data = model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Gelu", ["r"], ["g"]),
                  helper.make_node("Neg", ["g"], ["y"])], [("x", TensorProto.FLOAT, [4])],
                 [("y", TensorProto.FLOAT, [4])], domains=(), opset=20)
    parts, declined = analyse(import_model(load_from_string(data)))
    (part,) = parts
    (gelu,) = [s for s in part.steps if s.node.op_type == "Gelu"]
    assert gelu.on_gpu and gelu.kdef.user and gelu.kdef.capture == capture
    assert sum(bool(s.seam) for s in part.steps) == seams and not declined
