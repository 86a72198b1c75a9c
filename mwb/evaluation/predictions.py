"""``OUT/predictions.jsonl``: one JSON object per evaluated item, and the one place its metrics are aggregated.

Why per-item records: a paired test (``mwb compare``) needs each item's outcome under both conditions, and a
corpus metric must be recomputable on a resample of items. Each record holds a string ``"id"`` (the dataset's
own id, or :func:`item_id` of the input), the prediction, the gold, and each per-item metric under the name
``results.json`` uses. A metric value is either

- a number: the aggregate is the mean (0/1 values for accuracy- and EM-like metrics), or
- a dict of the parts a corpus metric is computed from:
  - ``{"tp", "fp", "fn"}``: F1 = 2tp / (2tp + fp + fn) of the summed counts; a metric whose name ends in
    ``precision`` or ``recall`` gives tp / (tp + fp) or tp / (tp + fn) instead (0 when the denominator is 0,
    as seqeval and sklearn report);
  - ``{"tp", "fp", "fn", "tn"}`` (a binary classifier's confusion counts, class 1 positive): macro-F1, the mean
    of class 1's F1 2tp / (2tp + fp + fn) and class 0's 2tn / (2tn + fn + fp), each 0 when its denominator is 0
    (scikit-learn's ``f1_score(average="macro", labels=[0, 1], zero_division=0)``);
  - ``{"nll", "tokens"}`` (summed token negative log-likelihood, scored token count): perplexity
    exp(Σnll / Σtokens) for a metric named ``ppl``/``*_ppl``/``perplexity``, the mean NLL per token for one
    named ``loss``/``nll``/``*_loss``/``*_nll``.

:func:`metric_parts` turns records into an (items × parts) array and :func:`combine` maps summed parts to the
aggregate, vectorised over any leading axes; :func:`aggregate` and :mod:`mwb.evaluation.stats` (the bootstrap
and permutation statistics) both go through them, so an evaluation's number and ``mwb compare``'s agree.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from numbers import Real
from typing import Iterable, Optional, Sequence

import numpy as np

from mwb.core.errors import DataError
from mwb.core.atomic import atomic_open

FILENAME = "predictions.jsonl"

# parts-dict keys → the order of the columns in MetricParts.parts
_F1_KEYS = ("tp", "fp", "fn")
_MACRO_KEYS = ("tp", "fp", "fn", "tn")
_NLL_KEYS = ("nll", "tokens")


def item_id(*parts) -> str:
    """A stable id for an item whose dataset has none: the first 16 hex digits of the sha1 of a canonical JSON
    of ``parts`` (sorted keys, no whitespace), so the same input gets the same id in every run."""
    try:
        text = json.dumps(list(parts), sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise DataError(f"item_id: the item's input is not plain JSON ({e})") from e
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def _json_default(obj):
    """numpy scalars and arrays (what metric code often returns) as plain JSON values."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def write_predictions(out_dir: str, records: Iterable[dict]) -> str:
    """Write ``out_dir/predictions.jsonl`` atomically (:func:`~mwb.core.atomic.atomic_open`) and return its
    path. Every record needs a string ``"id"``, unique in the file, so runs can be paired item by item."""
    records = list(records)
    seen: set[str] = set()
    lines = []
    for i, r in enumerate(records):
        if not isinstance(r, dict):
            raise DataError(f"predictions: record {i} is a {type(r).__name__}, not a dict")
        rid = r.get("id")
        if not isinstance(rid, str) or not rid:
            raise DataError(f"predictions: record {i} has no string 'id' (got {rid!r}); use the dataset's id "
                            f"or mwb.evaluation.predictions.item_id(input)")
        if rid in seen:
            raise DataError(f"predictions: duplicate id {rid!r} (record {i}); ids must be unique")
        seen.add(rid)
        try:
            lines.append(json.dumps(r, ensure_ascii=False, allow_nan=False, default=_json_default) + "\n")
        except (TypeError, ValueError) as e:
            raise DataError(f"predictions: record {rid!r} is not plain JSON ({e})") from e
    path = os.path.join(out_dir, FILENAME)
    with atomic_open(path, "w") as f:
        f.writelines(lines)
    return path


