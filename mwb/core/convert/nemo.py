"""NeMo checkpoints (a NeMo 1 ``.nemo`` archive, a NeMo 2 directory) → an mwb checkpoint, on CPU.

A thin layer over the Megatron readers: NeMo's megatron GPT/BERT models hold the same tensors as
Megatron-LM (legacy names) or megatron-core (``mcore_gpt``), so this module only finds the weights, maps
NeMo's YAML config to the ``args`` the Megatron readers know, strips NeMo's key prefix and hands the shards to
:func:`.megatron_legacy.assemble` (TP/PP merge, QKV split, padded vocabulary rows dropped).

NeMo 1 ``.nemo``: a tar (maybe gzipped) as ``SaveRestoreConnector.save_to`` writes it: ``model_config.yaml``,
the weights as ``model_weights.ckpt`` (TP 1 PP 1), ``mp_rank_TT/model_weights.ckpt`` (PP 1) or
``tp_rank_TT_pp_rank_PPP/model_weights.ckpt``, or a ``model_weights/`` distributed checkpoint
(``metadata.json`` + ``.distcp``), and the tokenizer files, which the config names ``nemo:<file>``. State-dict
keys start with ``model.`` (``model.module.`` under ``megatron_amp_O2``): ``model.language_model.…`` (legacy)
or ``model.decoder.…`` / ``model.embedding.…`` / ``model.output_layer.…`` (megatron-core).

NeMo 2: a directory with ``context/model.yaml`` (the model's ``config:``: megatron-core ``TransformerConfig``
field names) and ``weights/``, a ``torch_dist`` checkpoint with keys ``module.decoder.…``; its tokenizer files
are looked for under ``context/``. Only the fields written in ``model.yaml`` are read: a config that names a
preset class and leaves a needed field out is refused with the field's name.

The archive is unpacked into a temporary directory (tar members outside it, links and devices are refused)
and the pickled weights are read with ``weights_only=False``: trusted checkpoints only, as for Megatron.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import tarfile
import tempfile
from typing import Optional

import torch

from ..checkpoint.writer import write_model_checkpoint
from ..config import RunConfig, update
from . import megatron_args, megatron_core, megatron_dist, megatron_legacy
from .hf_io import ConversionError
from .megatron_io import _stage_tokenizer

CONFIG = "model_config.yaml"
WEIGHTS = "model_weights.ckpt"
# NeMo's key prefixes: ``model.`` (``model.module.`` under megatron_amp_O2), NeMo 2's ``module.``, and the BERT ones of
# the BioMegatron era, ``bert_model.`` (NeMo 1.0's MegatronBertEncoder: ``bert_model.language_model.transformer.…``,
# legacy ``attention`` names) and ``bert_model.model.``, which NeMo's own loader renames them to (found in
# NVIDIA/NeMo nemo/collections/nlp/parts/nlp_overrides.py, NLPSaveRestoreConnector.modify_state_dict with
# ``megatron_legacy``: 'bert_model.language_model' → 'bert_model.model.language_model', 'transformer' → 'encoder',
# '.attention.' → '.self_attention.'); the legacy reader maps both name sets.
_PREFIXES = ("model.module.", "model.", "module.", "bert_model.model.", "bert_model.")


def is_nemo(path: str) -> bool:
    """A NeMo 1 archive (a tar holding ``model_config.yaml``), an unpacked one, or a NeMo 2 directory."""
    if os.path.isdir(path):
        return os.path.isfile(os.path.join(path, CONFIG)) or (os.path.isfile(os.path.join(path, "context", "model.yaml"))
                                                              and os.path.isdir(os.path.join(path, "weights")))
    if not (os.path.isfile(path) and tarfile.is_tarfile(path)):
        return False
    try:
        with tarfile.open(path, "r:*") as tar:
            return any(os.path.normpath(n) == CONFIG for n in tar.getnames())
    except (tarfile.TarError, OSError):
        return False


def _unpack(path: str, into: str) -> None:
    try:
        with tarfile.open(path, "r:*") as tar:
            tar.extractall(into, filter="data")
    except (tarfile.TarError, OSError) as e:
        raise ConversionError(f"{path} cannot be unpacked as a .nemo archive ({type(e).__name__}: {e})") from None


def _yaml(file: str) -> dict:
    import yaml
    try:
        with open(file, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ConversionError(f"{file} cannot be read as YAML ({type(e).__name__})") from None
    if not isinstance(data, dict):
        raise ConversionError(f"{file} is not a YAML mapping")
    return data


def _need(cfg: dict, name: str, where: str, *alts: str):
    for n in (name, *alts):
        if cfg.get(n) is not None:
            return cfg[n]
    raise ConversionError(f"{where}: the config has no '{name}', which the architecture needs")


def _norm(value, where: str) -> str:
    v = str(value).lower()
    if v in ("layernorm", "rmsnorm"):
        return "LayerNorm" if v == "layernorm" else "RMSNorm"
    raise ConversionError(f"{where}: normalization '{value}' is not supported (layernorm, rmsnorm)")


def nemo1_args(cfg: dict, where: str) -> argparse.Namespace:
    """The Megatron ``args`` equivalent of a NeMo 1 ``model_config.yaml`` (megatron GPT/BERT)."""
    if str(cfg.get("transformer_block_type", "pre_ln")) != "pre_ln":
        raise ConversionError(f"{where}: transformer_block_type '{cfg['transformer_block_type']}' is not supported "
                              f"(pre_ln)")
    act = str(cfg.get("activation", "gelu"))
    if act not in ("gelu", "swiglu", "fast-swiglu"):
        raise ConversionError(f"{where}: activation '{act}' is not supported (gelu, swiglu, fast-swiglu)")
    heads = _need(cfg, "num_attention_heads", where)
    groups = cfg.get("num_query_groups") or heads
    bias = bool(cfg.get("bias", True))
    tok = cfg.get("tokenizer") or {}
    if not isinstance(tok, dict):
        raise ConversionError(f"{where}: the config's tokenizer is {tok!r:.60}, not a mapping")
    return argparse.Namespace(
        num_layers=_need(cfg, "num_layers", where), hidden_size=_need(cfg, "hidden_size", where),
        num_attention_heads=heads, group_query_attention=groups != heads, num_query_groups=groups,
        ffn_hidden_size=_need(cfg, "ffn_hidden_size", where), kv_channels=cfg.get("kv_channels"),
        max_position_embeddings=_need(cfg, "max_position_embeddings", where, "encoder_seq_length"),
        position_embedding_type=str(cfg.get("position_embedding_type", "learned_absolute")),
        normalization=_norm(cfg.get("normalization", "layernorm"), where), swiglu="swiglu" in act,
        norm_epsilon=cfg.get("layernorm_epsilon", 1e-5), add_bias_linear=bias,
        # NeMo's fused bias-gelu (bias_activation_fusion) is the tanh approximation, as in Megatron
        openai_gelu=bool(cfg.get("openai_gelu", False)),
        bias_gelu_fusion=bool(cfg.get("bias_activation_fusion", False)) and bias and act == "gelu",
        untie_embeddings_and_output_weights=not cfg.get("share_embeddings_and_output_weights", True),
        rotary_base=cfg.get("rotary_base", 10000), rotary_percent=cfg.get("rotary_percentage", 1.0),
        hidden_dropout=cfg.get("hidden_dropout", 0.1), attention_dropout=cfg.get("attention_dropout", 0.1),
        init_method_std=cfg.get("init_method_std", 0.02),
        make_vocab_size_divisible_by=cfg.get("make_vocab_size_divisible_by", 128),
        tensor_model_parallel_size=cfg.get("tensor_model_parallel_size", 1) or 1,
        pipeline_model_parallel_size=cfg.get("pipeline_model_parallel_size", 1) or 1,
        virtual_pipeline_model_parallel_size=cfg.get("virtual_pipeline_model_parallel_size"),
        tokenizer_type=str(tok.get("type") or ""), num_experts=cfg.get("num_moe_experts"))


def nemo2_args(cfg: dict, where: str) -> argparse.Namespace:
    """The Megatron ``args`` equivalent of a NeMo 2 ``model.yaml``'s ``config`` (megatron-core field names)."""
    fn = cfg.get("activation_func")
    fn = str(fn.get("_target_", "") if isinstance(fn, dict) else fn or "torch.nn.functional.gelu").rsplit(".", 1)[-1]
    gated = bool(cfg.get("gated_linear_unit", False))
    if (fn, gated) not in (("gelu", False), ("silu", True)):
        raise ConversionError(f"{where}: activation_func '{fn}' with gated_linear_unit {gated} is not supported "
                              f"(gelu, or silu gated: SwiGLU)")
    heads = _need(cfg, "num_attention_heads", where)
    groups = cfg.get("num_query_groups") or heads
    return argparse.Namespace(
        num_layers=_need(cfg, "num_layers", where), hidden_size=_need(cfg, "hidden_size", where),
        num_attention_heads=heads, group_query_attention=groups != heads, num_query_groups=groups,
        ffn_hidden_size=_need(cfg, "ffn_hidden_size", where), kv_channels=cfg.get("kv_channels"),
        max_position_embeddings=_need(cfg, "seq_length", where, "max_position_embeddings"),
        position_embedding_type=str(cfg.get("position_embedding_type", "learned_absolute")),
        normalization=_norm(cfg.get("normalization", "LayerNorm"), where), swiglu=gated,
        norm_epsilon=cfg.get("layernorm_epsilon", 1e-5), add_bias_linear=bool(cfg.get("add_bias_linear", True)),
        add_qkv_bias=bool(cfg.get("add_qkv_bias", False)), openai_gelu=False,
        bias_gelu_fusion=bool(cfg.get("bias_activation_fusion", False)) and fn == "gelu"
        and bool(cfg.get("add_bias_linear", True)),
        untie_embeddings_and_output_weights=not cfg.get("share_embeddings_and_output_weights", True),
        rotary_base=cfg.get("rotary_base", 10000), rotary_percent=cfg.get("rotary_percent", 1.0),
        hidden_dropout=cfg.get("hidden_dropout", 0.1), attention_dropout=cfg.get("attention_dropout", 0.1),
        init_method_std=cfg.get("init_method_std", 0.02),
        make_vocab_size_divisible_by=cfg.get("make_vocab_size_divisible_by", 128),
        num_experts=cfg.get("num_moe_experts"))


