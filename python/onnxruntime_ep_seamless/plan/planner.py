"""Turn a fused subgraph into a plan: one straight-line Python function.

Each node becomes one line `v7, v8 = k3(v2, c0)`; a value is deleted right after its last
use (buffers are freed by liveness); constants are bound once as globals. A straight-line
function costs far less per node than a generic interpreter loop.
"""
from __future__ import annotations

import itertools

import numpy as np

from ..graph.ir import STRING, Graph
from ..kernels import constants
from ..kernels.registry import lookup, value_kinds
from .fusion import fuse

_plan_ids = itertools.count()
GENERATED_MODULE = "onnxruntime_ep_seamless.plan.generated"  # __name__ of generated plans, for warning filters


class KernelError(RuntimeError):
    """A kernel failed at run time; the message names the node."""


class Plan:
    def __init__(self, graph: Graph, input_names: list[str], output_names: list[str], label: str = "plan",
                 fusion: bool = True):
        self.input_names = list(input_names)
        self.output_names = list(output_names)
        # as the graph declares them (a subgraph's plan: what Loop and Scan feed its inputs, empty outputs' shapes)
        self.input_shapes = [graph.value(n).shape for n in self.input_names]
        self.input_dtypes = [graph.value(n).dtype for n in self.input_names]
        self.output_shapes = [graph.value(n).shape for n in self.output_names]
        self.output_dtypes = [graph.value(n).dtype for n in self.output_names]
        # strings, sequences, optionals (registry.VALUE_KINDS): held by Python only
        self.python_values = {n for n, v in graph.values.items() if value_kinds(v)}
        self.nodes = fuse(graph, self.output_names, enabled=fusion)
        self.filename = f"<seamless {label} #{next(_plan_ids)}>"
        namespace: dict = {"__name__": GENERATED_MODULE}
        local: dict[str, str] = {}       # value name -> python expression
        self.constants: dict = {}        # value name -> a constant's array
        for i, name in enumerate(self.input_names):
            local[name] = f"i{i}"
        for j, name in enumerate(n for n in graph.values if graph.values[n].const is not None):
            if name not in local:
                local[name] = f"c{j}"
                namespace[f"c{j}"] = self.constants[name] = graph.values[name].const
                constants.mark(graph.values[name].const)

        self.last_use = last_use = {}    # value name -> the position of the last node that reads it
        for idx, node in enumerate(self.nodes):
            for name in node.inputs:
                if name:
                    last_use[name] = idx
        keep = set(self.output_names)

        lines = [f"def run({', '.join(f'i{i}' for i in range(len(self.input_names)))}):"]
        self._line_to_node: dict[int, int] = {}
        self.kernels = []                # (node, its KernelDef, the callable the plan invokes), in order
        self.subplans: dict[int, dict] = {}  # node position -> its subgraphs' plans (If, Loop, Scan)
        counter = itertools.count()
        for idx, node in enumerate(self.nodes):
            kdef, reason = lookup(node, graph)
            if kdef is None:
                raise ValueError(f"node {node.label!r} ({node.key}) cannot be planned: {reason}")
            subplans = {attr: Plan(sub, sub.inputs + node.inputs[len(node.inputs) - node.implicit:], sub.outputs,
                                   label=f"{label}/{node.label}/{attr}", fusion=fusion)
                        for attr, sub in node.subgraphs.items()}
            if subplans:
                self.subplans[idx] = subplans
            namespace[f"k{idx}"] = fn = kdef.build(node, graph, subplans=subplans)
            self.kernels.append((node, kdef, fn))
            args = []
            for name in node.inputs:
                if not name:
                    args.append("None")
                elif name in local:
                    args.append(local[name])
                else:
                    raise ValueError(f"node {node.label!r} reads {name!r}, which no earlier node produces")
            outs = []
            for name in node.outputs:
                if name:
                    local[name] = f"v{next(counter)}"
                    outs.append(local[name])
                else:
                    outs.append("_")
            self._line_to_node[len(lines) + 1] = idx
            # kernels may also return trailing optional outputs the node does not use: drop them
            lines.append(f"    {', '.join(outs)}, = k{idx}({', '.join(args)})[:{len(outs)}]")
            dead = [local[n] for n in dict.fromkeys(node.inputs)
                    if n and last_use.get(n) == idx and n not in keep and local[n][0] in "vi"]
            if dead:
                lines.append(f"    del {', '.join(dead)}")
        missing = [n for n in self.output_names if n not in local]
        if missing:
            raise ValueError(f"outputs {missing} are produced by no node of the partition")
        lines.append(f"    return ({''.join(local[n] + ', ' for n in self.output_names)})")
        self.source = "\n".join(lines)
        exec(compile(self.source, self.filename, "exec"), namespace)
        self._run = namespace["run"]

    def run(self, *inputs) -> tuple:
        try:
            return self._run(*inputs)
        except Exception as exc:  # name the node that failed
            node = self._failing_node(exc)
            where = f"node {node.label!r} ({node.key})" if node else "plan"
            raise KernelError(f"{where}: {type(exc).__name__}: {exc}") from exc

    @staticmethod
    def run_node(node, fn, inputs: list) -> tuple:
        """One node's kernel, as run() runs it (for exec/program.py, which records the plan node by node)."""
        try:
            return fn(*inputs)
        except Exception as exc:
            raise KernelError(f"node {node.label!r} ({node.key}): {type(exc).__name__}: {exc}") from exc

    def _failing_node(self, exc):
        tb = exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == self.filename:
                idx = self._line_to_node.get(tb.tb_lineno)
                return self.nodes[idx] if idx is not None else None
            tb = tb.tb_next
        return None


def as_output(array, dtype: np.dtype) -> np.ndarray:
    """An array of the declared output dtype (kernels may return numpy scalars); views stay views."""
    out = array if type(array) is np.ndarray else np.asarray(array)
    if dtype == STRING and out.dtype.kind in "US":  # numpy's fixed-width strings: as str objects
        out = out.astype(STRING)
    if out.dtype is not dtype and out.dtype != dtype:
        raise TypeError(f"kernel produced {out.dtype}, the graph declares {dtype}")
    return out
