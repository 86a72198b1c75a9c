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

import numpy as np

from mwb.core.config import ConfigError
from mwb.evaluation.metrics import accuracy

from ..api.base import Option, Task, pair_inputs
from ..api.records import example_ids
from ..api.registry import register
from ..api.objectives import CLASSIFICATION, REGRESSION
from .data import LAYOUTS, layout, read_glue, split_file, write_submission
from .metrics import binary_f1, matthews_corrcoef, pearson, spearman


def glue_metrics(name: str, preds: list, labels: list) -> dict[str, float]:
    """The metrics GLUE reports for task ``name`` (labels are indices; STS-B: scores)."""
    if layout(name).labels is None:
        return {"pearson": pearson(preds, labels), "spearman": spearman(preds, labels)}
    out = {"accuracy": accuracy(preds, labels)}
    if name in ("qqp", "mrpc"):
        out["f1"] = binary_f1(preds, labels, positive=1)
    if name == "cola":
        out["matthews"] = matthews_corrcoef(preds, labels, positive=1)
    return out


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
        labelled = split == self.train_split or not (self.opts["submission"] or split.startswith("test"))
        return read_glue(split_file(path, self.opts["task"], split), self.opts["task"], labelled=labelled)

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

    def metrics(self, preds: list, examples: list[dict]) -> dict[str, float]:
        if any(e["label"] is None for e in examples):
            write_submission(self.opts["submission"], self.opts["task"], examples, preds)
            return {"count": len(preds)}
        res = glue_metrics(self.opts["task"], preds, [e["label"] for e in examples])
        return {**res, "count": len(preds)}

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
