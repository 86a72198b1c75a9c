"""GLUE (Wang et al. 2018): MNLI, QQP, SST-2, QNLI, RTE, MRPC, CoLA, STS-B, as Megatron fine-tunes BERT.

``--task NAME`` picks the task; ``--data`` is its directory in the official layout (``train.tsv``,
``dev.tsv``; MNLI ``dev_matched.tsv`` — ``--split dev_mismatched`` for the mismatched set — and
``test_matched.tsv``), or a GLUE root holding ``MNLI/``, ``QQP/``, … (reader: :mod:`.data`). Inputs are
``[CLS] a [SEP] b [SEP]`` (single-sentence tasks: ``[CLS] a [SEP]``), the first segment truncated. STS-B is
a regression (one output, squared error). Metrics are GLUE's: accuracy; F1 of the positive class for QQP and
MRPC; Matthews correlation for CoLA; Pearson and Spearman for STS-B. A test split has no labels: its
predictions are written in GLUE's submission format to ``--submission PATH``.
"""
from __future__ import annotations

import os

import numpy as np

from mwb.core.config import ConfigError

from ..api.base import MetricSpec, Option, Task, pair_inputs
from ..api.records import example_ids
from ..api.registry import register
from ..api.objectives import CLASSIFICATION, REGRESSION
from .data import LAYOUTS, layout, read_glue, split_file, submission_text
from .metrics import matthews_corrcoef, pearson, spearman


def _correlation(name: str):
    """STS-B's Pearson or Spearman correlation over the records' predicted and gold scores (no per-item parts)."""
    fn = {"pearson": pearson, "spearman": spearman}[name]
    return lambda records: fn([r["prediction"] for r in records], [r["gold"] for r in records])


def _matthews(records: list[dict]) -> float:
    """CoLA's Matthews correlation over the records' predicted and gold labels (class 1 positive)."""
    return matthews_corrcoef([r["prediction"] for r in records], [r["gold"] for r in records], positive=1)


@register("glue")
class Glue(Task):
    description = "GLUE: MNLI, QQP, SST-2, QNLI, RTE, MRPC, CoLA (classification) and STS-B (regression)"
    objective = CLASSIFICATION
    options = {
        **Task.options,
        "task": Option(str, "mnli", choices=tuple(LAYOUTS), help=f"Which GLUE task: {'|'.join(LAYOUTS)}."),
        "submission": Option(str, None, "Unlabelled (test) split: write GLUE's submission TSV here "
                                        "(e.g. MNLI-m.tsv)."),
    }

    def __init__(self, **opts) -> None:
        super().__init__(**opts)
        self.layout = layout(self.opts["task"])
        self.regression = regression = self.layout.labels is None
        self.objective = REGRESSION if regression else CLASSIFICATION
        self.num_labels = 1 if regression else len(self.layout.labels)
        self.metric = self.layout.metrics[0]

    def read(self, path: str, split: str) -> list[dict]:
        """Labels are required (a DataError without them) except in a test split (whose predictions go to
        --submission, :meth:`load`) or where --submission is given; a training split always needs them."""
        return read_glue(split_file(path, self.opts["task"], split), self.opts["task"], labelled=self.labelled(split))

    def labelled(self, split: str) -> bool:
        """Whether ``split`` is read with its labels: a training split always; else unless it is a test split
        or --submission asks for GLUE's submission file."""
        return split == self.train_split or not (self.opts["submission"] or split.startswith("test"))

    def load(self, path):
        examples = super().load(path)
        if any(e["label"] is None for e in examples) and not self.opts["submission"]:
            raise ConfigError(f"GLUE {self.opts['task']} split '{self.opts.get('split') or self.eval_split}' has "
                              f"no labels: pass --submission PATH to write the predictions in GLUE's format")
        return examples

    def inputs(self, example: dict, tokenizer, seq_length: int) -> dict:
        segments = [tokenizer.encode(t) for t in example["text"]]
        out = pair_inputs(segments[0], segments[1] if len(segments) > 1 else None, tokenizer, seq_length)
        label = example["label"]
        if self.regression:
            out["label"] = np.array(np.nan if label is None else label, dtype=np.float32)
        else:
            out["label"] = np.array(-100 if label is None else label, dtype=np.int64)
        return out

    def declared_metrics(self) -> tuple[MetricSpec, ...]:
        """GLUE's metrics for the chosen task: accuracy (mean of 0/1), QQP/MRPC F1 of the positive class
        (summed counts), CoLA's Matthews and STS-B's Pearson/Spearman correlations (whole-set functions of
        the records' predictions and golds); an unlabelled split has the count only."""
        name = self.opts["task"]
        specs = [] if not self.labelled(self.opts.get("split") or self.eval_split) else [
            MetricSpec(m, "corpus", fn=_correlation(m)) for m in ("pearson", "spearman")] if self.regression else [
            MetricSpec("accuracy", "mean")] + [MetricSpec("f1", "f1")] * (name in ("qqp", "mrpc")) + [
            MetricSpec("matthews", "corpus", fn=_matthews)] * (name == "cola")
        return (*specs, MetricSpec("count", "count"))

    def files(self, metrics: dict, records: list[dict], examples: list[dict]) -> dict[str, str]:
        """An unlabelled split: GLUE's submission TSV at ``--submission`` (an absolute path, so it is written
        there and not beside results.json)."""
        if not self.opts["submission"] or any(e["label"] is not None for e in examples):
            return {}
        return {os.path.abspath(self.opts["submission"]):
                submission_text(self.opts["task"], examples, [r["prediction"] for r in records])}

    def records(self, preds: list, examples: list[dict]) -> list[dict]:
        """Per example (id: the file's ``index`` column, else the row number): ``accuracy`` 0/1; for QQP and
        MRPC the positive class's ``{tp, fp, fn}`` under ``f1``. Matthews correlation (CoLA) and Pearson /
        Spearman (STS-B) are correlations over the whole set, with no per-item parts: those records carry the
        prediction and gold the correlation is computed from. A test split has no gold and no metric."""
        ids = example_ids(examples, key="index")
        out = []
        for i, p, e in zip(ids, preds, examples):
            rec = {"id": i, "prediction": float(p) if self.regression else int(p), "gold": e["label"]}
            if e["label"] is not None and not self.regression:
                rec["accuracy"] = int(p == e["label"])
                if self.opts["task"] in ("qqp", "mrpc"):
                    hit_p, hit_g = p == 1, e["label"] == 1
                    rec["f1"] = {"tp": int(hit_p and hit_g), "fp": int(hit_p and not hit_g),
                                 "fn": int(hit_g and not hit_p)}
            out.append(rec)
        return out

    def describe(self) -> dict:
        return {**super().describe(), "glue_task": self.layout.directory}
