"""The base of zero-shot language-model tasks (LAMBADA, WikiText): a GPT checkpoint scored as it is.

They are ``custom`` objectives — they build their own items (passages, sliding windows) and score them with
the model's log-probabilities — and share two options and one rule: the context length defaults to the
model's (at most 1024) and may not exceed it.
"""
from __future__ import annotations

from typing import Optional

from mwb.core.config import ConfigError
from mwb.evaluation.loading import load_language_model

from ..api.base import Option, Task
from ..api.objectives import CUSTOM


class LMTask(Task):
    objective = CUSTOM
    options = {
        "seq_length": Option(int, None, low=1,
                             help="Tokens of context per forward pass (default: the model's maximum)."),
        "batch_size": Option(int, 8, low=1, help="Sequences per forward pass."),
    }

    def load_model(self, checkpoint: str, tokenizer: Optional[str] = None, device=None):
        return load_language_model(checkpoint, tokenizer, device=device)

    def context_length(self, lm) -> Optional[int]:
        return lm.max_length  # the language model's positions

    def seq_length(self, lm) -> int:
        n = self.option("seq_length") or min(lm.max_length, 1024)
        if n > lm.max_length:
            raise ConfigError(f"--seq-length {n} exceeds the model's {lm.max_length} positions")
        return n

    @staticmethod
    def pad_id(lm) -> int:
        return lm.eod if lm.eod is not None else 0
