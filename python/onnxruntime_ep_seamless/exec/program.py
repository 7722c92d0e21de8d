"""A compiled CPU partition's native programs: one per binding of its input shapes (native/cpu/program.h).

A binding is recorded the second time it is seen (recording costs about a Python run), or at once while a class
of bindings may still yield a family (below). Recording runs the plan node by node in Python, so the run that
records returns its outputs as usual, and turns each node into
- nothing, when its inputs are all static (constants, or values computed from them and from shapes, which
  the binding fixes): its result becomes a constant of the program;
- a view of its input (Reshape, Squeeze, …): the same slot;
- native steps, by its lowering (kernels/cpu/steps.py), or else a Python step (its kernel called back from C).
A node whose output sizes follow the run's data leaves the whole partition to Python (the reason is kept and
reported). Slots: ORT's inputs and outputs, constants, and values in an arena laid out by their lifetimes;
a value the partition outputs is computed straight into ORT's output. The program is registered with the C
runner (ep_plugin/cpu_runner.c), which answers later Computes of the binding without calling Python. A Family
is one program for every binding whose argument fields are affine in one dim (a decoder's growing KV cache),
derived from FAMILY_RECORDINGS recordings; the runner patches it for each new length.
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

from ..kernels.cpu import native as native_cpu
from ..kernels.cpu.steps import LOWERINGS, SHAPE_INPUTS, Declined, plain_memory, python_step

MAX_BINDINGS = 16       # ep_plugin/cpu_runner.c RUNNER_BINDINGS
MAX_OUT_RANK = 8        # output ranks a family describes
RECORD_AFTER = 2        # sightings of a binding before it is recorded
MAX_RECORDINGS = 64     # recordings a partition makes at most (more: its shapes never settle; it stays in Python)
ALIGN = 64              # bytes: every arena value starts on a cache line
SHAPE_ONLY = frozenset({"Shape", "Size"})  # their outputs depend on the binding alone
RANDOM = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                    "Bernoulli"})  # never folded: a fresh draw per run


class Value:
    """A value while recording: the recording run's array, its slot (None: static, not yet a slot), static:
    known for every run of the binding; of_shapes: static and computed from the binding's dims."""
    __slots__ = ("array", "slot", "static", "of_shapes")

    def __init__(self, array, slot, static, of_shapes=False):
        self.array, self.slot, self.static, self.of_shapes = array, slot, static, of_shapes


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
        self.python_steps: list[str] = []  # the op of every node run as a Python step
        self.guards: list = []             # (op, inputs, outputs) of every piecewise node folded over the dims
        self.unguarded: list[str] = []     # ops folded over the dims whose change with them no guard describes

    def _slot(self) -> int:
        self.next_slot += 1
        return self.next_slot - 1

    def value(self, array) -> Value:
        """A new value in the arena (array: its value in the recording run)."""
        v = Value(array, self._slot(), False)
        self.nbytes[v.slot] = array.nbytes
        return v

    def constant(self, array) -> Value:
        """A constant of the program (a lowering's own, e.g. an operand converted to another type)."""
        return Value(array, None, True)

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
            if not plain_memory(v.array.dtype):
                raise Declined(f"a constant of {v.array.dtype}")
            v.slot = self._slot()
            self.fixed[v.slot] = self.keep(np.ascontiguousarray(v.array))
        return v.slot

    def step(self, op: int, args, operands: list) -> None:
        self.steps.append((op, [self.operand(v) for v in operands], args, self.label))


def why_not_native(plan, static: set | None = None) -> str | None:
    """Why no binding of the plan can be recorded, as far as Compile can tell (a node whose output sizes follow the
    run's data: neither its lowering nor a Python step takes one), or None. static: the outer values known per
    binding (for a subgraph's plan)."""
    static = set(plan.constants) | (static or set())
    for idx, (node, _, _) in enumerate(plan.kernels):
        inputs = [n for n in node.inputs if n]
        if node.op_type == "Loop":
            return f"node {node.label!r} ({node.key}): its trip count follows its body's condition at run time"
        if any(n in plan.python_values for n in inputs + node.outputs):
            return f"node {node.label!r} ({node.key}): strings, sequences and optionals are held by Python only"
        if any(i in SHAPE_INPUTS.get(node.op_type, ()) for i, n in enumerate(node.inputs) if n and n not in static):
            return f"node {node.label!r} ({node.key}): its output shapes follow the run's data"
        for sub in plan.subplans.get(idx, {}).values():
            why = why_not_native(sub, static)
            if why:
                return why
        if node.op_type in SHAPE_ONLY or (node.op_type not in RANDOM and all(n in static for n in inputs)):
            static.update(n for n in node.outputs if n)
    return None


