"""plan/fusion.py's decisions per device (the math of each fused kernel is checked against stock ORT
where it runs: the CPU parity tests, tests/cuda/test_cuda_attention.py)."""
import math

import numpy as np
import onnx
import pytest

from kernels.test_quantization import normed_product_model, swiglu_nbits_model
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
    if matmul:  # one [gate | up] matrix, transposed (as linear layers store theirs)
        gate_up = graph.value(nodes[0].inputs[1]).const
        np.testing.assert_array_equal(gate_up, np.concatenate([graph.value("gate_w").const, graph.value("up_w").const], 1).T)
        assert gate_up.flags.c_contiguous and graph.value(nodes[0].inputs[1]).shape == gate_up.shape


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


def _projections(bias_readers=1, tied=False, weight_input=False):
    """y = MatMul(a, w) + b, and z = MatMul(a, w or v): (model, w, v, b)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(3)
    w, v, b = (rng.standard_normal(s).astype(np.float16) for s in ((8, 16), (8, 16), (16,)))
    nodes = [helper.make_node("MatMul", ["a", "w"], ["p"]), helper.make_node("Add", ["p", "b"], ["y"]),
             helper.make_node("MatMul", ["a", "w" if tied else "v"], ["z"])]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT16, None) for n in ["y", "z"] + ["p"] * (bias_readers > 1)]
    inits = [numpy_helper.from_array(x, n) for x, n in ((w, "w"), (v, "v"), (b, "b")) if not (weight_input and n == "w")]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT16, s) for n, s in [("a", [1, 8])] + [("w", [8, 16])] * weight_input]
    model = helper.make_model(helper.make_graph(nodes, "p", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    return model, w, v, b


def test_products_by_constants_are_linear_layers_on_cuda():
    model, w, v, b = _projections()
    graph = import_model(model)
    nodes = fuse(graph, graph.outputs, "cuda")
    assert [(n.op_type, n.inputs, n.outputs) for n in nodes] == [("Linear", ["a", "w.T", "b"], ["y"]),
                                                                  ("Linear", ["a", "v.T"], ["z"])]
    np.testing.assert_array_equal(graph.value("w.T").const, w.T)
    np.testing.assert_array_equal(graph.value("v.T").const, v.T)
    assert graph.value("w.T").shape == (16, 8) and graph.value("w.T").const.flags.c_contiguous
    # no Linear kernel on the CPU; float16 MatMul + bias is one MatMulBias there (rounded once, as stock ORT)
    assert fused_ops(model, "cpu") == ["MatMulBias", "MatMul"]


def test_linear_layers_share_a_tied_weight_and_keep_a_product_read_elsewhere():
    model, w, _, _ = _projections(bias_readers=2, tied=True)  # p is an output too: the Add stays
    graph = import_model(model)
    nodes = fuse(graph, graph.outputs, "cuda")
    assert [(n.op_type, n.inputs) for n in nodes] == [("Linear", ["a", "w.T"]), ("Add", ["p", "b"]),
                                                      ("Linear", ["a", "w.T"])]
    model, *_ = _projections(weight_input=True)  # w fed at run time: a plain MatMul
    assert fused_ops(model, "cuda") == ["MatMul", "Add", "Linear"]


def _product_argmax(axis=-1, **attrs):
    """y = MatMul(a, w) + b (a float16 (2, 3, 8) by (8, 16)) and ArgMax(y, axis, **attrs), both outputs."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(5)
    w, b = rng.standard_normal((8, 16)).astype(np.float16), rng.standard_normal(16).astype(np.float16)
    nodes = [helper.make_node("MatMul", ["a", "w"], ["p"]), helper.make_node("Add", ["p", "b"], ["y"]),
             helper.make_node("ArgMax", ["y"], ["i"], axis=axis, **attrs)]
    graph = helper.make_graph(nodes, "pick", [helper.make_tensor_value_info("a", TensorProto.FLOAT16, [2, 3, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2, 3, 16]),
                               helper.make_tensor_value_info("i", TensorProto.INT64, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("axis", [-1, 2])
def test_a_products_argmax_over_its_last_axis_is_one_node_on_cuda(axis):
    graph = import_model(_product_argmax(axis, keepdims=0, select_last_index=1))
    (node,) = fuse(graph, graph.outputs, "cuda")
    assert (node.op_type, node.inputs, node.outputs, node.attrs) == (
        "LinearArgMax", ["a", "w.T", "b"], ["y", "i"], {"keepdims": 0, "select_last_index": 1})
    graph = import_model(_product_argmax())
    assert fuse(graph, graph.outputs, "cuda")[0].attrs == {"keepdims": 1, "select_last_index": 0}  # ONNX's defaults


def test_an_argmax_over_another_axis_or_on_the_cpu_stays_apart():
    assert fused_ops(_product_argmax(axis=1), "cuda") == ["Linear", "ArgMax"]
    assert fused_ops(_product_argmax(), "cpu") == ["MatMulBias", "ArgMax"]


def test_linear_layers_weights_take_a_name_the_model_does_not_use():
    from onnx import numpy_helper
    model, w, v, _ = _projections()
    model.graph.initializer.append(numpy_helper.from_array(np.zeros(3, np.float16), "w.T"))  # the model's own
    graph = import_model(model)
    nodes = fuse(graph, graph.outputs, "cuda")
    assert nodes[0].inputs[1] == "w.T'" and graph.value("w.T").const.shape == (3,)
    np.testing.assert_array_equal(graph.value("w.T'").const, w.T)


@pytest.mark.parametrize("norm", ["skip", "simple", "rms"])
@pytest.mark.parametrize("product,fused", [("nbits", "MatMulNBits"), ("nbits_swiglu", "MatMulNBitsSwiGLU"),
                                           ("matmul", "Linear"), ("matmul_swiglu", "MatMulSwiGLU")])
def test_an_rms_norm_read_by_one_product_is_its_prologue_on_cuda(product, fused, norm):
    model, _ = normed_product_model(product, norm)
    graph = import_model(model)
    (node,) = fuse(graph, graph.outputs, "cuda")
    assert (node.op_type, node.attrs["product"], node.attrs["epsilon"]) == ("NormedProduct", fused, pytest.approx(1e-6))
    assert node.inputs[:4] == (["X", "S", "gamma", ""] if norm == "skip" else ["X", "", "gamma", ""])
    assert node.outputs == (["Y", "R"] if norm == "skip" else ["Y"])
    assert fused_ops(model, "cpu")[0].endswith("Normalization")  # the CPU keeps the norm


def test_an_rms_norm_read_elsewhere_stays_apart():
    from onnx import helper
    model, _ = normed_product_model("nbits")
    elem = model.graph.output[0].type.tensor_type.elem_type
    model.graph.output.append(helper.make_tensor_value_info("A", elem, None))  # the norm's output read elsewhere
    assert fused_ops(model, "cuda") == ["SkipSimplifiedLayerNormalization", "MatMulNBits"]



def _elem(dtype):
    from onnx import helper
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def mask_lengths_model(dtype=np.int64, opset=13, keepdims=0, axis=1, offset=(1,), to=np.int32, sub_read=False):
    """Cast(ReduceSum(mask over `axis`) - offset, to) as onnxruntime-genai's builder writes a decoder's
    seqlens_k; sub_read: the difference is an output too. (model, a 0/1 mask of shape (3, 37))."""
    from onnx import helper, numpy_helper
    axes = numpy_helper.from_array(np.array([axis], np.int64), "axes")
    off = numpy_helper.from_array(np.array(offset, dtype), "offset")
    reduce = helper.make_node("ReduceSum", ["mask", "axes"] if opset >= 13 else ["mask"], ["total"], keepdims=keepdims,
                              **({} if opset >= 13 else {"axes": [axis]}))
    nodes = [reduce, helper.make_node("Sub", ["total", "offset"], ["less"]),
             helper.make_node("Cast", ["less"], ["lengths"], to=_elem(to))]
    outputs = [helper.make_tensor_value_info("lengths", _elem(to), None)]
    outputs += [helper.make_tensor_value_info("less", _elem(dtype), None)] * sub_read
    graph = helper.make_graph(nodes, "lengths", [helper.make_tensor_value_info("mask", _elem(dtype), [3, 37])], outputs,
                              [axes, off] if opset >= 13 else [off])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)
    mask = (np.random.default_rng(5).random((3, 37)) < 0.8).astype(dtype)
    return model, mask


@pytest.mark.parametrize("dtype,opset,keepdims,axis,to", [(np.int64, 13, 0, 1, np.int32), (np.int32, 11, 1, -1, np.int64),
                                                          (np.int64, 18, 1, 1, np.int64)])
def test_a_mask_sum_less_one_cast_is_one_node_on_cuda(dtype, opset, keepdims, axis, to):
    model, _ = mask_lengths_model(dtype, opset, keepdims, axis, to=to)
    graph = import_model(model)
    (node,) = fuse(graph, graph.outputs, "cuda")
    assert (node.op_type, node.inputs, node.outputs) == ("ReduceSumSubCast", ["mask"], ["lengths"])
    assert node.attrs == {"offset": 1, "to": _elem(to), "keepdims": keepdims}
    assert fused_ops(model, "cpu") == ["ReduceSum", "Sub", "Cast"]


@pytest.mark.parametrize("change", ["sub_read", "axis 0", "offset of two", "float mask"])
def test_a_mask_sum_stays_apart_where_the_pattern_differs(change):
    model, _ = mask_lengths_model(np.float32 if change == "float mask" else np.int64, axis=0 if change == "axis 0" else 1,
                                  offset=(1, 2) if change == "offset of two" else (1,), sub_read=change == "sub_read")
    assert fused_ops(model, "cuda") == ["ReduceSum", "Sub", "Cast"]


def _mish_model(dtype=np.float32, swap=False, tanh_out=False):
    """y = x * Tanh(Softplus(x)) (torch's Mish exported before opset 18); Tanh's output also a graph output."""
    from onnx import helper
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    mul = ["t", "x"] if swap else ["x", "t"]
    nodes = [helper.make_node("Softplus", ["x"], ["s"]), helper.make_node("Tanh", ["s"], ["t"]),
             helper.make_node("Mul", mul, ["y"])]
    outputs = [helper.make_tensor_value_info(n, t, None) for n in ["y"] + ["t"] * tanh_out]
    return helper.make_model(helper.make_graph(nodes, "mish", [helper.make_tensor_value_info("x", t, ["N", 64])], outputs),
                             opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("swap", [False, True])
def test_x_times_tanh_of_softplus_is_one_mish(device, swap):
    graph = import_model(_mish_model(swap=swap))
    nodes = fuse(graph, graph.outputs, device)
    assert [(n.op_type, n.inputs, n.outputs) for n in nodes] == [("Mish", ["x"], ["y"])]
    assert fused_ops(_mish_model(tanh_out=True), device) == ["Softplus", "Tanh", "Mul"]  # Tanh's output read elsewhere


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_fused_mish_gives_stock_answers(dtype):
    """Stock ORT runs the three nodes; ours one Mish (every node on our EP, CPU fallback off)."""
    from parity import assert_parity
    x = np.concatenate([np.linspace(-30, 30, 64 * 7), [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-8, -1e-8, 88.0] * 8])
    # float16: stock rounds Softplus's and Tanh's results to float16, ours rounds once (a few units of the last place)
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == np.float32 else {"rtol": 1e-3, "atol": 1e-3}
    assert_parity(_mish_model(dtype), {"x": x.reshape(-1, 64).astype(dtype)}, **tol)


def encoder_attention_model(scale_op="Mul", mask=True, shape_form="concat", probs_out=False, axis=-1):
    """A torch-exported encoder's self-attention: x [b, s, 64] projected to Q, K, V, viewed as 4 heads of 16
    (Reshape to [b, s, -1, 16] by a Concat of x's dims, or to a constant [0, 0, 4, 16]), Q K^T scaled, plus a
    [b, 1, 1, s] mask, Softmax, times V, merged back to [b, s, 64]: (model, feeds)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(5)
    b, s, n, h = 2, 20, 4, 16
    inits = {f"w{p}": rng.standard_normal((n * h, n * h)).astype(np.float32) / 8 for p in "qkv"}
    inits.update(c=np.array(0.25 if scale_op == "Mul" else 4.0, np.float32), heads_shape=np.array([0, 0, n, h]),
                 merged_shape=np.array([0, 0, n * h]), minus1=np.array([-1]), hsz=np.array([h]), i0=np.array(0),
                 i1=np.array(1), ax0=np.array([0]))
    nodes = [helper.make_node("Shape", ["x"], ["xs"]), helper.make_node("Gather", ["xs", "i0"], ["d0"]),
             helper.make_node("Gather", ["xs", "i1"], ["d1"]), helper.make_node("Unsqueeze", ["d0", "ax0"], ["u0"]),
             helper.make_node("Unsqueeze", ["d1", "ax0"], ["u1"]),
             helper.make_node("Concat", ["u0", "u1", "minus1", "hsz"], ["view"], axis=0),
             helper.make_node("Concat", ["u0", "u1", "minus1"], ["merge"], axis=0)]
    view, merge = ("view", "merge") if shape_form == "concat" else ("heads_shape", "merged_shape")
    for p, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        nodes += [helper.make_node("MatMul", ["x", f"w{p}"], [f"{p}3"]),
                  helper.make_node("Reshape", [f"{p}3", view], [f"{p}4"]),
                  helper.make_node("Transpose", [f"{p}4"], [f"{p}t"], perm=perm)]
    nodes += [helper.make_node("MatMul", ["qt", "kt"], ["scores"]),
              helper.make_node(scale_op, ["scores", "c"], ["scaled"])]
    if mask:
        nodes.append(helper.make_node("Add", ["scaled", "mask"], ["masked"]))
    nodes += [helper.make_node("Softmax", ["masked" if mask else "scaled"], ["probs"], axis=axis),
              helper.make_node("MatMul", ["probs", "vt"], ["ctx"]),
              helper.make_node("Transpose", ["ctx"], ["ctxt"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ctxt", merge], ["y"])]
    f32 = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("x", f32, ["batch", "seq", n * h])]
    feeds = {"x": rng.standard_normal((b, s, n * h)).astype(np.float32)}
    if mask:
        inputs.append(helper.make_tensor_value_info("mask", f32, ["batch", 1, 1, "seq"]))
        keep = np.arange(s)[None, :] < np.array([s, s - 7])[:, None]
        feeds["mask"] = np.where(keep, 0.0, -10000.0).astype(np.float32).reshape(b, 1, 1, s)
    outputs = [helper.make_tensor_value_info("y", f32, None)] + \
        [helper.make_tensor_value_info("probs", f32, None)] * probs_out
    model = helper.make_model(helper.make_graph(nodes, "attention", inputs, outputs,
                                                [numpy_helper.from_array(v, k) for k, v in inits.items()]),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    return model, feeds


@pytest.mark.parametrize("scale_op", ["Mul", "Div"])
@pytest.mark.parametrize("mask", [True, False])
@pytest.mark.parametrize("shape_form", ["concat", "constant"])
def test_an_encoders_attention_is_one_onnx_attention_on_the_cpu(scale_op, mask, shape_form):
    from parity import assert_parity
    model, feeds = encoder_attention_model(scale_op, mask, shape_form)
    ops = fused_ops(model, "cpu")
    assert ops.count("Attention") == 1 and not {"Softmax", "Transpose", "Reshape", scale_op} & set(ops), ops
    assert fused_ops(model, "cuda").count("Softmax") == 1  # CPU only
    assert_parity(model, feeds, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("change", ["probs_out", "axis"])
def test_an_encoders_attention_stays_apart_where_the_pattern_differs(change):
    model, _ = encoder_attention_model(probs_out=change == "probs_out", axis=2 if change == "axis" else -1)
    assert "Attention" not in fused_ops(model, "cpu")


def test_an_encoders_fused_attention_runs_natively(capfd):
    from parity import assert_native_without_python_steps
    assert_native_without_python_steps(*encoder_attention_model(), capfd)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_qwen3_5_linear_attention_takes_its_l2_norms_and_rotary_its_casts_on_cuda(dtype):
    """normed_linear_attention: the Reshape, LpNormalization, Reshape chains of q and k and q's scale go into
    NormedLinearAttention (q_scale: the Mul's constant); rotary_in_float: MRotaryEmbedding between Casts to float32
    and back is one node of float16 in and out (CUDA); the CPU keeps the nodes. Not where the kernel cannot take
    the shapes (d_k 48), a norm's output is read twice, or q's factor is no constant."""
    from kernels.test_linear_attention import qwen3_5_layer_parts
    model = qwen3_5_layer_parts(dtype, 3, 2, 4, 32, 64)
    graph = import_model(model)
    nodes = fuse(graph, graph.outputs, "cuda")
    rotary = ["Cast", "MRotaryEmbedding", "Cast"] if dtype == np.float32 else ["MRotaryEmbedding"]
    assert [n.op_type for n in nodes] == ["Split", "NormedLinearAttention"] + rotary
    (attention,) = [n for n in nodes if n.op_type == "NormedLinearAttention"]
    assert attention.inputs[:3] == ["q0", "k0", "v"] and attention.outputs == ["out", "present"]
    assert attention.attrs["q_scale"] == float(np.asarray(32 ** -0.5, dtype)) and attention.attrs["kv_num_heads"] == 4
    if dtype == np.float16:
        assert nodes[-1].inputs[0] == "x" and nodes[-1].outputs == ["rotated"]
        wider = qwen3_5_layer_parts(dtype, 3, 2, 4, 32, 64)  # the rotation cast back to float32: no float16 result
        next(n for n in wider.graph.node if n.output == ["rotated"]).attribute[0].i = onnx.TensorProto.FLOAT
        del wider.graph.output[-1]
        wider.graph.output.append(onnx.helper.make_tensor_value_info("rotated", onnx.TensorProto.FLOAT, None))
        assert fused_ops(wider, "cuda")[-3:] == ["Cast", "MRotaryEmbedding", "Cast"]
    assert "NormedLinearAttention" not in fused_ops(model, "cpu") and "LpNormalization" in fused_ops(model, "cpu")
    assert "NormedLinearAttention" not in fused_ops(qwen3_5_layer_parts(dtype, 3, 2, 4, 48, 64), "cuda")
    kind = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    twice = qwen3_5_layer_parts(dtype, 3, 2, 4, 32, 64)
    twice.graph.output.append(onnx.helper.make_tensor_value_info("k2", kind, None))
    assert "NormedLinearAttention" not in fused_ops(twice, "cuda")
    computed = qwen3_5_layer_parts(dtype, 3, 2, 4, 32, 64)
    next(n for n in computed.graph.node if n.op_type == "Mul").input[1] = "factor"
    computed.graph.input.append(onnx.helper.make_tensor_value_info("factor", kind, [1]))
    assert "NormedLinearAttention" not in fused_ops(computed, "cuda")


def _conv_model(xs, ws, attrs, bias=True, conv_out=False, residual=None, relu=True):
    """y = Relu(Conv(x, W[, b])), W and b constants; the Conv's output also a graph output where conv_out.
    residual "add" or "sum": y = [Relu](Add or Sum(Conv(...), z)), z an input of the Conv's output shape (the
    residual block's end), or z's shape where residual is ("add", shape)."""
    from onnx import helper, numpy_helper
    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array((rng.standard_normal(ws) / 4).astype(np.float32), "w")]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(ws[0]).astype(np.float32), "b"))
    nodes = [helper.make_node("Conv", ["x", "w"] + ["b"] * bias, ["c"], **attrs)]
    inputs = [helper.make_tensor_value_info("x", 1, list(xs))]
    last = "c"
    if residual:
        op, z_shape = residual if isinstance(residual, tuple) else (residual, None)
        nodes.append(helper.make_node(op.capitalize(), ["z", "c"] if op == "sum" else ["c", "z"], ["s"]))
        inputs.append(helper.make_tensor_value_info("z", 1, z_shape))
        last = "s"
    if relu:
        nodes.append(helper.make_node("Relu", [last], ["y"]))
        last = "y"
    outputs = [helper.make_tensor_value_info(n, 1, None) for n in [last] + ["c"] * conv_out]
    model = helper.make_model(helper.make_graph(nodes, "fused_conv", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    if residual and z_shape is None:  # the Conv's output shape, as inferred
        shape = next(v for v in onnx.shape_inference.infer_shapes(model).graph.value_info if v.name == "c")
        model.graph.input[1].type.CopyFrom(shape.type)
    return model


def test_a_convs_relu_and_residual_are_one_fused_conv_on_the_cpu():
    model = _conv_model((1, 4, 8, 8), (6, 4, 3, 3), {"pads": [1, 1, 1, 1]})
    assert fused_ops(model, "cpu") == ["FusedConv"]
    assert fused_ops(model, "cuda") == ["Conv", "Relu"]
    assert fused_ops(_conv_model((1, 4, 8, 8), (6, 4, 3, 3), {}, conv_out=True), "cpu") == ["Conv", "Relu"]
    for residual in ("add", "sum"):
        for relu in (True, False):
            assert fused_ops(_conv_model((1, 4, 8, 8), (6, 4, 3, 3), {}, residual=residual, relu=relu), "cpu") == \
                ["FusedConv"]
    # an Add that broadcasts z, or whose shapes are not known to agree, stays
    assert fused_ops(_conv_model((1, 4, 8, 8), (6, 4, 3, 3), {}, residual=("add", [1, 6, 1, 1])), "cpu") == \
        ["Conv", "Add", "Relu"]
    assert fused_ops(_conv_model((1, 4, 8, 8), (6, 4, 3, 3), {}, residual=("add", ["n", 6, 6, 6])), "cpu") == \
        ["Conv", "Add", "Relu"]


def test_a_fused_residual_takes_the_adds_place():
    """A residual block whose shortcut is a convolution computed after the block's last one: the fused node sits
    where the Add was (its z is ready there), and the shortcut's Conv, whose reader the first fusion took, stays."""
    from onnx import helper, numpy_helper
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array((rng.standard_normal(s) / 4).astype(np.float32), n)
             for n, s in (("w1", (6, 4, 3, 3)), ("w2", (6, 4, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w2"], ["c2"]),
             helper.make_node("Add", ["c1", "c2"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", 1, [1, 4, 8, 8])],
                                                [helper.make_tensor_value_info("y", 1, None)], inits),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    graph = import_model(model)
    fused = fuse(graph, graph.outputs, "cpu")
    assert [(n.op_type, n.inputs) for n in fused] == [("Conv", ["x", "w2"]), ("FusedConv", ["x", "w1", "", "c2"])]
    assert fused[1].attrs["relu"] == 1
    from parity import assert_parity
    assert_parity(model, {"x": rng.standard_normal((1, 4, 8, 8)).astype(np.float32)}, rtol=1e-4, atol=1e-5)


# the convolution's paths (spatial.c): taps read in place (direct), im2col (stride 2, groups), x as its columns
# (1x1), depthwise, 1-D; inputs with NaN, infinities and negatives (stock keeps Relu's NaN fused or not)
CONV_RELU_CASES = [
    ((1, 16, 20, 20), (24, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 8, 15, 13), (12, 4, 3, 3), {"strides": [2, 2], "group": 2, "pads": [1, 0, 1, 1]}),
    ((1, 32, 9, 9), (40, 32, 1, 1), {}),  # this and the next: the positions as the GEMM's rows (seamless_conv_rows)
    ((1, 12, 7, 7), (32, 12, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 8, 10, 10), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),
    ((1, 6, 50), (10, 6, 5), {"pads": [2, 2]}),
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("xs,ws,attrs", CONV_RELU_CASES)
def test_fused_conv_relu_gives_stock_answers(xs, ws, attrs, bias):
    """Stock ORT fuses the pair itself (FusedConv); ours one FusedConv (every node on our EP, CPU fallback off), the
    Relu on each block as the convolution writes it."""
    from parity import assert_parity
    x = np.random.default_rng(3).standard_normal(xs).astype(np.float32)
    x.reshape(-1)[[5, 77, 200]] = [np.nan, np.inf, -np.inf]
    assert_parity(_conv_model(xs, ws, attrs, bias), {"x": x}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("residual,relu", [("add", True), ("sum", True), ("add", False)])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("xs,ws,attrs", CONV_RELU_CASES)
def test_fused_conv_residual_gives_stock_answers(xs, ws, attrs, bias, residual, relu):
    """[Relu](Add or Sum(Conv(x), z)) as one FusedConv on every convolution path: z added to each block as it is
    written, then the Relu; NaN and infinities in x and z (inf - inf in the sum); z left as it was."""
    from parity import assert_parity
    from onnxruntime_ep_seamless.kernels.cpu.spatial import geometry
    rng = np.random.default_rng(6)
    x = rng.standard_normal(xs).astype(np.float32)
    x.reshape(-1)[[5, 77, 200]] = [np.nan, np.inf, -np.inf]
    nd = len(xs) - 2
    _, _, out = geometry(xs[2:], ws[2:], attrs.get("strides", [1] * nd), [1] * nd, attrs.get("pads"), "NOTSET")
    z = rng.standard_normal((xs[0], ws[0], *out)).astype(np.float32)
    z.reshape(-1)[[3, 40, 90]] = [np.nan, -np.inf, np.inf]
    kept = z.copy()
    model = _conv_model(xs, ws, attrs, bias, residual=residual, relu=relu)
    assert fused_ops(model, "cpu") == ["FusedConv"]
    assert_parity(model, {"x": x, "z": z}, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(z, kept)


def test_a_fused_conv_runs_natively(capfd):
    from parity import assert_native_without_python_steps
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 16, 20, 20)).astype(np.float32)
    assert_native_without_python_steps(_conv_model(*CONV_RELU_CASES[0]), {"x": x}, capfd)
    z = rng.standard_normal((1, 24, 20, 20)).astype(np.float32)
    assert_native_without_python_steps(_conv_model(*CONV_RELU_CASES[0], residual="add"), {"x": x, "z": z}, capfd)


def _gelu_tanh_model(form, shared=None, cube=0.044715):
    """y = GELU's tanh form of x spelled out: "jax" (jax2tf's, Magika's: 0.044715 x as Muls by x, the 0.5 with the
    bracket) or "torch" (GPT-2's: Pow(x, 3), 0.5 x first, operands the other way round). shared: the name of an
    intermediate value also made a graph output."""
    from onnx import helper, numpy_helper
    consts = {"c": cube, "k": math.sqrt(2 / math.pi), "one": 1.0, "half": 0.5, "three": 3.0}
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in consts.items()]
    if form == "jax":
        nodes = [helper.make_node("Mul", ["c", "x"], ["a"]), helper.make_node("Mul", ["x", "a"], ["b"]),
                 helper.make_node("Mul", ["x", "b"], ["cube"]), helper.make_node("Add", ["x", "cube"], ["inner"]),
                 helper.make_node("Mul", ["k", "inner"], ["scaled"]), helper.make_node("Tanh", ["scaled"], ["t"]),
                 helper.make_node("Add", ["one", "t"], ["sum"]), helper.make_node("Mul", ["half", "sum"], ["h"]),
                 helper.make_node("Mul", ["x", "h"], ["y"])]
    else:
        nodes = [helper.make_node("Pow", ["x", "three"], ["p"]), helper.make_node("Mul", ["p", "c"], ["cube"]),
                 helper.make_node("Add", ["cube", "x"], ["inner"]), helper.make_node("Mul", ["inner", "k"], ["scaled"]),
                 helper.make_node("Tanh", ["scaled"], ["t"]), helper.make_node("Add", ["t", "one"], ["sum"]),
                 helper.make_node("Mul", ["half", "x"], ["hx"]), helper.make_node("Mul", ["hx", "sum"], ["y"])]
    outputs = [helper.make_tensor_value_info(n, 1, None) for n in ["y"] + ([shared] if shared else [])]
    return helper.make_model(helper.make_graph(nodes, "gelu_tanh", [helper.make_tensor_value_info("x", 1, [4, 96])],
                                               outputs, inits), opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=9)


@pytest.mark.parametrize("form", ["jax", "torch"])
def test_gelu_tanh_spelled_out_is_one_fast_gelu(form):
    assert fused_ops(_gelu_tanh_model(form), "cpu") == ["FastGelu"]
    assert "FastGelu" not in fused_ops(_gelu_tanh_model(form), "cuda")
    assert fused_ops(_gelu_tanh_model(form, shared="t"), "cpu")[-1] != "FastGelu"  # a value read elsewhere
    assert "FastGelu" not in fused_ops(_gelu_tanh_model(form, cube=0.05), "cpu")  # another function


@pytest.mark.parametrize("form", ["jax", "torch"])
def test_fused_gelu_tanh_gives_stock_answers(form, capfd):
    """Stock ORT fuses the chain to FastGelu itself; ours one FastGelu step (native), within float32 rounding of
    the unfused chain; NaN and infinities stay as the chain gives them."""
    from parity import assert_native_without_python_steps, assert_parity
    x = (np.random.default_rng(8).standard_normal((4, 96)) * 3).astype(np.float32)
    x.reshape(-1)[[1, 2, 3]] = [np.nan, 30.0, -30.0]
    assert_parity(_gelu_tanh_model(form), {"x": x}, rtol=1e-5, atol=1e-6)
    assert_native_without_python_steps(_gelu_tanh_model(form), {"x": x}, capfd)


def _layer_norm_model(opset=14, axes=(-1,), swap=False, d_out=False, eps=1e-12):
    """LayerNorm over x's last axis spelled out as torch exports it below opset 17 (axes an attribute; opset 18: an
    input); swap: gamma and beta the Mul's and the Add's first operands; d_out: x - mean also a graph output."""
    from onnx import helper, numpy_helper
    rng = np.random.default_rng(9)
    inits = [numpy_helper.from_array(v, n) for n, v in (
        ("two", np.array(2.0, np.float32)), ("eps", np.array(eps, np.float32)),
        ("gamma", rng.standard_normal(48).astype(np.float32)), ("beta", rng.standard_normal(48).astype(np.float32)))]
    if opset >= 18:
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
        mean = lambda i, o: helper.make_node("ReduceMean", [i, "axes"], [o])  # noqa: E731
    else:
        mean = lambda i, o: helper.make_node("ReduceMean", [i], [o], axes=list(axes))  # noqa: E731
    nodes = [mean("x", "m"), helper.make_node("Sub", ["x", "m"], ["d"]), helper.make_node("Pow", ["d", "two"], ["p"]),
             mean("p", "v"), helper.make_node("Add", ["v", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["s"]),
             helper.make_node("Div", ["d", "s"], ["n"]),
             helper.make_node("Mul", ["gamma", "n"] if swap else ["n", "gamma"], ["g"]),
             helper.make_node("Add", ["beta", "g"] if swap else ["g", "beta"], ["y"])]
    outputs = [helper.make_tensor_value_info(n, 1, None) for n in ["y"] + ["d"] * d_out]
    return helper.make_model(helper.make_graph(nodes, "layer_norm", [helper.make_tensor_value_info("x", 1, [2, 7, 48])],
                                               outputs, inits), opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=9)


@pytest.mark.parametrize("opset,swap", [(14, False), (14, True), (18, False)])
def test_layer_norm_spelled_out_is_one_layer_normalization(opset, swap, capfd):
    """The nine nodes become LayerNormalization on the CPU (its epsilon kept), with stock's answers (stock fuses the
    chain too), natively; not where x - mean is read elsewhere or the mean is over another axis."""
    from parity import assert_native_without_python_steps, assert_parity
    model = _layer_norm_model(opset, swap=swap, eps=1e-5)
    nodes = fuse(import_model(model), ["y"], "cpu")
    assert [n.op_type for n in nodes] == ["LayerNormalization"] and nodes[0].attrs["epsilon"] == np.float32(1e-5)
    assert "LayerNormalization" not in fused_ops(model, "cuda")
    assert "LayerNormalization" not in fused_ops(_layer_norm_model(opset, d_out=True), "cpu")
    assert "LayerNormalization" not in fused_ops(_layer_norm_model(opset, axes=(1,)), "cpu")
    x = (np.random.default_rng(10).standard_normal((2, 7, 48)) * 4 + 1).astype(np.float32)
    x[1, 3, 5] = np.nan
    assert_parity(model, {"x": x}, rtol=1e-5, atol=1e-5)
    assert_native_without_python_steps(model, {"x": x}, capfd)


def _bn_chain_model(chain=("Mul", "Add", "Relu"), const_shape=(6, 1, 1), x_shape=(2, 6, 5, 7)):
    """x -> inference BatchNormalization -> the ops of `chain` (Mul and Add by constants of const_shape), DenseNet's
    pre-activation block."""
    from onnx import helper, numpy_helper
    rng = np.random.default_rng(11)
    c = x_shape[1]
    inits = [numpy_helper.from_array(v.astype(np.float32), n) for n, v in (
        ("scale", rng.standard_normal(c)), ("bias", rng.standard_normal(c)), ("mean", rng.standard_normal(c)),
        ("var", rng.random(c) + 0.5), ("w", rng.standard_normal(const_shape)), ("b", rng.standard_normal(const_shape)))]
    nodes = [helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["t0"], epsilon=1e-3)]
    for i, op in enumerate(chain):
        operands = {"Mul": ["w", f"t{i}"], "Add": [f"t{i}", "b"], "Relu": [f"t{i}"]}[op]
        nodes.append(helper.make_node(op, operands, [f"t{i + 1}"]))
    y = f"t{len(chain)}"
    graph = helper.make_graph(nodes, "bn_chain", [helper.make_tensor_value_info("x", 1, list(x_shape))],
                              [helper.make_tensor_value_info(y, 1, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], ir_version=9)


@pytest.mark.parametrize("chain", [("Mul", "Add", "Relu"), ("Relu",), ("Mul",), ("Add", "Relu")])
def test_batch_norm_and_its_per_channel_ops_are_one_channel_affine(chain, capfd):
    """An inference BatchNormalization and the per-channel Mul, Add and Relu after it: one ChannelAffine on the CPU
    (scale and shift folded at Compile), stock's answers within float32 rounding of the chain, natively."""
    from parity import assert_native_without_python_steps, assert_parity
    model = _bn_chain_model(chain)
    assert fused_ops(model, "cpu") == ["ChannelAffine"]
    assert fused_ops(model, "cuda")[0] == "BatchNormalization"
    x = (np.random.default_rng(12).standard_normal((2, 6, 5, 7)) * 3).astype(np.float32)
    x[0, 1, 2, 3], x[1, 4, 0, 0] = np.nan, -np.inf
    assert_parity(model, {"x": x}, rtol=1e-5, atol=1e-5)
    assert_native_without_python_steps(model, {"x": x}, capfd)


def test_an_op_over_another_axis_is_not_folded():
    """A Mul by a vector over the last axis (not the channels) stays a Mul; the BatchNormalization alone stays too."""
    assert fused_ops(_bn_chain_model(("Mul",), const_shape=(7,)), "cpu") == ["BatchNormalization", "Mul"]
    assert fused_ops(_bn_chain_model(("Mul", "Relu"), const_shape=(7,)), "cpu") == ["BatchNormalization", "Mul",
                                                                                      "Relu"]
