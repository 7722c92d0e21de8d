"""ORT's session graph capture on the CUDA EP (enable_cuda_graph=1, onnxruntime >= 1.26; skipped
without a GPU): runs after the warm-ups replay one CUDA graph (no Compute call reaches Python), and
outputs are byte-identical to the same session without capture."""
import struct
import time

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import material
import onnxruntime_ep_seamless as seamless
from onnxruntime_ep_seamless.exec.cuda_compute import CudaKernel, segment_replays
from onnxruntime_ep_seamless.tools.bench_gpu import shared_kv_binding
from onnxruntime_ep_seamless.runtime.cuda import CudaRuntime
from test_cuda_ep import DEVICES, PROBLEM, model_of

pytestmark = [pytest.mark.skipif(not DEVICES, reason=f"no NVIDIA GPU for the CUDA EP ({PROBLEM or 'none found'})"),
              pytest.mark.skipif(tuple(map(int, ort.__version__.split(".")[:2])) < (1, 26),
                                 reason="session graph capture needs onnxruntime >= 1.26")]


def session(model, capture):
    so = seamless.session_options(device="cuda", enable_cuda_graph=int(capture))
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    sess = ort.InferenceSession(model.SerializeToString() if hasattr(model, "SerializeToString") else model, so)
    report = seamless.assert_ep_selected(sess, device="cuda")
    assert not report.fallback_nodes, report
    return sess


def on_gpu(array):
    mem = DEVICES[0].memory_info(ort.OrtDeviceMemoryType.DEFAULT)
    value = ort.OrtValue.ortvalue_from_shape_and_type(array.shape, array.dtype, memory_info=mem)
    value.update_inplace(np.ascontiguousarray(array))
    return value


def run_options(graph_id=None):
    options = ort.RunOptions()
    if graph_id is not None:
        options.add_run_config_entry("gpu_graph_id", str(graph_id))
    return options


def mlp():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
             helper.make_node("Gelu", ["a"], ["g"], approximate="tanh"), helper.make_node("Softmax", ["g"], ["y"])]
    model = model_of(nodes, [helper.make_tensor_value_info("x", 1, [4, 16])],
                     [helper.make_tensor_value_info("y", 1, [4, 32])], [w, b])
    model.opset_import[0].version = 20
    return model


def test_replays_after_warm_up_and_match_eager():
    model = mlp()
    captured, eager = session(model, True), session(model, False)
    rng = np.random.default_rng(1)
    x, y = on_gpu(np.zeros((4, 16), np.float32)), on_gpu(np.zeros((4, 32), np.float32))
    binding = captured.io_binding()
    binding.bind_ortvalue_input("x", x)
    binding.bind_ortvalue_output("y", y)
    for step in range(6):
        value = rng.standard_normal((4, 16)).astype(np.float32)
        x.update_inplace(value)  # the same address, new contents
        calls = CudaKernel.compute_calls
        captured.run_with_iobinding(binding, run_options())
        if step == 0:
            assert CudaKernel.compute_calls - calls == 3  # two warm-ups and the captured run, inside one Run
        else:
            assert CudaKernel.compute_calls == calls  # replayed: Python is not involved
        (expected,) = eager.run(None, {"x": value})
        np.testing.assert_array_equal(y.numpy(), expected)  # the same kernels in the same order


def test_graph_ids_and_uncaptured_runs():
    model = mlp()
    sess = session(model, True)
    x, y = on_gpu(np.ones((4, 16), np.float32)), on_gpu(np.zeros((4, 32), np.float32))
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", x)
    binding.bind_ortvalue_output("y", y)
    sess.run_with_iobinding(binding, run_options(1))
    first = y.numpy()
    calls, replays = CudaKernel.compute_calls, segment_replays()
    # -1: not in the session's graph; the binding's third eager run (after graph 1's two warm-ups), so it is
    # captured as capture=auto does (a segment of its own, launched for later runs that ORT does not capture)
    sess.run_with_iobinding(binding, run_options(-1))
    assert CudaKernel.compute_calls == calls + 1 and segment_replays() == replays + 1
    np.testing.assert_array_equal(y.numpy(), first)
    sess.run_with_iobinding(binding, run_options(-1))  # the segment, from C
    assert CudaKernel.compute_calls == calls + 1 and segment_replays() == replays + 2
    sess.run_with_iobinding(binding, run_options(1))  # graph 1's replay
    assert CudaKernel.compute_calls == calls + 1 and segment_replays() == replays + 2
    np.testing.assert_array_equal(y.numpy(), first)
    if hasattr(sess, "release_captured_graph"):  # onnxruntime >= 1.27
        sess.release_captured_graph(1)
        sess.run_with_iobinding(binding, run_options(1))  # captured again: the warm-ups launch the segment, the
        assert CudaKernel.compute_calls == calls + 2 and segment_replays() == replays + 4  # capture runs in Python
        np.testing.assert_array_equal(y.numpy(), first)


def test_a_host_read_is_a_clear_error():
    # the shape of a Reshape computed on the GPU (from a float input) must be read on the host
    nodes = [helper.make_node("Cast", ["s"], ["shape"], to=7), helper.make_node("Reshape", ["x", "shape"], ["y"])]
    model = model_of(nodes, [helper.make_tensor_value_info("x", 1, [2, 3]), helper.make_tensor_value_info("s", 1, [2])],
                     [helper.make_tensor_value_info("y", 1, None)])
    sess = session(model, True)
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", on_gpu(np.ones((2, 3), np.float32)))
    binding.bind_ortvalue_input("s", on_gpu(np.array([3, 2], np.float32)))
    binding.bind_output("y", "cpu")
    with pytest.raises(Exception, match="cannot capture: run this model without enable_cuda_graph"):
        sess.run_with_iobinding(binding, run_options())


def test_invalid_option_value_is_a_clear_error():
    with pytest.raises(Exception, match="enable_cuda_graph"):
        so = seamless.session_options(device="cuda", enable_cuda_graph="maybe")
        ort.InferenceSession(mlp().SerializeToString(), so)