def predictions_path(path_or_run_dir: str) -> str:
    """The ``predictions.jsonl`` a path names: the file itself, or the one inside a run directory."""
    path = os.path.expanduser(path_or_run_dir)
    if os.path.isdir(path):
        inner = os.path.join(path, FILENAME)
        if not os.path.isfile(inner):
            raise DataError(f"{path_or_run_dir}: run directory has no {FILENAME} (evaluate it with mwb eval first)")
        return inner
    if not os.path.isfile(path):
        raise DataError(f"predictions file not found: {path_or_run_dir}")
    return path


def read_predictions(path_or_run_dir: str) -> list[dict]:
    """The records of a ``predictions.jsonl`` file, or of the one in a run directory. Bad JSON, a record that
    is not an object, a missing or non-string id, a duplicate id, or an empty file is one DataError line
    naming the file (and the line)."""
    path = predictions_path(path_or_run_dir)
    records: list[dict] = []
    first_line: dict[str, int] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path} line {n}: not valid JSON ({e.msg})") from None
            if not isinstance(r, dict):
                raise DataError(f"{path} line {n}: expected a JSON object, got {type(r).__name__}")
            rid = r.get("id")
            if not isinstance(rid, str) or not rid:
                raise DataError(f"{path} line {n}: no string 'id' (got {rid!r})")
            if rid in first_line:
                raise DataError(f"{path} line {n}: duplicate id {rid!r} (first on line {first_line[rid]})")
            first_line[rid] = n
            records.append(r)
    if not records:
        raise DataError(f"{path}: no predictions (the file is empty)")
    return records


# ------------------------------------------------------------------------------------------ metric values


def corpus_kind(metric: str, keys: Iterable[str]) -> str:
    """How a parts dict with ``keys`` aggregates under the name ``metric``: "f1", "precision", "recall",
    "macro_f1", "ppl" or "nll". A name that does not say which (an NLL dict under ``accuracy``) is a DataError."""
    keys = set(keys)
    name = metric.lower()
    if keys == set(_F1_KEYS):
        if name.endswith("precision"):
            return "precision"
        if name.endswith("recall"):
            return "recall"
        return "f1"
    if keys == set(_MACRO_KEYS):
        return "macro_f1"
    if keys == set(_NLL_KEYS):
        if name in ("ppl", "perplexity") or name.endswith(("_ppl", "_perplexity")):
            return "ppl"
        if name in ("loss", "nll") or name.endswith(("_loss", "_nll")):
            return "nll"
        raise DataError(f"metric {metric!r}: {{nll, tokens}} parts need a name saying what they aggregate to "
                        f"(ppl / *_ppl for perplexity, loss / nll / *_loss / *_nll for mean NLL per token)")
    raise DataError(f"metric {metric!r}: a parts dict must have exactly the keys tp, fp, fn (tp, fp, fn, tn for "
                    f"macro-F1) or nll, tokens (got {', '.join(sorted(keys)) or 'none'})")


def combine(kind: str, sums) -> np.ndarray:
    """The aggregate from summed parts ``sums`` (shape ``(..., k)``, columns as :func:`metric_parts` orders
    them), vectorised over the leading axes so a bootstrap or permutation computes all resamples at once."""
    s = np.asarray(sums, dtype=np.float64)
    if kind == "mean":
        return s[..., 0] / s[..., 1]
    if kind in ("f1", "precision", "recall"):
        tp, fp, fn = s[..., 0], s[..., 1], s[..., 2]
        num, den = {"f1": (2 * tp, 2 * tp + fp + fn), "precision": (tp, tp + fp), "recall": (tp, tp + fn)}[kind]
        return np.divide(num, den, out=np.zeros_like(num), where=den > 0)
    if kind == "macro_f1":
        tp, fp, fn, tn = s[..., 0], s[..., 1], s[..., 2], s[..., 3]
        f1 = [np.divide(2 * t, 2 * t + fp + fn, out=np.zeros_like(t), where=2 * t + fp + fn > 0) for t in (tp, tn)]
        return (f1[0] + f1[1]) / 2
    if kind in ("ppl", "nll"):
        mean_nll = s[..., 0] / s[..., 1]
        return np.exp(mean_nll) if kind == "ppl" else mean_nll
    raise ValueError(f"unknown aggregate kind {kind!r}")