VALUE_BYTES = 64  # ep_plugin/cpu_runner.c RUNNER_VALUE_BYTES: the most bytes of an input keyed by its value


def keyed_by_value(plan) -> list[int]:
    """The plan's inputs whose values decide an If's condition (through any nodes) and that are small integers or
    booleans of a declared size (at most VALUE_BYTES): made part of a binding's key, they are known per binding,
    so the branch is recorded in line (silero-vad's If on its sample rate)."""
    producer = {o: node for node, _, _ in plan.kernels for o in node.outputs if o}
    todo = [node.inputs[0] for node, _, _ in plan.kernels if node.op_type == "If" and node.inputs[0]]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(n for n in getattr(producer.get(name), "inputs", ()) if n)
    keyed = []
    for i, (name, shape, dtype) in enumerate(zip(plan.input_names, plan.input_shapes, plan.input_dtypes)):
        if (name in seen and dtype is not None and dtype.kind in "biu" and shape is not None
                and all(isinstance(d, int) for d in shape) and math.prod(shape) * dtype.itemsize <= VALUE_BYTES):
            keyed.append(i)
    return keyed


def record(plan, inputs: list, runner_io: tuple[int, int], by_value=()):
    """Run the plan on inputs, recording it (the inputs at positions by_value: known per binding). Returns
    (outputs, Program or None, why not)."""
    rec = Recorder(*runner_io)
    values: dict[str, Value] = {}
    for i, (name, array) in enumerate(zip(plan.input_names, inputs)):
        values[name] = Value(np.array(array), None, True, True) if i in by_value else Value(array, i, False)
    why_not = _record_plan(rec, plan, values, None)
    outputs = [values[n].array for n in plan.output_names]
    if why_not is None:
        try:
            return outputs, Program(rec, [values[n] for n in plan.output_names]), None
        except Declined as exc:
            why_not = str(exc)
    return outputs, None, why_not


def _record_plan(rec, plan, values: dict, why_not):
    """Runs and records the plan's nodes on `values` (name -> Value, the plan's inputs on entry; its outputs on
    return); returns why recording stopped (None: it did not). A value no later node reads is dropped, as in a
    Python run: the recording run's memory is a Python run's, not every value's at once."""
    outputs = set(plan.output_names)
    for idx, (node, kdef, fn) in enumerate(plan.kernels):
        args = [None if not n else _lookup(values, plan, n) for n in node.inputs]
        for a in args:  # in C order, as in their slots: an output that views one has the slot's strides
            if a is not None and not a.array.flags.c_contiguous:
                a.array = np.ascontiguousarray(a.array)
        if why_not is None and node.op_type == "If" and args[0].static and args[0].array.size == 1:
            # the binding fixes the condition: the branch taken is recorded in line
            branch = plan.subplans[idx]["then_branch" if args[0].array.reshape(-1)[0] else "else_branch"]
            inner = dict(zip(branch.input_names, args[1:]))
            why_not = _record_plan(rec, branch, inner, why_not)
            new = [_lookup(inner, branch, n) for n in branch.output_names]
        else:
            outs = plan.run_node(node, fn, [a.array if a is not None else None for a in args])
            outs = [np.asarray(o) for o in outs[:len(node.outputs)]]
            if why_not is None:
                try:
                    new = _lower(rec, node, kdef, fn, args, outs)
                except Declined as exc:
                    why_not, new = f"node {node.label!r} ({node.key}): {exc}", None
                except Exception as exc:  # a lowering's bug must not fail the run: it stays in Python, and says why
                    why_not, new = f"node {node.label!r} ({node.key}): lowering failed: {type(exc).__name__}: {exc}", None
            if why_not is not None:  # recording stopped: the rest runs for the outputs only
                new = [Value(o, None, True) for o in outs]
        for name, v in zip(node.outputs, new):
            if name:
                values[name] = v
        for name in (*node.inputs, *node.outputs):
            if name and plan.last_use.get(name, idx) <= idx and name not in outputs:
                values.pop(name, None)
    return why_not


