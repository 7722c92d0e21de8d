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


def rnn_case(op, direction="forward", seq_lens=False, initial=False, peepholes=False, layout=0, outputs=3,
             sizes=(4, 3, 5, 6), **attrs):
    """(model, feeds) of one layer: sizes (seq, batch, input, hidden); seq_lens True ([4, 2, 3] for the
    default sizes) or the lengths. layout=1 (batch first) has no stock ORT kernel: the conformance suite
    covers it."""
    seq, batch, inp, hidden = sizes
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    x = rng.standard_normal((batch, seq, inp) if layout else (seq, batch, inp)).astype(np.float32)
    ins = {"X": x, "W": rng.standard_normal((dirs, g * hidden, inp)).astype(np.float32) * 0.5,
           # R at most 1 / sqrt(hidden): a chaotic recurrence would grow any rounding difference without bound
           "R": rng.standard_normal((dirs, g * hidden, hidden)).astype(np.float32) * min(0.5, hidden ** -0.5),
           "B": rng.standard_normal((dirs, 2 * g * hidden)).astype(np.float32) * 0.1}
    if seq_lens is not False:
        ins["sequence_lens"] = np.array([4, 2, 3] if seq_lens is True else seq_lens, np.int32)
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


# The native loop (native/cpu/rnn.c) multiplies by R^T in tiles of up to 4 rows x 64 columns (fewer where the
# CPU has fewer vector registers), the last 16-column panel partial: sizes that leave remainders of each.
@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("sizes", [(9, 7, 10, 20), (6, 5, 3, 70), (3, 1, 8, 33)])
def test_tile_remainders(op, sizes):
    run(op, "bidirectional", initial=True, sizes=sizes)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_lengths_zero_full_and_between(op):
    run(op, "bidirectional", seq_lens=[0, 6, 3, 1, 6], initial=True, sizes=(6, 5, 4, 17))
    run(op, "reverse", seq_lens=[2, 0, 5, 5, 1], sizes=(5, 5, 4, 17))


def test_long_sequences_stay_within_tolerance():
    run("LSTM", "bidirectional", initial=True, sizes=(128, 2, 16, 64))
    run("GRU", "forward", sizes=(128, 1, 16, 64), linear_before_reset=1)


def test_clip_with_peepholes_and_lengths():
    run("LSTM", "bidirectional", seq_lens=True, initial=True, peepholes=True, clip=0.5)
    run("RNN", "bidirectional", seq_lens=True, activations=["Relu", "Tanh"], clip=1.5)
    run("GRU", "bidirectional", seq_lens=True, linear_before_reset=1, clip=0.7)
