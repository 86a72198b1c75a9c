"""Run one experiment's smoke scale in this process and measure what it cost in CPU seconds.

Why CPU seconds: issue 33 sizes a smoke run at "≤ 2 min on 2 cores", and the tests share their cores with
whatever else runs, so a wall-clock bound fails on a busy machine and proves nothing on an idle one. The CPU
time of this process and its finished children (user + system) does not grow with other load; 2 cores × 2
minutes is :data:`SMOKE_CPU_SECONDS`. The run is on one intra-op thread (two spinning threads per process on
a shared machine only add CPU time).
"""
from __future__ import annotations

import json
import resource
from pathlib import Path

import torch

SMOKE_CPU_SECONDS = 240.0


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its children that have been waited for."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def run_smoke(name: str, out: Path, *extra: str) -> tuple[dict, float]:
    """``mwb repro NAME --scale smoke --out OUT [extra]`` on one thread: (its results.json, CPU seconds)."""
    from mwb.cli.main import main
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    start = cpu_seconds()
    try:
        main(["repro", name, "--scale", "smoke", "--out", str(out), *extra])
    except SystemExit as e:  # click's standalone exit after a finished command
        if e.code not in (0, None):
            raise
    finally:
        torch.set_num_threads(threads)
    return json.loads((out / "results.json").read_text()), cpu_seconds() - start


def seed_predictions(out: Path, condition: str, seed: int) -> list[dict]:
    """The per-item records the report paired for ``condition`` and ``seed`` (``OUT/predictions/…``)."""
    from mwb.evaluation.predictions import read_predictions
    return read_predictions(str(out / "predictions" / condition / f"seed{seed}.jsonl"))


def assert_report_files(out: Path, name: str) -> None:
    """Every file a finished run writes beside its cells, each with content."""
    for f in ("report.md", "results.json", "commands.sh", "env.json", f"{name}.png"):
        assert (out / f).stat().st_size > 100, f


def assert_comparisons_recomputed(out: Path, res: dict, seeds, n_items: int) -> None:
    """Each comparison row of ``results.json`` equals what :func:`mwb.evaluation.stats.compare_runs` computes
    from the per-seed records it paired: the means over seeds, the test, its item count, p, diff and verdict
    (every declared comparison here is in the paper's "greater" direction); the run's verdict is the headline's."""
    import statistics

    import pytest

    from mwb.evaluation import stats
    for row in res["comparisons"]:
        a, b = res["conditions"][row["a"]][row["metric"]], res["conditions"][row["b"]][row["metric"]]
        assert row["mean_a"] == pytest.approx(statistics.fmean(a))
        assert row["mean_b"] == pytest.approx(statistics.fmean(b))
        again = stats.compare_runs([seed_predictions(out, row["a"], s) for s in seeds],
                                   [seed_predictions(out, row["b"], s) for s in seeds], row["metric"])
        assert (row["test"], row["n_items"]) == (again.test, n_items)
        assert row["p"] == pytest.approx(again.p) and row["diff"] == pytest.approx(again.diff)
        assert row["verdict"] == stats.verdict(row["p"], row["diff"], "greater")
    assert res["verdict"] == res["comparisons"][0]["verdict"]
