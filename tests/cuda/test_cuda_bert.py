"""com.microsoft EmbedLayerNormalization, Attention and MultiHeadAttention on the CUDA EP
(kernels/cuda/bert.py; skipped without a GPU), against stock ORT's CPU EP, with the CPU parity
tests' cases and tolerances (tests/kernels/test_bert.py, test_attention.py: float16
intermediates rounded by ORT where we keep float32)."""
import numpy as np
import pytest

from kernels.test_attention import MHA_CASES, MHA_ID
from kernels.test_attention import TOL as MHA_TOL
from kernels.test_attention import mha
from kernels.test_bert import (F16, F32, I32, MS, TOL, attention_inputs, attention_without_bias, data,
                                      embed_inputs, rng)
from parity import Const, assert_close, node_model, stock_session
from test_cuda_attention import check
from test_cuda_ep import DEVICES, PROBLEM, run_on_cuda

pytestmark = pytest.mark.skipif(not DEVICES, reason=f"no NVIDIA GPU for the CUDA EP ({PROBLEM or 'none found'})")


def bert_check(op, inputs, attrs, outputs=None, **tol):
    check(*node_model(op, inputs, attrs, outputs=outputs, domain=MS), **tol)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("b,s", [(2, 7), (1, 1), (3, 4)])
def test_embed_layer_normalization(dtype, b, s):
    bert_check("EmbedLayerNormalization", embed_inputs(b, s, dtype=dtype), dict(epsilon=1e-12),
               outputs=[dtype, I32, dtype], **TOL[dtype])


def test_embed_layer_normalization_no_segment_no_mask_and_position_ids():
    bert_check("EmbedLayerNormalization", embed_inputs(2, 5, segments=False, mask=False), dict(epsilon=1e-5),
               outputs=[F32, I32], **TOL[F32])
    pos = np.array([[3, 1, 0, 2, 5], [0, 1, 2, 3, 4]], I32)
    bert_check("EmbedLayerNormalization", embed_inputs(2, 5, position_ids=pos), {}, outputs=[F32, I32, F32], **TOL[F32])


@pytest.mark.parametrize("dtype", [F32, F16])
def test_attention_mask_end_positions(dtype):
    bert_check("Attention", attention_inputs(3, 6, dtype=dtype, mask=np.array([6, 2, 4], I32)), dict(num_heads=4),
               **TOL[dtype])


def test_attention_no_mask_no_bias_and_end_and_start():
    model, zero_bias, feeds = attention_without_bias()  # stock ORT's reference given a zero bias (its docstring)
    (ours,), (ref,) = run_on_cuda(model, feeds), stock_session(zero_bias).run(None, feeds)
    assert_close(ours, ref, **TOL[F32])
    bert_check("Attention", attention_inputs(2, 6, mask=np.array([5, 6, 1, 0], I32)), dict(num_heads=4), **TOL[F32])


@pytest.mark.parametrize("shape", ["2d", "3d"])
def test_attention_raw_mask(shape):
    b, s = 2, 5
    m = (rng.random((b, s, s) if shape == "3d" else (b, s)) > 0.3).astype(I32)
    m[..., 0] = 1
    bert_check("Attention", attention_inputs(b, s, mask=m), dict(num_heads=4, mask_filter_value=-1e4), **TOL[F32])


@pytest.mark.parametrize("dtype", [F32, F16])
def test_attention_past_unidirectional(dtype):
    bert_check("Attention", attention_inputs(2, 3, dtype=dtype, past=4), dict(num_heads=4, unidirectional=1),
               outputs=[dtype, dtype], **TOL[dtype])


def test_attention_qkv_hidden_sizes_scale_and_bias_input():
    hidden = 32
    bert_check("Attention", [data(2, 4, hidden), Const(data(hidden, 56, scale=0.2)), Const(data(56, scale=0.1))],
               dict(num_heads=4, qkv_hidden_sizes=[16, 16, 24], scale=0.3), **TOL[F32])
    bert_check("Attention", attention_inputs(2, 4, heads=4) + [data(2, 4, 4, 4)], dict(num_heads=4), **TOL[F32])


@pytest.mark.parametrize("case", MHA_CASES, ids=MHA_ID)
def test_multi_head_attention(case):
    check(*mha(**case), **MHA_TOL)
