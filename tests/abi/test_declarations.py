"""Cross-check the project's own ORT plugin-EP ABI declarations against the official headers.

What is checked
  * ``ep_plugin/ort_types.h``: every struct we define that the official header also defines has the
    same ``sizeof``, the same member names in the same order, and the same ``offsetof``/size for every
    member; function-pointer members have the same signature *shape* (arity, and for the result and
    each parameter: void / integer of N bytes / float / pointer-to-...).  Typedef'd scalar types
    (official enums, which we declare as ``int``) have the same size.
  * ``ep_plugin/ort_slots.def``: every ``ORT_API(slot, ...)`` names the member of the official
    ``OrtApi`` at byte offset ``8*slot`` (``ORT_EP_API``: of ``OrtEpApi``), and its return type and
    parameters have the same shape as the official function pointer.  The ``since`` column is
    checked for plausibility without the headers (never above our API floor, never decreasing).
  * ``ep_plugin/host_slots.def`` (the OrtApi slots an application calls: the C host test program and
    bench's C decode loop, with the extra types of ``ep_plugin/host_types.h``): checked exactly like
    ``ort_slots.def``.

Where the official headers come from
  Debian's ``libonnxruntime-dev`` 1.27.1+dfsg-1 (``experimental``, API 27), pinned by size and sha256
  (see the ABI reference, section 2).  It is downloaded at test time with a *private* apt
  configuration (the system's sources and lists are not touched), or straight from the Debian pool
  if apt is unavailable or fails, and extracted with ``dpkg-deb -x`` into
  ``${XDG_CACHE_HOME:-~/.cache}/onnxruntime-ep-seamless/ort-headers/`` (outside the repository, reused
  on later runs).  Nothing from the headers is ever written into the repository.  When the headers
  cannot be obtained (no network, no apt/dpkg-deb, checksum mismatch, ...) the header-dependent
  tests are SKIPPED with the reason.

The official header is preprocessed with empty stub standard headers (``gcc -E -P -nostdinc``) and
loaded, unchanged, into a separate ``cffi.FFI``: cffi already knows every standard type the header
uses (size_t, int64_t, uint32_t, bool, ...), so nothing is prepended and nothing is stripped (the one
top-level function declaration, ``OrtGetApiBase``, is accepted by ``cdef`` as is).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import urllib.request
from pathlib import Path

import pytest

cffi = pytest.importorskip("cffi")

REPO = Path(__file__).resolve().parents[2]
TYPES_H = REPO / "ep_plugin" / "ort_types.h"
SLOTS_DEF = REPO / "ep_plugin" / "ort_slots.def"
HOST_SLOTS_DEF = REPO / "ep_plugin" / "host_slots.def"
HOST_TYPES_H = REPO / "ep_plugin" / "host_types.h"
DEF_FILES = {SLOTS_DEF: (TYPES_H,), HOST_SLOTS_DEF: (TYPES_H, HOST_TYPES_H)}  # .def -> the types it uses

# Pinned source of the official headers (ABI reference, section 2).
DEB_PACKAGE = "libonnxruntime-dev"
DEB_VERSION = "1.27.1+dfsg-1"
DEB_SUITE = "experimental"
DEB_MIRROR = "http://deb.debian.org/debian"
DEB_FILE = "libonnxruntime-dev_1.27.1+dfsg-1_amd64.deb"
DEB_SIZE = 153_472
DEB_SHA256 = "521b439b4674dbd71da1d0bc3016f29075c6ad572f4a1c13beb011dee893f8f3"
DEB_POOL_URL = f"{DEB_MIRROR}/pool/main/o/onnxruntime/{DEB_FILE}"
OFFICIAL_API_VERSION = 27

# Lowest ORT API version the EP supports; no slot may be used ungated above it.
API_FLOOR = 23
POINTER_SIZE = 8  # slots are pointer-sized members; x86-64 / aarch64 LP64

# Structs that ort_types.h must define and that the official header defines too.
EXPECTED_SHARED_STRUCTS = {"OrtApiBase", "OrtNodeFusionOptions", "OrtNodeComputeInfo", "OrtEp", "OrtEpFactory",
                           "OrtAllocator", "OrtDataTransferImpl", "OrtSyncNotificationImpl", "OrtSyncStreamImpl",
                           "OrtCustomOp"}

# Reference values for API 27 (ABI reference, section 2).
REFERENCE_SLOTS = {
    ("OrtApi", None): 422,  # sizeof(OrtApi) / 8
    ("OrtEpApi", None): 73,  # sizeof(OrtEpApi) / 8
    ("OrtApi", "GetEpApi"): 317,
    ("OrtApi", "KernelContext_GetGPUComputeStream"): 193,
}

TABLES = {"ORT_API": "OrtApi", "ORT_EP_API": "OrtEpApi"}

SUBPROCESS_TIMEOUT_S = 120


# --------------------------------------------------------------------------------------------
# Our declarations (no network needed)
# --------------------------------------------------------------------------------------------

_SLOT_LINE = re.compile(
    r"^(?P<macro>ORT_API|ORT_EP_API)\(\s*(?P<slot>\d+)\s*,\s*(?P<since>\d+)\s*,\s*(?P<name>[A-Za-z_]\w*)\s*,"
    r"\s*(?P<ret>[^,()]+?)\s*,\s*(?P<params>\(.*\))\s*\)\s*$"
)


@functools.lru_cache(maxsize=None)
def parse_slots_def(path: Path = SLOTS_DEF) -> tuple[dict, ...]:
    """Every entry of a slots .def file; any non-comment line that does not parse fails loudly."""
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    entries = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("//", 1)[0].strip()
        if not line:
            continue
        m = _SLOT_LINE.match(line)
        if m is None:
            raise AssertionError(f"{path.name}:{lineno}: cannot parse line: {line!r}")
        entries.append(
            dict(
                lineno=lineno,
                table=TABLES[m["macro"]],
                slot=int(m["slot"]),
                since=int(m["since"]),
                name=m["name"],
                ret=m["ret"].strip(),
                params=m["params"],
            )
        )
    return tuple(entries)


def _entries(table: str, path: Path = SLOTS_DEF) -> list[dict]:
    return [e for e in parse_slots_def(path) if e["table"] == table]


def _struct_names_with_body(ffi) -> list[str]:
    _typedefs, structs, _unions = ffi.list_types()
    return sorted(s for s in structs if ffi.typeof(f"struct {s}").fields is not None)


@functools.lru_cache(maxsize=None)
def our_types_ffi():
    """ort_types.h alone."""
    ffi = cffi.FFI()
    ffi.cdef(TYPES_H.read_text(encoding="utf-8"))
    return ffi


@functools.lru_cache(maxsize=None)
def our_ffi(path: Path = SLOTS_DEF):
    """The .def file's headers plus one function-pointer typedef per entry (so cffi also parses those)."""
    ffi = cffi.FFI()
    for header in DEF_FILES[path]:
        ffi.cdef(header.read_text(encoding="utf-8"))
    lines = []
    for e in parse_slots_def(path):
        lines.append(f"typedef {e['ret']} (*_ort_slot_{e['table']}_{e['name']}){e['params']};")
    ffi.cdef("\n".join(lines))
    return ffi


