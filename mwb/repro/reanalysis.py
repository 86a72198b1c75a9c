"""Committed reports recomputed from their own predictions: the rows as the method they were made with
computes them (so a test can check every committed number), and the two-level verdict on the same predictions.

A ``results.json`` without ``"statistics"`` was made before issue 44 by the legacy pooled test
(:func:`mwb.evaluation.stats.compare_pooled`: every (item, seed) pair counted as an item); one with
``"statistics": "two-level"`` by :func:`mwb.repro.analysis.compare`. Nothing here writes into the committed
directories: ``mwb repro reanalyze`` prints the table of old and new verdicts.
"""
from __future__ import annotations

import json
import os
from typing import Optional

from mwb.core.errors import DataError
from mwb.evaluation import stats
from mwb.evaluation.predictions import read_predictions

from . import analysis
from .api import CellResult, Comparison
from .registry import get_experiment

LEGACY = "legacy-pooled"


def method(results: dict) -> str:
    """The statistics a report's comparisons were made with (missing: the legacy pooled test)."""
    return results.get("statistics") or LEGACY


def seed_independent(name: str) -> tuple:
    """The registered experiment's seed-independent conditions (none when it is not registered)."""
    try:
        return tuple(get_experiment(name).seed_independent)
    except Exception:  # an experiment since removed or renamed: no declaration to use
        return ()


def load_cells(report_dir: str, results: dict, single: tuple = ()) -> analysis.Cells:
    """The report's cells rebuilt from ``results.json``'s per-seed values and ``predictions/``; conditions in
    ``single`` keep their first seed only (a seed-independent condition enters as one run)."""
    seeds = tuple(results["seeds"])
    cells = {}
    for cond, table in results["conditions"].items():
        for k, s in enumerate(seeds[:1] if cond in single else seeds):
            metrics = {m: v[k] for m, v in table.items() if k < len(v)}
            path = os.path.join(report_dir, "predictions", cond, f"seed{s}.jsonl")
            preds = read_predictions(path) if os.path.isfile(path) else None
            cells[(cond, s)] = CellResult(metrics, preds)
    return analysis.Cells(tuple(results["conditions"]), seeds, cells)


def declared(results: dict, current: bool = False) -> list[Comparison]:
    """The comparisons as the report declared them; with ``current``, a comparison the registered experiment
    still declares takes its headline flag and part from there (a claim since split into parts)."""
    now = {}
    if current:
        try:
            now = {(c.a, c.b, c.metric, c.direction): c for c in get_experiment(results["experiment"]).comparisons}
        except Exception:  # not registered any more
            now = {}
    out = []
    for r in results["comparisons"]:
        key = (r["a"], r["b"], r["metric"], r["direction"])
        out.append(now.get(key) or Comparison(*key, bool(r["headline"]), r.get("part", "") or ""))
    return out


def recompute_old(report_dir: str, results: dict) -> list[dict]:
    """Each committed row recomputed by the method named in it: ``mean_a, mean_b, diff, ci95, p, test,
    n_items, n_seeds`` (the legacy rows) or the full two-level row."""
    if method(results) != LEGACY:
        cells = load_cells(report_dir, results, tuple(results.get("seed_independent", ())))
        return analysis.label([analysis.compare(c, cells) for c in declared(results)])
    cells = load_cells(report_dir, results)
    out = []
    for c, row in zip(declared(results), results["comparisons"]):
        a_runs, b_runs = cells.records(c.a, c.metric), cells.records(c.b, c.metric)
        if row.get("paired_over") == "items":
            if a_runs is None or b_runs is None:
                raise DataError(f"{report_dir}: {c.b} vs {c.a} on {c.metric} was paired over items, but the "
                                f"predictions lack the metric")
            res = stats.compare_pooled(a_runs, b_runs, c.metric)
        else:
            res = stats.compare_values(cells.values(c.a, c.metric), cells.values(c.b, c.metric), c.metric)
        d = res.to_dict()
        test = d["test"] if d["test"] != LEGACY else d["item_test"]
        out.append({"a": c.a, "b": c.b, "metric": c.metric, "mean_a": d["mean_a"], "mean_b": d["mean_b"],
                    "diff": d["diff"], "ci95": d["ci95"] if None not in d["ci95"] else None, "p": d["p"],
                    "test": test, "n_items": d["n_items"], "n_seeds": d["n_seeds"],
                    "verdict": stats.verdict(d["p"], d["diff"], c.direction)})
    return out


def reanalyze(report_dir: str, results: Optional[dict] = None) -> list[dict]:
    """The two-level rows (headline verdicts, exploratory secondaries with Holm p) on the committed predictions,
    with the registered experiment's seed-independent conditions entering as one run."""
    results = results if results is not None else read(report_dir)
    cells = load_cells(report_dir, results, seed_independent(results["experiment"]))
    return analysis.label([analysis.compare(c, cells) for c in declared(results, current=True)])


def read(report_dir: str) -> dict:
    with open(os.path.join(report_dir, "results.json"), encoding="utf-8") as f:
        return json.load(f)


def verdict_table(root: str) -> list[dict]:
    """For every committed report under ``root``: each headline's old verdict and p, and the two-level
    verdict, p, p over items and p over seeds on the same committed predictions."""
    rows = []
    for name in sorted(os.listdir(root)):
        d = os.path.join(root, name)
        if not os.path.isfile(os.path.join(d, "results.json")):
            continue
        res = read(d)
        if res.get("deterministic"):
            rows.append({"report": name, "part": "", "comparison": "paper values within tolerance",
                         "method": "deterministic", "old_verdict": res["verdict"], "old_p": None,
                         "new_verdict": res["verdict"], "p": None, "p_items": None, "p_seeds": None})
            continue
        old = {(r["a"], r["b"], r["metric"]): r for r in res["comparisons"]}
        for r in reanalyze(d, res):
            was = old[(r["a"], r["b"], r["metric"])]
            if not (r["headline"] or was.get("headline")):
                continue
            rows.append({"report": name, "part": r["part"], "comparison": f"{r['metric']}: {r['b']} vs {r['a']}",
                         "method": method(res), "old_verdict": was["verdict"], "old_p": was.get("p"),
                         "new_verdict": r["verdict"], "p": r["p"], "p_items": r["p_items"], "p_seeds": r["p_seeds"]})
    return rows


def render_table(rows: list[dict]) -> str:
    def p(x):
        return "–" if x is None else ("< 0.0001" if x < 1e-4 else f"{x:.4f}")
    lines = ["| report | headline | old verdict (p, method) | new verdict | p two-level | p items | p seeds |",
             "| --- | --- | --- | --- | ---: | ---: | ---: |"]
    for r in rows:
        head = r["comparison"] + (f" [{r['part']}]" if r["part"] else "")
        lines.append(f"| {r['report']} | {head} | {r['old_verdict']} ({p(r['old_p'])}, {r['method']}) | "
                     f"{r['new_verdict']} | {p(r['p'])} | {p(r['p_items'])} | {p(r['p_seeds'])} |")
    return "\n".join(lines) + "\n"
