"""Partitioning: which nodes our EP claims, grouped into fusable sets, and why the rest are declined.

Supported nodes are grouped by the set of unsupported nodes upstream of them. Two nodes
with the same set have no path between them through an unsupported node (that node would
be upstream of one but not the other), and no path can leave a group and come back, so
every group is a valid fused node (convex) and no grouping creates a cycle.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .graph.ir import Graph
from .kernels.registry import lookup


@dataclass
class PartitionResult:
    groups: list[list[int]]                            # node indices per fused node, topological order
    declined: dict[tuple[str, str], str] = field(default_factory=dict)  # (node name, op) -> reason
    nodes: list[tuple[str, str]] = field(default_factory=list)          # (node name, op) by index
    user: Counter = field(default_factory=Counter)   # (op, the user's kernel) -> nodes it runs (kernels/user.py)

    @property
    def total(self) -> int:
        return len(self.nodes)

    @property
    def claimed(self) -> int:
        return sum(len(g) for g in self.groups)

    def summary(self, ep_name: str) -> str:
        lines = [f"{ep_name}: claimed {self.claimed}/{self.total} nodes in {len(self.groups)} partition(s)"]
        by_reason = Counter((op, reason) for (_, op), reason in self.declined.items())
        for (op, reason), count in by_reason.most_common():
            lines.append(f"  declined {count} x {op}: {reason}")
        for (op, name), count in sorted(self.user.items()):
            lines.append(f"  user kernel {name} runs {count} x {op}")
        return "\n".join(lines)


# onnxruntime versions (1.N: its API version N) and what they let a compiling EP claim
CONTROL_FLOW_API = 27  # a fused node gets the outer values its subgraphs read (implicit inputs) from 1.27 on
SUBGRAPH_NAMES_API = 24  # 1.23 names the fused nodes of different subgraphs alike, and the session fails
OLD_ORT = (f"onnxruntime < 1.{CONTROL_FLOW_API} does not pass a fused node the outer values its subgraphs read: "
           "the nodes of its subgraphs are claimed on their own")


def partition(graph: Graph, device: str = "cpu", api: int = CONTROL_FLOW_API) -> PartitionResult:
    """api: onnxruntime's API version (what it lets the EP claim: a node with subgraphs whole from 1.27 on)."""
    names = [(n.name, n.key) for n in graph.nodes]
    subgraph = graph.parent is not None or bool(graph.outer_reads())  # (1.23 names no parent)
    if subgraph and api < SUBGRAPH_NAMES_API:
        return PartitionResult([], {n: "onnxruntime 1.23 gives fused nodes of different subgraphs one name: "
                                       "the nodes of subgraphs are left to it" for n in names}, names)
    if graph.parent is not None:  # ORT asks for a subgraph first: where the EP takes its node whole, none of it
        owner = graph.parent.nodes[0]
        if api >= CONTROL_FLOW_API and lookup(owner, graph.parent, device)[0] is not None:
            reason = f"runs inside {owner.op_type} node {owner.label!r}, which the EP claims whole"
            return PartitionResult([], {n: reason for n in names}, names)
    if device == "cuda" and subgraph:  # a subgraph whose node ORT runs: its values may be where ORT's CPU EP left them
        return PartitionResult([], {n: "the CUDA EP claims no node inside an If, Loop or Scan it does not run (ORT "
                                       "feeds a subgraph values where its CPU EP left them)" for n in names}, names)
    producer = {out: node.index for node in graph.nodes for out in node.outputs if out}
    supported: list[bool] = []
    declined: dict[tuple[str, str], str] = {}
    user: Counter = Counter()
    for node in graph.nodes:
        kdef, reason = lookup(node, graph, device)
        if kdef is not None and node.subgraphs and api < CONTROL_FLOW_API:
            kdef, reason = None, OLD_ORT
        supported.append(kdef is not None)
        if kdef is None:
            declined[(node.name, node.key)] = reason
        elif kdef.user:
            user[(node.key, kdef.user)] += 1

    while True:  # until no sequence or optional leaves a group (on CUDA: or enters one)
        groups = _groups(graph, producer, supported)
        crossing = {index: (f"its output {name!r} ({graph.value(name).type_name}) is read outside the EP's part of "
                            "the graph: the plugin EP API gives a compiled node no way to hand ORT a sequence or an "
                            "optional") for index, name in _containers_leaving(graph, groups).items()}
        if device == "cuda":
            crossing.update({index: (f"its input {name!r} ({graph.value(name).type_name}) comes from outside the "
                                     "EP's part of the graph: ORT cannot hand the CUDA EP such a value")
                             for index, name in _containers_entering(graph, groups, producer).items()})
        if not crossing:
            return PartitionResult(groups, declined, names, user)
        for index, reason in crossing.items():
            supported[index] = False
            node = graph.nodes[index]
            declined[(node.name, node.key)] = reason


def _groups(graph: Graph, producer: dict, supported: list[bool]) -> list[list[int]]:
    upstream: list[frozenset] = []  # unsupported nodes upstream of each node
    groups: dict[frozenset, list[int]] = {}
    for node in graph.nodes:
        acc: set[int] = set()
        for name in node.inputs:
            p = producer.get(name)
            if p is not None:
                acc |= upstream[p]
                if not supported[p]:
                    acc.add(p)
        key = frozenset(acc)
        upstream.append(key)
        if supported[node.index]:
            groups.setdefault(key, []).append(node.index)
    return list(groups.values())


def _containers_entering(graph: Graph, groups: list[list[int]], producer: dict) -> dict[int, str]:
    """Claimed nodes reading a sequence or optional made outside their group (a graph input included)."""
    group_of = {i: g for g, members in enumerate(groups) for i in members}
    entering: dict[int, str] = {}
    for node in graph.nodes:
        for name in node.inputs:
            if name and node.index in group_of and graph.value(name).container and \
                    group_of.get(producer.get(name)) != group_of[node.index]:
                entering.setdefault(node.index, name)
    return entering


def _containers_leaving(graph: Graph, groups: list[list[int]]) -> dict[int, str]:
    """Claimed nodes whose sequence or optional output is a graph output or read outside their group."""
    group_of = {i: g for g, members in enumerate(groups) for i in members}
    leaving: dict[int, str] = {}
    graph_outputs = set(graph.outputs)
    for node in graph.nodes:
        for name in node.outputs:
            if name and node.index in group_of and graph.value(name).container and (
                    name in graph_outputs or any(group_of.get(reader.index) != group_of[node.index]
                                                 for reader in graph.nodes if name in reader.inputs)):
                leaving.setdefault(node.index, name)
    return leaving
