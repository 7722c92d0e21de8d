"""`bench layers-gpu`: the GPU time of hybrid decoders' heaviest layers at real widths, our CUDA EP alone.

Qwen3.5-35B-A3B's MoE layer (com.microsoft QMoE: 256 experts, 8 a token, hidden 2048, expert width 512, int4 blocks of
32, SwiGLU; its router MatMul in front), gpt-oss-20b's (32 experts of width 2880, 4 a token, hidden 2880, biases, its
SwiGLU's alpha, beta and limit) and Qwen3.5's linear-attention recurrence (com.microsoft LinearAttention: 16 query/key
heads and 32 value heads of 128, gated delta rule, float16), random weights. A model chains several such layers (QMoE)
or runs several side by side (LinearAttention) so that one captured replay's host cost spreads over them; every input
and output stays on the GPU (IO binding). The QMoE layers' experts a run reads (a token's: ~12 MB a layer for
Qwen3.5, ~50 MB for gpt-oss) are together more than the H200's 50 MB L2, as a real decoder's are: not replayed from
L2. No peer: ORT's CUDA EP has no kernel for either op."""
from __future__ import annotations

import dataclasses
import functools
import os
import tempfile
import time

import numpy as np

BLOCK = 32
QUERY_HEADS, VALUE_HEADS, HEAD = 16, 32, 128
QMOE_LAYERS = 8           # ~0.4 GB of int4 experts each (the model's weights as external data)
LINEAR_LAYERS = 8


@dataclasses.dataclass(frozen=True)
class MoeShape:
    hidden: int
    experts: int
    top_k: int
    width: int            # an expert's intermediate size
    attrs: tuple = ()     # QMoE's attributes beyond the shape's
    biases: bool = False


QWEN35_35B_A3B = MoeShape(2048, 256, 8, 512)
GPT_OSS_20B = MoeShape(2880, 32, 4, 2880, (("activation_alpha", 1.702), ("activation_beta", 1.0),
                                           ("swiglu_limit", 7.0)), biases=True)


def _random_bytes(rng, shape):
    return np.frombuffer(rng.bytes(int(np.prod(shape))), np.uint8).reshape(shape)


