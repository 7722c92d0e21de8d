"""What a compiled CUDA partition can capture as CUDA graphs, decided at Compile: where each node
runs and its seams (`place`), the symbols that grow from one decode step to the next
(`growing_symbols`), and whether the partition may run with its growing axes padded to a
capacity (`padding`), so that one captured graph serves every KV length up to that capacity.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

import numpy as np

from ..graph.ir import Node
from ..kernels.registry import FUSED_DOMAIN, KernelDef, lookup
from ..plan.fusion import fuse


MIN_CAPACITY = 64   # padded KV capacities are powers of two from here: a generation recaptures a few times
MIN_PROMPT = 16     # a first prompt's buckets: powers of two from here (cuda_replay.c seamless_replay_key)
# up to here: a longer first prompt runs at its own length (its GPU time hides the launches a replay saves, while a
# bucket could double it: 2049 tokens padded to 4096), and no segment holds a longer prompt's logits
MAX_PROMPT = 2048

# CUDA kernels whose results are host values (shapes, sizes, constants; and those of capture class
# "host": the CPU kernel run on the host, as for NonZero, Unique, NonMaxSuppression)
HOST_RESULTS = frozenset({"Shape", "Size", "Constant", "Range", "EyeLike"})


@dataclass
class Step:
    node: Node
    kdef: KernelDef
    on_gpu: bool
    seam: str    # why the host must wait for the GPU before this step; "" when it need not
    grows: bool  # a shape of the step depends on a growing symbol (the KV length)
    readers: tuple = ()  # the op types of the steps that read its first output
    branches: dict = None  # an If's, a Loop's, a Scan's: each subgraph (graph attribute) -> its placed steps
    conditional: bool = False  # an If or Loop decided on the GPU: conditional graph nodes when captured


KV_NAME = re.compile(r"past|present", re.IGNORECASE)
MASK_NAME = re.compile(r"attention_mask", re.IGNORECASE)
SYMBOL = re.compile(r"[A-Za-z_]\w*")


def growing_symbols(graph) -> set[str]:
    """The symbols that grow from one decode step to the next: a plain symbol on the sequence axis
    (2) of a KV cache (a rank-4 value named past*/present*). A dim grows when its expression uses
    one (an attention mask's total length, `past + seq`); batch, query length and heads stay pinned.
    A window-sized cache (GroupQueryAttention's sliding_window_cache=1) keeps its capacity: it does not grow."""
    windows = {name for node in graph.nodes if _window_cache(node) for name in node.inputs[3:5] + node.outputs[1:3]}
    return {v.shape[2] for name, v in graph.values.items()
            if KV_NAME.search(name) and name not in windows and v.shape is not None and len(v.shape) == 4
            and isinstance(v.shape[2], str) and SYMBOL.fullmatch(v.shape[2])}


def _window_cache(node: Node) -> bool:
    return node.op_type == "GroupQueryAttention" and bool(node.attrs.get("sliding_window_cache", 0))


def _grows(dims, growing) -> bool:
    return any(isinstance(d, str) and not growing.isdisjoint(SYMBOL.findall(d)) for d in dims or ())


def place(graph, input_names, output_names, fusion: bool = True) -> list[Step]:
    """Where each node of a fused graph runs (after plan/fusion.py's CUDA fusions), and its seams.
    Values known on the host are the constants and what host kernels compute; integer work runs
    there when all its inputs are, else with its CUDA kernel where there is one. A seam is a step
    that needs a GPU value on the host: a host kernel reading one, or a CUDA kernel's host input (a
    shape, axes, k…) computed on the GPU. The subgraphs of an If, a Loop, a Scan are placed the same way
    (Step.branches): a seam in one is its node's. fusion=False: every node as it is (the `fusion` option)."""
    return _place(graph, input_names, output_names, fusion, set())[0]


def _place(graph, input_names, output_names, fusion: bool, host_values: set) -> tuple[list[Step], set]:
    """place()'s steps, and the values known on the host; host_values: the outer values a branch reads that are."""
    nodes = fuse(graph, output_names, "cuda", fusion)  # may add constants (a fused node's joined weights)
    on_host = {name for name, v in graph.values.items() if v.const is not None and name not in input_names}
    on_host |= host_values
    growing = growing_symbols(graph)
    steps = []
    for node in nodes:
        if node.subgraphs:  # If, Loop
            steps.append(_place_control(node, graph, on_host, fusion))
            continue
        kdef, reason = lookup(node, graph, "cuda")
        if kdef is None:
            raise ValueError(f"node {node.label!r} ({node.key}) cannot be planned: {reason}")
        if kdef.device != "cuda" and not all(n in on_host for n in node.inputs if n):  # its CUDA kernel, if any
            gpu, why_not = lookup(node, graph, "cuda", host_rule=False)
            kdef, reason = (gpu, "") if gpu is not None else (kdef, reason or why_not)
        on_gpu = kdef.device == "cuda"
        wanted = node.inputs if not on_gpu else [node.inputs[i] for i in kdef.host_inputs if i < len(node.inputs)]
        read = [n for n in wanted if n and n not in on_host]
        on_host_kernel = on_gpu and kdef.capture == "host"
        why = ((f"no CUDA kernel: {reason}" if reason else "no CUDA kernel takes these types") if not on_gpu
               else "the op runs on the host: its CPU kernel" if on_host_kernel else "a shape-like input computed on the GPU")
        seam = f"reads {', '.join(read)} on the host ({why})" if read else ""
        if not seam and on_host_kernel and kdef.user:  # a user's kernel of capture class "host": its own reads
            seam = f"the user kernel {kdef.user} reads GPU values on the host (capture='host')"
        if not on_gpu or (on_host_kernel and not kdef.user) or node.op_type in HOST_RESULTS:  # (a user's: GPU)
            on_host.update(n for n in node.outputs if n)
        grows = bool(growing) and any(_grows(graph.value(n).shape, growing) for n in node.inputs + node.outputs if n)
        steps.append(Step(node, kdef, on_gpu, seam, grows))
    readers: dict[str, list[str]] = {}
    for step in steps:
        for name in dict.fromkeys(n for n in step.node.inputs if n):
            readers.setdefault(name, []).append(step.node.op_type)
    for step in steps:
        step.readers = tuple(readers.get(step.node.outputs[0], ())) if step.node.outputs else ()
    return steps, on_host


def _place_control(node: Node, graph, on_host: set, fusion: bool) -> Step:
    """An If's, a Loop's or a Scan's step: its subgraphs placed on the values they read (an outer value known on the
    host where it is outside; a body's own inputs, the iteration's counter, condition, carried values, slices, on the
    GPU). An If's condition known on the host picks the branch there (its outputs are on the host when both
    branches' are); computed on the GPU, it is read back in an eager run and becomes conditional graph nodes in a
    captured one. A Loop is a conditional WHILE node when captured; with scan outputs (as many as its iterations) it
    is in line where its trip count is fixed, else a seam. A Scan's iterations follow the shapes: in line."""
    kdef, reason = lookup(node, graph, "cuda")
    if kdef is None:
        raise ValueError(f"node {node.label!r} ({node.key}) cannot be planned: {reason}")
    outer = node.inputs[len(node.inputs) - node.implicit:]
    branches, seams, host_outputs = {}, [], True
    for attr, sub in node.subgraphs.items():
        steps, known = _place(sub, list(sub.inputs) + outer, sub.outputs, fusion, {n for n in outer if n in on_host})
        branches[attr] = steps
        seams += [f"its {attr}'s node {s.node.label!r} ({s.node.key}) {s.seam}" for s in steps if s.seam]
        host_outputs = host_outputs and all(n in known for n in sub.outputs)
    if node.op_type == "Scan":  # as many iterations as the shapes say: in line, captured or not
        conditional = False
    elif node.op_type == "Loop":
        scans = len(node.outputs) > len(node.inputs) - node.implicit - 2  # their length: the trip count
        conditional = not scans
        if scans and not fixed_trip_count(node, on_host):
            seams.append("its scan outputs stack one slice an iteration: their length is known only after the loop")
    else:  # If
        conditional = node.inputs[0] not in on_host
        if not conditional and host_outputs:
            on_host.update(n for n in node.outputs if n)
    if node.op_type == "If" and conditional:  # a conditional node's bodies leave one shape: else read it back
        then, other = node.subgraphs["then_branch"], node.subgraphs["else_branch"]
        for k, (a, b) in enumerate(zip(*([sub.value(n).shape for n in sub.outputs] for sub in (then, other)))):
            if a is not None and b is not None and (len(a) != len(b) or any(
                    isinstance(x, int) and isinstance(y, int) and x != y for x, y in zip(a, b))):
                seams.append(f"its branches give output {k} different shapes ({list(a)} and {list(b)}): the "
                             "condition is read back, since a conditional graph node leaves one shape")
                break
    return Step(node, kdef, True, "; ".join(seams), False, branches=branches, conditional=conditional)


def fixed_trip_count(node: Node, on_host) -> bool:
    """A Loop that runs M times, M known on the host: its condition, absent or known there, passes through its body
    unchanged (a for loop as torch exports it)."""
    m, cond = node.inputs[0], node.inputs[1]
    return bool(m) and m in on_host and (not cond or cond in on_host) and condition_passes(node.subgraphs["body"])


def condition_passes(body) -> bool:
    """Whether a Loop body's condition output is its condition input, as it is or through an Identity."""
    if len(body.inputs) < 2 or not body.outputs:
        return False
    out, cond = body.outputs[0], body.inputs[1]
    return out == cond or any(n.op_type == "Identity" and n.outputs[0] == out and n.inputs[0] == cond
                              for n in body.nodes)


def segments(steps: list[Step]) -> int:
    """Segments of GPU work a partition splits into: each seam starts another."""
    return sum(1 for s in steps if s.seam) + 1 if any(s.on_gpu for s in steps) else 0


def capture_summary(steps: list[Step], name: str, plan: "Padding | None" = None, padding_problem: str = "",
                    prompt: "Padding | None" = None, prompt_problem: str = "") -> str:
    """One line per partition (segments of GPU work between seams), then each seam. plan and
    padding_problem: what choose_padding said; prompt and prompt_problem: what prompt_padding said."""
    seams = [s for s in steps if s.seam]
    gpu = sum(s.on_gpu for s in steps)
    lines = [f"{name}: {len(steps)} nodes ({gpu} on the GPU), {segments(steps)} segment(s), {len(seams)} seam(s)"]
    growing = [s for s in steps if s.grows and s.on_gpu and s.node.op_type not in HOST_RESULTS]
    if growing:  # what a capture across decode steps would have to launch for a maximum length
        indexed = sum(s.kdef.capture == "device-indexed" for s in growing)
        lines.append(f"  {len(growing)} GPU node(s) with shapes that grow with the KV length "
                     f"({', '.join(sorted({s.node.op_type for s in growing}))}), {indexed} of them device-indexed")
        modes = "  capture=auto (and capture=off's launch programs): "
        if plan is None:
            lines.append(f"{modes}a graph per KV length, not padded: {padding_problem}")
        elif plan.left:
            lines.append(f"{modes}one graph per capacity serves every KV length up to it (growing axes padded at their "
                         "start; each binding's padded run checked against the unpadded one before capture; not padded "
                         f"at their end: {padding_problem})")
        else:
            lines.append(f"{modes}one graph per capacity serves every KV length up to it (growing axes padded)")
        if prompt is not None:
            lines.append(f"{modes}a first prompt (every past KV empty or a shared buffer) is padded at its end to a "
                         f"power of two from {MIN_PROMPT} to {MAX_PROMPT}: one graph per bucket serves every prompt "
                         "length up to it (a longer first prompt runs at its own length)")
        else:
            lines.append(f"{modes}a graph per first-prompt length, not padded: {prompt_problem}")
    lines += [_control_line(s) for s in steps if s.branches is not None]
    lines += [f"  seam at {s.node.label!r} ({s.node.key}): {s.seam}" for s in seams]
    return "\n".join(lines)


def _control_line(s: Step) -> str:
    """capture_summary's line for an If, a Loop or a Scan: its subgraphs' sizes and how it runs."""
    sizes = ", ".join(f"{attr} {len(b)} node(s)" for attr, b in sorted(s.branches.items(), reverse=True))
    if s.node.op_type == "Loop" and s.seam:
        how = "runs eagerly"
    elif s.node.op_type == "Loop" and s.conditional:
        how = "a conditional WHILE node when captured, its condition read back each iteration in an eager run"
    elif s.node.op_type in ("Scan", "Loop"):
        how = "its iterations follow the shapes (or a trip count known on the host): in line when captured"
    elif s.conditional:
        how = ("its condition is computed on the GPU: a conditional graph node per branch when captured, read back "
               "in an eager run")
    else:
        how = "its condition is known on the host, which picks the branch"
    return f"  {s.node.op_type} {s.node.label!r} ({sizes}): {how}"


# --- padding: one graph for every KV length up to a capacity ---------------------------------------

@dataclass
class Padding:
    """A partition whose growing axes may be padded with zeros to a capacity. inputs: each growing
    input's padded axis; outputs: each growing output's padded axis and the (input, axis) pairs
    whose largest length is its length in an unpadded run. left: padded at the start of the axes,
    every growing input by the same amount, and an output's unpadded part is its end (left_padding)."""
    inputs: dict
    outputs: dict
    left: bool = False
    past: dict = None  # a prompt's padding (prompt_padding): each past input's axis, in the runs it serves empty
    #                    or a buffer of at least the bucket that the present shares (cuda_replay.c prompt_bucket)
    # a prompt's recurrent nodes (CausalConvWithState, LinearAttention: their indices; names need not be unique),
    # whose state outputs must stop at the prompt's real length, which a padded run gives them from
    # GroupQueryAttention's seqlens_k (`seqlens`)
    stateful: tuple = ()
    seqlens: str = ""
    first: tuple = ()  # the indices of the nodes computing seqlens, which run before the others in a padded prompt


def choose_padding(graph, steps: list[Step], input_names, output_names) -> tuple[Padding | None, str]:
    """Padding at the end of the growing axes where padding's rules prove it exact, else at their
    start where left_padding allows it (checked at run time); the plan, and why not at the end."""
    plan, why = padding(graph, steps, input_names, output_names)
    if plan is None and growing_symbols(graph):
        plan = left_padding(graph, input_names, output_names)
        chosen = _length_chosen_branches(steps)
        if plan is not None and chosen:  # a padded run would take the branch of the padded length
            plan = None
            why += (f"; nor at their start: {chosen[0].node.op_type} {chosen[0].node.label!r} decides on the host by a "
                    "length that grows (a branch, a trip count)")
    return plan, why


def _length_chosen_branches(steps: list[Step]) -> list[Step]:
    """The Ifs whose condition, and the Loops whose trip count, the host computes from a growing length (LongRoPE's
    factors for the total length)."""
    derived, found = set(), []
    for s in steps:
        reads = {n for n in s.node.inputs if n}
        if s.branches is not None:
            if (s.node.op_type == "Loop" or not s.conditional) and s.node.inputs[0] in derived:
                found.append(s)
        elif (s.grows and s.node.op_type in ("Shape", "Size")) or (
                (not s.on_gpu or s.node.op_type in HOST_RESULTS) and reads & derived):
            derived.update(n for n in s.node.outputs if n)
    return found


def left_padding(graph, input_names, output_names) -> Padding | None:
    """Padding at the start of the growing axes, by the same amount for every growing input, for
    attention no rule of `padding` covers (a torch export: the KV cache grown by Concat, attention
    by MatMul and Softmax or Attention over it). The padded run sees a longer history whose first
    positions the zero-padded attention mask hides, as in a left-padded batch for generation; each
    growing output's last positions are the unpadded output, and the kernels over the padded axis
    sum from its end (matmul.cu; reduction.cu's softmax), so they are the same bytes. Whether a model really
    computes so (positions from its inputs, not from its shapes) is checked at run time: each
    binding's first padded run is compared with the unpadded run before it is captured."""
    growing = growing_symbols(graph)
    inputs, outputs = {}, {}
    for names, plan in ((input_names, inputs), (output_names, outputs)):
        for name in names:
            axes = _growing_axes(name, graph, growing)
            shape = graph.value(name).shape
            if not axes and plan is inputs and MASK_NAME.search(name) and shape and len(shape) == 2 \
                    and not isinstance(shape[1], int):
                axes = [1]  # a mask's total length, under a symbol of its own (torch.export names each input's)
            if len(axes) > 1:
                return None
            if axes:
                plan[name] = axes[0] if plan is inputs else (axes[0], ())
    return Padding(inputs, outputs, left=True) if inputs else None


LENGTH_OPS = frozenset({"Cast", "Squeeze", "Unsqueeze", "Identity"})  # keep a host length as it is


def _growing_axes(name, graph, growing) -> list[int]:
    return [i for i, d in enumerate(graph.value(name).shape or ()) if _grows([d], growing)]


def padding(graph, steps: list[Step], input_names, output_names) -> tuple[Padding | None, str]:
    """Whether running the partition with its growing axes padded with zeros gives the same outputs
    (up to their unpadded lengths) as running it unpadded, by a rule for every op that touches a
    padded value; else None and the first reason. Rules: an integer ReduceSum over the padded axis
    (an attention mask's length; also fused with a Sub and Cast, ReduceSumSubCast) is exact; Cast keeps
    zeros; the Shape of a padded value gives the capacity, which only GroupQueryAttention's
    total_sequence_length may take (its present length
    becomes the capacity, and every length it uses comes from seqlens_k on the GPU); its past KV may
    be padded, its present KV is, with the unpadded length max(past, total_sequence_length) (a
    window-sized cache is neither: its rows depend on its capacity); a length compared with a power of two from
    the smallest capacity answers as the real length (_length_threshold)."""
    growing = growing_symbols(graph)
    if not growing:
        return None, "no growing (KV) axes"
    # value -> (padded axis, the (input, axis) pairs whose largest length it has unpadded)
    padded: dict[str, tuple[int, tuple]] = {}
    # host value computed from a padded length -> ("shape", axis, sources) for a Shape, ("length",
    # sources) for its padded dim, or None where the computation hides which length it is
    lengths: dict[str, tuple | None] = {}
    for name in input_names:
        axes = _growing_axes(name, graph, growing)
        if len(axes) > 1:
            return None, f"input {name!r} grows on more than one axis"
        if axes:
            padded[name] = (axes[0], ((name, axes[0]),))
    outputs, why = _walk(graph, steps, output_names, padded, lengths, "growing",
                         lambda name: bool(_growing_axes(name, graph, growing)),
                         lambda node, touched, const: _pad_rule(node, graph, touched, padded, lengths, const))
    if outputs is None:
        return None, why
    return Padding({n: padded[n][0] for n in input_names if n in padded}, outputs), ""


def _walk(graph, steps, output_names, padded, lengths, what: str, carries, rule, whole=lambda name: True):
    """The padding rules over a partition's steps: rule(node, touched, const) -> "" or why not, for each step that
    reads a padded value or length (their indices `touched`; it marks what the step makes padded); `carries(name)`:
    whether a value's shape holds a padded length (`what` kind of value), which only padded steps may make; `whole`:
    whether a padded output may be staged as it is. The outputs' plan ({name: (axis, sources)}), or None and why."""
    constants = _constants(graph)
    for s in steps:
        node = s.node
        touched = [i for i, n in enumerate(node.inputs) if n in padded or n in lengths]
        if not touched:
            if any(carries(n) for n in node.outputs if n):
                return None, f"{node.label!r} ({node.op_type}) makes a {what} value from fixed ones"
            continue
        why = rule(node, touched, lambda i: _const(graph, constants, node.inputs, i))
        if why:
            return None, f"{node.label!r} ({node.op_type}): {why}"
    outputs = {}
    for name in output_names:
        if name in lengths:
            return None, f"output {name!r} is computed from a padded length"
        if name in padded and whole(name):
            outputs[name] = padded[name]
        elif name in padded or carries(name):
            return None, f"output {name!r} is a {what} value but not a padded one"
    return outputs, ""


def _pad_rule(node: Node, graph, touched, padded, lengths, const) -> str:
    ins, outs = node.inputs, node.outputs
    if node.op_type == "Shape" and ins[0] in padded and not node.attrs.get("start") and "end" not in node.attrs:
        axis, sources = padded[ins[0]]
        shape = graph.value(ins[0]).shape
        lengths[outs[0]] = ("shape", axis, sources, len(shape)) if shape is not None else None
        return ""
    if node.op_type == "Gather" and touched == [0] and (lengths[ins[0]] or ("",))[0] == "shape":
        _, axis, sources, rank = lengths[ins[0]]
        index = const(1)
        if index is None or index.ndim:
            lengths[outs[0]] = None
        elif int(index) % rank == axis:
            lengths[outs[0]] = ("length", sources)
        return ""  # another dim of a padded value (the batch) is pinned: not a length
    if node.op_type in LENGTH_OPS and touched == [0] and ins[0] in lengths:
        lengths[outs[0]] = lengths[ins[0]]
        return ""
    if node.op_type == "Cast" and ins[0] in padded:
        padded[outs[0]] = padded[ins[0]]
        return ""
    if node.op_type == "ReduceSum" and touched == [0] and ins[0] in padded:
        value = graph.value(ins[0])
        if not np.issubdtype(value.dtype, np.integer):
            return "a float sum over a padded axis would change its rounding"
        axes, rank = const(1), len(value.shape)
        if axes is None or padded[ins[0]][0] not in {int(a) % rank for a in np.asarray(axes).reshape(-1)}:
            return "does not sum over the padded axis"
        return ""
    if node.op_type == "ReduceSumSubCast" and touched == [0] and ins[0] in padded:  # plan/fusion.py's integer sum
        return "" if padded[ins[0]][0] == len(graph.value(ins[0]).shape) - 1 else "does not sum over the padded axis"
    if node.op_type == "GroupQueryAttention" and node.domain == "com.microsoft":
        sources = ()
        for i in touched:
            if i in (3, 4) and _window_cache(node):
                return "a window-sized KV cache (sliding_window_cache=1) cannot be padded"
            if i in (3, 4) and ins[i] in padded and padded[ins[i]][0] == 2:
                sources += padded[ins[i]][1]
            elif i == 6 and (lengths.get(ins[i]) or ("",))[0] == "length":
                sources += lengths[ins[i]][1]
            else:
                return f"input {i} ({ins[i]!r}) is padded or a length of unknown origin"
        if 6 not in touched:
            return "total_sequence_length does not come from a padded length"
        for o in outs[1:3]:
            if o and not _window_cache(node):  # a window-sized present keeps the past's capacity
                padded[o] = (2, tuple(dict.fromkeys(sources)))
        return ""
    if node.op_type in LENGTH_THRESHOLDS:
        return _length_threshold(node, touched, lengths, const, MIN_CAPACITY)
    return "no rule for a padded input"


# comparisons of a length with a constant, by the position of the length: L > T, L <= T (as T < L, T >= L)
LENGTH_THRESHOLDS = {"Greater": 0, "LessOrEqual": 0, "Less": 1, "GreaterOrEqual": 1}


def _length_threshold(node: Node, touched, lengths, const, smallest: int) -> str:
    """L > T (or L <= T) for a padded length L and a constant T answers the same for the padded length, the smallest
    power of two from `smallest` that is >= L, when T is a power of two from `smallest` too: L > T <=> padded > T.
    (LongRoPE picks its rotary factors so, T its original_max_position_embeddings.) The answer is no length."""
    at = LENGTH_THRESHOLDS[node.op_type]
    if touched != [at] or (lengths.get(node.inputs[at]) or ("",))[0] != "length":
        return "compares a padded value or a length of unknown origin"
    t = const(1 - at)
    if t is None or t.size != 1:
        return "compares a padded length with a value that is not a constant"
    t = float(np.asarray(t).reshape(-1)[0])
    if t < smallest or not t.is_integer() or int(t) & (int(t) - 1):
        return (f"compares a padded length with {t:g}, not a power of two from {smallest}: a padded length may "
                "answer otherwise")
    return ""


# --- prompt padding: one graph for every first-prompt length up to a bucket --------------------------

# ops that compute each position of a padded axis from the same position of their inputs (broadcasting aside)
ELEMENTWISE = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Where", "Sigmoid", "Tanh", "Relu", "Neg", "Exp", "Log",
    "Sqrt", "Erf", "Abs", "Reciprocal", "Sin", "Cos", "Softplus", "LeakyRelu", "HardSigmoid", "HardSwish", "Elu",
    "Gelu", "FastGelu", "QuickGelu", "BiasGelu", "Clip", "Identity", "SiLU", "GeluErf", "Mish", "Softsign",
    "LinearAttentionGate", "GatedAdd"})  # (a linear attention's decay and beta, each position's from its own
