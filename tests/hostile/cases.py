"""Invalid (and valid-but-tricky) inputs: each case a model and its feeds, run on stock ORT's CPU EP and on
ours (fallback disabled) by tests/hostile/test_invalid_inputs.py. Input dims are symbols (or the rank is
unknown), so ORT's load-time checks cannot catch what only the run's data shows: the kernels must.

A case is a function returning (serialized model, feeds); CASES maps its name to it.
"""
import numpy as np
from onnx import helper, numpy_helper

F32, F16, I32, I64, U8, I8, BOOL = (np.dtype(t) for t in (np.float32, np.float16, np.int32, np.int64, np.uint8,
                                                           np.int8, np.bool_))
CASES = {}


class Const:
    """An input given as an initializer."""

    def __init__(self, array):
        self.array = np.asarray(array)


def _elem(dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


DOMAIN_OPSETS = {"com.microsoft": 1, "ai.onnx.ml": 3}


def model(nodes, inputs: dict, outputs: dict, opset=17, unranked=(), domain=""):
    """inputs: name -> array or Const; outputs: name -> dtype. Fed inputs get symbolic dims, or no shape
    at all where named in `unranked` (True: all of them)."""
    feeds, inits, infos = {}, [], []
    for name, a in inputs.items():
        if isinstance(a, Const):
            inits.append(numpy_helper.from_array(a.array, name))
            continue
        a = np.array(a)
        a.flags.writeable = False
        feeds[name] = a
        shape = None if (unranked is True or name in unranked) else [f"{name}_{d}" for d in range(a.ndim)]
        infos.append(helper.make_tensor_value_info(name, _elem(a.dtype), shape))
    outs = [helper.make_tensor_value_info(n, _elem(t), None) for n, t in outputs.items()]
    graph = helper.make_graph(nodes, "g", infos, outs, initializer=inits)
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, DOMAIN_OPSETS[domain])] if domain else [])
    return helper.make_model(graph, opset_imports=imports, ir_version=9).SerializeToString(), feeds


def one(op, inputs, attrs=None, out=None, opset=17, unranked=(), domain=""):
    """A one-node model: inputs a list (None: absent), fed as x0, x1, ... or Const; out: one dtype or a list."""
    names = [f"x{i}" if a is not None else "" for i, a in enumerate(inputs)]
    outs = out if isinstance(out, list) else [out if out is not None else
                                             np.asarray(next(a for a in inputs if a is not None).array
                                                        if isinstance(inputs[0], Const) else inputs[0]).dtype]
    out_names = {f"y{j}": t for j, t in enumerate(outs)}
    node = helper.make_node(op, names, list(out_names), domain=domain, **(attrs or {}))
    unranked = True if unranked is True else {f"x{i}" for i in unranked}
    return model([node], {n: a for n, a in zip(names, inputs) if n}, out_names, opset, unranked, domain)


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def rnd(*shape, dtype=F32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# --- 1. extents the native kernels derive from inputs -------------------------------------------------------

@case
def matmul_k_larger_native():   # a's K > the constant B's K: the native GEMM would read past packed B
    return one("MatMul", [rnd(64, 512), Const(rnd(256, 256))])


@case
def matmul_k_smaller_native():
    return one("MatMul", [rnd(64, 128), Const(rnd(256, 256))])


@case
def matmul_k_mismatch_fed():
    return one("MatMul", [rnd(64, 300), rnd(256, 256)])


@case
def matmul_k_mismatch_batched():
    return one("MatMul", [rnd(4, 64, 300), rnd(4, 256, 256)])


@case
def gemm_k_mismatch_transb():
    return one("Gemm", [rnd(64, 300), Const(rnd(256, 256)), Const(rnd(256))], {"transB": 1})


@case
def gemm_c_unbroadcastable():
    return one("Gemm", [rnd(64, 256), Const(rnd(256, 128)), rnd(3, 128)])


@case
def matmul_add_k_mismatch():    # MatMul + Add fuse into one bias GEMM
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])]
    return model(nodes, {"x": rnd(64, 600), "w": Const(rnd(512, 256)), "b": Const(rnd(256))}, {"y": F32})


@case
def matmul_add_f16():           # valid: one rounding of the product plus bias, as stock
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])]
    return model(nodes, {"x": rnd(64, 256, dtype=F16), "w": Const(rnd(256, 512, dtype=F16, seed=1)),
                         "b": Const(rnd(512, dtype=F16, seed=2))}, {"y": F16})


@case
def matmul_add_f16_3d():        # 3-D activations: ORT leaves MatMul + Add to the EP, our planner fuses them
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])]
    return model(nodes, {"x": rnd(2, 32, 256, dtype=F16), "w": Const(rnd(256, 512, dtype=F16, seed=1)),
                         "b": Const(rnd(512, dtype=F16, seed=2))}, {"y": F16})


@case
def matmul_add_k_mismatch_3d():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])]
    return model(nodes, {"x": rnd(2, 64, 600), "w": Const(rnd(512, 256)), "b": Const(rnd(256))}, {"y": F32})


@case
def matmul_integer_k_mismatch():
    return one("MatMulInteger", [np.ones((8, 40), U8), np.ones((32, 8), I8)], out=I32)


def _gqa(past_len, seqlens, total, s=1):
    b, n, h = len(seqlens), 2, 8
    attrs = {"num_heads": n, "kv_num_heads": n}
    ins = [rnd(b, s, n * h), rnd(b, s, n * h, seed=1), rnd(b, s, n * h, seed=2), rnd(b, n, past_len, h, seed=3),
           rnd(b, n, past_len, h, seed=4), np.array(seqlens, I32), np.array([total], I32)]
    return one("GroupQueryAttention", ins, attrs, out=[F32, F32, F32], domain="com.microsoft")


@case
def gqa_seqlens_beyond_past():
    return _gqa(4, [9], 5)


@case
def gqa_total_length_huge():
    return _gqa(4, [4], 200000)


@case
def gqa_seqlens_negative():
    return _gqa(4, [-3], 5)


@case
def gqa_valid_decode():
    return _gqa(4, [4], 5)


@case
def gqa_static_cache_seqlens_past_total():  # valid: stock bounds seqlens_k by a static cache's length, not the total
    return _gqa(8, [6], 5)


@case
def gqa_static_cache_seqlens_beyond_cache():
    return _gqa(8, [8], 5)


@case
def gather_index_out_of_range():
    return one("Gather", [rnd(5, 3), np.array([1, 5], I64)])


@case
def gather_negative_index_out_of_range():
    return one("Gather", [rnd(5, 3), np.array([-6], I64)])


@case
def gather_elements_out_of_range():
    return one("GatherElements", [rnd(3, 3), np.array([[0, 3]], I64)], {"axis": 1})


@case
def gather_nd_out_of_range():
    return one("GatherND", [rnd(3, 3), np.array([[0, 3]], I64)])


@case
def scatter_elements_negative_out_of_range():
    return one("ScatterElements", [rnd(3, 3), np.array([[-4]], I64), rnd(1, 1)], {"axis": 0})


@case
def scatter_elements_out_of_range():
    return one("ScatterElements", [rnd(3, 3), np.array([[3]], I64), rnd(1, 1)], {"axis": 0})


