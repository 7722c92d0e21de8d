"""Where the CUDA EP places nodes and where capture would have to stop (seams), without a GPU:
exec/cuda_capture (place, padding) and `python -m onnxruntime_ep_seamless capture-report`."""
import struct
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import material
from onnxruntime_ep_seamless.tools.capture_report import analyse, render, timeline
from onnxruntime_ep_seamless.graph.onnx_import import import_model
from onnxruntime_ep_seamless.kernels.registry import FUSED_DOMAIN


def model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def seams(onnx_model):
    parts, declined = analyse(import_model(onnx_model))
    return [(s.node.op_type, s.seam) for p in parts for s in p.steps if s.seam], parts, declined


def builder_seams(family, precision):
    """seams() of a builder decoder of tests/material.py (its -e cpu export), or the test skips."""
    import onnx
    path = material.genai_model_dir(family, precision) / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    return seams(onnx.load(str(path)))


def test_builder_decoder_is_one_segment():
    path = material.genai_small_dir("int4", "cuda") / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    import onnx
    found, parts, declined = seams(onnx.load(str(path)))
    assert not found and not declined and len(parts) == 1 and parts[0].segments == 1


@pytest.mark.parametrize("precision", ["fp32", "int4"])
def test_builder_moe_decoder_is_one_segment(precision):
    # LFM2-MoE: the router (TopK, GatherElements, ScatterElements) and MoE / QMoE on the GPU, the experts chosen there
    path = material.genai_model_dir("lfm2moe", precision) / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    import onnx
    found, parts, declined = seams(onnx.load(str(path)))
    assert not found and not declined and len(parts) == 1 and parts[0].segments == 1
    experts = [s for s in parts[0].steps if s.node.op_type in ("MoE", "QMoE")]
    assert len(experts) == 2 and all(s.on_gpu and s.kdef.device == "cuda" for s in experts)


@pytest.mark.parametrize("family,precision", [(f, p) for f in material.GENAI_FAMILIES
                                              for p in material.GENAI_FAMILY_CUDA_PRECISIONS] +
                         [(f, "int4") for f in material.GENAI_CUDA_FAMILIES])
def test_every_builder_family_for_cuda_is_claimed_whole_in_one_segment(family, precision):
    """The builder's -e cuda graph of every family (its fused ops: Qwen3's and Gemma 3's Q/K norms inside
    GroupQueryAttention, the MoE families' CUTLASS-prepacked QMoE experts, PhiMoE's FC3 gating and sparse mixer,
    ...): every node claimed by the CUDA EP, a run one captured segment."""
    import onnx
    path = material.genai_model_dir(family, precision, "cuda") / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    found, parts, declined = seams(onnx.load(str(path)))
    assert not declined and not found and len(parts) == 1 and parts[0].segments == 1, declined


def test_builder_gated_delta_net_export_is_one_segment():
    """Qwen3.5's -e cuda export with linear_attn_op=gated_delta_net: its GatedDeltaNet on the GPU (attention.cu),
    every node claimed, a run one captured segment."""
    import onnx
    path = material.genai_gdn_dir() / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    found, parts, declined = seams(onnx.load(str(path)))
    assert not declined and not found and len(parts) == 1 and parts[0].segments == 1, declined
    assert any(s.node.op_type == "GatedDeltaNet" and s.on_gpu and s.kdef.device == "cuda" for s in parts[0].steps)


@pytest.mark.parametrize("family", ["qwen3_5", "qwen3_5_moe"])
@pytest.mark.parametrize("precision", ["fp32", "int4"])
def test_builder_hybrid_decoder_is_one_segment(family, precision):
    # Qwen3.5's hybrids: the linear-attention layer (its conv and recurrent states, LinearAttentionGate, GatedRMSNorm;
    # the q and k norms in the recurrence's loads: plan/fusion.py normed_linear_attention), MRotaryEmbedding's
    # positions read on the GPU, and in the MoE build the routed and shared experts
    found, parts, declined = builder_seams(family, precision)
    assert not found and not declined and len(parts) == 1 and parts[0].segments == 1
    ops = {s.node.op_type for s in parts[0].steps if s.on_gpu and s.kdef.device == "cuda"}
    assert {"NormedLinearAttention", "LinearAttentionGate", "GatedRMSNorm", "MRotaryEmbedding"} <= ops
    assert "LpNormalization" not in ops
    # the short convolution reads and writes (batch, position, channel): no Transposes (token_major_causal_conv)
    assert {s.node.domain for s in parts[0].steps if s.node.op_type == "CausalConvWithState"} == {FUSED_DOMAIN}
    assert "Transpose" not in ops