@pytest.mark.parametrize("precision", ["fp16", "int4"])
def test_builder_decode_with_shared_kv_buffers(precision):
    """The builder's `-e cuda` decoder in the static-shape mode (KV buffers of the maximum length shared
    by past and present, a full-length attention mask, IO binding): prefill uncaptured (gpu_graph_id
    -1), then 64 decode steps; every step's logits and KV are byte-identical to the same session
    without capture, and every captured step after the first is a replay."""
    from models.test_llm_decoders import HEAD_SIZE
    path = material.genai_small_dir(precision, "cuda") / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    max_len, prompt = 80, np.random.default_rng(0).integers(0, 1000, 8)
    results = []
    for capture in (True, False):
        sess = session(str(path), capture)
        kv_names = [i.name for i in sess.get_inputs() if i.name.startswith("past_key_values.")]
        kv_type = {"tensor(float16)": np.float16, "tensor(float)": np.float32}[sess.get_inputs()[-1].type]
        kv = {n: on_gpu(np.zeros((1, sess.get_inputs()[[i.name for i in sess.get_inputs()].index(n)].shape[1],
                                  max_len, HEAD_SIZE), kv_type)) for n in kv_names}
        vocab = sess.get_outputs()[0].shape[-1]
        logits_dtype = {"tensor(float16)": np.float16, "tensor(float)": np.float32}[sess.get_outputs()[0].type]

        def bind(ids, mask):
            logits = on_gpu(np.zeros((1, ids.shape()[1], vocab), logits_dtype))
            return shared_kv_binding(sess, kv, ids, mask, logits), logits

        binding, logits = bind(on_gpu(prompt.reshape(1, -1).astype(np.int64)), on_gpu(np.ones((1, len(prompt)),
                                                                                               np.int64)))
        sess.run_with_iobinding(binding, run_options(-1))  # prefill: another shape, not captured
        token = int(np.argmax(logits.numpy()[0, -1]))
        ids, mask = on_gpu(np.array([[token]], np.int64)), on_gpu(np.zeros((1, max_len), np.int64))
        binding, logits = bind(ids, mask)
        steps = []
        for step in range(64):
            total = len(prompt) + step + 1
            ids.update_inplace(np.array([[token]], np.int64))
            mask.update_inplace((np.arange(max_len) < total).astype(np.int64).reshape(1, -1))
            calls = CudaKernel.compute_calls
            sess.run_with_iobinding(binding, run_options())
            if capture and step > 0:
                assert CudaKernel.compute_calls == calls, f"step {step} was not a replay"
            out = logits.numpy()
            steps.append([out] + [v.numpy() for v in kv.values()])
            token = int(np.argmax(out[0, -1]))
        results.append(steps)
    for step, (with_capture, without) in enumerate(zip(*results)):
        for a, b in zip(with_capture, without):
            np.testing.assert_array_equal(a, b, err_msg=f"step {step}")


@pytest.mark.parametrize("precision", ["fp16", "int4"])
def test_shared_kv_buffers_are_written_in_place(precision):
    """Each present bound to its past's own buffer (the shared-KV loop, eager: capture=auto's graphs copy whole
    presents out): a decode step writes only its new row there, so rows past it keep what they held; its
    logits and rows are those of the same loop with each present bound to a buffer of its own (written whole,
    the past it read left as it was)."""
    from models.test_llm_decoders import HEAD_SIZE
    path = material.genai_small_dir(precision, "cuda") / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    max_len, prompt, held = 40, np.random.default_rng(0).integers(0, 1000, 8), 3.0
    sess = eager_session(str(path))
    assert not seamless.assert_ep_selected(sess, device="cuda").fallback_nodes
    shapes = {i.name: (1, i.shape[1], max_len, HEAD_SIZE) for i in sess.get_inputs() if i.name.startswith("past_")}
    kv_type = {"tensor(float16)": np.float16, "tensor(float)": np.float32}[sess.get_inputs()[-1].type]
    logits_type = {"tensor(float16)": np.float16, "tensor(float)": np.float32}[sess.get_outputs()[0].type]
    vocab = sess.get_outputs()[0].shape[-1]
    shared = {n: on_gpu(np.zeros(shape, kv_type)) for n, shape in shapes.items()}
    logits = on_gpu(np.zeros((1, len(prompt), vocab), logits_type))
    sess.run_with_iobinding(shared_kv_binding(sess, shared, on_gpu(prompt.reshape(1, -1).astype(np.int64)),
                                              on_gpu(np.ones((1, len(prompt)), np.int64)), logits))
    for value in shared.values():  # the rows no token has yet: a value the kernels never write
        rows = value.numpy()
        rows[:, :, len(prompt):] = held
        value.update_inplace(rows)
    own = {n: on_gpu(v.numpy()) for n, v in shared.items()}
    token = int(np.argmax(logits.numpy()[0, -1]))
    for step in range(12):
        total = len(prompt) + step + 1
        ids, mask = on_gpu(np.array([[token]], np.int64)), on_gpu((np.arange(max_len) < total).astype(np.int64)[None])
        logits = on_gpu(np.zeros((1, 1, vocab), logits_type))
        sess.run_with_iobinding(shared_kv_binding(sess, shared, ids, mask, logits))
        binding, presents = sess.io_binding(), {n: on_gpu(np.zeros(shape, kv_type)) for n, shape in shapes.items()}
        own_logits, pasts = on_gpu(np.zeros((1, 1, vocab), logits_type)), {n: v.numpy() for n, v in own.items()}
        binding.bind_ortvalue_input("input_ids", ids)
        binding.bind_ortvalue_input("attention_mask", mask)
        binding.bind_ortvalue_output("logits", own_logits)
        for name in shapes:
            binding.bind_ortvalue_input(name, own[name])
            binding.bind_ortvalue_output(name.replace("past_key_values", "present"), presents[name])
        sess.run_with_iobinding(binding)
        np.testing.assert_array_equal(logits.numpy(), own_logits.numpy(), err_msg=f"step {step}")
        for name in shapes:
            in_place, whole = shared[name].numpy(), presents[name].numpy()
            np.testing.assert_array_equal(in_place[:, :, :total], whole[:, :, :total], err_msg=f"{name}, step {step}")
            assert (in_place[:, :, total:] == held).all() and not whole[:, :, total:].any(), (name, step)
            np.testing.assert_array_equal(own[name].numpy(), pasts[name])  # the past it read, untouched
        own, token = presents, int(np.argmax(logits.numpy()[0, -1]))


