"""Our own graph IR: what the EP keeps of an OrtGraph after the callback returns."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# Element type (ORT's ONNXTensorElementDataType, what the graph walk reports) -> numpy dtype, for the
# types the numpy executor can hold. It equals ONNX's TensorProto.DataType up to 23 (float4e2m1);
# after that ORT numbers uint2, int2, float8e8m0 as 24, 25, 26 and TensorProto as 25, 26, 24.
ONNX_TO_NUMPY = {
    1: np.dtype(np.float32), 2: np.dtype(np.uint8), 3: np.dtype(np.int8), 4: np.dtype(np.uint16),
    5: np.dtype(np.int16), 6: np.dtype(np.int32), 7: np.dtype(np.int64), 9: np.dtype(np.bool_),
    10: np.dtype(np.float16), 11: np.dtype(np.float64), 12: np.dtype(np.uint32), 13: np.dtype(np.uint64),
}
PACKED_BITS: dict = {}  # sub-byte dtype -> bits per element; ORT packs these, lowest bits first
EXOTIC_TYPES = range(16, 27)  # bfloat16, the 8-bit floats, the sub-byte types: ml_dtypes arrays (load_exotic_types)
FLOAT8_TYPES = frozenset((17, 18, 19, 20))  # the 8-bit floats but float8e8m0 (26)


def load_exotic_types() -> bool:
    """Registers the EXOTIC_TYPES as ml_dtypes arrays (as onnx holds them) on the first graph or value that has one:
    importing ml_dtypes takes ~0.5 s, which a session of plain types should not pay. Without ml_dtypes nodes using
    them are declined (False)."""
    if 16 in ONNX_TO_NUMPY:
        return True
    try:
        import ml_dtypes
    except ImportError:
        return False
    ONNX_TO_NUMPY.update({16: np.dtype(ml_dtypes.bfloat16), 17: np.dtype(ml_dtypes.float8_e4m3fn),
                          18: np.dtype(ml_dtypes.float8_e4m3fnuz), 19: np.dtype(ml_dtypes.float8_e5m2),
                          20: np.dtype(ml_dtypes.float8_e5m2fnuz), 21: np.dtype(ml_dtypes.uint4),
                          22: np.dtype(ml_dtypes.int4), 23: np.dtype(ml_dtypes.float4_e2m1fn),
                          24: np.dtype(ml_dtypes.uint2), 25: np.dtype(ml_dtypes.int2),
                          26: np.dtype(ml_dtypes.float8_e8m0fnu)})
    PACKED_BITS.update({ONNX_TO_NUMPY[t]: bits for t, bits in ((21, 4), (22, 4), (23, 4), (24, 2), (25, 2))})
    NUMPY_TO_ONNX.update({ONNX_TO_NUMPY[t]: t for t in EXOTIC_TYPES})
    return True


def exotic(dtype) -> bool:
    """Whether dtype is one of the EXOTIC_TYPES (an array of one means they were loaded)."""
    return NUMPY_TO_ONNX.get(dtype) in EXOTIC_TYPES


def exotic_dtypes() -> list:
    """The EXOTIC_TYPES' dtypes, loaded (none without ml_dtypes)."""
    load_exotic_types()
    return [ONNX_TO_NUMPY[t] for t in EXOTIC_TYPES if t in ONNX_TO_NUMPY]


# strings: numpy object arrays of Python str (ORT's UTF-8 bytes decoded), as onnxruntime's Python API gives them
STRING = np.dtype(object)
ONNX_TO_NUMPY[8] = STRING


def string_array(items, shape) -> np.ndarray:
    """An object array of str of the given shape (np.array would make nested sequences into more axes)."""
    out = np.empty(len(items), STRING)
    out[:] = items
    return out.reshape(shape)
NUMPY_TO_ONNX = {v: k for k, v in ONNX_TO_NUMPY.items()}
ONNX_TYPE_NAMES = {
    0: "undefined", 1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
    8: "string", 9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 14: "complex64",
    15: "complex128", 16: "bfloat16", 17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2",
    20: "float8e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4e2m1", 24: "uint2", 25: "int2", 26: "float8e8m0",
}
_PROTO_TO_ORT = {24: 26, 25: 24, 26: 25}


def element_dtype(elem: int) -> np.dtype | None:
    """The numpy dtype of ORT's element type (the EXOTIC_TYPES loaded when asked for), or None."""
    if elem in EXOTIC_TYPES:
        load_exotic_types()
    return ONNX_TO_NUMPY.get(elem)


