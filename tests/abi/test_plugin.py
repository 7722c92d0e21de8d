"""The plugin library as ORT sees it: loading, registration, errors, threads, lifecycle."""
import ctypes
import os
import subprocess
import sys
import textwrap

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxruntime_ep_seamless as seamless
from onnxruntime_ep_seamless.kernels import registry
from parity import assert_parity, ep_session

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def chain_model(ops=("Add", "Mul", "Sub"), n=16):
    nodes, prev = [], "x"
    for i, op in enumerate(ops):
        nodes.append(helper.make_node(op, [prev, "y"], [f"t{i}"]))
        prev = f"t{i}"
    nodes[-1].output[0] = "z"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", 1, ["N", n]),
                                               helper.make_tensor_value_info("y", 1, [n])],
                              [helper.make_tensor_value_info("z", 1, ["N", n])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def run_python(code: str, timeout=120):
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_public_api():
    path = seamless.get_library_path()
    assert os.path.isabs(path) and os.path.isfile(path)
    assert seamless.get_ep_name() == "SeamlessCPUExecutionProvider"
    assert seamless.get_ep_names() == ["SeamlessCPUExecutionProvider", "SeamlessCUDAExecutionProvider"]
    assert seamless.register() == path
    assert seamless.register() == path  # idempotent
    with pytest.raises(ValueError, match="unknown device"):
        seamless.get_library_path("tpu")


def test_library_exports_only_the_entry_points():
    out = subprocess.run(["nm", "-D", "--defined-only", seamless.get_library_path()], capture_output=True, text=True)
    if out.returncode:
        pytest.skip("nm not available")
    symbols = {line.split()[-1] for line in out.stdout.splitlines() if " T " in line}
    assert symbols == {"CreateEpFactories", "ReleaseEpFactory"}


def test_import_has_no_side_effects():
    out = run_python("import sys, onnxruntime_ep_seamless; print('onnxruntime' in sys.modules)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_chain_parity_and_every_node_on_our_ep():
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    y = np.linspace(-1, 1, 16, dtype=np.float32)
    assert_parity(chain_model(), {"x": x, "y": y})


def test_symbolic_batch_reuses_one_compiled_node():
    sess = ep_session(chain_model())
    for batch in (1, 4, 7):
        x = np.ones((batch, 16), np.float32)
        (z,) = sess.run(None, {"x": x, "y": np.ones(16, np.float32)})
        assert z.shape == (batch, 16)
        np.testing.assert_array_equal(z, np.full((batch, 16), 1.0, np.float32))  # ((1+1)*1)-1


def test_inputs_are_not_modified():
    x = np.arange(16, dtype=np.float32).reshape(1, 16)
    y = np.ones(16, np.float32)
    before = (x.copy(), y.copy())
    ep_session(chain_model()).run(None, {"x": x, "y": y})
    np.testing.assert_array_equal(x, before[0])
    np.testing.assert_array_equal(y, before[1])


def test_large_constants_are_copied_whole_in_parts(monkeypatch, tmp_path):
    """A constant past abi/ep.py's COPY_SHARE is copied out of ORT's memory in parts on several threads (here from
    the model's external data file, which ORT maps): every byte, parts not on a 4 KiB multiple included."""
    from onnx import numpy_helper
    import onnx
    from onnxruntime_ep_seamless.abi import ep
    monkeypatch.setattr(ep, "COPY_SHARE", 1 << 16)
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    rng = np.random.default_rng(3)
    w = rng.standard_normal((1000, 1030)).astype(np.float32)  # 4,120,000 bytes
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1000])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1030])],
                              [numpy_helper.from_array(w, "w")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(path),
              save_as_external_data=True, location="m.data")
    x = rng.standard_normal((2, 1000)).astype(np.float32)
    (y,) = ep_session(str(path)).run(None, {"x": x})
    np.testing.assert_allclose(y, x @ w, rtol=1e-5, atol=1e-4)


