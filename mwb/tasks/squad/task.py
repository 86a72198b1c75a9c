"""SQuAD 1.1 and 2.0 extractive question answering (Rajpurkar et al. 2016, 2018), as BERT fine-tunes it.

``--version 1.1|2.0``; ``--data`` is the official JSON (``train-v1.1.json``, ``dev-v1.1.json``, or the v2.0
files) or a directory holding them. Long contexts become doc-stride windows and the answer is decoded from
the n-best spans of all windows of a question (:mod:`.data`). v1.1 scores the official EM/F1. v2.0
predicts no answer exactly when the null score beats the best span score by more than ``--null-threshold``,
scores EM/F1 with HasAns/NoAns breakdowns, and reports the dev-tuned best threshold (``best_f1_threshold``)
to pass back as ``--null-threshold``.
"""
from __future__ import annotations

from collections import defaultdict

from mwb.core.config import ConfigError
from mwb.evaluation.metrics import squad_exact_match, squad_f1
from mwb.evaluation.squad_metrics import best_null_threshold, em_f1

from ..api.base import MetricSpec, Option, Task
from ..api.records import example_ids
from ..api.registry import register
from ..api.objectives import SPAN
from .data import FILES, Windowing, best_span, read_squad, squad_file, windows


COUNT = MetricSpec("count", "count")


def _best_threshold(name: str):
    """SQuAD 2.0's ``best_*`` number ``name``: the null-score threshold search over the records' best spans
    and null margins (a question without a span never answers), which has no per-question part."""
    def fn(records: list[dict]) -> float:
        margins = [float("inf") if r["null_margin"] is None else r["null_margin"] for r in records]
        return best_null_threshold([r["span_text"] for r in records], margins, [r["gold"] for r in records])[name]
    return fn


@register("squad")
class Squad(Task):
    description = "SQuAD 1.1 / 2.0 extractive QA: doc-stride windows, n-best spans, EM/F1 (v2.0: null threshold)"
    objective = SPAN
    metric = "f1"
    options = {
        **Task.options,
        "version": Option(str, "1.1", choices=("1.1", "2.0"),
                          help="SQuAD version: 1.1 or 2.0 (unanswerable questions)."),
        "doc_stride": Option(int, 128, low=1, help="Tokens between the starts of a long context's windows."),
        "max_query_tokens": Option(int, 64, low=1, help="Question tokens kept."),
        "n_best": Option(int, 20, low=1, help="Start and end candidates per window."),
        "max_answer_tokens": Option(int, 30, low=1, help="Longest answer span, in tokens."),
        "null_threshold": Option(float, 0.0, "v2.0: answer nothing when null score − best span score exceeds it."),
    }

    def __init__(self, **opts) -> None:
        super().__init__(**opts)
        if self.opts["version"] not in FILES:
            raise ConfigError(f"SQuAD --version must be 1.1 or 2.0, not {self.opts['version']!r}")

    def read(self, path: str, split: str) -> list[dict]:
        return read_squad(squad_file(path, self.opts["version"], split))

    def features(self, examples: list[dict], tokenizer, seq_length: int) -> list[dict]:
        w = Windowing(seq_length, self.opts["doc_stride"], self.opts["max_query_tokens"])
        return [f for i, e in enumerate(examples) for f in windows(e, i, tokenizer, w)]

    def decode(self, logits, feature: dict):
        """The window's start and end logits: the answer is chosen over all windows of a question."""
        return logits[:, 0], logits[:, 1]

    def predictions(self, outputs: list, features: list[dict], examples: list[dict]) -> list:
        """Per question: ``{"text", "span_text", "null_margin"}`` — the answer after the null threshold, the
        best span, and how far the null score beats it (None when no span was valid)."""
        by_example = defaultdict(list)
        for out, feat in zip(outputs, features):
            by_example[int(feat["example"])].append((out, feat))
        preds = []
        for i, example in enumerate(examples):
            outs, feats = zip(*by_example[i])
            text, span, null = best_span(list(outs), list(feats), example, self.opts["n_best"],
                                         self.opts["max_answer_tokens"])
            margin = None if span is None else null - span
            answer = text
            if self.opts["version"] == "2.0" and (margin is None or margin > self.opts["null_threshold"]):
                answer = ""
            preds.append({"text": answer, "span_text": text, "null_margin": margin})
        return preds

    def declared_metrics(self) -> tuple[MetricSpec, ...]:
        """v1.1: the means of per-question ``exact_match`` and ``f1``. v2.0: ``exact``/``f1`` over all
        questions and over the answerable (``HasAns_``) and unanswerable (``NoAns_``) ones with their counts,
        then the best-threshold numbers, searched over the whole set from the records' spans and margins."""
        if self.opts["version"] == "1.1":
            return MetricSpec("exact_match", "mean", empty=0.0), MetricSpec("f1", "mean", empty=0.0), COUNT
        specs = [MetricSpec("exact", "mean"), MetricSpec("f1", "mean")]
        for key, keep in (("HasAns_", True), ("NoAns_", False)):
            specs += [MetricSpec(f"{key}{m}", "mean", field=m, where=("has_answer", keep)) for m in ("exact", "f1")]
            specs.append(MetricSpec(f"{key}total", "count", where=("has_answer", keep)))
        specs += [MetricSpec(m, "corpus", fn=_best_threshold(m))
                  for m in ("best_exact", "best_exact_threshold", "best_f1", "best_f1_threshold")]
        return (*specs, COUNT)

    def records(self, preds: list, examples: list[dict]) -> list[dict]:
        """Per question (id: the SQuAD question id), on the 0–100 scale of the corpus numbers: v1.1
        ``exact_match`` and ``f1``; v2.0 ``exact`` and ``f1`` with ``has_answer``, so the records of answerable
        (unanswerable) questions aggregate to ``HasAns_*`` (``NoAns_*``). The best-threshold numbers search
        a threshold over the whole set and have no per-question part; ``prediction`` keeps the best span and
        its null margin to redo that search."""
        out = []
        for i, p, e in zip(example_ids(examples), preds, examples):
            rec = {"id": i, "prediction": p["text"], "gold": list(e["answers"])}
            if self.opts["version"] == "1.1":
                rec.update(exact_match=100.0 * squad_exact_match(p["text"], e["answers"]),
                           f1=100.0 * squad_f1(p["text"], e["answers"]))
            else:
                em, f1 = em_f1(p["text"], e["answers"])
                rec.update(span_text=p["span_text"], null_margin=p["null_margin"],
                           has_answer=bool(e["answers"]), exact=100.0 * em, f1=100.0 * f1)
            out.append(rec)
        return out