def our_slot_type(table: str, name: str, path: Path = SLOTS_DEF):
    return our_ffi(path).typeof(f"_ort_slot_{table}_{name}")


def _our_defined_structs() -> list[str]:
    return _struct_names_with_body(our_types_ffi())


# --------------------------------------------------------------------------------------------
# Official headers (downloaded at test time; skipped when unavailable)
# --------------------------------------------------------------------------------------------


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "onnxruntime-ep-seamless" / "ort-headers"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 16), b""):
            h.update(chunk)
    return h.hexdigest()


def _verified(path: Path) -> str | None:
    """None if `path` is the pinned .deb, else why not."""
    if not path.is_file():
        return f"{path} missing"
    size = path.stat().st_size
    if size != DEB_SIZE:
        return f"{path.name}: size {size} != pinned {DEB_SIZE}"
    digest = _sha256(path)
    if digest != DEB_SHA256:
        return f"{path.name}: sha256 {digest} != pinned {DEB_SHA256}"
    return None


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, capture_output=True, text=True, encoding="utf-8", errors="replace", timeout=SUBPROCESS_TIMEOUT_S, **kw
    )


def _tail(proc: subprocess.CompletedProcess) -> str:
    return (proc.stderr or proc.stdout or "").strip()[-400:]


def _download_with_apt(workdir: Path) -> Path:
    """apt-get download with a private sources list, lists dir and cache (system apt state untouched)."""
    apt_get = shutil.which("apt-get")
    if apt_get is None:
        raise RuntimeError("apt-get not found")
    d = workdir / "apt"
    (d / "lists" / "partial").mkdir(parents=True)
    (d / "cache" / "archives" / "partial").mkdir(parents=True)
    (d / "sources.list").write_text(f"deb {DEB_MIRROR} {DEB_SUITE} main\n")
    opts = [
        "-o", f"Dir::Etc::sourcelist={d / 'sources.list'}",
        "-o", "Dir::Etc::sourceparts=-",
        "-o", f"Dir::State::Lists={d / 'lists'}",
        "-o", f"Dir::Cache={d / 'cache'}",
        "-o", "APT::Get::List-Cleanup=0",
        "-q",
    ]  # fmt: skip
    proc = _run([apt_get, *opts, "update"])
    if proc.returncode != 0:
        raise RuntimeError(f"apt-get update failed (rc={proc.returncode}): {_tail(proc)}")
    if not any(p.name.endswith("_Packages") or "_Packages." in p.name for p in (d / "lists").iterdir()):
        # apt-get update exits 0 when every index fetch failed; report its warnings instead
        raise RuntimeError(f"apt-get update fetched no package index: {_tail(proc)}")
    proc = _run([apt_get, *opts, "download", f"{DEB_PACKAGE}={DEB_VERSION}"], cwd=workdir)
    if proc.returncode != 0:
        raise RuntimeError(f"apt-get download failed (rc={proc.returncode}): {_tail(proc)}")
    debs = sorted(workdir.glob("*.deb"))
    if len(debs) != 1:
        raise RuntimeError(f"apt-get download produced {[p.name for p in debs]}")
    return debs[0]


