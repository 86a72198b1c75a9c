"""Reading and writing Hugging Face model directories without importing ``transformers``.

A Hugging Face directory is ``config.json`` plus weights: ``model.safetensors``, or shards listed in
``model.safetensors.index.json``; the older ``pytorch_model.bin`` (and its index) is read with
``torch.load(weights_only=True)``, which refuses anything but tensors. Exports are always one
``model.safetensors`` with ``{"format": "pt"}`` in its header (what ``from_pretrained`` expects) and a
``config.json`` carrying ``architectures`` and ``model_type`` so the Auto classes find the model class.
"""
from __future__ import annotations

import json
import os
import shutil

import torch

from ..atomic import atomic_write_text
from ..checkpoint.format import METADATA, commit_directory, staging_dir, write_safetensors
from ..errors import MwbError
from .hf_config import read_config  # noqa: F401  (the one config.json reader; imported from here too)


class ConversionError(MwbError):
    """A model that cannot be converted (unsupported family or setting); the message says which."""


# Files that make up a tokenizer in a Hugging Face directory (copied alongside the weights).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
                   "vocab.json", "merges.txt", "tokenizer.model", "spiece.model", "sentencepiece.model",
                   "added_tokens.json")


def is_hf_dir(path: str) -> bool:
    """A Hugging Face model directory: ``config.json`` and no mwb checkpoint ``metadata.json``."""
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, "config.json")) and \
        not os.path.isfile(os.path.join(path, METADATA))


def _load_file(path: str) -> dict:
    try:
        if path.endswith(".safetensors"):
            from safetensors.torch import load_file
            return load_file(path)
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ConversionError(f"cannot read weights {path} ({type(e).__name__}: {e})") from None


def read_weights(directory: str) -> dict[str, torch.Tensor]:
    """Every tensor of the model in ``directory``, by Hugging Face name."""
    for single, index in (("model.safetensors", "model.safetensors.index.json"),
                          ("pytorch_model.bin", "pytorch_model.bin.index.json")):
        if os.path.isfile(os.path.join(directory, single)):
            return _load_file(os.path.join(directory, single))
        if os.path.isfile(os.path.join(directory, index)):
            with open(os.path.join(directory, index)) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
            out = {}
            for name in files:
                out.update(_load_file(os.path.join(directory, name)))
            return out
    raise ConversionError(f"{directory} has no model.safetensors or pytorch_model.bin weights")


def tokenizer_files(directory: str) -> list[str]:
    """The tokenizer files present in ``directory`` (empty when it has none a loader can use)."""
    found = [os.path.join(directory, n) for n in TOKENIZER_FILES if os.path.isfile(os.path.join(directory, n))]
    usable = {"tokenizer.json", "vocab.txt", "vocab.json", "tokenizer.model", "spiece.model",
              "sentencepiece.model"}
    return found if any(os.path.basename(f) in usable for f in found) else []


def write_hf_dir(dst: str, config: dict, tensors: dict, tokenizer=None, overwrite: bool = False) -> str:
    """Write ``config.json`` + ``model.safetensors`` (+ tokenizer files) to ``dst`` atomically."""
    dst = os.path.abspath(dst)
    tmp = staging_dir(dst, overwrite, ConversionError, " (or --force)")
    write_safetensors(tensors, os.path.join(tmp, "model.safetensors"))
    atomic_write_text(os.path.join(tmp, "config.json"), json.dumps(config, indent=2, sort_keys=True) + "\n")
    if tokenizer:
        srcs = [os.path.join(tokenizer, n) for n in sorted(os.listdir(tokenizer))] if os.path.isdir(tokenizer) \
            else [tokenizer]
        for s in srcs:
            if os.path.isfile(s):
                shutil.copy2(s, os.path.join(tmp, os.path.basename(s)))
    commit_directory(tmp, dst)
    return dst


def take(sd: dict, key: str, where: str) -> torch.Tensor:
    """``sd.pop(key)`` with an error naming the missing tensor."""
    if key not in sd:
        raise ConversionError(f"{where} has no tensor '{key}'")
    return sd.pop(key)


def strip_prefix(sd: dict, prefix: str) -> dict:
    """Accept both the task model's names (``transformer.h.0…``) and the bare base model's (``h.0…``)."""
    if any(k.startswith(prefix) for k in sd):
        return sd
    return {prefix + k: v for k, v in sd.items()}


def untied_head(sd: dict, model: dict, where: str) -> dict:
    """``{"head.weight": lm_head}`` for a model with untied embeddings (an error if it is missing), else {}."""
    head = sd.pop("lm_head.weight", None)
    if model["tie_embeddings"]:
        return {}
    if head is None:
        raise ConversionError(f"{where} has untied embeddings but no lm_head.weight")
    return {"head.weight": head}
