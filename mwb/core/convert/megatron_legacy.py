"""Megatron-LM legacy checkpoints (``mp_rank_TT[_PPP]/model_optim_rng.pt``) → mwb GPT, BERT or T5 (:mod:`.megatron_legacy_t5`), on CPU.

The layout is that of Megatron-LM's ``megatron/training/checkpointing.py`` before megatron-core: a save
directory names its newest checkpoint in ``latest_checkpointed_iteration.txt`` (an iteration, or
``release`` for the released weights), which lives in ``iter_NNNNNNN/`` or ``release/``; each tensor- and
pipeline-parallel rank wrote ``mp_rank_{tp:02d}/`` (one stage) or ``mp_rank_{tp:02d}_{pp:03d}/``. Every file is
a pickle holding ``args`` (the run's ``argparse.Namespace``: the architecture), ``checkpoint_version`` and
``model`` → ``language_model`` → ``embedding`` / ``transformer`` (or ``encoder``) [/ ``pooler`` /
``output_layer``], plus BERT's ``lm_head`` and ``binary_head``.

Trust. ``args`` is a pickled Namespace, so the file is read with ``torch.load(weights_only=False)``: this
reader runs pickle code from the checkpoint and is meant for checkpoints of a trusted origin (NVIDIA's
released weights, your own runs). No other mwb reader does this.

Merging the shards. Column-parallel weights (``query_key_value``, ``dense_h_to_4h``, the vocabulary rows of
``word_embeddings``, ``output_layer`` and BERT's ``lm_head.bias``) are split over TP along their first axis,
row-parallel ones (``attention.dense``, ``dense_4h_to_h``) along their second; everything else is replicated.
Each TP shard's fused QKV holds its own heads in the order of the checkpoint's ``checkpoint_version`` —
0: ``[3, np, hn]``, 1.0: ``[np, hn, 3]``, 2.0 and later: ``[np, 3, hn]`` — and each SwiGLU ``dense_h_to_4h``
shard is its own ``[gate; up]``, so both are split per shard before the shards are concatenated. Pipeline
stages number their layers from 0; stage ``p`` holds global layers ``p·L/pp …``.

Vocabulary. Megatron pads the embedding to a multiple of ``make_vocab_size_divisible_by × TP``; mwb
checkpoints store unpadded tensors with the true size in ``vocab_size``. The true size is the tokenizer's
(``vocab_size`` argument of :func:`read`, found by the caller from the released vocabulary files), and the
padded rows, never trained, are dropped; without a tokenizer the padded size is kept (every row a token).
"""
from __future__ import annotations

import argparse
import glob
import os
import re
from typing import Optional

import torch

from . import megatron_core, megatron_legacy_t5, megatron_t5
from .megatron_args import check_args, check_version
from .hf_io import ConversionError
from .megatron_rows import _split_qkv, flatten_tensors

TRACKER = "latest_checkpointed_iteration.txt"
SHARD_FILES = ("model_optim_rng.pt", "model_rng.pt")
VERSIONS = (0.0, 1.0, 2.0, 3.0)
_SHARD_DIR = re.compile(r"^mp_rank_(\d{2})(?:_(\d{3}))?(?:_(\d{3}))?$")


def _has_shards(d: str) -> bool:
    return os.path.isdir(d) and any(_SHARD_DIR.match(n) for n in os.listdir(d))


def is_legacy(path: str) -> bool:
    """A save directory with the tracker file, or an ``iter_*`` / ``release`` directory of ``mp_rank_*``
    shards holding ``.pt`` files (not megatron-core's ``torch_dist``, which has ``metadata.json``)."""
    if not os.path.isdir(path):
        return False
    if os.path.isfile(os.path.join(path, TRACKER)):
        return True
    return _has_shards(path) and any(os.path.isfile(f) for n in SHARD_FILES
                                     for f in glob.glob(os.path.join(path, "mp_rank_*", n)))


