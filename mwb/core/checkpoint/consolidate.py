"""The full, unpadded tensors of an mwb checkpoint in one process, and the one-file consolidated format.

``resolve(path)`` turns every way a user names an mwb checkpoint (run directory, its ``checkpoints``
directory, ``checkpoints/latest``, a ``step_N`` directory) into the step directory. ``mwb_state(path)``
reads such a checkpoint, or a consolidated ``.safetensors`` file, as ``(config, vocab, tensors, tokenizer)``.
A consolidated file (:func:`write_consolidated`) holds the full tensors plus the config and vocabulary size in
its header, for inference without the sharded layout. Hugging Face directories and building models are
:mod:`mwb.core.compose`'s business: this module knows neither conversion nor model construction.
"""
from __future__ import annotations

import json
import os
from typing import Optional

from ..atomic import commit_file
from ..config import RunConfig, update
from ..errors import CheckpointError
from .format import MARKERS, METADATA, marked_dir, read_metadata, tokenizer_path
from .reader import Checkpoint
from .writer import config_tree

CONSOLIDATED = "mwb-consolidated-v1"


def resolve(path: str) -> str:
    """The ``step_N`` directory that ``path`` names: a step dir, a ``checkpoints/latest`` or ``checkpoints/best``
    marker file, or a run / ``checkpoints`` directory (its best checkpoint when it has one, i.e. a fine-tuning
    run, else its latest)."""
    path = os.path.abspath(os.path.expanduser(str(path)))
    if not os.path.exists(path):
        raise CheckpointError(f"checkpoint not found: {path}")
    if os.path.isfile(os.path.join(path, METADATA)):
        return path
    if os.path.isfile(path) and os.path.basename(path) in MARKERS:  # OUT/checkpoints/{latest,best}
        return marked_dir(os.path.dirname(path), os.path.basename(path))
    for root in (os.path.join(path, "checkpoints"), path):
        for marker in MARKERS:
            d = marked_dir(root, marker)
            if d is not None:
                return d
    raise CheckpointError(f"{path} is not an mwb checkpoint (no {METADATA}, checkpoints/latest or latest) nor "
                          f"a Hugging Face model directory (no config.json)")


def _config(tree: dict, vocab: int, tokenizer: Optional[str]) -> RunConfig:
    cfg = update(RunConfig(), {k: v for k, v in tree.items() if k in ("model", "parallel", "optim", "train",
                                                                         "data", "logging", "lora")})
    model = dict(vocab_size=vocab)
    data = {"tokenizer": tokenizer} if tokenizer else {}
    return update(cfg, {"model": model, "data": data})


def mwb_state(path: str) -> tuple[RunConfig, int, dict, Optional[str]]:
    """(config, vocab size, {name: unpadded global tensor}, tokenizer path or None) of an mwb checkpoint
    (any form :func:`resolve` takes) or a consolidated ``.safetensors`` file."""
    path = os.path.abspath(os.path.expanduser(str(path)))
    if os.path.isfile(path) and path.endswith(".safetensors"):
        return read_consolidated(path)
    ck = Checkpoint(resolve(path))
    vocab = int(ck.meta["vocab_size"])
    tok = tokenizer_path(ck.directory, ck.meta)
    tensors = {name: ck.model_tensor(name) for name in ck.tensors}
    return _config(ck.meta.get("config") or {}, vocab, tok), vocab, tensors, tok


def lora_metadata(path: str) -> Optional[dict]:
    """What a LoRA run's checkpoint says about its adapters (``base``: the checkpoint they apply to, or None
    for the seeded initialisation; ``prefixes``: where that model sits in the run's model; parameter counts),
    or None for any other checkpoint."""
    path = os.path.abspath(os.path.expanduser(str(path)))
    if os.path.isfile(path) and path.endswith(".safetensors"):  # consolidated files hold merged models
        return None
    return read_metadata(resolve(path)).get("lora")


def write_consolidated(dst_file: str, cfg: RunConfig, vocab: int, tensors: dict) -> str:
    """One safetensors file of ``tensors`` with the config and vocabulary size in its header, written under
    a temporary name and renamed; returns the absolute path."""
    from safetensors.torch import save_file

    meta = {"format": CONSOLIDATED, "config": json.dumps(config_tree(cfg)), "vocab_size": str(vocab)}
    dst_file = os.path.abspath(dst_file)
    os.makedirs(os.path.dirname(dst_file), exist_ok=True)
    tmp = dst_file + ".partial"
    save_file({k: v.contiguous() for k, v in tensors.items()}, tmp, metadata=meta)
    commit_file(tmp, dst_file)
    return dst_file


def read_consolidated(path: str) -> tuple[RunConfig, int, dict, Optional[str]]:
    """What :func:`write_consolidated` wrote, as :func:`mwb_state` returns it."""
    from safetensors import safe_open
    try:
        with safe_open(path, framework="pt") as f:
            meta = f.metadata() or {}
            if meta.get("format") != CONSOLIDATED:
                raise CheckpointError(f"{path} is not a consolidated mwb checkpoint (header format "
                                      f"{meta.get('format')!r})")
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except CheckpointError:
        raise
    except Exception as e:
        raise CheckpointError(f"{path} cannot be read ({type(e).__name__}: {e})") from None
    vocab = int(meta["vocab_size"])
    tok = (json.loads(meta["config"]).get("data") or {}).get("tokenizer")
    tok = tok if tok and os.path.exists(tok) else None
    return _config(json.loads(meta["config"]), vocab, tok), vocab, tensors, tok
