"""A compiled CPU partition's native programs: one per binding of its input shapes (native/cpu/program.h).

A binding is recorded the second time it is seen (a decoder's ever longer KV cache never repeats one, and
recording costs about a Python run). Recording runs the plan node by node in Python, so the run that records
returns its outputs as usual, and turns each node into
- nothing, when its inputs are all static (constants, or values computed from them and from shapes, which
  the binding fixes): its result becomes a constant of the program;
- a view of its input (Reshape, Squeeze, …): the same slot;
- native steps, by its lowering (kernels/cpu/steps.py).
A node without a native step for the binding leaves the whole partition to Python (the reason is kept and
reported). Slots: ORT's inputs and outputs, constants, and values in an arena laid out by their lifetimes;
a value the partition outputs is computed straight into ORT's output. The program is registered with the C
runner (ep_plugin/cpu_runner.c), which answers later Computes of the binding without calling Python.
"""
from __future__ import annotations

import numpy as np

from ..kernels.cpu import native as native_cpu
from ..kernels.cpu.steps import LOWERINGS, Declined, type_code

MAX_BINDINGS = 16       # ep_plugin/cpu_runner.c RUNNER_BINDINGS
RECORD_AFTER = 2        # sightings of a binding before it is recorded
ALIGN = 64              # bytes: every arena value starts on a cache line
SHAPE_ONLY = frozenset({"Shape", "Size"})  # their outputs depend on the binding alone
RANDOM = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                    "Bernoulli"})  # never folded: a fresh draw per run


class Value:
    """A value while recording: the recording run's array, its slot (None: static, not yet a slot), static:
    known for every run of the binding."""
    __slots__ = ("array", "slot", "static")

    def __init__(self, array, slot, static):
        self.array, self.slot, self.static = array, slot, static


class Recorder:
    """What a lowering emits into: values, steps and the argument blocks they point at."""

    def __init__(self, n_in: int, n_out: int):
        self.n_in, self.n_out = n_in, n_out
        self.steps: list = []              # (op, operand slots, args, label)
        self.kept: list = []               # what the program points at: arrays, argument blocks
        self.fixed: dict[int, np.ndarray] = {}
        self.nbytes: dict[int, int] = {}   # arena slot -> bytes
        self.next_slot = n_in + n_out
        self.label = b""

    def _slot(self) -> int:
        self.next_slot += 1
        return self.next_slot - 1

    def value(self, array) -> Value:
        """A new value in the arena (array: its value in the recording run)."""
        v = Value(array, self._slot(), False)
        self.nbytes[v.slot] = array.nbytes
        return v

    def view(self, source: Value, array) -> Value:
        """The same bytes as source, seen with another shape."""
        return Value(array, source.slot, source.static)

    def keep(self, obj):
        self.kept.append(obj)
        return obj

    def args(self, ctype: str):
        return self.keep(native_cpu.ffi.new(ctype + "*"))

    def operand(self, v: Value | None) -> int:
        if v is None:
            return -1
        if v.slot is None:  # a static value: a constant of the program from now on
            type_code(v.array.dtype)
            v.slot = self._slot()
            self.fixed[v.slot] = self.keep(np.ascontiguousarray(v.array))
        return v.slot

    def step(self, op: int, args, operands: list) -> None:
        self.steps.append((op, [self.operand(v) for v in operands], args, self.label))


def why_not_native(plan) -> str | None:
    """Why no binding of the plan can be recorded, as far as Compile can tell (a node that reads the run's data
    and has no lowering), or None."""
    static = set(plan.constants)
    for node, _, _ in plan.kernels:
        inputs = [n for n in node.inputs if n]
        if node.op_type in SHAPE_ONLY or (node.op_type not in RANDOM and all(n in static for n in inputs)):
            static.update(n for n in node.outputs if n)
        elif (node.domain, node.op_type) not in LOWERINGS:
            return f"node {node.label!r} ({node.key}): {'a random op' if node.op_type in RANDOM else 'no native step'}"
    return None


def record(plan, inputs: list, runner_io: tuple[int, int]):
    """Run the plan on inputs, recording it. Returns (outputs, Program or None, why not)."""
    rec = Recorder(*runner_io)
    values: dict[str, Value] = {}
    for i, (name, array) in enumerate(zip(plan.input_names, inputs)):
        values[name] = Value(array, i, False)
    why_not = None
    for node, kdef, fn in plan.kernels:
        args = [None if not n else _lookup(values, plan, n) for n in node.inputs]
        for a in args:  # in C order, as in their slots: an output that views one has the slot's strides
            if a is not None and not a.array.flags.c_contiguous:
                a.array = np.ascontiguousarray(a.array)
        outs = plan.run_node(node, fn, [a.array if a is not None else None for a in args])
        outs = [np.asarray(o) for o in outs[:len(node.outputs)]]
        if why_not is None:
            try:
                new = _lower(rec, node, args, outs)
            except Declined as exc:
                why_not, new = f"node {node.label!r} ({node.key}): {exc}", None
            except Exception as exc:  # a lowering's bug must not fail the run: it stays in Python, and says why
                why_not, new = f"node {node.label!r} ({node.key}): lowering failed: {type(exc).__name__}: {exc}", None
        if why_not is not None:  # recording stopped: the rest runs for the outputs only
            new = [Value(o, None, True) for o in outs]
        for name, v in zip(node.outputs, new):
            if name:
                values[name] = v
    outputs = [values[n].array for n in plan.output_names]
    if why_not is None:
        try:
            return outputs, Program(rec, [values[n] for n in plan.output_names]), None
        except Declined as exc:
            why_not = str(exc)
    return outputs, None, why_not


