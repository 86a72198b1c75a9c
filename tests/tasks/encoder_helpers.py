"""A random-initialised tiny BERT checkpoint with the bundled tokenizer, for fine-tuning tests."""
from __future__ import annotations

from tests.helpers.checkpoints import TOKENIZER, tiny_checkpoint

__all__ = ["TOKENIZER", "tiny_bert_checkpoint"]


def tiny_bert_checkpoint(directory: str, layers: int = 2, hidden: int = 64, seq: int = 128) -> str:
    return tiny_checkpoint(directory, "bert-tiny", seq=seq, num_layers=layers, hidden_size=hidden,
                           num_attention_heads=4)
