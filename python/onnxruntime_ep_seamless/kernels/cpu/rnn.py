"""Recurrent layers: RNN, GRU, LSTM (ONNX semantics; activations Tanh, Sigmoid, Relu).

Shapes (layout=0): X [seq, batch, input]; W [dirs, gates*hidden, input]; R [dirs, gates*hidden,
hidden]; B [dirs, 2*gates*hidden] (input then recurrence biases); Y [seq, dirs, batch, hidden];
Y_h (and LSTM's Y_c) [dirs, batch, hidden]. layout=1 puts batch first in X, Y, Y_h, Y_c.
With sequence_lens, a batch entry's steps past its length output 0 and leave the state as it was;
the reverse direction reads each sequence backwards from its own last step.
"""
import numpy as np

from ..registry import FLOATS, kernel
from .elementwise import _via_float32


def _sigmoid(x):
    return 0.5 * (np.tanh(0.5 * x) + 1)  # = 1 / (1 + exp(-x)), without overflow


_ACTIVATIONS = {"Tanh": np.tanh, "Sigmoid": _sigmoid, "Relu": lambda x: np.maximum(x, 0)}  # no parameters
_DEFAULT_ACTIVATIONS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}


def _check_rnn(node, graph):
    if "activation_alpha" in node.attrs or "activation_beta" in node.attrs:
        return "activations with parameters (activation_alpha, activation_beta) are not supported"
    unknown = sorted(set(node.attrs.get("activations", [])) - set(_ACTIVATIONS))
    if unknown:
        return f"activations {unknown} not supported (only {', '.join(_ACTIVATIONS)})"
    if node.attrs.get("input_forget", 0):
        return "LSTM input_forget=1 is not supported"
    if node.attrs.get("direction", "forward") not in ("forward", "reverse", "bidirectional"):
        return f"direction={node.attrs['direction']!r} is not defined"
    return None


def _activations(op, activations, direction):
    """Per direction, the cell's activation functions (f, g[, h]): the list holds one group per
    direction (a forward layer may carry two groups, as RNN's default does: it uses the first)."""
    k = len(_DEFAULT_ACTIVATIONS[op])
    names = activations or _DEFAULT_ACTIVATIONS[op] * 2
    groups = [names[:k], names[k:2 * k] if len(names) >= 2 * k else names[:k]]
    return [[_ACTIVATIONS[n] for n in group] for group in groups[:2 if direction == "bidirectional" else 1]]


def _time_index(seq, lens, reverse):
    """[seq, batch] source step per step: identity, or each sequence read backwards within its length."""
    t = np.arange(seq)[:, None]
    if not reverse:
        return np.broadcast_to(t, (seq, lens.size))
    return np.where(t < lens, lens - 1 - t, t)


def _run(cell, X, W, R, B, sequence_lens, initial_states, direction, layout, hidden_size, n_states,
         add_biases=True):
    """Run `cell` over time in each direction; returns Y, then the last of each state. The cell gets
    the input and recurrence biases added, or (add_biases=False) both, concatenated."""
    if layout:
        X = X.swapaxes(0, 1)
        initial_states = [None if s is None else s.swapaxes(0, 1) for s in initial_states]
    seq, batch, _ = X.shape
    dirs = 2 if direction == "bidirectional" else 1
    lens = np.full(batch, seq) if sequence_lens is None else sequence_lens.astype(np.int64)
    Y = np.zeros((seq, dirs, batch, hidden_size), dtype=X.dtype)
    last = [np.zeros((dirs, batch, hidden_size), dtype=X.dtype) for _ in range(n_states)]
    for d in range(dirs):
        reverse = direction == "reverse" or d == 1
        order = _time_index(seq, lens[None, :], reverse)
        b = np.zeros(2 * W.shape[1], X.dtype) if B is None else B[d]
        bias = b[:W.shape[1]] + b[W.shape[1]:] if add_biases else b
        xw = np.matmul(X, W[d].T)                            # the input projections of every step at once
        states = [np.zeros((batch, hidden_size), X.dtype) if s is None else s[d] for s in initial_states]
        rows = np.arange(batch)
        for t in range(seq):
            active = (t < lens)[:, None]
            new = cell(xw[order[t], rows], states, R[d], bias, d)
            states = [np.where(active, n, s) for n, s in zip(new, states)]
            Y[order[t], d, rows] = np.where(active, states[0], 0)  # each batch entry at its own step
        for i, s in enumerate(states):
            last[i][d] = s
    if layout:
        return (Y.transpose(2, 0, 1, 3), *[s.swapaxes(0, 1) for s in last])
    return (Y, *last)