def attr_dtype(data_type: int) -> np.dtype | None:
    """The numpy dtype of a TensorProto.DataType given in an attribute (Cast's `to`, ...), or None."""
    return element_dtype(_PROTO_TO_ORT.get(data_type, data_type))


def unpack(raw: np.ndarray, dtype: np.dtype, shape: tuple) -> np.ndarray:
    """ORT's packed bytes of a sub-byte type (PACKED_BITS) as an array of one element per byte."""
    bits = PACKED_BITS[dtype]
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    codes = (raw.reshape(-1, 1) >> shifts) & np.uint8((1 << bits) - 1)
    return codes.reshape(-1)[:int(np.prod(shape))].view(dtype).reshape(shape)


def c_order(array) -> np.ndarray:
    """A C-contiguous array of the same shape (np.ascontiguousarray would turn 0-d into 1-d)."""
    array = np.asarray(array)
    return array if array.flags.c_contiguous else array.copy()


def pack(array: np.ndarray) -> np.ndarray:
    """The inverse of unpack: the bytes ORT holds for a sub-byte array (uint8, ceil(n * bits / 8))."""
    bits = PACKED_BITS[array.dtype]
    per = 8 // bits
    codes = np.zeros(-(-array.size // per) * per, np.uint8)
    codes[:array.size] = array.reshape(-1).view(np.uint8) & np.uint8((1 << bits) - 1)
    return np.bitwise_or.reduce(codes.reshape(-1, per) << np.arange(0, 8, bits, dtype=np.uint8), axis=1)

# An attribute value the EP does not read (GRAPH, or strings ORT cannot give): nodes carrying one are declined.
UNREADABLE = type("Unreadable", (), {"__repr__": lambda self: "<unreadable attribute>"})()


@dataclass
class Value:
    """A value: a tensor's element type (ONNX numbering, 0 = not a tensor/unknown) and shape, or, when container
    is set, those of the tensors a sequence or an optional holds.

    shape is None when the rank is unknown; each dim is an int, a symbol name, or None."""
    name: str
    elem_type: int = 0
    shape: tuple | None = None
    const: np.ndarray | None = None  # constant initializer data, copied at Compile
    container: str = ""  # "sequence", "optional", "optional sequence"; "" for a tensor

    @property
    def dtype(self) -> np.dtype | None:
        """A tensor's numpy dtype (None for a container or a type numpy cannot hold)."""
        return None if self.container else ONNX_TO_NUMPY.get(self.elem_type)

    @property
    def element_dtype(self) -> np.dtype | None:
        """The dtype of the tensor itself, or of the tensors a container holds."""
        return ONNX_TO_NUMPY.get(self.elem_type)

    @property
    def type_name(self) -> str:
        name = ONNX_TYPE_NAMES.get(self.elem_type, f"type{self.elem_type}")
        return f"{self.container} of {name}" if self.container else name


@dataclass
class Node:
    name: str
    op_type: str
    domain: str          # "" for the ONNX domain
    since_version: int
    inputs: list[str]    # "" marks an absent optional input
    outputs: list[str]
    attrs: dict = field(default_factory=dict)  # a graph attribute (If's branches, a Loop's body): its Graph
    implicit: int = 0    # the last `implicit` inputs are outer values its subgraphs read (ORT's implicit inputs)
    index: int = 0       # position in the graph's topological order

    @property
    def subgraphs(self) -> dict:
        """Its graph attributes: name -> Graph."""
        return {k: v for k, v in self.attrs.items() if isinstance(v, Graph)}

    @property
    def label(self) -> str:
        """For messages: the node's name, or its op and position when the model left it unnamed."""
        return self.name or f"<unnamed {self.op_type} #{self.index}>"

    @property
    def key(self) -> str:
        return f"{self.domain}::{self.op_type}" if self.domain else self.op_type


@dataclass
class Graph:
    nodes: list[Node]
    values: dict[str, Value]
    inputs: list[str]
    outputs: list[str]
    initializers: list[str] = field(default_factory=list)
    # the node whose subgraph this graph is (If, Loop, Scan), with all its subgraphs: a graph of that one node
    parent: Graph | None = None

    def value(self, name: str) -> Value:
        return self.values.get(name) or Value(name)

    def outer_reads(self) -> list[str]:
        """The values the graph (its nested graphs included) reads from enclosing scopes: a subgraph's."""
        own = set(self.inputs) | set(self.initializers) | {o for n in self.nodes for o in n.outputs}
        reads = [v for n in self.nodes for v in n.inputs if v] + list(self.outputs)
        return list(dict.fromkeys(v for v in reads if v not in own))
