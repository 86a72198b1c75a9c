"""Per-item records (``predictions.jsonl``) for the objectives' default metrics, and the ids they carry.

Why here and not in each task: most tasks score with their objective's default metric (accuracy for the
encoder heads, SQuAD EM/F1 for generations), so the record that metric needs is written once. A task whose
metrics differ overrides :meth:`~mwb.tasks.api.base.Task.records` and reuses :func:`example_ids`.

A record is ``{"id", "prediction", "gold", <metric>: value, ...}`` with the metric names ``results.json``
uses and the value forms :mod:`mwb.evaluation.predictions` aggregates (a number per item for a mean, parts
for a corpus metric), so ``aggregate(records, m)`` reproduces each metric ``m`` the records carry.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from mwb.evaluation.metrics import squad_exact_match, squad_f1
from mwb.evaluation.predictions import item_id


def plain(value: Any) -> Any:
    """``value`` with numpy arrays and scalars as lists and numbers (what a JSON record can hold)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def unique(ids: Sequence[str]) -> list[str]:
    """``ids`` with repeats told apart by a ``~n`` suffix (``x``, ``x~2``, …) in order of appearance: a
    dataset may hold the same input twice, and a predictions file needs one id per item."""
    seen: dict[str, int] = {}
    out = []
    for i in ids:
        seen[i] = seen.get(i, 0) + 1
        out.append(i if seen[i] == 1 else f"{i}~{seen[i]}")
    return out


def example_ids(examples: Sequence[dict], key: Optional[str] = "id", prefix: str = "") -> list[str]:
    """Each example's id: its dataset's own (``example[key]``, as a string, after ``prefix``) where it has
    one, else :func:`~mwb.evaluation.predictions.item_id` of the example itself; repeats made unique."""
    ids = []
    for e in examples:
        own = e.get(key) if key else None
        ids.append(f"{prefix}{own}" if own is not None and own != "" else item_id(plain(e)))
    return unique(ids)


def default_records(task, preds: list, examples: list[dict]) -> list[dict]:
    """The records of :meth:`Task.metrics`'s defaults: those of the task's objective
    (:meth:`~.objectives.Objective.records`; a custom objective has none)."""
    if len(preds) != len(examples):
        raise ValueError(f"task '{task.name}': {len(preds)} predictions for {len(examples)} examples")
    return task.objective.records(task, preds, examples)


def is_empty(text: str) -> bool:
    """Whether a generation is empty once stripped (issue 49: counted and reported, never a silent "")."""
    return not str(text).strip()


def mark_empty(records: list[dict]) -> list[dict]:
    """``records`` with ``"empty"`` (:func:`is_empty` of the prediction) on each: every generative task's
    records carry it, whichever ``records`` the task writes."""
    return [{**r, "empty": is_empty(r["prediction"])} for r in records]


def generation_records(task, preds: list, examples: list[dict]) -> list[dict]:
    """Per-item SQuAD ``exact_match`` and ``f1`` of each generation against its target."""
    ids = example_ids(examples)
    golds = [task.inputs(e, None, 0)["target"] for e in examples]
    return [{"id": i, "prediction": p, "gold": g, "exact_match": squad_exact_match(p, g), "f1": squad_f1(p, g)}
            for i, p, g in zip(ids, preds, golds)]


def accuracy_records(task, preds: list, examples: list[dict]) -> list[dict]:
    """Per-item ``accuracy`` 0/1 of each prediction against the example's ``label``."""
    ids = example_ids(examples)
    return [{"id": i, "prediction": plain(p), "gold": plain(e["label"]), "accuracy": int(plain(p) == plain(e["label"]))}
            for i, p, e in zip(ids, preds, examples)]
