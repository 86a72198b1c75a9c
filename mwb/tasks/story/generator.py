"""The conditional generator: a GPT fine-tuned on ``knowledge <sep> story so far → next sentence``.

Data: the ``{split}.jsonl`` files ``mwb finetune story`` prepares (``OUT/data/generator``): per story and
sentence 2..5, the story so far (``context``), the next sentence (``target``), its RAKE keywords and the
top-N knowledge sentences the trained ranker chose for those keywords (``knowledge``). Inputs:
``"Knowledge: k1 k2 k3\\nStory: <context>\\nNext:"`` → ``" <target>"``; with ``--no-knowledge`` (the ablation)
the knowledge line is left out. Objective: generative, the loss on the target tokens only. Metrics: token F1
and exact match of greedy next sentences (the story metrics are ``mwb eval story``'s).
"""
from __future__ import annotations

import os

from mwb.core.errors import DataError
from mwb.evaluation.task_data import load_records

from ..api.base import Option, Task
from ..api.formats.checks import strings, text
from ..api.registry import register
from ..api.objectives import GENERATIVE


def generator_prompt(context: str, knowledge: list[str] = None) -> str:
    head = f"Knowledge: {' '.join(knowledge)}\n" if knowledge else ""
    return f"{head}Story: {context}\nNext:"


@register("story-generator")
class StoryGenerator(Task):
    description = "MEGATRON-CNTRL generator: ranked knowledge + story so far → next sentence (GPT)"
    objective = GENERATIVE
    metric = "dev_loss"
    options = {**Task.options,
               "max_tokens": Option(int, 40, low=1, help="Longest generated sentence, in tokens."),
               "first_line": Option(bool, True, "Keep only the first line of each generation."),
               "knowledge": Option(bool, True, "Condition on the ranked knowledge (--no-knowledge: the ablation).")}

    def read(self, path: str, split: str) -> list[dict]:
        f = os.path.join(path, f"{split}.jsonl") if os.path.isdir(path) else path
        if not os.path.isfile(f):
            raise DataError(f"{f} not found: story-generator reads the {split}.jsonl that `mwb finetune story` "
                            f"prepares under OUT/data/generator")
        rows = load_records(f)
        for n, r in enumerate(rows):
            if not {"context", "target", "knowledge"} <= set(r):
                raise DataError(f"{f}: row {n + 1} needs context, target and knowledge fields")
            where = f"{f}: row {n + 1}"
            text(r, "context", where), text(r, "target", where, empty=False)
            strings(r["knowledge"], where, "knowledge")
        return rows

    def inputs(self, example: dict, tokenizer, seq_length: int) -> dict:
        knowledge = example["knowledge"] if self.opts["knowledge"] else None
        return {"prompt": generator_prompt(example["context"], knowledge), "target": " " + example["target"]}
