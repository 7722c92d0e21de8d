"""Kernels a user writes in Python: `register_kernel` makes a function the kernel of (domain, op_type, opset
range), of a new op (a custom domain: ORT >= 1.24 learns its schema from the EP's factory) or of an op ORT knows
(an override of ours, or one we lack). On the CPU EP the function has our own kernels' shape
(kernels/registry.py): inputs positional (numpy arrays, read-only; None for an absent optional one), attributes
keyword-only with their defaults (or **attrs for all of them), one array per output. On the CUDA EP it is
fn(stream, inputs, outputs, **attributes): it launches on `stream` (a CudaStream) reading and writing the
DeviceArrays it is given (the outputs allocated from the shape rule), so that a captured graph records its work;
`cuda_source_kernel` makes such a function from CUDA C source (NVRTC through cuda-python's cuda.core).

A user kernel runs as a Python step: fusions and native steps leave its nodes alone. `supports(node)` may decline a
node with a reason; `shape(*input_shapes, **attributes)` declares the outputs' shapes, checked against the model's
at session creation and against each result.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..graph.ir import NUMPY_TO_ONNX, PACKED_BITS, STRING, Graph, Node
from .registry import FUSED_DOMAIN, OPSET_MAX, KernelDef, value_kinds

# the domains ORT has schemas for; any other is a custom domain, whose schemas the EP hands ORT
ORT_DOMAINS = frozenset({"", "ai.onnx.ml", "com.microsoft", "ai.onnx.preview.training", "ai.onnx.training",
                         "com.microsoft.nchwc", "com.microsoft.experimental", "com.ms.internal.nhwc"})
CUSTOM_DOMAINS_ORT = (1, 24)  # OrtEpFactory::GetCustomOpDomains
ORT_MAX_OPSET = 1000          # ORT registers a custom domain's opsets 1..1000
# a CUDA kernel's capture class (kernels/registry.py KernelDef.capture): it only launches on the stream it is given
# (static: the launches fixed by the shapes; device-indexed: it reads lengths or positions on the GPU), or it reads
# GPU values on the host (host: a seam, capture=auto leaves its partition uncaptured)
CAPTURE_CLASSES = ("static", "device-indexed", "host")


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
    device: str = "cpu"     # the EP whose kernel it is: "cpu" or "cuda"
    optional_inputs: int = 0  # a custom op's last inputs that a node may leave out (the kernel gets None)
    capture: str = "host"   # CUDA: its capture class (CAPTURE_CLASSES)
    shape_attrs: frozenset | None = None  # the attributes the shape rule takes by name (None: all, **attributes)

    @property
    def name(self) -> str:
        return f"{getattr(self.fn, '__module__', '?')}.{getattr(self.fn, '__qualname__', repr(self.fn))}"

    @property
    def custom(self) -> bool:
        return self.domain not in ORT_DOMAINS

    @property
    def infers_shapes(self) -> bool:
        """Whether ORT can learn a custom op's output shapes from the shape rule: one that reads no attributes (ORT's
        shape inference hands the EP the inputs' types and shapes only)."""
        if self.shape is None:
            return False
        params = inspect.signature(self.shape).parameters.values()
        return not any(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in params)


_KERNELS: dict[tuple[str, str], list[UserKernel]] = {}  # (domain, op_type) -> kernels, the latest first
_changes = 0  # how many registrations changed the custom ops (the factory hands ORT their newest set)


def register_kernel(op_type: str, fn: Callable | None = None, *, domain: str = "", since: int = 1,
                    until: int | None = None, supports: Callable | None = None, shape: Callable | None = None,
                    inputs=None, outputs=None, optional_inputs: int = 0, device: str = "cpu",
                    capture: str = "static"):
    """Make `fn` the kernel of opsets [since, until] of (domain, op_type) on the `device` EP ("cpu" or "cuda");
    usable as a decorator.

    CPU: fn(*inputs, **attributes) -> an array, or a tuple with one array per output. CUDA: fn(stream, inputs,
    outputs, **attributes) launches on the stream (CudaStream), its inputs and outputs DeviceArrays; `shape` is
    required (the outputs are allocated from it) and `capture` is its capture class (CAPTURE_CLASSES).
    supports(node: NodeInfo) -> None or True to take the node, a reason string (or False) to decline it.
    shape(*input_shapes, **attributes) -> one shape per output. A custom domain (not one ORT knows) declares its
    op's schema: `inputs` and `outputs`, one numpy dtype per input and output, None for "any type" (an output None
    takes its op's one input of any type); the last `optional_inputs` of them are optional. Register before the
    session options are made (ORT reads the custom ops' schemas then); ORT >= 1.24 for a custom domain. Raises
    ValueError (TypeError for what is not callable) for a registration that cannot work."""
    if fn is None:
        return lambda f: register_kernel(op_type, f, domain=domain, since=since, until=until, supports=supports,
                                         shape=shape, inputs=inputs, outputs=outputs, optional_inputs=optional_inputs,
                                         device=device, capture=capture)
    global _changes
    kernel = _checked_registration(op_type, fn, "" if domain == "ai.onnx" else domain, since, until, supports, shape,
                                   inputs, outputs, optional_inputs, device, capture)
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


