"""Control flow on the CUDA EP: If, Loop and Scan. Their subgraphs are compiled like the fused node's own graph
(exec/cuda_compute.py Branch, bound in place of the graph attributes). An If's condition known on the host (a
comparison of shapes: LongRoPE's factors) picks the branch there; one computed on the GPU is read back in an eager run,
and inside a captured graph becomes two conditional graph nodes, so the GPU picks the branch at every replay. A Loop
runs its body from the host in an eager run (its condition read back every iteration) and, captured, is one
conditional WHILE node whose body decides on the GPU whether it runs again (ep_plugin/cuda_capture.c). A Scan
runs as many iterations as its inputs' scan axis: the shapes fix them, so a captured Scan is its iterations in line."""
from __future__ import annotations

from ..cpu.control import check_condition, check_if, check_loop, check_scalar, check_scan, scan_axes
from ..registry import kernel


def _check_if(node, graph) -> str | None:
    return check_if(node, graph, "cuda")


@kernel("If", device="cuda", since=1, check=_check_if)
def if_(rt, stream, cond, *outer, then_branch, else_branch, _gpu_check):
    check_condition(cond)
    if cond.host is None and rt.lib.seamless_capturing():  # captured: a conditional node per branch
        return then_branch.conditional(else_branch, stream, cond, outer, _gpu_check)
    taken = then_branch if bool(rt.to_host(cond, stream).reshape(-1)[0]) else else_branch
    return taken.run(stream, outer)


def _check_loop(node, graph) -> str | None:
    return check_loop(node, graph, "cuda")


@kernel("Loop", device="cuda", since=1, check=_check_loop)
def loop(rt, stream, m, cond, *rest, body, _num_outputs, _num_implicit):
    """Iterations while i < M and cond (both optional); the body maps (i, cond, carried…) to (cond, carried…,
    scan outputs…), the scan outputs stacked along a new first axis. Captured without scan outputs: a WHILE node;
    with them, only a fixed trip count (exec/cuda_capture.fixed_trip_count: no host read, its iterations in line)."""
    for value, name in ((m, "M"), (cond, "cond")):
        if value is not None:
            check_scalar(value, name, "Loop")
    carried, outer = list(rest[:len(rest) - _num_implicit]), list(rest[len(rest) - _num_implicit:])
    if rt.lib.seamless_capturing() and _num_outputs == len(carried):
        return body.while_node(stream, m, cond, carried, outer)
    return body.loop(stream, m, cond, carried, outer, _num_outputs - len(carried))


def _check_scan(node, graph) -> str | None:
    return check_scan(node, graph, "cuda")


@kernel("Scan", device="cuda", since=9, check=_check_scan)
def scan(rt, stream, *inputs, body, num_scan_inputs, scan_input_axes=None, scan_input_directions=None,
         scan_output_axes=None, scan_output_directions=None, _num_implicit):
    """The body maps (states…, one slice of each scan input…) to (states…, one slice of each scan output…) for
    every position along the scan inputs' axes; the output slices stacked along their axes."""
    explicit, outer = list(inputs[:len(inputs) - _num_implicit]), list(inputs[len(inputs) - _num_implicit:])
    n_states = len(explicit) - num_scan_inputs
    xs = explicit[n_states:]
    axes, length = scan_axes([x.shape for x in xs], scan_input_axes or [0] * num_scan_inputs)
    n_out = len(body.output_names) - n_states
    return body.scan(stream, explicit[:n_states], xs, axes, scan_input_directions or [0] * num_scan_inputs, length,
                     outer, scan_output_axes or [0] * n_out, scan_output_directions or [0] * n_out)
