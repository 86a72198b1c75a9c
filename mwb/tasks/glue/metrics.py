"""The GLUE benchmark's official metrics — binary F1, Matthews correlation, Pearson and Spearman correlation —
through scikit-learn and scipy, the implementations GLUE's own scorer and the Hugging Face ``glue`` metric
use. Degenerate inputs (a constant prediction or reference series) give 0.0 rather than NaN, as
scikit-learn already does for F1 and Matthews, so a results.json never holds NaN for them.
"""
from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np


def _pair(predictions: Sequence, references: Sequence) -> tuple[np.ndarray, np.ndarray]:
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions for {len(references)} references")
    return np.asarray(predictions), np.asarray(references)


def binary_f1(predictions: Sequence, references: Sequence, positive=1) -> float:
    """F1 of the ``positive`` class (GLUE's QQP and MRPC F1)."""
    p, r = _pair(predictions, references)
    from sklearn import metrics  # on use: scikit-learn is a second of every start-up
    return float(metrics.f1_score(r == positive, p == positive, zero_division=0))


def matthews_corrcoef(predictions: Sequence, references: Sequence, positive=1) -> float:
    """Matthews correlation of a binary labelling (GLUE's CoLA metric)."""
    p, r = _pair(predictions, references)
    from sklearn import metrics
    return float(metrics.matthews_corrcoef(r == positive, p == positive))


def _correlation(fn, x: Sequence[float], y: Sequence[float]) -> float:
    a, b = _pair(x, y)
    a, b = a.astype(np.float64), b.astype(np.float64)
    if len(a) < 2 or np.all(a == a[0]) or np.all(b == b[0]):
        return 0.0  # undefined for a constant series
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(fn(a, b)[0])


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson's r (GLUE's STS-B first metric)."""
    from scipy import stats  # on use, as scikit-learn
    return _correlation(stats.pearsonr, x, y)


def average_ranks(x: Sequence[float]) -> np.ndarray:
    """1-based ranks, ties sharing the mean of the ranks they span."""
    from scipy import stats
    return stats.rankdata(np.asarray(x, dtype=np.float64))


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho (GLUE's STS-B second metric)."""
    from scipy import stats
    return _correlation(stats.spearmanr, x, y)
