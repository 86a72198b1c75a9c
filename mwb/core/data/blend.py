"""Weighted blending of several datasets, with Megatron-LM's deterministic rule.

Why not random sampling: the blend must be exact and reproducible at every prefix of training. Sample
``i`` goes to the dataset whose *deficit* ``weight_d * max(i, 1) - drawn_d`` is largest (ties → the lowest
index), exactly as Megatron-LM's ``build_blending_indices``; so after any ``n`` samples every dataset has
had its share to within one sample. Dataset ``d``'s ``k``-th draw is its sample ``k``.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from mwb.core.errors import DataError


def normalize_weights(weights: Sequence) -> np.ndarray:
    try:
        w = np.asarray([float(x) for x in weights], dtype=np.float64)
    except (TypeError, ValueError):
        raise DataError(f"data weights must be numbers, got {list(weights)}") from None
    if len(w) == 0 or (w < 0).any() or w.sum() <= 0:
        raise DataError(f"data weights must be non-negative and not all zero, got {list(weights)}")
    return w / w.sum()


def blending_indices(weights: Sequence[float], size: int) -> tuple[np.ndarray, np.ndarray]:
    """(dataset of each sample, index within that dataset) for ``size`` samples."""
    w = [float(x) for x in normalize_weights(weights)]
    n = len(w)
    drawn = [0] * n
    which = [0] * size
    within = [0] * size
    for i in range(size):  # plain Python: ~5x faster than numpy on a handful of datasets
        x = i if i > 1 else 1
        best, best_err = 0, w[0] * x - drawn[0]
        for d in range(1, n):
            err = w[d] * x - drawn[d]
            if err > best_err:  # strict: the first of ties wins, like Megatron's loop
                best, best_err = d, err
        which[i] = best
        within[i] = drawn[best]
        drawn[best] += 1
    return np.asarray(which, dtype=np.int32), np.asarray(within, dtype=np.int64)


def samples_per_dataset(weights: Sequence[float], size: int) -> list[int]:
    """How many samples to build for each dataset of a blend of ``size`` (Megatron's 0.5% margin)."""
    return [int(math.ceil(x * size * 1.005)) + 1 for x in normalize_weights(weights)]


class BlendedDataset:
    """``len() == size``; item ``i`` is item ``within[i]`` of ``datasets[which[i]]``."""

    def __init__(self, datasets: Sequence, weights: Sequence[float], size: int):
        self.datasets = list(datasets)
        self.weights = normalize_weights(weights)
        self.size = int(size)
        self.which, self.within = blending_indices(self.weights, self.size)
        for d, ds in enumerate(self.datasets):
            need = int((self.which == d).sum())
            if len(ds) < need:
                raise DataError(f"blended dataset {d} has {len(ds)} samples but the blend draws {need}")

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> dict:
        if not 0 <= i < self.size:
            raise IndexError(f"sample {i} out of range for a blend of {self.size}")
        return self.datasets[int(self.which[i])][int(self.within[i])]