def _strip(sd: dict, where: str) -> dict:
    """NeMo's ``model.`` / ``model.module.`` / ``module.`` key prefix off; non-tensors (``_extra_state``) dropped."""
    out = {}
    for k, v in megatron_core.weights(sd):
        p = next((p for p in _PREFIXES if k.startswith(p)), None)
        if p is None:
            raise ConversionError(f"{where}: unexpected tensor '{k}' (NeMo keys start with model., module. or "
                                  f"bert_model.)")
        out[k[len(p):]] = v
    return out


def _nest(flat: dict) -> dict:
    """Flat legacy names → the nested ``language_model`` tree :func:`.megatron_legacy._stage_tensors` reads."""
    tree: dict = {}
    for k, v in flat.items():
        node = tree
        parts = k.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = v
    return tree


def _shard(file: str) -> dict:
    ck = megatron_legacy._load(file)
    sd = ck.get("state_dict", ck) if isinstance(ck, dict) else None
    if not isinstance(sd, dict):
        raise ConversionError(f"{file} holds no state dict")
    flat = _strip(sd, file)
    model = flat if any(k.startswith(("decoder.", "embedding.")) for k in flat) else _nest(flat)
    return megatron_legacy._stage_tensors({"model": model}, file)


def _shard_file(d: str, t: int, p: int, tp: int, pp: int) -> str:
    if tp == pp == 1 and os.path.isfile(os.path.join(d, WEIGHTS)):
        return os.path.join(d, WEIGHTS)
    name = f"mp_rank_{t:02d}" if pp == 1 else f"tp_rank_{t:02d}_pp_rank_{p:03d}"
    f = os.path.join(d, name, WEIGHTS)
    if not os.path.isfile(f):
        raise ConversionError(f"{d}: {name}/{WEIGHTS} is missing (the config says TP {tp}, PP {pp})")
    return f