def _lookup(values, plan, name) -> Value:
    v = values.get(name)
    if v is None:  # a constant of the graph
        v = values[name] = Value(plan.constants[name], None, True)
    return v


# Folded over the binding's dims, these ops' results are affine in a dim when their inputs are (a family checks the
# results); GUARDED ops are piecewise (a comparison flips at some length): a family holds only where they answer as
# in its recordings (Family's guards); any other op folded over the dims keeps its bindings from forming a family.
AFFINE_SAFE = frozenset({
    "Shape", "Size", "Identity", "Add", "Sub", "Mul", "Neg", "Cast", "CastLike", "Concat", "Gather", "GatherElements",
    "Slice", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Expand", "Tile", "Transpose", "ConstantOfShape", "Range",
    "Not", "And", "Or", "Xor", "Where", "Split", "ReduceProd", "ReduceSum", "Div", "Sqrt", "Reciprocal", "Pow",
    "Trilu", "CumSum", "Softmax", "Exp", "Log", "Sin", "Cos",
})
GUARDED = frozenset({"Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Equal", "Min", "Max", "Clip", "Abs",
                     "Sign", "Relu", "Floor", "Ceil", "Round", "Mod", "Div"})


def _fold(rec, node, args, outs) -> list:
    """A node whose inputs are all static: its results become constants; over the binding's dims, guarded."""
    of_shapes = node.op_type in SHAPE_ONLY or any(a is not None and a.of_shapes for a in args)
    if of_shapes and node.op_type not in SHAPE_ONLY:
        ins = [None if a is None else a.array for a in args]
        if node.op_type in GUARDED and (node.op_type != "Div" or outs[0].dtype.kind in "iu"):
            rec.guards.append((node.op_type, ins, outs))
        elif node.op_type == "Cast" and outs[0].dtype == np.bool_:
            rec.guards.append(("Cast", ins, outs))
        elif node.op_type not in AFFINE_SAFE:
            rec.unguarded.append(node.key)
    return [Value(o, None, True, of_shapes) for o in outs]


def _lower(rec, node, kdef, fn, args, outs) -> list:
    """The node's output values: folded, its native steps, or else a Python step (always for a user's kernel)."""
    if node.op_type in SHAPE_ONLY or (node.op_type not in RANDOM and all(a is None or a.static for a in args)):
        return _fold(rec, node, args, outs)
    rec.label = f"node {node.label!r} ({node.key})".encode()
    if kdef.user:  # the user's function itself: the Python step makes its inputs read-only and checks its results
        user_fn = kdef.fn.user_fn
        return python_step(rec, node, functools.partial(user_fn, **fn.keywords) if isinstance(fn, functools.partial)
                           else user_fn, args, outs, kdef.user)
    lower = LOWERINGS.get((node.domain, node.op_type))
    if lower is not None and node.op_type not in RANDOM:
        emitted = len(rec.steps)
        try:
            return lower(rec, node, list(args), outs)
        except Declined:
            del rec.steps[emitted:]  # a lowering of several steps may decline after its first ones
    return python_step(rec, node, fn, args, outs)


class Program:
    """A recorded program as the C structs native/cpu/program.h declares; keeps alive what they point at."""

    def __init__(self, rec: Recorder, outputs: list[Value]):
        ffi = native_cpu.ffi
        io = rec.n_in
        for v in outputs:
            if not plain_memory(v.array.dtype):
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
        self.arena_bytes = {s: n for s, n in rec.nbytes.items() if s not in retarget}
        self.lives = _lifetimes(steps, self.arena_bytes)
        offsets, arena = _arena(self.lives, self.arena_bytes, n_slots)
        self.kept = rec.kept
        self.steps, self.fixed_arrays = steps, rec.fixed
        self.out_shapes = [v.array.shape for v in outputs]
        self.python_steps = rec.python_steps
        self.guards, self.unguarded = rec.guards, rec.unguarded
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


