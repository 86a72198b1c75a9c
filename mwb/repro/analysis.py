"""From finished cells to comparisons and a verdict: computed here, never written by hand.

Seeded experiments: each declared :class:`~mwb.repro.api.Comparison` is a paired test of condition b against
a. When both conditions' cells wrote per-item records carrying the metric, the items are paired by id
(:func:`mwb.evaluation.stats.compare_runs`: over several seeds the two-level test, items then seeds; with one
run each McNemar for 0/1 metrics, sign-flip permutation otherwise); when the metric exists only per run (a
loss, a wall time), the per-seed values are paired (:func:`~mwb.evaluation.stats.compare_values`). A
seed-independent condition has one cell and enters as one run.

One pre-declared headline per part of the claim decides: its :func:`~mwb.evaluation.stats.verdict` is
``shown`` (p < 0.05 in the paper's direction), ``contradicted`` (p < 0.05 the other way) or ``not shown``. Every
other comparison is secondary: its p is Holm-adjusted over the secondary family (``p_holm``) and its verdict is
``exploratory``, never shown/contradicted. The experiment's verdict is ``shown`` when every part is shown,
``contradicted`` when any part is, else ``not shown``; ``verdict_by_part`` keeps each part's word.

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
EXPLORATORY = "exploratory"


@dataclass(frozen=True)
class Cells:
    """Every finished cell's result, by (condition, seed)."""

    conditions: tuple
    seeds: tuple
    results: dict  # (condition, seed) → CellResult

    def seeds_of(self, condition: str) -> list:
        """The seeds ``condition`` has cells for: all of ``seeds``, or one for a seed-independent condition."""
        return [s for s in self.seeds if (condition, s) in self.results]

    def values(self, condition: str, metric: str) -> list[float]:
        """Per-seed values of ``metric`` for ``condition`` (seeds whose cell lacks it are left out)."""
        out = []
        for s in self.seeds_of(condition):
            r: CellResult = self.results[(condition, s)]
            if metric in r.metrics:
                out.append(float(r.metrics[metric]))
        return out

    def records(self, condition: str, metric: str):
        """Per-seed lists of the records carrying ``metric`` when every seed's cell has some; else None. A cell
        may hold items of several evaluations (prompts scored for toxicity, documents scored for perplexity):
        each metric is compared over the items that carry it, paired by id as always."""
        runs = [[rec for rec in (self.results[(condition, s)].predictions or []) if metric in rec]
                for s in self.seeds_of(condition)]
        if not runs or any(not run for run in runs):
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


def compare(c, cells: Cells, resamples: int = 10_000) -> dict:
    """One comparison row (no verdict yet): means, diff = b − a, the deciding p and 95% CI, both levels' tests,
    the per-seed differences, the numbers of distinct items and of seeds, the test's name."""
    a_runs, b_runs = cells.records(c.a, c.metric), cells.records(c.b, c.metric)
    if a_runs is not None and b_runs is not None:
        res = stats.compare_runs(a_runs, b_runs, c.metric, resamples=resamples)
        level = "items"  # over several seeds: items, then seeds (the test is "two-level")
    else:
        res = stats.compare_values(cells.values(c.a, c.metric), cells.values(c.b, c.metric), c.metric)
        level = "seeds"
    d = res.to_dict()
    ci = d.get("ci95")
    ci = list(ci) if ci is not None and None not in ci else None
    return {"a": c.a, "b": c.b, "metric": c.metric, "direction": c.direction, "headline": c.headline,
            "part": getattr(c, "part", "") or "", "mean_a": d["mean_a"], "mean_b": d["mean_b"], "diff": d["diff"],
            "ci95": ci, "p": d["p"], "test": d["test"], "paired_over": level, "n_items": d["n_items"],
            "n_seeds": d["n_seeds"], "p_items": d["p_items"], "item_test": d["item_test"],
            "p_seeds": d["p_seeds"], "seed_test": d["seed_test"], "seed_diffs": d["seed_diffs"]}


def label(rows: list[dict]) -> list[dict]:
    """Headline rows get their verdict; the secondary rows a Holm-adjusted p over their family and the word
    ``exploratory``."""
    secondary = [r for r in rows if not r["headline"]]
    for r, adj in zip(secondary, stats.holm([r["p"] for r in secondary])):
        r["p_holm"], r["verdict"] = adj, EXPLORATORY
    for r in rows:
        if r["headline"]:
            r["p_holm"] = None
            r["verdict"] = stats.verdict(r["p"], r["diff"] if _finite(r["diff"]) else math.nan, r["direction"])
    return rows


def seeded_comparisons(exp: Experiment, cells: Cells, comparisons=None) -> list[dict]:
    """One row per declared comparison (``comparisons``: default the experiment's), labelled by :func:`label`."""
    return label([compare(c, cells) for c in (exp.comparisons if comparisons is None else comparisons)])


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
    parts = verdict_by_part(comparisons)
    if not parts:
        return NOT_SHOWN
    words = set(parts.values())
    if words == {"shown"}:
        return "shown"
    return "contradicted" if "contradicted" in words else NOT_SHOWN


def verdict_by_part(comparisons: list[dict]) -> dict:
    """Seeded experiments: ``{part: verdict}`` of each headline (one part, named "" , for a one-part claim)."""
    return {r.get("part", "") or "": r["verdict"] for r in comparisons if r["headline"] and "ours" not in r}


def verdict_by_metric(exp: Experiment, comparisons: list[dict]) -> dict:
    """Deterministic experiments: the verdict over each metric's headline paper values on their own."""
    if not exp.deterministic:
        return {}
    out: dict = {}
    for r in comparisons:
        if r["headline"]:
            out.setdefault(r["metric"], []).append(r["within"])
    return {m: ("shown" if all(v) else NOT_SHOWN) for m, v in out.items()}