@pytest.mark.parametrize("family", ["qwen3_5", "lfm2", "qwen3_5_moe"])
@pytest.mark.parametrize("precision", ["fp32", "int4"])
def test_builder_hybrid_first_prompt_is_padded_to_a_bucket(family, precision):
    # a hybrid's first prompt of any length replays its bucket's graph: the convolutions and linear attentions take
    # the real length from GroupQueryAttention's seqlens_k in the padded run, so their states stop there; an MoE's
    # router rows ([B * S, experts]) go to the MoE op only
    from onnxruntime_ep_seamless.exec.cuda_capture import RECURRENT, with_real_lengths
    _, parts, _ = builder_seams(family, precision)
    plan, steps = parts[0].prompt, parts[0].steps
    assert plan is not None, parts[0].prompt_problem
    recurrent = [s.node for s in steps if s.node.op_type in RECURRENT]
    assert recurrent and set(plan.stateful) == {n.index for n in recurrent}
    assert {s.node.inputs[5] for s in steps if s.node.op_type == "GroupQueryAttention"} == {plan.seqlens}
    # ORT's order may put the mask's sum after a recurrent node (the 2B's export): the padded steps compute it first
    late = [s for s in steps if s.node.index not in plan.first]
    gqa = next(k for k, s in enumerate(late) if s.node.op_type == "GroupQueryAttention")
    late[gqa:gqa] = [s for s in steps if s.node.index in plan.first]
    padded = [node for node, *_ in with_real_lengths([(s.node, None) for s in late], plan)]
    made = next(k for k, node in enumerate(padded) if plan.seqlens in node.outputs)
    for n in recurrent:  # the kernel's real_lengths after the op's inputs; the graph's node untouched
        k = next(k for k, node in enumerate(padded) if node.index == n.index)
        assert padded[k].inputs[RECURRENT[n.op_type][1]] == plan.seqlens and plan.seqlens not in n.inputs and made < k


def test_a_hybrids_padded_prompt_does_not_go_by_node_names():
    # ONNX does not make node names unique: a recurrent node named as another node (here every node one name) is
    # still the one that takes the real length, and the mask's sum still runs first
    import onnx
    path = material.genai_model_dir("qwen3_5", "fp32") / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    from onnxruntime_ep_seamless.exec.cuda_capture import RECURRENT, with_real_lengths
    model = onnx.load(str(path))
    for node in model.graph.node:
        node.name = "same"
    _, parts, _ = seams(model)
    plan, steps = parts[0].prompt, parts[0].steps
    assert plan is not None, parts[0].prompt_problem
    padded = [node for node, *_ in with_real_lengths([(s.node, None) for s in steps], plan)]
    takes = [node.op_type for node in padded if plan.seqlens in node.inputs and node.op_type != "GroupQueryAttention"]
    assert takes and set(takes) <= set(RECURRENT) and len(takes) == len(plan.stateful)


@pytest.mark.parametrize("family,precision", [("gptoss", "fp32"), ("gptoss", "int4"), ("gemma2", "fp32"),
                                              ("gemma3", "int4")])
def test_builder_window_cache_decoder_is_one_segment(family, precision):
    # local layers with a window-sized KV cache (GroupQueryAttention sliding_window_cache=1) on the GPU; gpt-oss: MoE
    # with SwiGLU's limit and attention sinks. The window caches keep their capacity: only the global layers' grow
    path = material.genai_model_dir(family, precision) / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    import onnx
    found, parts, declined = seams(onnx.load(str(path)))
    assert not found and not declined and len(parts) == 1 and parts[0].segments == 1
    attention = [s for s in parts[0].steps if s.node.op_type == "GroupQueryAttention"]
    assert all(s.on_gpu and s.kdef.device == "cuda" for s in attention)
    windows = [s for s in attention if s.node.attrs.get("sliding_window_cache")]
    assert windows and not any(s.grows for s in windows)
    assert parts[0].padding is not None and not parts[0].padding.left
    # a window-sized cache keeps a prompt's last positions: padded ones would replace real ones
    assert parts[0].prompt is None and "a window-sized KV cache keeps the last positions" in parts[0].prompt_problem


