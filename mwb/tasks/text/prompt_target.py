"""Generative fine-tuning on any prompt → target data (instruction tuning, seq2seq), GPT or T5.

Data: a directory with one file per split (``train``, ``dev``, ``test``; ``.jsonl``/``.json``/``.csv``/``.tsv``/
``.parquet``, read with ``datasets``), or a single file used for every split. Field names, first match wins:
``prompt``/``target``, ``source``/``target``, ``input``/``output``, or the Alpaca layout ``instruction`` +
optional ``input`` → ``output`` (joined as ``instruction\\n\\ninput``); the reader is
:mod:`mwb.tasks.api.formats.prompt_target`. The bundled sample pairs a short speech from the bundled
Shakespeare corpus with the reply that follows it (``bundled/prompt_target/``).

Objective: the target tokens only (GPT: the prompt is context; T5: encoder input → decoder target).
Metrics: exact match and token F1 (SQuAD normalisation) of greedy generations against the target.
"""
from __future__ import annotations

import os

from ..api.base import Option, Task
from ..api.formats.prompt_target import read_pairs, to_pair
from ..api.registry import register
from ..api.objectives import GENERATIVE
from ..api.finetuning_spec import Finetuning, RealScale

SAMPLE = os.path.join(os.path.dirname(__file__), "bundled", "prompt_target")


@register("prompt-target", "instruct")
class PromptTarget(Task):
    description = "generative fine-tuning on prompt → target pairs (GPT or T5), exact match / F1 of generations"
    objective = GENERATIVE
    metric = "exact_match"
    default_data = SAMPLE
    # From SmolLM2-135M (LoRA) the bundled sample's 64 pairs, 3 epochs at 64 tokens (the longest pair is 41
    # SmolLM2 tokens; at 128, 80% of every row was padding): 12 steps
    finetuning = Finetuning(real=RealScale(config={"train": {"seq_length": 64}}, epochs=3))
    options = {**Task.options,
               "max_tokens": Option(int, 32, low=1, help="Longest generation when scoring."),
               "first_line": Option(bool, False, "Keep only the first line of each generation.")}

    def read(self, path: str, split: str) -> list[dict]:
        return read_pairs(path, split, to_pair, "prompt-target")

    def inputs(self, example: dict, tokenizer, seq_length: int) -> dict:
        return {"prompt": example["prompt"], "target": " " + example["target"].strip()}