def _clipped(x, clip):
    return x if clip is None else np.clip(x, -clip, clip)


@kernel("RNN", since=7, types=FLOATS, check=_check_rnn)
@_via_float32
def rnn(X, W, R, B=None, sequence_lens=None, initial_h=None, *, activations=None, clip=None, direction="forward",
        hidden_size, layout=0, _num_outputs=1):
    acts = _activations("RNN", activations, direction)

    def cell(xw, states, r, bias, d):
        (f,) = acts[d]
        (h,) = states
        return (f(_clipped(xw + h @ r.T + bias, clip)),)
    return _run(cell, X, W, R, B, sequence_lens, [initial_h], direction, layout, hidden_size, 1)[:_num_outputs]


def _gru(linear_before_reset, clip, acts):
    def cell(xw, states, r, b, d):
        f, g = acts[d]
        (h,) = states
        n = h.shape[1]
        wb, rb = b[:3 * n], b[3 * n:]
        x_z, x_r, x_h = np.split(xw + wb, 3, axis=1)
        r_z, r_r, r_h = r[:n], r[n:2 * n], r[2 * n:]
        z = f(_clipped(x_z + h @ r_z.T + rb[:n], clip))
        reset = f(_clipped(x_r + h @ r_r.T + rb[n:2 * n], clip))
        if linear_before_reset:
            candidate = x_h + reset * (h @ r_h.T + rb[2 * n:])
        else:
            candidate = x_h + (reset * h) @ r_h.T + rb[2 * n:]
        candidate = g(_clipped(candidate, clip))
        return ((1 - z) * candidate + z * h,)
    return cell


@kernel("GRU", since=7, types=FLOATS, check=_check_rnn)
@_via_float32
def gru(X, W, R, B=None, sequence_lens=None, initial_h=None, *, activations=None, clip=None, direction="forward",
        hidden_size, layout=0, linear_before_reset=0, _num_outputs=1):
    cell = _gru(linear_before_reset, clip, _activations("GRU", activations, direction))
    return _run(cell, X, W, R, B, sequence_lens, [initial_h], direction, layout, hidden_size, 1,
                add_biases=False)[:_num_outputs]  # the reset gate sits between the biases


@kernel("LSTM", since=7, types=FLOATS, check=_check_rnn)
@_via_float32
def lstm(X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, *, activations=None,
         clip=None, direction="forward", hidden_size, input_forget=0, layout=0, _num_outputs=1):
    acts = _activations("LSTM", activations, direction)

    def cell(xw, states, r, bias, d):
        f, g, h_act = acts[d]
        h, c = states
        gates = xw + h @ r.T + bias
        g_i, g_o, g_f, g_c = np.split(gates, 4, axis=1)     # ONNX's gate order: input, output, forget, cell
        p_i, p_o, p_f = np.split(P[d], 3) if P is not None else (0, 0, 0)
        i = f(_clipped(g_i + p_i * c, clip))
        forget = f(_clipped(g_f + p_f * c, clip))
        c_new = forget * c + i * g(_clipped(g_c, clip))
        o = f(_clipped(g_o + p_o * c_new, clip))
        return o * h_act(c_new), c_new
    result = _run(cell, X, W, R, B, sequence_lens, [initial_h, initial_c], direction, layout, hidden_size, 2)
    return result[:_num_outputs]