def _qmoe_model(shape: MoeShape, tokens: int, rng):
    from onnx import TensorProto, helper, numpy_helper
    hidden, experts, width = shape.hidden, shape.experts, shape.width
    nodes, inits, x = [], [], "x"
    for layer in range(QMOE_LAYERS):
        arrays = {f"w1_{layer}": _random_bytes(rng, (experts, 2 * width, hidden // 2)),
                  f"s1_{layer}": (0.001 + 0.002 * rng.random((experts, 2 * width, hidden // BLOCK))),
                  f"b1_{layer}": 0.01 * rng.standard_normal((experts, 2 * width)),
                  f"w2_{layer}": _random_bytes(rng, (experts, hidden, width // 2)),
                  f"s2_{layer}": (0.001 + 0.002 * rng.random((experts, hidden, width // BLOCK))),
                  f"b2_{layer}": 0.01 * rng.standard_normal((experts, hidden)),
                  f"router_{layer}": 0.05 * rng.standard_normal((hidden, experts))}
        if not shape.biases:
            del arrays[f"b1_{layer}"], arrays[f"b2_{layer}"]
        inits += [numpy_helper.from_array(a if a.dtype == np.uint8 else a.astype(np.float16), n)
                  for n, a in arrays.items()]
        bias1, bias2 = (f"b1_{layer}", f"b2_{layer}") if shape.biases else ("", "")
        nodes.append(helper.make_node("MatMul", [x, f"router_{layer}"], [f"logits_{layer}"]))
        nodes.append(helper.make_node(
            "QMoE", [x, f"logits_{layer}", f"w1_{layer}", f"s1_{layer}", bias1, f"w2_{layer}", f"s2_{layer}", bias2],
            [f"y{layer}"], domain="com.microsoft", k=shape.top_k, activation_type="swiglu", swiglu_fusion=1,
            expert_weight_bits=4, block_size=BLOCK, normalize_routing_weights=1, **dict(shape.attrs)))
        x = f"y{layer}"
    graph = helper.make_graph(nodes, "qmoe",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [tokens, hidden])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT16, [tokens, hidden])], inits)
    feeds = {"x": (0.5 * rng.standard_normal((tokens, hidden))).astype(np.float16)}
    return graph, feeds, QMOE_LAYERS


def _linear_model(tokens: int, rng):
    from onnx import TensorProto, helper
    widths = {"q": QUERY_HEADS * HEAD, "k": QUERY_HEADS * HEAD, "v": VALUE_HEADS * HEAD, "g": VALUE_HEADS,
              "b": VALUE_HEADS}
    feeds = {"q": 0.05 * rng.standard_normal((1, tokens, widths["q"])),
             "k": 0.05 * rng.standard_normal((1, tokens, widths["k"])),
             "v": rng.standard_normal((1, tokens, widths["v"])),
             "g": -0.1 * rng.random((1, tokens, VALUE_HEADS)), "b": 0.5 * rng.random((1, tokens, VALUE_HEADS))}
    feeds = {n: a.astype(np.float16) for n, a in feeds.items()}
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT16, [1, tokens, w]) for n, w in widths.items()]
    nodes, outputs = [], []
    for layer in range(LINEAR_LAYERS):
        feeds[f"state{layer}"] = (0.01 * rng.standard_normal((1, VALUE_HEADS, HEAD, HEAD))).astype(np.float32)
        inputs.append(helper.make_tensor_value_info(f"state{layer}", TensorProto.FLOAT, [1, VALUE_HEADS, HEAD, HEAD]))
        nodes.append(helper.make_node("LinearAttention", ["q", "k", "v", f"state{layer}", "g", "b"],
                                      [f"y{layer}", f"present{layer}"], domain="com.microsoft",
                                      q_num_heads=QUERY_HEADS, kv_num_heads=VALUE_HEADS, update_rule="gated_delta"))
        outputs += [helper.make_tensor_value_info(f"y{layer}", TensorProto.FLOAT16, None),
                    helper.make_tensor_value_info(f"present{layer}", TensorProto.FLOAT, None)]
    return helper.make_graph(nodes, "linear", inputs, outputs), feeds, LINEAR_LAYERS


CASES = (("QMoE, Qwen3.5-35B-A3B's MoE layer (256 experts, 8 a token, int4)",
          functools.partial(_qmoe_model, QWEN35_35B_A3B)),
         ("QMoE, gpt-oss-20b's MoE layer (32 experts of 2880, 4 a token, int4, biases, SwiGLU limit)",
          functools.partial(_qmoe_model, GPT_OSS_20B)),
         ("LinearAttention, Qwen3.5's linear-attention recurrence (16/32 heads of 128, float16)", _linear_model))


def layers_benchmark(token_counts=(1, 16), rounds: int = 5, runs: int = 20, profile: bool = False) -> list[dict]:
    """Per case and token count: the median over rounds of the mean time a layer takes in a captured replay (us);
    with profile, also each kernel's GPU time in place a layer (tools/bench_gpu.kernel_profile over `runs` more
    replays, each waited for)."""
    import onnx
    from onnx import helper

    rng = np.random.default_rng(0)
    rows = []
    for title, build in CASES:
        for tokens in token_counts:
            graph, feeds, layers = build(tokens, rng)
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                            helper.make_opsetid("com.microsoft", 1)])
            with tempfile.TemporaryDirectory() as tmp:  # the weights as external data: over protobuf's 2 GB
                path = os.path.join(tmp, "model.onnx")
                onnx.save_model(model, path, save_as_external_data=True, location="weights.bin")
                del model, graph
                times, kernels = _replay_times(path, feeds, layers, rounds, runs, profile)
            row = {"case": title, "tokens": tokens, "layers": layers, "us_per_layer": float(np.median(times))}
            rows.append(dict(row, kernels=kernels) if profile else row)
    return rows


def _replay_times(path, feeds, layers, rounds, runs, profile):
    import onnxruntime as ort

    import onnxruntime_ep_seamless as seamless
    memory = seamless.get_devices("cuda")[0].memory_info(ort.OrtDeviceMemoryType.DEFAULT)

    def session():
        so = seamless.session_options(device="cuda", capture="auto")
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        sess = ort.InferenceSession(path, so)
        binding, kept = sess.io_binding(), []
        for name, array in feeds.items():
            value = ort.OrtValue.ortvalue_from_shape_and_type(array.shape, array.dtype, memory_info=memory)
            value.update_inplace(array)
            kept.append(value)
            binding.bind_ortvalue_input(name, value)
        for out in sess.get_outputs():
            binding.bind_output(out.name, "cuda", 0)
        for _ in range(5):  # recorded and captured
            sess.run_with_iobinding(binding)
        return sess, binding, kept

    def replays(bound, apart=False):  # bound: session()'s (its inputs alive); apart: each replay waited for
        sess, binding, _ = bound
        for _ in range(runs):
            sess.run_with_iobinding(binding)
            if apart:
                binding.synchronize_outputs()
        binding.synchronize_outputs()

    bound = session()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        replays(bound)
        times.append((time.perf_counter() - start) / runs / layers * 1e6)
    del bound
    kernels = None
    if profile:  # a session of its own: CUPTI sees no kernel of a graph captured before profiling began
        from .bench_gpu import kernel_profile
        kernels = kernel_profile(lambda: replays(session(), apart=True), runs)
        for k in (kernels.get("in_place") or {}).get("by_kernel", []):  # a replay's layers: per layer
            k["us_per_layer"] = round(k.pop("us_per_step") / layers, 2)
    return times, kernels
