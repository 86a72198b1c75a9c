"""Hugging Face ↔ mwb conversion: ``convert(src, dst)`` picks the direction from what ``src`` is.

A directory with ``config.json`` (and no mwb ``metadata.json``) is a Hugging Face model: it becomes an mwb
checkpoint directory (one shard, layout 1, no optimizer state) that :func:`mwb.core.compose.load_full_model`
reads and ``checkpoint.load`` puts into any parallel layout for fine-tuning. Anything else is read as an mwb
checkpoint (run directory, ``checkpoints`` directory, ``step_N`` or consolidated file) and becomes a
Hugging Face directory that ``transformers`` loads with ``from_pretrained``. A ``.gguf`` file (llama.cpp,
Llama family) becomes an mwb checkpoint, dequantised (:mod:`.gguf_llama`). A Megatron-LM legacy checkpoint
(``latest_checkpointed_iteration.txt`` or ``mp_rank_*`` shards; GPT and BERT, any TP/PP) becomes an mwb
checkpoint with its released vocabulary (:mod:`.megatron_legacy`, :mod:`.megatron_io`); so does a NeMo ``.nemo``
archive or NeMo 2 directory (:mod:`.nemo`, on top of the Megatron readers). One small module per family
holds the name and config mapping (:mod:`.gpt2`, :mod:`.llama`, :mod:`.bert`, :mod:`.t5`); tokenizer files travel with
the weights, and the original ``config.json`` of an imported model is kept so exporting it again
preserves the fields mwb does not model (special token ids and the like).
"""
from __future__ import annotations

import dataclasses
import os

from ..checkpoint.consolidate import mwb_state, resolve
from ..checkpoint.writer import write_model_checkpoint
from ..config import RunConfig, update
from . import bert, gpt2, llama, t5
from .gguf_llama import gguf_to_mwb, is_gguf
from .megatron_io import is_megatron, megatron_to_mwb
from .megatron_write import mwb_to_megatron
from .nemo import is_nemo
from .nemo_convert import nemo_to_mwb
from .hf_io import ConversionError, is_hf_dir, read_config, read_weights, tokenizer_files, write_hf_dir

FAMILIES = (gpt2, llama, bert, t5)


def family_for_hf(hf: dict, where: str):
    for fam in FAMILIES:
        if fam.matches_hf(hf):
            return fam
    raise ConversionError(f"{where}: model_type '{hf.get('model_type')}' is not supported "
                          f"(supported: gpt2, llama/mistral, bert, t5)")


def family_for_mwb(model_cfg: dict):
    for fam in FAMILIES:
        if fam.matches_mwb(model_cfg):
            return fam
    raise ConversionError("this model has no Hugging Face counterpart mwb can write (GPT-2: learned positions, "
                          "LayerNorm, gelu/gelu_tanh; Llama: RoPE, RMSNorm, SwiGLU; BERT: post-norm; T5: "
                          "relative positions, RMSNorm)")


def load_hf(path: str):
    """(RunConfig, vocab size, {mwb name: global tensor}, tokenizer path or None) of a Hugging Face dir."""
    hf = read_config(path)
    fam = family_for_hf(hf, path)
    model = fam.model_config(hf)
    tok = path if tokenizer_files(path) else None
    tensors = fam.to_mwb(read_weights(path), model)  # may settle settings the weights show (a tied head)
    cfg = update(RunConfig(), {"model": model, "data": {"tokenizer": tok}})
    return cfg, int(model["vocab_size"]), tensors, tok


def model_dict(cfg) -> dict:
    """``cfg.model`` as a dict with the derived sizes filled in (what the family mappings read)."""
    m = dataclasses.asdict(cfg.model)
    m["ffn_hidden_size"] = cfg.model.ffn_size
    m["num_query_groups"] = cfg.model.query_groups
    m["attention_dropout"] = cfg.model.attn_dropout
    return m


_mwb_model_dict = model_dict  # the earlier private name