def checkpoint_dir(path: str) -> str:
    """The ``iter_NNNNNNN`` / ``release`` directory ``path`` stands for."""
    tracker = os.path.join(path, TRACKER)
    if not os.path.isfile(tracker):
        return path
    try:
        with open(tracker, "rb") as f:
            text = f.read(256).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise ConversionError(f"{tracker} cannot be read as text ({type(e).__name__})") from None
    if text == "release":
        d = os.path.join(path, "release")
    elif text.isascii() and text.isdigit():  # not str.isdigit alone: '²' is a digit int() refuses
        d = os.path.join(path, f"iter_{int(text):07d}")
    else:
        raise ConversionError(f"{tracker} says {text[:40]!r}, which is neither an iteration number nor 'release'")
    if not os.path.isdir(d):
        raise ConversionError(f"{tracker} names {os.path.basename(d)}, which is not in {path}")
    return d


def _shard_file(d: str, tp: int, pp: int, pp_size: int) -> str:
    name = f"mp_rank_{tp:02d}" if pp_size == 1 else f"mp_rank_{tp:02d}_{pp:03d}"
    for f in SHARD_FILES:
        if os.path.isfile(os.path.join(d, name, f)):
            return os.path.join(d, name, f)
    raise ConversionError(f"{d}: shard {name}/model_optim_rng.pt is missing (the checkpoint has TP×PP = "
                          f"{_sizes_note(d)})")


def _sizes_note(d: str) -> str:
    names = sorted(n for n in os.listdir(d) if _SHARD_DIR.match(n))
    return f"{len(names)} shard directories: {', '.join(names) or 'none'}"


def pp_of_names(d: str) -> int:
    """1 when the shard directories are named ``mp_rank_TT`` (one stage), else 2 (``mp_rank_TT_PPP``): all
    :func:`_shard_file` needs to name stage 0; the stage count itself comes from ``args``."""
    names = [n for n in os.listdir(d) if _SHARD_DIR.match(n)]
    if not names:
        raise ConversionError(f"{d} has no mp_rank_* shard directories")
    return 2 if any(_SHARD_DIR.match(n).group(2) for n in names) else 1


def _load(file: str) -> dict:
    try:  # the args Namespace is a pickle: trusted checkpoints only (see the module docstring)
        return torch.load(file, map_location="cpu", weights_only=False)
    except Exception as e:
        raise ConversionError(f"{file} cannot be read as a Megatron checkpoint ({type(e).__name__}: {e})") from None


def _arg(args, name: str, default=None, *, need: bool = False, where: str = ""):
    value = getattr(args, name, None) if args is not None else None
    if value is None:
        if need:
            raise ConversionError(f"{where}: the checkpoint's args have no '{name}', which the architecture "
                                  f"needs")
        return default
    return value


def core_tensors(model: dict, where: str) -> dict:
    """A flat megatron-core state dict (one shard of the ``torch`` format, or a whole ``torch_dist`` model)
    ready for :func:`assemble`: GPT and BERT under the legacy names (:func:`.megatron_core.uniform`); T5 keeps
    megatron-core's names, as its own merge reads them (:func:`.megatron_t5.tensors`)."""
    if megatron_t5.is_t5(model):
        return megatron_t5.tensors(model, where)
    return megatron_core.uniform(model, where)


def _stage_tensors(ck: dict, file: str) -> dict:
    """One shard's model tensors under uniform names: ``embedding.*``, ``layers.N.*`` (stage-local N),
    ``final_norm.*``, ``pooler.*``, ``output_layer.*``, ``lm_head.*``, ``binary_head.*``."""
    if "model" not in ck:
        raise ConversionError(f"{file} has no 'model' (virtual-pipeline checkpoints, model0/model1…, are not "
                              f"supported)")
    model = ck["model"]
    if megatron_core.is_core_state(model):
        return core_tensors(model, file)
    if megatron_legacy_t5.is_t5(model):  # renamed to megatron-core's T5 names, merged by megatron_t5
        return megatron_legacy_t5.core_tensors(ck, file)
    lm = model.get("language_model", model)
    out = {}
    for k, v in flatten_tensors(lm.get("embedding", {})).items():
        out["embedding." + k] = v
    body = lm.get("encoder", lm.get("transformer", {}))
    for k, v in flatten_tensors(body).items():
        k = (k.replace(".self_attention.", ".attn.").replace(".attention.", ".attn.")
             .replace(".input_norm.", ".input_layernorm.").replace(".post_attention_norm.", ".post_attention_layernorm."))
        if k.startswith(("final_layernorm.", "final_norm.")):
            k = "final_norm." + k.split(".", 1)[1]
        out[k] = v
    for part in ("pooler", "output_layer"):
        for k, v in flatten_tensors(lm.get(part, {})).items():
            out[f"{part}.{k}"] = v
    for part in ("lm_head", "binary_head"):
        for k, v in flatten_tensors(model.get(part, {})).items():
            out[f"{part}.{k}"] = v
    return out