#                                          projections; an MoE's output plus its shared expert's, gated)
# recurrences along the sequence: each position's output from the positions up to it, their state outputs from all of
# them (so from the real ones only where the kernel is given the real length): op -> (input 0's sequence axis, the
# position of the kernel's real_lengths, after the op's own inputs; NormedLinearAttention: plan/fusion.py's; its
# token-major CausalConvWithState, in FUSED_DOMAIN, has the sequence on axis 1)
RECURRENT = {"CausalConvWithState": (2, 4), "LinearAttention": (1, 6), "NormedLinearAttention": (1, 6)}
NORMS_FROM_AXIS = frozenset({"LayerNormalization", "SimplifiedLayerNormalization", "RMSNormalization",
                             "SkipSimplifiedLayerNormalization", "SkipLayerNormalization"})
# products of their first input's rows (NormedProduct: also its skip, input 1) by weights no padding reaches
ROW_PRODUCTS = frozenset({"MatMul", "MatMulNBits", "MatMulBias", "MatMulSwiGLU", "MatMulNBitsSwiGLU", "Linear",
                          "LinearArgMax", "NormedProduct"})


def prompt_padding(graph, steps: list[Step], input_names, output_names) -> tuple[Padding | None, str]:
    """Whether a decoder's first prompt (the query length and the mask's (total) length equal, every past KV empty or
    a buffer of the maximum length that its present shares) may run with its length padded at the end to a bucket.
    Exact in real arithmetic where every op that touches a padded value computes each position from the same position of its
    inputs (elementwise, norms and products over other axes, the embedding's Gather, RotaryEmbedding) and
    GroupQueryAttention sees a right-padded first prompt: causal, its lengths from seqlens_k (the sum of the mask,
    whose padding is zeros); the padded rows' results are dropped. Bit for bit only where a kernel's sums do not
    depend on the number of rows (a GEMM's algorithm, chosen per shape, may sum in another order). The plan's
    `past`: the past inputs' axes, which must be 0, or all at least the bucket, for a run to be padded so (a shared
    buffer's rows past the prompt then hold the padded tokens' keys and values instead of zeros: no later step reads
    a row before writing it); else None and the first reason."""
    growing = growing_symbols(graph)
    attention = [s.node for s in steps if s.node.op_type == "GroupQueryAttention" and s.node.domain == "com.microsoft"]
    if not growing or not attention:
        return None, "not a decoder with GroupQueryAttention and a growing KV cache"
    past, past_symbols = {}, set()
    for name in input_names:
        shape = graph.value(name).shape
        if KV_NAME.search(name) and shape is not None and len(shape) == 4 and shape[2] in growing:
            past[name] = 2
            past_symbols.add(shape[2])
    queries = {graph.value(n.inputs[0]).shape[1] if graph.value(n.inputs[0]).shape else None for n in attention}
    if not past or None in queries or not all(isinstance(q, str) and SYMBOL.fullmatch(q) for q in queries):
        return None, "no past KV input, or a query length that is not a symbol of its own"
    symbols = queries | (growing - past_symbols)  # the new tokens' and the total length's
    padded: dict[str, tuple[int, tuple]] = {}
    for name in input_names:
        if name in past:
            continue
        dims = graph.value(name).shape or ()
        axes = [i for i, d in enumerate(dims) if isinstance(d, str) and not symbols.isdisjoint(SYMBOL.findall(d))]
        if len(axes) > 1 or (axes and dims[axes[0]] not in symbols):
            return None, f"input {name!r} has a prompt length on more than one axis or in an expression"
        if axes:
            padded[name] = (axes[0], ((name, axes[0]),))
    zeroed = set(padded)  # values whose padding is zeros: the staged inputs, and their casts
    factors: dict[str, int] = {}  # _row_rule's
    stateful: list[int] = []  # _row_rule's
    rows: set[str] = set()  # _row_rule's
    lengths: dict[str, tuple | None] = {}
    outputs, why = _walk(graph, steps, output_names, padded, lengths, "prompt-long",
                         lambda name: any(isinstance(d, str) and not symbols.isdisjoint(SYMBOL.findall(d))
                                          for d in graph.value(name).shape or ()),
                         lambda node, touched, const: _row_rule(node, graph, touched, padded, lengths, zeroed, past,
                                                                const, factors, stateful, rows),
                         whole=lambda name: factors.get(name, 1) == 1 and name not in rows)
    if outputs is None:
        return None, why
    seqlens = {n.inputs[5] for n in attention}
    if stateful and len(seqlens) != 1:
        return None, "recurrent nodes, and GroupQueryAttentions of different seqlens_k to give them the real length"
    first = _computing(steps, seqlens) if stateful else []
    if set(first) & set(stateful):
        return None, "seqlens_k, the recurrent nodes' real length, is computed from their outputs"
    return Padding({n: padded[n][0] for n in input_names if n in padded}, outputs, past=past, stateful=tuple(stateful),
                   seqlens=seqlens.pop() if stateful else "", first=tuple(first)), ""


