"""Parity of RNN, GRU and LSTM (kernels/cpu/rnn.py) with stock ORT: directions, sequence
lengths, initial states, peepholes, layouts, and the outputs a model may leave out."""
import numpy as np
import pytest

from parity import assert_parity, single_node_model

rng = np.random.default_rng(11)
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
TOL = {"rtol": 1e-5, "atol": 1e-5}


def run(op, direction="forward", **how):
    assert_parity(*rnn_case(op, direction, **how), **TOL)


def rnn_case(op, direction="forward", seq_lens=False, initial=False, peepholes=False, layout=0, outputs=3, **attrs):
    """(model, feeds) of one layer. layout=1 (batch first) has no stock ORT kernel: the conformance
    suite covers it."""
    seq, batch, inp, hidden = 4, 3, 5, 6
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    x = rng.standard_normal((batch, seq, inp) if layout else (seq, batch, inp)).astype(np.float32)
    ins = {"X": x, "W": rng.standard_normal((dirs, g * hidden, inp)).astype(np.float32) * 0.5,
           "R": rng.standard_normal((dirs, g * hidden, hidden)).astype(np.float32) * 0.5,
           "B": rng.standard_normal((dirs, 2 * g * hidden)).astype(np.float32) * 0.1}
    if seq_lens:
        ins["sequence_lens"] = np.array([4, 2, 3], np.int32)
    state_shape = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    if initial:
        ins["initial_h"] = rng.standard_normal(state_shape).astype(np.float32)
        if op == "LSTM":
            ins["initial_c"] = rng.standard_normal(state_shape).astype(np.float32)
    if peepholes:
        ins["P"] = rng.standard_normal((dirs, 3 * hidden)).astype(np.float32) * 0.1
    order = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"][:8 if op == "LSTM" else 6]
    while order[-1] not in ins:
        order.pop()
    specs = [(n, ins[n].dtype, ins[n].shape) if n in ins else ("", np.float32, None) for n in order]
    out_names = ["Y", "Y_h", "Y_c"][:min(outputs, 3 if op == "LSTM" else 2)]
    model = single_node_model(op, specs, [(n, np.float32, None) for n in out_names],
                              {"hidden_size": hidden, "direction": direction, "layout": layout, **attrs}, opset=14)
    return model, {n: ins[n] for n in order if n in ins}


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_directions_with_sequence_lengths(op, direction):
    run(op, direction, seq_lens=True, initial=True)


def test_gru_linear_before_reset_and_clip():
    run("GRU", linear_before_reset=1, clip=0.8)


def test_lstm_peepholes_and_only_y():
    run("LSTM", "bidirectional", peepholes=True, initial=True, outputs=1)


def test_custom_activations():
    run("GRU", activations=["Relu", "Tanh"])
    run("LSTM", "bidirectional", activations=["Sigmoid", "Tanh", "Relu", "Sigmoid", "Relu", "Tanh"])
