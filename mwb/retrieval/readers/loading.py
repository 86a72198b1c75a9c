"""Building and loading readers: which reader a checkpoint is, and its weights in any tensor-parallel layout.

A BERT checkpoint is an extractive reader and a T5 checkpoint a FiD reader. A trained reader (``mwb finetune
qa-reader``, a joint ``e2e-qa`` run's ``reader``, or a ``mwb finetune squad`` checkpoint, whose parameter
names match) loads whole; a pretrained BERT (``minilm-l6``, ``mwb pretrain bert``) gives the encoder and the
span head starts from its seeded initial value; a pretrained T5 is already a complete FiD reader.
"""
from __future__ import annotations

from typing import Optional

from mwb.core.checkpoint.reader import copy_full_tensors
from mwb.core.compose import build_model, full_state
from mwb.core.config import ConfigError
from mwb.core.errors import CheckpointError
from mwb.core.parallel.state import single_process_state
from mwb.core.tokenizers import load_tokenizer

from .base import KINDS, ReaderConfig
from .extractive import ExtractiveReader, build_span_model
from .fid import FiDReader

KIND_OF_ARCH = {"bert": "extractive", "t5": "fid"}


def reader_kind(arch: str, where: str = "the checkpoint") -> str:
    if arch not in KIND_OF_ARCH:
        raise ConfigError(f"{where} holds a '{arch}' model; a reader is a BERT (extractive) or a T5 (FiD)")
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
    return ExtractiveReader(model, tokenizer, cfg) if kind == "extractive" else FiDReader(model, tokenizer, cfg, state)


def load_reader(path: str, device="cpu", cfg: ReaderConfig = ReaderConfig(), tokenizer: Optional[str] = None):
    """A single-process reader (eval mode) from any checkpoint path ``full_state`` reads."""
    run_cfg, vocab, tensors, tok_path = full_state(path)
    kind = reader_kind(run_cfg.model.arch, path)
    if not (tokenizer or tok_path):
        raise ConfigError(f"{path} names no tokenizer: pass --tokenizer PATH")
    if kind == "extractive" and cfg.seq_length > run_cfg.model.max_position_embeddings:
        cfg = ReaderConfig(**{**cfg.__dict__, "seq_length": run_cfg.model.max_position_embeddings})
    model = build_reader_model(kind, run_cfg.model, single_process_state(), vocab, run_cfg.train.seed, device)
    fill_reader(model, kind, tensors, vocab, run_cfg.model.tie_embeddings, str(path))
    return wrap(kind, model.eval(), load_tokenizer(tokenizer or tok_path), cfg)