def test_shape_computed_on_the_gpu_is_a_seam():
    nodes = [helper.make_node("Cast", ["s"], ["shape"], to=TensorProto.INT64),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    found, parts, _ = seams(model(nodes, [helper.make_tensor_value_info("x", 1, [2, 3]),
                                          helper.make_tensor_value_info("s", 1, [2])],
                                  [helper.make_tensor_value_info("y", 1, None)]))
    assert found == [("Reshape", "reads shape on the host (a shape-like input computed on the GPU)")]
    assert parts[0].segments == 2


def test_shape_from_constants_and_shapes_is_no_seam():
    shape = numpy_helper.from_array(np.array([3, -1], np.int64), "shape")
    nodes = [helper.make_node("Shape", ["x"], ["dims"]), helper.make_node("Reshape", ["x", "dims"], ["a"]),
             helper.make_node("Reshape", ["a", "shape"], ["y"])]
    found, parts, _ = seams(model(nodes, [helper.make_tensor_value_info("x", 1, [2, 3])],
                                  [helper.make_tensor_value_info("y", 1, None)], [shape]))
    assert not found and parts[0].segments == 1


def test_data_dependent_op_on_gpu_values_is_a_seam_or_a_boundary():
    # NonZero of an integer tensor that lives on the GPU: the host kernel must read it (a seam)
    nodes = [helper.make_node("NonZero", ["m"], ["idx"])]
    found, _, _ = seams(model(nodes, [helper.make_tensor_value_info("m", TensorProto.INT64, [4])],
                              [helper.make_tensor_value_info("idx", TensorProto.INT64, None)]))
    assert found == [("NonZero", "reads m on the host (no CUDA kernel: dtype int64 not supported (supports float16, "
                                 "float32))")]
    # of a float tensor: its CUDA kernel (kernels/cuda/shape.py, on_host) reads it on the host too; the partition stays whole
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("NonZero", ["r"], ["idx"]),
             helper.make_node("Cast", ["idx"], ["f"], to=1), helper.make_node("Neg", ["f"], ["y"])]
    found, parts, declined = seams(model(nodes, [helper.make_tensor_value_info("x", 1, [4])],
                                         [helper.make_tensor_value_info("y", 1, None)]))
    assert found == [("NonZero", "reads r on the host (the op runs on the host: its CPU kernel)")]
    assert len(parts) == 1 and not declined
    assert "total: 1 partition(s), 2 segment(s) per run" in render(parts, declined)


