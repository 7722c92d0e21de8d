"""Control flow: If, Loop, Scan. A subgraph runs as its own plan (plan/planner.py binds it in place of the graph
attribute), fed the node's implicit inputs (the outer values it reads), which trail the node's own inputs."""
from __future__ import annotations

import numpy as np

from ..checks import InvalidArgument
from ..registry import kernel, lookup


def subgraphs_supported(node, graph, device: str = "cpu") -> str | None:
    """Why the node's subgraphs cannot run on the EP of `device` (a node of theirs declined, an output it cannot
    hold), or None: the node is claimed whole, its subgraphs with it."""
    subgraphs = node.subgraphs
    if not subgraphs:
        return "its subgraphs were not given"
    for attr, sub in subgraphs.items():
        for inner in sub.nodes:
            kdef, reason = lookup(inner, sub, device)
            if kdef is None:
                return f"{attr}: node {inner.label!r} ({inner.key}) is declined: {reason}"
        for name in sub.outputs:
            if sub.value(name).element_dtype is None:
                return f"{attr}: output {name!r} has element type {sub.value(name).type_name}"
    return None


def check_if(node, graph, device: str = "cpu") -> str | None:
    branches = [node.attrs.get("then_branch"), node.attrs.get("else_branch")]
    if any(len(b.outputs) != len(node.outputs) for b in branches if b is not None):
        return "a branch's outputs do not match the node's"
    return subgraphs_supported(node, graph, device)


def check_condition(cond) -> None:
    if cond.size != 1:
        raise ValueError(f"If nodes condition input must have exactly one element (it has {cond.size})")


@kernel("If", since=1, check=check_if, takes=("strings", "sequences", "optionals"))
def if_(cond, *outer, then_branch, else_branch):
    check_condition(cond)
    branch = then_branch if bool(np.asarray(cond).reshape(-1)[0]) else else_branch
    return branch.run(*outer)


def check_loop(node, graph, device: str = "cpu") -> str | None:
    body = node.attrs.get("body")
    n_carried = len(node.inputs) - node.implicit - 2
    if body is None or n_carried < 0 or len(body.inputs) != n_carried + 2 or len(body.outputs) < n_carried + 1:
        return "its body's inputs and outputs do not match the node's"
    for name in body.inputs[:2]:
        if body.value(name).shape is None:
            return f"body input {name!r} has an unknown rank (stock needs it)"
    return subgraphs_supported(node, graph, device)


def check_scalar(value, name: str, op: str) -> None:
    if value.size != 1:
        raise ValueError(f"'{op}' input '{name}' should be a scalar tensor. Got shape of {list(value.shape)}")


def _scalar(value, name: str, op: str, dtype):
    check_scalar(value, name, op)
    return dtype(np.asarray(value).reshape(-1)[0])


def _carried(value):
    """A loop-carried value as the next iteration reads it: a tensor as an array; a sequence (list) or an empty
    optional (None) as it is."""
    return value if value is None or isinstance(value, list) else np.asarray(value)


@kernel("Loop", since=1, check=check_loop, takes=("strings", "sequences", "optionals"))
def loop(m, cond, *rest, body, _num_outputs, _num_implicit):
    """Iterations while i < M and cond (both optional); the body maps (i, cond, carried…) to (cond, carried…,
    scan outputs…), the scan outputs stacked along a new first axis."""
    carried, outer = list(rest[:len(rest) - _num_implicit]), rest[len(rest) - _num_implicit:]
    trips = _scalar(m, "M", "Loop", int) if m is not None else np.iinfo(np.int64).max
    go = _scalar(cond, "cond", "Loop", bool) if cond is not None else True
    ranks = [len(body.input_shapes[0]), len(body.input_shapes[1])]
    n_scan = _num_outputs - len(carried)
    scans: list[list] = [[] for _ in range(n_scan)]
    i = 0
    while i < trips and go:
        out = body.run(np.full((1,) * ranks[0], i, np.int64), np.full((1,) * ranks[1], go, np.bool_), *carried, *outer)
        go = bool(np.asarray(out[0]).reshape(-1)[0])
        carried = [_carried(v) for v in out[1:1 + len(carried)]]
        for k, v in enumerate(out[1 + len(carried):]):
            if scans[k] and np.shape(v) != np.shape(scans[k][0]):
                raise ValueError(f"Inconsistent shape in loop output for output. Expected:{list(np.shape(scans[k][0]))}"
                                 f" Got:{list(np.shape(v))}")
            scans[k].append(np.asarray(v))
        i += 1
    stacked = [np.stack(scans[k]) if scans[k] else _no_iterations(body, 1 + len(carried) + k) for k in range(n_scan)]
    return (*carried, *stacked)


