"""BioASQ factoid question answering in the BioBERT layout, as BioBERT and BioMegatron score it.

Data: a folder with ``{split}.json`` in SQuAD format (``data[].paragraphs[].context`` + ``qas[]``), one
paragraph per snippet, whose question ids are the 24-character BioASQ question id plus a per-snippet suffix
(``55031181e9bde69634000014_003``); gold answers come from ``{split}_golden.json`` in BioASQ's own format
(``questions[].exact_answer``: a list of synonym lists) when the folder has it, else from the snippets'
SQuAD answers. ``--golden FILE`` names another golden file.

Inputs: ``[CLS] question [SEP] snippet [SEP]``; the span head is trained on the answer's first and last tokens
(:mod:`mwb.core.data.spans`). Predictions: each snippet's 20-best spans with probabilities; per question the snippets'
lists are pooled — empty and >100-character answers dropped, case-insensitive duplicates merged by summing
probabilities, top 5 kept (:mod:`.bioasq_metrics`). Metrics: strict accuracy, lenient
accuracy, MRR (the best checkpoint is picked by MRR).
"""
from __future__ import annotations

import os

import numpy as np

from mwb.core.data.spans import nbest_spans, span_inputs
from mwb.core.errors import DataError

from ..api.base import MetricSpec, Option, Task
from ..api.formats.splits import split_file
from ..api.formats.squad_json import read_squad_json
from ..api.registry import register
from ..api.objectives import SPAN
from .bioasq_metrics import pool_answers, question_scores, read_golden

SAMPLE = os.path.join(os.path.dirname(__file__), "bundled", "bioasq_sample")
QID_CHARS = 24


def read_snippets(path: str) -> list[dict]:
    """One example per (question, snippet): ``{"id", "qid", "question", "context", "answers", "answer_start"}``."""
    out = []
    for para in read_squad_json(path, "BioASQ in the BioBERT layout: SQuAD-format {split}.json"):
        for qa in para["qas"]:
            answers = qa["answers"]
            out.append({"id": qa["id"], "qid": qa["id"][:QID_CHARS], "question": qa["question"],
                        "context": para["context"], "answers": [a["text"] for a in answers],
                        "answer_start": answers[0]["answer_start"] if answers else None})
    if not out:
        raise DataError(f"{path} holds no questions")
    return out


@register("bioasq")
class BioASQ(Task):
    description = "BioASQ factoid QA (BioBERT layout, SQuAD JSON per snippet): n-best pooling, SAcc/LAcc/MRR"
    objective = SPAN
    metric = "mrr"
    default_data = SAMPLE
    options = {**Task.options,
               "golden": Option(str, None, "BioASQ golden file (default: {split}_golden.json beside the data)."),
               "n_best": Option(int, 20, low=1, help="Spans kept per snippet before pooling."),
               "max_answer_tokens": Option(int, 30, low=1, help="Longest answer span in tokens.")}

    def read(self, path: str, split: str) -> list[dict]:
        examples = read_snippets(split_file(path, split, (f"{split}.json",), "BioASQ (BioBERT layout)"))
        golden_file = self.opts["golden"] or os.path.join(path, f"{split}_golden.json")
        golden = read_golden(golden_file) if os.path.isfile(golden_file) else {}
        for e in examples:
            e["gold"] = golden.get(e["qid"])
        return examples

    def inputs(self, example: dict, tokenizer, seq_length: int) -> dict:
        text = example["answers"][0] if example["answers"] else None
        return span_inputs(example["question"], example["context"], example["answer_start"], text, tokenizer,
                           seq_length)

    def decode(self, logits: np.ndarray, feature: dict) -> list[tuple]:
        return nbest_spans(logits, feature, self.opts["n_best"], self.opts["max_answer_tokens"])

    @staticmethod
    def pooled(preds: list, examples: list[dict]) -> tuple[dict, dict]:
        """(question id → its pooled top answers, question id → its gold synonyms), questions in file order."""
        pooled: dict[str, list] = {}
        golden: dict[str, list] = {}
        for spans, e in zip(preds, examples):
            pooled.setdefault(e["qid"], []).extend((e["context"][s:t], p) for s, t, p in spans)
            gold = e["gold"] if e["gold"] is not None else e["answers"]
            golden.setdefault(e["qid"], [])
            golden[e["qid"]] += [g for g in gold if g not in golden[e["qid"]]]
        return {qid: pool_answers(c) for qid, c in pooled.items()}, golden

    metric_specs = tuple(MetricSpec(m, "mean", empty=0.0) for m in ("strict_accuracy", "lenient_accuracy", "mrr")) \
        + (MetricSpec("questions", "count"), MetricSpec("snippets", "summary"))

    def summary(self, preds: list, examples: list[dict], records: list[dict]) -> dict:
        return {"snippets": len(examples)}  # what the questions' answers were pooled from

    def records(self, preds: list, examples: list[dict]) -> list[dict]:
        """Per question (id: the 24-character BioASQ question id; its snippets its snippets' answers pooled):
        ``strict_accuracy``, ``lenient_accuracy`` (0/1) and ``mrr`` (the reciprocal rank)."""
        answers, golden = self.pooled(preds, examples)
        return [{"id": qid, "prediction": answers.get(qid, []), "gold": gold,
                 **question_scores(answers.get(qid, []), gold)} for qid, gold in golden.items()]