@pytest.mark.parametrize("precision", ["fp16", "int4"])
def test_a_decode_steps_outputs_are_written_where_ort_holds_them(precision, monkeypatch):
    """A decode step of the builder's decoder with the bench's ArgMax (eager): the LM head (a normed Linear or
    MatMulNBits), the ArgMax and the attention write the logits, next_token and presents into ORT's tensors,
    so the run copies no output afterwards; next_token is the argmax of those logits."""
    from models.test_llm_decoders import HEAD_SIZE
    from onnxruntime_ep_seamless.tools.bench_gpu import greedy_token, with_device_argmax
    from onnxruntime_ep_seamless.runtime.cuda import CudaRuntime
    model_dir = material.genai_small_dir(precision, "cuda")
    if not (model_dir / "model.onnx").exists():
        pytest.skip(f"{model_dir} not prepared (python tests/material.py)")
    so = seamless.session_options(device="cuda", capture="off", native_program=0)
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.add_session_config_entry("session.model_external_initializers_file_folder_path", str(model_dir))
    sess = ort.InferenceSession(with_device_argmax(str(model_dir / "model.onnx")), so)
    assert not seamless.assert_ep_selected(sess, device="cuda").fallback_nodes
    max_len, prompt = 16, np.arange(1, 5)
    types = {"tensor(float16)": np.float16, "tensor(float)": np.float32}
    kv = {i.name: on_gpu(np.zeros((1, i.shape[1], max_len, HEAD_SIZE), types[i.type]))
          for i in sess.get_inputs() if i.name.startswith("past_")}
    logits_type, vocab = types[sess.get_outputs()[0].type], sess.get_outputs()[0].shape[-1]
    sess.run_with_iobinding(shared_kv_binding(sess, kv, on_gpu(prompt.reshape(1, -1)), on_gpu(np.ones((1, 4), np.int64)),
                                              on_gpu(np.zeros((1, 4, vocab), logits_type)), on_gpu(np.zeros((1, 4, 1), np.int64))))
    copies = []
    for name in ("copy", "stage"):  # the two ways CudaKernel._write_outputs copies an output
        original = getattr(CudaRuntime, name)
        monkeypatch.setattr(CudaRuntime, name, lambda self, *args, name=name, original=original, **kw:
                            (copies.append(name), original(self, *args, **kw))[1])
    logits, token = on_gpu(np.zeros((1, 1, vocab), logits_type)), on_gpu(np.zeros((1, 1, 1), np.int64))
    sess.run_with_iobinding(shared_kv_binding(sess, kv, on_gpu(np.array([[7]])),
                                              on_gpu((np.arange(max_len) < 5).astype(np.int64)[None]), logits, token))
    assert copies == []
    assert int(token.numpy()[0, 0, 0]) == greedy_token(logits.numpy()[0, -1])


def test_replay_timing_records_each_replays_gpu_time():
    """bench decode-gpu's gpu_ms_per_token: while timing is on, one GPU time a replay, above 0 and within its
    run call; none once it is off, and a new timing starts from none."""
    from onnxruntime_ep_seamless.tools.bench_gpu import replay_timing
    sess = session(mlp(), True)
    x, y = on_gpu(np.ones((4, 16), np.float32)), on_gpu(np.zeros((4, 32), np.float32))
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", x)
    binding.bind_ortvalue_output("y", y)
    sess.run_with_iobinding(binding, run_options())  # the warm-ups and the capture: no replay
    replay_timing(True)
    walls = []
    for _ in range(5):
        t0 = time.perf_counter()
        sess.run_with_iobinding(binding, run_options())
        walls.append(time.perf_counter() - t0)
    times = replay_timing(False)
    sess.run_with_iobinding(binding, run_options())
    assert len(times) == 5 and all(0 < t <= wall for t, wall in zip(times, walls)), (times, walls)
    replay_timing(True)
    assert replay_timing(False) == []


@pytest.mark.parametrize("mode", ["graph", "growing", "growing-device"])
@pytest.mark.parametrize("precision", ["fp16", "int4"])
def test_bench_token_on_the_device_is_the_hosts_argmax(precision, mode):
    """`bench decode-gpu --token device`: the ArgMax appended to the builder's decoder runs on our EP with
    the rest (run_one's session disables the CPU fallback and asserts every node) and its tokens are the
    host's argmax of the logits, step for step, in every loop (growing-device asserts the presents it
    feeds back are on the GPU)."""
    from onnxruntime_ep_seamless.tools.bench_gpu import run_one
    model_dir = material.genai_small_dir(precision, "cuda")
    if not (model_dir / "model.onnx").exists():
        pytest.skip(f"{model_dir} not prepared (python tests/material.py)")
    host, device = (run_one(str(model_dir), "seamless", 24, 8, 1, mode=mode, token=t) for t in ("host", "device"))
    assert device["fallback_nodes"] == 0 and device["claimed_nodes"] == host["claimed_nodes"] + 1
    assert len(host["tokens"]) == 25 and device["tokens"] == host["tokens"]
    if mode == "graph":  # a replayed step's GPU time, a share of its run call
        assert 0 < device["gpu_ms_per_token"] < device["run_ms_per_token"]
    if mode == "growing-device":  # the presents it binds as pasts are those the plain loop feeds back
        assert device["tokens"] == run_one(str(model_dir), "seamless", 24, 8, 1, mode="growing", token="device")["tokens"]


