"""`capture-report MODEL`: how the CUDA EP would split a model for CUDA-graph capture, without a GPU.

The model file is partitioned as the CUDA EP partitions it (nodes it declines run on another EP
and end a partition), each partition is placed as at Compile (abi/cuda_capture.place), and the
seams (steps where the host must wait for a GPU value) split its GPU work into segments. ORT
rewrites graphs before an EP sees them, so a session can differ slightly from the file; option
`log_capture=1` reports what a session really compiled.
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from .abi.cuda_capture import Padding, Step, capture_summary, choose_padding, place, segments
from .graph.ir import Graph
from .partition import partition

GPU, HOST, SEAM = (46, 160, 67), (160, 160, 160), (214, 39, 40)  # colours in the picture


@dataclass
class PartitionSteps:
    name: str
    steps: list[Step]
    padding: Padding | None  # how capture=auto pads the growing axes (None: it does not)
    padding_problem: str  # why they cannot be padded at their end ("" when they can)

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
                                    *choose_padding(sub, steps, inputs, outputs)))
    return parts, result.declined


def render(parts: list[PartitionSteps], declined: dict) -> str:
    lines = [capture_summary(p.steps, p.name, p.padding, p.padding_problem) for p in parts]
    total = sum(p.segments for p in parts)
    lines.append(f"total: {len(parts)} partition(s), {total} segment(s) per run")
    for (name, op), reason in sorted(declined.items()):
        lines.append(f"  declined {name!r} ({op}): {reason} (runs on another EP, between partitions)")
    return "\n".join(lines)


def write_png(parts: list[PartitionSteps], path: str, cell: int = 4, row: int = 14) -> None:
    """A timeline per partition: one column per node, green on the GPU, grey on the host, red a seam."""
    width = max([len(p.steps) for p in parts] + [1]) * cell
    pixels = []
    for p in parts:
        colours = [SEAM if s.seam else GPU if s.on_gpu else HOST for s in p.steps]
        line = b"".join(bytes(c) * (cell - 1) + b"\xff\xff\xff" for c in colours)
        line += b"\xff" * (3 * width - len(line))
        pixels += [line] * (row - 2) + [b"\xff" * 3 * width] * 2
    height = max(len(pixels), 1)
    raw = b"".join(b"\x00" + line for line in pixels) or b"\x00" + b"\xff" * 3 * width

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
