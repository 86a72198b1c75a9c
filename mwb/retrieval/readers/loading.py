"""Building and loading readers: which reader a checkpoint is, and its weights in any tensor-parallel layout.

A BERT checkpoint is an extractive reader, a T5 checkpoint a FiD reader and a GPT checkpoint
(``smollm2-135m``) a causal reader. A trained reader (``mwb finetune qa-reader``, a joint ``e2e-qa`` run's
``reader``, or a ``mwb finetune squad`` checkpoint, whose parameter names match) loads whole; a pretrained
BERT (``minilm-l6``, ``mwb pretrain bert``) gives the encoder and the span head starts from its seeded
initial value; a pretrained T5 or GPT is already a complete reader.
"""
from __future__ import annotations

import os
from typing import Optional

from mwb.core.checkpoint.reader import copy_full_tensors
from mwb.core.compose import build_model, full_state
from mwb.core.config import ConfigError
from mwb.core.errors import CheckpointError
from mwb.core.parallel.state import single_process_state
from mwb.core.tokenizers import load_tokenizer

from .base import KINDS, ReaderConfig
from .causal import CausalReader
from .extractive import ExtractiveReader, build_span_model
from .fid import FiDReader

KIND_OF_ARCH = {"bert": "extractive", "t5": "fid", "gpt": "causal"}


def reader_kind(arch: str, where: str = "the checkpoint") -> str:
    if arch not in KIND_OF_ARCH:
        raise ConfigError(f"{where} holds a '{arch}' model; a reader is a BERT (extractive), a T5 (FiD) "
                          f"or a GPT (causal)")
    return KIND_OF_ARCH[arch]


def build_reader_model(kind: str, model_cfg, state, vocab: int, seed: int, device="cpu", dtype=None):
    """The reader's ``nn.Module`` for this rank, randomly initialised as the one-process model is."""
    if kind not in KINDS:
        raise ConfigError(f"reader must be one of {', '.join(KINDS)}, got '{kind}'")
    if state.pp_size > 1:
        raise ConfigError("readers run on one pipeline stage: use --pp 1")
    if kind == "extractive":
        return build_span_model(model_cfg, state, vocab, seed, device, dtype)
    return build_model(model_cfg, state, vocab, seed, device, dtype)


def fill_reader(model, kind: str, tensors: dict, vocab: int, tied: bool, source: str) -> list[str]:
    """Copy global ``tensors`` into ``model`` (any TP layout); returns the parameters left at their initial
    value (the span head when ``tensors`` is a pretrained BERT)."""
    def get(name):
        if name not in tensors:
            raise CheckpointError(f"{source} has no tensor {name}: not a {kind} reader or its base model")
        return tensors[name]
    if kind == "extractive" and "classifier.weight" not in tensors:
        copy_full_tensors([model.encoder], get, vocab, tied, source)
        return ["classifier.weight", "classifier.bias"]
    copy_full_tensors([model], get, vocab, tied, source)
    return []


def wrap(kind: str, model, tokenizer, cfg: ReaderConfig, state=None):
    if kind == "extractive":
        return ExtractiveReader(model, tokenizer, cfg)
    return (FiDReader if kind == "fid" else CausalReader)(model, tokenizer, cfg, state)


def load_reader(path: str, device="cpu", cfg: ReaderConfig = ReaderConfig(), tokenizer: Optional[str] = None):
    """A single-process reader (eval mode) from any checkpoint path ``full_state`` reads; ``reader.run_cfg`` is
    the checkpoint's run config."""
    run_cfg, vocab, tensors, tok_path = full_state(path)
    kind = reader_kind(run_cfg.model.arch, path)
    if not (tokenizer or tok_path):
        raise ConfigError(f"{path} names no tokenizer: pass --tokenizer PATH")
    if kind == "extractive" and cfg.seq_length > run_cfg.model.max_position_embeddings:
        cfg = ReaderConfig(**{**cfg.__dict__, "seq_length": run_cfg.model.max_position_embeddings})
    model = build_reader_model(kind, run_cfg.model, single_process_state(), vocab, run_cfg.train.seed, device)
    fill_reader(model, kind, tensors, vocab, run_cfg.model.tie_embeddings, str(path))
    reader = wrap(kind, model.eval(), load_tokenizer(tokenizer or tok_path), cfg)
    reader.run_cfg = run_cfg  # what results.json records as the model's config
    return reader


def joint_run_parts(path: str) -> Optional[tuple[str, str]]:
    """``(retriever, reader)`` checkpoint directories of a joint ``mwb finetune e2e-qa`` run, or None when
    ``path`` is not one. Accepts the run directory (its best checkpoint, else the latest: ``checkpoints/best``
    or ``checkpoints/latest`` name the step directory) or a checkpoint directory holding ``retriever/`` and
    ``reader/``."""
    path = os.path.abspath(os.path.expanduser(str(path)))
    candidates = [path]
    root = os.path.join(path, "checkpoints")
    for pointer in ("best", "latest"):
        p = os.path.join(root, pointer)
        if os.path.isdir(p):
            candidates.append(p)
        elif os.path.isfile(p):
            with open(p) as f:
                candidates.append(os.path.join(root, f.read().strip()))
    for c in candidates:
        if os.path.isdir(os.path.join(c, "retriever")) and os.path.isdir(os.path.join(c, "reader")):
            return os.path.join(c, "retriever"), os.path.join(c, "reader")
    return None