def _download_from_pool(workdir: Path) -> Path:
    """Direct fetch of the pinned file from the Debian pool (integrity comes from the pinned sha256)."""
    out = workdir / "pool" / DEB_FILE
    out.parent.mkdir()
    with urllib.request.urlopen(DEB_POOL_URL, timeout=60) as resp, open(out, "wb") as f:
        shutil.copyfileobj(resp, f)
    return out


def _obtain_deb(cache_root: Path, reasons: list[str]) -> Path:
    cached = cache_root / DEB_FILE
    if _verified(cached) is None:
        return cached
    with tempfile.TemporaryDirectory(prefix="ort-deb-") as tmp:
        for method in (_download_with_apt, _download_from_pool):
            workdir = Path(tmp) / method.__name__
            workdir.mkdir()
            try:
                deb = method(workdir)
            except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
                reasons.append(f"{method.__name__}: {exc}")
                continue
            why = _verified(deb)
            if why is not None:
                reasons.append(f"{method.__name__}: {why}")
                continue
            partial = cache_root / (DEB_FILE + f".partial-{os.getpid()}")
            shutil.copyfile(deb, partial)
            os.replace(partial, cached)
            return cached
    raise RuntimeError("; ".join(reasons))


def _fetch_official_headers() -> Path:
    cache_root = _cache_root()
    dest = cache_root / f"{DEB_PACKAGE}_{DEB_VERSION}"
    include = dest / "usr" / "include" / "onnxruntime"
    marker = dest / ".extracted-sha256"

    def complete() -> bool:
        return (
            marker.is_file()
            and marker.read_text().strip() == DEB_SHA256
            and (include / "onnxruntime_c_api.h").is_file()
            and (include / "onnxruntime_ep_c_api.h").is_file()
        )

    if complete():
        return include
    cache_root.mkdir(parents=True, exist_ok=True)
    dpkg_deb = shutil.which("dpkg-deb")
    if dpkg_deb is None:
        raise RuntimeError("dpkg-deb not found (needed to unpack the .deb)")
    deb = _obtain_deb(cache_root, [])
    staging = Path(tempfile.mkdtemp(prefix=".extract-", dir=cache_root))
    try:
        proc = _run([dpkg_deb, "-x", str(deb), str(staging)])
        if proc.returncode != 0:
            raise RuntimeError(f"dpkg-deb -x failed (rc={proc.returncode}): {_tail(proc)}")
        (staging / ".extracted-sha256").write_text(DEB_SHA256 + "\n")
        if dest.exists() and not complete():
            shutil.rmtree(dest)
        try:
            os.rename(staging, dest)
        except OSError:
            if not complete():  # lost a race to a concurrent run only if that run finished
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not complete():
        raise RuntimeError(f"extraction did not produce {include}/onnxruntime_c_api.h")
    return include