def _checked_registration(op_type, fn, domain, since, until, supports, shape, inputs, outputs, optional_inputs,
                          device, capture) -> UserKernel:
    where = f"register_kernel({domain + '::' if domain else ''}{op_type})"
    if not isinstance(op_type, str) or not op_type or not isinstance(domain, str):
        raise ValueError(f"{where}: op_type must be a non-empty string and domain a string")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"{where}: device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and capture not in CAPTURE_CLASSES:
        raise ValueError(f"{where}: capture must be one of {CAPTURE_CLASSES}, got {capture!r}")
    if device == "cuda" and shape is None:
        raise ValueError(f"{where}: a CUDA kernel needs a shape rule (shape=): its outputs are allocated before it "
                         "launches")
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
    shape_attrs = None
    if shape is not None:
        shape_params = _parameters(where, "the shape rule", shape)
        if not any(p.kind is p.VAR_KEYWORD for p in shape_params):
            shape_attrs = frozenset(p.name for p in shape_params if p.kind in (p.KEYWORD_ONLY,
                                                                                p.POSITIONAL_OR_KEYWORD))
    custom = domain not in ORT_DOMAINS
    if custom:
        if inputs is None or outputs is None:
            raise ValueError(f"{where}: {domain!r} is a custom domain: declare the op's schema for ORT with inputs= "
                             "and outputs= (one numpy dtype each, None for any type)")
        _check_onnxruntime(where)
        inputs, outputs = _types(where, "inputs", inputs), _types(where, "outputs", outputs)
        if not outputs:
            raise ValueError(f"{where}: an op needs at least one output")
        if not isinstance(optional_inputs, int) or not 0 <= optional_inputs <= len(inputs):
            raise ValueError(f"{where}: optional_inputs={optional_inputs!r} must count some of the op's "
                             f"{len(inputs)} inputs (its last ones)")
        anys = sum(t is None for t in inputs)
        if any(t is None for t in outputs) and anys != 1:
            raise ValueError(f"{where}: an output of any type (None) takes the type of the op's one input of any "
                             f"type, but {anys} inputs are declared None (ORT's rule for custom ops)")
        required = sum(p.default is p.empty for p in positional)
        if device == "cuda":
            pass  # fn(stream, inputs, outputs): checked below
        elif required > len(inputs) or (len(positional) < len(inputs) and not variadic):
            raise ValueError(f"{where}: the op has {len(inputs)} input(s) but the kernel "
                             f"{fn.__name__}{inspect.signature(fn)} does not take that many positional arguments")
        until = min(until, ORT_MAX_OPSET)
    elif inputs is not None or outputs is not None or optional_inputs:
        raise ValueError(f"{where}: inputs=, outputs= and optional_inputs= declare a custom op's schema; ORT has the "
                         "schema of "
                         f"{domain or 'ai.onnx'}::{op_type}")
    if device == "cuda" and not variadic and (len(positional) < 3 or
                                               sum(p.default is p.empty for p in positional) > 3):
        raise ValueError(f"{where}: a CUDA kernel is called fn(stream, inputs, outputs, **attributes); "
                         f"{getattr(fn, '__name__', fn)}{inspect.signature(fn)} does not take that")
    keyword = frozenset(p.name for p in params if p.kind is p.KEYWORD_ONLY)
    return UserKernel(op_type, domain, since, until, fn, supports, shape, inputs, outputs, keyword,
                      any(p.kind is p.VAR_KEYWORD for p in params), device, optional_inputs,
                      capture if device == "cuda" else "host", shape_attrs)


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


def infer_shapes(k: UserKernel, input_types: list, input_shapes: list) -> list | None:
    """A custom op's outputs' (ONNX element type, shape) from its shape rule, given its inputs' ONNX element types and
    shapes (None: absent); None where any input dim is unknown (-1) or the rule fails."""
    if any(s is not None and any(d < 0 for d in s) for s in input_shapes):
        return None
    try:
        shapes = _rule(k, input_shapes, {})
    except Exception:
        return None
    anys = [t for t, declared in zip(input_types, k.inputs) if declared is None]
    types = [NUMPY_TO_ONNX[t] if t is not None else (anys[0] if anys else 0) for t in k.outputs]
    if len(shapes) < len(types) or 0 in types:
        return None
    return list(zip(types, shapes))


