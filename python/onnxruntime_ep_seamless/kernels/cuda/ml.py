"""Classical machine learning on CUDA: ai.onnx.ml's Binarizer and ArrayFeatureExtractor (composed of our
kernels); TfIdfVectorizer (mostly token ids) and TreeEnsemble (tree walks are branchy host work; ORT's CUDA EP has
neither) run their CPU kernels on the host (elementwise.on_host)."""
import numpy as np

from ...runtime.cuda import DeviceTensor
from ..cpu.ml import (INT_IDS, ML, check_tfidf, check_tree_ensemble, tfidf_vectorizer, tree_ensemble,
                      validate_tfidf)
from ..registry import kernel
from .elementwise import GREATER, Scratch, cast_to, check_ints, compare, device_scalar, on_host
from .shape import MOVABLE, gather

F32, F16, I64 = (np.dtype(t) for t in (np.float32, np.float16, np.int64))


@kernel("Binarizer", domain=ML, types=frozenset([np.dtype(np.float32)]), device="cuda")
def binarizer(rt, stream, x, *, threshold=0.0):
    """1 where x > threshold, else 0, in float32 (the schema's other types, double and integers, stay on
    the CPU EP; float16 is not in the schema)."""
    s = Scratch(rt, x)
    above = s(compare(rt, stream, GREATER, x, s(device_scalar(rt, stream, np.array(threshold, x.dtype), x.dtype))))
    return s.done(cast_to(rt, stream, above, x.dtype))


@kernel("ArrayFeatureExtractor", domain=ML, types=MOVABLE, device="cuda",
        check=lambda n, g: None if g.value(n.inputs[1]).dtype == I64 else "int64 indices only on CUDA")
def array_feature_extractor(rt, stream, x, indices, *, _gpu_check=None):
    """The elements `indices` of x's last axis (Gather); a vector x gives a one-row matrix, as ORT."""
    n = x.shape[-1]
    check_ints(rt, stream, indices, 0, n - 1, _gpu_check,
               f"Invalid Y argument: index is out of range: Y ({{value}}) must be in [0, {n})")
    flat = DeviceTensor(indices.ptr, (indices.size,), indices.dtype)
    (y,) = gather(rt, stream, x, flat, axis=len(x.shape) - 1)
    return (DeviceTensor(y.ptr, (1, indices.size) if len(x.shape) == 1 else y.shape, y.dtype),)


# TfIdfVectorizer and TreeEnsemble run the CPU kernels on the host
kernel("TfIdfVectorizer", since=9, types=INT_IDS, device="cuda", host_inputs=(0,), capture="host",
       check=check_tfidf, validate=validate_tfidf)(on_host(tfidf_vectorizer))
kernel("TreeEnsemble", domain=ML, since=5, types=frozenset([F32, F16]), device="cuda", host_inputs=(0,), capture="host",
       check=check_tree_ensemble)(on_host(tree_ensemble))
