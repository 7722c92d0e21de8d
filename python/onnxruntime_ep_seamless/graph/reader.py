"""Parse the C glue's graph dump (ep_plugin/glue.c, seamless_dump_graph) into our IR.

Format (little-endian): i32 has_fused, [fused inputs, fused outputs], i32 has_parent, [the node whose subgraph
the graph is], then the graph's body: inputs, outputs, initializers, nodes. A node with subgraphs carries its
implicit inputs and, per subgraph, its attribute's name and body. Lists are an i32 count then items; strings are
i32 length + UTF-8 bytes.
"""
from __future__ import annotations

import struct

import numpy as np

from .ir import (ONNX_TO_NUMPY, PACKED_BITS, UNREADABLE, Graph, Node, Value, element_dtype, string_array,
                 unpack)

ATTR_INT, ATTR_INTS, ATTR_FLOAT, ATTR_FLOATS, ATTR_STRING, ATTR_STRINGS, ATTR_GRAPH, ATTR_TENSOR = 1, 2, 3, 4, 5, 6, 7, 8


# the C dump's value kinds (glue.c put_value): flags
TENSOR_INFO, SEQUENCE_OF, OPTIONAL_OF = 1, 2, 4
CONTAINERS = {SEQUENCE_OF: "sequence", OPTIONAL_OF: "optional", SEQUENCE_OF | OPTIONAL_OF: "optional sequence"}


def _array(data, dtype: np.dtype, shape: tuple) -> np.ndarray:
    if dtype in PACKED_BITS:  # sub-byte types are packed
        return unpack(np.frombuffer(data, np.uint8), dtype, shape)
    return np.frombuffer(data, dtype=dtype).reshape(shape)


class _Reader:
    def __init__(self, data: bytes, copy_data):
        self.buf = memoryview(data)
        self.pos = 0
        self.copy_data = copy_data  # (address, nbytes) -> a bytes-like copy, made while ORT's memory is valid

    def i32(self) -> int:
        (v,) = struct.unpack_from("<i", self.buf, self.pos)
        self.pos += 4
        return v

    def i64(self) -> int:
        (v,) = struct.unpack_from("<q", self.buf, self.pos)
        self.pos += 8
        return v

    def f64(self) -> float:
        (v,) = struct.unpack_from("<d", self.buf, self.pos)
        self.pos += 8
        return v

    def raw(self, n: int) -> bytes:
        b = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return b

    def str(self) -> str:
        return self.raw(self.i32()).decode("utf-8", "replace")

    def strings(self, shape: tuple) -> np.ndarray:
        """A string tensor's elements (glue.c put_strings) as an object array of str."""
        return string_array([self.raw(self.i32()).decode("utf-8", "surrogateescape") for _ in range(self.i64())],
                            shape)

    def type_shape(self) -> tuple[int, tuple | None]:
        elem, rank = self.i32(), self.i32()
        element_dtype(elem)  # the EXOTIC_TYPES loaded before any value of the graph asks for its dtype
        dims = []
        for _ in range(rank):
            d, sym = self.i64(), self.str()
            dims.append(d if d >= 0 else (sym or None))
        return elem, (tuple(dims) if rank >= 0 else None)

    def value(self, values: dict) -> str:
        name = self.str()
        if not name:
            return ""
        flags = self.i32()
        elem, shape = self.type_shape() if flags & TENSOR_INFO else (0, None)
        container = CONTAINERS.get(flags & ~TENSOR_INFO, "")
        is_const = self.i32()
        const = None
        known = values.get(name)
        if is_const:
            addr, nbytes = self.i64(), self.i64()
            dtype = ONNX_TO_NUMPY.get(elem)
            if nbytes < 0:  # a string constant: its elements follow
                const = self.strings(shape)
            elif known is not None and known.const is not None:  # the walk names a value at each of its readers
                const = known.const
            elif addr and dtype is not None and shape is not None and all(isinstance(d, int) for d in shape):
                const = _array(self.copy_data(addr, nbytes), dtype, shape)
            elif nbytes == 0 and dtype is not None and shape is not None and addr == 0 and 0 in shape:
                const = np.zeros(shape, dtype)
        if known is None or (known.const is None and const is not None) or known.elem_type == 0:
            values[name] = Value(name, elem, shape, const, container)
        return name

    def values(self, values: dict) -> list[str]:
        return [self.value(values) for _ in range(self.i32())]

    def attr(self):
        name, kind = self.str(), self.i32()
        if kind == ATTR_INT:
            return name, self.i64()
        if kind == ATTR_FLOAT:
            return name, self.f64()
        if kind == ATTR_INTS:
            return name, np.frombuffer(self.raw(self.i32()), np.int64).tolist()
        if kind == ATTR_FLOATS:
            return name, np.frombuffer(self.raw(self.i32()), np.float32).astype(float).tolist()
        if kind == ATTR_STRING:
            return name, self.raw(self.i32()).decode("utf-8", "replace")
        if kind == ATTR_STRINGS:  # NUL-terminated strings back to back (a negative count: unreadable)
            n = self.i32()
            return name, ([s.decode("utf-8", "replace") for s in self.raw(n).split(b"\0")[:-1]] if n >= 0
                          else UNREADABLE)
        if kind == ATTR_TENSOR:
            elem, shape = self.type_shape()
            nbytes = self.i64()
            if nbytes < 0:
                return name, self.strings(shape)
            data = self.raw(nbytes)
            dtype = ONNX_TO_NUMPY.get(elem)
            return name, (_array(data, dtype, shape).copy() if dtype is not None else UNREADABLE)
        return name, UNREADABLE  # GRAPH(S), and -1: a type ORT could not describe (SPARSE_TENSOR, TYPE_PROTO)


