"""Declared metrics: each ``results.json`` number of a task is a :class:`MetricSpec` (name, kind) over the
task's per-item records, and :func:`aggregate_metrics` is the one function that computes them.

Why declared kinds: a task used to compute its numbers twice, once in ``metrics()`` and once as records
whose aggregate had to agree; now it writes the records only and says how each number aggregates (as
lm-evaluation-harness pairs ``process_results`` per document with an ``aggregation`` per metric). The kinds:

- ``mean``, ``f1``, ``precision``, ``recall``, ``macro_f1``, ``ppl``, ``nll``: the value forms of
  :mod:`mwb.evaluation.predictions` (a number per item, or a parts dict), aggregated by
  :func:`~mwb.evaluation.predictions.metric_parts` — the same code ``mwb compare`` uses;
- ``count``: the number of records (that match ``where``);
- ``corpus``: a number with no per-item parts (a Pearson or Spearman correlation, a threshold searched over
  the whole set), computed by the spec's own ``fn`` from the records;
- ``summary``: a task-level number that is not per item (a count of the data's entities, the size of a fixed
  prompt), taken from the task's one ``summary`` computation; declared here for its place in ``results.json``.

``where=(key, value)`` keeps the records whose ``key`` equals ``value`` (RACE's per-level accuracy);
``field`` names the record key when it differs from the metric's name; an ``optional`` metric covers the
records that carry its field and is left out when none does (dialogue's knowledge F1 without knowledge).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from .predictions import metric_parts

PART_KINDS = ("mean", "f1", "precision", "recall", "macro_f1", "ppl", "nll")
KINDS = PART_KINDS + ("count", "corpus", "summary")


@dataclass(frozen=True)
class MetricSpec:
    """One ``results.json`` metric: its ``name``, how it aggregates (``kind``, one of :data:`KINDS`), the
    record key it reads (``field``, default ``name``), the records it covers (``where``; ``optional``: those
    carrying the field), its value over no records (``empty``) and, for ``kind="corpus"``, the function of the
    records that computes it."""
    name: str
    kind: str
    field: Optional[str] = None
    where: Optional[tuple] = None
    fn: Optional[Callable[[list], Any]] = None
    empty: float = float("nan")
    optional: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"metric {self.name!r}: unknown kind {self.kind!r} (known: {', '.join(KINDS)})")
        if (self.kind == "corpus") != (self.fn is not None):
            raise ValueError(f"metric {self.name!r}: a function is declared for kind 'corpus' and only there")

    def value(self, records: Sequence[dict]) -> Any:
        """This metric over ``records`` (all of a run's; ``where`` selects among them)."""
        rows = [r for r in records if (self.where is None or r.get(self.where[0]) == self.where[1])
                and (not self.optional or (self.field or self.name) in r)]
        if self.kind == "count":
            return len(rows)
        if self.kind == "corpus":
            return self.fn(rows)
        if self.kind == "summary":
            raise ValueError(f"metric {self.name!r} is a summary number: aggregate_metrics takes it from the summary")
        if not rows:
            return self.empty
        return metric_parts(rows, self.field or self.name, self.kind).aggregate()


def aggregate_metrics(records: Sequence[dict], specs: Sequence[MetricSpec], summary: Optional[dict] = None) -> dict:
    """``{name: value}`` of every declared metric over a run's records, in declaration order; ``summary``
    holds the values of the ``summary`` kind. A summary number that no spec declares is an error."""
    summary = summary or {}
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"metrics declared twice: {sorted({n for n in names if names.count(n) > 1})}")
    undeclared = sorted(set(summary) - {s.name for s in specs if s.kind == "summary"})
    if undeclared:
        raise ValueError(f"summary numbers {undeclared} are not declared as metrics of kind 'summary'")
    out = {}
    for s in specs:
        if s.kind == "summary":
            if s.name in summary or not s.optional:
                out[s.name] = summary[s.name]
        elif not s.optional or any((s.field or s.name) in r for r in records):
            out[s.name] = s.value(records)
    return out
