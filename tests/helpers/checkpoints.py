"""Randomly initialised tiny mwb checkpoints (any preset) with the bundled tokenizer, for task tests."""
from __future__ import annotations

import os

from mwb.core.checkpoint import write_model_checkpoint
from mwb.core.config import RunConfig, update
from mwb.core.compose import build_model
from mwb.core.parallel.state import single_process_state
from mwb.core.presets import apply_preset
from mwb.core.tokenizers import load_tokenizer

TOKENIZER = os.path.join(os.path.dirname(__file__), "..", "..", "mwb", "data", "corpus", "tokenizer.json")


def tiny_checkpoint(directory: str, preset: str, seq: int = 128, seed: int = 11, tokenizer: str = TOKENIZER,
                    **model) -> str:
    """``preset`` (e.g. ``gpt-tiny``) with ``model`` overrides, written as an mwb checkpoint in ``directory``
    with ``tokenizer`` (default: the bundled one)."""
    tok = load_tokenizer(tokenizer)
    cfg = update(apply_preset(RunConfig(), preset),
                 {"model": {"dropout": 0.0, "vocab_size": tok.vocab_size, **model}, "train": {"seq_length": seq}})
    net = build_model(cfg.model, single_process_state(), tok.vocab_size, seed=seed)
    tensors = {}
    for k, v in net.state_dict().items():
        if k.endswith("head.weight") and cfg.model.tie_embeddings:
            continue  # the tied head is the word embedding
        tensors[k] = v[: tok.vocab_size] if k.endswith(("word.weight", "head.weight")) else v
    write_model_checkpoint(directory, cfg, tok.vocab_size, tensors, extra_files={"tokenizer": tokenizer})
    return directory