def _lifetimes(steps, nbytes: dict[int, int]) -> dict[int, tuple[int, int]]:
    """Arena slot -> (first, last) step that touches it, in the order of their first steps: a value lives from the
    step that writes it first to the last step that reads it."""
    lives: dict[int, list[int]] = {}
    for i, (_, slots, _, _) in enumerate(steps):
        for s in slots:
            if s in nbytes:
                lives.setdefault(s, [i, i])[1] = i
    return {s: (a, b) for s, (a, b) in lives.items()}


def _arena(lives, nbytes: dict[int, int], n_slots: int) -> tuple[list[int], int]:
    """Arena offsets (-1 for slots outside it) by lifetimes: values whose lifetimes overlap never share bytes.
    ep_plugin/cpu_runner.c family_instantiate lays out a family's arena the same way."""
    offsets = [-1] * n_slots
    placed: list[tuple[int, int, int]] = []  # (offset, end, last step) of values placed so far
    top = 0
    for s, (first, last) in lives.items():
        size = (nbytes[s] + ALIGN - 1) // ALIGN * ALIGN
        live = sorted((o, e) for o, e, end in placed if end >= first)
        offset = 0
        for o, e in live:  # the lowest gap between live values that fits
            if offset + size <= o:
                break
            offset = max(offset, e)
        offsets[s] = offset
        placed.append((offset, offset + size, last))
        top = max(top, offset + size)
    return offsets, top


# --- families: one program for every length of a growing dim ----------------------------------------------------

MAX_FAMILIES = 4        # ep_plugin/cpu_runner.c RUNNER_FAMILIES
FAMILY_RECORDINGS = 4   # recordings a family is derived from: the first two fit it, the others check it (a field of
                        # degree three or less in t that is no affine function shows in four points)


class NotAffine(Exception):
    """The recordings differ in a way that is no affine function of one dim."""


def _fit(values, ts):
    """(a, b) with values[i] == a + b ts[i] for every recording, integers; else NotAffine."""
    (v1, v2), (t1, t2) = values[:2], ts[:2]
    if (v2 - v1) % (t2 - t1):
        raise NotAffine
    b = (v2 - v1) // (t2 - t1)
    a = v1 - b * t1
    if any(a + b * t != v for t, v in zip(ts[2:], values[2:])):
        raise NotAffine
    return a, b


def _fields(ctype):
    """(offset, width, kind) of every scalar of a struct type: kind "int" (affine allowed) or "exact"."""
    out = []
    for _, field in ctype.fields:
        t, offset = field.type, field.offset
        if t.kind == "array":
            item = t.item
            for i in range(t.length):
                out.append((offset + i * native_cpu.ffi.sizeof(item), native_cpu.ffi.sizeof(item),
                            "int" if item.cname in ("int32_t", "int64_t") else "exact"))
        else:
            out.append((offset, native_cpu.ffi.sizeof(t), "int" if t.cname in ("int32_t", "int64_t") else "exact"))
    return out


