"""From finished cells to comparisons and a verdict: computed here, never written by hand.

Seeded experiments: each declared :class:`~mwb.repro.api.Comparison` is a paired test of condition b against
a. When both conditions' cells wrote per-item records carrying the metric, the items are paired by id and
resampled within seeds (:func:`mwb.evaluation.stats.compare_runs`: McNemar for 0/1 metrics, sign-flip
permutation otherwise, corpus metrics recomputed per resample); when the metric exists only per run (a loss, a
wall time), the per-seed values are paired (:func:`~mwb.evaluation.stats.compare_values`). The verdict is the
headline comparison's :func:`~mwb.evaluation.stats.verdict`: ``shown`` (p < 0.05 in the paper's direction),
``contradicted`` (p < 0.05 the other way), ``not shown``.

Deterministic experiments: each paper value is set against ours (the mean over runs, which is one run), and
the verdict is ``shown`` when every headline value lies within its declared tolerance, else ``not shown``.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from mwb.evaluation import stats

from .api import CellResult, Experiment

NOT_SHOWN = "not shown"


@dataclass(frozen=True)
class Cells:
    """Every finished cell's result, by (condition, seed)."""

    conditions: tuple
    seeds: tuple
    results: dict  # (condition, seed) → CellResult

    def values(self, condition: str, metric: str) -> list[float]:
        """Per-seed values of ``metric`` for ``condition`` (seeds whose cell lacks it are left out)."""
        out = []
        for s in self.seeds:
            r: CellResult = self.results[(condition, s)]
            if metric in r.metrics:
                out.append(float(r.metrics[metric]))
        return out

    def records(self, condition: str, metric: str):
        """Per-seed lists of the records carrying ``metric`` when every seed's cell has some; else None. A cell
        may hold items of several evaluations (prompts scored for toxicity, documents scored for perplexity):
        each metric is compared over the items that carry it, paired by id as always."""
        runs = [[rec for rec in (self.results[(condition, s)].predictions or []) if metric in rec]
                for s in self.seeds]
        if any(not run for run in runs):
            return None
        return runs


def mean_std(values: list[float]) -> tuple[float, float]:
    """(mean, sample standard deviation over seeds; 0 for one value)."""
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def condition_table(exp_metrics: tuple, cells: Cells) -> dict:
    """``{condition: {metric: [per-seed values]}}`` for the metrics each condition reported."""
    out = {}
    for c in cells.conditions:
        row = {m: cells.values(c, m) for m in exp_metrics}
        out[c] = {m: v for m, v in row.items() if v}
    return out


def _finite(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def seeded_comparisons(exp: Experiment, cells: Cells) -> list[dict]:
    """One row per declared comparison: means, diff = b − a, 95% CI, p, the test used, its verdict."""
    rows = []
    for c in exp.comparisons:
        a_runs, b_runs = cells.records(c.a, c.metric), cells.records(c.b, c.metric)
        if a_runs is not None and b_runs is not None:
            res = stats.compare_runs(a_runs, b_runs, c.metric)
            level = "items"
        else:
            res = stats.compare_values(cells.values(c.a, c.metric), cells.values(c.b, c.metric), c.metric)
            level = "seeds"
        d = res.to_dict()
        ci = d.get("ci95")
        ci = list(ci) if ci is not None and None not in ci else None
        row = {"a": c.a, "b": c.b, "metric": c.metric, "direction": c.direction, "headline": c.headline,
               "mean_a": d.get("mean_a"), "mean_b": d.get("mean_b"), "diff": d.get("diff"),
               "ci95": ci, "p": d.get("p"), "test": d.get("test"),
               "paired_over": level, "n_items": d.get("n_items"), "n_seeds": d.get("n_seeds")}
        row["verdict"] = stats.verdict(row["p"], row["diff"] if _finite(row["diff"]) else math.nan, c.direction)
        rows.append(row)
    return rows


def deterministic_comparisons(paper_values: tuple, cells: Cells) -> list[dict]:
    """One row per paper value: the paper's number, ours, diff = ours − paper, tolerance, within or not."""
    rows = []
    for pv in paper_values:
        vals = cells.values(pv.condition, pv.metric)
        ours = statistics.fmean(vals) if vals else math.nan
        rows.append({"a": "paper", "b": pv.condition, "metric": pv.metric, "paper": pv.value, "ours": ours,
                     "diff": ours - pv.value, "ratio": ours / pv.value if pv.value else None,
                     "ci95": None, "p": None, "test": "deterministic", "tolerance": pv.tolerance,
                     "relative": pv.relative, "allowed": pv.allowed(), "within": pv.within(ours),
                     "headline": pv.headline, "where": pv.where})
    return rows


def verdict(exp: Experiment, comparisons: list[dict]) -> str:
    """The experiment's verdict from its own comparisons (see the module docstring)."""
    if exp.deterministic:
        head = [r for r in comparisons if r["headline"]]
        return "shown" if head and all(r["within"] for r in head) else NOT_SHOWN
    head = [r for r in comparisons if r["headline"]]
    return head[0]["verdict"] if head else NOT_SHOWN


def verdict_by_metric(exp: Experiment, comparisons: list[dict]) -> dict:
    """Deterministic experiments: the verdict over each metric's headline paper values on their own."""
    if not exp.deterministic:
        return {}
    out: dict = {}
    for r in comparisons:
        if r["headline"]:
            out.setdefault(r["metric"], []).append(r["within"])
    return {m: ("shown" if all(v) else NOT_SHOWN) for m, v in out.items()}
