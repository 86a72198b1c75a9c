"""The check every per-item predictions test makes: each results.json metric the records carry is their
aggregate (:func:`mwb.evaluation.predictions.aggregate`), to 1e-12."""
from __future__ import annotations

import json
import math
import os

from mwb.evaluation.predictions import aggregate, read_predictions


def carried(records: list[dict], metrics: dict) -> list[str]:
    """The numeric results.json metrics the records carry; one carried by some records only is an error
    (its aggregate would leave items out). The record fields id/prediction/gold are not metrics even where
    results.json has a metric of that name (chemprot's ``gold`` count)."""
    names = [m for m, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
             and m not in ("id", "prediction", "gold") and any(m in r for r in records)]
    for m in names:
        assert all(m in r for r in records), f"metric {m!r} is on some records only"
    return names


def assert_aggregates(records: list[dict], metrics: dict, at_least: int = 1) -> list[str]:
    """Assert aggregate(records, m) == metrics[m] (1e-12) for every carried metric; return their names."""
    names = carried(records, metrics)
    assert len(names) >= at_least, f"records carry {names} of {sorted(metrics)}"
    for m in names:
        want, got = metrics[m], aggregate(records, m)
        assert (math.isnan(want) and math.isnan(got)) or math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-12), \
            (m, got, want)
    return names


def assert_run_dir(out: str, at_least: int = 1) -> list[str]:
    """The same check on a run directory's predictions.jsonl and results.json."""
    metrics = json.load(open(os.path.join(out, "results.json")))["metrics"]
    return assert_aggregates(read_predictions(out), metrics, at_least)
