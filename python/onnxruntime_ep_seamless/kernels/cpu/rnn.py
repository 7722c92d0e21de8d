"""Recurrent layers: RNN, GRU, LSTM (ONNX semantics; activations Tanh, Sigmoid, Relu).

Shapes (layout=0): X [seq, batch, input]; W [dirs, gates*hidden, input]; R [dirs, gates*hidden,
hidden]; B [dirs, 2*gates*hidden] (input then recurrence biases); Y [seq, dirs, batch, hidden];
Y_h (and LSTM's Y_c) [dirs, batch, hidden]. layout=1 puts batch first in X, Y, Y_h, Y_c.
With sequence_lens, a batch entry's steps past its length output 0 and leave the state as it was
(a length of 0 ends with zero states, as in stock ORT); the reverse direction reads each sequence
backwards from its own last step.

The input projections of all steps and directions are one native GEMM before the loop; the loop
over time runs natively (native/cpu/rnn.c), each step a product by R^T and one pass over the
gates (a numpy loop spent ~10 numpy calls a step: 6-14x stock ORT's time).
"""
import numpy as np

from .. import constants
from ..checks import InvalidArgument
from ..registry import kernel
from .elementwise import via_float32


_ACTIVATIONS = ("Tanh", "Sigmoid", "Relu")  # no parameters
DEFAULT_ACTIVATIONS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
# stock ORT computes none of them in float64 (float16 it computes in float32)
_TYPES = frozenset(map(np.dtype, (np.float16, np.float32)))


def check_rnn(node, graph):
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


def validate_rnn(node, graph):
    """Stock ORT refuses at load an activations list that is not one group a direction (RNN forward: or
    two, as its default is)."""
    names = node.attrs.get("activations")
    if names is None:
        return
    dirs = 2 if node.attrs.get("direction", "forward") == "bidirectional" else 1
    k = len(DEFAULT_ACTIVATIONS[node.op_type])
    if len(names) != k * dirs and not (node.op_type == "RNN" and dirs == 1 and len(names) == 2):
        raise ValueError(f"activations has {len(names)} functions; {node.op_type} takes {k} a direction, "
                         f"{dirs} direction(s)")


def _dims(shape) -> str:
    return "{" + ",".join(map(str, shape)) + "}"


def check_inputs(op, X, W, R, B, sequence_lens, initial_h, initial_c, P, dirs, hidden):
    """Stock ORT's run-time checks of a layer's inputs, in its order and with its status codes
    (X and the states in layout 0)."""
    if X.ndim != 3:
        raise InvalidArgument(f"Input X must have 3 dimensions only. Actual:{_dims(X.shape)}")
    seq, batch, width = X.shape
    g = _GATES[op]
    for name, value, shape in (("W", W, (dirs, g * hidden, width)), ("R", R, (dirs, g * hidden, hidden))):
        if value.shape != shape:
            raise InvalidArgument(f"Input {name} must have shape {_dims(shape)}. Actual:{_dims(value.shape)}")
    if B is not None and B.shape != (dirs, 2 * g * hidden):
        raise InvalidArgument(f"Input B must have shape {{{dirs},{2 * g}*{hidden}}}. Actual:{_dims(B.shape)}")
    if sequence_lens is not None:
        if sequence_lens.shape != (batch,):
            raise InvalidArgument(f"Input sequence_lens must have shape {{{batch}}}. "
                                  f"Actual:{_dims(sequence_lens.shape)}")
        if sequence_lens.size and (sequence_lens.min() < 0 or sequence_lens.max() > seq):
            raise InvalidArgument("Invalid value/s in sequence_lens. All values must be >= 0 and <= seq_length. "
                                  f"seq_length={seq}")
    for name, value in (("initial_h", initial_h), ("initial_c", initial_c)):
        if value is not None and value.shape != (dirs, batch, hidden):
            raise ValueError(f"Input {name} must have shape {_dims((dirs, batch, hidden))}. "
                             f"Actual:{_dims(value.shape)}")
    if P is not None and P.shape != (dirs, 3 * hidden):
        raise ValueError(f"Input P must have shape {{{dirs},{3 * hidden}}}. Actual:{_dims(P.shape)}")


def cell_activations(op, activations):
    """The cell's activation functions (f, g[, h]) per direction: the attribute's groups (an RNN
    forward layer may carry two, as its default does: it uses the first)."""
    k = len(DEFAULT_ACTIVATIONS[op])
    names = activations or DEFAULT_ACTIVATIONS[op] * 2
    return [names[:k], names[k:2 * k] if len(names) >= 2 * k else names[:k]]


def _layout0(x, layout):
    """An input in layout 0 ([seq, batch, ...] or [dirs, batch, hidden]) when the node has layout 1."""
    return x.swapaxes(0, 1) if layout and x is not None and x.ndim >= 2 else x


def packed_weights(array, name, rows=slice(None)):
    """Per direction, rows `rows` of a weight [dirs, rows, cols] transposed and packed for the native products,
    once per constant array."""
    from . import native
    return constants.derived(array, f"rnn_{name}",
                             lambda a: [native.pack_b(a[d, rows], trans_b=True) for d in range(a.shape[0])])