def test_unsupported_node_runs_on_cpu_with_a_reason():
    # string tensors cannot be held by the numpy executor: that Cast must go to ORT's CPU EP,
    # and the report must say why
    nodes = [helper.make_node("Add", ["x", "x"], ["a"]), helper.make_node("Cast", ["a"], ["s"], to=TensorProto.STRING),
             helper.make_node("Neg", ["a"], ["z"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [2, 3])],
                              [helper.make_tensor_value_info("s", TensorProto.STRING, [2, 3]),
                               helper.make_tensor_value_info("z", 1, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    sess = ort.InferenceSession(model.SerializeToString(), seamless.session_options())
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    s, z = sess.run(None, {"x": x})
    np.testing.assert_array_equal(z, -2 * x)
    assert s.shape == (2, 3) and float(s[1][2]) == 10.0  # the string Cast, computed by ORT's CPU EP
    report = seamless.partition_report(sess)
    assert sorted(op for _, op in report.ep_nodes) == ["Add", "Neg"]
    assert [(op, ep) for _, op, ep in report.fallback_nodes] == [("Cast", "CPUExecutionProvider")]
    (name, op, _), = report.fallback_nodes
    assert "string" in report.declined[(name, op)]
    assert "Cast" in str(report)
    # with fallback disabled the same model is refused, not silently run elsewhere
    with pytest.raises(Exception, match="CPU"):
        ep_session(model)


def test_kernel_exception_names_ep_and_node(monkeypatch):
    def boom(x):
        raise ValueError("injected failure")
    original = registry._REGISTRY[("cpu", "", "Neg")]
    fake = registry.KernelDef("Neg", "", 1, registry.OPSET_MAX, boom, None, 0, None, frozenset(), frozenset(), "cpu")
    monkeypatch.setitem(registry._REGISTRY, ("cpu", "", "Neg"), [fake] + original)
    node = helper.make_node("Neg", ["x"], ["y"], name="my_neg")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, [2])],
                              [helper.make_tensor_value_info("y", 1, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    sess = ep_session(model)
    with pytest.raises(Exception) as info:
        sess.run(None, {"x": np.ones(2, np.float32)})
    text = str(info.value)
    assert "SeamlessCPUExecutionProvider" in text and "my_neg" in text and "injected failure" in text
    assert type(info.value).__name__ != "EPFail"  # EPFail would make onnxruntime rebuild the session on CPU
    # the session still belongs to our EP afterwards (no silent switch to CPU)
    assert sess.get_providers()[0] == "SeamlessCPUExecutionProvider"


def optional_model():
    """Optional's attribute `type` is a TYPE_PROTO, which ORT's C API cannot describe ("Unexpected attribute
    type"): that node is declined, OptionalHasElement is ours."""
    nodes = [helper.make_node("Optional", [], ["o"], type=helper.make_tensor_type_proto(TensorProto.FLOAT, [2])),
             helper.make_node("OptionalHasElement", ["o"], ["h"])]
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("h", TensorProto.BOOL, [])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def test_unknown_option_is_an_error_naming_valid_keys():
    with pytest.raises(ValueError, match="valid options: .*log_partition"):
        seamless.session_options(no_such_option=1)
    # passed past our Python helper straight to ORT, it still fails at session creation, whether our EP
    # supports every node of the model or none
    for model in (chain_model(), optional_model()):
        for options, message in (({"no_such_option": "1"}, "unknown provider option.*no_such_option"),
                                 ({"log_partition": "maybe"}, "invalid value for option 'log_partition'")):
            so = ort.SessionOptions()
            so.add_provider_for_devices(seamless.get_devices(), options)
            with pytest.raises(Exception, match=message):
                ort.InferenceSession(model.SerializeToString(), so)


def test_bad_option_value():
    with pytest.raises(ValueError, match="log_partition.*1/true/yes/on or 0/false/no/off"):
        seamless.session_options(log_partition="maybe")


def test_environment_variables_empty_means_unset_and_flags_read_alike(monkeypatch):
    x = {"x": np.ones((1, 16), np.float32), "y": np.ones(16, np.float32)}
    monkeypatch.setenv("SEAMLESS_LOG_PARTITION", "")
    ep_session(chain_model()).run(None, x)
    for bad in ("SEAMLESS_LOG_PARTITION", "SEAMLESS_TRACEBACK", "SEAMLESS_AMX"):
        with monkeypatch.context() as env:
            env.setenv(bad, "maybe")
            with pytest.raises(ValueError, match=f"environment variable {bad}: expected 1/true/yes/on"):
                seamless.session_options()
            so = ort.SessionOptions()  # through ORT's API: at session creation
            so.add_provider_for_devices(seamless.get_devices(), {})
            with pytest.raises(Exception, match=f"environment variable {bad}"):
                ort.InferenceSession(chain_model().SerializeToString(), so)
    # SEAMLESS_TRACEBACK takes the options' spellings: a kernel error then carries the traceback
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Reshape", ["x", "s"], ["z"], name="bad_reshape")], "g",
        [helper.make_tensor_value_info("x", 1, ["N", 3])], [helper.make_tensor_value_info("z", 1, None)],
        [helper.make_tensor("s", TensorProto.INT64, [1], [5])]), opset_imports=[helper.make_opsetid("", 17)],
        ir_version=9)
    sess = ep_session(model)
    for value, traceback in (("yes", True), ("ON", True), ("", False), ("no", False)):
        monkeypatch.setenv("SEAMLESS_TRACEBACK", value)
        with pytest.raises(Exception, match="bad_reshape") as info:
            sess.run(None, {"x": np.ones((2, 3), np.float32)})
        assert ("Traceback (most recent call last)" in str(info.value)) == traceback, (value, str(info.value))


def test_unreadable_attribute_declines_only_its_node():
    """An attribute ORT's C API cannot describe made the whole GetCapability fail (0 nodes claimed)."""
    model = optional_model()
    model.graph.node.append(helper.make_node("Neg", ["v"], ["w"]))
    model.graph.input.append(helper.make_tensor_value_info("v", 1, [2]))
    model.graph.output.append(helper.make_tensor_value_info("w", 1, [2]))
    sess = ort.InferenceSession(model.SerializeToString(), seamless.session_options())
    h, w = sess.run(None, {"v": np.ones(2, np.float32)})
    assert not h and w.tolist() == [-1, -1]
    report = seamless.partition_report(sess)
    assert sorted(op for _, op in report.ep_nodes) == ["Neg", "OptionalHasElement"]
    assert list(report.declined.values()) == ["attribute(s) ['type'] have a type the EP does not read (a graph, "
                                              "a type)"]


def test_unreadable_attribute_is_read_as_unreadable():
    """The graph reader's side of it: type -1 (glue.c put_attr_or_unreadable) reads as UNREADABLE, which
    the registry declines with a reason."""
    import struct
    from onnxruntime_ep_seamless.graph.ir import UNREADABLE
    from onnxruntime_ep_seamless.graph.reader import read_graph
    from onnxruntime_ep_seamless.partition import partition

    def text(s):
        return struct.pack("<i", len(s)) + s.encode()

    def value(name):  # a float tensor of shape [2], not constant
        return text(name) + struct.pack("<iiiq", 1, 1, 1, 2) + text("") + struct.pack("<i", 0)

    count = lambda n: struct.pack("<i", n)
    node = (text("neg") + text("Neg") + text("") + count(13) + count(1) + value("x") + count(1) + value("y")
            + count(1) + text("odd") + struct.pack("<i", -1) + count(0))
    data = count(0) + count(0) + count(1) + value("x") + count(1) + value("y") + count(0) + count(1) + node
    graph, _, _ = read_graph(data)
    assert graph.nodes[0].attrs == {"odd": UNREADABLE}
    result = partition(graph, "cpu")
    assert not result.groups and "['odd']" in next(iter(result.declined.values()))


def test_cublas_is_never_loaded_from_the_current_directory(tmp_path, monkeypatch):
    import ctypes
    from onnxruntime_ep_seamless.runtime import cuda
    for sub in ("nvidia/cu13/lib", "nvidia/cublas/lib"):
        (tmp_path / sub).mkdir(parents=True)
        (tmp_path / sub / "libcublasLt.so.13").write_bytes(b"not a library")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend("")  # as `python -c` and the REPL have it
    candidates = cuda.cublas_candidates()
    assert candidates and all(os.path.isabs(c) and not c.startswith(str(tmp_path)) for c in candidates), candidates
    loaded = []
    monkeypatch.setattr(ctypes, "CDLL", lambda path, mode=0: loaded.append(path))
    cuda.preload_cublas()
    assert not any(os.path.abspath(p).startswith(str(tmp_path)) for p in loaded), loaded


def test_cuda_only_options_are_validated_without_a_gpu():
    from onnxruntime_ep_seamless.runtime.options import OptionError, validate
    cuda = "SeamlessCUDAExecutionProvider"
    assert validate(cuda, {"capture": "AUTO", "enable_cuda_graph": "1", "log_capture": "0"}) == {
        "log_partition": False, "fusion": True, "native_program": True, "device_id": None, "log_capture": False,
        "capture": "auto", "enable_cuda_graph": True}
    for key, value in (("capture", "on"), ("enable_cuda_graph", "maybe")):
        with pytest.raises(OptionError, match=key):
            validate(cuda, {key: value})
    with pytest.raises(OptionError, match="unknown provider option.*enable_cuda_graph"):
        validate("SeamlessCPUExecutionProvider", {"enable_cuda_graph": "1"})  # the CPU EP has no CUDA graphs


def test_runtime_below_floor_is_refused_with_a_clear_error():
    """Drive the library's entry with a fake ORT 1.22 and capture the status message it creates."""
    messages = []
    create_status = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)(
        lambda code, msg: messages.append((code, msg.decode())) or 1234)
    table = (ctypes.c_void_p * 1)(ctypes.cast(create_status, ctypes.c_void_p))
    get_api = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_uint32)(lambda v: ctypes.addressof(table) if v == 1 else None)
    version_text = ctypes.create_string_buffer(b"1.22.1")
    version = ctypes.CFUNCTYPE(ctypes.c_void_p)(lambda: ctypes.addressof(version_text))
    base = (ctypes.c_void_p * 2)(ctypes.cast(get_api, ctypes.c_void_p), ctypes.cast(version, ctypes.c_void_p))
    lib = ctypes.CDLL(seamless.get_library_path())
    lib.CreateEpFactories.restype = ctypes.c_void_p
    factories = (ctypes.c_void_p * 4)()
    count = ctypes.c_size_t(99)
    status = lib.CreateEpFactories(b"probe", ctypes.byref(base), None, factories, 4, ctypes.byref(count))
    assert status == 1234 and count.value == 0
    (code, msg), = messages
    assert code == 1 and ">= 1.23" in msg and "1.22.1" in msg and "pip install" in msg


