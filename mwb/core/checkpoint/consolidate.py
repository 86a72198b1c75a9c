"""One process, whole model: what inference, evaluation and export need from any checkpoint.

``load_full_model(path)`` accepts every way a user names a model — a run directory, its ``checkpoints``
directory, a ``step_N`` directory, a consolidated ``.safetensors`` file, a model name (``smollm2-135m``,
``hf:ORG/NAME``; see :mod:`mwb.core.named_models`), or a Hugging Face model directory
(``config.json``; converted on the fly by :mod:`mwb.core.convert`) — and returns the run config, a
single-process model built by :func:`mwb.core.models.build.build_model` with the full weights, and the
tokenizer stored with it. ``consolidate`` writes one safetensors file of full, unpadded tensors plus the
config, for inference without the sharded layout.
"""
from __future__ import annotations

import json
import os
from typing import Optional

import torch

from ..config import RunConfig, update
from ..errors import CheckpointError
from ..named_models import local_checkpoint
from .format import METADATA, latest_dir, tokenizer_path
from .reader import Checkpoint, copy_full_tensors

CONSOLIDATED = "mwb-consolidated-v1"


def resolve(path: str) -> str:
    """The ``step_N`` directory that ``path`` (run dir, ``checkpoints`` dir, step dir or model name) names."""
    path = os.path.abspath(os.path.expanduser(str(local_checkpoint(path))))
    if not os.path.exists(path):
        raise CheckpointError(f"checkpoint not found: {path}")
    if os.path.isfile(os.path.join(path, METADATA)):
        return path
    if os.path.isfile(path) and os.path.basename(path) == "latest":  # OUT/checkpoints/latest names a step
        return latest_dir(os.path.dirname(path))
    for root in (os.path.join(path, "checkpoints"), path):
        d = latest_dir(root)
        if d is not None:
            return d
    raise CheckpointError(f"{path} is not an mwb checkpoint (no {METADATA}, checkpoints/latest or latest) nor "
                          f"a Hugging Face model directory (no config.json)")


def is_hf_dir(path: str) -> bool:
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, "config.json")) and \
        not os.path.isfile(os.path.join(path, METADATA))


def _config(tree: dict, vocab: int, tokenizer: Optional[str]) -> RunConfig:
    cfg = update(RunConfig(), {k: v for k, v in tree.items() if k in ("model", "parallel", "optim", "train",
                                                                         "data", "logging")})
    model = dict(vocab_size=vocab)
    data = {"tokenizer": tokenizer} if tokenizer else {}
    return update(cfg, {"model": model, "data": data})


def full_state(path: str) -> tuple[RunConfig, int, dict, Optional[str]]:
    """(config, vocab size, {name: unpadded global tensor}, tokenizer path or None) for any ``path``
    (including a model name, see :mod:`mwb.core.named_models`)."""
    path = os.path.abspath(os.path.expanduser(str(local_checkpoint(path))))
    if os.path.isfile(path) and path.endswith(".safetensors"):
        return _read_consolidated(path)
    if is_hf_dir(path):
        from ..convert import load_hf
        return load_hf(path)
    ck = Checkpoint(resolve(path))
    vocab = int(ck.meta["vocab_size"])
    tok = tokenizer_path(ck.directory, ck.meta)
    tensors = {name: ck.model_tensor(name) for name in ck.tensors}
    return _config(ck.meta.get("config") or {}, vocab, tok), vocab, tensors, tok


def build_full_model(cfg: RunConfig, vocab: int, tensors: dict, device="cpu",
                     source: str = "checkpoint") -> torch.nn.Module:
    """A single-process model of ``cfg.model`` holding ``tensors`` (global, unpadded)."""
    from ..models.build import build_model
    from ..parallel.state import single_process_state

    model = build_model(cfg.model, single_process_state(), vocab, cfg.train.seed)

    def get(name):
        if name not in tensors:
            raise CheckpointError(f"{source} has no tensor {name} (its model settings differ)")
        return tensors[name]
    copy_full_tensors([model], get, vocab, cfg.model.tie_embeddings, source=source)
    return model.to(device).eval()


def load_full_model(path: str, device="cpu") -> tuple[RunConfig, torch.nn.Module, Optional[str]]:
    """(run config, single-process model in eval mode, tokenizer path or None) from any checkpoint path.

    ``cfg.model.vocab_size`` is the real vocabulary size and ``cfg.data.tokenizer`` the stored tokenizer.
    """
    cfg, vocab, tensors, tok = full_state(path)
    model = build_full_model(cfg, vocab, tensors, device, source=str(path))
    return cfg, model, tok


def consolidate(src_ckpt: str, dst_file: str) -> str:
    """Write the full model of ``src_ckpt`` (any path :func:`load_full_model` takes) as one safetensors
    file with the config and vocabulary size in its header; returns ``dst_file``."""
    from safetensors.torch import save_file
    from .writer import config_tree

    cfg, vocab, tensors, tok = full_state(src_ckpt)
    meta = {"format": CONSOLIDATED, "config": json.dumps(config_tree(cfg)), "vocab_size": str(vocab)}
    dst_file = os.path.abspath(dst_file)
    os.makedirs(os.path.dirname(dst_file), exist_ok=True)
    tmp = dst_file + ".partial"
    save_file({k: v.contiguous() for k, v in tensors.items()}, tmp, metadata=meta)
    os.replace(tmp, dst_file)
    return dst_file


def _read_consolidated(path: str):
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