def _node(r: _Reader, values: dict, index: int) -> Node:
    name, op, domain, since = r.str(), r.str(), r.str(), r.i32()
    node_inputs, node_outputs = r.values(values), r.values(values)
    attrs = dict(r.attr() for _ in range(r.i32()))
    implicit = []
    n_subgraphs = r.i32()
    if n_subgraphs:  # the outer values its subgraphs read, then each graph attribute's graph
        implicit = r.values(values)
        for _ in range(n_subgraphs):
            attr = r.str()
            attrs[attr] = _body(r, {})
    return Node(name, op, domain, since, node_inputs + implicit, node_outputs, attrs, len(implicit), index)


def _body(r: _Reader, values: dict) -> Graph:
    inputs, outputs, inits = r.values(values), r.values(values), r.values(values)
    nodes = [_node(r, values, index) for index in range(r.i32())]
    return Graph(nodes, values, inputs, outputs, inits)


def read_graph(data: bytes, copy_data=None) -> tuple[Graph, list[str], list[str]]:
    """The graph, plus the fused node's input and output names (empty when not a fused graph)."""
    r = _Reader(data, copy_data)
    values: dict[str, Value] = {}
    fused_inputs = fused_outputs = []
    if r.i32():
        fused_inputs, fused_outputs = r.values(values), r.values(values)
    parent = None
    if r.i32():  # the node whose subgraph this is, as a graph of that one node (its values' types)
        parent_values: dict[str, Value] = {}
        parent = Graph([_node(r, parent_values, 0)], parent_values, [], [])
    graph = _body(r, values)
    graph.parent = parent
    return graph, fused_inputs, fused_outputs


def read_runtime_value(data: bytes):
    """An input glue.c seamless_read_input wrote: None (an empty optional), an array, or a list of arrays."""
    r = _Reader(data, None)

    def value():
        kind = r.i32()
        if kind == 0:
            return None
        if kind == 2:
            return [value() for _ in range(r.i64())]
        elem, rank = r.i32(), r.i32()
        shape = tuple(r.i64() for _ in range(rank))
        if elem == 8:
            return r.strings(shape)
        dtype = element_dtype(elem)
        raw = r.raw(r.i64())
        if dtype is None:
            raise TypeError(f"an input has element type {elem}, which the numpy executor cannot hold")
        return _array(raw, dtype, shape).copy()
    return value()
