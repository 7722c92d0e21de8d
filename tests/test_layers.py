"""The import rules between the package's layers (docs/architecture.md, "Layers"): each layer imports only the
layers below it, so the pipeline reads bottom-up and no import circle can form between layers."""
import ast
from pathlib import Path

import onnxruntime_ep_seamless

PACKAGE = Path(onnxruntime_ep_seamless.__file__).parent
NAME = PACKAGE.name
BELOW = {  # layer -> the layers it may import (besides itself)
    "graph": set(),
    "runtime": {"graph", "native"},
    "kernels": {"graph", "runtime", "native"},
    "plan": {"graph", "kernels"},
    "partition": {"graph", "kernels"},
    "exec": {"graph", "runtime", "kernels", "plan"},
    "abi": {"graph", "runtime", "kernels", "plan", "partition", "exec", "package"},
    "package": {"graph", "runtime", "kernels", "plan", "partition", "exec", "abi"},  # __init__: the public API
    "tools": {"graph", "runtime", "kernels", "plan", "partition", "exec", "abi", "package", "native", "demo"},
    "__main__": {"tools"},
}


def layer_of(module: str) -> str:
    """The layer of a dotted module name under the package: its first component below the package."""
    parts = module.split(".")
    if len(parts) == 1:
        return "package"
    if parts[1] in ("_native_cpu", "_cuda_args") or parts[1].startswith("_seamless_ep_"):  # the compiled modules
        return "native"
    return parts[1] if (PACKAGE / parts[1]).is_dir() or (PACKAGE / f"{parts[1]}.py").is_file() else "package"


def imports(path: Path):
    """(importing module, imported module) for every import of the package in a file, function bodies included."""
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
    package = module if rel.name == "__init__" else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            if target.split(".")[0] == NAME:
                for alias in node.names:  # `from . import x`: x may be a module
                    yield module, f"{target}.{alias.name}" if target.count(".") == 0 else target
        elif isinstance(node, ast.Import):
            yield from ((module, a.name) for a in node.names if a.name.split(".")[0] == NAME)


def edges():
    return {(m, t) for path in PACKAGE.rglob("*.py") for m, t in imports(path)}


def test_each_layer_imports_only_layers_below_it():
    found = edges()
    assert ("onnxruntime_ep_seamless.exec.compute", "onnxruntime_ep_seamless.plan.planner") in found  # the scan works
    wrong = sorted(f"{m} imports {t}" for m, t in found
                   if layer_of(m) != layer_of(t) and layer_of(t) not in BELOW[layer_of(m)])
    assert not wrong, "\n".join(wrong)


def test_cpu_kernels_do_not_import_cuda_kernels():
    wrong = sorted(f"{m} imports {t}" for m, t in edges()
                   if m.startswith(f"{NAME}.kernels.cpu") and t.startswith(f"{NAME}.kernels.cuda"))
    assert not wrong, "\n".join(wrong)


def test_no_module_imports_another_modules_private_names():
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(NAME)):
                names = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")
                         and layer_of(f"{NAME}.{a.name}") != "native"]  # compiled modules are not private
                if names:
                    wrong.append(f"{path.relative_to(PACKAGE)}: {', '.join(names)}")
    assert not wrong, "\n".join(wrong)
