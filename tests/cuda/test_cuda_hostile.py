"""Hostile input on the CUDA EP (issue 37). Every extent a CUDA kernel derives from its inputs' shapes is checked on
the host before anything is launched, with stock ORT's status (INVALID_ARGUMENT or FAIL); indices and lengths that
live on the GPU are checked there (an index out of range reads zeros or is skipped, a length or position is clamped
to its buffer, and the value is reported): nothing is read or written outside a tensor, which on a GPU would poison
the context of every session in the process, and the run fails with stock's status once the host waits for the
stream (the outputs' copy, the run's end).

Runs everywhere: the host-side checks, each kernel called with a recording runtime (test_cuda_launch_choice's; no
GPU), which must refuse before any launch, copy or GEMM. On a GPU (skipped without): models whose indices, lengths
and positions are fed (so they live on the GPU) run through the CUDA EP in one subprocess, each followed there by a
valid model whose answer must still be right (a faulting kernel would leave the context unusable)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import helper, numpy_helper

from onnxruntime_ep_seamless.kernels.checks import ORT_FAIL, ORT_INVALID_ARGUMENT, status_code
from onnxruntime_ep_seamless.kernels.cuda import (attention, bert, matmul, normalization, quantization, reduction, rnn,
                                                  shape, spatial)
from onnxruntime_ep_seamless.runtime.cuda import DeviceTensor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, also when run as a script
from parity import Const, node_model  # noqa: E402
from test_cuda_ep import needs_gpu  # noqa: E402
from test_cuda_launch_choice import Recorder  # noqa: E402

F32, I32, I64, U8 = (np.dtype(t) for t in (np.float32, np.int32, np.int64, np.uint8))
FAIL, INVALID = ORT_FAIL, ORT_INVALID_ARGUMENT


# --- the host-side checks (no GPU) ---------------------------------------------------------------------------


class Rt(Recorder):
    """The recording runtime, also recording copies and zeroing (device work) and uploading host values."""

    def copy(self, *args):
        self.launches.append(("copy", 0, {}))

    def zero(self, *args):
        self.launches.append(("zero", 0, {}))

    def device(self, t, stream):
        return t if t.ptr or t.size == 0 else self.upload(t.host)


_next = [1 << 20]


def gpu(*shape, dtype=F32):
    """A value on the GPU only: its data cannot be read on the host."""
    _next[0] += 1 << 16
    return DeviceTensor(_next[0], tuple(shape), np.dtype(dtype))


def host(values, dtype=I64):
    """A value known on the host (a constant, or computed there)."""
    array = np.asarray(values, dtype)
    _next[0] += 1 << 16
    return DeviceTensor(_next[0], array.shape, array.dtype, array)


def _lstm():
    return rnn._recurrent("LSTM", 2, True, rnn._lstm_step)


def _gqa(q=(1, 1, 16), k=(1, 1, 16), past=(1, 2, 4, 8), seqlens=None, total=5, caches=None, **attrs):
    """GroupQueryAttention with 2 query and 2 KV heads of 8 (unless the shapes say otherwise)."""
    past_t = gpu(*past) if past else None
    cos, sin = (gpu(*c) for c in caches) if caches else (None, None)
    return lambda rt: attention.group_query_attention(
        rt, None, gpu(*q), gpu(*k), gpu(*k), past_t, past_t and gpu(*past), seqlens or gpu(q[0], dtype=I32),
        host([total], I32), cos, sin, num_heads=2, kv_num_heads=2, do_rotary=int(bool(caches)), **attrs)


# (kernel call on a runtime, the status stock ORT gives, a fragment of our message)
HOST_CHECKS = {
    # shapes and indices known on the host
    "concat_dims": (lambda rt: shape.concat(rt, None, gpu(2, 3), gpu(2, 4), axis=0), FAIL, "Non concat axis"),
    "concat_rank": (lambda rt: shape.concat(rt, None, gpu(2, 3), gpu(2, 3, 1), axis=0), FAIL, "Ranks"),
    "concat_axis": (lambda rt: shape.concat(rt, None, gpu(2, 3), gpu(2, 3), axis=2), FAIL, "axis 2"),
    "transpose_perm_length": (lambda rt: shape.transpose(rt, None, gpu(2, 3, 4), perm=[1, 0]), INVALID, "perm size"),
    "squeeze_non_one": (lambda rt: shape.squeeze(rt, None, gpu(2, 3), host([0])), FAIL, "must be 1"),
    "expand_incompatible": (lambda rt: shape.expand(rt, None, gpu(2, 3), host([2, 4])), INVALID, "expand"),
    "slice_duplicate_axes": (lambda rt: shape.slice_(rt, None, gpu(4, 4), host([0, 1]), host([2, 3]), host([0, 0])),
                             INVALID, "duplicates"),
    "gather_constant_index": (lambda rt: shape.gather(rt, None, gpu(5, 3), host([1, 5])), INVALID, "idx=5"),
    "gather_axis": (lambda rt: shape.gather(rt, None, gpu(5, 3), gpu(2), axis=2), FAIL, "axis 2"),
    "tile_repeats_length": (lambda rt: shape.tile(rt, None, gpu(2, 3), host([2])), INVALID, "same length"),
    "tile_repeats_negative": (lambda rt: shape.tile(rt, None, gpu(2, 3), host([2, -1])), INVALID, "non-negative"),
    "gather_elements_index_dims": (lambda rt: shape.gather_elements(rt, None, gpu(2, 3), gpu(3, 3), axis=1),
                                   INVALID, "within bounds"),
    "gather_elements_rank": (lambda rt: shape.gather_elements(rt, None, gpu(2, 3), gpu(2)), INVALID, "Rank"),
    "gather_elements_constant_index": (lambda rt: shape.gather_elements(rt, None, gpu(3, 3), host([[0, 3]]),
                                                                           axis=1), FAIL, "Out of range"),
    "gather_nd_batch": (lambda rt: shape.gather_nd(rt, None, gpu(2, 3, 4), gpu(3, 1, 1), batch_dims=1), INVALID,
                        "batch"),
    "gather_nd_k": (lambda rt: shape.gather_nd(rt, None, gpu(2, 3), gpu(1, 3)), INVALID, "last dimension"),
    "gather_nd_constant_index": (lambda rt: shape.gather_nd(rt, None, gpu(3, 3), host([[0, 3]])), INVALID,
                                 "invalid index"),
    "scatter_nd_updates": (lambda rt: shape.scatter_nd(rt, None, gpu(3, 3), gpu(2, 1), gpu(1, 3)), INVALID,
                           "updates tensor"),
    "scatter_nd_constant_index": (lambda rt: shape.scatter_nd(rt, None, gpu(3, 3), host([[3]]), gpu(1, 3)),
                                  INVALID, "invalid indice"),
    "scatter_elements_updates": (lambda rt: shape.scatter_elements(rt, None, gpu(3, 3), gpu(1, 2), gpu(2, 2)),
                                 INVALID, "same shape"),
    "scatter_elements_index_dims": (lambda rt: shape.scatter_elements(rt, None, gpu(3, 3), gpu(1, 4), gpu(1, 4)),
                                    INVALID, "within bounds"),
    "scatter_elements_constant_index": (lambda rt: shape.scatter_elements(rt, None, gpu(3, 3), host([[-4]]),
                                                                             gpu(1, 1)), INVALID, "idx=-4"),
    "trilu_rank": (lambda rt: shape.trilu(rt, None, gpu(3)), INVALID, "rank"),
    "topk_k": (lambda rt: reduction.top_k_11(rt, None, gpu(2, 3), host([4])), FAIL, "greater than"),
    # products: K of both operands, quantized blocks
    "matmul_k": (lambda rt: matmul.matmul(rt, None, gpu(64, 300), gpu(256, 256)), FAIL, "last dimension"),
    "gemm_k": (lambda rt: matmul.gemm(rt, None, gpu(64, 300), gpu(256, 256), transB=1), INVALID, "Dimension"),
    "gemm_bias": (lambda rt: matmul.gemm(rt, None, gpu(64, 256), gpu(256, 128), gpu(3, 128)), INVALID, "bias"),
    "matmul_nbits_k": (lambda rt: quantization.matmul_nbits(rt, None, gpu(2, 48), gpu(8, 2, 8, dtype=U8), gpu(16),
                                                       K=32, N=8, block_size=16), FAIL, "mismatch"),
    "matmul_nbits_blocks": (lambda rt: quantization.matmul_nbits(rt, None, gpu(2, 32), gpu(8, 1, 8, dtype=U8), gpu(16),
                                                            K=32, N=8, block_size=16), FAIL, "B of shape"),
    "matmul_nbits_scales": (lambda rt: quantization.matmul_nbits(rt, None, gpu(2, 32), gpu(8, 2, 8, dtype=U8), gpu(8),
                                                            K=32, N=8, block_size=16), FAIL, "scales"),
    "matmul_nbits_zero_points": (lambda rt: quantization.matmul_nbits(rt, None, gpu(2, 32), gpu(8, 2, 8, dtype=U8),
                                                                 gpu(16), gpu(2, dtype=U8), K=32, N=8, block_size=16),
                                 FAIL, "zero_points"),
    "gather_block_quantized_scales": (lambda rt: quantization.gather_block_quantized(
        rt, None, gpu(4, 8, dtype=U8), gpu(1, 1), gpu(2, 1), block_size=16), FAIL, "scales"),
    # attention: the shapes its kernels address the inputs by
    "gqa_key": (_gqa(k=(1, 1, 8)), INVALID, "'key'"),
    "gqa_past_heads": (_gqa(past=(1, 1, 4, 8)), INVALID, "past_key"),
    "gqa_caches": (_gqa(q=(1, 1, 32), k=(1, 1, 32), past=(1, 2, 4, 16), caches=((8, 8), (4, 8))), INVALID,
                   "sin_cache"),
    "gqa_seqlens_constant": (_gqa(seqlens=host([9], I32)), INVALID, "seqlens_k"),
    "gqa_total_length": (_gqa(total=200000), INVALID, "total_sequence_length"),
    "rotary_position_constant": (lambda rt: attention.rotary_embedding(rt, None, gpu(1, 2, 16), host([[0, 9]]),
                                                                     gpu(4, 4), gpu(4, 4)), INVALID, "position_ids"),
    "rotary_caches": (lambda rt: attention.rotary_embedding(rt, None, gpu(1, 2, 16), gpu(1, 2), gpu(4, 4), gpu(2, 4)),
                      INVALID, "same shape"),
    "rotary_heads": (lambda rt: attention.rotary_embedding(rt, None, gpu(1, 2, 18), gpu(1, 2), gpu(4, 4), gpu(4, 4),
                                                         num_heads=4), INVALID, "whole number"),
    "onnx_attention_head_size": (lambda rt: attention.attention(rt, None, gpu(1, 2, 3, 4), gpu(1, 2, 5, 3),
                                                                gpu(1, 2, 5, 4)), FAIL, "disagree"),
    "onnx_attention_lengths": (lambda rt: attention.attention(rt, None, gpu(1, 2, 3, 4), gpu(1, 2, 5, 4),
                                                              gpu(1, 2, 4, 4)), FAIL, "disagree"),
    "mha_bias": (lambda rt: attention.multi_head_attention(rt, None, gpu(1, 2, 8), gpu(1, 3, 8), gpu(1, 3, 8), gpu(10),
                                                      num_heads=2), INVALID, "'bias'"),
    "mha_key": (lambda rt: attention.multi_head_attention(rt, None, gpu(1, 2, 8), gpu(1, 3, 4), gpu(1, 3, 8),
                                                     num_heads=2), INVALID, "'key'"),
    "mha_mask": (lambda rt: attention.multi_head_attention(rt, None, gpu(1, 2, 8), gpu(1, 3, 8), gpu(1, 3, 8), None,
                                                      gpu(1, 5, dtype=I32), num_heads=2), INVALID, "key_padding_mask"),
    "attention_qkv_sizes": (lambda rt: bert.ms_attention(rt, None, gpu(1, 2, 8), gpu(8, 24), gpu(24), num_heads=2,
                                                         qkv_hidden_sizes=[8, 8, 16]), FAIL, "hidden sizes"),
    "attention_past": (lambda rt: bert.ms_attention(rt, None, gpu(1, 2, 8), gpu(8, 24), gpu(24), None,
                                                    gpu(2, 1, 1, 3, 4), num_heads=2, _num_outputs=2), INVALID, "past"),
    "attention_mask": (lambda rt: bert.ms_attention(rt, None, gpu(1, 2, 8), gpu(8, 24), gpu(24),
                                                    gpu(1, 5, dtype=I32), num_heads=2), INVALID, "mask_index"),
    "embed_segment_ids": (lambda rt: bert.embed_layer_normalization(
        rt, None, gpu(1, 3, dtype=I32), gpu(1, 2, dtype=I32), gpu(5, 4), gpu(8, 4), gpu(2, 4), gpu(4), gpu(4)),
        INVALID, "Input 0 and 1"),
    # normalisations, quantization, data movement by index tensors
    "skip_norm_gamma": (lambda rt: normalization.skip_layer_norm(rt, None, gpu(1, 2, 8), gpu(1, 2, 8), gpu(7)), INVALID,
                        "scale"),
    "group_norm_scale": (lambda rt: normalization.group_normalization_21(rt, None, gpu(1, 4, 3), gpu(3), gpu(3),
                                                                    num_groups=2), FAIL, "GroupNormalization"),
    "one_hot_depth": (lambda rt: shape.one_hot(rt, None, gpu(2), host(-2), gpu(2)), INVALID, "Depth"),
    "reverse_sequence_lengths": (lambda rt: shape.reverse_sequence(rt, None, gpu(3, 2), gpu(3)), INVALID,
                                 "sequence_lens"),
    "tensor_scatter_write_indices": (lambda rt: shape.tensor_scatter(rt, None, gpu(2, 4, 3), gpu(2, 1, 3),
                                                                        gpu(3), axis=1), FAIL, "write_indices"),
    "max_unpool_indices": (lambda rt: spatial.max_unpool(rt, None, gpu(1, 1, 2, 2), gpu(1, 1, 2, 1),
                                                          kernel_shape=[2, 2], strides=[2, 2]), FAIL, "Index tensor"),
    # convolution, pooling, resampling
    "conv_channels": (lambda rt: spatial.conv(rt, None, gpu(1, 3, 5, 5), gpu(4, 2, 3, 3)), FAIL, "kernel channels"),
    "conv_bias": (lambda rt: spatial.conv(rt, None, gpu(1, 2, 5, 5), gpu(4, 2, 3, 3), gpu(3)), FAIL, "bias"),
    "conv_kernel_shape": (lambda rt: spatial.conv(rt, None, gpu(1, 2, 5, 5), gpu(4, 2, 3, 3), kernel_shape=[2, 2]),
                          FAIL, "kernel_shape"),
    "conv_transpose_channels": (lambda rt: spatial.conv_transpose(rt, None, gpu(1, 3, 5, 5), gpu(2, 4, 3, 3)),
                                INVALID, "filter number"),
    "conv_transpose_bias": (lambda rt: spatial.conv_transpose(rt, None, gpu(1, 2, 5, 5), gpu(2, 4, 3, 3), gpu(3)),
                            INVALID, "Bias"),
    "batch_norm_mean": (lambda rt: normalization.batch_normalization(rt, None, gpu(1, 3, 2, 2), gpu(3), gpu(3), gpu(2),
                                                               gpu(3)), INVALID, "parameters"),
    "pad_reflect": (lambda rt: shape.pad_11(rt, None, gpu(2, 3), host([0, 4, 0, 0]), mode="reflect"), INVALID,
                    "pre-pad (4)"),
    "grid_sample_empty": (lambda rt: spatial.grid_sample(rt, None, gpu(1, 1, 0, 2), gpu(1, 2, 2, 2)), FAIL,
                          "non-empty"),
    "resize_empty": (lambda rt: spatial.resize_11(rt, None, gpu(1, 1, 0, 2), None, None, host([1, 1, 2, 2])), FAIL,
                     "empty input"),
    # recurrences
    "lstm_weights": (lambda rt: _lstm()(rt, None, gpu(2, 1, 3), gpu(1, 12, 4), gpu(1, 12, 3), hidden_size=3),
                     INVALID, "Input W"),
    "lstm_sequence_lens": (lambda rt: _lstm()(rt, None, gpu(2, 1, 3), gpu(1, 12, 3), gpu(1, 12, 3), gpu(1, 24),
                                              host([3], I32), hidden_size=3), INVALID, "sequence_lens"),
}


@pytest.mark.parametrize("name", list(HOST_CHECKS))
def test_host_checks_refuse_before_any_device_work(name):
    call, status, fragment = HOST_CHECKS[name]
    rt = Rt()
    with pytest.raises(Exception) as info:
        call(rt)
    assert status_code(info.value) == status, f"{type(info.value).__name__}: {info.value}"
    assert fragment in str(info.value), str(info.value)
    assert not rt.launches, f"device work before the refusal: {rt.launches}"


# --- on a GPU: device-side guards, and the context afterwards ------------------------------------------------
#
# Each case: (model, feeds, expected outputs or the ORT error class the run must end with) with its indices, lengths
# or positions fed, so that they live on the GPU (the kernels cannot check them on the host): a value out of range
# fails the run with stock's error class (the kernel bounds its access and reports it). Shape mismatches are refused
# on the host.


def _data(*shape):
    return np.arange(np.prod(shape), dtype=np.float32).reshape(shape) + 1  # no zeros: a zero comes from a guard


def _rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _gqa_case(past_len, s, seqlens, total, n=2, h=8):
    past = [_rnd(1, n, past_len, h, seed=3), _rnd(1, n, past_len, h, seed=4)] if past_len else [None, None]
    inputs = [_rnd(1, s, n * h), _rnd(1, s, n * h, seed=1), _rnd(1, s, n * h, seed=2)] + past
    model, feeds = node_model("GroupQueryAttention", inputs + [np.array(seqlens, np.int32),
                                                               Const(np.array([total], np.int32))],
                              {"num_heads": n, "kv_num_heads": n}, outputs=[F32, F32, F32],
                              domain="com.microsoft", symbolic=True)
    return model, feeds, "InvalidArgument"


def _rotary_case(positions):
    """com.microsoft RotaryEmbedding with positions outside the 4 cache rows."""
    x, cos, sin = _rnd(1, 2, 16), _rnd(4, 4, seed=1), _rnd(4, 4, seed=2)
    return node_model("RotaryEmbedding", [x, np.array([positions], np.int64), Const(cos), Const(sin)],
                      domain="com.microsoft", symbolic=True) + ("InvalidArgument",)


def _embed_case():
    """EmbedLayerNormalization with a word id past the table."""
    ids, segments = np.array([[0, 7, 2]], np.int32), np.zeros((1, 3), np.int32)
    word, position, segment = _rnd(5, 4), _rnd(8, 4, seed=1), _rnd(2, 4, seed=2)
    gamma, beta = np.ones(4, np.float32), np.zeros(4, np.float32)
    return node_model("EmbedLayerNormalization", [ids, segments, Const(word), Const(position), Const(segment),
                                                  Const(gamma), Const(beta)], outputs=[F32, I32],
                      domain="com.microsoft", symbolic=True) + ("InvalidArgument",)


def _gather_block_quantized_case():
    """4-bit rows r of value r (zero point 8, scale 1): indices out of range give rows of zeros, as stock's."""
    data = np.repeat((np.arange(4, dtype=np.uint8) * 0x11)[:, None], 8, axis=1)
    indices = np.array([[1, 4, -5, -1]], np.int64)
    model, feeds = node_model("GatherBlockQuantized", [Const(data), indices, Const(np.ones((4, 1), np.float32))],
                              {"block_size": 16}, outputs=[F32], domain="com.microsoft", symbolic=True)
    rows = np.array([1 - 8, 0, 0, 3 - 8], np.float32)
    return model, feeds, [np.repeat(rows[None, :, None], 16, axis=2)]


