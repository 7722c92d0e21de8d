"""Ops computed on the host inside a CUDA partition by the CPU kernels: those whose output shape
depends on the data (NonZero, Unique, NonMaxSuppression), two whose inputs are mostly sizes or
token ids (MelWeightMatrix, TfIdfVectorizer) and ai.onnx.ml's TreeEnsemble (ORT's CUDA EP has none of
the three: tree walks are branchy host work). Their GPU inputs are read
back (a seam: the host waits for the stream; under session capture a clear error; constant inputs
cost nothing), their outputs are host values, uploaded when a GPU kernel reads them. The partition
stays whole: ORT inserts no copies or CPU nodes."""
import inspect

import numpy as np

from ...runtime.cuda import DeviceTensor
from ..cpu.detection import _check_center_point_box, non_max_suppression
from ..cpu.ml import ML, _INT_IDS, _check_tfidf, _check_tree_ensemble, _validate_tfidf, tfidf_vectorizer, tree_ensemble
from ..cpu.shape import non_zero, unique
from ..cpu.signal import _SIZES, mel_weight_matrix
from ..registry import kernel

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)


def _on_host(cpu_kernel):
    """A CUDA kernel running `cpu_kernel` on its inputs' host values (same attributes)."""
    def run(rt, stream, *inputs, **attrs):
        outputs = cpu_kernel(*[None if x is None else rt.to_host(x, stream) for x in inputs], **attrs)
        return tuple(DeviceTensor.on_host(y) for y in outputs)
    signature = inspect.signature(cpu_kernel)
    P = inspect.Parameter
    run.__signature__ = signature.replace(parameters=[P("rt", P.POSITIONAL_OR_KEYWORD),
                                                      P("stream", P.POSITIONAL_OR_KEYWORD),
                                                      *signature.parameters.values()])
    return run


# integer and bool inputs already run on the host by the registry's host rule; capture class "host":
# exec/cuda_capture.py takes their outputs as host values
kernel("NonZero", since=9, types=frozenset([F32, F16]), device="cuda", host_inputs=(0,), capture="host")(
    _on_host(non_zero))
kernel("Unique", since=11, types=frozenset([F32]), device="cuda", host_inputs=(0,), capture="host")(_on_host(unique))
kernel("NonMaxSuppression", since=10, types=frozenset([F32]), device="cuda", host_inputs=(0, 1, 2, 3, 4),
       capture="host", validate=_check_center_point_box)(_on_host(non_max_suppression))
kernel("MelWeightMatrix", since=17, types=_SIZES, device="cuda", host_inputs=(0, 1, 2, 3, 4), capture="host")(
    _on_host(mel_weight_matrix))
kernel("TfIdfVectorizer", since=9, types=_INT_IDS, device="cuda", host_inputs=(0,), capture="host",
       check=_check_tfidf, validate=_validate_tfidf)(_on_host(tfidf_vectorizer))
kernel("TreeEnsemble", domain=ML, since=5, types=frozenset([F32, F16]), device="cuda", host_inputs=(0,), capture="host",
       check=_check_tree_ensemble)(_on_host(tree_ensemble))