def _computing(steps: list[Step], names) -> list[int]:
    """The indices of the nodes that compute the values `names`, their inputs' and so on."""
    made = {n: s.node for s in steps for n in s.node.outputs if n}
    wanted, found = [n for n in names if n in made], {}
    while wanted:
        node = made[wanted.pop()]
        if node.index not in found:
            found[node.index] = node
            wanted.extend(n for n in node.inputs if n in made)
    return list(found)


def with_real_lengths(steps: list, plan: Padding) -> list:
    """The executor's steps (exec/cuda_compute.py) for a first prompt padded by `plan`: each of its recurrent nodes
    also reads seqlens_k, as its kernel's real_lengths (RECURRENT), so that its state stops at the real length; the
    steps computing seqlens_k first (ORT's order may put a recurrent node before them)."""
    if not plan.stateful:
        return steps
    out = []
    for node, *rest in steps:
        if node.index in plan.stateful:
            at = RECURRENT[node.op_type][1]
            node = replace(node, inputs=node.inputs + [""] * (at - len(node.inputs)) + [plan.seqlens])
        out.append((node, *rest))
    return [s for s in out if s[0].index in plan.first] + [s for s in out if s[0].index not in plan.first]


MOE_OPS = frozenset({"MoE", "QMoE"})


def _router_rows(graph, name, axis, shape) -> bool:
    """Whether a Reshape of value `name` (padded on `axis`) to `shape` is an MoE router's [B, S, E] -> [-1, E]."""
    dims = graph.value(name).shape
    return (shape is not None and dims is not None and len(dims) == 3 and axis == 1 and isinstance(dims[2], int)
            and [int(d) for d in np.asarray(shape).reshape(-1)] == [-1, dims[2]])


