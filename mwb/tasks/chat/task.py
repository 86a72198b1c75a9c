"""``chat``: supervised fine-tuning on conversations, in the checkpoint's own chat format, loss on the replies.

Data: OpenAI ``messages`` or ShareGPT ``conversations`` rows (:mod:`.reader`), a directory with a file per split
(``train``, ``dev``; ``.jsonl``/``.json``/``.parquet``) or one file for every split; with no ``--data``, the
bundled sample. Training: each conversation is rendered as serving renders it (the checkpoint tokenizer's chat
template, else the plain ``User: … / Assistant: …`` format) with the loss on every assistant turn and the token
that ends it (:mod:`.render`), so a multi-turn row trains every reply. Evaluation: the conversation up to its last
reply, rendered with the generation prompt, is the prompt; the greedy reply (cut where the chat format stops a
served reply) is scored against the last reply by exact match and token F1. The fine-tuned run serves the same
format: ``mwb serve --checkpoint RUN`` answers ``/v1/chat/completions`` with it. GPT checkpoints only.
"""
from __future__ import annotations

import os
from typing import Optional

from mwb.evaluation.chat_format import ChatFormat, chat_format_for

from ..api.base import Option, Task
from ..api.registry import register
from ..api.objectives import GENERATIVE
from .reader import read_split
from .render import chat_sample

SAMPLE = os.path.join(os.path.dirname(__file__), "bundled")


def cut_at_stops(text: str, stops) -> str:
    """``text`` up to the first stop string of the chat format (a served reply ends there), stripped."""
    cut = min((text.find(s) for s in stops if s and s in text), default=len(text))
    return text[:cut].strip()


@register("chat", "sft")
class Chat(Task):
    description = ("chat SFT: OpenAI messages / ShareGPT conversations in the checkpoint's chat template, loss on "
                   "every assistant turn; EM / F1 of the last reply")
    objective = GENERATIVE
    metric = "exact_match"
    default_data = SAMPLE
    options = {**Task.options,
               "max_tokens": Option(int, 64, low=1, help="Longest generated reply when scoring.")}

    def __init__(self, **opts) -> None:
        super().__init__(**opts)
        self.format: Optional[ChatFormat] = None  # the checkpoint's, once a tokenizer is known

    def arches(self) -> tuple[str, ...]:
        return ("gpt",)

    def read(self, path: str, split: str) -> list[dict]:
        return read_split(path, split)

    def chat_format(self, tokenizer=None) -> ChatFormat:
        """The chat format of ``tokenizer`` (remembered), else the one already known, else the plain format."""
        if tokenizer is not None and self.format is None:
            self.format = chat_format_for(tokenizer.path)
        return self.format or ChatFormat()

    def inputs(self, example: dict, tokenizer, seq_length: int) -> dict:
        """Evaluation: the conversation before its last reply, with the generation prompt → that reply."""
        messages = example["messages"]
        return {"prompt": self.chat_format(tokenizer).render(messages[:-1], add_generation_prompt=True),
                "target": messages[-1]["content"]}

    def gpt_sample(self, example: dict, tokenizer, seq_length: int) -> dict:
        return chat_sample(self.chat_format(tokenizer), example["messages"], tokenizer, seq_length,
                           example.get("where", "chat"))

    def load_model(self, checkpoint: str, tokenizer: Optional[str] = None, device=None):
        """The generative objective's model, and the chat format of the tokenizer it runs with."""
        cfg, runner = super().load_model(checkpoint, tokenizer, device)
        self.format = chat_format_for(runner.tokenizer.path)
        return cfg, runner

    def run(self, runner, items) -> list[str]:
        """Greedy replies, each cut where the chat format ends a served reply."""
        return [cut_at_stops(text, self.chat_format().stops) for text in super().run(runner, items)]