def test_sub_byte_values_run_on_the_host_inside_the_partition():
    """int4 values stay packed on the GPU; no CUDA kernel takes them, so their Casts run their CPU kernels on the host
    (seams where they read GPU values) and the partition stays whole."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Cast", ["r"], ["c"], to=TensorProto.INT4),
             helper.make_node("Cast", ["c"], ["f"], to=1), helper.make_node("Neg", ["f"], ["y"])]
    found, parts, declined = seams(model(nodes, [helper.make_tensor_value_info("x", 1, [4])],
                                         [helper.make_tensor_value_info("y", 1, None)], opset=21))
    assert found == [("Cast", "reads r on the host (no CUDA kernel: 'c' (int4): no CUDA kernel takes sub-byte values)")]
    assert len(parts) == 1 and not declined and parts[0].segments == 2


def sequence_model(sequence_input=False, sequence_output=False):
    """x -> Relu -> SequenceConstruct(r, x) -> SequenceInsert(z) -> ConcatFromSequence -> Neg -> y, and
    Optional(r) -> OptionalHasElement -> Cast -> Add(y). sequence_input: the sequence is a graph input instead;
    sequence_output: the sequence is also a graph output."""
    f32 = lambda name, shape=(2, 3): helper.make_tensor_value_info(name, 1, list(shape))
    seq = helper.make_tensor_sequence_value_info("s0", 1, None)
    nodes = [helper.make_node("Relu", ["x"], ["r"])]
    nodes += [] if sequence_input else [helper.make_node("SequenceConstruct", ["r", "x"], ["s0"])]
    nodes += [helper.make_node("SequenceInsert", ["s0", "z"], ["s1"]),
              helper.make_node("ConcatFromSequence", ["s1"], ["c"], axis=0), helper.make_node("Neg", ["c"], ["n"]),
              helper.make_node("Optional", ["r"], ["o"]), helper.make_node("OptionalHasElement", ["o"], ["h"]),
              helper.make_node("Cast", ["h"], ["hf"], to=1), helper.make_node("Add", ["n", "hf"], ["y"])]
    inputs = [f32("x"), f32("z")] + ([seq] if sequence_input else [])
    outputs = [helper.make_tensor_value_info("y", 1, None)] + \
        ([helper.make_tensor_sequence_value_info("s1", 1, None)] if sequence_output else [])
    return model(nodes, inputs, outputs, opset=18)


def test_sequences_and_optionals_inside_a_cuda_partition_stay_on_the_host():
    """Their nodes run their CPU kernels on the host inside the one partition (seams where they read GPU values);
    a sequence coming in as a graph input, or leaving as an output, is declined with the reason."""
    found, parts, declined = seams(sequence_model())
    assert len(parts) == 1 and not declined, declined
    assert ("SequenceConstruct", "reads r, x on the host (no CUDA kernel: 's0' (sequence of float32): sequences and "
                                 "optionals stay on the host)") in found
    assert not any(op in ("ConcatFromSequence", "OptionalHasElement") for op, _ in found)  # host values already
    reasons = lambda kw: {op: why for (_, op), why in seams(sequence_model(**kw))[2].items()}
    declined = reasons(dict(sequence_input=True))
    assert declined["SequenceInsert"] == "its input 's0' (sequence of float32) comes from outside the EP's part of " \
                                        "the graph: ORT cannot hand the CUDA EP such a value"
    assert declined["ConcatFromSequence"].startswith("its input 's1' (sequence of float32) comes from outside the EP")
    declined = reasons(dict(sequence_output=True))
    assert "is read outside the EP's part of the graph" in declined["SequenceInsert"]
    assert "comes from outside the EP's part of the graph" in declined["ConcatFromSequence"]


def reshape_by_a_gpu_shape():
    nodes = [helper.make_node("Cast", ["s"], ["shape"], to=TensorProto.INT64, name="to_shape"),
             helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")]
    return model(nodes, [helper.make_tensor_value_info("x", 1, [2, 3]), helper.make_tensor_value_info("s", 1, [2])],
                 [helper.make_tensor_value_info("y", 1, None)])


def test_the_timeline_shows_segments_and_each_seams_node_and_reason():
    parts, _ = analyse(import_model(reshape_by_a_gpu_shape()))
    (row,) = timeline(parts)
    assert row.kinds == ["GPU", "seam"] and row.ops == ["Cast", "Reshape"]
    assert row.segments == [(0, 1), (1, 2)]  # the seam starts the second segment
    assert row.seams == [(1, "'reshape' (Reshape): reads shape on the host (a shape-like input computed on the GPU)")]


def test_cli_prints_the_report_and_draws_the_timeline(tmp_path):
    path, png = tmp_path / "m.onnx", tmp_path / "t.png"
    path.write_bytes(reshape_by_a_gpu_shape().SerializeToString())
    out = subprocess.run([sys.executable, "-m", "onnxruntime_ep_seamless", "capture-report", str(path), "--png",
                          str(png)], capture_output=True, text=True, check=True).stdout
    assert "seam at" in out and "Reshape" in out and "2 segment(s)" in out and f"timeline: {png}" in out
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 800 and height >= 250  # a figure, with its seams' list under it


def test_cli_says_the_timeline_needs_matplotlib(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(reshape_by_a_gpu_shape().SerializeToString())
    code = ("import sys; sys.modules['matplotlib'] = None; from onnxruntime_ep_seamless.tools.cli import main; "
            f"sys.exit(main(['capture-report', {str(path)!r}, '--png', {str(tmp_path / 't.png')!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 1 and not (tmp_path / "t.png").exists()
    assert "capture-report --png draws with matplotlib, which is not installed: pip install matplotlib" in proc.stderr


def test_cli_says_what_it_cannot_read(tmp_path):
    code = ("import sys; sys.modules['onnx'] = None; from onnxruntime_ep_seamless.tools.cli import main; "
            f"sys.exit(main(['capture-report', {str(tmp_path / 'm.onnx')!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 2 and "capture-report (it reads the model file) needs the onnx package: pip install onnx" \
        in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "onnxruntime_ep_seamless", "capture-report", str(tmp_path / "no.onnx")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and f"capture-report: no model file {str(tmp_path / 'no.onnx')!r}" in proc.stderr


def test_growing_symbols_come_from_the_kv_cache():
    from onnxruntime_ep_seamless.exec.cuda_capture import growing_symbols
    nodes = [helper.make_node("Concat", ["past_key", "k"], ["present_key"], axis=2),
             helper.make_node("Relu", ["q"], ["y"])]
    onnx_model = model(nodes, [helper.make_tensor_value_info("past_key", 1, [1, 2, "past", 4]),
                               helper.make_tensor_value_info("k", 1, [1, 2, "seq", 4]),
                               helper.make_tensor_value_info("q", 1, [1, "seq", 8])],
                       [helper.make_tensor_value_info("present_key", 1, [1, 2, "total", 4]),
                        helper.make_tensor_value_info("y", 1, [1, "seq", 8])])
    graph = import_model(onnx_model)
    assert growing_symbols(graph) == {"past", "total"}
    parts, _ = analyse(graph)
    assert [(s.node.op_type, s.grows) for s in parts[0].steps] == [("Concat", True), ("Relu", False)]
    assert "1 GPU node(s) with shapes that grow with the KV length (Concat), 0 of them device-indexed" in \
        render(parts, {})


def test_builder_decoder_growing_work_is_attention_and_the_mask_sum():
    path = material.genai_small_dir("int4", "cuda") / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    import onnx
    parts, declined = analyse(import_model(onnx.load(str(path))))
    growing = {s.node.op_type: s.kdef.capture for s in parts[0].steps if s.grows and s.on_gpu}
    assert growing.get("GroupQueryAttention") == "device-indexed" and growing.get("ReduceSumSubCast") == "static"
    assert parts[0].padding_problem == ""  # capture=auto pads the KV and mask to a capacity
    assert "one graph per capacity serves every KV length" in render(parts, declined)
    # and a first prompt's ids and mask to a bucket; its logits and presents are as long as they are
    assert parts[0].prompt_problem == "" and parts[0].prompt.inputs == {"attention_mask": 1, "input_ids": 1}
    assert parts[0].prompt.outputs["logits"] == (1, (("input_ids", 1),))
    # as long as the mask, or as the past where that is a shared buffer (its length then)
    assert parts[0].prompt.outputs["present.1.value"] == (2, (("attention_mask", 1), ("past_key_values.1.value", 2)))
    assert "a first prompt (every past KV empty or a shared buffer) is padded at its end" in render(parts, declined)


@pytest.mark.parametrize("precision,projection", [("int4", "MatMulNBits"), ("fp16", "Linear")])
def test_builder_decoder_attention_knows_what_reads_it(precision, projection):
    # registry PLAN_FACTS "_readers": the decode attention's launch order depends on it (kernels/cuda/attention.py)
    path = material.genai_small_dir(precision, "cuda") / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    import onnx
    parts, _ = analyse(import_model(onnx.load(str(path))))
    readers = {s.readers for s in parts[0].steps if s.node.op_type == "GroupQueryAttention"}
    assert readers == {(projection,)}


def gqa_decoder(mask_rule=("ReduceSum", {}), extra=()):
    """A one-layer GroupQueryAttention step as the builder writes it: seqlens_k from the mask's sum,
    total_sequence_length from its shape."""
    one = numpy_helper.from_array(np.array([1], np.int64), "one")
    axis1 = numpy_helper.from_array(np.array(1, np.int64), "axis1")
    op, attrs = mask_rule
    nodes = [helper.make_node(op, ["attention_mask", "one"], ["sum"], keepdims=0, **attrs),
             helper.make_node("Sub", ["sum", "one"], ["sub"]),
             helper.make_node("Cast", ["sub"], ["seqlens_k"], to=TensorProto.INT32),
             helper.make_node("Shape", ["attention_mask"], ["mask_shape"]),
             helper.make_node("Gather", ["mask_shape", "axis1"], ["total"]),
             helper.make_node("Cast", ["total"], ["total32"], to=TensorProto.INT32),
             helper.make_node("GroupQueryAttention", ["qkv", "", "", "past_key", "past_value", "seqlens_k", "total32"],
                              ["out", "present_key", "present_value"], domain="com.microsoft", num_heads=2,
                              kv_num_heads=1), *extra]
    kv = lambda name, length: helper.make_tensor_value_info(name, TensorProto.FLOAT16, ["batch", 1, length, 8])
    onnx_model = model(nodes, [helper.make_tensor_value_info("qkv", TensorProto.FLOAT16, ["batch", "seq", 32]),
                               helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total"]),
                               kv("past_key", "past"), kv("past_value", "past")],
                       [helper.make_tensor_value_info("out", TensorProto.FLOAT16, ["batch", "seq", 16]),
                        kv("present_key", "total"), kv("present_value", "total")], [one, axis1])
    onnx_model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return onnx_model


def test_a_gqa_with_qk_norm_is_claimed_and_the_cli_reads_external_data(tmp_path, monkeypatch):
    """The builder's -e cuda attention of Qwen3: GroupQueryAttention with q_norm_weight and k_norm_weight, claimed
    whole; the CLI reads a model whose weights live in an external data file (as one past 2 GiB must be saved)."""
    import onnx
    onnx_model = gqa_decoder()
    attention = next(n for n in onnx_model.graph.node if n.op_type == "GroupQueryAttention")
    attention.input.extend([""] * (14 - len(attention.input)) + ["q_norm", "k_norm"])
    onnx_model.graph.initializer.extend([numpy_helper.from_array(np.full(8, 1.5, np.float16), "q_norm"),
                                         numpy_helper.from_array(np.full(8, 0.5, np.float16), "k_norm")])
    found, parts, declined = seams(onnx_model)
    assert not found and not declined and len(parts) == 1 and parts[0].segments == 1
    path = tmp_path / "m.onnx"
    onnx.save(onnx_model, str(path), save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    out = subprocess.run([sys.executable, "-m", "onnxruntime_ep_seamless", "capture-report", str(path)],
                         capture_output=True, text=True, check=True).stdout
    assert "1 segment(s)" in out and "declined" not in out, out
    from onnxruntime_ep_seamless.graph import onnx_import
    assert onnx_import.import_path(str(path)).values["k_norm"].const.tolist() == [0.5] * 8  # from the data file
    # past protobuf's limit the shapes are inferred before the data is loaded: the inline values' shapes then
    monkeypatch.setattr(onnx_import, "PROTOBUF_LIMIT", 100)
    graph = onnx_import.import_path(str(path))
    assert graph.values["k_norm"].const.tolist() == [0.5] * 8 and graph.values["total32"].dtype == np.int32


def test_padding_plan_of_a_gqa_decoder():
    from onnxruntime_ep_seamless.exec.cuda_capture import padding
    graph = import_model(gqa_decoder())
    parts, _ = analyse(graph)
    plan, why = padding(graph, parts[0].steps, graph.inputs, graph.outputs)
    assert why == "" and plan.inputs == {"attention_mask": 1, "past_key": 2, "past_value": 2}
    # an unpadded present is as long as the longer of past and mask: ORT gets that shape
    sources = (("past_key", 2), ("past_value", 2), ("attention_mask", 1))
    assert plan.outputs == {"present_key": (2, sources), "present_value": (2, sources)}


def test_prompt_padding_plan_of_a_gqa_decoder():
    from onnxruntime_ep_seamless.exec.cuda_capture import prompt_padding
    graph = import_model(gqa_decoder())
    parts, _ = analyse(graph)
    plan, why = prompt_padding(graph, parts[0].steps, graph.inputs, graph.outputs)
    assert why == "" and plan.inputs == {"qkv": 1, "attention_mask": 1} and plan.past == {"past_key": 2, "past_value": 2}
    assert plan.outputs == {"out": (1, (("qkv", 1),)), "present_key": (2, (("attention_mask", 1), ("past_key", 2))),
                            "present_value": (2, (("attention_mask", 1), ("past_value", 2)))}


@pytest.mark.parametrize("extra, why", [
    # attention across positions, a position's elements spread over the padded axis, a sum over padded positions
    ([helper.make_node("Softmax", ["out"], ["p"], axis=1)], "(Softmax): no rule for a padded input"),
    ([helper.make_node("ArgMax", ["out"], ["p"], axis=1)], "(ArgMax): reduces over the padded axis"),
    ([helper.make_node("Reshape", ["out", "flat"], ["p"])], "(Reshape): a shape that splits a position's elements"),
    ([helper.make_node("ReduceSum", ["attention_mask", "one"], ["n"]), helper.make_node("Reshape", ["out", "rows"], ["p"]),
      helper.make_node("ReduceSum", ["p", "one"], ["q"])], "(ReduceSum): a sum over positions the padding fills"),
    # a router's rows ([B * S, experts]: batch-major, so padded positions sit between a batch's) read by no MoE
    ([helper.make_node("Reshape", ["out", "router"], ["p"]), helper.make_node("Softmax", ["p"], ["q"])],
     "(Softmax): reads (batch, position) rows merged into one axis"),
])
def test_prompt_padding_declines_what_would_mix_positions(extra, why):
    from onnxruntime_ep_seamless.exec.cuda_capture import prompt_padding
    onnx_model = gqa_decoder(extra=extra)
    onnx_model.graph.initializer.extend([numpy_helper.from_array(np.array([0, -1, 32], np.int64), "flat"),
                                         numpy_helper.from_array(np.array([0, 0, 16], np.int64), "rows"),
                                         numpy_helper.from_array(np.array([-1, 16], np.int64), "router")])
    graph = import_model(onnx_model)
    parts, _ = analyse(graph)
    plan, problem = prompt_padding(graph, parts[0].steps, graph.inputs, graph.outputs)
    assert plan is None and why in problem


@pytest.mark.parametrize("keepdims, axis", [(1, 1), (0, 1)])
def test_prompt_padding_takes_an_argmax_over_another_axis(keepdims, axis):
    # bench decode-gpu --token device's next token: ArgMax over the vocabulary keeps each position apart
    from onnxruntime_ep_seamless.exec.cuda_capture import prompt_padding
    onnx_model = gqa_decoder(extra=[helper.make_node("ArgMax", ["out"], ["next"], axis=-1, keepdims=keepdims)])
    onnx_model.graph.output.append(helper.make_tensor_value_info("next", TensorProto.INT64, None))
    graph = import_model(onnx_model)
    parts, _ = analyse(graph)
    plan, why = prompt_padding(graph, parts[0].steps, graph.inputs, graph.outputs)
    assert why == "" and plan.outputs["next"] == (axis, (("qkv", 1),))
    first = import_model(gqa_decoder(extra=[helper.make_node("ArgMax", ["out"], ["next"], axis=0, keepdims=0)]))
    plan, why = prompt_padding(first, analyse(first)[0][0].steps, first.inputs, first.outputs)
    assert why == ""  # over the batch, without keepdims: the padded axis moves to 0 (not an output here)


@pytest.mark.parametrize("change, op", [
    (dict(mask_rule=("ReduceMax", {})), "ReduceMax"),  # the max of a mask padded with zeros is still right, but no rule says so
    (dict(extra=[helper.make_node("Concat", ["present_key", "present_key"], ["twice"], axis=2)]), "Concat"),
])
def test_padding_declines_what_padding_would_change(change, op):
    from onnxruntime_ep_seamless.exec.cuda_capture import padding
    graph = import_model(gqa_decoder(**change))
    parts, _ = analyse(graph)
    plan, why = padding(graph, parts[0].steps, graph.inputs, graph.outputs)
    assert plan is None and f"({op}): no rule for a padded input" in why


def test_padding_tells_the_batch_from_the_length():
    # the mask's dim 0 (the batch) is pinned and may be used anywhere; its dim 1 is the padded length
    from onnxruntime_ep_seamless.exec.cuda_capture import padding
    scalars = [numpy_helper.from_array(np.array(v, np.int64), name) for v, name in ((0, "zero"), (1, "step"))]
    batch = [helper.make_node("Shape", ["attention_mask"], ["mask_shape0"]),
             helper.make_node("Gather", ["mask_shape0", "zero"], ["batch"]),
             helper.make_node("Range", ["zero", "batch", "step"], ["rows"])]  # no rule would take a length
    onnx_model = gqa_decoder(extra=batch)
    onnx_model.graph.initializer.extend(scalars)
    graph = import_model(onnx_model)
    parts, _ = analyse(graph)
    plan, why = padding(graph, parts[0].steps, graph.inputs, graph.outputs)
    assert why == "" and plan is not None
    # a float sum over the padded axis would round differently with more (zero) terms: declined
    graph = import_model(gqa_decoder(extra=[helper.make_node("Cast", ["attention_mask"], ["maskf"], to=1),
                                            helper.make_node("ReduceSum", ["maskf", "one"], ["fsum"])]))
    parts, _ = analyse(graph)
    plan, why = padding(graph, parts[0].steps, graph.inputs, graph.outputs)
    assert plan is None and "a float sum over a padded axis" in why


@pytest.mark.parametrize("export", [name for name, *_ in material.TINY_DECODERS])
def test_torch_export_is_padded_at_the_start(export):
    """A torch export's KV cache grows by Concat and its mask is built from shapes: no end-padding
    rule covers it, so capture=auto pads every growing input at its start (checked at run time)."""
    path = material.tiny_llama_dir() / export
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    import onnx
    parts, declined = analyse(import_model(onnx.load(str(path))))
    assert not declined and len(parts) == 1 and parts[0].segments == 1
    plan = parts[0].padding
    kv = {f"past_{i}_{kv}": 2 for i in range(material.LLAMA_LAYERS) for kv in ("key", "value")}
    assert plan.left and plan.inputs == {"attention_mask": 1, **kv}
    assert set(plan.outputs) == {n.replace("past", "present") for n in kv}
    assert "padded at their start" in render(parts, declined)


def test_builder_decoder_is_padded_at_the_end():
    path = material.genai_small_dir("int4", "cuda") / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    import onnx
    parts, _ = analyse(import_model(onnx.load(str(path))))
    assert parts[0].padding is not None and not parts[0].padding.left


@pytest.mark.parametrize("export", [name for name, *_ in material.TINY_DECODERS])
def test_torch_export_left_padded_computes_the_same_on_stock_ort(export):
    """The premise of padding at the start, on stock ORT's CPU EP: a decode step with the past KV and
    the mask preceded by zeros (a longer, masked history) gives the unpadded step's logits and
    presents that end with the unpadded presents (to float32 rounding: the CPU kernels block their
    sums differently for other lengths; our CUDA kernels make them the same bytes, tests/cuda)."""
    path = material.tiny_llama_dir() / export
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    import onnxruntime as ort
    from models.test_real_models import llama_feeds
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds, lead = llama_feeds(1, 1, 6, seed=3), 57
    padded = {name: np.concatenate([np.zeros(v.shape[:2] + (lead,) + v.shape[3:], v.dtype), v], axis=2)
              if name.startswith("past") else v for name, v in feeds.items()}
    padded["attention_mask"] = np.concatenate([np.zeros((1, lead), np.int64), feeds["attention_mask"]], axis=1)
    want, got = sess.run(None, feeds), sess.run(None, padded)
    for a, b in zip(got, want):  # logits, and presents from the second layer on, carry that rounding
        np.testing.assert_allclose(a[:, :, lead:] if a.ndim == 4 else a, b, rtol=1e-5, atol=1e-5)
    names = [o.name for o in sess.get_outputs()]
    for name, a in zip(names[1:], got[1:]):  # the history itself is copied
        np.testing.assert_array_equal(a[:, :, :lead + 6], padded[name.replace("present", "past")])


def concat_decoder(past_shape=("batch", 2, "past", 4)):
    """A KV cache grown by Concat, with an attention mask under a symbol of its own (as torch.export
    names each input's), and a MatMul over the grown axis: no end-padding rule covers it."""
    kv = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))
    nodes = [helper.make_node("Concat", ["past_key", "new"], ["present_key"], axis=2),
             helper.make_node("Transpose", ["present_key"], ["keys_t"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["new", "keys_t"], ["scores"])]
    return model(nodes, [kv("past_key", past_shape), kv("new", ("batch", 2, 1, 4)),
                         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "s53"])],
                 [kv("present_key", ("batch", 2, "past + 1", 4)), kv("scores", ("batch", 2, 1, "past + 1"))])


