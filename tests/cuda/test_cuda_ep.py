"""The CUDA variant on an NVIDIA GPU (skipped without one): devices, memory, copies, streams,
IO binding with the plain onnxruntime wheel, and parity of the CUDA kernels with stock ORT CPU."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxruntime_ep_seamless as seamless
from parity import assert_close, stock_session

EP = "SeamlessCUDAExecutionProvider"


def _devices():
    try:
        return seamless.get_devices("cuda"), ""
    except Exception as exc:  # no library built, no driver...
        return [], str(exc)


DEVICES, PROBLEM = _devices()
needs_gpu = pytest.mark.skipif(not DEVICES, reason=f"no NVIDIA GPU for the CUDA EP ({PROBLEM or 'none found'})")


def cuda_session(model, **options):
    so = seamless.session_options(device="cuda", **options)
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    return ort.InferenceSession(model.SerializeToString() if hasattr(model, "SerializeToString") else model, so)


def run_on_cuda(model, feeds):
    sess = cuda_session(model)
    report = seamless.assert_ep_selected(sess, device="cuda")
    assert not report.fallback_nodes, report
    return sess.run(None, feeds)


def in_bfloat16(model, names=None):
    """A copy of a float32 model whose nodes compute in bfloat16 on our EP (ORT's Python API takes no
    bfloat16 arrays): the float32 graph inputs and initializers (or only `names`) are cast to
    bfloat16 on the GPU where the nodes read them, and each float32 graph output is cast back."""
    from onnx import ModelProto, TensorProto
    copy = ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    if names is None:
        names = {i.name for i in graph.input if i.type.tensor_type.elem_type == TensorProto.FLOAT}
        names |= {i.name for i in graph.initializer if i.data_type == TensorProto.FLOAT}
    outputs = {o.name for o in graph.output if o.type.tensor_type.elem_type == TensorProto.FLOAT}
    before = [helper.make_node("Cast", [n], [n + "_bf16"], to=TensorProto.BFLOAT16) for n in sorted(names)]
    after = []
    for node in graph.node:
        node.input[:] = [n + "_bf16" if n in names else n for n in node.input]
        for i, n in enumerate(node.output):
            if n in outputs:
                node.output[i] = n + "_bf16"
                after.append(helper.make_node("Cast", [n + "_bf16"], [n], to=TensorProto.FLOAT))
    nodes = before + list(graph.node) + after
    del graph.node[:]
    graph.node.extend(nodes)
    return copy


def model_of(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_without_gpu_the_error_says_why():
    if DEVICES:
        pytest.skip("this machine has a GPU")
    with pytest.raises(RuntimeError, match="SeamlessCUDAExecutionProvider offers no device"):
        seamless.session_options(device="cuda")


@needs_gpu
def test_one_device_per_gpu_with_its_memory():
    for d in DEVICES:
        assert d.ep_name == EP and d.device.vendor_id == 0x10DE
        assert d.ep_metadata["cuda_device_name"] and "." in d.ep_metadata["cuda_compute_capability"]
        info = d.memory_info(ort.OrtDeviceMemoryType.DEFAULT)
        assert info is not None


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_binary_broadcast_parity(op, dtype):
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = model_of([helper.make_node(op, ["a", "b"], ["y"])],
                     [helper.make_tensor_value_info("a", t, [2, 3, 4]), helper.make_tensor_value_info("b", t, [4])],
                     [helper.make_tensor_value_info("y", t, [2, 3, 4])])
    rng = np.random.default_rng(0)
    feeds = {"a": rng.standard_normal((2, 3, 4)).astype(dtype), "b": (rng.random(4) + 0.5).astype(dtype)}
    (ours,) = run_on_cuda(model, feeds)
    (ref,) = stock_session(model).run(None, feeds)
    # float16: computed in float32 and rounded once, as ORT's CPU EP does; one ulp of slack for Div
    assert_close(ours, ref, rtol=1e-6 if dtype == np.float32 else 1e-3, atol=0)


@needs_gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("op", ["Max", "Min"])
def test_max_min_broadcast_and_nan(op, dtype):
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = model_of([helper.make_node(op, ["a", "b"], ["y"])],
                     [helper.make_tensor_value_info("a", t, [3, 4]), helper.make_tensor_value_info("b", t, [4])],
                     [helper.make_tensor_value_info("y", t, [3, 4])])
    rng = np.random.default_rng(6)
    a = rng.standard_normal((3, 4)).astype(dtype)
    a[1, 2] = np.nan
    feeds = {"a": a, "b": np.array([0.0, np.nan, -1.0, 2.0], dtype)}
    (ours,) = run_on_cuda(model, feeds)
    (ref,) = stock_session(model).run(None, feeds)
    np.testing.assert_array_equal(ours, ref)  # a selection: exact, NaN where either operand is NaN


@needs_gpu
def test_unary_chain_and_reshapes_parity():
    shape = numpy_helper.from_array(np.array([3, -1], np.int64), "shape")
    nodes = [helper.make_node("Exp", ["x"], ["e"]), helper.make_node("Tanh", ["e"], ["t"]),
             helper.make_node("Reshape", ["t", "shape"], ["r"]), helper.make_node("Sigmoid", ["r"], ["s"]),
             helper.make_node("Neg", ["s"], ["n"]), helper.make_node("Relu", ["n"], ["y"]),
             helper.make_node("Sqrt", ["s"], ["q"])]
    model = model_of(nodes, [helper.make_tensor_value_info("x", 1, [2, 6])],
                     [helper.make_tensor_value_info("y", 1, [3, 4]), helper.make_tensor_value_info("q", 1, [3, 4])],
                     [shape])
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 6)).astype(np.float32)}
    ours = run_on_cuda(model, feeds)
    ref = stock_session(model).run(None, feeds)
    for o, r in zip(ours, ref):
        assert_close(o, r, rtol=1e-5, atol=1e-6)  # CUDA's expf/tanhf differ from MLAS by a few ulps


@needs_gpu
def test_io_binding_on_gpu_with_plain_onnxruntime():
    model = model_of([helper.make_node("Mul", ["x", "x"], ["y"])], [helper.make_tensor_value_info("x", 1, ["n"])],
                     [helper.make_tensor_value_info("y", 1, ["n"])])
    sess = cuda_session(model)
    mem = DEVICES[0].memory_info(ort.OrtDeviceMemoryType.DEFAULT)
    x = np.arange(1000, dtype=np.float32) / 100
    x_gpu = ort.OrtValue.ortvalue_from_shape_and_type(x.shape, np.float32, memory_info=mem)
    x_gpu.update_inplace(x)
    y_gpu = ort.OrtValue.ortvalue_from_shape_and_type(x.shape, np.float32, memory_info=mem)
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", x_gpu)
    binding.bind_ortvalue_output("y", y_gpu)
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(y_gpu.numpy(), x * x)
    assert "cuda" in y_gpu.device_name().lower()


@needs_gpu
def test_outputs_chain_between_runs_without_host_copies():
    model = model_of([helper.make_node("Add", ["x", "one"], ["y"])], [helper.make_tensor_value_info("x", 1, [4])],
                     [helper.make_tensor_value_info("y", 1, [4])],
                     [numpy_helper.from_array(np.ones(4, np.float32), "one")])
    sess = cuda_session(model)
    mem = DEVICES[0].memory_info(ort.OrtDeviceMemoryType.DEFAULT)
    value = ort.OrtValue.ortvalue_from_shape_and_type((4,), np.float32, memory_info=mem)
    value.update_inplace(np.zeros(4, np.float32))
    for _ in range(10):
        binding = sess.io_binding()
        binding.bind_ortvalue_input("x", value)
        binding.bind_ortvalue_output("y", ort.OrtValue.ortvalue_from_shape_and_type((4,), np.float32,
                                                                                     memory_info=mem))
        sess.run_with_iobinding(binding)
        value = binding.get_outputs()[0]
    np.testing.assert_array_equal(value.numpy(), np.full(4, 10, np.float32))


@needs_gpu
def test_small_and_large_outputs_reach_ort():
    """A partition's outputs are copied into ORT's tensors, the small ones by one staging launch,
    one of 4 MiB and more by the copy engines; an odd byte count and an empty output too."""
    nodes = [helper.make_node("Relu", ["x"], ["big"]), helper.make_node("Neg", ["w"], ["small"]),
             helper.make_node("Cast", ["w"], ["odd"], to=10), helper.make_node("Relu", ["e"], ["empty"])]
    f32 = lambda n, shape: helper.make_tensor_value_info(n, 1, shape)
    model = model_of(nodes, [f32("x", [1100, 1024]), f32("w", [3, 5]), f32("e", [0, 4])],
                     [f32("big", [1100, 1024]), f32("small", [3, 5]), helper.make_tensor_value_info("odd", 10, [3, 5]),
                      f32("empty", [0, 4])])
    rng = np.random.default_rng(4)
    feeds = {"x": rng.standard_normal((1100, 1024)).astype(np.float32),
             "w": rng.standard_normal((3, 5)).astype(np.float32), "e": np.zeros((0, 4), np.float32)}
    sess = cuda_session(model)
    assert not seamless.assert_ep_selected(sess, device="cuda").fallback_nodes
    for _ in range(4):  # eager twice, then captured (capture=auto) and launched
        big, small, odd, empty = sess.run(None, feeds)
        np.testing.assert_array_equal(big, np.maximum(feeds["x"], 0))
        np.testing.assert_array_equal(small, -feeds["w"])
        np.testing.assert_array_equal(odd, feeds["w"].astype(np.float16))
        assert empty.shape == (0, 4)


@needs_gpu
def test_many_host_inputs_and_outputs_in_one_batch_from_several_threads():
    """ORT copies a run's host inputs, and its outputs, as one batch each: those up to 4 MiB go
    through one pinned bounce buffer and the staging kernel, a larger one by its own copy. Sizes from
    one byte to above the limit, several dtypes, and four threads sharing the bounce buffers (of
    every GPU the machine has)."""
    import threading
    kinds = [(np.float32, 1, "Neg"), (np.float16, 10, "Neg"), (bool, 9, "Not"), (np.int64, 7, "Neg"),
             (np.int32, 6, "Neg")]
    sizes = [1, 3, 7, 16, 17, 255, 4096, 18432, 300001, (4 << 20) // 4 + 5]  # the last is above the limit as float32
    names = [(f"x{i}", *kinds[i % len(kinds)], n) for i, n in enumerate(sizes * 2)]
    model = model_of([helper.make_node(op, [n], ["y" + n[1:]]) for n, _, _, op, _ in names],
                     [helper.make_tensor_value_info(n, proto, [k]) for n, _, proto, _, k in names],
                     [helper.make_tensor_value_info("y" + n[1:], proto, [k]) for n, _, proto, _, k in names])
    sessions = [cuda_session(model, capture="off", device_id=int(d.ep_metadata["cuda_device_id"])) for d in DEVICES]
    assert not seamless.assert_ep_selected(sessions[0], device="cuda").fallback_nodes
    failures = []

    def work(seed):  # on each GPU in turn: every GPU has its own bounce buffers
        rng, sess = np.random.default_rng(seed), sessions[seed % len(sessions)]
        try:
            for _ in range(6):
                feeds = {n: rng.integers(-100, 100, k).astype(t) for n, t, _, _, k in names}
                for (n, t, _, _, _), y in zip(names, sess.run(None, feeds)):
                    np.testing.assert_array_equal(y, ~feeds[n] if t is bool else -feeds[n], err_msg=n)
        except Exception as e:  # reported by the main thread
            failures.append(e)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[0]


@needs_gpu
def test_a_large_batch_moves_in_chunks_copied_by_several_host_threads():
    """A decoder's host KV cache as onnxruntime-genai binds it (48 float16 tensors of 640 KiB, ~30 MB each way): the
    batch moves in 1 MiB chunks (tensors straddle them) that up to four host threads copy while the DMA engine moves
    the chunks copied before (ep_plugin/cuda_ort.c batch_pass); every byte arrives, both ways."""
    names = [f"x{i}" for i in range(48)]
    n = 640 * 1024 // 2 + 37  # odd: each tensor's end falls inside a chunk
    model = model_of([helper.make_node("Neg", [x], ["y" + x[1:]]) for x in names],
                     [helper.make_tensor_value_info(x, TensorProto.FLOAT16, [n]) for x in names],
                     [helper.make_tensor_value_info("y" + x[1:], TensorProto.FLOAT16, [n]) for x in names])
    sess = cuda_session(model, capture="off")
    rng = np.random.default_rng(5)
    for _ in range(3):
        feeds = {x: rng.standard_normal(n).astype(np.float16) for x in names}
        for x, y in zip(names, sess.run(None, feeds)):
            np.testing.assert_array_equal(y, -feeds[x], err_msg=x)


@needs_gpu
def test_each_gpu_by_device_id_gives_exact_results():
    model = model_of([helper.make_node("Mul", ["x", "x"], ["y"])], [helper.make_tensor_value_info("x", 1, ["n"])],
                     [helper.make_tensor_value_info("y", 1, ["n"])])
    x = np.arange(257, dtype=np.float32) / 7
    for d in DEVICES:
        gpu = int(d.ep_metadata["cuda_device_id"])
        so = seamless.session_options(device="cuda", device_id=gpu)
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        sess = ort.InferenceSession(model.SerializeToString(), so)
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_array_equal(y, x * x)


@needs_gpu
def test_device_id_that_contradicts_the_device_is_an_error():
    so = ort.SessionOptions()
    so.add_provider_for_devices(DEVICES[:1], {"device_id": str(len(DEVICES))})
    model = model_of([helper.make_node("Neg", ["x"], ["y"])], [helper.make_tensor_value_info("x", 1, [2])],
                     [helper.make_tensor_value_info("y", 1, [2])])
    with pytest.raises(Exception, match="device_id"):
        ort.InferenceSession(model.SerializeToString(), so)


@needs_gpu
@pytest.mark.parametrize("starts,ends,steps", [([0], [2**63 - 1], [-1]), ([-1], [-6], [-1]), ([1], [3], [1]),
                                               ([4], [0], [-2])])
def test_slice_parity(starts, ends, steps):
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
             (("starts", starts), ("ends", ends), ("axes", [1]), ("steps", steps))]
    model = model_of([helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"])],
                     [helper.make_tensor_value_info("x", 1, [2, 5])], [helper.make_tensor_value_info("y", 1, None)],
                     inits)
    feeds = {"x": np.arange(10, dtype=np.float32).reshape(2, 5)}
    (ours,) = run_on_cuda(model, feeds)
    (ref,) = stock_session(model).run(None, feeds)
    np.testing.assert_array_equal(ours, ref)


@needs_gpu
@pytest.mark.skipif(tuple(int(p) for p in ort.__version__.split(".")[:2]) < (1, 25),
                    reason="OrtEp::Sync came with onnxruntime 1.25")
def test_io_binding_synchronize_waits_for_our_gpu():
    """IOBinding.synchronize_inputs/outputs call the EP's Sync (ep_plugin/glue.c ep_sync): the GPU has finished."""
    from onnxruntime_ep_seamless.runtime.native import NATIVES
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Mul", ["x", "x"], ["y"])], "g", [helper.make_tensor_value_info("x", 1, [3, 4])],
        [helper.make_tensor_value_info("y", 1, [3, 4])]), opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    sess = cuda_session(model)
    binding = sess.io_binding()
    mem = DEVICES[0].memory_info(ort.OrtDeviceMemoryType.DEFAULT)  # our EP's GPU memory
    value = ort.OrtValue.ortvalue_from_shape_and_type(x.shape, x.dtype, memory_info=mem)
    value.update_inplace(x)
    binding.bind_ortvalue_input("x", value)
    binding.bind_output("y", "cpu")
    syncs = NATIVES["cuda"].lib.seamless_ep_syncs
    before = syncs()
    binding.synchronize_inputs()
    assert syncs() > before
    sess.run_with_iobinding(binding)
    after_run = syncs()
    binding.synchronize_outputs()
    assert syncs() > after_run
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], x * x)
