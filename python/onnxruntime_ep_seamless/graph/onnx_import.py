"""ONNX models (onnx.ModelProto) into our IR without ORT: for tools that analyse a model file
(capture-report) and for tests that run the planner directly. Shapes and types come from onnx's
shape inference, not ORT's, and ORT's graph optimisations have not run."""
import os

import onnx
from onnx import numpy_helper
from onnx.external_data_helper import ExternalDataInfo, uses_external_data

from .ir import UNREADABLE, Graph, Node, Value, string_array


def _attr(a: onnx.AttributeProto):
    t = a.type
    if t == onnx.AttributeProto.INT:
        return int(a.i)
    if t == onnx.AttributeProto.FLOAT:
        return float(a.f)
    if t == onnx.AttributeProto.STRING:
        return a.s.decode()
    if t == onnx.AttributeProto.INTS:
        return [int(x) for x in a.ints]
    if t == onnx.AttributeProto.FLOATS:
        return [float(x) for x in a.floats]
    if t == onnx.AttributeProto.STRINGS:
        return [s.decode() for s in a.strings]
    if t == onnx.AttributeProto.TENSOR:
        return _array(a.t)
    return UNREADABLE  # GRAPHS, SPARSE_TENSOR(S), TYPE_PROTO(S): its node is declined


def _array(tensor: onnx.TensorProto):
    arr = numpy_helper.to_array(tensor)
    if tensor.data_type == onnx.TensorProto.STRING:  # bytes -> str, as the EP holds strings
        arr = string_array([b.decode("utf-8", "surrogateescape") if isinstance(b, bytes) else b
                            for b in arr.reshape(-1)], arr.shape)
    return arr


def _value(name: str, tp: onnx.TypeProto) -> Value:
    container = ""
    for kind, label in (("optional_type", "optional"), ("sequence_type", "sequence")):
        if tp.WhichOneof("value") == kind:
            container = f"{container} {label}".strip()
            tp = tp.optional_type.elem_type if kind == "optional_type" else tp.sequence_type.elem_type
    tt = tp.tensor_type
    shape = None
    if tt.HasField("shape"):
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim)
    return Value(name, tt.elem_type, shape, container=container)


def import_model(model: onnx.ModelProto, inferred: bool = False) -> Graph:
    """The model's Graph, its shapes inferred first unless `inferred`."""
    if not inferred:
        model = onnx.shape_inference.infer_shapes(model)
    opsets = {o.domain if o.domain != "ai.onnx" else "": o.version for o in model.opset_import}
    return _graph(model.graph, opsets, {})


PROTOBUF_LIMIT = 2 ** 31 - 1  # bytes: ONNX's shape inference serialises the model, which protobuf stops at


def import_path(path: str) -> Graph:
    """The Graph of the model file at path, its external data included. A model past protobuf's 2 GiB (a 1.7B
    float16 decoder's weights) has its shapes inferred before its external data is loaded (shapes that need a
    constant's values, such as ReduceSum's axes, then come from the values inline in the file only)."""
    model = onnx.load(path, load_external_data=False)
    folder = os.path.dirname(os.path.abspath(path))
    files = {ExternalDataInfo(t).location for t in model.graph.initializer if uses_external_data(t)}
    large = os.path.getsize(path) + sum(os.path.getsize(os.path.join(folder, f)) for f in files) >= PROTOBUF_LIMIT
    if large:
        model = onnx.shape_inference.infer_shapes(model)
    onnx.load_external_data_for_model(model, folder)
    return import_model(model, inferred=large)


def _graph(g: onnx.GraphProto, opsets: dict, values: dict) -> Graph:
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        values[vi.name] = _value(vi.name, vi.type)
    for init in g.initializer:
        arr = _array(init)
        values[init.name] = Value(init.name, init.data_type, arr.shape, arr)
    inits = {i.name for i in g.initializer}
    nodes = []
    for i, n in enumerate(g.node):
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and [a.name for a in n.attribute] == ["value"]:
            arr = _array(n.attribute[0].t)  # an initializer, as ORT makes it when it loads the model
            values[n.output[0]] = Value(n.output[0], n.attribute[0].t.data_type, arr.shape, arr)
            inits.add(n.output[0])
            continue
        attrs, implicit = {}, []
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:  # a subgraph sees the values of its scope (a copy of them)
                attrs[a.name] = sub = _graph(a.g, opsets, dict(values))
                implicit += [v for v in sub.outer_reads() if v not in implicit]
            else:
                attrs[a.name] = _attr(a)
        domain = n.domain if n.domain != "ai.onnx" else ""
        nodes.append(Node(n.name or f"node{i}", n.op_type, domain, opsets.get(domain, 1),
                          list(n.input) + implicit, list(n.output), attrs, len(implicit), len(nodes)))
    return Graph(nodes, values, [i.name for i in g.input if i.name not in inits], [o.name for o in g.output],
                 sorted(inits))