class Family:
    """A program for every binding whose key is affine in one dim t, derived from FAMILY_RECORDINGS recordings (the
    newest is the template: its argument blocks copied, to be patched per t by ep_plugin/cpu_runner.c)."""

    def __init__(self, recordings: list[tuple[np.ndarray, Program]]):
        ffi = native_cpu.ffi
        keys = [k for k, _ in recordings]
        programs = [p for _, p in recordings]
        varying = np.flatnonzero(np.any([k != keys[0] for k in keys[1:]], axis=0))
        if not len(varying):
            raise NotAffine
        t_word = int(varying[0])
        ts = [int(k[t_word]) for k in keys]
        if len(set(ts)) < len(ts):
            raise NotAffine
        slope = np.zeros(len(keys[0]), np.int64)
        for w in varying:
            _, slope[w] = _fit([int(k[w]) for k in keys], ts)
        template = programs[-1]  # the newest: its argument blocks are copied
        if any(len(shape) > MAX_OUT_RANK for p in programs for shape in p.out_shapes):
            raise NotAffine
        if (len({len(p.steps) for p in programs}) != 1 or len({p.c.n_slots for p in programs}) != 1
                or any(set(p.fixed_arrays) != set(template.fixed_arrays) or p.lives != template.lives
                       or [len(s) for s in p.out_shapes] != [len(s) for s in template.out_shapes] for p in programs)):
            raise NotAffine
        if any(p.unguarded for p in programs):
            raise NotAffine
        t_max = _guarded_limit([p.guards for p in programs], ts)
        self.kept = [template]
        patches = []  # (address, width, a, b)
        steps = []
        for i, (op, slots, args, label) in enumerate(template.steps):
            if any(p.steps[i][0] != op or p.steps[i][1] != slots for p in programs):
                raise NotAffine
            ctype = ffi.typeof(args).item
            copy = ffi.new(ctype.cname + "*")
            size = ffi.sizeof(ctype)
            ffi.memmove(copy, args, size)
            blocks = [bytes(ffi.buffer(p.steps[i][2], size)) for p in programs]
            base = int(ffi.cast("uintptr_t", copy))
            for offset, width, kind in _fields(ctype):
                values = [int.from_bytes(b[offset:offset + width], "little", signed=True) for b in blocks]
                if len(set(values)) == 1:
                    continue
                if kind != "int":
                    raise NotAffine
                patches.append((base + offset, width, *_fit(values, ts)))
            steps.append((op, slots, copy, label))
            self.kept.append(copy)
        fixed = {}
        for slot, array in template.fixed_arrays.items():
            arrays = [p.fixed_arrays[slot] for p in programs]
            if all(a.shape == array.shape and a.dtype == array.dtype and np.array_equal(a, array) for a in arrays):
                fixed[slot] = array
                continue
            if any(a.shape != array.shape or a.dtype != array.dtype for a in arrays) or array.dtype.kind not in "iu" \
                    or array.itemsize not in (4, 8):
                raise NotAffine
            mine = self._keep(array.copy())
            address = int(ffi.cast("uintptr_t", ffi.from_buffer(mine)))
            for j in range(array.size):
                values = [int(a.reshape(-1)[j]) for a in arrays]
                if len(set(values)) > 1:
                    patches.append((address + j * array.itemsize, array.itemsize, *_fit(values, ts)))
            fixed[slot] = mine
        arena = []
        for slot, (first, last) in template.lives.items():
            arena.append((slot, first, last, *_fit([p.arena_bytes[slot] for p in programs], ts)))
        out_a = np.zeros((len(template.out_shapes), MAX_OUT_RANK), np.int64)
        out_b = np.zeros_like(out_a)
        for j, shape in enumerate(template.out_shapes):
            for d in range(len(shape)):
                out_a[j, d], out_b[j, d] = _fit([p.out_shapes[j][d] for p in programs], ts)
        self._build(template, steps, fixed, patches, arena, keys[0], slope, ts, t_word, out_a, out_b, t_max)

    def _keep(self, obj):
        self.kept.append(obj)
        return obj

    def _build(self, template, steps, fixed, patches, arena, key_base, slope, ts, t_word, out_a, out_b, t_max):
        ffi = native_cpu.ffi
        n_slots = template.c.n_slots
        c_steps = self._keep(ffi.new("SeamlessStep[]", max(len(steps), 1)))
        for i, (op, slots, args, label) in enumerate(steps):
            c_steps[i] = template.c_steps[i]
            c_steps[i].args = args
        c_fixed = self._keep(ffi.new("void*[]", n_slots))
        for slot, array in fixed.items():
            c_fixed[slot] = ffi.cast("void*", ffi.from_buffer(array)) if array.nbytes else ffi.cast("void*", 1)
        offsets = self._keep(ffi.new("int64_t[]", list(template.offset)))
        program = self._keep(ffi.new("SeamlessProgram*"))
        program.n_steps, program.n_slots, program.n_in, program.n_out = template.c.n_steps, n_slots, template.c.n_in, template.c.n_out
        program.steps, program.fixed, program.offset, program.arena_bytes = c_steps, c_fixed, offsets, 0
        c_patches = self._keep(ffi.new("SeamlessPatch[]", max(len(patches), 1)))
        for i, (address, width, a, b) in enumerate(patches):
            c_patches[i].field, c_patches[i].width, c_patches[i].a, c_patches[i].b = (
                ffi.cast("void*", address), width, a, b)
        c_arena = self._keep(ffi.new("SeamlessArenaValue[]", max(len(arena), 1)))
        for i, (slot, first, last, a, b) in enumerate(arena):
            c_arena[i].slot, c_arena[i].first, c_arena[i].last, c_arena[i].a, c_arena[i].b = slot, first, last, a, b
        f = self._keep(ffi.new("SeamlessFamily*"))
        f.program = program
        f.key_words, f.t_word, f.t0, f.t_min, f.t_max = len(key_base), t_word, ts[0], min(ts), t_max
        f.key_base = self._keep(ffi.new("int64_t[]", key_base.tolist()))
        f.key_slope = self._keep(ffi.new("int64_t[]", slope.tolist()))
        f.n_patches, f.patches, f.n_arena, f.arena = len(patches), c_patches, len(arena), c_arena
        f.out_ranks = self._keep(ffi.new("int32_t[]", [len(s) for s in template.out_shapes] or [0]))
        f.out_a = self._keep(ffi.new("int64_t[]", out_a.reshape(-1).tolist() or [0]))
        f.out_b = self._keep(ffi.new("int64_t[]", out_b.reshape(-1).tolist() or [0]))
        f.max_rank = MAX_OUT_RANK
        self.c = f
        self.address = int(ffi.cast("uintptr_t", f))
        self.t_min, self.t_max, self.n_patches = min(ts), t_max, len(patches)


