"""Generative fine-tuning on any prompt → target data (instruction tuning, seq2seq), GPT or T5.

Data: a directory with one file per split (``train``, ``dev``, ``test``; ``.jsonl``/``.json``/``.csv``/``.tsv``/
``.parquet``, read with ``datasets``), or a single file used for every split. Field names, first match wins:
``prompt``/``target``, ``source``/``target``, ``input``/``output``, or the Alpaca layout ``instruction`` +
optional ``input`` → ``output`` (joined as ``instruction\\n\\ninput``). The bundled sample pairs a short
speech from the bundled Shakespeare corpus with the reply that follows it (``data/prompt_target/``).

Objective: the target tokens only (GPT: the prompt is context; T5: encoder input → decoder target).
Metrics: exact match and token F1 (SQuAD normalisation) of greedy generations against the target.
"""
from __future__ import annotations

import os

from mwb.core.errors import DataError
from mwb.evaluation.records import load_records

from .base import Option, Task
from .registry import register

SAMPLE = os.path.join(os.path.dirname(__file__), "data", "prompt_target")
FIELDS = (("prompt", "target"), ("source", "target"), ("input", "output"))
EXTENSIONS = (".jsonl", ".json", ".csv", ".tsv", ".parquet")


def field_pair(row: dict, fields, where: str):
    """``(row[a], row[b])`` for the first ``(a, b)`` of ``fields`` that ``row`` has (both strings), else None."""
    for a, b in fields:
        if a in row and b in row:
            if not isinstance(row[a], str) or not isinstance(row[b], str):
                raise DataError(f"{where}: fields '{a}'/'{b}' must be strings")
            return row[a], row[b]
    return None


def to_pair(row: dict, where: str) -> dict:
    if "instruction" in row and "output" in row:
        extra = row.get("input") or ""
        return {"prompt": row["instruction"] + (f"\n\n{extra}" if extra else ""), "target": row["output"]}
    pair = field_pair(row, FIELDS, where)
    if pair:
        return {"prompt": pair[0], "target": pair[1]}
    raise DataError(f"{where}: a row needs prompt/target, source/target, input/output or instruction/output "
                    f"fields (has: {', '.join(sorted(row))})")


def split_file(path: str, split: str) -> str:
    if os.path.isfile(path):
        return path
    for ext in EXTENSIONS:
        f = os.path.join(path, split + ext)
        if os.path.isfile(f):
            return f
    raise DataError(f"split '{split}' not found under {path} (expected {split}.jsonl/.json/.csv/.tsv/.parquet)")


@register("prompt-target", "instruct")
class PromptTarget(Task):
    description = "generative fine-tuning on prompt → target pairs (GPT or T5), exact match / F1 of generations"
    objective = "generative"
    metric = "exact_match"
    default_data = SAMPLE
    options = {**Task.options,
               "max_tokens": Option(int, 32, "Longest generation when scoring."),
               "first_line": Option(bool, False, "Keep only the first line of each generation.")}

    def read(self, path: str, split: str) -> list[dict]:
        f = split_file(path, split)
        return [to_pair(r, f"{f}: row {n + 1}") for n, r in enumerate(load_records(f))]

    def inputs(self, example: dict, tokenizer, seq_length: int) -> dict:
        return {"prompt": example["prompt"], "target": " " + example["target"].strip()}
