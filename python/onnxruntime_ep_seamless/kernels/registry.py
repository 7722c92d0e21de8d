"""Kernel registry: (domain, op_type, opset range) -> a spec-shaped function.

A kernel is a plain function: inputs positional (None for an absent optional input),
ONNX attributes as keyword-only parameters with the spec's defaults; it returns a tuple
with one array per node output (trailing optional outputs the node lacks are ignored). Registering it is the only step needed for a new op.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..graph.ir import ONNX_TO_NUMPY, PACKED_BITS, UNREADABLE, Graph, Node, exotic, exotic_dtypes
from .checks import GpuCheck

OPSET_MAX = 10_000
# the domain of the nodes plan/fusion.py makes (never in a model); their kernels register under it
FUSED_DOMAIN = "ai.seamless"
# the products whose kernels apply an RMS norm to their activations themselves (plan/fusion.py's
# NormedProduct, kernels/cuda/normalization.py): op type -> domain
NORMED_PRODUCTS = {"MatMulNBits": "com.microsoft", "MatMulNBitsSwiGLU": FUSED_DOMAIN, "Linear": FUSED_DOMAIN,
                   "MatMulSwiGLU": FUSED_DOMAIN}
NUMPY_MAX_RANK = 64 if int(np.__version__.split(".")[0]) >= 2 else 32

FLOATS = frozenset(map(np.dtype, (np.float16, np.float32, np.float64)))
INTS = frozenset(map(np.dtype, (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)))
SIGNED = frozenset(map(np.dtype, (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64)))
NUMERIC = FLOATS | INTS
BOOL = frozenset([np.dtype(np.bool_)])
ALL = NUMERIC | BOOL
# bfloat16, the float8 types and the 4-/2-bit types (graph/ir.py EXOTIC_TYPES, ml_dtypes arrays): only the ops that
# merely convert or move data accept them. In a kernel's types one marker stands for them all (accepts()), so that
# ml_dtypes (~0.5 s to import) is loaded by the first model that has such a value, not by every session.
LOW_PRECISION = frozenset({"the ml_dtypes types (bfloat16, float8, 4- and 2-bit)"})


def accepts(types, dtype) -> bool:
    """Whether a kernel's types (LOW_PRECISION's marker included) hold dtype."""
    return dtype in types or (exotic(dtype) and not LOW_PRECISION.isdisjoint(types))


def dtypes_of(types) -> set:
    """The dtypes a kernel's types stand for (LOW_PRECISION's marker loads and names them)."""
    return set(types) - LOW_PRECISION | (set(exotic_dtypes()) if LOW_PRECISION & types else set())


@dataclass(frozen=True)
class KernelDef:
    op_type: str
    domain: str
    since: int
    until: int
    fn: Callable
    types: frozenset | None      # allowed dtypes of input `type_input` (None: any numpy dtype)
    type_input: int
    check: Callable | None       # check(node, graph) -> reason string or None
    attr_names: frozenset
    facts: frozenset             # keyword-only parameters named in PLAN_FACTS: what the planner binds besides attributes
    device: str = "cpu"
    host_inputs: tuple = ()      # CUDA: inputs the kernel reads on the host (shapes, axes, sizes, k…)
    capture: str = "static"      # CUDA: "static" (launches fixed by the shapes), "device-indexed" (reads
                                 # lengths/positions from GPU memory), "host" (computes on the host: CPU
                                 # kernels, and the CUDA data-dependent ops: cuda/elementwise.py on_host)
    validate: Callable | None = None  # validate(node, graph) raises at Compile for what stock refuses at load
    takes: frozenset = frozenset()    # what besides tensors of numbers it handles: "strings", "sequences",
                                      # "optionals" (Python lists, None; see VALUE_KINDS)
    user: str = ""                    # a user's kernel (kernels/user.py): its function's name; no fusion, no
                                      # native step takes its nodes

    def build(self, node: Node, graph: Graph, readers: tuple = (), output_buffer: Callable | None = None,
              subplans: dict | None = None) -> Callable:
        """The callable the plan invokes: fn with the node's attributes bound, and the facts it asks for.
        readers: the op types that read the node's first output; output_buffer(i, shape, dtype): where the
        run's caller wants the node's output i, or None (where the planner knows them); subplans: a graph
        attribute's name -> its plan (plan/planner.py), bound in place of the graph."""
        if self.validate is not None:
            try:
                self.validate(node, graph)
            except Exception as exc:  # the status code still comes from exc (checks.status_code reads causes)
                raise ValueError(f"node {node.label!r} ({node.key}): {exc}") from exc
        kwargs = {k: v for k, v in node.attrs.items() if k in self.attr_names}
        kwargs.update(subplans or {})
        facts = {"_num_outputs": len(node.outputs), "_num_implicit": node.implicit, "_readers": tuple(readers),
                 "_output_buffer": output_buffer}
        if "_gpu_check" in self.facts:
            facts["_gpu_check"] = GpuCheck(f"{node.label!r} ({node.key})")
        kwargs.update((k, facts[k]) for k in self.facts)
        return functools.partial(self.fn, **kwargs) if kwargs else self.fn