# --- guards: where the piecewise nodes folded over the dims answer as in the recordings -----------------------

T_UNBOUNDED = 2**62     # a family's t_max when no guard bounds it
GUARD_ELEMENTS = 4096   # elements a guard's inputs hold at most (more: no family)


def _guarded_limit(guards_per_program: list, ts: list[int]) -> int:
    """The largest t up to which every guard (a piecewise node folded over the dims: a comparison, Min/Max, a
    rounding, an integer division) answers as in all recordings, its inputs affine in t; NotAffine where that
    cannot be told. Its answer changes only where an affine quantity crosses a threshold, so it is checked at the
    integers next to every crossing."""
    if len({len(g) for g in guards_per_program}) != 1:
        raise NotAffine
    limit = T_UNBOUNDED
    for records in zip(*guards_per_program):
        if len({op for op, _, _ in records}) != 1:
            raise NotAffine
        op = records[0][0]
        ins = [_affine([r[1][i] for r in records], ts) for i in range(len(records[0][1]))]
        varies = any(not np.array_equal(o, records[0][2][0]) for _, _, (o, *_) in records)
        key, crossings = _guard(op, ins, varies, ts)
        ref = key(ts[0])
        if any(key(t) != ref for t in ts[1:]):
            raise NotAffine
        for a, b in crossings:
            for root in {-Fraction(x) / Fraction(y) for x, y in zip(a, b) if y != 0}:
                for c in range(math.floor(root) - 1, math.ceil(root) + 2):
                    if max(ts) < c < limit and key(c) != ref:
                        limit = c - 1
    return limit


def _affine(arrays: list, ts: list[int]):
    """(a, b), object arrays of Fractions with arrays[k] == a + b ts[k] elementwise (None stays None)."""
    if arrays[0] is None:
        return None
    shapes = {np.shape(x) for x in arrays}
    if len(shapes) != 1 or np.size(arrays[0]) > GUARD_ELEMENTS or np.asarray(arrays[0]).dtype.kind not in "biuf":
        raise NotAffine
    flat = [[Fraction(v) for v in np.asarray(x, np.float64 if np.asarray(x).dtype.kind == "f" else object).reshape(-1)]
            for x in arrays]
    if any(not math.isfinite(v) for v in np.asarray(arrays[0], np.float64).reshape(-1)):
        raise NotAffine
    (v1, v2), (t1, t2) = flat[:2], ts[:2]
    b = [(y - x) / (t2 - t1) for x, y in zip(v1, v2)]
    a = [x - s * t1 for x, s in zip(v1, b)]
    if any(ai + bi * t != v for vals, t in zip(flat[2:], ts[2:]) for ai, bi, v in zip(a, b, vals)):
        raise NotAffine
    shape = shapes.pop()
    return np.array(a, object).reshape(shape), np.array(b, object).reshape(shape)