def _run(X, W, bias, sequence_lens, states, direction, hidden, layout, count, direction_fn):
    """A layer's first `count` outputs (Y, then the last states) in the node's layout, X and the initial
    states given in layout 0. bias [dirs, gates * hidden]: what the input projections X W^T get added;
    direction_fn(xw, d, order, lens, steps, states_d, Y) runs direction d natively (native.rnn_direction)."""
    from . import native
    seq, batch, width = X.shape
    dirs, gh, _ = W.shape
    states = [np.zeros((dirs, batch, hidden), np.float32) if s is None else np.array(s, np.float32, order="C")
              for s in states]
    lens = None if sequence_lens is None else sequence_lens.astype(np.int64)
    if lens is not None and (lens == seq).all():
        lens = None
    full = np.full(batch, seq) if lens is None else lens
    Y = (np.empty if lens is None else np.zeros)((seq, dirs, batch, hidden), np.float32)
    # the projections of every step and both directions: one GEMM
    rows = X.reshape(seq * batch, width)
    packed = constants.derived(W, "rnn_w", lambda w: native.pack_b(w.reshape(dirs * gh, width), trans_b=True))
    xw = native.sgemm(rows, packed, dirs * gh, bias.reshape(-1)) if rows.size else \
        np.zeros((seq * batch, dirs * gh), np.float32)
    for d in range(dirs):
        order = None
        if direction == "reverse" or d == 1:  # each sequence read backwards from its own last step
            t = np.arange(seq)[:, None]
            order = np.where(t < full, full - 1 - t, t)
        direction_fn(xw.reshape(seq, batch, dirs * gh), d, order, lens, int(full.max(initial=0)),
                     [s[d] for s in states], Y)
    if lens is not None:
        for s in states:  # stock ORT's last states of an empty sequence: zeros, whatever the initial ones
            s[:, lens == 0] = 0
    outputs = (Y, *states)
    if layout:
        outputs = (Y.transpose(2, 0, 1, 3), *[s.swapaxes(0, 1) for s in states])
    return outputs[:count]


def _clip(clip):
    return None if clip is None else float(clip)


@kernel("RNN", since=7, types=_TYPES, check=check_rnn, validate=validate_rnn)
@via_float32
def rnn(X, W, R, B=None, sequence_lens=None, initial_h=None, *, activations=None, clip=None, direction="forward",
        hidden_size, layout=0, _num_outputs=1):
    from . import native
    X, initial_h = _layout0(X, layout), _layout0(initial_h, layout)
    n, dirs = hidden_size, 2 if direction == "bidirectional" else 1
    check_inputs("RNN", X, W, R, B, sequence_lens, initial_h, None, None, dirs, n)
    acts, r_packed = cell_activations("RNN", activations), packed_weights(R, "r")
    bias = np.zeros((dirs, n), np.float32) if B is None else B[:, :n] + B[:, n:]

    def direction_fn(xw, d, order, lens, steps, states, Y):
        native.rnn_direction(xw, d, order, lens, steps, r_packed[d], _clip(clip), acts[d][0], *states, Y)
    return _run(X, W, bias, sequence_lens, [initial_h], direction, n, layout, _num_outputs, direction_fn)


@kernel("GRU", since=7, types=_TYPES, check=check_rnn, validate=validate_rnn)
@via_float32
def gru(X, W, R, B=None, sequence_lens=None, initial_h=None, *, activations=None, clip=None, direction="forward",
        hidden_size, layout=0, linear_before_reset=0, _num_outputs=1):
    from . import native
    X, initial_h = _layout0(X, layout), _layout0(initial_h, layout)
    n, dirs = hidden_size, 2 if direction == "bidirectional" else 1
    check_inputs("GRU", X, W, R, B, sequence_lens, initial_h, None, None, dirs, n)
    acts = cell_activations("GRU", activations)
    b = np.zeros((dirs, 6 * n), np.float32) if B is None else B
    # the input projections take Wb and the update and reset gates' Rb; the candidate's Rb goes
    # inside the reset product with linear_before_reset, else it is added outside the product too
    bias = b[:, :3 * n] + np.concatenate([b[:, 3 * n:5 * n], b[:, 5 * n:] * (not linear_before_reset)], axis=1)
    zr_packed, h_packed = packed_weights(R, "r_zr", slice(0, 2 * n)), packed_weights(R, "r_h", slice(2 * n, None))

    def direction_fn(xw, d, order, lens, steps, states, Y):
        native.gru_direction(xw, d, order, lens, steps, zr_packed[d], h_packed[d], b[d, 5 * n:], linear_before_reset,
                             _clip(clip), acts[d], *states, Y)
    return _run(X, W, bias, sequence_lens, [initial_h], direction, n, layout, _num_outputs, direction_fn)


@kernel("LSTM", since=7, types=_TYPES, check=check_rnn, validate=validate_rnn)
@via_float32
def lstm(X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, *, activations=None,
         clip=None, direction="forward", hidden_size, input_forget=0, layout=0, _num_outputs=1):
    from . import native
    X, initial_h, initial_c = (_layout0(v, layout) for v in (X, initial_h, initial_c))
    n, dirs = hidden_size, 2 if direction == "bidirectional" else 1
    check_inputs("LSTM", X, W, R, B, sequence_lens, initial_h, initial_c, P, dirs, n)
    acts, r_packed = cell_activations("LSTM", activations), packed_weights(R, "r")
    bias = np.zeros((dirs, 4 * n), np.float32) if B is None else B[:, :4 * n] + B[:, 4 * n:]

    def direction_fn(xw, d, order, lens, steps, states, Y):
        native.lstm_direction(xw, d, order, lens, steps, r_packed[d], None if P is None else P[d], _clip(clip),
                              acts[d], *states, Y)
    return _run(X, W, bias, sequence_lens, [initial_h, initial_c], direction, n, layout, _num_outputs, direction_fn)