@pytest.fixture(scope="session")
def ort_include_dir() -> Path:
    """Directory holding the official onnxruntime_c_api.h (API 27); skips when it cannot be obtained."""
    try:
        return _fetch_official_headers()
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        pytest.skip(
            f"official ORT headers ({DEB_PACKAGE} {DEB_VERSION} from Debian {DEB_SUITE}) unavailable: {exc}"
        )


@pytest.fixture(scope="session")
def official_cdef_text(ort_include_dir: Path, tmp_path_factory) -> str:
    """onnxruntime_c_api.h (+ the EP header it includes) preprocessed into plain C declarations."""
    cc = shutil.which("gcc") or shutil.which("cc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C preprocessor (gcc/cc/clang) to preprocess the official ORT header")
    work = tmp_path_factory.mktemp("ort-cpp")
    stubs = work / "stubs"
    stubs.mkdir()
    for header in ("stdbool.h", "stdint.h", "stdlib.h", "string.h", "stddef.h"):
        (stubs / header).write_text("")
    src = work / "ort.c"
    src.write_text('#include "onnxruntime_c_api.h"\n')
    proc = _run(
        [cc, "-E", "-P", "-nostdinc", f"-I{stubs}", f"-I{ort_include_dir}", "-D__attribute__(x)=", str(src)]
    )
    assert proc.returncode == 0, f"preprocessing the official header failed:\n{proc.stderr[-2000:]}"
    text = proc.stdout
    assert "struct OrtApi {" in text and "struct OrtEpApi {" in text, "preprocessed header lacks OrtApi/OrtEpApi"
    return text


@pytest.fixture(scope="session")
def official(official_cdef_text: str):
    """A separate FFI holding the official declarations, loaded unchanged."""
    ffi = cffi.FFI()
    ffi.cdef(official_cdef_text)
    return ffi


# --------------------------------------------------------------------------------------------
# Signature shapes
# --------------------------------------------------------------------------------------------


_SIZER = cffi.FFI()


def _shape(ctype, depth: int = 0):
    """ABI-relevant shape of a C type: what the two sides must agree on for calls to be correct.

    Integers/enums/bool compare by size (our enums are `int`), pointers compare by what they point
    to when that is a scalar or a pointer (an out-parameter is written with the pointee's size);
    pointers to structs, void or functions are all just "object pointers"."""
    kind = ctype.kind
    if kind == "void":
        return "void"
    if kind in ("primitive", "enum"):
        size = _SIZER.sizeof(ctype)
        return f"float{size}" if ctype.cname in ("float", "double", "long double") else f"int{size}"
    if kind in ("pointer", "array"):
        item = ctype.item
        if depth < 3 and item.kind in ("primitive", "enum", "pointer"):
            return ("ptr", _shape(item, depth + 1))
        return ("ptr", "obj")
    if kind == "function":
        return ("fn", _shape(ctype.result, depth), tuple(_shape(a, depth) for a in ctype.args), ctype.ellipsis)
    return kind  # struct/union by value: not used in this ABI


def _fn_shape(ctype):
    if ctype.kind == "pointer" and ctype.item.kind == "function":
        ctype = ctype.item
    return _shape(ctype) if ctype.kind == "function" else None


# --------------------------------------------------------------------------------------------
# Tests that need only our files
# --------------------------------------------------------------------------------------------


def test_ort_types_h_parses_and_defines_expected_structs():
    code = re.sub(r"/\*.*?\*/", "", TYPES_H.read_text(encoding="utf-8"), flags=re.S)
    assert "#" not in code, "ort_types.h must be preprocessor-free"
    defined = set(_our_defined_structs())
    missing = EXPECTED_SHARED_STRUCTS - defined
    assert not missing, f"ort_types.h does not define {sorted(missing)}"


def test_slots_def_parses_without_duplicates():
    entries = parse_slots_def()
    assert entries, "ort_slots.def has no entries"
    for table in TABLES.values():
        rows = _entries(table)
        assert rows, f"ort_slots.def has no {table} entries"
        slots = [e["slot"] for e in rows]
        names = [e["name"] for e in rows]
        assert len(set(slots)) == len(slots), f"{table}: duplicate slots {sorted(s for s in slots if slots.count(s) > 1)}"
        assert len(set(names)) == len(names), f"{table}: duplicate names {sorted(n for n in names if names.count(n) > 1)}"
    our_ffi()  # return types and parameter lists parse as C with our types


