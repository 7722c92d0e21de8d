"""String tensors (numpy object arrays of str): StringConcat, StringSplit, StringNormalizer, RegexFullMatch,
and ai.onnx.ml's LabelEncoder. Equal and the data-movement ops that take strings say so where they register."""
import operator
import re

import numpy as np

from ...graph.ir import STRING, string_array
from ..checks import InvalidArgument
from ..registry import kernel
from .ml import ML

STRINGS = frozenset([STRING])
TAKES_STRINGS = ("strings",)


_concat = np.frompyfunc(operator.add, 2, 1)


@kernel("StringConcat", since=20, types=STRINGS, takes=TAKES_STRINGS)
def string_concat(x, y):
    return (np.asarray(_concat(x, y), STRING),)


def _split_on_spaces(s: str, maxsplit: int) -> list[str]:
    # as stock: runs of ' ' (only that character) separate, none at either end; the piece after the last split
    # allowed loses its trailing spaces
    pieces, pos = [], len(s) - len(s.lstrip(" "))
    while pos < len(s):
        if len(pieces) == maxsplit:
            pieces.append(s[pos:].rstrip(" "))
            break
        end = s.find(" ", pos)
        if end < 0:
            pieces.append(s[pos:])
            break
        pieces.append(s[pos:end])
        pos = end + len(s[end:]) - len(s[end:].lstrip(" "))
    return pieces


@kernel("StringSplit", since=20, types=STRINGS, takes=TAKES_STRINGS)
def string_split(x, *, delimiter="", maxsplit=None):
    limit = -1 if maxsplit is None or maxsplit < 0 else maxsplit  # negative: no limit, as stock
    # an empty string has no pieces (str.split would give one)
    pieces = [[] if not s else s.split(delimiter, limit) if delimiter else _split_on_spaces(s, limit)
              for s in x.reshape(-1)]
    counts = np.array([len(p) for p in pieces], np.int64).reshape(x.shape)
    width = max((len(p) for p in pieces), default=0)
    padded = [s for p in pieces for s in p + [""] * (width - len(p))]
    return string_array(padded, x.shape + (width,)), counts


def check_string_normalizer(node, graph):
    action = node.attrs.get("case_change_action", "NONE")
    if action not in ("NONE", "LOWER", "UPPER"):
        return f"case_change_action {action!r} is not NONE, LOWER or UPPER"
    locale = node.attrs.get("locale", "")
    if locale and not locale.startswith("en"):  # Python's case mapping is the Unicode default, as en_US's
        return f"locale {locale!r}: only the default (en_US) case mapping"
    return None


@kernel("StringNormalizer", since=10, types=STRINGS, check=check_string_normalizer, takes=TAKES_STRINGS)
def string_normalizer(x, *, case_change_action="NONE", is_case_sensitive=0, locale="", stopwords=()):
    if not (x.ndim == 1 or (x.ndim == 2 and x.shape[0] == 1)) or x.shape[-1] == 0:
        raise InvalidArgument("Input dimensions are either[C > 0] or [1][C > 0] allowed")
    if is_case_sensitive:
        stop = set(stopwords)
        kept = [s for s in x.reshape(-1) if s not in stop]
    else:
        stop = {w.lower() for w in stopwords}
        kept = [s for s in x.reshape(-1) if s.lower() not in stop]
    if case_change_action == "LOWER":
        kept = [s.lower() for s in kept]
    elif case_change_action == "UPPER":
        kept = [s.upper() for s in kept]
    if not kept:  # every element dropped: one empty string, as the spec says
        kept = [""]
    return (string_array(kept, (len(kept),) if x.ndim == 1 else (1, len(kept))),)


def _compile_pattern(pattern: str):
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise InvalidArgument(f"Invalid regex pattern: {pattern} ({exc})") from exc


def validate_regex(node, graph):
    _compile_pattern(node.attrs.get("pattern", ""))


@kernel("RegexFullMatch", since=20, types=STRINGS, validate=validate_regex, takes=TAKES_STRINGS)
def regex_full_match(x, *, pattern=""):
    matcher = _compile_pattern(pattern).fullmatch
    return (np.array([matcher(s) is not None for s in x.reshape(-1)], np.bool_).reshape(x.shape),)


# --- LabelEncoder (ai.onnx.ml) -------------------------------------------------------------------

_DTYPES = {"strings": STRING, "int64s": np.dtype(np.int64), "floats": np.dtype(np.float32)}


def _label_table(attrs: dict, role: str):
    """keys or values: (list of Python values, their dtype) from keys_* / values_* or *_tensor."""
    tensor = attrs.get(f"{role}_tensor")
    if tensor is not None:
        return tensor.reshape(-1).tolist(), tensor.dtype
    for suffix, dtype in _DTYPES.items():
        if f"{role}_{suffix}" in attrs:
            return list(attrs[f"{role}_{suffix}"]), dtype
    return None, None


def check_label_encoder(node, graph):
    keys, key_type = _label_table(node.attrs, "keys")
    values, value_type = _label_table(node.attrs, "values")
    if keys is None or values is None:
        return "LabelEncoder needs keys and values"
    if len(keys) != len(values):
        return "LabelEncoder's keys and values differ in length"
    x, y = graph.value(node.inputs[0]).dtype, graph.value(node.outputs[0]).dtype
    if x != key_type or y != value_type:
        return f"keys of {key_type} and values of {value_type} do not match the input {x} and output {y}"
    return None


def _label_encode(x, attrs: dict, default_values: tuple, nan_key: bool):
    keys, _ = _label_table(attrs, "keys")
    values, value_type = _label_table(attrs, "values")
    # float keys: -0.0 and 0.0 are one key; NaN finds NaN from opset 4 on (stock's map), before that nothing
    nan = object()
    key = (lambda v: nan if v != v else v) if nan_key else (lambda v: v)
    table = {key(k): v for k, v in zip(keys, values)}
    default_string, default_int64, default_float, default_tensor = default_values
    if default_tensor is not None:
        default = default_tensor.reshape(-1)[0]
    else:
        default = {STRING: default_string, np.dtype(np.int64): default_int64}.get(value_type, default_float)
    if x.dtype.kind == "f":
        items = [table.get(key(float(v)), default) for v in x.reshape(-1)]
    else:
        items = [table.get(v, default) for v in x.reshape(-1).tolist()]
    if value_type == STRING:
        return (string_array(items, x.shape),)
    return (np.array(items, value_type).reshape(x.shape),)


@kernel("LabelEncoder", domain=ML, since=1, until=3, check=check_label_encoder, takes=TAKES_STRINGS)
def label_encoder_1(x, *, keys_strings=None, keys_int64s=None, keys_floats=None, values_strings=None,
                    values_int64s=None, values_floats=None, default_string="_Unused", default_int64=-1,
                    default_float=-0.0):
    attrs = {k: v for k, v in locals().items() if k.startswith(("keys_", "values_")) and v is not None}
    return _label_encode(x, attrs, (default_string, default_int64, default_float, None), nan_key=False)


@kernel("LabelEncoder", domain=ML, since=4, check=check_label_encoder, takes=TAKES_STRINGS)
def label_encoder_4(x, *, keys_strings=None, keys_int64s=None, keys_floats=None, keys_tensor=None,
                    values_strings=None, values_int64s=None, values_floats=None, values_tensor=None,
                    default_string="_Unused", default_int64=-1, default_float=-0.0, default_tensor=None):
    attrs = {k: v for k, v in locals().items() if k.startswith(("keys_", "values_")) and v is not None}
    return _label_encode(x, attrs, (default_string, default_int64, default_float, default_tensor), nan_key=True)