def test_missing_cffi_is_a_clear_error_not_a_crash():
    out = run_python("""
        import sys
        sys.modules["_cffi_backend"] = None  # as if cffi were not installed
        import onnxruntime_ep_seamless as seamless
        try:
            seamless.register()
        except Exception as exc:
            print(exc)
        """)
    assert out.returncode == 0, out.stderr
    assert "'cffi' is not installed" in out.stdout and "pip install cffi" in out.stdout


def test_four_threads_one_session_exact_results():
    out = run_python("""
        import threading, numpy as np, onnxruntime as ort, onnxruntime_ep_seamless as seamless
        from onnx import TensorProto, helper
        nodes = [helper.make_node("Mul", ["x", "y"], ["t"]), helper.make_node("Add", ["t", "x"], ["z"])]
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, ["N", 8]),
                                            helper.make_tensor_value_info("y", 1, [8])],
                              [helper.make_tensor_value_info("z", 1, ["N", 8])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
        so = seamless.session_options(); so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        sess = ort.InferenceSession(m.SerializeToString(), so)
        errors = []
        def work(seed):
            rng = np.random.default_rng(seed)
            for _ in range(300):
                x = rng.standard_normal((int(rng.integers(1, 6)), 8)).astype(np.float32)
                y = rng.standard_normal(8).astype(np.float32)
                (z,) = sess.run(None, {"x": x, "y": y})
                if not np.array_equal(z, x * y + x):
                    errors.append(seed)
        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        [t.start() for t in threads]; [t.join(90) for t in threads]
        assert not any(t.is_alive() for t in threads), "deadlock"
        print("errors", errors)
        """, timeout=150)
    assert out.returncode == 0, out.stderr
    assert "errors []" in out.stdout