def _weights(d: str, args, version: float, dist_dir: Optional[str], prefix: str) -> list:
    """``stages[p][t]`` of uniform-named tensors, from per-rank ``model_weights.ckpt`` files or a DCP dir."""
    if dist_dir is not None:
        raw = megatron_dist.load_tensors(dist_dir, prefix=prefix)
        flat = megatron_dist.unstack(raw, int(args.num_layers), dist_dir)
        return [[megatron_core.uniform(flat, dist_dir)]]
    tp, pp = args.tensor_model_parallel_size, args.pipeline_model_parallel_size
    if int(args.virtual_pipeline_model_parallel_size or 1) > 1:
        raise ConversionError(f"{d}: virtual-pipeline (interleaved) checkpoints are not supported")
    return [[_shard(_shard_file(d, t, p, tp, pp)) for t in range(tp)] for p in range(pp)]


def _ref(root: str, value) -> Optional[str]:
    """A tokenizer path of the config: ``nemo:NAME`` (a file of the archive), else the path's name in it."""
    if not value or not isinstance(value, str):
        return None
    name = value[5:] if value.startswith("nemo:") else os.path.basename(value.rstrip("/"))
    for d, _, names in os.walk(root):
        if name in names or os.path.basename(d) == name:
            return os.path.join(d, name) if name in names else d
    return None