def hf_to_mwb(src: str, dst: str, overwrite: bool = False) -> tuple[str, str]:
    """Hugging Face directory → mwb checkpoint directory; returns (dst, family name)."""
    cfg, vocab, tensors, tok = load_hf(src)
    fam = family_for_hf(read_config(src), src)
    extra = {"hf_config": [os.path.join(src, "config.json")]}
    if tok:
        extra["tokenizer"] = tokenizer_files(src)
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, tokenizer=None))
    write_model_checkpoint(dst, cfg, vocab, tensors, extra_files=extra, overwrite=overwrite)
    return os.path.abspath(dst), fam.NAME


def _base_hf_config(src: str, model_type: str) -> dict:
    """The config.json an imported checkpoint came from (same family), to carry its other fields over; for
    a Hugging Face directory, its own."""
    try:
        path = os.path.join(src, "config.json") if is_hf_dir(src) else \
            os.path.join(resolve(src), "hf_config", "config.json")
    except Exception:
        return {}
    if not os.path.isfile(path):
        return {}
    base = dict(read_config(os.path.dirname(path)))
    if base.get("model_type") not in (model_type, "mistral" if model_type == "llama" else None):
        return {}
    for k in ("transformers_version", "_name_or_path", "auto_map", "quantization_config"):
        base.pop(k, None)
    return base


def mwb_to_hf(src: str, dst: str, overwrite: bool = False) -> tuple[str, str]:
    """mwb checkpoint (any path form) → Hugging Face directory; returns (dst, family name)."""
    cfg, vocab, tensors, tok = mwb_state(src)
    if cfg.lora.rank:
        raise ConversionError(f"{src} is a LoRA run (adapters on a frozen base): pass --merge for a full Hugging "
                              f"Face model, or --peft for a PEFT adapter directory")
    return state_to_hf(cfg, vocab, tensors, tok, dst, src, overwrite)


def state_to_hf(cfg, vocab: int, tensors: dict, tok, dst: str, config_from: str,
                overwrite: bool = False) -> tuple[str, str]:
    """Full global tensors of an mwb model → Hugging Face directory (``config_from``: the checkpoint whose
    imported ``config.json``, if any, supplies the fields mwb does not model); returns (dst, family)."""
    m = model_dict(cfg)
    fam = family_for_mwb(m)
    if hasattr(fam, "check_mwb"):
        fam.check_mwb(m)
    out = fam.to_hf(tensors, m)
    config = fam.hf_config(m, vocab, _base_hf_config(config_from, fam.NAME))
    dtypes = {str(t.dtype).replace("torch.", "") for t in out.values()}
    config["dtype"] = dtypes.pop() if len(dtypes) == 1 else "float32"
    write_hf_dir(dst, config, out, tokenizer=tok, overwrite=overwrite)
    return os.path.abspath(dst), fam.NAME


def convert(src: str, dst: str, overwrite: bool = False) -> tuple[str, str, str]:
    """Convert in the direction ``src`` implies; returns (direction, dst, family)."""
    src = os.path.abspath(os.path.expanduser(str(src)))
    if not os.path.exists(src):
        raise ConversionError(f"{src} does not exist")
    if os.path.abspath(dst) == src:
        raise ConversionError("source and destination are the same path")
    if os.path.exists(dst) and (not os.path.isdir(dst) or os.listdir(dst)) and not overwrite:
        raise ConversionError(f"{os.path.abspath(dst)} exists and is not empty; choose another destination "
                              f"(or --force to replace it)")
    for name, detect, into_mwb in _READERS:
        if detect(src):
            out, fam = into_mwb(src, dst, overwrite)
            return f"{name}-to-mwb", out, fam
    out, fam = mwb_to_hf(src, dst, overwrite)
    return "mwb-to-hf", out, fam


# Every foreign format mwb reads, in the order ``convert`` tries them (an mwb checkpoint is what is left).
_READERS = (("hf", is_hf_dir, hf_to_mwb), ("gguf", is_gguf, gguf_to_mwb), ("megatron", is_megatron, megatron_to_mwb),
            ("nemo", is_nemo, nemo_to_mwb))


__all__ = ["ConversionError", "FAMILIES", "convert", "family_for_mwb", "gguf_to_mwb", "hf_to_mwb", "is_hf_dir",
           "is_megatron", "is_nemo", "load_hf", "megatron_to_mwb", "model_dict", "mwb_to_megatron", "mwb_to_hf", "nemo_to_mwb", "state_to_hf"]
