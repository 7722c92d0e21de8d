"""Constant tensors of compiled plans, so kernels may cache work derived from them
(e.g. GEMM weights packed once instead of on every run).

Only arrays the planner marked are cached: a graph input's view is reused across runs while
its memory changes, so identity alone would not be safe.
"""
import weakref

_constants: dict[int, weakref.ref] = {}
_derived: dict[tuple[int, str], object] = {}


def mark(array) -> None:
    key = id(array)

    def forget(_, key=key):
        _constants.pop(key, None)
        for k in [k for k in _derived if k[0] == key]:
            _derived.pop(k, None)
    _constants[key] = weakref.ref(array, forget)


def is_constant(array) -> bool:
    ref = _constants.get(id(array))
    return ref is not None and ref() is array


def derived(array, name: str, fn):
    """fn(array), computed once per constant array (every time for anything else)."""
    if not is_constant(array):
        return fn(array)
    key = (id(array), name)
    value = _derived.get(key)
    if value is None:
        value = _derived[key] = fn(array)
    return value