_COLUMN = ("mlp.dense_h_to_4h.weight", "mlp.dense_h_to_4h.bias")
_ROW = ("attn.dense.weight", "mlp.dense_4h_to_h.weight")
_VOCAB = ("embedding.word_embeddings.weight", "output_layer.weight", "lm_head.bias")


def _merge_layer_param(name: str, shards: list, m: dict, version: float, where: str) -> dict:
    """mwb tensors of one (layer-local) parameter name from its TP shards."""
    tp = len(shards)
    kind = name.split(".", 2)[2]  # after "layers.N."
    q = "layers.{}." + {"input_layernorm.weight": "ln1.weight", "input_layernorm.bias": "ln1.bias",
                         "post_attention_layernorm.weight": "ln2.weight", "post_attention_layernorm.bias": "ln2.bias",
                         "attn.dense.weight": "attn.o_proj.weight", "attn.dense.bias": "attn.o_proj.bias",
                         "mlp.dense_4h_to_h.weight": "mlp.down_proj.weight",
                         "mlp.dense_4h_to_h.bias": "mlp.down_proj.bias"}.get(kind, "")
    if kind.startswith("attn.query_key_value."):
        groups = m["num_query_groups"] or m["num_attention_heads"]
        if groups % tp:
            raise ConversionError(f"{where}: {groups} query groups do not split over TP {tp}")
        s = kind.rsplit(".", 1)[1]
        parts = [_split_qkv(t, version, m["num_attention_heads"] // tp, where, groups // tp) for t in shards]
        return {f"layers.{{}}.attn.{p}_proj.{s}": torch.cat([x[j] for x in parts]) for j, p in enumerate("qkv")}
    if kind in _COLUMN:
        s = kind.rsplit(".", 1)[1]
        if m["activation"] == "swiglu":
            halves = [t.chunk(2) for t in shards]
            return {f"layers.{{}}.mlp.gate_proj.{s}": torch.cat([h[0] for h in halves]),
                    f"layers.{{}}.mlp.up_proj.{s}": torch.cat([h[1] for h in halves])}
        return {f"layers.{{}}.mlp.up_proj.{s}": torch.cat(shards)}
    if not q.endswith(("weight", "bias")):
        raise ConversionError(f"{where}: unexpected tensor '{name}' (not a Megatron GPT/BERT layer parameter)")
    return {q: torch.cat(shards, dim=1) if kind in _ROW else shards[0]}


def model_config(args, sd: dict, where: str) -> dict:
    """The mwb model config of a legacy checkpoint: its ``args``, and what the merged weights show."""
    need = lambda n: _arg(args, n, need=True, where=where)  # noqa: E731
    if args is None:
        raise ConversionError(f"{where}: the checkpoint has no 'args' (the architecture cannot be known)")
    check_args(args, where)
    if _arg(args, "apply_residual_connection_post_layernorm", False):
        raise ConversionError(f"{where}: apply_residual_connection_post_layernorm (the residual taken after "
                              f"the norm) has no mwb equivalent")
    if _arg(args, "num_experts"):
        raise ConversionError(f"{where}: mixture-of-experts legacy checkpoints are not supported")
    bert = "lm_head.dense.weight" in sd or "binary_head.weight" in sd or \
        str(_arg(args, "tokenizer_type", "")).startswith("BertWordPiece") and "output_layer.weight" not in sd
    h, heads = need("hidden_size"), need("num_attention_heads")
    swiglu = bool(_arg(args, "swiglu", False))
    if swiglu:
        act = "swiglu"
    elif _arg(args, "openai_gelu", False) or _arg(args, "bias_gelu_fusion", False):
        act = "gelu_tanh"  # both are the tanh approximation of gelu
    else:
        act = "gelu"
    pos = _arg(args, "position_embedding_type", "learned_absolute")
    if pos not in ("learned_absolute", "rope"):
        raise ConversionError(f"{where}: position_embedding_type '{pos}' is not supported (learned_absolute, rope)")
    if pos == "rope" and float(_arg(args, "rotary_percent", 1.0)) != 1.0:
        raise ConversionError(f"{where}: rotary_percent < 1 (partial RoPE) has no mwb equivalent")
    norm = str(_arg(args, "normalization", "LayerNorm"))
    if norm not in ("LayerNorm", "RMSNorm"):
        raise ConversionError(f"{where}: normalization '{norm}' is not supported (LayerNorm, RMSNorm)")
    groups = _arg(args, "num_query_groups") if _arg(args, "group_query_attention", False) else None
    if bool(_arg(args, "add_qkv_bias", False)) and not _arg(args, "add_bias_linear", True):
        raise ConversionError(f"{where}: add_qkv_bias without add_bias_linear (biases on QKV only) has no mwb "
                              f"equivalent (one model.bias switch)")
    kv = _arg(args, "kv_channels")
    m = {"arch": "bert" if bert else "gpt", "num_layers": need("num_layers"), "hidden_size": h,
         "num_attention_heads": heads, "num_query_groups": groups,
         "ffn_hidden_size": _arg(args, "ffn_hidden_size") or 4 * h,
         "kv_channels": kv if kv and kv * heads != h else None,
         "max_position_embeddings": need("max_position_embeddings"),
         "normalization": norm.lower(), "norm_eps": float(_arg(args, "norm_epsilon", _arg(args, "layernorm_epsilon", 1e-5))),
         "activation": act, "position_embedding": "rope" if pos == "rope" else "learned",
         "rope_theta": float(_arg(args, "rotary_base", 10000)),
         "dropout": float(_arg(args, "hidden_dropout", 0.1)),
         "attention_dropout": float(_arg(args, "attention_dropout", 0.1)),
         "bias": bool(_arg(args, "add_bias_linear", True)),
         # megatron-core's last stage holds output_layer.weight even when tied (a copy): args decide first
         "tie_embeddings": not _arg(args, "untie_embeddings_and_output_weights", "output_layer.weight" in sd),
         "init_std": float(_arg(args, "init_method_std", 0.02)),
         "make_vocab_size_divisible_by": int(_arg(args, "make_vocab_size_divisible_by", 128))}
    if bert:
        m.update({"bert_post_norm": False, "bert_lm_head": "lm_head.dense.weight" in sd,
                  "bert_binary_head": "binary_head.weight" in sd,
                  "bert_pooler": "binary_head.weight" not in sd and "pooler.dense.weight" in sd,
                  "num_tokentypes": sd["embedding.tokentype_embeddings.weight"].shape[0]
                  if "embedding.tokentype_embeddings.weight" in sd else 0})
    return m


def _gather(d: str) -> tuple:
    """(args, checkpoint_version, tp, pp, [[stage tensors of tp rank t] for each stage p])."""
    first = _load(_shard_file(d, 0, 0, pp_of_names(d)))
    args = first.get("args") if isinstance(first, dict) else None
    check_args(args, d)
    tp = int(_arg(args, "tensor_model_parallel_size", _arg(args, "model_parallel_size", 1)))
    pp = int(_arg(args, "pipeline_model_parallel_size", 1))
    if int(_arg(args, "virtual_pipeline_model_parallel_size", 1) or 1) > 1:
        raise ConversionError(f"{d}: virtual-pipeline (interleaved) checkpoints are not supported")
    if "checkpoint_version" not in first:
        raise ConversionError(f"{d}: the checkpoint has no checkpoint_version (its QKV order is unknown)")
    version = check_version(first["checkpoint_version"], d, VERSIONS)
    stages = []
    for p in range(pp):
        row = []
        for t in range(tp):
            ck = first if (t, p) == (0, 0) else _load(_shard_file(d, t, p, pp))
            row.append(_stage_tensors(ck, _shard_file(d, t, p, pp)))
        stages.append(row)
    return args, version, tp, pp, stages


def read(path: str, vocab_size: Optional[int] = None) -> tuple[dict, int, dict, argparse.Namespace]:
    """(mwb model config, vocabulary size, {mwb name: full tensor}, args) of a legacy checkpoint.

    ``vocab_size``: the tokenizer's true size; the embedding rows past it (Megatron's padding) are dropped.
    """
    d = checkpoint_dir(os.path.abspath(path))
    if not _has_shards(d):
        raise ConversionError(f"{d} has no mp_rank_* shard directories")
    args, version, tp, pp, stages = _gather(d)
    return assemble(args, version, stages, d, vocab_size)


def assemble(args, version: float, stages: list, d: str, vocab_size: Optional[int] = None) -> tuple:
    """:func:`read`'s result from ``stages[p][t]`` (the uniform-named tensors of stage p, TP rank t)."""
    tp, pp = len(stages[0]), len(stages)
    flat = {k: v for row in stages for k, v in row[0].items() if not k.startswith("layers.")}
    if megatron_t5.is_t5(stages[0][0]):
        megatron_t5.check_positions(args, d)
        m, vocab, out = megatron_t5.assemble(args, stages, d, vocab_size, model_config(args, flat, d))
        return m, vocab, {k: v.float() if v.is_floating_point() else v for k, v in out.items()}, args
    m = model_config(args, flat, d)
    layers = m["num_layers"]
    if layers % pp:
        raise ConversionError(f"{d}: {layers} layers do not split evenly over {pp} pipeline stages")
    per = layers // pp
    out: dict = {}
    for p, row in enumerate(stages):
        names = sorted({k for k in row[0] if k.startswith("layers.")})
        seen = set()
        for name in names:
            local = int(name.split(".")[1])
            if local >= per:
                raise ConversionError(f"{d}: stage {p} holds layer {local}, beyond its {per} layers")
            seen.add(local)
            try:
                shards = [r[name] for r in row]
            except KeyError:
                raise ConversionError(f"{d}: tensor {name} is missing from a TP shard of stage {p}") from None
            for k, t in _merge_layer_param(name, shards, m, version, d).items():
                out[k.format(p * per + local)] = t
        if len(seen) != per:
            raise ConversionError(f"{d}: stage {p} holds {len(seen)} layers, not {per}")
    first, last = stages[0], stages[-1]

    def cat(row, name, dim=0):
        if name not in row[0]:
            raise ConversionError(f"{d}: the checkpoint has no {name}")
        return torch.cat([r[name] for r in row], dim=dim) if dim is not None else row[0][name]
    padded = cat(first, "embedding.word_embeddings.weight")
    vocab = padded.shape[0] if vocab_size is None else int(vocab_size)
    if vocab > padded.shape[0]:
        raise ConversionError(f"{d}: the tokenizer has {vocab} tokens but the embedding only {padded.shape[0]} rows")
    out["embed.word.weight"] = padded[:vocab].clone()
    if m["position_embedding"] == "learned":
        out["embed.position.weight"] = cat(first, "embedding.position_embeddings.weight", None)
    if m["arch"] == "bert" and m["num_tokentypes"]:
        out["embed.tokentype.weight"] = cat(first, "embedding.tokentype_embeddings.weight", None)
    out["final_norm.weight"] = cat(last, "final_norm.weight", None)
    if m["normalization"] == "layernorm":
        out["final_norm.bias"] = cat(last, "final_norm.bias", None)
    if not m["tie_embeddings"]:
        out["head.weight"] = cat(last, "output_layer.weight")[:vocab].clone()
    if m["arch"] == "bert":
        if m["bert_lm_head"]:
            for a, b in (("dense.weight", "dense.weight"), ("dense.bias", "dense.bias"),
                         ("layernorm.weight", "norm.weight"), ("layernorm.bias", "norm.bias")):
                out[f"lm_transform.{b}"] = cat(last, f"lm_head.{a}", None)
            out["head.bias"] = cat(last, "lm_head.bias")[:vocab].clone()
        if m["bert_binary_head"] or m["bert_pooler"]:
            out["pooler.dense.weight"] = cat(last, "pooler.dense.weight", None)
            out["pooler.dense.bias"] = cat(last, "pooler.dense.bias", None)
        if m["bert_binary_head"]:
            out["binary_classifier.weight"] = cat(last, "binary_head.weight", None)
            out["binary_classifier.bias"] = cat(last, "binary_head.bias", None)
    m["vocab_size"] = vocab
    return m, vocab, {k: v.float() if v.is_floating_point() else v for k, v in out.items()}, args
