"""The GLUE benchmark's official metrics: binary F1, Matthews correlation, Pearson and Spearman correlation.

Why here and in numpy: they are four short formulas, and mwb's runtime does not depend on scikit-learn or
scipy; tests compare each with ``sklearn.metrics.f1_score`` / ``matthews_corrcoef`` and
``scipy.stats.pearsonr`` / ``spearmanr`` on fixed predictions. Degenerate inputs (a constant prediction)
give 0.0, as scikit-learn does for F1 and Matthews, instead of NaN.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


def _confusion(predictions: Sequence, references: Sequence, positive) -> tuple[int, int, int, int]:
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions for {len(references)} references")
    p = np.asarray(predictions) == positive
    r = np.asarray(references) == positive
    return int((p & r).sum()), int((p & ~r).sum()), int((~p & r).sum()), int((~p & ~r).sum())


def binary_f1(predictions: Sequence, references: Sequence, positive=1) -> float:
    """F1 of the ``positive`` class, ``2TP / (2TP + FP + FN)`` (GLUE's QQP and MRPC F1)."""
    tp, fp, fn, _ = _confusion(predictions, references, positive)
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def matthews_corrcoef(predictions: Sequence, references: Sequence, positive=1) -> float:
    """Matthews correlation of a binary labelling, ``(TP·TN − FP·FN) / √((TP+FP)(TP+FN)(TN+FP)(TN+FN))``
    (GLUE's CoLA metric)."""
    tp, fp, fn, tn = _confusion(predictions, references, positive)
    denom = float(tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
    return (tp * tn - fp * fn) / np.sqrt(denom) if denom else 0.0


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson's r: the covariance over the product of standard deviations (0.0 for a constant series)."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(a) != len(b):
        raise ValueError(f"{len(a)} predictions for {len(b)} references")
    a, b = a - a.mean(), b - b.mean()
    denom = np.sqrt((a * a).sum() * (b * b).sum())
    return float((a * b).sum() / denom) if denom else 0.0


def average_ranks(x: Sequence[float]) -> np.ndarray:
    """1-based ranks, ties sharing the mean of the ranks they span (``scipy.stats.rankdata``'s default)."""
    a = np.asarray(x, dtype=np.float64)
    order = np.argsort(a, kind="mergesort")
    values, start, counts = np.unique(a[order], return_index=True, return_counts=True)
    ranks = np.empty(len(a))
    ranks[order] = np.repeat(start + (counts + 1) / 2.0, counts)
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho: Pearson's r of the average ranks (GLUE's STS-B second metric)."""
    return pearson(average_ranks(x), average_ranks(y))