@pytest.mark.parametrize("precision", ["fp16", "int4"])
def test_the_c_decode_loop_replays_each_step_without_python(precision):
    """`bench decode-gpu --mode growing-c`: the growing-device loop driven from C through ORT's C API
    (tools/host_decode.c) gives the Python loop's tokens, and once a step's binding is captured no
    Compute reaches Python: the prompt and two eager steps, the capture, then one C replay a step."""
    from onnxruntime_ep_seamless.tools.bench_gpu import run_one
    model_dir = material.genai_small_dir(precision, "cuda")
    if not (model_dir / "model.onnx").exists():
        pytest.skip(f"{model_dir} not prepared (python tests/material.py)")
    python = run_one(str(model_dir), "seamless", 24, 8, 1, mode="growing-device", token="device")
    calls, before = CudaKernel.compute_calls, segment_replays()
    c = run_one(str(model_dir), "seamless", 24, 8, 1, mode="growing-c", token="device")
    assert c["tokens"] == python["tokens"] and len(c["tokens"]) == 25
    assert (CudaKernel.compute_calls - calls, segment_replays() - before) == (4, 22)  # steps 0-3; 3-24
    assert 0 < c["run_ms_per_token"] <= c["ms_per_token"]


# --- capture=auto: a compiled partition without seams, captured per set of input shapes ----------

def auto_session(model, capture="auto", **options):
    so = seamless.session_options(device="cuda", capture=capture, **options)
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    return ort.InferenceSession(model.SerializeToString() if hasattr(model, "SerializeToString") else model, so)


def eager_session(model):
    """Every run through the Python plan, node by node: what captured graphs and launch programs must equal."""
    return auto_session(model, "off", native_program=0)


def test_auto_capture_replays_repeated_shapes_with_plain_run():
    model = mlp()
    ours, eager = auto_session(model), eager_session(model)
    rng = np.random.default_rng(2)
    before = segment_replays()
    for run in range(6):
        x = rng.standard_normal((4, 16)).astype(np.float32)
        (got,) = ours.run(None, {"x": x})
        (want,) = eager.run(None, {"x": x})
        np.testing.assert_array_equal(got, want)  # the same kernels in the same order
    assert segment_replays() - before == 4  # runs 3-6: captured at the third, replayed after


def test_capture_off_runs_a_repeated_binding_as_a_launch_program_without_python():
    """capture=off (native_program=1, the default): a binding's third run is recorded as a launch program (no CUDA
    graph) and launched; later runs of the binding are answered by the C glue, launch by launch, with this run's
    inputs and outputs: no Compute reaches Python, and the results are the eager plan's, byte for byte."""
    model = mlp()
    ours, eager = auto_session(model, "off"), eager_session(model)
    rng = np.random.default_rng(6)
    calls, before = CudaKernel.compute_calls, segment_replays()
    for run in range(7):
        x = rng.standard_normal((4, 16)).astype(np.float32)
        np.testing.assert_array_equal(ours.run(None, {"x": x})[0], eager.run(None, {"x": x})[0])
    assert segment_replays() - before == 5  # recorded at run 3 and launched, then four replays in C
    assert CudaKernel.compute_calls - calls == 7 + 3  # the eager session's seven, our first three


def test_a_captured_binding_is_replayed_without_python():
    """After its capture, a binding's runs are answered by the C glue (ep_plugin/cuda_replay.c): no Compute
    reaches Python, each launches the captured segment with this run's input and outputs, and the results are
    those of the session without capture."""
    model = mlp()
    ours, eager = auto_session(model), eager_session(model)
    rng = np.random.default_rng(4)
    for run in range(3):  # two eager runs, then the capture (from Python)
        ours.run(None, {"x": rng.standard_normal((4, 16)).astype(np.float32)})
    calls, before = CudaKernel.compute_calls, segment_replays()
    for run in range(4):
        x = rng.standard_normal((4, 16)).astype(np.float32)
        np.testing.assert_array_equal(ours.run(None, {"x": x})[0], eager.run(None, {"x": x})[0])
    assert segment_replays() - before == 4
    assert CudaKernel.compute_calls == calls + 4  # the eager session's four runs, none of ours


def test_auto_capture_keeps_one_graph_per_shape():
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Softmax", ["x"], ["s"], axis=-1), helper.make_node("Mul", ["s", "x"], ["y"])]
    model = model_of(nodes, [helper.make_tensor_value_info("x", 1, ["n", 8])],
                     [helper.make_tensor_value_info("y", 1, ["n", 8])])
    ours, eager = auto_session(model), eager_session(model)
    before = segment_replays()
    for run in range(12):
        x = rng.standard_normal((1 + run % 2, 8)).astype(np.float32)  # two shapes, alternating
        np.testing.assert_array_equal(ours.run(None, {"x": x})[0], eager.run(None, {"x": x})[0])
    assert segment_replays() - before == 8  # each shape: 2 eager runs, then captured and replayed


def test_auto_capture_drops_the_least_recently_launched_binding():
    """Up to 8 captured bindings a partition (cuda_compute.MAX_SEGMENTS): a ninth capture drops the one launched
    least recently (launches by the C glue count), whose next run goes to Python and captures it again; the
    others keep replaying without Python, and every run gives the session's without capture."""
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Softmax", ["x"], ["s"], axis=-1), helper.make_node("Mul", ["s", "x"], ["y"])]
    model = model_of(nodes, [helper.make_tensor_value_info("x", 1, ["n", 8])],
                     [helper.make_tensor_value_info("y", 1, ["n", 8])])
    ours, eager = auto_session(model), eager_session(model)
    xs = {n: rng.standard_normal((n, 8)).astype(np.float32) for n in range(1, 10)}
    want = {n: eager.run(None, {"x": x})[0] for n, x in xs.items()}

    def run(n):  # whether the run entered Python, and whether it launched a captured segment
        calls, launched = CudaKernel.compute_calls, segment_replays()
        np.testing.assert_array_equal(ours.run(None, {"x": xs[n]})[0], want[n])
        return CudaKernel.compute_calls - calls, segment_replays() - launched

    for n in range(1, 9):
        assert [run(n) for _ in range(3)] == [(1, 0), (1, 0), (1, 1)]  # two eager runs, then captured and launched
    assert run(1) == (0, 1)  # replayed in C: binding 2 is now the least recently launched
    assert [run(9) for _ in range(3)] == [(1, 0), (1, 0), (1, 1)]  # the ninth capture drops binding 2
    assert run(1) == (0, 1) and run(9) == (0, 1) and run(8) == (0, 1)
    assert run(2) == (1, 1)  # dropped: Python captures it again (seen often enough) and launches it
    assert run(2) == (0, 1)