def _no_iterations(body, output: int) -> np.ndarray:
    """A scan output after no iteration, as stock makes it: [0] and the body output's declared dims (symbolic: 0)."""
    shape = body.output_shapes[output]
    dims = [d if isinstance(d, int) else 0 for d in shape] if shape is not None else []
    return np.zeros([0] + dims, body.output_dtypes[output])


def check_scan(node, graph, device: str = "cpu") -> str | None:
    body = node.attrs.get("body")
    m = node.attrs.get("num_scan_inputs", 0)
    n_states = len(node.inputs) - node.implicit - m
    if body is None or m < 1 or n_states < 0 or len(body.inputs) != n_states + m \
            or len(body.outputs) != len(node.outputs):
        return "its body's inputs and outputs do not match the node's"
    for attr, count in (("scan_input_axes", m), ("scan_input_directions", m),
                        ("scan_output_axes", len(node.outputs) - n_states),
                        ("scan_output_directions", len(node.outputs) - n_states)):
        if attr in node.attrs and len(node.attrs[attr]) != count:
            return f"{attr} has {len(node.attrs[attr])} entries, not {count}"
    return subgraphs_supported(node, graph, device)


def _scan_steps(body, states: list, xs, axes, directions, length: int, outer) -> tuple[list, list[list]]:
    """The body run over positions 0..length-1 of the scan inputs (a direction 1 input read from its end): the final
    states, and each scan output's slices in iteration order."""
    slices: list[list] = [[] for _ in range(len(body.output_names) - len(states))]
    n_states = len(states)
    for t in range(length):
        parts = [np.take(x, length - 1 - t if d else t, axis=a) for x, a, d in zip(xs, axes, directions)]
        out = body.run(*states, *parts, *outer)
        states = [np.asarray(v) for v in out[:n_states]]
        for k, v in enumerate(out[n_states:]):
            if slices[k] and np.shape(v) != np.shape(slices[k][0]):
                raise ValueError(f"Inconsistent shape in scan output {k}: {list(np.shape(slices[k][0]))} then "
                                 f"{list(np.shape(v))}")
            slices[k].append(np.asarray(v))
    return states, slices


def _check_scan8(node, graph) -> str | None:
    body, m = node.attrs.get("body"), node.attrs.get("num_scan_inputs", 0)
    n_states = len(node.inputs) - node.implicit - 1 - m
    if body is None or m < 1 or n_states < 0 or len(body.inputs) != n_states + m \
            or len(body.outputs) != len(node.outputs):
        return "its body's inputs and outputs do not match the node's"
    return subgraphs_supported(node, graph)


