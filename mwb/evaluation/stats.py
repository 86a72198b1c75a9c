"""Paired statistics for comparing two conditions evaluated on the same items (``mwb compare``, ``mwb repro``).

Why paired: both conditions see the same items, so the item-to-item spread cancels and a small set still
tells a real difference from noise. Over several seeds (seed k of A paired with seed k of B) the difference is
the mean over seeds of the per-seed difference, and the bootstrap resamples items within each seed.

- The 95% interval is a paired percentile bootstrap: the same resampled item indices for A and B, drawn with a
  seeded numpy Generator, with corpus metrics (F1, perplexity) recomputed from the resampled parts each time.
- p is McNemar's exact test for 0/1 metrics (scipy's two-sided binomial test on the discordant pairs, pooled
  over seeds) and otherwise scipy's paired permutation test (A and B swapped within items).
- Whole-run numbers without items (one per seed) go through :func:`compare_values`: a paired t-test.

Aggregates come from :mod:`mwb.evaluation.predictions`, the same definition the evaluations use.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
from scipy import stats as sps

from mwb.core.errors import DataError

from .predictions import combine, is_binary, metric_parts

ALPHA = 0.05
# numbers held at once by a vectorised bootstrap/permutation batch (resamples × items × parts): ~32 MB
_CELLS = 1 << 22


@dataclass(frozen=True)
class PairedResult:
    """One comparison: B − A on ``metric``, its 95% interval, p and the test that gave it."""
    metric: str
    mean_a: float
    mean_b: float
    diff: float  # mean_b - mean_a
    ci95: tuple  # (lo, hi)
    p: float
    test: str  # "mcnemar-exact" | "permutation" | "paired-t" | "none"
    n_items: int  # paired items over all seeds (0 for compare_values)
    n_seeds: int
    resamples: int
    seed: Optional[int]

    def to_dict(self) -> dict:
        """Plain JSON values; a NaN (p of a single seed without items) becomes None, as strict JSON has none."""
        def num(v):
            v = float(v)
            return v if math.isfinite(v) else None
        return {"metric": self.metric, "mean_a": num(self.mean_a), "mean_b": num(self.mean_b),
                "diff": num(self.diff), "ci95": [num(self.ci95[0]), num(self.ci95[1])], "p": num(self.p),
                "test": self.test, "n_items": self.n_items, "n_seeds": self.n_seeds, "resamples": self.resamples,
                "seed": self.seed}


def _paired_parts(a: Sequence[Sequence[dict]], b: Sequence[Sequence[dict]], metric: str):
    """Per seed, A's and B's parts with B's rows in A's item order; the aggregate kind they share."""
    if not a or len(a) != len(b):
        raise DataError(f"compare: A has {len(a)} runs and B has {len(b)}; give one run per seed on each side")
    kind, pairs = None, []
    for k, (ra, rb) in enumerate(zip(a, b)):
        pa, pb = metric_parts(ra, metric), metric_parts(rb, metric)
        where = f" (seed {k})" if len(a) > 1 else ""
        ids_a, ids_b = set(pa.ids), set(pb.ids)
        missing_b = [i for i in pa.ids if i not in ids_b]
        missing_a = [i for i in pb.ids if i not in ids_a]
        if missing_a or missing_b:
            example = (missing_b or missing_a)[0]
            raise DataError(f"compare{where}: item ids do not match: {len(missing_b)} of A's ids missing in B, "
                            f"{len(missing_a)} of B's missing in A (e.g. {example!r})")
        if pa.kind != pb.kind:
            raise DataError(f"compare{where}: metric {metric!r} aggregates as {pa.kind} in A but {pb.kind} in B")
        if kind is not None and pa.kind != kind:
            raise DataError(f"compare{where}: metric {metric!r} aggregates as {pa.kind} here but {kind} in seed 0")
        kind = pa.kind
        order = {rid: i for i, rid in enumerate(pb.ids)}
        pairs.append((pa.parts, pb.parts[[order[i] for i in pa.ids]]))
    return kind, pairs


def _bootstrap_diffs(kind: str, pairs, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """``resamples`` bootstrap values of the mean-over-seeds difference: each seed's items resampled with
    replacement (the same indices for A and B), the aggregate recomputed from the resampled parts' sums.
    Resamples become count vectors, so each batch is one matrix product per side."""
    total = np.zeros(resamples)
    for pa, pb in pairs:
        n = len(pa)
        chunk = max(1, _CELLS // n)
        for start in range(0, resamples, chunk):
            m = min(chunk, resamples - start)
            idx = rng.integers(0, n, size=(m, n)) + (np.arange(m) * n)[:, None]
            counts = np.bincount(idx.ravel(), minlength=m * n).reshape(m, n).astype(np.float64)
            total[start:start + m] += combine(kind, counts @ pb) - combine(kind, counts @ pa)
    return total / len(pairs)


def _mcnemar_p(pairs) -> float:
    """McNemar's exact test: two-sided binomial on the discordant pairs, pooled over seeds; 1.0 without any."""
    b01 = sum(int(np.sum((pa[:, 0] == 0) & (pb[:, 0] == 1))) for pa, pb in pairs)
    b10 = sum(int(np.sum((pa[:, 0] == 1) & (pb[:, 0] == 0))) for pa, pb in pairs)
    if b01 + b10 == 0:
        return 1.0
    return float(sps.binomtest(b01, b01 + b10, 0.5).pvalue)