@case
def scatter_nd_out_of_range():
    return one("ScatterND", [rnd(3, 3), np.array([[3]], I64), rnd(1, 3)])


@case
def scatter_nd_updates_broadcast():
    return one("ScatterND", [rnd(3, 3), np.array([[0], [1]], I64), rnd(1, 3)])


@case
def embedding_gather_block_quantized_index():
    data = np.zeros((4, 8), U8)
    scales = np.ones((4, 1), F32)
    return one("GatherBlockQuantized", [Const(data), np.array([[4]], I64), Const(scales)],
               {"block_size": 16, "quantize_axis": 1}, out=F32, domain="com.microsoft")


@case
def matmul_nbits_k_mismatch():
    k, n, bs = 32, 8, 16
    w = np.zeros((n, k // bs, bs // 2), U8)
    scales = np.ones((n * (k // bs),), F32)
    return one("MatMulNBits", [rnd(2, 48), Const(w), Const(scales)], {"K": k, "N": n, "bits": 4, "block_size": bs},
               out=F32, domain="com.microsoft")


# --- 2. run-time checks stock ORT makes -------------------------------------------------------------------

@case
def softmax_axis_out_of_range():
    return one("Softmax", [rnd(2, 3)], {"axis": 5}, unranked=True, opset=13)


@case
def reduce_sum_axis_out_of_range():
    return one("ReduceSum", [rnd(2, 3), np.array([4], I64)], unranked=True, opset=13)


@case
def reduce_max_axis_out_of_range():
    return one("ReduceMax", [rnd(2, 3)], {"axes": [-3]}, unranked=True, opset=13)


@case
def cumsum_axis_out_of_range():
    return one("CumSum", [rnd(2, 3), np.array(2, I64)], opset=14)


@case
def flatten_axis_out_of_range():
    return one("Flatten", [rnd(2, 3)], {"axis": 4}, unranked=True, opset=13)


@case
def layernorm_axis_out_of_range():
    return one("LayerNormalization", [rnd(2, 3), Const(np.ones(3, F32))], {"axis": 3}, unranked=True)


@case
def split_sizes_do_not_sum():
    return one("Split", [rnd(6, 2), np.array([2, 2], I64)], out=[F32, F32], opset=13)


@case
def split_sizes_negative():
    return one("Split", [rnd(6, 2), np.array([8, -2], I64)], out=[F32, F32], opset=13)


@case
def tile_repeats_length_mismatch():
    return one("Tile", [rnd(2, 3), np.array([2], I64)])


@case
def tile_repeats_negative():
    return one("Tile", [rnd(2, 3), np.array([2, -1], I64)])


@case
def slice_lengths_mismatch():
    return one("Slice", [rnd(4, 4), np.array([0, 1], I64), np.array([2], I64)])


@case
def slice_duplicate_axes():
    return one("Slice", [rnd(4, 4), np.array([0, 1], I64), np.array([2, 3], I64), np.array([0, 0], I64)])


@case
def slice_axis_out_of_range():
    return one("Slice", [rnd(4, 4), np.array([0], I64), np.array([2], I64), np.array([2], I64)])


@case
def slice_step_zero():
    return one("Slice", [rnd(4, 4), np.array([0], I64), np.array([2], I64), np.array([0], I64),
                         np.array([0], I64)])


@case
def pad_length_mismatch():
    return one("Pad", [rnd(2, 3), np.array([1, 1, 1], I64)])


@case
def pad_reflect_wider_than_axis():
    return one("Pad", [rnd(2, 3), np.array([0, 4, 0, 0], I64)], {"mode": "reflect"})


@case
def pad_negative_beyond_axis():
    return one("Pad", [rnd(2, 3), np.array([0, -4, 0, 0], I64)])


@case
def div_int_by_zero():
    return one("Div", [np.array([1, 2, 3], I32), np.array([1, 0, 1], I32)])


@case
def mod_int_by_zero():
    return one("Mod", [np.array([1, 2, 3], I64), np.array([1, 0, 1], I64)])


@case
def onehot_negative_depth():
    return one("OneHot", [np.array([0, 1], I64), np.array(-2, I64), np.array([0, 1], F32)], out=F32)


@case
def maxpool_kernel_larger_than_input():
    return one("MaxPool", [rnd(1, 1, 2, 2)], {"kernel_shape": [3, 3]})


@case
def averagepool_kernel_larger_than_input():
    return one("AveragePool", [rnd(1, 1, 2, 2)], {"kernel_shape": [3, 3]})


@case
def reshape_wrong_count():
    return one("Reshape", [rnd(2, 3), np.array([4, 2], I64)])


@case
def reshape_two_inferred():
    return one("Reshape", [rnd(2, 3), np.array([-1, -1], I64)])


@case
def expand_incompatible():
    return one("Expand", [rnd(2, 3), np.array([2, 4], I64)])


@case
def add_broadcast_mismatch():
    return one("Add", [rnd(2, 3), rnd(4, 3)])


@case
def where_broadcast_mismatch():
    return one("Where", [np.array([True, False]), rnd(3), rnd(3)], out=F32)


@case
def concat_mismatch():
    return one("Concat", [rnd(2, 3), rnd(2, 4)], {"axis": 0})


@case
def transpose_bad_perm():
    return one("Transpose", [rnd(2, 3)], {"perm": [0, 0]}, unranked=True)


@case
def unsqueeze_duplicate_axes():
    return one("Unsqueeze", [rnd(2, 3), np.array([0, 0], I64)])


@case
def squeeze_non_one_axis():
    return one("Squeeze", [rnd(2, 3), np.array([0], I64)])


@case
def constant_of_shape_negative():
    return one("ConstantOfShape", [np.array([2, -1], I64)], out=F32)


@case
def topk_k_too_large():
    return one("TopK", [rnd(2, 3), np.array([4], I64)], out=[F32, I64])


@case
def topk_k_negative():
    return one("TopK", [rnd(2, 3), np.array([-1], I64)], out=[F32, I64])


@case
def compress_condition_longer():
    return one("Compress", [rnd(2, 3), np.array([True, False, True], BOOL)], {"axis": 0})


@case
def depth_to_space_indivisible():
    return one("DepthToSpace", [rnd(1, 3, 2, 2)], {"blocksize": 2})


@case
def space_to_depth_indivisible():
    return one("SpaceToDepth", [rnd(1, 1, 3, 3)], {"blocksize": 2})


@case
def conv_channel_mismatch():
    return one("Conv", [rnd(1, 3, 5, 5), Const(rnd(4, 2, 3, 3))])


@case
def batchnorm_scale_length_mismatch():
    return one("BatchNormalization", [rnd(1, 3, 2, 2), rnd(2), rnd(3), rnd(3), np.ones(3, F32)])


@case
def layernorm_scale_mismatch():
    return one("LayerNormalization", [rnd(2, 3), np.ones(4, F32)], {"axis": -1})


@case
def skip_layernorm_skip_mismatch():
    return one("SkipLayerNormalization", [rnd(1, 2, 8), rnd(1, 3, 8), Const(np.ones(8, F32)),
                                          Const(np.zeros(8, F32))], domain="com.microsoft")


@case
def rotary_position_beyond_cache():
    return one("RotaryEmbedding", [rnd(1, 2, 16), np.array([[0, 9]], I64), Const(rnd(4, 4)), Const(rnd(4, 4))],
               domain="com.microsoft")


@case
def quantize_linear_scale_length_mismatch():
    return one("QuantizeLinear", [rnd(2, 3), np.array([1, 1], F32), np.array([0, 0], U8)], {"axis": 1}, out=U8)


@case
def dequantize_axis_out_of_range():
    return one("DequantizeLinear", [np.zeros((2, 3), U8), np.array([1, 1, 1], F32)], {"axis": 2}, out=F32,
               unranked=True)


@case
def einsum_dim_mismatch():
    return one("Einsum", [rnd(2, 3), rnd(4, 5)], {"equation": "ij,jk->ik"})


@case
def reverse_sequence_length_beyond():
    return one("ReverseSequence", [rnd(3, 2), np.array([4, 1], I64)], {"batch_axis": 1, "time_axis": 0})


@case
def nms_boxes_mismatch():
    return one("NonMaxSuppression", [rnd(1, 4, 4), rnd(1, 1, 3)], out=I64)


@case
def resize_scales_length_mismatch():
    return one("Resize", [rnd(1, 1, 2, 2), None, np.array([2.0, 2.0], F32)], opset=13)


@case
def gather_on_scalar():
    return one("Gather", [np.array(1.0, F32), np.array(0, I64)])


@case
def eyelike_rank3():
    return one("EyeLike", [rnd(2, 2, 2)], unranked=True)


@case
def range_int32_overflow():     # valid: limit - start overflows int32, stock computes the count in 64 bits
    return one("Range", [np.array(-2**31 + 1, I32), np.array(2**31 - 1, I32), np.array(2**30, I32)])


@case
def range_zero_delta():
    return one("Range", [np.array(0, I64), np.array(4, I64), np.array(0, I64)])


# --- 3. valid inputs with stock's exact answer --------------------------------------------------------------

NAN_ROWS = np.array([[1.0, np.nan, 3.0], [np.nan, 2.0, 5.0], [4.0, 4.0, 1.0]], F32)


@case
def reduce_max_nan():
    return one("ReduceMax", [NAN_ROWS], {"axes": [1]}, opset=13)


@case
def reduce_min_nan():
    return one("ReduceMin", [NAN_ROWS], {"axes": [1]}, opset=13)


@case
def argmax_nan():
    return one("ArgMax", [NAN_ROWS], {"axis": 1}, out=I64)


@case
def argmin_nan():
    return one("ArgMin", [NAN_ROWS], {"axis": 1}, out=I64)


@case
def argmax_nan_last_index():
    return one("ArgMax", [NAN_ROWS], {"axis": 1, "select_last_index": 1}, out=I64)


@case
def argmin_ties_last_index():
    return one("ArgMin", [NAN_ROWS], {"axis": 0, "select_last_index": 1}, out=I64)


@case
def max_nan():
    return one("Max", [NAN_ROWS, np.ones(3, F32)])


@case
def reduce_sum_scalar_axis0():
    return one("ReduceSum", [np.array(2.0, F32), np.array([0], I64)], opset=13)


@case
def squeeze_repeated_axis():
    return one("Squeeze", [rnd(1, 3), np.array([0, 0], I64)])


@case
def rank_17_add():
    shape = (1,) * 16 + (2,)
    return one("Add", [rnd(*shape), rnd(*shape, seed=1)])


@case
def clip_min_above_max():
    return one("Clip", [rnd(5), np.array(1.0, F32), np.array(-1.0, F32)])


# --- more axes, lengths and indices ---------------------------------------------------------------------

@case
def unsqueeze_axis_out_of_range():
    return one("Unsqueeze", [rnd(2, 3), np.array([3], I64)])


@case
def concat_axis_out_of_range():
    return one("Concat", [rnd(2, 3), rnd(2, 3)], {"axis": 2}, unranked=True)


@case
def split_axis_out_of_range():
    return one("Split", [rnd(6, 2)], {"axis": 2}, out=[F32, F32], opset=13, unranked=True)


@case
def gather_axis_out_of_range():
    return one("Gather", [rnd(5, 3), np.array([0], I64)], {"axis": 2}, unranked=[0])


@case
def gather_elements_negative_valid():
    return one("GatherElements", [rnd(3, 3), np.array([[-1, 0], [2, -3]], I64)], {"axis": 1})


@case
def scatter_elements_add_out_of_range():
    return one("ScatterElements", [rnd(3, 3), np.array([[5]], I64), rnd(1, 1)], {"axis": 1, "reduction": "add"},
               opset=18)


@case
def onehot_axis_out_of_range():
    return one("OneHot", [np.array([0, 1], I64), np.array(3, I64), np.array([0, 1], F32)], {"axis": 3}, out=F32,
               unranked=[0])


@case
def compress_axis_out_of_range():
    return one("Compress", [rnd(2, 3), np.array([True, False], BOOL)], {"axis": 2}, unranked=[0])


@case
def expand_negative_dim():
    return one("Expand", [rnd(2, 3), np.array([-1, 3], I64)])


@case
def reshape_negative_dim():
    return one("Reshape", [rnd(2, 3), np.array([-2, 3], I64)])


@case
def slice_steps_length_mismatch():
    return one("Slice", [rnd(4, 4), np.array([0], I64), np.array([2], I64), np.array([0], I64),
                         np.array([1, 1], I64)])


@case
def tile_on_scalar():
    return one("Tile", [np.array(1.5, F32), np.zeros(0, I64)])


@case
def div_int_overflow():           # INT_MIN / -1: undefined in C; stock may trap
    return one("Div", [np.array([-2**31], I32), np.array([-1], I32)])


@case
def mod_fmod_int_by_zero():
    return one("Mod", [np.array([1, 2, 3], I32), np.array([1, 0, 1], I32)], {"fmod": 1})


@case
def instance_norm_scale_mismatch():
    return one("InstanceNormalization", [rnd(1, 3, 4), rnd(2), rnd(3)])


@case
def layernorm_bias_mismatch():
    return one("LayerNormalization", [rnd(2, 3), np.ones(3, F32), np.ones(5, F32)], {"axis": -1})


@case
def group_norm_groups_indivisible():
    return one("GroupNormalization", [rnd(1, 4, 2), np.ones(4, F32), np.zeros(4, F32)], {"num_groups": 3},
               opset=21)


@case
def gather_nd_batch_dims_mismatch():
    return one("GatherND", [rnd(2, 3), np.array([[0], [1], [0]], I64)], {"batch_dims": 1})


@case
def topk_axis_out_of_range():
    return one("TopK", [rnd(2, 3), np.array([1], I64)], {"axis": 2}, out=[F32, I64], unranked=[0])


@case
def trilu_k_huge():               # valid: k beyond the matrix
    return one("Trilu", [rnd(3, 3), np.array(2**40, I64)])


@case
def shape_start_end_out_of_range():  # valid: clamped
    return one("Shape", [rnd(2, 3, 4)], {"start": -10, "end": 10}, out=I64, opset=15)


@case
def cumsum_negative_axis():       # valid
    return one("CumSum", [rnd(2, 3), np.array(-1, I64)], opset=14)


@case
def where_valid_broadcast():
    return one("Where", [np.array([[True], [False]]), rnd(2, 3), rnd(3)], out=F32)


@case
def gemm_a_rank3():
    return one("Gemm", [rnd(2, 3, 4), Const(rnd(4, 5))], unranked=[0])


@case
def matmul_scalar_operand():
    return one("MatMul", [np.array(2.0, F32), rnd(3, 3)], unranked=True)


@case
def conv_group_mismatch():
    return one("Conv", [rnd(1, 4, 5, 5), Const(rnd(4, 2, 3, 3))], {"group": 3})


@case
def resize_sizes_length_mismatch():
    return one("Resize", [rnd(1, 1, 2, 2), None, None, np.array([4, 4], I64)], opset=13)


@case
def range_float_huge_count():     # a range of 2**40 elements: stock refuses or fails allocating
    return one("Range", [np.array(0, F32), np.array(2**40, F32), np.array(1, F32)])


@case
def constant_of_shape_huge():
    return one("ConstantOfShape", [np.array([2**31, 2**31], I64)], out=F32)


# --- reductions: stock's NaN order, undefined empty sets, saturating integers (helper "reduce") --------------

_NAN_LANES = np.array([[1, np.nan, np.nan, 2, 0, 0, 0, 0, 9], [np.nan, 3, 2, 1, 0, 5, 6, 7, 8],
                       [0, np.nan, 0, 3, 2, 7, np.nan, 1, 1]], F32)


@case
def reduce_max_nan_in_packet_lanes():  # valid: a NaN in a packet's lanes drops the lanes combined into it
    return one("ReduceMax", [_NAN_LANES], {"axes": [1], "keepdims": 0}, opset=13)


@case
def reduce_min_nan_middle_axis():      # valid: stock's partial reduction of [kept, reduced, kept]
    return one("ReduceMin", [_NAN_LANES.reshape(3, 3, 3)], {"axes": [1]}, opset=13)


@case
def argmin_nan_vector():               # valid: stock's vectorised search of a 1-D input
    return one("ArgMin", [np.array([5, 4, np.nan, 2, 1, 0, 0, 0, 0], F32)], {"axis": 0}, out=I64)


_POOL_NAN = np.array([[[[1, 2, 3, np.nan, 5, 1, 2, 3], [4, np.nan, 1, 1, -np.inf, -np.inf, -np.inf, -np.inf]]]], F32)


@case
def maxpool_nan_lanes():               # valid: stock keeps or drops a NaN by its MLAS path and lane
    return one("MaxPool", [_POOL_NAN], {"kernel_shape": [2, 2], "strides": [1, 1]}, opset=12)


@case
def global_max_pool_nan_lanes():       # valid: MLAS's global kernel, vectors of 4, then the rest
    return one("GlobalMaxPool", [_POOL_NAN.reshape(1, 2, 1, 8)])


@case
def hardmax_nan():                     # valid: no 1 where the row's maximum comes out NaN
    return one("Hardmax", [_NAN_LANES], opset=13)


@case
def topk_nan_smallest():               # valid: NaN ranks above every number
    return one("TopK", [_NAN_LANES, np.array([4], I64)], {"largest": 0}, out=[F32, I64], opset=11)


@case
def argmax_empty_axis():
    return one("ArgMax", [np.zeros((2, 0), F32)], {"axis": 1}, out=I64, unranked=True, opset=13)


@case
def reduce_max_bool_empty():
    return one("ReduceMax", [np.zeros((2, 0), BOOL), np.array([1], I64)], unranked=True, opset=20)


@case
def reduce_axes_not_a_vector():
    return one("ReduceSum", [rnd(2, 3), np.array([[1]], I64)], opset=13)


@case
def reduce_sum_int32_overflow():       # valid: stock saturates
    return one("ReduceSum", [np.array([[2**31 - 1, 5], [-2**31, -5]], I32), np.array([1], I64)], opset=13)


@case
def cumsum_axis_two_elements():
    return one("CumSum", [rnd(2, 3), np.array([1, 0], I64)], opset=14)


@case
def topk_k_not_a_vector():
    return one("TopK", [rnd(2, 3), np.array(1, I64)], out=[F32, I64], opset=11)


# --- slow ops (helper "slow"): NonMaxSuppression, TfIdfVectorizer, RNN / GRU / LSTM ------------------------

def _nms(boxes, scores, max_out=3, iou=0.5, score=None, attrs=None):
    rest = [np.array([max_out], I64), np.array([iou], F32)] + ([] if score is None else [np.array([score], F32)])
    return one("NonMaxSuppression", [boxes, scores] + rest, attrs, out=I64)


@case
def nms_batch_mismatch():
    return _nms(rnd(2, 4, 4), rnd(1, 1, 4))


@case
def nms_boxes_rank2():
    return _nms(rnd(4, 4), rnd(1, 1, 4))


@case
def nms_scores_rank2():
    return _nms(rnd(1, 4, 4), rnd(1, 4))


@case
def nms_boxes_three_coordinates():
    return _nms(rnd(1, 4, 3), rnd(1, 1, 4))


@case
def nms_iou_above_one():
    return _nms(rnd(1, 4, 4), rnd(1, 1, 4), iou=1.5)


@case
def nms_iou_nan():
    return _nms(rnd(1, 4, 4), rnd(1, 1, 4), iou=float("nan"))


@case
def nms_negative_max_output():      # valid: no boxes
    return _nms(rnd(1, 4, 4), rnd(1, 1, 4), max_out=-2)


@case
def nms_center_point_box_2():
    return _nms(rnd(1, 4, 4), rnd(1, 1, 4), attrs={"center_point_box": 2})


@case
def nms_nan_and_inf_coordinates():  # valid: C++'s std::max / std::min decide with NaN
    boxes = np.array([[[0, 0, 1, 1], [0, np.nan, 1, 1], [0, 0, np.inf, 1], [0.1, 0.1, 1, 1],
                       [np.nan, 0, 1, 1], [-np.inf, -1, 1, 1]]], F32)
    return _nms(boxes, np.array([[[0.9, 0.8, 0.7, 0.6, 0.5, 0.4]]], F32), max_out=6, iou=0.0)


@case
def nms_no_boxes():                 # valid: nothing to select
    return _nms(np.zeros((1, 0, 4), F32), np.zeros((1, 3, 0), F32))


def _tfidf(x, **attrs):
    a = {"mode": "TF", "min_gram_length": 1, "max_gram_length": 2, "max_skip_count": 0, "ngram_counts": [0, 3],
         "ngram_indexes": [0, 1, 2, 3, 4], "pool_int64s": [2, 3, 5, 2, 3, 5, 7]}
    return one("TfIdfVectorizer", [x], {**a, **attrs}, out=F32, opset=9)


@case
def tfidf_batch_of_zero_rows():
    return _tfidf(np.zeros((0, 4), I64))


@case
def tfidf_rank3():
    return _tfidf(np.ones((1, 2, 3), I64))


@case
def tfidf_rows_of_nothing():        # valid: zeros
    return _tfidf(np.zeros((2, 0), I32))


@case
def tfidf_scalar():                 # valid: one id
    return _tfidf(np.array(3, I64))


@case
def tfidf_duplicate_ngram():
    return _tfidf(np.array([2, 3], I64), pool_int64s=[2, 3, 2, 2, 3, 5, 7])


@case
def tfidf_weights_of_other_length():
    return _tfidf(np.array([2, 3], I64), mode="TFIDF", weights=[1.0, 2.0])


@case
def tfidf_ngram_counts_past_pool():
    return _tfidf(np.array([2, 3], I64), ngram_counts=[0, 9])


@case
def tfidf_max_gram_beyond_counts():
    return _tfidf(np.array([2, 3], I64), max_gram_length=3)


def _rnn(op, seq=3, batch=2, width=4, hidden=3, dirs=1, w=None, r=None, b=None, lens=None, h0=None, c0=None,
         p=None, x=None, **attrs):
    g = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    inputs = [rnd(seq, batch, width) if x is None else x,
              rnd(dirs, g * hidden, width, seed=1) if w is None else w,
              rnd(dirs, g * hidden, hidden, seed=2) if r is None else r,
              rnd(dirs, 2 * g * hidden, seed=3) if b is None else b, lens, h0]
    if op == "LSTM":
        inputs += [c0, p]
    while inputs[-1] is None:
        inputs.pop()
    direction = {1: "forward", 2: "bidirectional"}[dirs]
    return one(op, inputs, {"hidden_size": hidden, "direction": direction, **attrs}, opset=14)


@case
def lstm_w_of_other_width():
    return _rnn("LSTM", w=rnd(1, 12, 5))


@case
def lstm_r_of_other_hidden():
    return _rnn("LSTM", r=rnd(1, 12, 4))


@case
def lstm_b_short():
    return _rnn("LSTM", b=rnd(1, 20))


@case
def lstm_sequence_lens_of_other_batch():
    return _rnn("LSTM", lens=np.array([3, 3, 3], I32))


@case
def lstm_sequence_len_beyond_seq():
    return _rnn("LSTM", lens=np.array([4, 1], I32))


@case
def lstm_sequence_len_negative():
    return _rnn("LSTM", lens=np.array([-1, 2], I32))


@case
def lstm_sequence_len_zero():       # valid for stock's check (0 is not refused)
    return _rnn("LSTM", lens=np.array([0, 2], I32), dirs=2)


@case
def lstm_initial_h_of_other_batch():
    return _rnn("LSTM", lens=np.array([3, 2], I32), h0=rnd(1, 3, 3))


@case
def lstm_initial_c_of_other_hidden():
    return _rnn("LSTM", lens=np.array([3, 2], I32), h0=rnd(1, 2, 3), c0=rnd(1, 2, 4))


@case
def lstm_peepholes_short():
    return _rnn("LSTM", lens=np.array([3, 2], I32), h0=rnd(1, 2, 3), c0=rnd(1, 2, 3), p=rnd(1, 8))


@case
def lstm_x_rank2():
    return _rnn("LSTM", x=rnd(3, 4))


@case
def lstm_no_steps():                # valid
    return _rnn("LSTM", x=np.zeros((0, 2, 4), F32), dirs=2)


@case
def gru_w_of_other_gates():
    return _rnn("GRU", w=rnd(1, 12, 4))


@case
def gru_initial_h_of_other_hidden():
    return _rnn("GRU", lens=np.array([3, 2], I32), h0=rnd(1, 2, 2))


@case
def rnn_b_of_other_directions():
    return _rnn("RNN", b=rnd(2, 6))


@case
def rnn_sequence_len_beyond_seq():
    return _rnn("RNN", lens=np.array([2, 5], I32), dirs=2)


@case
def lstm_activations_one_group_for_two_directions():
    return _rnn("LSTM", dirs=2, activations=["Sigmoid", "Tanh", "Tanh"])


@case
def rnn_activations_three_for_one_direction():
    return _rnn("RNN", activations=["Relu", "Tanh", "Tanh"])


@case
def rnn_activations_two_for_one_direction():    # valid: the first
    return _rnn("RNN", activations=["Relu", "Tanh"])


# --- quantized weights: block counts ----------------------------------------------------------------

@case
def matmul_nbits_scales_short():
    k, n, bs = 32, 8, 16
    w = np.zeros((n, k // bs, bs // 2), U8)
    return one("MatMulNBits", [rnd(2, k), Const(w), Const(np.ones(n, F32))], {"K": k, "N": n, "bits": 4,
               "block_size": bs}, out=F32, domain="com.microsoft")


@case
def matmul_nbits_weight_short():
    k, n, bs = 32, 8, 16
    return one("MatMulNBits", [rnd(2, k), Const(np.zeros((n, 1, bs // 2), U8)), Const(np.ones(n * 2, F32))],
               {"K": k, "N": n, "bits": 4, "block_size": bs}, out=F32, domain="com.microsoft")


@case
def gather_block_quantized_scales_short():
    return one("GatherBlockQuantized", [Const(np.zeros((4, 16), U8)), np.array([[1]], I64),
                                        Const(np.ones((4, 1), F32))],
               {"block_size": 16, "quantize_axis": 1}, out=F32, domain="com.microsoft")


@case
def dequantize_blocked_scale_mismatch():
    return one("DequantizeLinear", [np.zeros((2, 8), I8), np.ones((2, 3), F32)], {"axis": 1, "block_size": 4},
               out=F32, opset=21)


@case
def qlinear_matmul_k_mismatch():
    return one("QLinearMatMul", [np.ones((2, 5), U8), np.array(0.1, F32), np.array(0, U8), np.ones((4, 3), U8),
                                 np.array(0.1, F32), np.array(0, U8), np.array(0.2, F32), np.array(0, U8)], out=U8)


@case
def conv_integer_channel_mismatch():
    return one("ConvInteger", [np.ones((1, 3, 4, 4), U8), Const(np.ones((2, 2, 3, 3), U8))], out=I32)


# --- outputs sized by input data beyond any machine's memory: refused, never a killed process --------------

@case
def pad_huge():
    return one("Pad", [rnd(2, 3), np.array([0, 0, 0, 2**38], I64)])


@case
def onehot_huge_depth():
    return one("OneHot", [np.array([0, 1, 2, 3], I64), np.array(2**38, I64), np.array([0, 1], F32)], out=F32)


@case
def resize_huge_scales():
    return one("Resize", [rnd(1, 1, 2, 2), None, np.array([1, 1, 2.0**20, 2.0**20], F32)], opset=13)


@case
def expand_huge():
    return one("Expand", [rnd(1, 1), np.array([2**20, 2**20], I64)])


@case
def tile_huge():
    return one("Tile", [rnd(2, 3), np.array([2**19, 2**19], I64)])


# --- indices inside other ops ------------------------------------------------------------------------------

@case
def maxunpool_index_out_of_range():
    return one("MaxUnpool", [rnd(1, 1, 2, 2), np.array([[[[0, 3], [8, 20]]]], I64)], {"kernel_shape": [2, 2],
                                                                                        "strides": [2, 2]})


@case
def maxunpool_negative_index():
    return one("MaxUnpool", [rnd(1, 1, 2, 2), np.array([[[[0, 3], [8, -1]]]], I64)], {"kernel_shape": [2, 2],
                                                                                        "strides": [2, 2]})


@case
def array_feature_extractor_index_out_of_range():
    return one("ArrayFeatureExtractor", [rnd(2, 3), np.array([1, 3], I64)], domain="ai.onnx.ml")


@case
def array_feature_extractor_negative_index():
    return one("ArrayFeatureExtractor", [rnd(2, 3), np.array([-1], I64)], domain="ai.onnx.ml")


@case
def embed_layer_norm_ids_out_of_range():
    ids = np.array([[1, 9]], I32)
    return one("EmbedLayerNormalization", [ids, np.zeros((1, 2), I32), Const(rnd(5, 8)), Const(rnd(4, 8, seed=1)),
                                           Const(rnd(2, 8, seed=2)), Const(np.ones(8, F32)), Const(np.zeros(8, F32))],
               out=[F32, I32], domain="com.microsoft")


@case
def reverse_sequence_negative_length():
    return one("ReverseSequence", [rnd(3, 2), np.array([-1, 1], I64)], {"batch_axis": 1, "time_axis": 0})


@case
def tensor_scatter_index_out_of_range():
    return one("TensorScatter", [rnd(2, 5, 4), rnd(2, 2, 4), np.array([4, 0], I64)], {"axis": 1}, opset=24)


@case
def tensor_scatter_negative_index_circular():
    return one("TensorScatter", [rnd(2, 5, 4), rnd(2, 2, 4), np.array([1, -1], I64)], {"axis": 1, "mode": "circular"},
               opset=24)


@case
def tensor_scatter_update_longer_than_cache():
    return one("TensorScatter", [rnd(2, 3, 4), rnd(2, 4, 4)], {"axis": 1}, opset=24)


@case
def gather_nd_negative_valid():
    return one("GatherND", [rnd(3, 3), np.array([[-1, -3], [0, 2]], I64)])


@case
def scatter_nd_negative_valid():
    return one("ScatterND", [rnd(3, 3), np.array([[-1], [0]], I64), rnd(2, 3)])


@case
def onehot_negative_index_valid():
    return one("OneHot", [np.array([-1, -3, 5, 1], I64), np.array(3, I64), np.array([0, 1], F32)], out=F32)


# --- contrib ops' shapes -------------------------------------------------------------------------------------

@case
def bias_gelu_bias_mismatch():
    return one("BiasGelu", [rnd(2, 8), rnd(6)], domain="com.microsoft")


@case
def fast_gelu_bias_mismatch():
    return one("FastGelu", [rnd(2, 8), rnd(6)], domain="com.microsoft")


@case
def simplified_layernorm_scale_mismatch():
    return one("SimplifiedLayerNormalization", [rnd(2, 8), np.ones(6, F32)], {"axis": -1})


@case
def rms_norm_scale_mismatch():
    return one("RMSNormalization", [rnd(2, 8), np.ones(6, F32)], {"axis": -1}, opset=23)


@case
def skip_simplified_gamma_mismatch():
    return one("SkipSimplifiedLayerNormalization", [rnd(1, 2, 8), rnd(1, 2, 8), Const(np.ones(6, F32))],
               domain="com.microsoft")


@case
def gqa_rotary_cache_too_short():
    b, n, h = 1, 2, 16
    ins = [rnd(b, 1, n * h), rnd(b, 1, n * h, seed=1), rnd(b, 1, n * h, seed=2), rnd(b, n, 8, h, seed=3),
           rnd(b, n, 8, h, seed=4), np.array([8], I32), np.array([9], I32), Const(rnd(4, 8, seed=5)),
           Const(rnd(4, 8, seed=6))]
    return one("GroupQueryAttention", ins, {"num_heads": n, "kv_num_heads": n, "do_rotary": 1}, out=[F32, F32, F32],
               domain="com.microsoft")


@case
def mha_key_length_mismatch():
    return one("MultiHeadAttention", [rnd(1, 2, 16), rnd(1, 3, 16, seed=1), rnd(1, 4, 16, seed=2)],
               {"num_heads": 2}, domain="com.microsoft")


@case
def attention_weights_mismatch():
    return one("Attention", [rnd(1, 2, 16), Const(rnd(12, 48, seed=1)), Const(rnd(48, seed=2))], {"num_heads": 2},
               domain="com.microsoft")


@case
def gather_elements_rank_mismatch():
    return one("GatherElements", [rnd(3, 3), np.array([0, 1], I64)], {"axis": 0})


@case
def gather_elements_indices_wider_off_axis():
    return one("GatherElements", [rnd(3, 2), np.array([[0, 1, 0]], I64)], {"axis": 0})


@case
def scatter_elements_indices_wider_off_axis():
    return one("ScatterElements", [rnd(3, 2), np.array([[0, 1, 0]], I64), rnd(1, 3)], {"axis": 0})


# --- MaxRoiPool: a batch index per ROI, read from data -------------------------------------------------------

def _roi_pool(rois, attrs=None, opset=21):
    return one("MaxRoiPool", [rnd(2, 3, 8, 8), np.asarray(rois, F32)], {"pooled_shape": [2, 2], **(attrs or {})},
               opset=opset)


@case
def roi_pool_batch_out_of_range():
    return _roi_pool([[0, 1, 1, 5, 5], [2, 0, 0, 3, 3]])


@case
def roi_pool_batch_negative():
    return _roi_pool([[-1, 1, 1, 5, 5]])


@case
def roi_pool_batch_nan():
    return _roi_pool([[np.nan, 1, 1, 5, 5]])


@case
def roi_pool_batch_just_below_zero():  # valid: the index truncates to 0
    return _roi_pool([[-0.5, 1, 1, 5, 5]])


@case
def roi_pool_rois_four_columns():
    return _roi_pool([[0, 1, 1, 5]])


@case
def roi_pool_pooled_shape_zero():
    return _roi_pool([[0, 1, 1, 5, 5]], {"pooled_shape": [0, 2]})


@case
def roi_pool_pooled_shape_three():
    return _roi_pool([[0, 1, 1, 5, 5]], {"pooled_shape": [2, 2, 2]})


@case
def roi_pool_scale_zero():
    return _roi_pool([[0, 1, 1, 5, 5]], {"spatial_scale": 0.0})


@case
def roi_pool_coordinates_huge():  # valid: corners beyond the int range, and NaN, answer as x86 converts them
    return _roi_pool([[0, -3e9, 1, 3e9, 5], [1, np.nan, 1, 5, 5], [1, 1, np.inf, 5, -np.inf]])


@case
def roi_pool_x_rank3():  # stock ORT aborts the process here; ours must refuse
    return one("MaxRoiPool", [rnd(3, 8, 8), np.array([[0, 1, 1, 5, 5]], F32)], {"pooled_shape": [2, 2]}, opset=21)


@case
def roi_pool_rois_rank1():  # stock ORT aborts the process here too
    return one("MaxRoiPool", [rnd(2, 3, 8, 8), np.array([0, 1, 1, 5, 5], F32)], {"pooled_shape": [2, 2]}, opset=21)


def _if(cond, then_value, else_value):
    """If picking between two branches that read x from the outer graph (x + c or x * c)."""
    def branch(name, op, value):
        const = numpy_helper.from_array(np.asarray(value, F32), f"{name}_c")
        return helper.make_graph([helper.make_node(op, ["x", f"{name}_c"], [f"{name}_y"])], name, [],
                                 [helper.make_tensor_value_info(f"{name}_y", _elem(F32), None)], initializer=[const])
    node = helper.make_node("If", ["c"], ["y"], then_branch=branch("then", "Add", then_value),
                            else_branch=branch("else", "Mul", else_value))
    return model([node], {"c": cond, "x": rnd(2, 3)}, {"y": F32})


@case
def if_condition_of_two_elements():
    return _if(np.array([True, False]), 1.0, 2.0)


@case
def if_condition_empty():
    return _if(np.zeros(0, BOOL), 1.0, 2.0)


@case
def if_branches_of_different_shapes():  # valid: the output's shape is the branch's
    return _if(np.array(False), 1.0, np.ones((4, 2, 3), F32))


def _loop(m, cond):
    body = helper.make_graph([helper.make_node("Identity", ["c_in"], ["c_out"]),
                              helper.make_node("Add", ["y_in", "x"], ["y_out"])], "body",
                             [helper.make_tensor_value_info("i", _elem(I64), []),
                              helper.make_tensor_value_info("c_in", _elem(BOOL), []),
                              helper.make_tensor_value_info("y_in", _elem(F32), None)],
                             [helper.make_tensor_value_info("c_out", _elem(BOOL), []),
                              helper.make_tensor_value_info("y_out", _elem(F32), None)])
    node = helper.make_node("Loop", ["m", "c", "y0"], ["y"], body=body)
    return model([node], {"m": m, "c": cond, "y0": rnd(2, 3), "x": rnd(2, 3, seed=1)}, {"y": F32})


@case
def loop_trip_count_not_scalar():
    return _loop(np.array([2, 3], I64), np.array(True))


@case
def loop_condition_not_scalar():
    return _loop(np.array(2, I64), np.zeros(0, BOOL))


@case
def loop_negative_trip_count():  # valid: no iteration
    return _loop(np.array(-3, I64), np.array(True))


def _scan(xa, xb, axes=(0, 0)):
    body = helper.make_graph([helper.make_node("Add", ["s_in", "a"], ["t"]), helper.make_node("Add", ["t", "b"], ["s_out"])],
                             "body", [helper.make_tensor_value_info(n, _elem(F32), None) for n in ("s_in", "a", "b")],
                             [helper.make_tensor_value_info("s_out", _elem(F32), None)])
    node = helper.make_node("Scan", ["s0", "xa", "xb"], ["s"], body=body, num_scan_inputs=2, scan_input_axes=list(axes))
    return model([node], {"s0": rnd(3), "xa": xa, "xb": xb}, {"s": F32})


@case
def scan_inputs_of_different_lengths():
    return _scan(rnd(4, 3), rnd(5, 3, seed=1))


@case
def scan_axis_beyond_rank():
    return _scan(rnd(4, 3), rnd(4, 3, seed=1), axes=(0, 2))


@case
def scan8_sequence_length_zero():
    body = helper.make_graph([helper.make_node("Add", ["s_in", "a"], ["s_out"])], "body",
                             [helper.make_tensor_value_info(n, _elem(F32), None) for n in ("s_in", "a")],
                             [helper.make_tensor_value_info("s_out", _elem(F32), None)])
    node = helper.make_node("Scan", ["lens", "s0", "xa"], ["s"], body=body, num_scan_inputs=1)
    return model([node], {"lens": np.array([2, 0], I64), "s0": rnd(2, 3), "xa": rnd(2, 2, 3)}, {"s": F32}, opset=8)


# --- strings, optionals, Dropout in training -------------------------------------------------------------------

def _strings(*items, shape=None):
    out = np.empty(len(items), object)
    out[:] = items
    return out.reshape(shape or (len(items),))


@case
def string_normalizer_column():  # [C, 1]: only [C] and [1, C] are allowed
    return one("StringNormalizer", [_strings("a", "b", shape=(2, 1))], opset=10)


# (case-sensitive: stock needs a locale installed to compare ignoring case, and CI's machine lacks it)
@case
def string_normalizer_empty():
    return one("StringNormalizer", [_strings()], {"stopwords": ["a"], "is_case_sensitive": 1}, opset=10)


@case
def string_normalizer_all_dropped():  # valid: one empty string
    return one("StringNormalizer", [_strings("a", "a", shape=(1, 2))], {"stopwords": ["a"], "is_case_sensitive": 1},
               opset=10)


@case
def string_split_strange_text():  # valid: non-ASCII, NUL-free control characters, whitespace runs
    return one("StringSplit", [_strings("\t\u00e9 \u3000x\n", "\x01;\x02;", shape=(2, 1))], {"maxsplit": 5},
               out=[object, I64], opset=20)


@case
def dropout_training_ratio_one():
    return one("Dropout", [rnd(3, 4), np.array(1.0, F32), np.array(True)], out=[F32, BOOL], opset=13)


@case
def dropout_inference_ratio_beyond_one():
    return one("Dropout", [rnd(3, 4), np.array(1.5, F32), np.array(False)], out=[F32, BOOL], opset=13)


@case
def dropout_training_ratio_negative():
    return one("Dropout", [rnd(3, 4), np.array(-0.5, F32), np.array(True)], out=[F32, BOOL], opset=13)


def _causal_conv(x, weight, state, **attrs):
    return one("CausalConvWithState", [x, Const(weight), None, state], attrs, out=[F32, F32], opset=21,
               domain="com.microsoft")


@case
def causal_conv_state_too_short():  # the carry state must hold (k - 1) * dilation positions
    return _causal_conv(rnd(1, 4, 5), rnd(4, 1, 3), rnd(1, 4, 1))


@case
def causal_conv_weight_channels_differ():
    return _causal_conv(rnd(1, 4, 5), rnd(3, 1, 3), rnd(1, 4, 2))


@case
def causal_conv_state_batch_differs():
    return _causal_conv(rnd(2, 4, 5), rnd(4, 1, 3), rnd(1, 4, 2))


@case
def causal_conv_empty_sequence():  # valid: no output positions, the state carried over
    return _causal_conv(rnd(1, 4, 0), rnd(4, 1, 3), rnd(1, 4, 2))


def _moe(tokens=5, hidden=16, experts=4, inter=8, k=2, router_rows=None, router_experts=None, fc1_experts=None,
         fc2_inter=None):
    r = np.random.default_rng(0)
    x = r.standard_normal((tokens, hidden)).astype(F32)
    router = r.standard_normal((router_rows or tokens, router_experts or experts)).astype(F32)
    fc1 = r.standard_normal((fc1_experts or experts, 2 * inter, hidden)).astype(F32)
    fc2 = r.standard_normal((experts, hidden, fc2_inter or inter)).astype(F32)
    return one("MoE", [x, router, Const(fc1), None, Const(fc2)],
               dict(k=k, activation_type="swiglu", swiglu_fusion=1, normalize_routing_weights=1), opset=21,
               domain="com.microsoft")


@case
def moe_router_rows_differ():
    return _moe(router_rows=4)


@case
def moe_router_experts_differ():
    return _moe(router_experts=3)


@case
def moe_fc2_inter_differs():
    return _moe(fc2_inter=6)


@case
def moe_k_above_experts():
    return _moe(k=5)


@case
def moe_no_tokens():  # valid: an empty output
    return _moe(tokens=0)


def _qmoe(tokens=5, hidden=32, experts=4, inter=16, k=2, router_experts=None, scale_blocks=None, fc2_bytes=None,
          zero_rows=None, block=16):
    """A 4-bit QMoE, zero points (all its weights constants); at hidden 128, inter 64 and blocks of 32 its experts
    are packed as panels (kernels/cpu/moe.py qmoe_with_panels)."""
    r = np.random.default_rng(0)
    x = r.standard_normal((tokens, hidden)).astype(F32)
    router = r.standard_normal((tokens, router_experts or experts)).astype(F32)
    fc1 = r.integers(0, 256, (experts, 2 * inter, hidden // 2)).astype(U8)
    s1 = (0.05 * r.random((experts, 2 * inter, scale_blocks or hidden // block))).astype(F32)
    fc2 = r.integers(0, 256, (experts, hidden, fc2_bytes or inter // 2)).astype(U8)
    s2 = (0.05 * r.random((experts, hidden, inter // block))).astype(F32)
    z1 = r.integers(0, 256, (experts, zero_rows or 2 * inter, -(-hidden // block // 2))).astype(U8)
    z2 = r.integers(0, 256, (experts, hidden, -(-inter // block // 2))).astype(U8)
    return one("QMoE", [x, router, Const(fc1), Const(s1), None, Const(fc2), Const(s2), None, None, None, None,
                        Const(z1), Const(z2)],
               dict(k=k, activation_type="swiglu", swiglu_fusion=1, expert_weight_bits=4, block_size=block), opset=21,
               domain="com.microsoft")


@case
def qmoe_router_experts_differ():
    return _qmoe(router_experts=3)


@case
def qmoe_scale_blocks_differ():
    return _qmoe(scale_blocks=3)


@case
def qmoe_zero_point_rows_differ():
    return _qmoe(zero_rows=8)


@case
def qmoe_k_above_experts():
    return _qmoe(k=5)


@case
def qmoe_no_tokens():  # valid: an empty output
    return _qmoe(tokens=0)


QMOE_PANELS = dict(hidden=128, inter=64, block=32)


@case
def qmoe_panels_router_experts_differ():
    return _qmoe(router_experts=3, **QMOE_PANELS)


@case
def qmoe_panels_no_tokens():  # valid: an empty output
    return _qmoe(tokens=0, **QMOE_PANELS)


@case
def qmoe_panels_many_tokens():  # valid: past a chunk an expert, the GEMMs over rows put back from panels
    return _qmoe(tokens=40, **QMOE_PANELS)


# --- Qwen3.5-class linear attention layers -----------------------------------------------------------------------

def _mrotary(positions, x=None, section=(2, 3, 3)):
    cos = Const(rnd(6, 8))
    return one("MRotaryEmbedding", [rnd(1, 2, 32) if x is None else x, np.asarray(positions, I64), cos, cos],
               dict(mrope_section=list(section), mrope_layout=1, num_heads=2), domain="com.microsoft")


@case
def mrotary_position_beyond_cache():
    return _mrotary([[[0, 1]], [[0, 1]], [[0, 6]]])


@case
def mrotary_negative_position():
    return _mrotary([[[0, -1]], [[0, 1]], [[0, 1]]])


@case
def mrotary_two_position_streams():
    return _mrotary([[[0, 1]], [[0, 1]]])


@case
def mrotary_sections_not_half_the_rotary_dim():
    return _mrotary([[[0, 1]], [[0, 1]], [[0, 1]]], section=(2, 3, 2))


@case
def mrotary_prompt_longer_than_cache():
    return _mrotary(np.zeros((3, 1, 7)), x=rnd(1, 7, 32))


def _linear_attention(q=(1, 2, 16), k=(1, 2, 16), v=(1, 2, 16), past=(1, 2, 8, 8), decay=(1, 2, 2), beta=(1, 2, 2)):
    return one("LinearAttention", [rnd(*q), rnd(*k), rnd(*v), None if past is None else rnd(*past), rnd(*decay),
                                   rnd(*beta)], dict(q_num_heads=2, kv_num_heads=2), out=[F32, F32],
               domain="com.microsoft")


@case
def linear_attention_past_state_shape():
    return _linear_attention(past=(1, 2, 8, 4))


@case
def linear_attention_value_tokens_differ():
    return _linear_attention(v=(1, 3, 16))


@case
def linear_attention_decay_width():
    return _linear_attention(decay=(1, 2, 3))


@case
def linear_attention_decay_fewer_tokens():  # stock reads decay at every token: ours refuses
    return _linear_attention(decay=(1, 1, 2))


@case
def linear_attention_key_heads_not_dividing():
    return _linear_attention(k=(1, 2, 24))


def _gated_delta_net(q=(4, 2, 8), k=(4, 2, 8), v=(4, 4, 6), cu=None, decay=(4, 4), beta=(4, 4), state=(2, 4, 6, 8),
                     a_log=4, dt_bias=4):
    return one("GatedDeltaNet", [rnd(*q), rnd(*k), rnd(*v), None if cu is None else np.array(cu, np.int32),
                                 rnd(*decay), rnd(*beta), None if state is None else rnd(*state), Const(rnd(a_log)),
                                 Const(rnd(dt_bias))],
               dict(gate_activation="softplus", beta_activation="sigmoid", qk_l2_norm=1), out=[F32, F32],
               domain="com.microsoft")


@case
def gated_delta_net_state_shape():
    return _gated_delta_net(state=(2, 4, 8, 6))


@case
def gated_delta_net_tokens_not_dividing():
    return _gated_delta_net(state=(3, 4, 6, 8))


@case
def gated_delta_net_value_heads_not_a_multiple():
    return _gated_delta_net(v=(4, 3, 6), decay=(4, 3), beta=(4, 3), state=(2, 3, 6, 8), a_log=3, dt_bias=3)


@case
def gated_delta_net_cu_seqlens_past_the_tokens():
    return _gated_delta_net(cu=[0, 3, 9], state=None)


@case
def gated_delta_net_cu_seqlens_decreasing():
    return _gated_delta_net(cu=[0, 3, 1, 4], state=None)


@case
def gated_delta_net_dt_bias_length():
    return _gated_delta_net(dt_bias=3)


@case
def gated_delta_net_decay_fewer_tokens():
    return _gated_delta_net(decay=(3, 4))


@case
def linear_attention_gate_bias_length():
    return one("LinearAttentionGate", [rnd(1, 2, 4), Const(rnd(3)), Const(rnd(4)), rnd(1, 2, 4)], out=[F32, F32],
               domain="com.microsoft")


@case
def linear_attention_gate_b_shape():
    return one("LinearAttentionGate", [rnd(1, 2, 4), Const(rnd(4)), Const(rnd(4)), rnd(1, 3, 4)], out=[F32, F32],
               domain="com.microsoft")


@case
def gated_rms_norm_gate_shape():
    return one("GatedRMSNorm", [rnd(2, 8), Const(rnd(4)), rnd(2, 4)], domain="com.microsoft")


@case
def gated_rms_norm_groups_not_dividing():
    return one("GatedRMSNorm", [rnd(2, 6), Const(rnd(4)), rnd(2, 6)], domain="com.microsoft")


@case
def gated_add_gate_rows_differ():
    return one("GatedAdd", [rnd(2, 8), rnd(2, 8), rnd(3, 1)], domain="com.microsoft")


@case
def gated_add_gate_not_one_column():
    return one("GatedAdd", [rnd(2, 8), rnd(2, 8), rnd(2, 2)], domain="com.microsoft")
