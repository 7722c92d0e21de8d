"""onnxruntime-ep-seamless: an ONNX Runtime plugin execution provider.

    import onnxruntime as ort, onnxruntime_ep_seamless as seamless
    sess = ort.InferenceSession("model.onnx", seamless.session_options())
    seamless.assert_ep_selected(sess)

Importing this package does nothing else: onnxruntime is loaded only when you register.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

__version__ = "0.1.0"  # semver, the only place it is written (pyproject.toml reads it; docs/versioning.md)
__all__ = ["__version__", "DEMO_MODEL", "get_library_path", "get_ep_name", "get_ep_names", "register", "unregister",
           "get_devices", "session_options", "assert_ep_selected", "partition_report", "PartitionReport",
           "register_kernel", "unregister_kernel", "cuda_source_kernel"]

# The oldest supported onnxruntime, enforced by register(); the C library enforces the same floor
# (SEAMLESS_ORT_API_MIN in ep_plugin/glue.c; tests/abi/test_versions.py keeps them equal).
MIN_ONNXRUNTIME_VERSION = "1.23"
DEMO_MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "demo", "demo_model.onnx")
_VARIANTS = {"cpu": ("SeamlessCPUExecutionProvider", "libonnxruntime_ep_seamless_cpu.so",
                     "onnxruntime_ep_seamless_cpu"),
             "cuda": ("SeamlessCUDAExecutionProvider", "libonnxruntime_ep_seamless_cuda.so",
                      "onnxruntime_ep_seamless_cuda")}
_registered: dict[str, str] = {}  # device -> library path registered by this process


def _variant(device: str):
    try:
        return _VARIANTS[device.lower()]
    except KeyError:
        raise ValueError(f"unknown device {device!r}; this installation provides: {sorted(_VARIANTS)}") from None


def get_library_path(device: str = "cpu") -> str:
    """Absolute path of the plugin library ORT loads for `device`."""
    _, filename, _ = _variant(device)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), filename)
    if not os.path.isfile(path):
        cpu_path = os.path.join(os.path.dirname(path), _VARIANTS["cpu"][1])
        if device.lower() != "cpu" and os.path.isfile(cpu_path):  # the CPU wheel (wheels/build.sh)
            raise FileNotFoundError(f"this installation is the CPU distribution of onnxruntime-ep-seamless: it has no "
                                    f"{device!r} library ({filename}). No wheel with the {device!r} variant is published "
                                    "yet; build it from a checkout with `pip install .`")
        raise FileNotFoundError(f"plugin library not found at {path}; the package was not built "
                                "(reinstall with `pip install onnxruntime-ep-seamless`, or `pip install .` in a checkout)")
    return path


def get_ep_name(device: str = "cpu") -> str:
    return _variant(device)[0]


def get_ep_names() -> list[str]:
    return [v[0] for v in _VARIANTS.values()]


def _ort():
    import onnxruntime as ort
    version = tuple(int(p) for p in ort.__version__.split(".")[:2])
    floor = tuple(int(p) for p in MIN_ONNXRUNTIME_VERSION.split("."))
    if version < floor:
        raise RuntimeError(f"onnxruntime-ep-seamless needs onnxruntime >= {MIN_ONNXRUNTIME_VERSION}, found "
                           f"{ort.__version__}. Fix: pip install -U onnxruntime")
    return ort


DISTRIBUTIONS = ("onnxruntime-ep-seamless", "onnxruntime-ep-seamless-cu13")


def _warn_if_both_installed() -> None:
    """Both distributions install this one package: whichever was installed last won."""
    from importlib import metadata
    found = []
    for name in DISTRIBUTIONS:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    if len(found) > 1:
        import warnings
        warnings.warn(f"both {' and '.join(found)} are installed; they share the package onnxruntime_ep_seamless, so "
                      f"the files of whichever was installed last are in use. Fix: pip uninstall one of them "
                      f"(keep {DISTRIBUTIONS[1]} for GPUs), then reinstall the other.", RuntimeWarning, stacklevel=3)


# The metadata key naming the registration that made an OrtEpDevice (SEAMLESS_REGISTRATION_KEY in ep_plugin/glue.h):
# the library may also be registered under other names with ORT's own API, each registration with its own devices.
_REGISTRATION_KEY = "seamless_registration"


def _devices(ort, device: str) -> list:
    """The OrtEpDevices that our registration of `device`'s library made."""
    ep_name, _, registration_name = _variant(device)
    return [d for d in ort.get_ep_devices()
            if d.ep_name == ep_name and d.ep_metadata.get(_REGISTRATION_KEY) == registration_name]