def _nbits_k_case():
    k, n, bs = 32, 8, 16
    return node_model("MatMulNBits", [_rnd(2, 48), Const(np.zeros((n, k // bs, bs // 2), np.uint8)),
                                      Const(np.ones(n * k // bs, np.float32))],
                      {"K": k, "N": n, "bits": 4, "block_size": bs}, outputs=[F32], domain="com.microsoft",
                      symbolic=True) + ("Fail",)


D33 = _data(3, 3)
# name -> () -> (model, feeds, expected): expected the outputs, a check(outputs) -> problem or "", or the ORT error
# class the run must end with
GPU_CASES = {
    "gather_index_out_of_range": lambda: node_model("Gather", [_data(5, 3), np.array([1, 5, -6, -1, 2], np.int64)],
                                                    symbolic=True) + ("InvalidArgument",),
    "gather_elements_index_out_of_range": lambda: node_model(
        "GatherElements", [D33, np.array([[0, 3], [-4, 2], [1, -1]], np.int64)], {"axis": 1}, symbolic=True) +
    ("Fail",),
    "gather_nd_index_out_of_range": lambda: node_model(
        "GatherND", [D33, np.array([[0, 3], [2, 1], [-4, 0]], np.int64)], symbolic=True) + ("InvalidArgument",),
    "scatter_elements_index_out_of_range": lambda: node_model(
        "ScatterElements", [D33, np.array([[3, 1, -4]], np.int64), np.array([[100, 101, 102]], np.float32)],
        {"axis": 0}, symbolic=True) + ("InvalidArgument",),
    "scatter_nd_index_out_of_range": lambda: node_model(
        "ScatterND", [D33, np.array([[3], [1], [-4]], np.int64), _data(3, 3) + 100], symbolic=True) +
    ("InvalidArgument",),
    "integer_division_by_zero": lambda: node_model("Div", [np.array([4, 5], np.int64), np.array([2, 0], np.int64)],
                                                   symbolic=True) + ("Fail",),
    "gather_block_quantized_index_out_of_range": _gather_block_quantized_case,
    "embed_layer_norm_id_out_of_range": _embed_case,
    "reverse_sequence_length_beyond": lambda: node_model(
        "ReverseSequence", [_data(3, 2), np.array([4, 1], np.int64)], {"batch_axis": 1, "time_axis": 0},
        symbolic=True) + ("Fail",),
    "rotary_position_beyond_cache": lambda: _rotary_case([0, 9]),
    "rotary_position_negative": lambda: _rotary_case([-2, 1]),
    "gqa_decode_seqlens_beyond_past": lambda: _gqa_case(4, 1, [9], 5),
    "gqa_decode_seqlens_negative": lambda: _gqa_case(4, 1, [-3], 5),
    "gqa_decode_seqlens_huge": lambda: _gqa_case(4, 1, [2 ** 31 - 1], 5),
    "gqa_prompt_seqlens_beyond": lambda: _gqa_case(0, 3, [50], 3),
    # shapes that disagree: refused on the host, as stock refuses them
    "matmul_k_mismatch": lambda: node_model("MatMul", [_rnd(64, 300), _rnd(256, 256)], symbolic=True) + ("Fail",),
    "matmul_k_mismatch_constant": lambda: node_model("MatMul", [_rnd(64, 512), Const(_rnd(256, 256))],
                                                     symbolic=True) + ("Fail",),
    "gemm_k_mismatch": lambda: node_model("Gemm", [_rnd(64, 300), Const(_rnd(256, 256)), Const(_rnd(256))],
                                          {"transB": 1}, symbolic=True) + ("InvalidArgument",),
    "matmul_nbits_k_mismatch": _nbits_k_case,
    "conv_channel_mismatch": lambda: node_model("Conv", [_rnd(1, 3, 5, 5), Const(_rnd(4, 2, 3, 3))],
                                                symbolic=True) + ("Fail",),
    "concat_dims_mismatch": lambda: node_model("Concat", [_rnd(2, 3), _rnd(2, 4)], {"axis": 0}, symbolic=True) +
    ("Fail",),
    "gather_elements_index_dims_beyond": lambda: node_model("GatherElements", [_rnd(2, 3), np.zeros((3, 3), np.int64)],
                                                            {"axis": 1}, symbolic=True) + ("InvalidArgument",),
    "scatter_nd_updates_broadcast": lambda: node_model("ScatterND", [_rnd(3, 3), np.array([[0], [1]], np.int64),
                                                                     _rnd(1, 3)], symbolic=True) + ("InvalidArgument",),
    "gqa_key_shape_mismatch": lambda: node_model(
        "GroupQueryAttention", [_rnd(1, 1, 16), _rnd(1, 1, 8), _rnd(1, 1, 8), _rnd(1, 2, 4, 8), _rnd(1, 2, 4, 8),
                                np.array([4], np.int32), Const(np.array([5], np.int32))],
        {"num_heads": 2, "kv_num_heads": 2}, outputs=[F32, F32, F32], domain="com.microsoft", symbolic=True) +
    ("InvalidArgument",),
}


def _canary():
    """A valid model of Gather (indices on the GPU), MatMul and Softmax, and its answer."""
    table, w = _data(6, 4) / 10, _rnd(4, 3)
    indices = np.array([0, 5, 2], np.int64)
    model, feeds = node_model("Gather", [Const(table), indices], symbolic=True)
    graph = model.graph
    graph.initializer.append(numpy_helper.from_array(w, "w"))
    graph.node.extend([helper.make_node("MatMul", ["out0", "w"], ["prod"]),
                       helper.make_node("Softmax", ["prod"], ["y"], axis=-1)])
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("y", 1, None))
    logits = table[indices] @ w
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return model, feeds, e / e.sum(-1, keepdims=True)


def _worker(names):
    """Runs the cases on the CUDA EP in this process, each followed by the canary: one JSON line a case."""
    import onnxruntime_ep_seamless as seamless
    from parity import ep_session

    def run(model, feeds):
        sess = ep_session(model, device="cuda")
        fallback = seamless.partition_report(sess, "cuda").fallback_nodes
        if fallback:
            raise AssertionError(f"nodes ran on ORT's CPU EP: {fallback}")
        return sess.run(None, feeds)

    canary_model, canary_feeds, canary_answer = _canary()

    def canary():
        try:
            (y,) = run(canary_model, canary_feeds)
            return "" if np.allclose(y, canary_answer, rtol=1e-5, atol=1e-6) else f"canary answered {y}"
        except Exception as exc:  # a poisoned context fails every later launch
            return f"canary failed: {type(exc).__name__}: {exc}"[:2000]

    print(json.dumps({"case": "", "canary": canary()}), flush=True)
    for name in names:
        model, feeds, _ = GPU_CASES[name]()
        result = {"case": name}
        try:
            outputs = run(model, feeds)
            result.update(outcome="ok", outputs=[[str(o.dtype), list(o.shape), o.tolist()] for o in outputs])
        except AssertionError as exc:
            result.update(outcome="not-claimed", message=str(exc))
        except Exception as exc:
            result.update(outcome="error", error=type(exc).__name__, message=str(exc)[:2000])
        result["canary"] = canary()
        print(json.dumps(result), flush=True)


@pytest.fixture(scope="module")
def gpu_results():
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), *GPU_CASES], capture_output=True, text=True,
                          timeout=600)
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            results[record["case"]] = record
    if "" not in results:
        pytest.fail(f"the CUDA worker did not start (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    assert not results[""]["canary"], f"the valid model fails before any hostile case: {results['']['canary']}"
    results["_stderr"] = proc.stderr[-3000:]
    return results


@needs_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("name", list(GPU_CASES))
def test_the_cuda_ep_refuses_bad_gpu_data_and_the_context_survives(gpu_results, name):
    result = gpu_results.get(name)
    assert result is not None, f"the worker died in or before this case:\n{gpu_results['_stderr']}"
    assert result["outcome"] != "not-claimed", result["message"]
    _, _, expected = GPU_CASES[name]()
    if isinstance(expected, str):  # stock's error class, the message naming the node
        assert result["outcome"] == "error" and result["error"] == expected, result
        assert "node" in result["message"], result["message"]
    else:
        outputs = [np.array(values, dtype) for dtype, shape, values in result["outputs"]]
        assert len(outputs) == len(expected)
        for i, (o, e) in enumerate(zip(outputs, expected)):
            np.testing.assert_allclose(o, np.asarray(e, o.dtype), rtol=1e-5, atol=1e-5, err_msg=f"output {i}")
    assert not result["canary"], f"a valid model afterwards, in the same process: {result['canary']}"



@needs_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("capture", ["auto", "off"])
@pytest.mark.parametrize("outputs", ["host", "gpu"])
def test_a_bad_index_found_on_the_gpu_fails_its_run_only(capture, outputs):
    """Indices bound on the GPU: valid runs (captured and replayed with capture=auto), a run with an index out of
    range fails with stock's status and names the node (reported when the outputs are copied to the host, or at the
    run's end when they stay on the GPU), and the next valid run on the same session answers. (ORT's Python API
    raises RuntimeError for any failed run_with_iobinding: the status class is checked with outputs to the host,
    through run().)"""
    import onnxruntime as ort

    from test_cuda_capture import on_gpu
    from test_cuda_ep import cuda_session

    table = _data(6, 4)
    model, _ = node_model("Gather", [Const(table), np.array([0, 1, 2], np.int64)], symbolic=True)
    sess = cuda_session(model, capture=capture)
    for step, indices in enumerate([[0, 5, 2], [1, 1, 3], [4, 9, 0], [5, 0, 2], [-1, -6, 3], [2, -7, 1], [3, 3, 3]]):
        binding = sess.io_binding()
        binding.bind_ortvalue_input("in1", on_gpu(np.array(indices, np.int64)))
        result = on_gpu(np.zeros((3, 4), np.float32))
        binding.bind_ortvalue_output("out0", result)
        bad = any(not -6 <= i < 6 for i in indices)
        if bad:
            error = RuntimeError if outputs == "gpu" else ort.capi.onnxruntime_pybind11_state.InvalidArgument
            with pytest.raises(error, match=r"node .*Gather.*idx=(9|-7) must be within .*found on the GPU"):
                if outputs == "gpu":
                    sess.run_with_iobinding(binding)
                else:
                    sess.run(None, {"in1": np.array(indices, np.int64)})  # copied to the GPU by ORT
            continue
        if outputs == "gpu":
            sess.run_with_iobinding(binding)
            got = result.numpy()
        else:
            (got,) = sess.run(None, {"in1": np.array(indices, np.int64)})
        np.testing.assert_array_equal(got, table[indices], err_msg=f"step {step}")


if __name__ == "__main__":
    _worker(sys.argv[1:])
