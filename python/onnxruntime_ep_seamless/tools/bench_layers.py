"""`bench layers-gpu`: the GPU time of hybrid decoders' heaviest layers at real widths, our CUDA EP alone.

Qwen3.5-35B-A3B's MoE layer (com.microsoft QMoE: 256 experts, 8 a token, hidden 2048, expert width 512, int4 blocks of
32, SwiGLU; its router MatMul in front) and its linear-attention recurrence (com.microsoft LinearAttention: 16 query/key
heads and 32 value heads of 128, gated delta rule, float16), random weights. A model chains several such layers (QMoE)
or runs several side by side (LinearAttention) so that one captured replay's host cost spreads over them; every input
and output stays on the GPU (IO binding). No peer: ORT's CUDA EP has no kernel for either op."""
from __future__ import annotations

import time

import numpy as np

HIDDEN, EXPERTS, TOP_K, EXPERT_WIDTH, BLOCK = 2048, 256, 8, 512, 32
QUERY_HEADS, VALUE_HEADS, HEAD = 16, 32, 128
QMOE_LAYERS = 3           # 0.4 GB of int4 experts each, under protobuf's 2 GB for the model
LINEAR_LAYERS = 8


def _qmoe_model(tokens: int, rng):
    from onnx import TensorProto, helper, numpy_helper
    nodes, inits, x = [], [], "x"
    for layer in range(QMOE_LAYERS):
        arrays = {f"w1_{layer}": rng.integers(0, 256, (EXPERTS, 2 * EXPERT_WIDTH, HIDDEN // 2), dtype=np.uint8),
                  f"s1_{layer}": (0.001 + 0.002 * rng.random((EXPERTS, 2 * EXPERT_WIDTH, HIDDEN // BLOCK))),
                  f"w2_{layer}": rng.integers(0, 256, (EXPERTS, HIDDEN, EXPERT_WIDTH // 2), dtype=np.uint8),
                  f"s2_{layer}": (0.001 + 0.002 * rng.random((EXPERTS, HIDDEN, EXPERT_WIDTH // BLOCK))),
                  f"router_{layer}": 0.05 * rng.standard_normal((HIDDEN, EXPERTS))}
        inits += [numpy_helper.from_array(a if a.dtype == np.uint8 else a.astype(np.float16), n)
                  for n, a in arrays.items()]
        nodes.append(helper.make_node("MatMul", [x, f"router_{layer}"], [f"logits_{layer}"]))
        nodes.append(helper.make_node(
            "QMoE", [x, f"logits_{layer}", f"w1_{layer}", f"s1_{layer}", "", f"w2_{layer}", f"s2_{layer}"],
            [f"y{layer}"], domain="com.microsoft", k=TOP_K, activation_type="swiglu", swiglu_fusion=1,
            expert_weight_bits=4, block_size=BLOCK, normalize_routing_weights=1))
        x = f"y{layer}"
    graph = helper.make_graph(nodes, "qmoe",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [tokens, HIDDEN])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT16, [tokens, HIDDEN])], inits)
    feeds = {"x": (0.5 * rng.standard_normal((tokens, HIDDEN))).astype(np.float16)}
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


CASES = (("QMoE, Qwen3.5-35B-A3B's MoE layer (256 experts, 8 a token, int4)", _qmoe_model),
         ("LinearAttention, Qwen3.5's linear-attention recurrence (16/32 heads of 128, float16)", _linear_model))


def layers_benchmark(token_counts=(1, 16), rounds: int = 5, runs: int = 20) -> list[dict]:
    """Per case and token count: the median over rounds of the mean time a layer takes in a captured replay (us)."""
    import onnxruntime as ort
    from onnx import helper

    import onnxruntime_ep_seamless as seamless
    memory = seamless.get_devices("cuda")[0].memory_info(ort.OrtDeviceMemoryType.DEFAULT)
    rng = np.random.default_rng(0)
    rows = []
    for title, build in CASES:
        for tokens in token_counts:
            graph, feeds, layers = build(tokens, rng)
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                            helper.make_opsetid("com.microsoft", 1)])
            so = seamless.session_options(device="cuda", capture="auto")
            so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
            sess = ort.InferenceSession(model.SerializeToString(), so)
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
            times = []
            for _ in range(rounds):
                start = time.perf_counter()
                for _ in range(runs):
                    sess.run_with_iobinding(binding)
                binding.synchronize_outputs()
                times.append((time.perf_counter() - start) / runs / layers * 1e6)
            rows.append({"case": title, "tokens": tokens, "layers": layers, "us_per_layer": float(np.median(times))})
            del sess, binding
    return rows