def _flat(values) -> list:
    return list(np.asarray(values, object).reshape(-1))


def _answers(fn, values) -> tuple:
    return tuple(fn(v) for v in _flat(values))


# what a guard's answer is, from d = x - y (comparisons; Min/Max: which input is taken) or from x alone
COMPARED = {"Greater": lambda d: d > 0, "Less": lambda d: d < 0, "GreaterOrEqual": lambda d: d >= 0,
            "LessOrEqual": lambda d: d <= 0, "Equal": lambda d: d == 0, "Min": lambda d: d < 0, "Max": lambda d: d > 0}
SIGNED = {"Abs": lambda x: x < 0, "Relu": lambda x: x > 0, "Sign": lambda x: (x > 0) - (x < 0),
          "Cast": lambda x: x != 0}


def _guard(op: str, ins: list, varies: bool, ts: list[int]):
    """(key(t): the guard's answer at t, crossings: (a, b) lists whose roots -a/b are where it may change)."""
    def at(t):
        return [None if v is None else v[0] + v[1] * t for v in ins]

    def diff(u, v):  # u - v, broadcast, as flat (a, b) lists
        a, c = np.broadcast_arrays(u[0], v[0])
        b, d = np.broadcast_arrays(u[1], v[1])
        return _flat(a - c), _flat(b - d)

    if op in COMPARED:  # the answer as a function of d = x - y
        if len(ins) != 2:  # Min/Max of one or of more than two inputs
            raise NotAffine
        return (lambda t: _answers(COMPARED[op], np.subtract(*np.broadcast_arrays(*at(t))))), [diff(ins[0], ins[1])]
    if op == "Clip":
        bounds = [v for v in ins[1:] if v is not None]
        return (lambda t: tuple(_answers(lambda d: (d > 0) - (d < 0), np.subtract(*np.broadcast_arrays(
            at(t)[0], lim[0] + lim[1] * t))) for lim in bounds)), [diff(ins[0], v) for v in bounds]
    if op in SIGNED:  # the answer as a function of x
        return (lambda t: _answers(SIGNED[op], at(t)[0])), [(_flat(ins[0][0]), _flat(ins[0][1]))]
    # Floor, Ceil, Round, integer Div and Mod: the quotient q = x / y (y = 1 for the roundings), y fixed
    x, y = ins[0], (ins[1] if len(ins) > 1 else (np.array(Fraction(1), object), np.array(Fraction(0), object)))
    if any(d != 0 for d in _flat(y[1])) or any(d == 0 for d in _flat(y[0])):
        raise NotAffine  # a divisor that changes with the dims (or zero)
    qa, qb = (_flat(v) for v in np.broadcast_arrays(np.divide(x[0], y[0]), np.divide(x[1], y[0])))
    if varies:  # an integer quotient that changes with t: exact while its slope is whole and x keeps its sign
        if op != "Div" or any(Fraction(s).denominator != 1 for s in qb):
            raise NotAffine
        return (lambda t: _answers(SIGNED["Sign"], at(t)[0])), [(_flat(x[0]), _flat(x[1]))]
    def key(t):  # Round: the nearest integer (ties to even); the others: floor and ceil (trunc: either)
        q = [a + b * t for a, b in zip(qa, qb)]
        return tuple(round(v) for v in q) if op == "Round" else tuple((math.floor(v), math.ceil(v)) for v in q)
    crossings = []
    for a, b in zip(qa, qb):  # 2q(t) = m (integers and half-integers of q) next to its recorded values
        values = [2 * (a + b * t) for t in ts]
        for m in range(math.floor(min(values)) - 1, math.ceil(max(values)) + 2):
            crossings.append(([2 * a - m], [2 * b]))
    return key, crossings
