"""Provider options: one table, validated; session config entries override environment fallbacks.

ORT delivers the options given to add_provider_for_devices() as session config entries
named ep.<lower-case EP name>.<key>; ORT itself accepts any key, so we validate here.
Environment variables follow one rule: empty (or blank) is unset; a flag reads 1/true/yes/on or
0/false/no/off in any case; any other value is an error at session creation naming the variable.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable


def _flag(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected 1/true/yes/on or 0/false/no/off, got {text!r}")


def _env(name: str) -> str | None:
    """An environment variable's value; empty or blank counts as unset (the default applies)."""
    value = os.environ.get(name, "").strip()
    return value or None


TRACEBACK_ENV = "SEAMLESS_TRACEBACK"  # a flag: append Python tracebacks to the EP's error messages
# a flag, on by default: float32 GEMMs with a constant B on the CPU's AMX tiles where it has them (B's split kept)
AMX_ENV = "SEAMLESS_AMX"
ENV_FLAGS = {TRACEBACK_ENV: False, AMX_ENV: True}  # environment-only flags and their defaults


def env_flag(name: str) -> bool:
    """An environment-only flag's value; an invalid one is refused at session creation (validate), here it reads as
    the default."""
    try:
        return _flag(_env(name) or str(int(ENV_FLAGS[name])))
    except ValueError:
        return ENV_FLAGS[name]


def traceback_wanted() -> bool:
    return env_flag(TRACEBACK_ENV)


@dataclass(frozen=True)
class Option:
    key: str
    default: object
    parse: Callable[[str], object]
    env: str | None
    doc: str
    variants: tuple = ("cpu", "cuda")  # the EPs that accept it


def _capture_mode(text: str) -> str:
    value = text.strip().lower()
    if value not in ("auto", "off"):
        raise ValueError(f"expected auto or off, got {text!r}")
    return value


def _ordinal(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(f"expected a GPU number >= 0, got {text!r}")
    return value


OPTIONS = {
    "log_partition": Option("log_partition", False, _flag, "SEAMLESS_LOG_PARTITION",
                            "1: log, per graph, the claimed node count and every declined op with its reason "
                            "(at WARNING severity so ORT's default logger shows it)."),
    "fusion": Option("fusion", True, _flag, "SEAMLESS_FUSION",
                     "1 (default): node patterns run as one kernel where the device has one (the rules of "
                     "plan/fusion.py: bias GEMMs, GELU, SiLU, …). 0: every node runs as its own kernel, as with "
                     "stock ORT's graph optimizations disabled: to tell a fusion's rounding from a kernel's, or to "
                     "measure what fusion gains."),
    "native_program": Option("native_program", True, _flag, "SEAMLESS_NATIVE_PROGRAM",
                             "CPU EP: 1 (default): a partition's run is recorded as a native program per binding of "
                             "its input shapes (the second time the binding is seen) and later runs of that binding "
                             "go through C alone, when every node has a native step (log_partition says which do "
                             "not). CUDA EP with capture=off: 1 (default) records a partition without seams, per "
                             "binding (its third run), as a launch program that C issues launch by launch for later "
                             "runs (no CUDA graph; growing KV caches padded as for capture=auto). 0: every run goes "
                             "through the Python plan."),
    "device_id": Option("device_id", None, _ordinal, None,
                        "CUDA EP: the GPU (CUDA ordinal) to run on. `session_options(device='cuda', device_id=N)` "
                        "picks that GPU's device; given with ORT's own API it must name the device passed.",
                        ("cuda",)),
    "log_capture": Option("log_capture", False, _flag, "SEAMLESS_LOG_CAPTURE",
                          "CUDA EP: 1 logs, per compiled partition, its segments of GPU work and every seam (a node "
                          "that makes the host wait for the GPU) with the op, the node and the reason, whether a growing "
                          "KV cache can be padded for capture=auto (or why not), and each binding of input shapes "
                          "that capture=auto could not capture, with the reason.", ("cuda",)),
    "capture": Option("capture", "auto", _capture_mode, "SEAMLESS_CAPTURE",
                      "CUDA EP: auto captures a compiled partition without seams as a CUDA graph once it has run "
                      "2 times with the same input shapes, and launches the graph for those shapes from then on "
                      "(no IO binding needed: the graph copies inputs and outputs at each run's addresses). A "
                      "decoder whose KV cache grows (present fed back as past) runs padded to a capacity (powers "
                      "of two from 64), one graph per capacity: at the end of the KV axis where every op on it "
                      "allows that, else (torch exports) at its start, once a padded run matched the unpadded one "
                      "byte for byte. off: no CUDA graphs: runs are eager, or launch programs (native_program).",
                      ("cuda",)),
    "enable_cuda_graph": Option("enable_cuda_graph", False, _flag, None,
                                "CUDA EP, onnxruntime >= 1.26: 1 captures the whole session run as a CUDA graph after "
                                "two warm-up runs and replays it from then on (ORT's session graph capture). Inputs and "
                                "outputs must stay at the same GPU addresses (IO binding to OrtValues updated in "
                                "place) and keep their shapes; run option gpu_graph_id selects one of several graphs "
                                "(-1: this run is not captured).", ("cuda",)),
}


class OptionError(ValueError):
    pass


def parse_options(ep_name: str, entries: dict[str, str]) -> dict[str, object]:
    """Options for one EP from session config entries (plus environment fallbacks)."""
    prefix = f"ep.{ep_name.lower()}."
    given = {k[len(prefix):]: v for k, v in entries.items() if k.startswith(prefix)}
    return validate(ep_name, given)


def validate(ep_name: str, given: dict[str, object]) -> dict[str, object]:
    variant = "cuda" if "cuda" in ep_name.lower() else "cpu"
    valid = {key: opt for key, opt in OPTIONS.items() if variant in opt.variants}
    unknown = sorted(set(given) - set(valid))
    if unknown:
        raise OptionError(f"{ep_name}: unknown provider option(s) {unknown}; valid options: {sorted(valid)}")
    result = {}
    for key, opt in valid.items():
        if key in given:
            text, source = str(given[key]), f"option {key!r}"
        elif opt.env and (text := _env(opt.env)) is not None:
            source = f"environment variable {opt.env}"
        else:
            result[key] = opt.default
            continue
        try:
            result[key] = opt.parse(text)
        except ValueError as exc:
            raise OptionError(f"{ep_name}: invalid value for {source}: {exc}") from None
    for name in ENV_FLAGS:  # not options, but their values are checked with them
        if (text := _env(name)) is not None:
            try:
                _flag(text)
            except ValueError as exc:
                raise OptionError(f"{ep_name}: invalid value for environment variable {name}: {exc}") from None
    return result