def _permutation_p(kind: str, pairs, resamples: int, rng: np.random.Generator) -> float:
    """scipy's paired permutation test: A's and B's values swapped within items. The data passed to scipy
    are row indices into one table of both sides' parts (A's rows 0..n-1, then B's), so the statistic (the
    mean-over-seeds difference of aggregates) recomputes a corpus metric from the swapped parts: a swapped
    item moves its (B − A) parts from B's sum to A's, one matrix product per batch of permutations."""
    n = sum(len(pa) for pa, _ in pairs)
    bounds = np.cumsum([0] + [len(pa) for pa, _ in pairs])
    segments = [(lo, hi, pa.sum(0), pb.sum(0), pb - pa) for (lo, hi), (pa, pb) in
                zip(zip(bounds[:-1], bounds[1:]), pairs)]

    def statistic(x, y, axis=-1):
        swapped = (x >= n).astype(np.float64)  # x: the indices on A's side; an index of B's means swapped
        out = 0.0
        for lo, hi, sum_a, sum_b, delta in segments:
            moved = swapped[..., lo:hi] @ delta
            out = out + combine(kind, sum_b - moved) - combine(kind, sum_a + moved)
        return out / len(segments)

    res = sps.permutation_test((np.arange(n), np.arange(n) + n), statistic, permutation_type="samples",
                               vectorized=True, n_resamples=resamples, rng=rng, batch=max(1, _CELLS // n))
    return float(res.pvalue)


def compare_runs(a: Sequence[Sequence[dict]], b: Sequence[Sequence[dict]], metric: str, resamples: int = 10_000,
                 seed: int = 0) -> PairedResult:
    """Compare conditions A and B on ``metric`` from their per-item records.

    ``a`` and ``b`` are per-seed lists of records (seed k of A paired with seed k of B; one run is a list of
    one). Items pair by id within each seed; ids that differ are a DataError saying how many are missing on
    each side. The means are the per-seed aggregates averaged over seeds, ``diff`` = mean_b − mean_a.
    """
    if resamples < 1:
        raise DataError(f"compare: resamples must be at least 1 (got {resamples})")
    kind, pairs = _paired_parts(a, b, metric)
    agg_a = [float(combine(kind, pa.sum(0))) for pa, _ in pairs]
    agg_b = [float(combine(kind, pb.sum(0))) for _, pb in pairs]
    mean_a, mean_b = float(np.mean(agg_a)), float(np.mean(agg_b))
    boot_rng, perm_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    lo, hi = np.percentile(_bootstrap_diffs(kind, pairs, resamples, boot_rng), [2.5, 97.5])
    binary = kind == "mean" and all(is_binary(p[:, 0]) for pair in pairs for p in pair)
    if binary:
        p, test = _mcnemar_p(pairs), "mcnemar-exact"
    else:
        p, test = _permutation_p(kind, pairs, resamples, perm_rng), "permutation"
    return PairedResult(metric, mean_a, mean_b, mean_b - mean_a, (float(lo), float(hi)), p, test,
                        sum(len(pa) for pa, _ in pairs), len(pairs), resamples, seed)


def compare_values(a: Sequence[float], b: Sequence[float], metric: str = "value") -> PairedResult:
    """Compare per-seed whole-run numbers (no items): means, diff = mean_b − mean_a, a t-based 95% interval of
    the mean paired difference and scipy's paired t-test p. With one seed nothing can be inferred: the
    interval and p are NaN and the test is "none"."""
    va, vb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if va.ndim != 1 or va.shape != vb.shape or len(va) == 0:
        raise DataError(f"compare: need one value per seed on each side (got {len(va)} and {len(vb)})")
    if not (np.isfinite(va).all() and np.isfinite(vb).all()):
        raise DataError(f"compare: {metric!r} has a non-finite value ({list(va)} vs {list(vb)})")
    d = vb - va
    diff, n = float(d.mean()), len(d)
    if n < 2:
        ci, p, test = (math.nan, math.nan), math.nan, "none"
    else:
        sem = float(d.std(ddof=1)) / math.sqrt(n)
        lo, hi = sps.t.interval(0.95, n - 1, loc=diff, scale=sem) if sem > 0 else (diff, diff)
        with warnings.catch_warnings():  # identical differences: scipy warns and returns p = 0 (or NaN if all 0)
            warnings.simplefilter("ignore", RuntimeWarning)
            p = float(sps.ttest_rel(vb, va).pvalue)
        ci, test = (float(lo), float(hi)), "paired-t"
    return PairedResult(metric, float(va.mean()), float(vb.mean()), diff, ci, p, test, 0, n, 0, None)


def verdict(p: Optional[float], diff: float, direction: str) -> str:
    """The claim's verdict from a comparison: "shown" when p < 0.05 with diff in the paper's direction
    ("greater": the paper says B > A; "less": B < A), "contradicted" when p < 0.05 the other way, else
    "not shown" (also for a NaN or missing p)."""
    if direction not in ("greater", "less"):
        raise ValueError(f"direction must be 'greater' or 'less', not {direction!r}")
    if p is None or not math.isfinite(p) or p >= ALPHA or diff == 0 or not math.isfinite(diff):
        return "not shown"
    return "shown" if (diff > 0) == (direction == "greater") else "contradicted"