def test_exit_with_live_sessions_is_clean():
    out = run_python("""
        import numpy as np, onnxruntime as ort, onnxruntime_ep_seamless as seamless
        from onnx import TensorProto, helper
        g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", 1, [2])], [helper.make_tensor_value_info("y", 1, [2])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString()
        GLOBAL = ort.InferenceSession(m, seamless.session_options())
        GLOBAL.run(None, {"x": np.ones(2, np.float32)})
        class Cycle: pass
        c = Cycle(); c.me = c; c.sess = ort.InferenceSession(m, seamless.session_options())
        print("ok")
        """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
    assert "Traceback" not in out.stderr and "Exception ignored" not in out.stderr


def test_unregister_then_register_again():
    out = run_python("""
        import gc, numpy as np, onnxruntime as ort, onnxruntime_ep_seamless as seamless
        from onnx import TensorProto, helper
        g = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", 1, [2])], [helper.make_tensor_value_info("y", 1, [2])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString()
        for cycle in range(3):
            so = seamless.session_options(); so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
            sess = ort.InferenceSession(m, so)
            assert sess.run(None, {"x": np.ones(2, np.float32)})[0].tolist() == [-1, -1]
            del sess, so; gc.collect()
            seamless.unregister()
        print("ok")
        """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


@pytest.mark.skipif(tuple(map(int, ort.__version__.split(".")[:2])) < (1, 25),
                    reason="plugin EPs are selectable by name from onnxruntime 1.25")
def test_selectable_by_name_in_providers():
    seamless.register()
    sess = ort.InferenceSession(chain_model().SerializeToString(),
                                providers=[("SeamlessCPUExecutionProvider", {}), "CPUExecutionProvider"])
    assert sess.get_providers()[0] == "SeamlessCPUExecutionProvider"
    (z,) = sess.run(None, {"x": np.ones((1, 16), np.float32), "y": np.ones(16, np.float32)})
    np.testing.assert_array_equal(z, np.ones((1, 16), np.float32))


def test_both_distributions_installed_warns(monkeypatch):
    from importlib import metadata
    monkeypatch.setattr(metadata, "version", lambda name: "0.1.0")  # as if both were installed
    with pytest.warns(RuntimeWarning, match="both onnxruntime-ep-seamless 0.1.0 and onnxruntime-ep-seamless-cu13"):
        seamless._warn_if_both_installed()


def test_registers_after_capsule_lookups():
    """cffi's start-up on Python <= 3.11 aborted the process when a capsule's type had been looked
    up before (torch does that at import); the library resets that state first."""
    out = run_python("""
        import datetime
        getattr(datetime.datetime_CAPI, "anything", None)  # a type-attribute lookup on PyCapsule
        import onnxruntime_ep_seamless as seamless
        seamless.register("cpu"); seamless.register("cuda")
        print("ok")
        """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def _planned_ops(session_options, model, feeds):
    """The op types the CPU EP's plans run for a model (every plan compiled for the session)."""
    import gc
    from onnxruntime_ep_seamless.exec.compute import CompiledKernel
    session_options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # ORT's fusions off
    gc.collect()
    before = {id(k) for k in gc.get_objects() if isinstance(k, CompiledKernel)}
    sess = ort.InferenceSession(model.SerializeToString(), session_options)
    out = sess.run(None, feeds)
    kernels = [k for k in gc.get_objects() if isinstance(k, CompiledKernel) and id(k) not in before]
    return [n.op_type for k in kernels for n in k.plan.nodes], out


@pytest.mark.parametrize("how", ["option", "environment"])
def test_fusion_0_runs_every_node_as_its_own_kernel(how, monkeypatch):
    from onnx import numpy_helper
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    model = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["a", "w"], ["p"]), helper.make_node("Add", ["p", "b"], ["y"])], "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    feeds = {"a": rng.standard_normal((2, 8)).astype(np.float32)}
    fused, (y_fused,) = _planned_ops(seamless.session_options(), model, feeds)
    assert fused == ["MatMulBias"]
    if how == "option":
        so = seamless.session_options(fusion="0")
    else:
        monkeypatch.setenv("SEAMLESS_FUSION", "off")
        so = seamless.session_options()
    apart, (y_apart,) = _planned_ops(so, model, feeds)
    assert apart == ["MatMul", "Add"]
    np.testing.assert_allclose(y_apart, feeds["a"] @ w + b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y_fused, y_apart, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="invalid value for option 'fusion'"):
        seamless.session_options(fusion="sometimes")


def test_fusion_0_places_every_node_as_it_is_on_cuda():
    """The CUDA executor's placement (no GPU needed) takes the same option."""
    from onnx import numpy_helper
    from onnxruntime_ep_seamless.exec.cuda_capture import place
    from onnxruntime_ep_seamless.graph.onnx_import import import_model
    w = np.ones((8, 16), np.float16)
    model = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["a", "w"], ["y"])], "g", [helper.make_tensor_value_info("a", 10, [1, 8])],
        [helper.make_tensor_value_info("y", 10, [1, 16])], [numpy_helper.from_array(w, "w")]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    assert [s.node.op_type for s in place(import_model(model), ["a"], ["y"])] == ["Linear"]
    assert [s.node.op_type for s in place(import_model(model), ["a"], ["y"], fusion=False)] == ["MatMul"]