def register(device: str = "cpu") -> str:
    """Register the plugin library with onnxruntime (idempotent); returns the library path."""
    ort = _ort()
    if not _registered:
        _warn_if_both_installed()
    _, _, registration_name = _variant(device)
    path = get_library_path(device)
    # Registered here before and not undone by ORT's own unregister_execution_provider_library (our devices are
    # still listed): nothing to ask. Registering again would call into ORT, which calls back into Python while it
    # holds its lock: a thread creating a session at the same time could then deadlock with this one.
    if _registered.get(device.lower()) == path and _devices(ort, device):
        return path
    try:
        ort.register_execution_provider_library(registration_name, path)
    except Exception as exc:
        if "already registered" not in str(exc):
            raise
        # ORT >= 1.24 records the library path in the metadata; 1.23 does not
        found = {d.ep_metadata.get("library_path", path) for d in _devices(ort, device)}
        if found - {path}:
            raise RuntimeError(f"{registration_name!r} is already registered from {sorted(found)}, not {path}") from exc
    _registered[device.lower()] = path
    return path


def unregister(device: str = "cpu") -> None:
    """Unregister the library that register() registered; refused while a session made with it is alive."""
    ort = _ort()
    ep_name, _, registration_name = _variant(device)
    if device.lower() not in _registered:
        return
    import gc
    from .abi.bridge import live_eps
    gc.collect()  # sessions dropped in reference cycles are gone, not alive
    alive = live_eps(device.lower(), registration_name)
    if alive:
        raise RuntimeError(f"cannot unregister {ep_name}: {alive} session(s) created with it are still alive; delete "
                           "every InferenceSession and IOBinding using it first (IOBindings keep their session alive)")
    try:
        ort.unregister_execution_provider_library(registration_name)
    except Exception as exc:
        if "was not registered" not in str(exc):  # already undone through ORT's own API: nothing to do
            raise
    del _registered[device.lower()]


def get_devices(device: str = "cpu") -> list:
    """The OrtEpDevice objects of our EP for `device` (registers first); for "cuda", one per GPU."""
    ort = _ort()
    register(device)
    ep_name = get_ep_name(device)
    devices = _devices(ort, device)
    if devices and device == "cuda":
        from .runtime.native import NATIVES
        lib = NATIVES["cuda"].lib
        problem = NATIVES["cuda"].ffi.string(lib.seamless_cublas_problem_text()).decode()
        if problem:
            raise RuntimeError(f"{ep_name}: {problem}")
    return devices


def _no_device_reason(device: str) -> str:
    if device == "cuda":
        from .runtime.native import NATIVES
        native = NATIVES.get("cuda")
        problem = native.ffi.string(native.lib.seamless_cuda_problem_text()).decode() if native else ""
        return problem or "onnxruntime reported no NVIDIA GPU (vendor 0x10DE) on this machine"
    return "onnxruntime reported no CPU device"


def session_options(device: str = "cpu", base=None, **options):
    """SessionOptions with our EP added (options are validated; the README lists them)."""
    ort = _ort()
    from .runtime.options import validate
    validate(get_ep_name(device), options)
    so = base if base is not None else ort.SessionOptions()
    devices = get_devices(device)
    if not devices:
        raise RuntimeError(f"{get_ep_name(device)} offers no device on this machine: {_no_device_reason(device)}")
    if options.get("device_id") is not None:  # one GPU of several
        devices = [d for d in devices if d.ep_metadata.get("cuda_device_id") == str(options["device_id"])]
        if not devices:
            raise RuntimeError(f"{get_ep_name(device)} has no GPU {options['device_id']} on this machine")
    elif device == "cuda":
        devices = devices[:1]  # one session, one GPU: the first unless device_id says otherwise
    so.add_provider_for_devices(devices, {k: str(int(v) if isinstance(v, bool) else v) for k, v in options.items()})
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    return so


