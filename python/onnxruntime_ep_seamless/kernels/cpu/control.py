"""Control flow: If. A subgraph runs as its own plan (plan/planner.py binds it in place of the graph attribute),
fed the node's implicit inputs (the outer values it reads), which trail the node's own inputs."""
from __future__ import annotations

import numpy as np

from ..registry import kernel, lookup


def subgraphs_supported(node, graph) -> str | None:
    """Why the node's subgraphs cannot run on the EP (a node of theirs declined, an output it cannot hold), or None:
    the node is claimed whole, its subgraphs with it."""
    subgraphs = node.subgraphs
    if not subgraphs:
        return "its subgraphs were not given"
    for attr, sub in subgraphs.items():
        for inner in sub.nodes:
            kdef, reason = lookup(inner, sub, "cpu")
            if kdef is None:
                return f"{attr}: node {inner.label!r} ({inner.key}) is declined: {reason}"
        for name in sub.outputs:
            if sub.value(name).dtype is None:
                return f"{attr}: output {name!r} has element type {sub.value(name).type_name}"
    return None


def _check_if(node, graph) -> str | None:
    branches = [node.attrs.get("then_branch"), node.attrs.get("else_branch")]
    if any(len(b.outputs) != len(node.outputs) for b in branches if b is not None):
        return "a branch's outputs do not match the node's"
    return subgraphs_supported(node, graph)


@kernel("If", since=1, check=_check_if)
def if_(cond, *outer, then_branch, else_branch):
    if cond.size != 1:
        raise ValueError(f"If nodes condition input must have exactly one element (it has {cond.size})")
    branch = then_branch if bool(np.asarray(cond).reshape(-1)[0]) else else_branch
    return branch.run(*outer)
