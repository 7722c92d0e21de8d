"""`capture-report MODEL`: how the CUDA EP would split a model for CUDA-graph capture, without a GPU.

The model file is partitioned as the CUDA EP partitions it (nodes it declines run on another EP
and end a partition), each partition is placed as at Compile (exec/cuda_capture.place), and the
seams (steps where the host must wait for a GPU value) split its GPU work into segments. ORT
rewrites graphs before an EP sees them, so a session can differ slightly from the file; option
`log_capture=1` reports what a session really compiled.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..exec.cuda_capture import Padding, Step, capture_summary, choose_padding, place, prompt_padding, segments
from ..graph.ir import Graph
from ..partition import partition

COLOURS = {"GPU": "#2ea043", "host": "#a0a0a0", "seam": "#d62728"}  # the timeline's, by where a node runs


@dataclass
class PartitionSteps:
    name: str
    steps: list[Step]
    padding: Padding | None  # how capture=auto pads the growing axes (None: it does not)
    padding_problem: str  # why they cannot be padded at their end ("" when they can)
    prompt: Padding | None  # how a first prompt's length is padded to a bucket (None: it is not)
    prompt_problem: str  # why not ("" when it is)

    @property
    def segments(self) -> int:
        return segments(self.steps)


def analyse(graph: Graph) -> tuple[list[PartitionSteps], dict]:
    """Each partition's placed steps, and the declined nodes ((name, op) -> reason)."""
    result = partition(graph, "cuda")
    parts = []
    for number, group in enumerate(result.groups):
        nodes = [graph.nodes[i] for i in group]
        produced = {o for n in nodes for o in n.outputs if o}
        inputs = sorted({i for n in nodes for i in n.inputs
                         if i and i not in produced and graph.value(i).const is None})
        members = set(group)
        used_after = {i for k, n in enumerate(graph.nodes) if k not in members for i in n.inputs} | set(graph.outputs)
        outputs = sorted(o for o in produced if o in used_after)
        sub = Graph(nodes, graph.values, inputs, outputs)
        steps = place(sub, inputs, outputs)
        parts.append(PartitionSteps(f"partition {number} ({len(nodes)} nodes)", steps,
                                    *choose_padding(sub, steps, inputs, outputs),
                                    *prompt_padding(sub, steps, inputs, outputs)))
    return parts, result.declined


def render(parts: list[PartitionSteps], declined: dict) -> str:
    lines = [capture_summary(p.steps, p.name, p.padding, p.padding_problem, p.prompt, p.prompt_problem) for p in parts]
    total = sum(p.segments for p in parts)
    lines.append(f"total: {len(parts)} partition(s), {total} segment(s) per run")
    for (name, op), reason in sorted(declined.items()):
        lines.append(f"  declined {name!r} ({op}): {reason} (runs on another EP, between partitions)")
    return "\n".join(lines)


@dataclass
class TimelineRow:
    name: str
    kinds: list[str]             # per node in execution order: "GPU", "host" or "seam" (COLOURS' keys)
    ops: list[str]               # per node: its op type
    segments: list[tuple]        # (first node, end) of each segment of GPU work: a seam starts the next
    seams: list[tuple]           # (node index, "'name' (op): why the host waits there")


def timeline(parts: list[PartitionSteps]) -> list[TimelineRow]:
    """What the picture shows of each partition."""
    rows = []
    for p in parts:
        kinds = ["seam" if s.seam else "GPU" if s.on_gpu else "host" for s in p.steps]
        starts = [0] + [i for i, s in enumerate(p.steps) if s.seam and i]
        spans = list(zip(starts, starts[1:] + [len(p.steps)])) if p.segments else []
        seams = [(i, f"{s.node.label!r} ({s.node.op_type}): {s.seam}") for i, s in enumerate(p.steps) if s.seam]
        rows.append(TimelineRow(p.name, kinds, [s.node.op_type for s in p.steps], spans, seams))
    return rows


def write_png(parts: list[PartitionSteps], path: str, title: str = "model", notes_shown: int = 30,
              labelled: int = 48) -> None:
    """A timeline per partition (matplotlib): its nodes in execution order coloured by where they run (their op
    types under them when no partition has more than `labelled`), its segments bracketed above them, and each
    seam numbered, with its node and reason listed below."""
    from .plotting import pyplot
    plt = pyplot("capture-report --png")
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator
    rows = timeline(parts)
    longest = max([len(r.kinds) for r in rows] + [1])
    pitch = 2.0 if longest <= labelled else 1.0  # data units a partition takes, its op types' room included
    notes = [note for r in rows for _, note in r.seams]
    listed = [f"{n}. {note}" for n, note in enumerate(notes[:notes_shown], 1)]
    if len(notes) > notes_shown:
        listed.append(f"... and {len(notes) - notes_shown} more (the printed report lists every seam)")
    fig, ax = plt.subplots(figsize=(min(max(8.0, 0.05 * longest + 3), 20.0),
                                    1.6 + pitch * len(rows) + 0.2 * len(listed)))
    number = 0
    for k, r in enumerate(rows):
        y = pitch * (len(rows) - 1 - k)
        for kind, colour in COLOURS.items():
            ax.broken_barh([(i, 0.9) for i, x in enumerate(r.kinds) if x == kind], (y, 0.5), facecolors=colour)
        for n, (a, b) in enumerate(r.segments, 1):
            ax.plot([a, b - 0.1], [y + 0.62] * 2, color="black", linewidth=1)
            ax.text((a + b) / 2, y + 0.66, f"segment {n}", ha="center", va="bottom", fontsize=7)
        for i, _ in r.seams:
            number += 1
            ax.text(i + 0.45, y + 0.25, str(number), ha="center", va="center", fontsize=8, color="white",
                    fontweight="bold")
        if pitch > 1:
            for i, op in enumerate(r.ops):
                ax.text(i + 0.45, y - 0.05, op, ha="center", va="top", rotation=90, fontsize=6)
    ax.set_yticks([pitch * (len(rows) - 1 - k) + 0.25 for k in range(len(rows))], [r.name for r in rows])
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(0, longest)
    ax.set_ylim(-pitch + 0.6, pitch * (len(rows) - 1) + 1.2)
    ax.set_xlabel("nodes in execution order (after the EP's fusions)")
    ax.set_title(f"{title}: {sum(len(r.segments) for r in rows)} segment(s), {len(notes)} seam(s)")
    ax.legend(handles=[Patch(color=c, label=k) for k, c in COLOURS.items()], loc="upper right", fontsize=7, ncol=3)
    below = (0.2 * len(listed) + 0.1) / fig.get_figheight() if listed else 0  # the seams' list, under the axes
    if listed:
        fig.text(0.01, 0.01, "\n".join(listed), fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, below, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