@dataclass(frozen=True)
class MetricParts:
    """One metric over a run's items: ``parts[i]`` is item ``ids[i]``'s row of parts, and the aggregate of any
    subset or resample is ``combine(kind, parts[rows].sum(0))``. A number ``v`` is stored as the row
    ``(v, 1)`` so a mean is a ratio of sums like every other kind."""
    metric: str
    kind: str  # "mean" | "f1" | "precision" | "recall" | "macro_f1" | "ppl" | "nll"
    ids: tuple
    parts: np.ndarray  # (items, k), float64

    def aggregate(self) -> float:
        return float(combine(self.kind, self.parts.sum(axis=0)))

    def values(self) -> np.ndarray:
        """The per-item numbers of a mean metric (what a sign-flip test or McNemar pairs)."""
        return self.parts[:, 0]


def _number(v, metric: str, rid: str) -> float:
    if isinstance(v, bool):
        return float(v)
    if not isinstance(v, Real):
        raise DataError(f"item {rid!r}: metric {metric!r} is {type(v).__name__} {v!r}, not a number or parts dict")
    if not math.isfinite(v):
        raise DataError(f"item {rid!r}: metric {metric!r} is {v}, not a finite number")
    return float(v)


_KIND_KEYS = {"f1": _F1_KEYS, "precision": _F1_KEYS, "recall": _F1_KEYS, "macro_f1": _MACRO_KEYS,
              "ppl": _NLL_KEYS, "nll": _NLL_KEYS}


def declared_kind(kind: str, metric: str, value) -> str:
    """``kind``, a metric's declared aggregation (:mod:`.metric_specs`), when ``value`` has its form (a number
    for ``mean``, the kind's parts dict otherwise), else a DataError: the name no longer decides the kind."""
    keys = set(value) if isinstance(value, dict) else None
    if (keys is None) != (kind == "mean") or (keys is not None and keys != set(_KIND_KEYS.get(kind, ()))):
        raise DataError(f"metric {metric!r} is declared {kind} but an item holds {value!r}")
    return kind


def metric_parts(records: Sequence[dict], metric: str, kind: Optional[str] = None) -> MetricParts:
    """``metric``'s per-item parts from ``records`` (see the module docstring for the value forms). Every record
    must carry the metric in the same form; a missing value, a string, a negative count or a non-positive
    token count is a DataError naming the item. ``kind``: the declared aggregation (else the parts and the
    name say which)."""
    if not records:
        raise DataError(f"metric {metric!r}: no items")
    declared, kind = kind, None
    ids, rows = [], []
    for r in records:
        rid = r.get("id")
        if metric not in r:
            present = sorted(k for k in r if k not in ("id", "prediction", "gold"))
            raise DataError(f"item {rid!r} has no metric {metric!r} (it has: {', '.join(present) or 'none'})")
        v = r[metric]
        if declared is not None:
            declared_kind(declared, metric, v)
        if isinstance(v, dict):
            k = declared or corpus_kind(metric, v)
            order = {"macro_f1": _MACRO_KEYS, "ppl": _NLL_KEYS, "nll": _NLL_KEYS}.get(k, _F1_KEYS)
            row = [_number(v[name], f"{metric}.{name}", rid) for name in order]
            if min(row) < 0:
                raise DataError(f"item {rid!r}: metric {metric!r} has a negative part {v}")
            if k in ("ppl", "nll") and row[1] <= 0:
                raise DataError(f"item {rid!r}: metric {metric!r} needs a positive token count (got {v['tokens']})")
        else:
            k, row = "mean", [_number(v, metric, rid), 1.0]
        if kind is None:
            kind = k
        elif k != kind:
            raise DataError(f"item {rid!r}: metric {metric!r} aggregates as {k} here but as {kind} on the first "
                            f"item: every item must use the same form")
        ids.append(rid)
        rows.append(row)
    return MetricParts(metric, kind, tuple(ids), np.asarray(rows, dtype=np.float64))


def aggregate(records: Sequence[dict], metric: str) -> float:
    """The run-level value of ``metric`` over ``records``: the mean of numbers, or the corpus metric of the
    summed parts. The one definition the evaluations and ``mwb compare`` share."""
    return metric_parts(records, metric).aggregate()


def is_binary(values) -> bool:
    """Whether per-item ``values`` are all 0/1 numbers (bools count), so McNemar's exact test applies."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "biuf":
        return values.size > 0 and bool(np.isin(values, (0, 1)).all())
    values = list(values)
    if not values:
        return False
    for v in values:
        if isinstance(v, dict) or not isinstance(v, (Real, np.number)) or v not in (0, 1):
            return False
    return True