@kernel("Scan", since=8, until=8, check=_check_scan8, takes=("strings",))
def scan8(sequence_lens, *inputs, body, num_scan_inputs, directions=None, _num_implicit):
    """Opset 8: a batch axis first on every state and scan input, the scan along axis 1, each batch entry as long
    as its sequence_lens (optional: the whole axis); output positions beyond it are zeros."""
    explicit, outer = inputs[:len(inputs) - _num_implicit], inputs[len(inputs) - _num_implicit:]
    n_states = len(explicit) - num_scan_inputs
    states, xs = explicit[:n_states], explicit[n_states:]
    batch, length = xs[0].shape[0], xs[0].shape[1]
    for i, x in enumerate(list(states) + list(xs)):
        if x.ndim < 1 or x.shape[0] != batch or (i >= n_states and (x.ndim < 2 or x.shape[1] != length)):
            raise InvalidArgument(f"Scan input {i} has shape {list(x.shape)}: batch {batch}, sequence length {length}")
    lens = np.full(batch, length, np.int64) if sequence_lens is None else np.asarray(sequence_lens, np.int64)
    if lens.shape != (batch,) or np.any((lens < 1) | (lens > length)):
        raise InvalidArgument(f"Invalid entries in sequence_lens. Max sequence length was {length}")
    dirs = directions or [0] * num_scan_inputs
    final, outs = [], None
    for b in range(batch):
        state, slices = _scan_steps(body, [s[b] for s in states], [x[b] for x in xs], [0] * num_scan_inputs, dirs,
                                    int(lens[b]), outer)
        final.append(state)
        if outs is None:
            outs = [np.zeros((batch, length) + np.shape(sl[0]), np.asarray(sl[0]).dtype) if sl else None
                    for sl in slices]
        for k, sl in enumerate(slices):
            if sl:
                if outs[k] is None or outs[k].shape[2:] != np.shape(sl[0]):
                    raise ValueError(f"Inconsistent shape in scan output {k} across the batch")
                outs[k][b, :len(sl)] = sl
    outs = [o if o is not None else np.zeros((batch, length), body.output_dtypes[n_states + k])
            for k, o in enumerate(outs or [None] * (len(body.output_names) - n_states))]
    return (*[np.stack([f[i] for f in final]) if batch else states[i] for i in range(n_states)], *outs)


def scan_axes(shapes: list, in_axes: list) -> tuple[list, int]:
    """The scan inputs' axes (from scan_input_axes, checked against their ranks) and their common length."""
    axes = []
    for shape, axis in zip(shapes, in_axes):
        if not -len(shape) <= axis < len(shape):
            raise InvalidArgument(f"Invalid value in scan_input_axes for input. Input rank of {len(shape)} "
                                  f"is not valid for axis {axis}")
        axes.append(axis % len(shape))
    length = shapes[0][axes[0]]
    for i, (shape, axis) in enumerate(zip(shapes, axes)):
        if shape[axis] != length:
            raise ValueError(f"Scan inputs have inconsistent sequence lengths. Previous value was {length} "
                             f"but input {i} dimension {axis} has length of {shape[axis]}")
    return axes, length


def scan_output_axis(k: int, rank: int, axis: int) -> int:
    """Scan output k's axis (scan_output_axes) in the stacked output of rank `rank`."""
    if not -rank <= axis < rank:
        raise InvalidArgument(f"Invalid value in scan_output_axes for output {k}. Output rank of {rank} "
                              f"is not valid for axis {axis}")
    return axis % rank


@kernel("Scan", since=9, check=check_scan, takes=("strings",))
def scan(*inputs, body, num_scan_inputs, scan_input_axes=None, scan_input_directions=None, scan_output_axes=None,
         scan_output_directions=None, _num_implicit):
    """The body maps (states…, one slice of each scan input…) to (states…, one slice of each scan output…) for
    every position along the scan inputs' axes; the output slices stacked along their axes."""
    explicit, outer = inputs[:len(inputs) - _num_implicit], inputs[len(inputs) - _num_implicit:]
    n_states = len(explicit) - num_scan_inputs
    states, xs = list(explicit[:n_states]), explicit[n_states:]
    in_dirs = scan_input_directions or [0] * num_scan_inputs
    axes, length = scan_axes([x.shape for x in xs], scan_input_axes or [0] * num_scan_inputs)
    n_out = len(body.output_names) - n_states
    states, slices = _scan_steps(body, states, xs, axes, in_dirs, length, outer)
    out_axes = scan_output_axes or [0] * n_out
    out_dirs = scan_output_directions or [0] * n_out
    stacked = []
    for k in range(n_out):
        if slices[k]:
            axis = scan_output_axis(k, slices[k][0].ndim + 1, out_axes[k])
            stacked.append(np.stack(slices[k][::-1] if out_dirs[k] else slices[k], axis=axis))
        else:
            stacked.append(_no_iterations(body, n_states + k))
    return (*states, *stacked)
