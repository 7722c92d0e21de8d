"""numpy's data allocator while our EP runs Python (runtime/numpy_memory.py, native/cpu/numpy_memory.c): our
handler's layout and numpy's C API slot checked against the installed numpy's headers (a C file of static asserts
compiled here; nothing of numpy's enters the repository), and at run time every array a kernel makes inside the
EP comes from our handler (Python runs and a native program's Python steps alike) while the application's thread
keeps numpy's own before and after."""
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxruntime_ep_seamless as seamless
from onnxruntime_ep_seamless.runtime import numpy_memory
from parity import ep_session

KERNELS_H = Path(__file__).resolve().parents[2] / "native" / "cpu" / "kernels.h"
OURS = "onnxruntime_ep_seamless"


def _numpy_include() -> Path:
    return Path(np.get_include())


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc to compile the layout checks")
def test_handler_layout_and_api_slot_match_numpys_headers(tmp_path):
    text = KERNELS_H.read_text()
    ours = re.search(r"typedef struct \{\s*void\* ctx;.*?\} SeamlessNumpyHandler;", text, re.S).group(0)
    fields = {"SeamlessNumpyAllocator": ("PyDataMemAllocator", ["ctx", "malloc", "calloc", "realloc", "free"]),
              "SeamlessNumpyHandler": ("PyDataMem_Handler", ["name", "version", "allocator"])}
    lines = ["#define PY_SSIZE_T_CLEAN", "#include <Python.h>", "#define NPY_NO_DEPRECATED_API NPY_API_VERSION",
             "#include <numpy/arrayobject.h>", "#include <stddef.h>", ours]
    for mine, (theirs, members) in fields.items():
        lines.append(f'_Static_assert(sizeof({mine}) == sizeof({theirs}), "{mine} size");')
        for m in members:
            lines.append(f"_Static_assert(offsetof({mine}, {m}) == offsetof({theirs}, {m}) && "
                         f"sizeof((({mine}*)0)->{m}) == sizeof((({theirs}*)0)->{m}), \"{mine}.{m}\");")
            if m not in ("name", "version", "allocator"):
                lines.append(f"_Static_assert(__builtin_types_compatible_p(__typeof__((({mine}*)0)->{m}), "
                             f"__typeof__((({theirs}*)0)->{m})), \"{mine}.{m} type\");")
    lines.append("void* slot_expansion(void) { return (void*)&PyDataMem_SetHandler; }")
    source = tmp_path / "check.c"
    source.write_text("\n".join(lines) + "\n")
    include = ["-I", sysconfig.get_paths()["include"], "-I", str(_numpy_include())]
    compiled = subprocess.run(["gcc", "-std=gnu11", "-fsyntax-only", *include, str(source)], capture_output=True,
                              text=True)
    assert compiled.returncode == 0, compiled.stderr[-3000:]
    expanded = subprocess.run(["gcc", "-E", "-P", *include, str(source)], capture_output=True, text=True, check=True)
    line = next(l for l in expanded.stdout.splitlines() if "slot_expansion" in l)
    assert re.search(r"PyArray_API\[(\d+)\]", line).group(1) == str(numpy_memory.SET_HANDLER_SLOT), line


def test_arrays_made_inside_the_ep_come_from_our_handler():
    seen = []

    def relu(x):
        big = np.empty(1 << 21, np.float32)  # 8 MB: numpy's own allocator would advise huge pages
        seen.append((numpy_memory.handler_name(), numpy_memory.handler_name(big)))
        return np.maximum(x, 0)

    seamless.register_kernel("Relu", relu)
    try:
        graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "x"], ["y"])],
                                  "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        sess = ep_session(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                            ir_version=9).SerializeToString())
        assert not seamless.assert_ep_selected(sess).fallback_nodes
        before = numpy_memory.handler_name()
        x = np.linspace(-1, 1, 8, dtype=np.float32)
        for _ in range(5):  # Python runs, the recording run, then the native program's Python step
            (y,) = sess.run(None, {"x": x})
            np.testing.assert_array_equal(y, np.maximum(x, 0) + x)
            assert numpy_memory.handler_name() == before != OURS  # the caller's context: numpy's own again
    finally:
        seamless.unregister_kernel("Relu", relu)
    assert len(seen) == 5 and all(names == (OURS, OURS) for names in seen), seen