def _lookup(values, plan, name) -> Value:
    v = values.get(name)
    if v is None:  # a constant of the graph
        v = values[name] = Value(plan.constants[name], None, True)
    return v


def _lower(rec, node, args, outs) -> list:
    if node.op_type in RANDOM:
        raise Declined("a random op (a fresh draw every run)")
    if node.op_type in SHAPE_ONLY or all(a is None or a.static for a in args):
        return [Value(o, None, True) for o in outs]
    lower = LOWERINGS.get((node.domain, node.op_type))
    if lower is None:
        raise Declined("no native step")
    rec.label = f"node {node.label!r} ({node.key})".encode()
    return lower(rec, node, [a for a in args], outs)


class Program:
    """A recorded program as the C structs native/cpu/program.h declares; keeps alive what they point at."""

    def __init__(self, rec: Recorder, outputs: list[Value]):
        ffi = native_cpu.ffi
        io = rec.n_in
        for v in outputs:
            if v.array.dtype not in (np.dtype(t) for t in (np.float32, np.float64, np.int64, np.int32, np.int8,
                                                           np.uint8, np.bool_)):
                raise Declined(f"an output of {v.array.dtype}")
        # a value the partition outputs is computed in ORT's output (once: a second output of it is a copy)
        retarget: dict[int, int] = {}
        copies = []
        for j, v in enumerate(outputs):
            slot = io + j
            if v.slot is not None and v.slot in rec.nbytes and v.slot not in retarget:
                retarget[v.slot] = slot
            else:
                copies.append((rec.operand(v), slot, v.array.nbytes))
        steps = [(op, [retarget.get(s, s) for s in slots], args, label) for op, slots, args, label in rec.steps]
        for src, dst, nbytes in copies:
            args = rec.args("SeamlessCopyArgs")
            args.nbytes = nbytes
            steps.append((native_cpu.lib.SEAMLESS_OP_COPY, [retarget.get(src, src), dst], args, b"output copy"))
        n_slots = rec.next_slot
        offsets, arena = _arena(steps, {s: n for s, n in rec.nbytes.items() if s not in retarget}, n_slots)
        self.kept = rec.kept
        self.c_steps = ffi.new("SeamlessStep[]", max(len(steps), 1))
        labels = {}
        for i, (op, slots, args, label) in enumerate(steps):
            c = self.c_steps[i]
            c.op, c.args = op, args
            c.slot[0:len(slots)] = slots
            for k in range(len(slots), native_cpu.lib.SEAMLESS_STEP_OPERANDS):
                c.slot[k] = -1
            if label not in labels:
                labels[label] = ffi.new("char[]", label)
            c.label = labels[label]
        self.labels = labels
        self.fixed = ffi.new("void*[]", n_slots)
        for slot, array in rec.fixed.items():
            self.fixed[slot] = ffi.cast("void*", ffi.from_buffer(array)) if array.nbytes else ffi.cast("void*", 1)
        self.offset = ffi.new("int64_t[]", offsets)
        self.c = ffi.new("SeamlessProgram*")
        self.c.n_steps, self.c.n_slots, self.c.n_in, self.c.n_out = len(steps), n_slots, rec.n_in, rec.n_out
        self.c.steps, self.c.fixed, self.c.offset, self.c.arena_bytes = self.c_steps, self.fixed, self.offset, arena
        self.address = int(ffi.cast("uintptr_t", self.c))
        self.n_steps = len(steps)


def _arena(steps, nbytes: dict[int, int], n_slots: int) -> tuple[list[int], int]:
    """Arena offsets (-1 for slots outside it) by lifetimes: a value lives from the step that writes it first
    to the last step that reads it; values whose lifetimes overlap never share bytes."""
    first, last = {}, {}
    for i, (_, slots, _, _) in enumerate(steps):
        for s in slots:
            if s in nbytes:
                first.setdefault(s, i)
                last[s] = i
    offsets = [-1] * n_slots
    placed: list[tuple[int, int, int]] = []  # (offset, end, last step) of values placed so far
    top = 0
    for s in sorted(first, key=lambda s: first[s]):
        size = (nbytes[s] + ALIGN - 1) // ALIGN * ALIGN
        live = sorted((o, e) for o, e, end in placed if end >= first[s])
        offset = 0
        for o, e in live:  # the lowest gap between live values that fits
            if offset + size <= o:
                break
            offset = max(offset, e)
        offsets[s] = offset
        placed.append((offset, offset + size, last[s]))
        top = max(top, offset + size)
    return offsets, top
