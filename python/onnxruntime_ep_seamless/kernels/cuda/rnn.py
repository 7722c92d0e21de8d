"""RNN, GRU and LSTM on CUDA, composed of our kernels in float32 (kernels/cpu/rnn.py has the
semantics and shapes): the input projections of every step in one GEMM per direction, then per step
one GEMM by the recurrence weights and the cell's elementwise launches. sequence_lens is read on the
host (a seam when it was computed on the GPU): the steps past a length, and the reverse direction's
order within each length, are then fixed row gathers and masks uploaded once per run."""
import numpy as np

from ...runtime.cuda import DeviceTensor, contiguous_strides
from ..cpu.rnn import DEFAULT_ACTIVATIONS, check_inputs, check_rnn, validate_rnn
from ..registry import kernel
from .elementwise import (ADD, CLIP, GPU_FLOATS, MUL, SUB, UNARY, Scratch, binary, cast_to, device_scalar, unary,
                          where)
from .matmul import gemm_into
from .shape import gather, permuted, stand_in

F32, I64 = np.dtype(np.float32), np.dtype(np.int64)
ACTIVATION = {name: UNARY[name][0] for name in ("Tanh", "Sigmoid", "Relu")}


def _activations(op, activations, direction):
    """Per direction, the cell's activation codes (f, g[, h]), as kernels/cpu/rnn.py picks them."""
    k = len(DEFAULT_ACTIVATIONS[op])
    names = activations or DEFAULT_ACTIVATIONS[op] * 2
    groups = [names[:k], names[k:2 * k] if len(names) >= 2 * k else names[:k]]
    return [[ACTIVATION[n] for n in group] for group in groups[:2 if direction == "bidirectional" else 1]]


class _Cell:
    """Device arithmetic on (batch, n) float32 matrices; what it makes is freed with the scratch."""

    def __init__(self, rt, stream, s, clip):
        self.rt, self.stream, self.s, self.clip = rt, stream, s, clip

    def __call__(self, code, a, b):
        return self.s(binary(self.rt, self.stream, code, a, b))

    def act(self, code, x):
        if self.clip is not None:
            x = self.s(unary(self.rt, self.stream, CLIP, x, -float(self.clip), float(self.clip)))
        return self.s(unary(self.rt, self.stream, code, x))

    def times(self, h, r):
        """h . r.T for h (batch, k) and r (n, k)."""
        y = self.s(self.rt.alloc((h.shape[0], r.shape[0]), F32))
        gemm_into(self.rt, self.stream, h, r, y, h.shape[0], r.shape[0], r.shape[1], trans_b=True)
        return y

    def columns(self, x, i, n):
        """Columns [i * n, (i + 1) * n) of a (batch, g * n) matrix, contiguous."""
        y = self.s(self.rt.alloc((x.shape[0], n), F32))
        self.rt.strided_copy(self.stream, x, y, y.shape, (x.shape[1], 1), (n, 1), i * n)
        return y


def _rows(t, first, count, width):
    """Rows [first, first + count) of a contiguous float32 matrix of `width` columns (a view)."""
    return DeviceTensor(t.ptr + first * width * 4, (count, width), F32)