def _find(root: str, names: tuple) -> Optional[str]:
    for d, _, files in sorted(os.walk(root)):
        hit = next((n for n in names if n in files), None)
        if hit:
            return os.path.join(d, hit)
    return None


def find_tokenizer(root: str, tok: dict) -> tuple:
    """(tokenizer files under their own names, lower-case or None) of an unpacked NeMo checkpoint."""
    vocab, merges = _ref(root, tok.get("vocab_file")), _ref(root, tok.get("merge_file"))
    model = _ref(root, tok.get("model")) or _ref(root, tok.get("type") if str(tok.get("type", "")).startswith("nemo:")
                                                  else None)
    if vocab is None and merges is None and model is None:  # NeMo 2, or paths the config does not name
        model = _find(root, ("tokenizer.json", "tokenizer.model"))
        vocab, merges = _find(root, ("vocab.json", "vocab.txt")), _find(root, ("merges.txt",))
    if model and os.path.isdir(model):
        model = _find(model, ("tokenizer.json", "tokenizer.model"))
    if vocab and merges and vocab.endswith(".json"):
        return [("vocab.json", vocab), ("merges.txt", merges)], None
    if vocab and vocab.endswith(".txt"):
        kind = str(tok.get("type") or "")
        return [("vocab.txt", vocab)], (kind != "BertWordPieceCase") if kind.startswith("BertWordPiece") else None
    if model:
        if model.endswith(".model"):
            return [("tokenizer.model", model)], None
        out = [("tokenizer.json", model)]
        side = [n for n in ("tokenizer_config.json", "special_tokens_map.json")
                if os.path.isfile(os.path.join(os.path.dirname(model), n))]
        return out + [(n, os.path.join(os.path.dirname(model), n)) for n in side], None
    return [], None


def _stage(files: list, lower: Optional[bool], tmp: str) -> tuple[list, Optional[int]]:
    """Copy the tokenizer files into ``tmp`` under standard names; (paths, true vocabulary size)."""
    if not files:
        return [], None
    names = dict(files)
    if "vocab.txt" in names or "vocab.json" in names:
        paths = _stage_tokenizer([p for _, p in files], lower, tmp)
        with open(paths[0], encoding="utf-8") as f:
            size = len(json.load(f)) if len(files) == 2 else sum(1 for _ in f)
        return paths, size
    paths = []
    for name, src in files:
        shutil.copyfile(src, os.path.join(tmp, name))
        paths.append(os.path.join(tmp, name))
    from ..tokenizers import load_tokenizer
    try:
        size = int(load_tokenizer(paths[0]).vocab_size)
    except Exception as e:
        raise ConversionError(f"the checkpoint's tokenizer {files[0][0]} cannot be read ({type(e).__name__}: "
                              f"{str(e)[:200]})") from None
    return paths, size