def test_a_session_collected_during_a_capture_is_released_after_it(monkeypatch):
    """A session the garbage collector frees while another one captures (the collector runs inside our Compute,
    in Python): its compiled nodes' release, which waits for the whole device, waits for the capture's end
    instead, and comes right after it (the binding's later runs are replayed by the C glue, never in Python);
    the capture holds and replays."""
    import gc
    from onnxruntime_ep_seamless.exec import cuda_compute
    model, x = mlp(), np.random.default_rng(4).standard_normal((4, 16)).astype(np.float32)
    run, release, released = CudaKernel._run, CudaKernel._release_memory, []  # released: whether capturing then
    monkeypatch.setattr(CudaKernel, "_run", lambda self, *args: (self.native.lib.seamless_capturing() and gc.collect(),
                                                                 run(self, *args))[1])
    monkeypatch.setattr(CudaKernel, "_release_memory", lambda self: (
        released.append(bool(self.native.lib.seamless_capturing())), release(self))[1])
    old = eager_session(model)
    old.run(None, {"x": x})
    ours, eager = auto_session(model), eager_session(model)
    (want,) = eager.run(None, {"x": x})  # from here on only `ours` runs
    cycle = [old]
    cycle.append(cycle)
    gc.disable()  # from here the only collection is the one inside the capture
    try:
        del old, cycle  # only the collector frees it now
        before = segment_replays()
        for _ in range(5):
            np.testing.assert_array_equal(ours.run(None, {"x": x})[0], want)
    finally:
        gc.enable()
    assert segment_replays() - before == 3  # run 3 captured and launched, 4 and 5 replayed
    # the old node (and any other garbage of earlier tests) released once the capture had ended
    assert released and not any(released) and not cuda_compute._UNRELEASED


def test_auto_capture_skips_a_partition_with_a_seam():
    nodes = [helper.make_node("Cast", ["s"], ["shape"], to=7), helper.make_node("Reshape", ["x", "shape"], ["y"])]
    model = model_of(nodes, [helper.make_tensor_value_info("x", 1, [2, 3]), helper.make_tensor_value_info("s", 1, [2])],
                     [helper.make_tensor_value_info("y", 1, None)])
    sess = auto_session(model)
    before = segment_replays()
    for _ in range(4):
        (y,) = sess.run(None, {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "s": np.array([3, 2], np.float32)})
        np.testing.assert_array_equal(y, np.arange(6, dtype=np.float32).reshape(3, 2))
    assert segment_replays() == before


@pytest.mark.parametrize("mask", ["int64", "float"])
def test_auto_capture_leaves_a_data_dependent_op_eager(mask):
    # NonZero of a mask computed on the GPU (an int64 one runs the CPU kernel by the host rule, a float
    # one on the host by on_host, kernels/cuda/elementwise.py): its output shape depends on the data, so the host must read the mask
    # (a seam) and the partition is never captured; every run is right
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Cast", ["r"], ["m"], to=7),
             helper.make_node("NonZero", ["m"], ["idx"])]
    if mask == "float":
        nodes = [nodes[0], helper.make_node("NonZero", ["r"], ["idx"])]
    model = model_of(nodes, [helper.make_tensor_value_info("x", 1, [6])],
                     [helper.make_tensor_value_info("idx", 7, None)])
    sess = auto_session(model)
    before = segment_replays()
    for run in range(5):
        x = np.array([1, -1, 2, -2, 3, -3], np.float32) * (1 if run % 2 else -1)
        (idx,) = sess.run(None, {"x": x})
        np.testing.assert_array_equal(idx, np.nonzero(np.maximum(x, 0).astype(np.int64)))
    assert segment_replays() == before