def custom_ops(device: str) -> list[UserKernel]:
    """The custom-domain kernels of the `device` EP, whose schemas its factory hands ORT."""
    return [k for k in registered_kernels() if k.custom and k.device == device]


def changes() -> int:
    return _changes


# --- the registry's side: a user kernel for a node ---------------------------------------------

def has_kernels() -> bool:
    return bool(_KERNELS)


def lookup(node: Node, graph: Graph, device: str = "cpu") -> tuple[KernelDef | None, str]:
    """The user's kernel for the node on `device` and "", or None and why it was declined ("" when none is
    registered for it: the EP's own kernels decide)."""
    why = ""
    for k in _KERNELS.get((node.domain, node.op_type), ()):
        if k.device != device:
            continue
        if not k.since <= node.since_version <= k.until:
            why = why or (f"{node.key} opset {node.since_version} outside the user kernel {k.name}'s "
                          f"[{k.since}, {k.until}]")
            continue
        why = _declined(k, node, graph)
        if not why:
            return _kernel_def(k, node, graph), ""
    return None, why


def _declined(k: UserKernel, node: Node, graph: Graph) -> str:
    for name in node.inputs + node.outputs:
        if name and (value_kinds(graph.value(name)) or graph.value(name).dtype is None):
            return f"{name!r} ({graph.value(name).type_name}): user kernels take tensors of numbers"
        if name and k.device == "cuda" and graph.value(name).dtype in PACKED_BITS:
            return f"{name!r} ({graph.value(name).type_name}): the CUDA EP leaves packed types to the CPU"
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
    run = _run_cuda(k, node, graph) if k.device == "cuda" else _run(k, node, graph)
    return KernelDef(node.op_type, node.domain, k.since, k.until, run, None, 0, None, attrs, frozenset(), k.device,
                     capture=k.capture, validate=lambda n, g: _check_shape_rule(k, n, g), user=k.name)


def _run(k: UserKernel, node: Node, graph: Graph) -> Callable:
    """The kernel as the plan calls it: inputs read-only, its results checked (count, types, the shape rule)."""
    label, outputs = f"node {node.label!r} ({node.key}): the user kernel {k.name}", len(node.outputs)
    types = [graph.value(name).dtype if name else None for name in node.outputs]
    fn, shape = k.fn, k.shape

    def run(*inputs, **attrs):
        frozen = [x.view() if x.__class__ is np.ndarray else x for x in inputs]
        for x in frozen:
            if x.__class__ is np.ndarray:  # a read-only view: ORT's inputs are the caller's arrays
                x.setflags(write=False)
        try:
            result = fn(*frozen, **attrs) if attrs else fn(*frozen)
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
            if types[i] is not None and results[i].dtype is not types[i] and results[i].dtype != types[i]:
                raise ValueError(f"{label} returned output {i} of type {results[i].dtype}; the model's output is "
                                 f"{types[i]}")
        if shape is not None:
            want = _rule(k, [None if x is None else np.shape(x) for x in inputs], attrs)
            for i, (r, s) in enumerate(zip(results, want)):
                if r.shape != s:
                    raise ValueError(f"{label} returned output {i} of shape {r.shape}; its shape rule says {s}")
        return results
    # inside a native program the function itself: its Python step makes the read-only views and checks each result
    # against the recorded binding, which `run` checked when it was recorded (kernels/cpu/steps.py PythonStep)
    run.user_fn = fn
    return run


def _rule(k: UserKernel, input_shapes, attrs) -> list[tuple]:
    """The outputs' shapes by k's shape rule, given the attributes it takes by name."""
    if k.shape_attrs is not None:
        attrs = {name: v for name, v in attrs.items() if name in k.shape_attrs}
    return [tuple(int(d) for d in s) for s in k.shape(*input_shapes, **attrs)]


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
        want = _rule(k, shapes, dict(node.attrs))
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


# --- CUDA: the kernel's view of the run ---------------------------------------------------------

class CudaStream:
    """The run's CUDA stream: `handle` (a CUstream as an int), `__cuda_stream__()` (cuda.core's stream protocol:
    cuda.core.launch takes it as it is); CuPy: `cupy.cuda.ExternalStream(s.handle)`, PyTorch:
    `torch.cuda.ExternalStream(s.handle)`."""

    def __init__(self, handle: int, device_id: int):
        self.handle, self.device_id = handle, device_id

    def __cuda_stream__(self):
        return 0, self.handle


