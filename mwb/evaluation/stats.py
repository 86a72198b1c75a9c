"""Paired statistics for comparing two conditions evaluated on the same items (``mwb compare``, ``mwb repro``).

Why paired: both conditions see the same items, so the item-to-item spread cancels and a small set still
tells a real difference from noise.

One run per side (:func:`compare_runs` with one run each, test ``mcnemar-exact`` or ``permutation``):

- The 95% interval is a paired percentile bootstrap (Efron & Tibshirani 1993, ch. 13): the same resampled item
  indices for A and B, with corpus metrics (F1, perplexity) recomputed from the resampled parts each time.
- p is McNemar's exact test for 0/1 metrics (scipy's two-sided binomial test on the discordant pairs) and
  otherwise scipy's paired sign-flip permutation test (A and B swapped within items).

Several seeds (:func:`compare_runs` with several runs on a side, test ``two-level``). The item is the unit;
seeds are a second level above it (the design is items crossed with seeds):

- Item level: a sign-flip permutation test over *distinct* items, an item's A/B swap applied jointly in every
  seed it appears in. For a mean metric this is exactly the sign-flip test on the items' seed-averaged
  differences (Dror et al. 2018, "The Hitchhiker's Guide to Testing Statistical Significance in NLP"), so
  re-running the same items under more seeds does not shrink p; exact (all 2^n flips) when 2^n <= resamples.
- Seed level: scipy's paired t-test over the per-seed differences of the aggregates, which is the test that
  sees seed-to-seed variance (Bouthillier et al. 2021, "Accounting for Variance in Machine Learning
  Benchmarks"): a gain that one seed shows and the others do not is not significant, however many items.
- The decision p is the larger of the two (an intersection-union test, Berger & Hsu 1996: it rejects only when
  both levels reject, at level 0.05); ``p_items`` and ``p_seeds`` are kept beside it.
- The 95% interval is a two-level bootstrap for a crossed design (Owen 2007, "The pigeonhole bootstrap";
  Davison & Hinkley 1997 sec. 3.8): seeds resampled with replacement, and distinct items resampled with
  replacement once per resample and applied in every drawn seed, corpus metrics recomputed each time.
- A side with one run (a seed-independent condition: a zero-shot prompt, an untrained model) enters as that
  one run, paired with each seed of the other side; its identical copies never count as evidence.

:func:`compare_pooled` keeps the earlier test that pooled (item, seed) pairs as if they were distinct items
(``legacy-pooled``), only to recompute reports made with it. Whole-run numbers without items (one per seed) go
through :func:`compare_values`: a paired t-test. Secondary comparisons are adjusted with :func:`holm` (Holm
1979). Aggregates come from :mod:`mwb.evaluation.predictions`, the same definition the evaluations use.
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
    """One comparison: B − A on ``metric``, its 95% interval, the deciding p and the test that gave it. Over
    several seeds (``test == "two-level"``) ``p`` = max(``p_items``, ``p_seeds``), ``seed_diffs`` are the
    per-seed differences of the aggregates and ``n_items`` counts distinct items."""
    metric: str
    mean_a: float
    mean_b: float
    diff: float  # mean_b - mean_a
    ci95: tuple  # (lo, hi)
    p: float
    test: str  # "mcnemar-exact" | "permutation" | "two-level" | "legacy-pooled" | "paired-t" | "none"
    n_items: int  # distinct paired items (legacy-pooled: item-seed pairs; 0 for compare_values)
    n_seeds: int
    resamples: int
    seed: Optional[int]
    p_items: Optional[float] = None  # two-level: the item-level sign-flip p over seed-averaged differences
    p_seeds: Optional[float] = None  # two-level / paired-t: the seed-level paired t-test p
    seed_diffs: tuple = ()  # per-seed differences B − A of the aggregates
    item_test: str = ""  # the item-level test's name
    seed_test: str = ""  # the seed-level test's name

    def to_dict(self) -> dict:
        """Plain JSON values; a NaN (p of a single seed without items) becomes None, as strict JSON has none."""
        def num(v):
            if v is None:
                return None
            v = float(v)
            return v if math.isfinite(v) else None
        return {"metric": self.metric, "mean_a": num(self.mean_a), "mean_b": num(self.mean_b),
                "diff": num(self.diff), "ci95": [num(self.ci95[0]), num(self.ci95[1])], "p": num(self.p),
                "test": self.test, "n_items": self.n_items, "n_seeds": self.n_seeds, "resamples": self.resamples,
                "seed": self.seed, "p_items": num(self.p_items), "p_seeds": num(self.p_seeds),
                "seed_diffs": [num(d) for d in self.seed_diffs], "item_test": self.item_test,
                "seed_test": self.seed_test}


def _broadcast(a: Sequence, b: Sequence) -> tuple[list, list]:
    """A side with one run (seed-independent) is paired with every seed of the other side."""
    if not a or not b:
        raise DataError(f"compare: A has {len(a)} runs and B has {len(b)}; give at least one run on each side")
    if len(a) == 1 and len(b) > 1:
        return list(a) * len(b), list(b)
    if len(b) == 1 and len(a) > 1:
        return list(a), list(b) * len(a)
    return list(a), list(b)


def _paired_parts(a: Sequence[Sequence[dict]], b: Sequence[Sequence[dict]], metric: str):
    """Per seed, A's and B's parts with B's rows in A's item order; the aggregate kind they share; per seed
    A's item ids."""
    if not a or len(a) != len(b):
        raise DataError(f"compare: A has {len(a)} runs and B has {len(b)}; give one run per seed on each side")
    kind, pairs, ids = None, [], []
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
        ids.append(pa.ids)
    return kind, pairs, ids


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