def _aligned(graph, name, axis, rank) -> int:
    """Axis `axis` of value `name` as an axis of a broadcast result of rank `rank`."""
    return axis + rank - len(graph.value(name).shape)


def _row_rule(node: Node, graph, touched, padded, lengths, zeroed, past, const, factors, stateful, rows) -> str:
    """prompt_padding's rule for one node that reads padded values or lengths; "" when it keeps every position
    apart (its outputs marked padded), else why not. factors: a value's indices a position on its padded axis
    where a Reshape merged the axis with the ones after it (1 where not given); stateful: the recurrent nodes' indices
    (RECURRENT), whose state outputs need the real length; rows: (batch, position) pairs merged into one axis (an MoE
    router's [B * S, experts]), which only the MoE ops read."""
    ins, outs, op = node.inputs, node.outputs, node.op_type
    if any(ins[i] in rows for i in touched) and (op not in MOE_OPS or node.domain != "com.microsoft"):
        return "reads (batch, position) rows merged into one axis"
    if any(factors.get(ins[i], 1) != 1 for i in touched) and \
            op in ("Shape", "GroupQueryAttention", "RotaryEmbedding", "MRotaryEmbedding", *RECURRENT):
        return "reads a value whose padded axis a Reshape merged with others"
    if op == "Shape" or (op == "Gather" and touched == [0] and ins[0] in lengths) or \
            (op in LENGTH_OPS and touched == [0] and ins[0] in lengths):
        return _pad_rule(node, graph, touched, padded, lengths, const)
    if op in ("ReduceSum", "ReduceSumSubCast") and touched == [0] and ins[0] in padded:
        if ins[0] not in zeroed:  # a computed value's padded positions hold whatever the padded tokens gave
            return "a sum over positions the padding fills with other values than zeros"
        return _pad_rule(node, graph, touched, padded, lengths, const)
    if op == "GroupQueryAttention" and node.domain == "com.microsoft":
        return _first_prompt_rule(node, graph, touched, padded, lengths, past)
    if op in LENGTH_THRESHOLDS and any(ins[i] in lengths for i in touched):
        return _length_threshold(node, touched, lengths, const, MIN_PROMPT)
    if any(ins[i] in lengths for i in touched):
        return "reads a padded length"
    rank = lambda n: len(graph.value(n).shape or ())
    axes = {_aligned(graph, ins[i], padded[ins[i]][0], rank(outs[0])) for i in touched}
    sources = tuple(dict.fromkeys(src for i in touched for src in padded[ins[i]][1]))
    if op == "Cast" and touched == [0]:
        axis = padded[ins[0]][0]
        if ins[0] in zeroed:
            zeroed.add(outs[0])
    elif op in ("Gather", "GatherBlockQuantized") and touched == [1]:  # an embedding: rows picked by padded ids
        axis = node.attrs.get("gather_axis" if op == "GatherBlockQuantized" else "axis", 0) % rank(ins[0]) + \
            padded[ins[1]][0]
    elif op in ELEMENTWISE:
        if len(axes) != 1:
            return "padded inputs on different axes"
        axis = axes.pop()
        for i, n in enumerate(ins):
            if n and i not in touched:
                dims = graph.value(n).shape
                if dims is None:
                    return f"input {i} of unknown shape"
                k = axis - (rank(outs[0]) - len(dims))
                if 0 <= k < len(dims) and dims[k] != 1:
                    return f"input {i} ({n!r}) is not broadcast along the padded axis"
    elif op in NORMS_FROM_AXIS or op in ROW_PRODUCTS:
        allowed = (0, 1) if op.startswith("Skip") or op == "NormedProduct" else (0,)
        start = node.attrs.get("axis", -1) % rank(ins[0]) if op in NORMS_FROM_AXIS else rank(ins[0]) - 1
        axis = padded[ins[0]][0] if ins[0] in padded else -1
        if not set(touched) <= set(allowed) or 0 not in touched or \
                any(padded[ins[i]][0] != axis for i in touched) or axis >= start:
            return "padded on the axis it normalises or sums over, or a padded weight"
        if op in ROW_PRODUCTS and any(rank(o) < axis + 1 for o in outs if o):
            return "an output without the padded axis"
    elif op in ("ArgMax", "ArgMin") and touched == [0]:  # over another axis: each position's own (bench's next token)
        axis, over = padded[ins[0]][0], node.attrs.get("axis", 0) % rank(ins[0])
        if over == axis:
            return "reduces over the padded axis"
        if over < axis and not node.attrs.get("keepdims", 1):
            axis -= 1  # the reduced axis before it is dropped
    elif op == "Split" and touched == [0]:
        axis = padded[ins[0]][0]
        if node.attrs.get("axis", 0) % rank(ins[0]) == axis:
            return "splits the padded axis"
    elif op == "Transpose" and touched == [0]:
        perm = list(node.attrs.get("perm", range(rank(ins[0]))[::-1]))
        axis = perm.index(padded[ins[0]][0])
    elif op == "Reshape" and touched == [0] and _router_rows(graph, ins[0], padded[ins[0]][0], const(1)):
        axis = 0  # a router's logits, one row per token: [B, S, E] -> [B * S, E]
        rows.add(outs[0])
    elif op in MOE_OPS and node.domain == "com.microsoft" and set(touched) <= {0, 1} and 0 in touched:
        axis = padded[ins[0]][0]  # each token's experts its own: its router row (input 1) and its hidden state
        if rank(ins[0]) != 3 or axis != 1 or (1 in touched and ins[1] not in rows) or factors.get(ins[0], 1) != 1:
            return "hidden states padded on another axis than the sequence, or a router not one row per token"
    elif op == "Reshape" and touched == [0]:
        # the dims before the padded axis copied (0), the padded one copied or -1, fixed dims after it: each
        # position's block of elements (its factor's indices on the axis times the dims after) stays whole
        axis, shape, dims = padded[ins[0]][0], const(1), graph.value(ins[0]).shape
        inner = dims[axis + 1:] if dims is not None else (None,)
        if shape is None or node.attrs.get("allowzero", 0) or len(shape) <= axis or \
                any(int(d) != 0 for d in shape[:axis]) or int(shape[axis]) not in (0, -1) or \
                any(int(d) <= 0 for d in shape[axis + 1:]) or not all(isinstance(d, int) for d in inner):
            return "a shape that does not keep each position's elements together"
        block = factors.get(ins[0], 1) * math.prod(inner)
        after = math.prod(int(d) for d in shape[axis + 1:])
        if block % after:
            return "a shape that splits a position's elements over the padded axis"
        factors[outs[0]] = block // after
    elif op in ("RotaryEmbedding", "MRotaryEmbedding") and touched in ([0], [0, 1]):
        axis = padded[ins[0]][0]
        if axis != {3: 1, 4: 2}.get(rank(ins[0])):  # (batch, sequence, hidden) or (batch, heads, sequence, head)
            return "padded on another axis than the sequence"
        if 1 in touched and padded[ins[1]][0] != rank(ins[1]) - 1:  # ([3,] batch, sequence)
            return "position_ids padded on another axis than the sequence"
    elif op in RECURRENT and node.domain in ("", "com.microsoft", FUSED_DOMAIN) and 0 in touched:
        axis = 1 if op == "CausalConvWithState" and node.domain == FUSED_DOMAIN else RECURRENT[op][0]
        if rank(ins[0]) != 3 or node.attrs.get("channels_last", 0) or \
                any(i == 3 or padded[ins[i]][0] != axis for i in touched):  # input 3: past_state
            return "padded on another axis than the sequence, or a padded state"
        padded[outs[0]] = (axis, tuple(dict.fromkeys(src for i in touched for src in padded[ins[i]][1])))
        stateful.append(node.index)  # its present state (output 1): exact once the kernel stops at the real length
        return ""
    elif op == "LpNormalization" and touched == [0]:
        axis = padded[ins[0]][0]
        if node.attrs.get("axis", -1) % rank(ins[0]) == axis:
            return "normalises over the padded axis"
    elif op == "GatedRMSNorm" and node.domain == "com.microsoft" and set(touched) <= {0, 2} and 0 in touched:
        axis = padded[ins[0]][0]  # over the last axis, by its gate (input 2) of the same shape
        if axis >= rank(ins[0]) - 1 or any(padded[ins[i]][0] != axis for i in touched):
            return "padded on the axis it normalises over, or its gate on another"
    else:
        return "no rule for a padded input"
    for o in outs:
        if o:
            padded[o] = (axis, sources)
            if op != "Reshape" and factors.get(ins[touched[0]], 1) != 1:
                factors[o] = factors[ins[touched[0]]]
    return ""


