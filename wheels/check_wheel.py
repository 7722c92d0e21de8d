"""Verify a built onnxruntime-ep-seamless wheel (the CPU distribution); wheels/build.sh runs it.

    python wheels/check_wheel.py WHEEL [--raw WHEEL_BEFORE_REPAIR] [--plat manylinux_2_28_x86_64]

Checks, each failure listed:
- file name: onnxruntime_ep_seamless-<version>-cp3X-cp3X-<plat>.whl for the running CPython;
- no symlinks; the three CPU libraries present, each once; no CUDA files (that is another distribution);
- every shared object: NEEDED only libc/libm/libdl/libpthread (never libpython, never libonnxruntime),
  every GLIBC symbol version <= the tag's glibc, SONAME = file name, no RPATH/RUNPATH;
- the shim exports exactly CreateEpFactories and ReleaseEpFactory; no object exports GetProvider;
- no Requires-Dist on onnxruntime (users keep their flavour);
- with --raw: auditwheel changed nothing but the tag (every file byte-identical except WHEEL and RECORD).
Needs pyelftools (installed with auditwheel).
"""
from __future__ import annotations

import argparse
import re
import stat
import sys
import sysconfig
import zipfile
from io import BytesIO

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

PKG = "onnxruntime_ep_seamless"
ALLOWED_NEEDED = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "ld-linux-x86-64.so.2"}  # all glibc
SHIM_EXPORTS = {"CreateEpFactories", "ReleaseEpFactory"}


DISTRIBUTIONS = {"cpu": PKG, "cu13": f"{PKG}_cu13"}  # flavor -> wheel file name prefix


def expected_libraries(flavor: str = "cpu") -> set[str]:
    ext = sysconfig.get_config_var("EXT_SUFFIX")
    libs = {f"{PKG}/libonnxruntime_ep_seamless_cpu.so", f"{PKG}/_seamless_ep_cpu{ext}", f"{PKG}/_native_cpu{ext}"}
    if flavor == "cu13":
        libs |= {f"{PKG}/libonnxruntime_ep_seamless_cuda.so", f"{PKG}/_seamless_ep_cuda{ext}", f"{PKG}/_cuda_args{ext}"}
    return libs