def register_kernel(op_type: str, fn=None, **how):
    """Make a Python function the CPU (or CUDA: device="cuda") EP's kernel of an op: a new op of a custom domain, or
    one ORT knows (in place of ours). Before the session options are made. See kernels/user.py `register_kernel`
    and the user guide's "Kernels in Python"."""
    from .kernels.user import register_kernel as register_user_kernel
    return register_user_kernel(op_type, fn, **how)


def cuda_source_kernel(source: str, name: str, **how):
    """A CUDA kernel function for register_kernel(device="cuda") from CUDA C source (NVRTC through cuda-python's
    cuda.core). See kernels/user.py `cuda_source_kernel`."""
    from .kernels.user import cuda_source_kernel as make
    return make(source, name, **how)


def unregister_kernel(op_type: str, fn=None, *, domain: str = "") -> int:
    """Remove the user kernels of (domain, op_type) (only fn's, when given); how many were removed."""
    from .kernels.user import unregister_kernel as unregister_user_kernel
    return unregister_user_kernel(op_type, fn, domain=domain)


@dataclass
class PartitionReport:
    ep_name: str
    ep_nodes: list[tuple[str, str]] = field(default_factory=list)          # (node name, op)
    fallback_nodes: list[tuple[str, str, str]] = field(default_factory=list)  # (node name, op, EP)
    declined: dict[tuple[str, str], str] = field(default_factory=dict)      # (node name, op) -> reason

    def __str__(self) -> str:
        total = len(self.ep_nodes) + len(self.fallback_nodes)
        lines = [f"{self.ep_name}: {len(self.ep_nodes)}/{total} nodes"]
        for name, op, ep in self.fallback_nodes:
            reason = self.declined.get((name, op), "not claimed")
            lines.append(f"  {name} ({op}) ran on {ep}: {reason}")
        return "\n".join(lines)


def partition_report(session, device: str = "cpu") -> PartitionReport:
    """Which nodes of `session` ran on our EP, which elsewhere, and why we declined them."""
    from .abi.ep import PARTITIONS, declined_reasons
    ep_name = get_ep_name(device)
    report = PartitionReport(ep_name)
    if not hasattr(session, "get_provider_graph_assignment_info"):
        # onnxruntime 1.23 cannot say where nodes ran: use our EP's most recent partitioning
        if not PARTITIONS:
            raise RuntimeError(f"{ep_name} has partitioned no graph in this process")
        result = PARTITIONS[-1][1]
        claimed = {i for group in result.groups for i in group}
        report.ep_nodes = [result.nodes[i] for i in sorted(claimed)]
        report.fallback_nodes = [(*n, "another EP") for i, n in enumerate(result.nodes) if i not in claimed]
        report.declined = dict(result.declined)
        return report
    try:
        subgraphs = session.get_provider_graph_assignment_info()
    except Exception as exc:
        raise RuntimeError("create the session with onnxruntime_ep_seamless.session_options(), or set "
                           "'session.record_ep_graph_assignment_info' to '1'") from exc
    for sub in subgraphs:
        for node in sub.get_nodes():
            op = f"{node.domain}::{node.op_type}" if node.domain else node.op_type
            if sub.ep_name == ep_name:
                report.ep_nodes.append((node.name, op))
            else:
                report.fallback_nodes.append((node.name, op, sub.ep_name))
    report.declined = declined_reasons(set(report.ep_nodes) | {(n, op) for n, op, _ in report.fallback_nodes})
    return report


def assert_ep_selected(session, device: str = "cpu") -> PartitionReport:
    """Raise unless our EP is in the session and ran at least one node; returns the partition report."""
    ep_name = get_ep_name(device)
    if ep_name not in session.get_providers():
        raise AssertionError(f"{ep_name} is not among the session's providers {session.get_providers()}; "
                             "create it with onnxruntime_ep_seamless.session_options()")
    report = partition_report(session, device)
    if not report.ep_nodes:
        raise AssertionError(f"{ep_name} ran no node of this session:\n{report}")
    return report
