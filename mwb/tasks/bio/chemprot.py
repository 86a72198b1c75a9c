"""ChemProt chemical–protein relation extraction in the BLUE layout (Peng et al. 2019), as BioMegatron scores it.

Data: ``{train,dev,test}.tsv`` with the header ``index<TAB>sentence<TAB>label``. Each row is one
chemical–gene pair of a sentence whose mentions are already replaced by ``@CHEMICAL$`` and ``@GENE$``
(``@CHEM-GENE$`` where the two overlap); the markers go to the tokenizer as they are. Labels: ``CPR:3``,
``CPR:4``, ``CPR:5``, ``CPR:6``, ``CPR:9`` and ``false`` (no relation).

Inputs: ``[CLS] sentence [SEP]``; the pooled [CLS] feeds a 6-way classifier.

Metric: micro P/R/F1 over the five CPR classes only, ``false`` excluded — a ``false`` pair predicted as
``CPR:x`` is a false positive for ``CPR:x`` (:func:`.classification_metrics.micro_prf`).
"""
from __future__ import annotations

import csv
import io
import os

import numpy as np

from mwb.core.errors import DataError

from ..api.base import MetricSpec, Task, single_inputs
from ..api.formats.checks import read_text
from ..api.formats.splits import split_file
from ..api.records import example_ids
from ..api.registry import register
from ..api.objectives import CLASSIFICATION
from .classification_metrics import prf_counts

LABELS = ("false", "CPR:3", "CPR:4", "CPR:5", "CPR:6", "CPR:9")
RELATIONS = LABELS[1:]
HEADER = ["index", "sentence", "label"]
SAMPLE = os.path.join(os.path.dirname(__file__), "bundled", "chemprot_sample")


def read_blue_tsv(path: str, labels=LABELS) -> list[dict]:
    """Rows of a BLUE classification file as ``{"id", "sentence", "label"}`` (label: index into ``labels``)."""
    if not os.path.isfile(path):
        raise DataError(f"{path} not found (BLUE layout: train.tsv, dev.tsv, test.tsv with header "
                        f"{'<TAB>'.join(HEADER)})")
    rows = list(csv.reader(io.StringIO(read_text(path), newline=""), delimiter="\t", quoting=csv.QUOTE_NONE))
    if not rows or [c.strip() for c in rows[0]] != HEADER:
        raise DataError(f"{path}: the first line must be the header {'<TAB>'.join(HEADER)}, got "
                        f"{'<TAB>'.join(rows[0]) if rows else 'an empty file'!r}")
    out = []
    for n, row in enumerate(rows[1:], 2):
        if not row:
            continue
        if len(row) != 3:
            raise DataError(f"{path}:{n}: expected 3 tab-separated fields (index, sentence, label), got {len(row)}")
        if row[2] not in labels:
            raise DataError(f"{path}:{n}: label {row[2]!r} is not one of {', '.join(labels)}")
        out.append({"id": row[0], "sentence": row[1], "label": labels.index(row[2])})
    if not out:
        raise DataError(f"{path} holds no rows")
    return out


@register("chemprot")
class ChemProt(Task):
    description = "ChemProt relation extraction (BLUE layout): 6-way classification, micro F1 over CPR:3/4/5/6/9"
    objective = CLASSIFICATION
    num_labels = len(LABELS)
    metric = "f1"
    default_data = SAMPLE

    def read(self, path: str, split: str) -> list[dict]:
        return read_blue_tsv(split_file(path, split, (f"{split}.tsv",), "ChemProt (BLUE layout)",
                                         whole_file=False))

    def inputs(self, example: dict, tokenizer, seq_length: int) -> dict:
        return {**single_inputs(tokenizer.encode(example["sentence"]), tokenizer, seq_length),
                "label": np.array(example["label"], dtype=np.int64)}

    metric_specs = (MetricSpec("precision", "precision"), MetricSpec("recall", "recall"), MetricSpec("f1", "f1"),
                    *(MetricSpec(m, "summary") for m in ("tp", "predicted", "gold")),
                    MetricSpec("accuracy", "mean"), MetricSpec("count", "count"))

    def summary(self, preds: list, examples: list[dict], records: list[dict]) -> dict:
        """The micro counts over the five CPR classes: true positives, predicted and gold relations."""
        parts = [r["f1"] for r in records]
        return {"tp": sum(p["tp"] for p in parts), "predicted": sum(p["tp"] + p["fp"] for p in parts),
                "gold": sum(p["tp"] + p["fn"] for p in parts)}

    def records(self, preds: list, examples: list[dict]) -> list[dict]:
        """Per pair (id: the BLUE ``index`` column): ``accuracy`` 0/1 and the micro P/R/F1 parts over the five
        CPR classes under ``precision``, ``recall`` and ``f1`` (:func:`.classification_metrics.prf_counts`)."""
        out = []
        for i, p, e in zip(example_ids(examples), preds, examples):
            pred, gold = LABELS[p], LABELS[e["label"]]
            parts = prf_counts(pred, gold, RELATIONS)
            out.append({"id": i, "prediction": pred, "gold": gold, "accuracy": int(p == e["label"]),
                        "precision": parts, "recall": parts, "f1": parts})
        return out