def _counts(rng: np.random.Generator, m: int, n: int) -> np.ndarray:
    """``m`` bootstrap count vectors over ``n`` units (how often each unit is drawn in n draws)."""
    idx = rng.integers(0, n, size=(m, n)) + (np.arange(m) * n)[:, None]
    return np.bincount(idx.ravel(), minlength=m * n).reshape(m, n).astype(np.float64)


def _two_level_bootstrap(kind: str, pairs, item_index, n_distinct: int, resamples: int,
                         rng: np.random.Generator) -> np.ndarray:
    """Bootstrap values of the mean-over-seeds difference for items crossed with seeds: per resample, seeds
    drawn with replacement and distinct items drawn with replacement once, the same item draw used in every
    seed (so an item re-run under several seeds is still one unit). Resamples whose drawn seed has none of its
    items drawn (possible only when seeds hold different items) are NaN and left out of the percentiles."""
    n_seeds = len(pairs)
    out = np.empty(resamples)
    chunk = max(1, _CELLS // max(n_distinct, max(len(pa) for pa, _ in pairs)))
    for start in range(0, resamples, chunk):
        m = min(chunk, resamples - start)
        items = _counts(rng, m, n_distinct)
        seeds = _counts(rng, m, n_seeds)
        total = np.zeros(m)
        for s, ((pa, pb), idx) in enumerate(zip(pairs, item_index)):
            c = items[:, idx]
            with np.errstate(invalid="ignore", divide="ignore"):
                d = combine(kind, c @ pb) - combine(kind, c @ pa)
            total += np.where(seeds[:, s] > 0, seeds[:, s] * d, 0.0)
        out[start:start + m] = total / n_seeds
    return out


def _mcnemar_p(pairs) -> float:
    """McNemar's exact test: two-sided binomial on the discordant pairs, pooled over seeds; 1.0 without any."""
    b01 = sum(int(np.sum((pa[:, 0] == 0) & (pb[:, 0] == 1))) for pa, pb in pairs)
    b10 = sum(int(np.sum((pa[:, 0] == 1) & (pb[:, 0] == 0))) for pa, pb in pairs)
    if b01 + b10 == 0:
        return 1.0
    return float(sps.binomtest(b01, b01 + b10, 0.5).pvalue)


def _permutation_p(kind: str, pairs, resamples: int, rng: np.random.Generator, item_index=None,
                   n_distinct: Optional[int] = None) -> float:
    """scipy's paired permutation test: A's and B's values swapped within items. The data passed to scipy
    are indices of the swap units (0..n-1 on A's side, n..2n-1 on B's), so the statistic (the mean-over-seeds
    difference of aggregates) recomputes a corpus metric from the swapped parts: a swapped item moves its
    (B − A) parts from B's sum to A's, one matrix product per batch of permutations.

    Without ``item_index`` every row of every seed is its own unit (one run; or the legacy pooled test). With
    it, ``item_index[s]`` maps seed s's rows to ``n_distinct`` distinct items and an item's swap applies in
    every seed at once: the two-level test's item level."""
    if item_index is None:
        bounds = np.cumsum([0] + [len(pa) for pa, _ in pairs])
        item_index = [np.arange(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]
        n_distinct = int(bounds[-1])
    n = int(n_distinct)
    segments = [(idx, pa.sum(0), pb.sum(0), pb - pa) for idx, (pa, pb) in zip(item_index, pairs)]

    def statistic(x, y, axis=-1):
        swapped = (x >= n).astype(np.float64)  # x: the indices on A's side; an index of B's means swapped
        out = 0.0
        for idx, sum_a, sum_b, delta in segments:
            moved = swapped[..., idx] @ delta
            out = out + combine(kind, sum_b - moved) - combine(kind, sum_a + moved)
        return out / len(segments)

    res = sps.permutation_test((np.arange(n), np.arange(n) + n), statistic, permutation_type="samples",
                               vectorized=True, n_resamples=resamples, rng=rng, batch=max(1, _CELLS // n))
    return float(res.pvalue)


def _check(resamples: int) -> None:
    if resamples < 1:
        raise DataError(f"compare: resamples must be at least 1 (got {resamples})")


def _seed_ttest(d: np.ndarray) -> float:
    """scipy's paired t-test p over per-seed differences (one-sample t on B − A): 1.0 when every difference is
    0, 0.0 when they are equal and non-zero (no spread), NaN for one seed."""
    if len(d) < 2:
        return math.nan
    tol = 1e-12 * max(1.0, float(np.max(np.abs(d))))  # equal up to float rounding: no spread
    if np.all(np.abs(d) <= tol):
        return 1.0
    if float(np.ptp(d)) <= tol:
        return 0.0
    return float(sps.ttest_1samp(d, 0.0).pvalue)


def compare_runs(a: Sequence[Sequence[dict]], b: Sequence[Sequence[dict]], metric: str, resamples: int = 10_000,
                 seed: int = 0) -> PairedResult:
    """Compare conditions A and B on ``metric`` from their per-item records.

    ``a`` and ``b`` are per-seed lists of records (seed k of A paired with seed k of B; one run is a list of
    one; a side with one run against several is seed-independent and paired with each). Items pair by id
    within each seed; ids that differ are a DataError saying how many are missing on each side. The means are
    the per-seed aggregates averaged over seeds, ``diff`` = mean_b − mean_a. One run on each side: the
    single-run test (McNemar or permutation); otherwise the two-level test (see the module docstring).
    """
    _check(resamples)
    if len(a) == 1 and len(b) == 1:
        return compare_pooled(a, b, metric, resamples, seed)
    a, b = _broadcast(a, b)
    kind, pairs, ids = _paired_parts(a, b, metric)
    distinct = {rid: i for i, rid in enumerate(dict.fromkeys(r for run in ids for r in run))}
    item_index = [np.asarray([distinct[r] for r in run], dtype=np.int64) for run in ids]
    agg_a = np.array([float(combine(kind, pa.sum(0))) for pa, _ in pairs])
    agg_b = np.array([float(combine(kind, pb.sum(0))) for _, pb in pairs])
    d = agg_b - agg_a
    boot_rng, perm_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    boots = _two_level_bootstrap(kind, pairs, item_index, len(distinct), resamples, boot_rng)
    lo, hi = np.nanpercentile(boots, [2.5, 97.5])
    p_items = _permutation_p(kind, pairs, resamples, perm_rng, item_index, len(distinct))
    p_seeds = _seed_ttest(d)
    p = max(p_items, p_seeds) if math.isfinite(p_seeds) else math.nan
    return PairedResult(metric, float(agg_a.mean()), float(agg_b.mean()), float(agg_b.mean() - agg_a.mean()),
                        (float(lo), float(hi)), p, "two-level", len(distinct), len(pairs), resamples, seed,
                        p_items, p_seeds, tuple(float(x) for x in d), "sign-flip over items (seed-averaged)",
                        "paired-t over seeds")


def compare_pooled(a: Sequence[Sequence[dict]], b: Sequence[Sequence[dict]], metric: str, resamples: int = 10_000,
                   seed: int = 0) -> PairedResult:
    """The single-run test; over several seeds the legacy pooled test (``legacy-pooled``), kept only to
    recompute reports made with it: every (item, seed) pair counts as an item, bootstrap within seeds, McNemar
    on the discordant pairs pooled over seeds or a permutation with each pair swapped on its own."""
    _check(resamples)
    kind, pairs, _ = _paired_parts(a, b, metric)
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
    item_test = test  # the pooled test's own name (the one pre-issue-44 reports recorded)
    if len(pairs) > 1:
        test = "legacy-pooled"
    return PairedResult(metric, mean_a, mean_b, mean_b - mean_a, (float(lo), float(hi)), p, test,
                        sum(len(pa) for pa, _ in pairs), len(pairs), resamples, seed, item_test=item_test,
                        seed_diffs=tuple(float(y - x) for x, y in zip(agg_a, agg_b)))


def compare_values(a: Sequence[float], b: Sequence[float], metric: str = "value") -> PairedResult:
    """Compare per-seed whole-run numbers (no items): means, diff = mean_b − mean_a, a t-based 95% interval of
    the mean paired difference and scipy's paired t-test p. With one seed nothing can be inferred: the
    interval and p are NaN and the test is "none". A side with one value against several is seed-independent
    and paired with each."""
    if len(a) == 1 and len(b) > 1 or len(b) == 1 and len(a) > 1:
        a, b = _broadcast(list(a), list(b))
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
    return PairedResult(metric, float(va.mean()), float(vb.mean()), diff, ci, p, test, 0, n, 0, None,
                        p_seeds=p, seed_diffs=tuple(float(x) for x in d), seed_test=test)


def holm(pvalues: Sequence[Optional[float]]) -> list[Optional[float]]:
    """Holm's (1979) step-down adjusted p-values for a family of tests; a missing/NaN p stays None and is not
    counted in the family. Adjusted p_(i) = max over j <= i of min(1, (m − j + 1) p_(j)) in ascending order."""
    valid = [(p, i) for i, p in enumerate(pvalues) if p is not None and math.isfinite(p)]
    out: list[Optional[float]] = [None] * len(pvalues)
    m, running = len(valid), 0.0
    for rank, (p, i) in enumerate(sorted(valid)):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def verdict(p: Optional[float], diff: float, direction: str) -> str:
    """The claim's verdict from a comparison: "shown" when p < 0.05 with diff in the paper's direction
    ("greater": the paper says B > A; "less": B < A), "contradicted" when p < 0.05 the other way, else
    "not shown" (also for a NaN or missing p)."""
    if direction not in ("greater", "less"):
        raise ValueError(f"direction must be 'greater' or 'less', not {direction!r}")
    if p is None or not math.isfinite(p) or p >= ALPHA or diff == 0 or not math.isfinite(diff):
        return "not shown"
    return "shown" if (diff > 0) == (direction == "greater") else "contradicted"