# what a kernel may ask the planner for by a keyword-only parameter of that name: the node's number of outputs and
# of the outer values its subgraphs read (its last inputs),
# the op types reading its first output (a launch-order hint), a function giving the buffer ORT holds for an
# output of the node (kernels/cuda/attention.py's GroupQueryAttention writes its present KV there, in place where
# that is the past's buffer), where a CUDA kernel reports a bad value in the run's data (checks.GpuCheck)
PLAN_FACTS = frozenset({"_num_outputs", "_num_implicit", "_readers", "_output_buffer", "_gpu_check"})


_REGISTRY: dict[tuple[str, str, str], list[KernelDef]] = {}  # (device, domain, op_type) -> kernels
# values besides tensors of numbers: string tensors (object arrays of str), sequences of tensors (lists),
# optionals (None or what they hold)
VALUE_KINDS = frozenset({"strings", "sequences", "optionals"})


def value_kinds(value) -> set:
    """The VALUE_KINDS a graph value is."""
    kinds = {"strings"} if value.elem_type == 8 else set()
    if "sequence" in value.container:
        kinds.add("sequences")
    if "optional" in value.container:
        kinds.add("optionals")
    return kinds


def kernel(op_type: str, *, domain: str = "", since: int = 1, until: int = OPSET_MAX,
           types=None, type_input: int = 0, check: Callable | None = None, device: str = "cpu",
           host_inputs: tuple = (), capture: str | None = None, validate: Callable | None = None,
           takes: tuple = ()):
    """Register a kernel for opset versions [since, until] of (domain, op_type) on `device`.
    host_inputs (CUDA): positions of the inputs the kernel reads on the host; the executor does
    not upload them, and one computed on the GPU is a seam (the host waits for the stream).
    validate(node, graph): raises at Compile where stock ORT refuses the node's attributes or constant inputs when
    it loads the model.
    takes: the kinds of values besides tensors of numbers the kernel handles (VALUE_KINDS); without them it is
    never offered a node that has such a value."""
    unknown = set(takes) - VALUE_KINDS
    if unknown:
        raise ValueError(f"takes: unknown value kinds {sorted(unknown)}")

    def register(fn):
        params = inspect.signature(fn).parameters.values()
        attr_names = frozenset(p.name for p in params if p.kind is p.KEYWORD_ONLY and not p.name.startswith("_"))
        facts = frozenset(p.name for p in params if p.name in PLAN_FACTS)
        _REGISTRY.setdefault((device, domain, op_type), []).append(
            KernelDef(op_type, domain, since, until, fn, types, type_input, check, attr_names, facts, device,
                      tuple(host_inputs), capture or ("host" if device == "cpu" else "static"), validate,
                      frozenset(takes)))
        return fn
    return register


def all_kernels(device: str = "cpu") -> list[KernelDef]:
    _load_families(device)
    return [k for key, defs in _REGISTRY.items() if key[0] == device for k in defs]


