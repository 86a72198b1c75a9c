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
    """Every file a finished run writes beside its cells, each holding what it should: report.md the verdict of
    results.json, commands.sh a bash script naming the rerun, env.json the experiment's definition hash and the
    commit, the plot a PNG."""
    from mwb.repro.registry import get_experiment
    res = json.loads((out / "results.json").read_text())
    assert res["experiment"] == name and res["statistics"] == "two-level"
    assert f"**Verdict: {res['verdict']}**" in (out / "report.md").read_text()
    sh = (out / "commands.sh").read_text().splitlines()
    assert sh[0] == "#!/usr/bin/env bash" and any(f"mwb repro {name} --scale {res['scale']}" in ln for ln in sh)
    env = json.loads((out / "env.json").read_text())
    exp = get_experiment(name)
    assert env["definition_hash"] == exp.definition_hash(exp.scale(res["scale"]))
    assert env["mwb"]["commit"] is None or len(env["mwb"]["commit"]) == 40
    assert (out / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


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
        runs_a = [seed_predictions(out, row["a"], s) for s in seeds]
        runs_b = [seed_predictions(out, row["b"], s) for s in seeds]
        again = stats.compare_runs(runs_a, runs_b, row["metric"])
        assert sum(len(r) for r in runs_a) == n_items  # item-seed pairs; the test counts distinct items
        assert (row["test"], row["n_items"]) == (again.test, len({x["id"] for r in runs_a for x in r}))
        assert row["p"] == pytest.approx(again.p) and row["diff"] == pytest.approx(again.diff)
        assert row["verdict"] == (stats.verdict(row["p"], row["diff"], "greater") if row["headline"] else "exploratory")
    assert res["verdict"] == res["comparisons"][0]["verdict"]
