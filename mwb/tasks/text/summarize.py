"""Abstractive summarization: source → summary with a T5 (encoder → decoder) or a GPT (source as context).

Data: a directory with a file per split (``train``, ``dev``; ``.jsonl``/``.json``/``.csv``/``.tsv``/``.parquet``,
read with ``datasets`` by :mod:`mwb.tasks.api.formats.prompt_target`), or one file for every split. Fields,
first match wins: CNN/DailyMail's ``article``/``highlights``, XSum's ``document``/``summary``, or
``source``/``target``. The source is cut to
its first ``--source-words`` words (the lead carries a news story's gist; GPT prompts are otherwise cut
from the front). Metrics: ROUGE-1/2/L F-measure (``rouge-score``, Porter stemming) of greedy generations,
next to the lead baseline (the source's first sentence as the summary).
"""
from __future__ import annotations

import re

from mwb.core.errors import DataError
from mwb.evaluation.rouge import ROUGE_TYPES, pair_scores

from ..api.base import MetricSpec, Option, Task
from ..api.formats.prompt_target import field_pair, read_pairs
from ..api.records import example_ids
from ..api.registry import register
from ..api.objectives import GENERATIVE

FIELDS = (("article", "highlights"), ("document", "summary"), ("source", "target"))
SENTENCE_END = re.compile(r"(?<=[a-z0-9%)\"'][.!?])\s+(?=[A-Z0-9\"'])")  # not after "U.S." initials


def lead_sentence(text: str) -> str:
    """The first sentence of ``text``: up to the first ``.``/``!``/``?`` that ends a lowercase word, a number
    or a quote and is followed by white space and a capital, digit or quote."""
    return SENTENCE_END.split(text.strip(), maxsplit=1)[0]


def to_pair(row: dict, where: str) -> dict:
    pair = field_pair(row, FIELDS, where)
    if pair:
        return {"source": pair[0], "summary": pair[1]}
    raise DataError(f"{where}: a row needs article/highlights, document/summary or source/target fields "
                    f"(has: {', '.join(sorted(row))})")


@register("summarize")
class Summarize(Task):
    description = "summarization (CNN/DM, XSum or source/target files) with T5 or GPT, ROUGE-1/2/L F"
    objective = GENERATIVE
    metric = "rougeL"
    options = {**Task.options,
               "max_tokens": Option(int, 64, low=1, help="Longest generated summary, in tokens."),
               "source_words": Option(int, 200, low=1, help="Source words kept (its lead)."),
               "first_line": Option(bool, True, "Keep only the first line of each generation."),
               "num_beams": Option(int, 1, low=1, help="Beam search width (1: greedy)."),
               "length_penalty": Option(float, 1.0, low=0.0, help="Beam score = sum log p / length ** this."),
               "no_repeat_ngram": Option(int, 0, low=0,
                                         help="Never repeat an n-gram of this size in a summary (0: off).")}
    prompt_suffix = "\nSummary:"

    def read(self, path: str, split: str) -> list[dict]:
        return read_pairs(path, split, to_pair, "summarization")

    def inputs(self, example: dict, tokenizer, seq_length: int) -> dict:
        lead = " ".join(example["source"].split()[: self.opts["source_words"]])
        return {"prompt": lead + self.prompt_suffix, "target": " " + " ".join(example["summary"].split())}

    metric_specs = (*(MetricSpec(f"{who}{k}", "mean", empty=0.0) for who in ("", "lead_") for k in ROUGE_TYPES),
                    MetricSpec("count", "count"))

    def records(self, preds: list, examples: list[dict]) -> list[dict]:
        """Per document (id: its own, else a hash of it): ``rouge1``/``rouge2``/``rougeL`` F × 100 of the
        generation and ``lead_*`` of the lead sentence — each corpus number is the mean of these."""
        refs = [" ".join(e["summary"].split()) for e in examples]
        ours = pair_scores([p.strip() for p in preds], refs)
        lead = pair_scores([lead_sentence(e["source"]) for e in examples], refs)
        return [{"id": i, "prediction": p.strip(), "gold": r, **o, **{f"lead_{k}": v for k, v in b.items()}}
                for i, p, r, o, b in zip(example_ids(examples), preds, refs, ours, lead)]