def test_log_capture_reports_segments_seams_and_bindings(capfd):
    """log_capture=1: at Compile, each partition's segments and every seam with its node, op and
    reason (ORT's log, stderr); at run time, a binding that could not be captured."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Cast", ["r"], ["m"], to=7),
             helper.make_node("NonZero", ["m"], ["idx"])]
    model = model_of(nodes, [helper.make_tensor_value_info("x", 1, [6])],
                     [helper.make_tensor_value_info("idx", 7, None)])
    so = seamless.session_options(device="cuda", log_capture=1)
    sess = ort.InferenceSession(model.SerializeToString(), so)
    sess.run(None, {"x": np.ones(6, np.float32)})
    err = capfd.readouterr().err
    assert "3 nodes (2 on the GPU), 2 segment(s), 1 seam(s)" in err, err
    assert "seam at " in err and "(NonZero)" in err and "reads m on the host" in err, err
    path = material.genai_small_dir("fp16", "cuda") / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    so = seamless.session_options(device="cuda", log_capture=1)
    ort.InferenceSession(str(path), so)
    err = capfd.readouterr().err
    assert "1 segment(s), 0 seam(s)" in err and "one graph per capacity serves every KV length" in err, err


@pytest.mark.parametrize("precision", ["fp16", "int4"])
def test_auto_capture_builder_decode_with_static_shapes(precision):
    """The builder decoder fed host arrays of fixed shapes (max-length KV and mask): decode steps are
    captured after two and replayed; logits and KV byte-identical to eager over 64 steps."""
    from models.test_llm_decoders import empty_past, presents_as_past
    path = material.genai_small_dir(precision, "cuda") / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    max_len, prompt = 80, np.random.default_rng(0).integers(0, 1000, 8)
    runs = []
    for capture in ("auto", "eager"):
        sess = auto_session(str(path)) if capture == "auto" else eager_session(str(path))
        out = sess.run(None, {"input_ids": prompt.reshape(1, -1).astype(np.int64),
                              "attention_mask": np.ones((1, len(prompt)), np.int64),
                              **empty_past(sess, length=max_len)})
        before, steps = segment_replays(), []
        for step in range(64):
            total = len(prompt) + step + 1
            feeds = {"input_ids": np.array([[int(np.argmax(out[0][0, -1]))]], np.int64),
                     "attention_mask": (np.arange(max_len) < total).astype(np.int64).reshape(1, -1),
                     **presents_as_past(sess, out)}
            out = sess.run(None, feeds)
            steps.append(out)
        if capture == "auto":
            assert segment_replays() - before == 62  # steps 3-64
        runs.append(steps)
    for step, (a, b) in enumerate(zip(*runs)):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y, err_msg=f"step {step}")


def decode(sess, prompts, steps):
    """Greedy decoding of a batch of equal-length prompts with plain session.run on host arrays,
    each step's present fed back as past (the KV cache grows by one token a step); every step's
    outputs and how many captured segments it launched."""
    from models.test_llm_decoders import empty_past, presents_as_past
    batch, length = prompts.shape
    out = sess.run(None, {"input_ids": prompts.astype(np.int64), "attention_mask": np.ones((batch, length), np.int64),
                          **empty_past(sess, batch=batch)})
    results, launches = [], []
    for step in range(steps):
        tokens = np.argmax(out[0][:, -1], axis=-1).reshape(batch, 1).astype(np.int64)
        before = segment_replays()
        out = sess.run(None, {"input_ids": tokens, "attention_mask": np.ones((batch, length + step + 1), np.int64),
                              **presents_as_past(sess, out)})
        launches.append(segment_replays() - before)
        results.append(out)
    return results, launches


def assert_same_steps(got, want):
    for step, (a, b) in enumerate(zip(got, want)):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y, err_msg=f"step {step}")


@pytest.mark.parametrize("capture", ["auto", "off"])
@pytest.mark.parametrize("precision", ["fp16", "int4"])
def test_auto_capture_builder_decode_with_growing_kv(precision, capture):
    """The builder decoder as most users run it: host arrays, present fed back as past, so every
    decode step has new shapes. The KV cache and mask are padded to a capacity (64, then 128): one
    captured graph (capture=off: one launch program) per capacity, launched once per step after two
    eager steps; logits and every present byte-identical to eager over 64 steps."""
    path = material.genai_small_dir(precision, "cuda") / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    prompts = np.random.default_rng(0).integers(0, 1000, (1, 8))
    calls = CudaKernel.compute_calls
    got, launches = decode(auto_session(str(path), capture), prompts, 64)
    assert CudaKernel.compute_calls - calls == 1 + 4 + 2  # the prompt, two warm-ups and a capture per capacity
    want, eager = decode(eager_session(str(path)), prompts, 64)
    assert_same_steps(got, want)
    assert not any(eager)
    # totals 9..64 use capacity 64, 65..72 capacity 128: two eager steps at each, then one segment a step
    assert launches == [0, 0] + [1] * 54 + [0, 0] + [1] * 6


@pytest.mark.parametrize("capture", ["auto", "off"])
@pytest.mark.parametrize("precision", ["fp16", "int4"])
def test_first_prompts_of_new_lengths_replay_one_padded_segment(precision, capture):
    """A first prompt (every past KV empty) runs padded at its end to a power of two from 16: the bucket's first two
    prompts run eagerly, its third is captured (capture=off: recorded), and every later prompt of any length up to 16
    is one segment launch without Python. Its outputs are the unpadded eager run's up to rounding: a product over
    16 rows may take another kernel than over fewer (a GEMV up to 4 rows, a GEMM above; cuBLASLt's algorithm per
    shape), so the tolerance is a float16 product's rounding (relative 2^-8 of logits of magnitude ~10) and the greedy
    token of every position where the eager top two differ by more than that must agree; a decode continued from the
    padded prompt's presents gives the eager decode's tokens."""
    from models.test_llm_decoders import empty_past, presents_as_past
    path = material.genai_small_dir(precision, "cuda") / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    ours, eager = auto_session(str(path), capture), eager_session(str(path))
    rng = np.random.default_rng(3)
    for run, length in enumerate([5, 9, 16, 7, 12, 3, 1]):
        ids = rng.integers(0, 1000, (1, length)).astype(np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones((1, length), np.int64), **empty_past(ours)}
        calls, before = CudaKernel.compute_calls, segment_replays()
        got = ours.run(None, feeds)
        assert (CudaKernel.compute_calls - calls, segment_replays() - before) == ((0, 1) if run > 2 else
                                                                                (1, int(run == 2)))
        want = eager.run(None, feeds)
        for x, y in zip(got, want):
            assert x.shape == y.shape
            np.testing.assert_allclose(x.astype(np.float32), y.astype(np.float32), rtol=2e-2, atol=5e-2)
        logits = want[0][0].astype(np.float32)
        top2 = np.sort(logits, axis=-1)[:, -2:]
        clear = top2[:, 1] - top2[:, 0] > 0.1
        np.testing.assert_array_equal(np.argmax(got[0][0], -1)[clear], np.argmax(logits, -1)[clear])
        tokens = {}
        for name, sess, out in (("ours", ours, got), ("eager", eager, want)):
            tokens[name] = []
            for step in range(4):
                token = np.argmax(out[0][:, -1], axis=-1).reshape(1, 1).astype(np.int64)
                tokens[name].append(int(token[0, 0]))
                out = sess.run(None, {"input_ids": token, "attention_mask": np.ones((1, length + step + 1), np.int64),
                                      **presents_as_past(sess, out)})
        assert tokens["ours"] == tokens["eager"], f"prompt of {length}"


@pytest.mark.parametrize("precision", ["fp16", "int4"])
def test_uncaptured_prompts_under_session_capture_replay_one_padded_segment(precision):
    """enable_cuda_graph=1 with onnxruntime-genai's binding (KV buffers of the maximum length shared by past and
    present): a prompt run with gpu_graph_id -1 is padded to its bucket as a first prompt (ids and mask as long, the
    bucket within the buffers), so from the bucket's third prompt every prompt length up to 16 launches one segment
    from C; the decode steps after it replay the session's graph. Logits to a float16 product's rounding of an eager
    session's (test_first_prompts_of_new_lengths_replay_one_padded_segment says why) and the same greedy tokens."""
    from models.test_llm_decoders import HEAD_SIZE
    path = material.genai_small_dir(precision, "cuda") / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    max_len, rng = 40, np.random.default_rng(4)
    ours, eager = session(str(path), True), eager_session(str(path))
    types = {"tensor(float16)": np.float16, "tensor(float)": np.float32}
    shapes = {i.name: (1, i.shape[1], max_len, HEAD_SIZE) for i in ours.get_inputs() if i.name.startswith("past_")}
    kv_type, logits_type = types[ours.get_inputs()[-1].type], types[ours.get_outputs()[0].type]
    vocab = ours.get_outputs()[0].shape[-1]
    kv = {n: on_gpu(np.zeros(shape, kv_type)) for n, shape in shapes.items()}  # ours: one set, as genai's
    ids, mask = on_gpu(np.zeros((1, 1), np.int64)), on_gpu(np.zeros((1, max_len), np.int64))
    step_logits = on_gpu(np.zeros((1, 1, vocab), logits_type))
    step = shared_kv_binding(ours, kv, ids, mask, step_logits)  # the graph's addresses
    for run, length in enumerate([5, 9, 16, 7, 12, 3]):
        prompt = rng.integers(0, 1000, (1, length)).astype(np.int64)
        tokens, first = {}, {}
        for name, sess in (("ours", ours), ("eager", eager)):
            buffers = kv if name == "ours" else {n: on_gpu(np.zeros(shape, kv_type)) for n, shape in shapes.items()}
            logits = on_gpu(np.zeros((1, length, vocab), logits_type))
            calls, before = CudaKernel.compute_calls, segment_replays()
            sess.run_with_iobinding(shared_kv_binding(sess, buffers, on_gpu(prompt), on_gpu(np.ones((1, length),
                                                                                                    np.int64)),
                                                      logits), run_options(-1))
            if name == "ours":
                assert (CudaKernel.compute_calls - calls, segment_replays() - before) == (
                    (0, 1) if run > 2 else (1, int(run == 2))), f"prompt {run}"
            first[name] = logits.numpy()[0].astype(np.float32)
            tokens[name] = [int(np.argmax(first[name][-1]))]
            for k in range(4):
                total = length + k + 1
                token = np.array([[tokens[name][-1]]], np.int64)
                causal = (np.arange(max_len) < total).astype(np.int64)[None]
                if name == "ours":
                    ids.update_inplace(token)
                    mask.update_inplace(causal)
                    sess.run_with_iobinding(step, run_options())
                    out = step_logits
                else:
                    out = on_gpu(np.zeros((1, 1, vocab), logits_type))
                    sess.run_with_iobinding(shared_kv_binding(sess, buffers, on_gpu(token), on_gpu(causal), out))
                tokens[name].append(int(np.argmax(out.numpy()[0, -1])))
        np.testing.assert_allclose(first["ours"], first["eager"], rtol=2e-2, atol=5e-2)
        assert tokens["ours"] == tokens["eager"], f"prompt of {length}"


