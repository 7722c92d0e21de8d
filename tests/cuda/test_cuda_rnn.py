"""RNN, GRU and LSTM on CUDA (kernels/cuda/rnn.py; skipped without a GPU) against stock ORT's CPU EP,
with the CPU parity cases (tests/kernels/test_rnn.py). Tolerance 1e-4: float32 products summed in
another order than ORT's, carried through the steps' recurrence."""
import pytest

from kernels.test_rnn import rnn_case
from test_cuda_attention import check
from test_cuda_ep import DEVICES, PROBLEM

pytestmark = pytest.mark.skipif(not DEVICES, reason=f"no NVIDIA GPU for the CUDA EP ({PROBLEM or 'none found'})")
TOL = {"rtol": 1e-4, "atol": 1e-4}


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_directions_with_sequence_lengths(op, direction):
    check(*rnn_case(op, direction, seq_lens=True, initial=True), **TOL)


def test_gru_linear_before_reset_clip_and_lstm_peepholes():
    check(*rnn_case("GRU", linear_before_reset=1, clip=0.8), **TOL)
    check(*rnn_case("LSTM", "bidirectional", peepholes=True, initial=True, outputs=1), **TOL)


def test_custom_activations():
    check(*rnn_case("GRU", activations=["Relu", "Tanh"]), **TOL)
    check(*rnn_case("LSTM", "bidirectional", activations=["Sigmoid", "Tanh", "Relu", "Sigmoid", "Relu", "Tanh"]),
          **TOL)
