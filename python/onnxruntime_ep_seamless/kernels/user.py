"""Kernels a user writes in Python, for the CPU EP: `register_kernel` makes a function the kernel of
(domain, op_type, opset range), of a new op (a custom domain: ORT >= 1.24 learns its schema from the EP's
factory) or of an op ORT knows (an override of ours, or one we lack). The function has our own kernels'
shape (kernels/registry.py): inputs positional (numpy arrays, read-only; None for an absent optional one),
attributes keyword-only with their defaults (or **attrs for all of them), one array per output.

A user kernel runs as a Python step: fusions and native steps leave its nodes alone. `supports(node)` may decline a
node with a reason; `shape(*input_shapes, **attributes)` declares the outputs' shapes, checked against the model's
at session creation and against each result.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..graph.ir import NUMPY_TO_ONNX, STRING, Graph, Node
from .registry import FUSED_DOMAIN, OPSET_MAX, KernelDef, value_kinds

# the domains ORT has schemas for; any other is a custom domain, whose schemas the EP hands ORT
ORT_DOMAINS = frozenset({"", "ai.onnx.ml", "com.microsoft", "ai.onnx.preview.training", "ai.onnx.training",
                         "com.microsoft.nchwc", "com.microsoft.experimental", "com.ms.internal.nhwc"})
CUSTOM_DOMAINS_ORT = (1, 24)  # OrtEpFactory::GetCustomOpDomains
ORT_MAX_OPSET = 1000          # ORT registers a custom domain's opsets 1..1000


@dataclass(frozen=True)
class NodeInfo:
    """What supports(node) sees of a node: its attributes (as the model has them), and per input and output its
    numpy dtype and shape (dims int, a symbol's name or None; the shape None when the rank is unknown), None for
    an absent optional one."""
    name: str
    op_type: str
    domain: str
    opset: int
    attrs: dict
    input_types: tuple
    input_shapes: tuple
    output_types: tuple
    output_shapes: tuple


@dataclass(frozen=True)
class UserKernel:
    op_type: str
    domain: str
    since: int
    until: int
    fn: Callable
    supports: Callable | None
    shape: Callable | None
    inputs: tuple | None    # a custom op's input element types (None: any), its schema for ORT
    outputs: tuple | None   # its outputs' (None: the type of its one any-typed input)
    attr_names: frozenset   # fn's keyword-only parameters
    all_attrs: bool         # fn takes **attributes

    @property
    def name(self) -> str:
        return f"{getattr(self.fn, '__module__', '?')}.{getattr(self.fn, '__qualname__', repr(self.fn))}"

    @property
    def custom(self) -> bool:
        return self.domain not in ORT_DOMAINS


_KERNELS: dict[tuple[str, str], list[UserKernel]] = {}  # (domain, op_type) -> kernels, the latest first
_changes = 0  # how many registrations changed the custom ops (the factory hands ORT their newest set)


def register_kernel(op_type: str, fn: Callable | None = None, *, domain: str = "", since: int = 1,
                    until: int | None = None, supports: Callable | None = None, shape: Callable | None = None,
                    inputs=None, outputs=None):
    """Make `fn` the CPU EP's kernel of opsets [since, until] of (domain, op_type); usable as a decorator.

    fn(*inputs, **attributes) -> an array, or a tuple with one array per output. supports(node: NodeInfo) -> None
    or True to take the node, a reason string (or False) to decline it. shape(*input_shapes, **attributes) -> one
    shape per output. A custom domain (not one ORT knows) declares its op's schema: `inputs` and `outputs`, one
    numpy dtype per input and output, None for "any type" (an output None takes its op's one input of any type).
    Register before the session options are made (ORT reads the custom ops' schemas then); ORT >= 1.24 for a
    custom domain. Raises ValueError (TypeError for what is not callable) for a registration that cannot work."""
    if fn is None:
        return lambda f: register_kernel(op_type, f, domain=domain, since=since, until=until, supports=supports,
                                         shape=shape, inputs=inputs, outputs=outputs)
    global _changes
    kernel = _checked_registration(op_type, fn, "" if domain == "ai.onnx" else domain, since, until, supports, shape,
                                   inputs, outputs)
    _KERNELS.setdefault((kernel.domain, op_type), []).insert(0, kernel)
    _changes += kernel.custom
    return fn


def unregister_kernel(op_type: str, fn: Callable | None = None, *, domain: str = "") -> int:
    """Remove the user kernels of (domain, op_type) (only fn's, when given); how many were removed."""
    global _changes
    key = ("" if domain == "ai.onnx" else domain, op_type)
    kept = [k for k in _KERNELS.get(key, []) if fn is not None and k.fn is not fn]
    removed = len(_KERNELS.get(key, [])) - len(kept)
    if kept:
        _KERNELS[key] = kept
    else:
        _KERNELS.pop(key, None)
    _changes += removed and key[0] not in ORT_DOMAINS
    return removed


def registered_kernels() -> list[UserKernel]:
    return [k for kernels in _KERNELS.values() for k in kernels]


def _checked_registration(op_type, fn, domain, since, until, supports, shape, inputs, outputs) -> UserKernel:
    where = f"register_kernel({domain + '::' if domain else ''}{op_type})"
    if not isinstance(op_type, str) or not op_type or not isinstance(domain, str):
        raise ValueError(f"{where}: op_type must be a non-empty string and domain a string")
    if domain == FUSED_DOMAIN:
        raise ValueError(f"{where}: the domain {FUSED_DOMAIN!r} is the EP's own (its fused nodes)")
    until = OPSET_MAX if until is None else until
    if not (isinstance(since, int) and isinstance(until, int) and 1 <= since <= until):
        raise ValueError(f"{where}: the opset range [since={since!r}, until={until!r}] must be integers, 1 <= since "
                         "<= until")
    for name, f in (("fn", fn), ("supports", supports), ("shape", shape)):
        if f is not None and not callable(f):
            raise TypeError(f"{where}: {name} must be callable, got {type(f).__name__}")
    params = _parameters(where, "the kernel", fn)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    variadic = any(p.kind is p.VAR_POSITIONAL for p in params)
    if shape is not None:
        _parameters(where, "the shape rule", shape)
    custom = domain not in ORT_DOMAINS
    if custom:
        if inputs is None or outputs is None:
            raise ValueError(f"{where}: {domain!r} is a custom domain: declare the op's schema for ORT with inputs= "
                             "and outputs= (one numpy dtype each, None for any type)")
        _check_onnxruntime(where)
        inputs, outputs = _types(where, "inputs", inputs), _types(where, "outputs", outputs)
        if not outputs:
            raise ValueError(f"{where}: an op needs at least one output")
        anys = sum(t is None for t in inputs)
        if any(t is None for t in outputs) and anys != 1:
            raise ValueError(f"{where}: an output of any type (None) takes the type of the op's one input of any "
                             f"type, but {anys} inputs are declared None (ORT's rule for custom ops)")
        required = sum(p.default is p.empty for p in positional)
        if required > len(inputs) or (len(positional) < len(inputs) and not variadic):
            raise ValueError(f"{where}: the op has {len(inputs)} input(s) but the kernel {fn.__name__}{inspect.signature(fn)} "
                             "does not take that many positional arguments")
        until = min(until, ORT_MAX_OPSET)
    elif inputs is not None or outputs is not None:
        raise ValueError(f"{where}: inputs= and outputs= declare a custom op's schema; ORT has the schema of "
                         f"{domain or 'ai.onnx'}::{op_type}")
    keyword = frozenset(p.name for p in params if p.kind is p.KEYWORD_ONLY)
    return UserKernel(op_type, domain, since, until, fn, supports, shape, inputs, outputs, keyword,
                      any(p.kind is p.VAR_KEYWORD for p in params))


def _parameters(where, what, fn) -> list:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: cannot read the signature of {what} {fn!r}: {exc}") from None
    reserved = [p.name for p in params if p.name.startswith("_")]
    if reserved:
        raise ValueError(f"{where}: {what}'s parameters {reserved} start with '_' (names the EP reserves)")
    return params


def _types(where, name, types) -> tuple:
    out = []
    for t in types:
        if t is None:
            out.append(None)
            continue
        try:
            dtype = np.dtype(t)
        except TypeError:
            raise ValueError(f"{where}: {name}: {t!r} is not a numpy dtype") from None
        if dtype not in NUMPY_TO_ONNX or dtype == STRING:
            raise ValueError(f"{where}: {name}: {dtype} has no ONNX tensor type the EP's kernels take")
        out.append(dtype)
    return tuple(out)


def _check_onnxruntime(where) -> None:
    try:
        import onnxruntime as ort
    except ImportError:
        return
    version = tuple(int(p) for p in ort.__version__.split(".")[:2])
    if version < CUSTOM_DOMAINS_ORT:
        raise ValueError(f"{where}: a custom domain needs onnxruntime >= {'.'.join(map(str, CUSTOM_DOMAINS_ORT))} "
                         f"(OrtEpFactory::GetCustomOpDomains), found {ort.__version__}. Fix: pip install -U "
                         "onnxruntime")


def custom_ops() -> list[UserKernel]:
    """The custom-domain kernels, whose schemas the factory hands ORT."""
    return [k for k in registered_kernels() if k.custom]


def changes() -> int:
    return _changes


# --- the registry's side: a user kernel for a node ---------------------------------------------

def has_kernels() -> bool:
    return bool(_KERNELS)


def lookup(node: Node, graph: Graph) -> tuple[KernelDef | None, str]:
    """The user's kernel for the node and "", or None and why it was declined ("" when none is registered for it:
    the EP's own kernels decide)."""
    why = ""
    for k in _KERNELS.get((node.domain, node.op_type), ()):
        if not k.since <= node.since_version <= k.until:
            why = why or f"{node.key} opset {node.since_version} outside the user kernel {k.name}'s [{k.since}, {k.until}]"
            continue
        why = _declined(k, node, graph)
        if not why:
            return _kernel_def(k, node, graph), ""
    return None, why


def _declined(k: UserKernel, node: Node, graph: Graph) -> str:
    for name in node.inputs + node.outputs:
        if name and (value_kinds(graph.value(name)) or graph.value(name).dtype is None):
            return f"{name!r} ({graph.value(name).type_name}): user kernels take tensors of numbers"
    if not k.all_attrs and set(node.attrs) - k.attr_names:
        return f"the user kernel {k.name} takes no attribute(s) {sorted(set(node.attrs) - k.attr_names)}"
    if k.supports is None:
        return ""
    try:
        answer = k.supports(node_info(node, graph))
    except Exception as exc:
        return f"the user kernel {k.name}'s supports() raised {type(exc).__name__}: {exc}"
    if answer is None or answer is True:
        return ""
    return answer if isinstance(answer, str) and answer else f"the user kernel {k.name}'s supports() declined it"


def node_info(node: Node, graph: Graph) -> NodeInfo:
    def describe(names):
        values = [graph.value(n) if n else None for n in names]
        return (tuple(v.dtype if v else None for v in values),
                tuple(tuple(v.shape) if v and v.shape is not None else None for v in values))
    ins, outs = describe(node.inputs[:len(node.inputs) - node.implicit]), describe(node.outputs)
    return NodeInfo(node.name, node.op_type, node.domain, node.since_version, dict(node.attrs), *ins, *outs)


def _kernel_def(k: UserKernel, node: Node, graph: Graph) -> KernelDef:
    attrs = frozenset(node.attrs) if k.all_attrs else k.attr_names
    return KernelDef(node.op_type, node.domain, k.since, k.until, _run(k, node, graph), None, 0, None, attrs,
                     frozenset(), validate=lambda n, g: _check_shape_rule(k, n, g), user=k.name)


def _run(k: UserKernel, node: Node, graph: Graph) -> Callable:
    """The kernel as the plan calls it: inputs read-only, its results checked (count, types, the shape rule)."""
    label, outputs = f"node {node.label!r} ({node.key}): the user kernel {k.name}", len(node.outputs)
    types = [graph.value(name).dtype if name else None for name in node.outputs]
    fn, shape = k.fn, k.shape

    def run(*inputs, **attrs):
        frozen = []
        for x in inputs:
            if x.__class__ is np.ndarray:  # a read-only view: ORT's inputs are the caller's arrays
                x = x.view()
                x.setflags(write=False)
            frozen.append(x)
        try:
            result = fn(*frozen, **attrs)
        except Exception as exc:  # named: the user's code, not the EP's
            raise RuntimeError(f"{label} raised {type(exc).__name__}: {exc}") from exc
        if result.__class__ is np.ndarray:
            results = (result,)
        else:
            results = (result,) if isinstance(result, np.generic) else tuple(result)
            results = tuple([np.asarray(r) for r in results[:outputs]])
        if len(results) < outputs:
            raise ValueError(f"{label} returned {len(results)} output(s), the node has {outputs}")
        for i in range(outputs):
            if types[i] is not None and results[i].dtype != types[i]:
                raise ValueError(f"{label} returned output {i} of type {results[i].dtype}; the model's output is "
                                 f"{types[i]}")
        if shape is not None:
            want = _rule(shape, [None if x is None else np.shape(x) for x in inputs], attrs)
            for i, (r, s) in enumerate(zip(results, want)):
                if r.shape != s:
                    raise ValueError(f"{label} returned output {i} of shape {r.shape}; its shape rule says {s}")
        return results
    return run


def _rule(shape: Callable, input_shapes, attrs) -> list[tuple]:
    params = inspect.signature(shape).parameters.values()
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        names = {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
        attrs = {k: v for k, v in attrs.items() if k in names}
    return [tuple(int(d) for d in s) for s in shape(*input_shapes, **attrs)]


def _check_shape_rule(k: UserKernel, node: Node, graph: Graph) -> None:
    """At session creation: the shape rule answers for the model's static input shapes and agrees with the
    output shapes the model declares where they are static; else a ValueError naming the rule."""
    if k.shape is None:
        return
    shapes = []
    for name in node.inputs[:len(node.inputs) - node.implicit]:
        shape = graph.value(name).shape if name else None
        if name and (shape is None or not all(isinstance(d, int) for d in shape)):
            return  # not static: checked on each result
        shapes.append(tuple(shape) if name else None)
    try:
        want = _rule(k.shape, shapes, dict(node.attrs))
    except Exception as exc:
        raise ValueError(f"the user kernel {k.name}'s shape rule raised {type(exc).__name__}: {exc}") from exc
    if len(want) < len(node.outputs):
        raise ValueError(f"the user kernel {k.name}'s shape rule gave {len(want)} shape(s) for {len(node.outputs)} "
                         "output(s)")
    for i, (name, s) in enumerate(zip(node.outputs, want)):
        declared = graph.value(name).shape if name else None
        if declared is not None and all(isinstance(d, int) for d in declared) and tuple(declared) != s:
            raise ValueError(f"the user kernel {k.name}'s shape rule says {s} for output {i} ({name!r}); the model "
                             f"declares {tuple(declared)}")