def lookup(node: Node, graph: Graph, device: str = "cpu", host_rule: bool = True) -> tuple[KernelDef | None, str]:
    """The kernel for a node on `device`, or None and the reason it is declined.

    On "cuda" (with host_rule), a node whose inputs are all integer or boolean (shape and mask
    arithmetic: small tensors) gets its CPU kernel, run on the host inside the partition: its
    results are then known on the host, where shape arguments are read, without waiting for the
    GPU. The CUDA executor asks again without host_rule when such a node reads a GPU value.
    A node no CUDA kernel takes (an op, a type, an attribute they lack) gets its CPU kernel too, with the
    CUDA side's reason: it runs on the host, a seam where it reads GPU values (the capture report and
    log_capture name it), instead of splitting the graph between EPs. host_rule=False: CUDA kernels only.
    Sub-byte values (int4, float4e2m1, ...) live on the GPU packed, as ORT holds them; no CUDA kernel takes them,
    so a node with one runs its CPU kernel on the host; so does a node with a sequence or an optional, which stays
    on the host inside the partition (partition.py keeps them from crossing its boundary). Strings stay with ORT:
    it cannot place a string tensor in device memory."""
    if device != "cuda":
        return _lookup(node, graph, device)
    on_host = ""
    for name in node.inputs + node.outputs:
        value = graph.value(name) if name else None
        if value is None:
            continue
        kinds, packed = value_kinds(value), value.dtype in PACKED_BITS
        if "strings" in kinds or (kinds or packed) and node.subgraphs:
            return None, f"{name!r} ({value.type_name}): the CUDA EP leaves such values to the CPU"
        if (kinds or packed) and not on_host:
            on_host = f"{name!r} ({value.type_name}): " + ("no CUDA kernel takes sub-byte values" if packed else
                                                            "sequences and optionals stay on the host")
    if on_host:
        return (_lookup(node, graph, "cpu", user=False)[0] if host_rule else None), on_host
    if node.subgraphs:  # If, Loop, Scan: their CUDA kernels (subgraphs compiled by the CUDA executor), never the CPU's
        return _lookup(node, graph, "cuda")
    if host_rule:  # (the CPU EP's user kernels are not the CUDA EP's)
        ints = [graph.value(n).dtype for n in node.inputs if n]
        if ints and all(t is not None and t.kind in "biu" for t in ints):
            host, host_reason = _lookup(node, graph, "cpu", user=False)
            if host is not None:
                return host, ""
    kdef, reason = _lookup(node, graph, "cuda")
    if kdef is None and host_rule:
        host, _ = _lookup(node, graph, "cpu", user=False)
        if host is not None:
            return host, reason
    return kdef, reason


def _lookup(node: Node, graph: Graph, device: str, user: bool = True) -> tuple[KernelDef | None, str]:
    """user: the user's kernels of `device` first (kernels/user.py)."""
    _load_families(device)
    user_reason = ""
    if user and user_kernels.has_kernels():
        kdef, user_reason = user_kernels.lookup(node, graph, device)
        if kdef is not None:
            return kdef, ""
    defs = _REGISTRY.get((device, node.domain, node.op_type))
    if not defs:
        return None, user_reason or f"no kernel for {node.key}"
    unreadable = [k for k, v in node.attrs.items() if v is UNREADABLE]
    if unreadable:
        return None, f"attribute(s) {unreadable} have a type the EP does not read (a graph, a type)"
    kinds: dict[str, set] = {}  # value name -> its kinds besides a tensor of numbers
    for name in node.inputs + node.outputs:
        if name:
            value = graph.value(name)
            if value.element_dtype is None:
                return None, f"{name!r} has element type {value.type_name}, which the numpy executor cannot hold"
            if value.shape is not None and len(value.shape) > NUMPY_MAX_RANK:
                return None, f"{name!r} has rank {len(value.shape)}; numpy arrays hold at most {NUMPY_MAX_RANK}"
            kinds[name] = value_kinds(value)
    matching = [d for d in defs if d.since <= node.since_version <= d.until]
    if not matching:
        ranges = ", ".join(f"{d.since}-{d.until if d.until < OPSET_MAX else ''}" for d in defs)
        return None, f"{node.key} opset {node.since_version} not implemented (have {ranges})"
    kdef = matching[0]
    for name, value_kind in kinds.items():
        if value_kind - kdef.takes:
            return None, f"{name!r} ({graph.value(name).type_name}): the EP's {node.key} does not take such values"
    unknown = set(node.attrs) - kdef.attr_names
    if unknown:
        return None, f"attribute(s) {sorted(unknown)} not supported"
    if kdef.types is not None:
        names = [n for n in (node.inputs if node.inputs else node.outputs)]
        ref = names[kdef.type_input] if kdef.type_input < len(names) else ""
        dtype = graph.value(ref).dtype if ref else None
        if dtype is not None and not accepts(kdef.types, dtype):
            return None, f"dtype {dtype} not supported (supports {', '.join(sorted(str(t) for t in kdef.types))})"
    if kdef.check is not None:
        reason = kdef.check(node, graph)
        if reason:
            return None, reason
    return kdef, ""


_loaded: set[str] = set()


def _load_families(device: str) -> None:
    if device not in _loaded:
        _loaded.add(device)
        import importlib
        importlib.import_module(f"{__package__}.{device}").load_all()


from . import user as user_kernels  # noqa: E402 (it builds on the definitions above)