def test_padding_at_the_start_plan():
    from onnxruntime_ep_seamless.exec.cuda_capture import choose_padding
    graph = import_model(concat_decoder())
    parts, _ = analyse(graph)
    inputs = ["attention_mask", "new", "past_key"]
    plan, why = choose_padding(graph, parts[0].steps, inputs, ["present_key", "scores"])
    assert "no rule for a padded input" in why  # not at the end ...
    # ... but at the start: the KV on its length axis, the mask (its own symbol) on its axis 1
    assert plan.left and plan.inputs == {"past_key": 2, "attention_mask": 1}
    assert plan.outputs == {"present_key": (2, ()), "scores": (3, ())}


def test_padding_at_the_start_declines_an_input_growing_on_two_axes():
    from onnxruntime_ep_seamless.exec.cuda_capture import choose_padding
    graph = import_model(concat_decoder(past_shape=("batch", 2, "past", "past")))
    parts, _ = analyse(graph)
    plan, why = choose_padding(graph, parts[0].steps, ["attention_mask", "new", "past_key"], ["present_key", "scores"])
    assert plan is None and "grows on more than one axis" in why


def phi3_with_threshold(threshold: int):
    """The builder's small Phi-3 (LongRoPE: an If on total length > original_max_position_embeddings, 32 in its config,
    picks the rotary factors: the small caches have that many rows), its threshold replaced, the small caches repeated
    to as many rows (every length up to it must find its row, as in a real Phi-3, whose threshold is 4096)."""
    path = material.genai_model_dir("phi3", "fp32") / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    import onnx
    model = onnx.load(str(path))
    (greater,) = [n for n in model.graph.node if n.op_type == "Greater"]
    model.graph.node.insert(0, helper.make_node("Constant", [], ["threshold"],
                                                value=numpy_helper.from_array(np.array(threshold, np.int64))))
    greater.input[1] = "threshold"
    (branch,) = [a.g for n in model.graph.node if n.op_type == "If" for a in n.attribute if a.name == "else_branch"]
    for node in branch.node:  # the small caches' Constant nodes
        value = numpy_helper.to_array(node.attribute[0].t)
        rows = -(-threshold // len(value))
        node.attribute[0].t.CopyFrom(numpy_helper.from_array(np.tile(value, (rows, 1))[:max(threshold, len(value))],
                                                             node.attribute[0].t.name))
    return model


@pytest.mark.parametrize("threshold", [32, 64, 96])
def test_phi3s_longrope_if_is_claimed_and_padded_where_its_answer_holds(threshold):
    """The CUDA EP claims the LongRoPE If with the rest (one segment, the branch picked on the host). Padding a length
    to a power of two keeps L > T for a power of two T from the smallest capacity (64 for the KV, 16 for a first
    prompt): then the KV axes are padded; a threshold of 32 pads first prompts only, and 96 neither (a padded run would
    take the padded length's branch)."""
    found, parts, declined = seams(phi3_with_threshold(threshold))
    assert not found and not declined and len(parts) == 1 and parts[0].segments == 1
    assert (parts[0].padding is not None) == (threshold == 64) and (parts[0].prompt is not None) == (threshold != 96)
    assert parts[0].padding is None or not parts[0].padding.left
    text = render(parts, declined)
    assert "known on the host" in text
    if threshold != 64:
        assert f"compares a padded length with {threshold}, not a power of two from" in text


@pytest.mark.parametrize("family", sorted(material.GENAI_FAMILIES))
def test_every_builder_family_is_one_cuda_segment(family):
    """Each builder family's small CPU export (int4) placed for the CUDA EP: one partition, no seam (Nemotron's
    squared ReLU raised to an int32 exponent was a host Pow: 3 segments a step)."""
    path = material.genai_model_dir(family, "int4") / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not prepared (python tests/material.py)")
    import onnx
    found, parts, declined = seams(onnx.load(str(path)))
    assert not found and not declined and len(parts) == 1 and parts[0].segments == 1, render(parts, declined)