def test_host_slots_def_parses_without_duplicates():
    """The C host's slots: OrtApi only, no duplicates, all present at API 23 (the version it asks for)."""
    code = re.sub(r"/\*.*?\*/", "", HOST_TYPES_H.read_text(encoding="utf-8"), flags=re.S)
    assert "#" not in code, "host_types.h must be preprocessor-free"
    rows = parse_slots_def(HOST_SLOTS_DEF)
    assert rows and {e["table"] for e in rows} == {"OrtApi"}
    slots, names = [e["slot"] for e in rows], [e["name"] for e in rows]
    assert len(set(slots)) == len(slots) and len(set(names)) == len(names)
    assert all(1 <= e["since"] <= API_FLOOR for e in rows)
    our_ffi(HOST_SLOTS_DEF)


def test_since_versions_plausible():
    """No slot newer than our API floor is called without a gate (each call's line tests `g_api_version >= N`
    with N at least the slot's version), and `since` never decreases with slot number (tables are append-only, so
    a later slot cannot be older than an earlier one)."""
    problems = []
    sources = {p.name: p.read_text(encoding="utf-8") for p in sorted(SLOTS_DEF.parent.glob("*.c"))}
    for table in TABLES.values():
        rows = sorted(_entries(table), key=lambda e: e["slot"])
        for e in rows:
            if e["since"] < 1:
                problems.append(f"{table}[{e['slot']}] {e['name']}: since {e['since']} < 1")
            if e["since"] <= API_FLOOR:
                continue
            calls = [(name, line) for name, text in sources.items() for line in text.splitlines()
                     if re.search(rf"\bORT(?:_EP)?\({e['name']}\)", line)]
            if not calls:
                problems.append(f"{table}[{e['slot']}] {e['name']} (since {e['since']}): listed but never called")
            for name, line in calls:
                gates = [int(v) for v in re.findall(r"g_api_version\s*>=\s*(\d+)", line)]
                if not gates or max(gates) < e["since"]:
                    problems.append(f"{name}: {e['name']} (since {e['since']}) called without a version gate: "
                                    f"{line.strip()}")
        for prev, cur in zip(rows, rows[1:]):
            if cur["since"] < prev["since"]:
                problems.append(
                    f"{table}: {cur['name']} (slot {cur['slot']}, since {cur['since']}) is after "
                    f"{prev['name']} (slot {prev['slot']}, since {prev['since']})"
                )
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------------------------
# Tests against the official headers
# --------------------------------------------------------------------------------------------


def test_official_header_is_pinned_api_version(ort_include_dir: Path):
    text = (ort_include_dir / "onnxruntime_c_api.h").read_text(encoding="utf-8", errors="replace")
    m = re.search(r"^#define\s+ORT_API_VERSION\s+(\d+)\s*$", text, flags=re.M)
    assert m is not None and int(m.group(1)) == OFFICIAL_API_VERSION


def test_official_reference_values(official):
    for (struct, member), expected in REFERENCE_SLOTS.items():
        got = official.sizeof(struct) if member is None else official.offsetof(struct, member)
        what = f"sizeof({struct})" if member is None else f"offsetof({struct}, {member})"
        assert got % POINTER_SIZE == 0 and got // POINTER_SIZE == expected, f"{what}/8 = {got / 8}, expected {expected}"


