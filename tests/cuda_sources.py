"""The CUDA kernels as their sources declare them (native/cuda/*.cu), for the tests that check them without a GPU or
nvcc: each file's text with its own function-like macros (and common.cuh's FOR_FLOATS) expanded, so that a kernel an
instantiating macro declares (`seamless_copy_##BYTES`, `FOR_FLOATS(BINARY)`) is seen under its real name."""
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "native" / "cuda").glob("*.cu"))
KERNEL = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)')
_DEFINE = re.compile(r"^#define (\w+)\(([^)]*)\)[ \t]*((?:.*\\\n)*.*)$", re.M)


def _macros(text: str) -> dict:
    """name -> (parameters, body) of the text's function-like macros."""
    return {m.group(1): ([p.strip() for p in m.group(2).split(",")], m.group(3).replace("\\\n", "\n"))
            for m in _DEFINE.finditer(text)}


def _arguments(text: str, start: int) -> tuple[list[str], int]:
    """The comma-separated arguments of the call whose '(' is at start, and the index past its ')'."""
    depth, args, begin = 0, [], start + 1
    for i in range(start, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return [a.strip() for a in args + [text[begin:i]]], i + 1
        elif text[i] == "," and depth == 1:
            args.append(text[begin:i])
            begin = i + 1
    raise ValueError(f"unbalanced macro call at {text[start - 20:start + 20]!r}")


def expanded(path: Path) -> str:
    """path's text, its #define lines left out and its macros' calls replaced by their bodies, until none is left."""
    text = path.read_text()
    common = _macros((ROOT / "native" / "cuda" / "common.cuh").read_text())
    macros = {**_macros(text), "FOR_FLOATS": common["FOR_FLOATS"]}
    code = _DEFINE.sub("", text)
    call = re.compile(r"\b(" + "|".join(map(re.escape, macros)) + r")\(")
    for _ in range(10000):  # one call a pass: a file has up to a few hundred, nested a few levels deep
        match = call.search(code)
        if not match:
            return code
        params, body = macros[match.group(1)]
        args, end = _arguments(code, match.end() - 1)
        for param, arg in zip(params, args):
            body = re.sub(r"\b" + re.escape(param) + r"\b", arg, body)
        code = code[:match.start()] + re.sub(r"\s*##\s*", "", body) + code[end:]
    raise ValueError(f"{path.name}: macros still unexpanded after 10000 calls")


def kernel_names() -> set[str]:
    return set(kernel_parameters())


_SIGNATURE = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\s*\(([^)]*)\)')
_SCALAR_KINDS = {"int64": {"int64_t"}, "int": {"int", "int32_t", "unsigned"}, "float": {"float"}}
_SCALARS = set().union(*_SCALAR_KINDS.values())


@functools.cache
def kernel_parameters() -> dict[str, list[str]]:
    """Kernel name -> its parameters' types as declared ("const float*", "int64_t", "MoeWeights"); read once (callers
    do not change it)."""
    found = {}
    for path in SOURCES:
        for name, params in _SIGNATURE.findall(" ".join(expanded(path).split())):
            found[name] = [p.strip().rsplit(" ", 1)[0].replace(" *", "*") for p in params.split(",") if p.strip()]
    return found


def launch_mismatches(name: str, args, sizeof) -> list[str]:
    """How a launch's arguments (runtime/cuda.py: ("int64"|"int"|"float"|"ptr"|"bytes", value)) differ from the
    kernel's parameters: their count, or an argument of another kind than its parameter (a struct's by its size,
    sizeof(type name))."""
    declared = kernel_parameters().get(name)
    if declared is None:
        return [f"{name}: no such kernel in native/cuda"]
    if len(args) != len(declared):
        return [f"{name}: {len(args)} arguments for {len(declared)} parameters {declared}"]
    wrong = []
    for i, ((kind, value), ctype) in enumerate(zip(args, declared)):
        if kind == "ptr":
            ok = ctype.endswith("*")
        elif kind == "bytes":
            ok = not ctype.endswith("*") and ctype not in _SCALARS and sizeof(ctype) == len(value)
        else:
            ok = ctype in _SCALAR_KINDS[kind]
        if not ok:
            wrong.append(f"{name}: argument {i} is {kind}, its parameter {ctype}")
    return wrong