def _constants(graph) -> dict:
    """The values Constant nodes make (an initializer's are in its Value)."""
    return {n.outputs[0]: np.asarray(n.attrs["value"]) for n in graph.nodes if n.op_type == "Constant" and "value" in n.attrs}


def _const(graph, constants, ins, i):
    """Input i's constant value, or None."""
    if i >= len(ins) or not ins[i]:
        return None
    v = graph.value(ins[i]).const
    return v if v is not None else constants.get(ins[i])


def _first_prompt_rule(node: Node, graph, touched, padded, lengths, past) -> str:
    """GroupQueryAttention over a right-padded first prompt: query (and key, value, position_ids) padded on the
    sequence axis, the past KV (`past`) empty or a shared buffer of at least the bucket, total_sequence_length the
    padded mask's length; the output is padded on its sequence axis, the present KV on axis 2, unpadded as long as
    the mask or the past, whichever is longer (gqa_layout's present length)."""
    ins, outs = node.inputs, node.outputs
    if _window_cache(node):
        return "a window-sized KV cache keeps the last positions, padded ones included"
    if any(ins[i] not in past for i in (3, 4) if i < len(ins) and ins[i]):
        return "its past KV is not a graph input (a first prompt has it empty, or a shared buffer of at least the bucket)"
    sources = ()
    for i in touched:
        if i in (0, 1, 2, 9) and ins[i] in padded and padded[ins[i]][0] == 1:
            sources += padded[ins[i]][1]
        elif i == 6 and (lengths.get(ins[i]) or ("",))[0] == "length":
            continue
        else:
            return f"input {i} ({ins[i]!r}) is padded on another axis or a length of unknown origin"
    if 0 not in touched or 6 not in touched:
        return "the query is not padded, or total_sequence_length is not a padded length"
    padded[outs[0]] = (1, tuple(dict.fromkeys(sources)))
    for k in (1, 2):  # present k: as long as the mask (or as past k+2, a shared buffer)
        past_k = ins[k + 2] if k + 2 < len(ins) else ""
        if k < len(outs) and outs[k]:
            padded[outs[k]] = (2, lengths[ins[6]][1] + (((past_k, 2),) if past_k else ()))
    return ""