def test_a_captured_decode_step_reads_the_staged_past_before_its_wait(monkeypatch):
    """A graph stages its inputs before the run's first launch, a plain one, so that the decode attention may
    read the past KV before waiting for the kernel before it (AttendParams.early), as in an eager run."""
    path = material.genai_small_dir("int4", "cuda") / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    early, launch_rows = [], CudaRuntime.launch_rows

    def recorded(self, name, rows, stream, *args, **kw):
        if name.startswith("seamless_gqa_decode") and self.lib.seamless_capturing():
            early.append(struct.unpack("<ffiiiiii", args[-1][1])[5])
        return launch_rows(self, name, rows, stream, *args, **kw)

    monkeypatch.setattr(CudaRuntime, "launch_rows", recorded)
    _, launches = decode(auto_session(str(path)), np.random.default_rng(0).integers(0, 1000, (1, 8)), 4)
    assert launches == [0, 0, 1, 1] and early and all(early), early


@pytest.mark.parametrize("capture", ["auto", "off"])
def test_builder_decode_with_growing_kv_on_the_gpu(capture):
    """The KV cache kept on the GPU between steps through IO binding: each step's presents are
    OrtValues in our device memory, bound as the next step's past; only ids, mask and logits cross
    to the host. Logits byte-identical to the host-array loop run eagerly over 24 steps; one launch a step
    after two eager steps (a CUDA graph with capture=auto, a launch program with capture=off)."""
    from models.test_llm_decoders import empty_past
    path = material.genai_small_dir("fp16", "cuda") / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    prompts = np.random.default_rng(0).integers(0, 1000, (1, 8))
    want, _ = decode(eager_session(str(path)), prompts, 24)
    sess = auto_session(str(path), capture)
    memory = DEVICES[0].memory_info(ort.OrtDeviceMemoryType.DEFAULT)
    past, tokens, total, launches = empty_past(sess), prompts, prompts.shape[1], []
    kv = {name: value.shape for name, value in past.items()}  # (batch, kv heads, 0, head size)
    dtype = next(iter(past.values())).dtype
    for step in range(25):
        binding = sess.io_binding()
        binding.bind_cpu_input("input_ids", tokens.astype(np.int64))
        binding.bind_cpu_input("attention_mask", np.ones((1, total), np.int64))
        for name, value in past.items():  # host arrays for the prompt, then the GPU OrtValues of the last step
            (binding.bind_cpu_input if isinstance(value, np.ndarray) else binding.bind_ortvalue_input)(name, value)
        binding.bind_output("logits", "cpu")
        presents = {}
        for name, (batch, heads, _, head_size) in kv.items():
            presents[name] = ort.OrtValue.ortvalue_from_shape_and_type((batch, heads, total, head_size), dtype,
                                                                       memory_info=memory)
            binding.bind_ortvalue_output(name.replace("past_key_values.", "present."), presents[name])
        before = segment_replays()
        sess.run_with_iobinding(binding)
        launches.append(segment_replays() - before)
        logits = binding.get_outputs()[0].numpy()
        if step:
            np.testing.assert_array_equal(logits, want[step - 1][0], err_msg=f"step {step}")
        tokens, past, total = np.argmax(logits[:, -1], axis=-1).reshape(1, 1), presents, total + 1
    assert launches == [0, 0, 0] + [1] * 22


