"""Control flow on the CUDA EP: If. Its branches are compiled like the fused node's own graph (exec/cuda_compute.py
Branch, bound in place of the graph attributes). A condition known on the host (a comparison of shapes: LongRoPE's
factors) picks the branch there; one computed on the GPU is read back in an eager run, and inside a captured graph
becomes two conditional graph nodes, so the GPU picks the branch at every replay (ep_plugin/cuda_capture.c)."""
from __future__ import annotations

from ..cpu.control import check_condition, check_if
from ..registry import kernel


def _check_if(node, graph) -> str | None:
    return check_if(node, graph, "cuda")


@kernel("If", device="cuda", since=1, check=_check_if)
def if_(rt, stream, cond, *outer, then_branch, else_branch):
    check_condition(cond)
    if cond.host is None and rt.lib.seamless_capturing():  # captured: a conditional node per branch
        return then_branch.conditional(else_branch, stream, cond, outer)
    taken = then_branch if bool(rt.to_host(cond, stream).reshape(-1)[0]) else else_branch
    return taken.run(stream, outer)