class DeviceArray:
    """A tensor on the GPU as the kernel gets it: `ptr`, `shape`, `dtype`, and `__cuda_array_interface__` (v3, on
    the run's stream) for CuPy, PyTorch, Numba, Triton. Inputs must not be written: a device pointer cannot be
    made read-only, and the interface's read-only flag would only make PyTorch refuse the array."""

    def __init__(self, ptr: int, shape: tuple, dtype: np.dtype, stream: int):
        self.ptr, self.shape, self.dtype = ptr, tuple(shape), np.dtype(dtype)
        self._stream = stream

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "version": 3,
                "strides": None, "stream": self._stream}


def _run_cuda(k: UserKernel, node: Node, graph: Graph) -> Callable:
    """The kernel as the CUDA executor calls it: fn(rt, stream, *inputs) -> the outputs it allocated from the shape
    rule and the user's function wrote."""
    label, outputs = f"node {node.label!r} ({node.key}): the user kernel {k.name}", len(node.outputs)
    types = [graph.value(name).dtype if name else np.dtype(np.float32) for name in node.outputs]
    fn = k.fn

    def run(rt, stream, *inputs, **attrs):
        shapes = _rule(k, [None if t is None else t.shape for t in inputs], attrs)
        if len(shapes) < outputs:
            raise ValueError(f"{label}: its shape rule gave {len(shapes)} shape(s) for {outputs} output(s)")
        results = [rt.alloc(s, t) for s, t in zip(shapes, types)]
        handle = int(rt.ffi.cast("uintptr_t", stream))
        ins = [None if t is None else DeviceArray(t.ptr, t.shape, t.dtype, handle) for t in inputs]
        outs = [DeviceArray(t.ptr, t.shape, t.dtype, handle) for t in results]
        try:
            fn(CudaStream(handle, rt.ordinal), ins, outs, **attrs)
        except Exception as exc:  # named: the user's code, not the EP's
            for t in results:
                rt.free(t)
            raise RuntimeError(f"{label} raised {type(exc).__name__}: {exc}") from exc
        return tuple(results)
    return run


_COMPILED: dict = {}  # (source, name, options, device) -> cuda.core Kernel


def cuda_source_kernel(source: str, name: str, *, block: int = 256, options: dict | None = None) -> Callable:
    """A CUDA kernel function for register_kernel(device="cuda") from CUDA C source, compiled once per device with
    NVRTC through cuda-python's cuda.core (`pip install cuda-python`): `extern "C" __global__ void name(const T*
    in0, ..., T* out0, ..., long long n)`, n the elements of output 0, launched over ceil(n / block) blocks of
    `block` threads on the run's stream. options: cuda.core ProgramOptions fields (e.g. {"use_fast_math": True})."""
    options = dict(options or {})

    def launch(stream, inputs, outputs, **attrs):
        from cuda.core import LaunchConfig, launch as cuda_launch
        kernel = _compiled(source, name, options, stream.device_id)
        n = outputs[0].size
        if n == 0:
            return
        pointers = [np.uint64(a.ptr) for a in list(inputs) + list(outputs) if a is not None]
        cuda_launch(_core_stream(stream.handle), LaunchConfig(grid=(n + block - 1) // block, block=block), kernel,
                    *pointers, np.int64(n))
    launch.__name__ = launch.__qualname__ = name
    return launch


_STREAMS: dict = {}  # CUstream handle -> its cuda.core Stream (ORT's streams live as long as their sessions)


def _core_stream(handle: int):
    if handle not in _STREAMS:
        from cuda.core import Stream
        _STREAMS[handle] = Stream.from_handle(handle)
    return _STREAMS[handle]


def _compiled(source: str, name: str, options: dict, device_id: int):
    key = (source, name, tuple(sorted(options.items())), device_id)
    if key not in _COMPILED:
        try:
            from cuda.core import Device, Program, ProgramOptions
        except ImportError as exc:
            raise ImportError("cuda_source_kernel needs cuda-python's cuda.core (pip install cuda-python)") from exc
        device = Device(device_id)
        device.set_current()  # the GPU's primary context, which the EP's runs use too
        arch = "sm_" + "".join(str(v) for v in device.compute_capability)
        program = Program(source, "c++", ProgramOptions(arch=arch, std="c++17", **options))
        _COMPILED[key] = program.compile("cubin").get_kernel(name)
    return _COMPILED[key]
