"""A random-initialised tiny BERT checkpoint with the bundled tokenizer, for fine-tuning tests."""
from __future__ import annotations

import os

from mwb.core.config import RunConfig
from mwb.core.presets import apply_preset

TOKENIZER = os.path.join(os.path.dirname(__file__), "..", "..", "mwb", "data", "corpus", "tokenizer.json")


def tiny_bert_checkpoint(directory: str, layers: int = 2, hidden: int = 64, seq: int = 128) -> str:
    from mwb.core.checkpoint import write_model_checkpoint
    from mwb.core.config import update
    from mwb.core.compose import build_model
    from mwb.core.parallel.state import single_process_state
    from mwb.core.tokenizers import load_tokenizer

    tok = load_tokenizer(TOKENIZER)
    cfg = update(apply_preset(RunConfig(), "bert-tiny"),
                 {"model": {"num_layers": layers, "hidden_size": hidden, "num_attention_heads": 4, "dropout": 0.0,
                            "vocab_size": tok.vocab_size},
                  "train": {"seq_length": seq}})
    model = build_model(cfg.model, single_process_state(), tok.vocab_size, seed=11)
    tensors = {k: v[: tok.vocab_size] if k.endswith("word.weight") else v for k, v in model.state_dict().items()
               if not k.endswith("head.weight")}
    write_model_checkpoint(directory, cfg, tok.vocab_size, tensors, extra_files={"tokenizer": TOKENIZER})
    return directory
