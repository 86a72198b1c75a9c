"""``mwb repro NAME --log wandb|mlflow|tensorboard``: a reproduction's cells and comparison table in the
experiment trackers (:mod:`mwb.core.training.tracking`), beside ``results.json`` and ``report.md``.

One tracker run per reproduction, named ``NAME-SCALE``: its config (experiment, scale and its parameters,
seeds, options, claim, and at the end the verdict); every cell's metrics as ``CONDITION/METRIC`` at step
``k`` = the k-th seed (1-based), so each condition is one series over seeds; the table ``cells`` (condition,
seed, every metric) and the table ``comparison`` (one row per declared comparison, the columns of
``results.json``'s ``comparisons``). The cells' own training runs log through their commands' ``--log``.
"""
from __future__ import annotations

import json
from typing import Sequence

from mwb.core.training.tracking import open_trackers


def _cell(value):
    """A table cell: numbers and strings as they are, anything else as JSON text."""
    return value if value is None or isinstance(value, (int, float, str)) else json.dumps(value)


def comparison_table(comparisons: list[dict]) -> tuple[list[str], list[list]]:
    columns: list[str] = []
    for row in comparisons:
        columns += [k for k in row if k not in columns]
    return columns, [[_cell(row.get(k)) for k in columns] for row in comparisons]


def track_results(names: Sequence[str], out: str, results: dict, cells) -> None:
    """Log one finished reproduction (``results`` as written to results.json; ``cells`` the
    :class:`~mwb.repro.analysis.Cells` it was computed from) to each tracker in ``names``."""
    if not names:
        return
    config = {k: results.get(k) for k in ("experiment", "scale", "scale_params", "seeds", "options", "claim")}
    tracker = open_trackers(names, out, run_name=f"{results['experiment']}-{results['scale']}", config=config)
    try:
        metrics = list(results.get("metrics") or [])
        rows = []
        for k, seed in enumerate(cells.seeds, start=1):
            step = {}
            for condition in cells.conditions:
                got = cells.results[(condition, seed)].metrics
                step.update({f"{condition}/{m}": v for m, v in got.items()})
                rows.append([condition, seed] + [_cell(got.get(m)) for m in metrics])
            tracker.log_metrics(step, k)
        tracker.log_table("cells", ["condition", "seed"] + metrics, rows)
        tracker.log_table("comparison", *comparison_table(results.get("comparisons") or []))
        tracker.log_config({"verdict": results.get("verdict"), "cells_run": results.get("cells")})
    finally:
        tracker.close()