def _run(rt, stream, s, cell, x, w, r, b, lens, states0, direction, layout, hidden, n_states, add_biases):
    """kernels/cpu/rnn.py's _run on the GPU: Y, then the last of each state (float32)."""
    if layout:
        x = s(permuted(rt, stream, x, [1, 0, 2]))
        states0 = [None if t is None else s(permuted(rt, stream, t, [1, 0, 2])) for t in states0]
    seq, batch, width = x.shape
    dirs, gh = (2 if direction == "bidirectional" else 1), w.shape[1]
    lens = np.full(batch, seq, np.int64) if lens is None else np.asarray(lens, np.int64).reshape(-1)
    y = s(rt.alloc((seq, dirs, batch, hidden), F32))
    last = [s(rt.alloc((dirs, batch, hidden), F32)) for _ in range(n_states)]
    zero_state = s(rt.alloc((batch, hidden), F32))
    rt.zero(zero_state, stream)
    for d in range(dirs):
        reverse = direction == "reverse" or d == 1
        order = np.ascontiguousarray(_time_index(seq, lens[None, :], reverse), np.int64)  # an involution per entry
        moved = not np.array_equal(order, np.broadcast_to(np.arange(seq)[:, None], order.shape))
        xw = cell.times(DeviceTensor(x.ptr, (seq * batch, width), F32), _rows(w, d * gh, gh, width))
        if b is None:
            bias = s(rt.alloc((2 * gh,) if not add_biases else (gh,), F32))
            rt.zero(bias, stream)
        else:
            bias = _rows(b, d, 1, 2 * gh)
            bias = DeviceTensor(bias.ptr, (2 * gh,), F32)
            if add_biases:
                bias = cell(ADD, DeviceTensor(bias.ptr, (gh,), F32), DeviceTensor(bias.ptr + gh * 4, (gh,), F32))
        rows = None
        if moved:  # step t reads entry b's input at step order[t, b]
            rows = s(rt.device(DeviceTensor.on_host(order * batch + np.arange(batch)), stream))
        states = [zero_state if t is None else _rows(t, d * batch, batch, hidden) for t in states0]
        steps = s(rt.alloc((seq, batch, hidden), F32))  # the output of each step, in step order
        for t in range(seq):
            active = t < lens
            out = _rows(steps, t * batch, batch, hidden)
            if not active.any():
                rt.zero(out, stream)
                continue
            if rows is None:
                step_in = _rows(xw, t * batch, batch, gh)
            else:
                step_in = s(gather(rt, stream, xw, DeviceTensor(rows.ptr + t * batch * 8, (batch,), I64))[0])
            new = cell.step(step_in, states, _rows(r, d * gh, gh, hidden), bias, d)
            if active.all():
                states = new
                rt.copy(out.ptr, states[0].ptr, states[0].nbytes, stream)
            else:
                mask = s(rt.device(DeviceTensor.on_host(active.reshape(batch, 1)), stream))
                states = [s(where(rt, stream, mask, n, old)[0]) for n, old in zip(new, states)]
                (masked,) = where(rt, stream, mask, states[0], zero_state)
                rt.copy(out.ptr, masked.ptr, masked.nbytes, stream)
                rt.free(masked)
        dst = contiguous_strides((seq, dirs, batch, hidden))
        if rows is not None:  # back to each entry's own step order (order is its own inverse)
            (steps,) = gather(rt, stream, DeviceTensor(steps.ptr, (seq * batch, hidden), F32), rows)
            s(steps)
        rt.strided_copy(stream, steps, y, (seq, batch, hidden), (batch * hidden, hidden, 1), (dst[0], dst[2], 1),
                        0, d * batch * hidden)
        for i, state in enumerate(states):
            rt.copy(last[i].ptr + d * batch * hidden * 4, state.ptr, state.nbytes, stream)
    if layout:
        return [s(permuted(rt, stream, y, [2, 0, 1, 3]))] + [s(permuted(rt, stream, t, [1, 0, 2])) for t in last]
    return [y] + last


def _time_index(seq, lens, reverse):
    """[seq, batch] source step per step: identity, or each sequence read backwards within its length."""
    t = np.arange(seq)[:, None]
    if not reverse:
        return np.broadcast_to(t, (seq, lens.size))
    return np.where(t < lens, lens - 1 - t, t)


def _check(op, x, w, r, b, lens, rest, direction, hidden_size, layout):
    """The CPU kernel's checks of the shapes the GEMMs and row views read, and of the lengths (on the host), on
    stand-ins of the inputs (X and the initial states in layout 0)."""
    def like(t, swap=False):
        return None if t is None else stand_in(t.shape[1::-1] + t.shape[2:] if swap and layout else t.shape)
    h0, c0, p = (list(rest) + [None] * 3)[:3]
    check_inputs(op, like(x, True), like(w), like(r), like(b), lens, like(h0, True), like(c0, True), like(p),
                  2 if direction == "bidirectional" else 1, hidden_size)