def test_auto_capture_recaptures_when_the_batch_changes():
    """Bindings of pinned shapes (batch 1, batch 2, prefill vs decode) each get their own graphs,
    and going back to one already captured launches it at once: all byte-identical to eager."""
    path = material.genai_small_dir("fp16", "cuda") / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    rng = np.random.default_rng(1)
    one, two = rng.integers(0, 1000, (1, 6)), rng.integers(0, 1000, (2, 6))
    ours, eager = auto_session(str(path)), eager_session(str(path))
    runs = [(one, 8), (two, 8), (one, 8)]
    for number, (prompts, steps) in enumerate(runs):
        got, launches = decode(ours, prompts, steps)
        assert_same_steps(got, decode(eager, prompts, steps)[0])
        assert launches == ([0, 0] + [1] * 6 if number < 2 else [1] * 8), (number, launches)


def torch_decode(sess, steps, prompt=4):
    """Greedy decoding of a torch export (input_ids, attention_mask, position_ids, past_*) from a
    prompt of `prompt` tokens with plain session.run, present fed back as past; every step's outputs
    and how many captured segments it launched."""
    from models.test_real_models import llama_feeds
    out = sess.run(None, llama_feeds(1, prompt, 0))
    names = [o.name for o in sess.get_outputs()]
    results, launches = [], []
    for step in range(steps):
        total = prompt + 1 + step
        feeds = {"input_ids": np.argmax(out[0][:, -1], axis=-1).reshape(1, 1).astype(np.int64),
                 "attention_mask": np.ones((1, total), np.int64), "position_ids": np.array([[total - 1]], np.int64),
                 **{n.replace("present", "past"): v for n, v in zip(names[1:], out[1:])}}
        before = segment_replays()
        out = sess.run(None, feeds)
        launches.append(segment_replays() - before)
        results.append(out)
    return results, launches


@pytest.mark.parametrize("export", [name for name, *_ in material.TINY_DECODERS])
def test_auto_capture_torch_export_decode_with_growing_kv(export):
    """A torch export whose KV cache grows by Concat, attention by MatMul/Softmax or Attention over
    it: its KV and mask are padded at their start to a capacity (64, then 128), like a left-padded
    batch. Per capacity two eager steps, one checked against a padded run, then one segment a step;
    logits and every present byte-identical to capture=off over 64 steps."""
    from test_cuda_models import model_path
    path = model_path(material.tiny_llama_dir() / export)
    got, launches = torch_decode(auto_session(path), 64)
    want, eager = torch_decode(eager_session(path), 64)
    assert_same_steps(got, want)
    assert not any(eager)
    # totals 5..64 use capacity 64, 65..68 capacity 128
    assert launches == [0, 0, 0] + [1] * 57 + [0, 0, 0, 1]


def test_auto_capture_torch_export_generations_with_long_prompts():
    """Three generations in one session, each from a 16-token prompt: the prompt's products go
    through cuBLASLt (more than 4 rows), so its padded run may differ and it then stays eager, but
    the decode steps, bindings of their own, stay captured: byte-identical to capture=off."""
    from test_cuda_models import model_path
    path = model_path(material.tiny_llama_dir() / material.TINY_DECODERS[1][0])
    ours, eager = auto_session(path), eager_session(path)
    for generation in range(3):
        got, launches = torch_decode(ours, 8, prompt=16)
        assert_same_steps(got, torch_decode(eager, 8, prompt=16)[0])
        assert launches == ([0, 0, 0] + [1] * 5 if generation == 0 else [1] * 8), (generation, launches)


def test_auto_capture_left_padding_declined_when_the_padded_run_differs(capfd):
    """A node whose output depends on the KV cache's length from its shape (not from the mask) is
    not captured padded: the check finds the padded run's output different, the binding runs
    eagerly, and every output is what capture=off gives."""
    kv = lambda name, length: helper.make_tensor_value_info(name, 1, [1, 2, length, 4])
    axis2 = numpy_helper.from_array(np.array(2, np.int64), "axis2")
    nodes = [helper.make_node("Concat", ["past", "new"], ["present"], axis=2),
             helper.make_node("Shape", ["past"], ["shape"]), helper.make_node("Gather", ["shape", "axis2"], ["length"]),
             helper.make_node("Cast", ["length"], ["lengthf"], to=1), helper.make_node("Mul", ["new", "lengthf"], ["y"])]
    model = model_of(nodes, [kv("past", "past_len"), kv("new", 1),
                             helper.make_tensor_value_info("attention_mask", 7, [1, "total_len"])],
                     [kv("present", "total_len"), kv("y", 1)], [axis2])
    so = seamless.session_options(device="cuda", capture="auto", log_capture=1)
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    ours, eager = ort.InferenceSession(model.SerializeToString(), so), eager_session(model)
    rng = np.random.default_rng(5)
    past = np.zeros((1, 2, 0, 4), np.float32)
    before = segment_replays()
    for step in range(8):
        feeds = {"past": past, "new": rng.standard_normal((1, 2, 1, 4)).astype(np.float32),
                 "attention_mask": np.ones((1, step + 1), np.int64)}
        got, want = ours.run(None, feeds), eager.run(None, feeds)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(got[1], feeds["new"] * step)
        past = got[0]
    assert segment_replays() == before
    assert "not captured, they run eagerly: output 'y' of the padded run differs" in capfd.readouterr().err