def elf_facts(data: bytes) -> dict:
    elf = ELFFile(BytesIO(data))
    facts = {"needed": [], "soname": None, "rpath": [], "glibc": set(), "exports": set()}
    for section in elf.iter_sections():
        if isinstance(section, DynamicSection):
            for tag in section.iter_tags():
                if tag.entry.d_tag == "DT_NEEDED":
                    facts["needed"].append(tag.needed)
                elif tag.entry.d_tag == "DT_SONAME":
                    facts["soname"] = tag.soname
                elif tag.entry.d_tag in ("DT_RPATH", "DT_RUNPATH"):
                    facts["rpath"].append(getattr(tag, "rpath", None) or getattr(tag, "runpath", None))
        elif isinstance(section, GNUVerNeedSection):
            for _verneed, auxiliaries in section.iter_versions():
                for aux in auxiliaries:
                    m = re.fullmatch(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?", aux.name)
                    if m:
                        facts["glibc"].add((int(m.group(1)), int(m.group(2))))
    dynsym = elf.get_section_by_name(".dynsym")
    for sym in dynsym.iter_symbols() if dynsym else ():
        if (sym["st_shndx"] != "SHN_UNDEF" and sym["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK")
                and sym["st_info"]["type"] == "STT_FUNC"):
            facts["exports"].add(sym.name)
    return facts


def check(wheel_path: str, raw_path: str | None, plat: str, flavor: str = "cpu") -> list[str]:
    problems = []
    name = wheel_path.rsplit("/", 1)[-1]
    cp = "cp%d%d" % sys.version_info[:2]
    dist = DISTRIBUTIONS[flavor]
    m = re.fullmatch(rf"{dist}-([0-9][^-]*)-{cp}-{cp}-{re.escape(plat)}\.whl", name)
    if not m:
        problems.append(f"file name {name!r} is not {dist}-<version>-{cp}-{cp}-{plat}.whl")
    glibc_max = tuple(int(p) for p in re.match(r"manylinux_(\d+)_(\d+)_", plat).groups())
    with zipfile.ZipFile(wheel_path) as zf:
        infos = zf.infolist()
        names = [i.filename for i in infos]
        links = {i.filename for i in infos if stat.S_ISLNK(i.external_attr >> 16)}
        for link in sorted(links):
            problems.append(f"{link} is a symlink")
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            problems.append(f"duplicate entries: {sorted(dupes)}")
        libraries = {n for n in names if n.endswith(".so") or ".so." in n}
        missing = expected_libraries(flavor) - libraries
        if missing:
            problems.append(f"missing libraries: {sorted(missing)}")
        extra = libraries - expected_libraries(flavor)
        if extra:
            problems.append(f"unexpected shared objects (grafted or from another variant): {sorted(extra)}")
        # the Python package is the same in every flavor; the CUDA libraries and kernels are not
        cuda = [n for n in names if "cuda" in n.lower() and not n.endswith((".py", "/"))]
        if flavor == "cpu" and cuda:
            problems.append(f"CUDA binaries in the CPU distribution: {cuda}")
        if flavor == "cu13" and f"{PKG}/_kernels_cuda.fatbin" not in names:
            problems.append("the CUDA kernels (_kernels_cuda.fatbin) are missing")
        for lib in sorted(libraries - links):
            base = lib.rsplit("/", 1)[-1]
            try:
                facts = elf_facts(zf.read(lib))
            except ELFError as exc:
                problems.append(f"{base}: not a readable ELF file ({exc})")
                continue
            bad = [n for n in facts["needed"] if n not in ALLOWED_NEEDED]
            if bad:
                problems.append(f"{base}: links {bad} (only {sorted(ALLOWED_NEEDED)} are allowed)")
            too_new = sorted(v for v in facts["glibc"] if v > glibc_max)
            if too_new:
                problems.append(f"{base}: needs GLIBC {', '.join('%d.%d' % v for v in too_new)} "
                                f"(> {glibc_max[0]}.{glibc_max[1]} of {plat})")
            if facts["soname"] != base:
                problems.append(f"{base}: SONAME is {facts['soname']!r}, not the file name")
            if facts["rpath"]:
                problems.append(f"{base}: has RPATH/RUNPATH {facts['rpath']}")
            if "GetProvider" in facts["exports"]:
                problems.append(f"{base}: exports GetProvider (ORT would treat it as a provider-bridge EP)")
            if base.startswith("libonnxruntime_ep_seamless_") and facts["exports"] != SHIM_EXPORTS:
                problems.append(f"{base}: exports {sorted(facts['exports'])}, expected {sorted(SHIM_EXPORTS)}")
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
        if any(re.match(r"Requires-Dist:\s*onnxruntime", r, re.I) and "extra ==" not in r for r in requires):
            problems.append(f"depends on onnxruntime ({requires}): users keep their own flavour")
        if flavor == "cu13" and not any(re.match(r"Requires-Dist:\s*nvidia-cublas", r) for r in requires):
            problems.append(f"the CUDA distribution does not depend on nvidia-cublas ({requires})")
        if flavor == "cu13" and not any(re.match(r"Requires-Dist:\s*cuda-python.*extra == .kernels.", r)
                                        for r in requires):
            problems.append(f"the CUDA distribution has no [kernels] extra with cuda-python ({requires})")
        if raw_path:
            with zipfile.ZipFile(raw_path) as raw:
                raw_names = {i.filename for i in raw.infolist() if not i.filename.endswith("/")}
                files = {n for n in names if not n.endswith("/")}  # auditwheel adds directory entries
                if raw_names != files:
                    problems.append(f"repair changed the file list: added {sorted(files - raw_names)}, "
                                    f"removed {sorted(raw_names - files)}")
                for n in sorted(raw_names & files):
                    if n.endswith((".dist-info/WHEEL", ".dist-info/RECORD")):
                        continue
                    if raw.read(n) != zf.read(n):
                        problems.append(f"repair changed the content of {n}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("wheel")
    parser.add_argument("--raw", help="the wheel before auditwheel repair")
    parser.add_argument("--plat", default="manylinux_2_28_x86_64")
    parser.add_argument("--flavor", choices=sorted(DISTRIBUTIONS), default="cpu")
    args = parser.parse_args()
    problems = check(args.wheel, args.raw, args.plat, args.flavor)
    for p in problems:
        print(f"check_wheel: PROBLEM: {p}", file=sys.stderr)
    if problems:
        return 1
    print(f"check_wheel: OK: {args.wheel.rsplit('/', 1)[-1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