def _recurrent(op, n_states, add_biases, make_step):
    def run(rt, stream, x, w, r, b=None, sequence_lens=None, *rest, activations=None, clip=None,
            direction="forward", hidden_size, layout=0, linear_before_reset=0, input_forget=0, _num_outputs=1):
        lens = None if sequence_lens is None else rt.to_host(sequence_lens, stream)
        _check(op, x, w, r, b, lens, rest, direction, hidden_size, layout)
        s = Scratch(rt, x, w, r, b, sequence_lens, *rest)
        wide = [None if t is None else s(cast_to(rt, stream, t, F32)) for t in (x, w, r, b) + tuple(rest)]
        extra = (wide[4:] + [None] * 3)[:3]  # initial_h, initial_c, P (LSTM)
        cell = _Cell(rt, stream, s, clip)
        cell.step = make_step(cell, _activations(op, activations, direction), extra, linear_before_reset)
        outputs = _run(rt, stream, s, cell, *wide[:4], lens, extra[:n_states], direction, layout, hidden_size,
                       n_states, add_biases)
        return s.done(*[cast_to(rt, stream, t, x.dtype) for t in outputs[:max(_num_outputs, 1)]])
    return run


def _rnn_step(cell, acts, extra, linear_before_reset):
    def step(xw, states, r, bias, d):
        (f,) = acts[d]
        return [cell.act(f, cell(ADD, cell(ADD, xw, cell.times(states[0], r)), bias))]
    return step


def _gru_step(cell, acts, extra, linear_before_reset):
    def step(xw, states, r, b, d):
        f, g = acts[d]
        (h,) = states
        n = h.shape[1]
        x = cell(ADD, xw, DeviceTensor(b.ptr, (3 * n,), F32))
        rb = [DeviceTensor(b.ptr + (3 * n + i * n) * 4, (n,), F32) for i in range(3)]
        rz, rr, rh = (_rows(r, i * n, n, n) for i in range(3))
        x_z, x_r, x_h = (cell.columns(x, i, n) for i in range(3))
        z = cell.act(f, cell(ADD, cell(ADD, x_z, cell.times(h, rz)), rb[0]))
        reset = cell.act(f, cell(ADD, cell(ADD, x_r, cell.times(h, rr)), rb[1]))
        if linear_before_reset:
            candidate = cell(ADD, x_h, cell(MUL, reset, cell(ADD, cell.times(h, rh), rb[2])))
        else:
            candidate = cell(ADD, cell(ADD, x_h, cell.times(cell(MUL, reset, h), rh)), rb[2])
        candidate = cell.act(g, candidate)
        one = cell.s(device_scalar(cell.rt, cell.stream, 1.0))
        return [cell(ADD, cell(MUL, cell(SUB, one, z), candidate), cell(MUL, z, h))]
    return step


def _lstm_step(cell, acts, extra, linear_before_reset):
    peepholes = extra[2]

    def step(xw, states, r, bias, d):
        f, g, h_act = acts[d]
        h, c = states
        n = h.shape[1]
        gates = cell(ADD, cell(ADD, xw, cell.times(h, r)), bias)
        g_i, g_o, g_f, g_c = (cell.columns(gates, i, n) for i in range(4))  # ONNX's order: input, output, forget, cell
        if peepholes is not None:
            p_i, p_o, p_f = (DeviceTensor(peepholes.ptr + (d * 3 + i) * n * 4, (n,), F32) for i in range(3))
            g_i, g_f = cell(ADD, g_i, cell(MUL, p_i, c)), cell(ADD, g_f, cell(MUL, p_f, c))
        i = cell.act(f, g_i)
        forget = cell.act(f, g_f)
        c_new = cell(ADD, cell(MUL, forget, c), cell(MUL, i, cell.act(g, g_c)))
        if peepholes is not None:
            g_o = cell(ADD, g_o, cell(MUL, p_o, c_new))
        o = cell.act(f, g_o)
        clip, cell.clip = cell.clip, None  # the output's activation is not clipped
        h_new = cell(MUL, o, cell.act(h_act, c_new))
        cell.clip = clip
        return [h_new, c_new]
    return step


kernel("RNN", since=7, types=GPU_FLOATS, device="cuda", check=check_rnn, host_inputs=(4,),
       validate=validate_rnn)(
    _recurrent("RNN", 1, True, _rnn_step))
kernel("GRU", since=7, types=GPU_FLOATS, device="cuda", check=check_rnn, host_inputs=(4,),
       validate=validate_rnn)(
    _recurrent("GRU", 1, False, _gru_step))
kernel("LSTM", since=7, types=GPU_FLOATS, device="cuda", check=check_rnn, host_inputs=(4,),
       validate=validate_rnn)(
    _recurrent("LSTM", 2, True, _lstm_step))