@pytest.mark.parametrize("struct", _our_defined_structs())
def test_struct_layout(official, struct: str):
    if struct not in _struct_names_with_body(official):
        pytest.skip(f"struct {struct} is ours only (not defined in the official header)")
    ours = our_types_ffi()
    our_fields = ours.typeof(f"struct {struct}").fields
    off_fields = official.typeof(f"struct {struct}").fields
    problems = []
    off_by_name = dict(off_fields)
    for index, (name, field) in enumerate(our_fields):
        if name not in off_by_name:
            problems.append(f"member {name} does not exist in the official struct")
            continue
        off = off_by_name[name]
        if field.offset != off.offset:
            problems.append(f"offsetof({name}) = {field.offset}, official {off.offset}")
        if ours.sizeof(field.type) != official.sizeof(off.type):
            problems.append(f"sizeof({name}) = {ours.sizeof(field.type)}, official {official.sizeof(off.type)}")
        if index < len(off_fields) and off_fields[index][0] != name:
            problems.append(f"member #{index} is {name}, official {off_fields[index][0]}")
    our_names = [n for n, _ in our_fields]
    missing = [n for n, _ in off_fields if n not in our_names]
    if missing:
        problems.append(f"official members we do not declare: {missing}")
    if ours.sizeof(f"struct {struct}") != official.sizeof(f"struct {struct}"):
        problems.append(f"sizeof = {ours.sizeof(f'struct {struct}')}, official {official.sizeof(f'struct {struct}')}")
    assert not problems, f"struct {struct}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("struct", _our_defined_structs())
def test_struct_member_signatures(official, struct: str):
    if struct not in _struct_names_with_body(official):
        pytest.skip(f"struct {struct} is ours only (not defined in the official header)")
    off_by_name = dict(official.typeof(f"struct {struct}").fields)
    problems = []
    for name, field in our_types_ffi().typeof(f"struct {struct}").fields:
        if name not in off_by_name:
            continue  # reported by test_struct_layout
        ours, theirs = _fn_shape(field.type), _fn_shape(off_by_name[name].type)
        if ours != theirs:
            problems.append(f"{name}: ours {field.type.cname} {ours}\n    official {off_by_name[name].type.cname} {theirs}")
    assert not problems, f"struct {struct}:\n  " + "\n  ".join(problems)


def test_scalar_typedef_sizes(official):
    """Typedefs we declare as plain scalars (official enums declared as `int`) have the official size."""
    ours = our_types_ffi()
    official_typedefs = set(official.list_types()[0])
    problems, checked = [], 0
    for name in ours.list_types()[0]:
        t = ours.typeof(name)
        if t.kind not in ("primitive", "enum") or name not in official_typedefs:
            continue
        checked += 1
        if ours.sizeof(t) != official.sizeof(name):
            problems.append(f"{name}: sizeof {ours.sizeof(t)}, official {official.sizeof(name)}")
    assert checked, "no scalar typedef shared with the official header was found"
    assert not problems, "\n".join(problems)


_DEF_PARAMS = [pytest.param(path, id=path.name) for path in DEF_FILES]


@pytest.mark.parametrize("table", sorted(TABLES.values()))
@pytest.mark.parametrize("def_file", _DEF_PARAMS)
def test_slot_indices(official, table: str, def_file: Path):
    """ort_slots.def / host_slots.def: slot == offsetof(official table, Name) / 8, for every entry."""
    members = dict(official.typeof(f"struct {table}").fields)
    nslots = official.sizeof(table) // POINTER_SIZE
    problems = []
    for e in _entries(table, def_file):
        where = f"{def_file.name}:{e['lineno']} {table}[{e['slot']}] {e['name']}"
        if e["name"] not in members:
            problems.append(f"{where}: no member {e['name']} in the official {table}")
            continue
        offset = official.offsetof(table, e["name"])
        if offset % POINTER_SIZE or offset // POINTER_SIZE != e["slot"]:
            problems.append(f"{where}: official slot is {offset / POINTER_SIZE:g}")
        if e["slot"] >= nslots:
            problems.append(f"{where}: beyond the official table ({nslots} slots)")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("table", sorted(TABLES.values()))
@pytest.mark.parametrize("def_file", _DEF_PARAMS)
def test_slot_signatures(official, table: str, def_file: Path):
    """ort_slots.def / host_slots.def: return type and parameters have the official shape (arity, sizes,
    pointer levels)."""
    members = dict(official.typeof(f"struct {table}").fields)
    problems = []
    for e in _entries(table, def_file):
        if e["name"] not in members:
            continue  # reported by test_slot_indices
        ours_t, theirs_t = our_slot_type(table, e["name"], def_file), members[e["name"]].type
        ours, theirs = _fn_shape(ours_t), _fn_shape(theirs_t)
        if ours != theirs:
            problems.append(
                f"{def_file.name}:{e['lineno']} {e['name']}:\n    ours     {ours_t.cname} {ours}\n"
                f"    official {theirs_t.cname} {theirs}"
            )
    assert not problems, "\n".join(problems)
