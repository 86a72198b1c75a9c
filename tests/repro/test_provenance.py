"""Provenance of a report (issue 44): the dirty-tree refusal under reproductions/ (and --allow-dirty marking
it), a finished cell reused only when its recorded commands and definition hash equal the plan's, env.json's
commit / clean flag / definition hash, a seed-independent condition run once and compared as one run, and the
pilots' declarations."""
from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats as sps

from mwb.core.config import ConfigError
from mwb.evaluation import stats
from mwb.repro import registry, runner
from mwb.repro.api import Comparison, Pilot
from mwb.repro.experiments import sgeat_pilot
from mwb.repro.runner import check_clean, plan_run, run_experiment
from tests.helpers.cli import run_cli
from tests.repro.test_repro_framework import FakeEval, Toy, toy_records


class Prov(Toy):
    name = "toy-prov"
    effect = 0.3


class ProvNewCommands(Prov):
    def cell_commands(self, condition, seed, scale, cell_dir, options):
        return [argv + ["--note", "v2"] for argv in super().cell_commands(condition, seed, scale, cell_dir, options)]


class ProvNewHeadline(ProvNewCommands):
    comparisons = (Comparison("base", "treated", "accuracy", "greater", headline=True, part="accuracy"),
                   Comparison("base", "treated", "loss", "less", headline=True, part="loss"))


class ProvOnce(Prov):
    seed_independent = ("base",)


def go(exp, out, fake, seeds=3, **kw):
    return run_experiment(plan_run(exp, "smoke", seeds, str(out), **kw), invoke=fake, progress=False)


def test_dirty_tree_is_refused_under_reproductions_and_allow_dirty_marks_it(tmp_path, monkeypatch):
    dirty = {"commit": "a" * 40, "dirty": True}
    out = tmp_path / "reproductions" / "toy-prov"
    with pytest.raises(ConfigError) as e:
        check_clean(plan_run(Prov(), "smoke", 3, str(out)), dirty)
    assert "uncommitted changes" in str(e.value) and "--allow-dirty" in str(e.value) and "\n" not in str(e.value)
    assert check_clean(plan_run(Prov(), "smoke", 3, str(tmp_path / "elsewhere")), dirty) == dirty  # not committed
    assert check_clean(plan_run(Prov(), "smoke", 3, str(out)), {"commit": "b" * 40, "dirty": False})["dirty"] is False
    monkeypatch.setattr(runner, "git_commit", lambda: dict(dirty))
    with pytest.raises(ConfigError):
        go(Prov(), out, FakeEval())
    assert not out.exists()  # refused before anything is written
    go(Prov(), out, FakeEval(), allow_dirty=True)
    env = json.loads((out / "env.json").read_text())
    assert env["mwb"] == {"commit": "a" * 40, "dirty": True, "allow_dirty": True}
    assert env["definition_hash"] == Prov().definition_hash(Prov.scales["smoke"])
    assert "dirty tree, written with --allow-dirty" in (out / "report.md").read_text()


def test_cli_from_a_dirty_tree_exits_2_with_one_line(tmp_path, capsys, monkeypatch):
    registry.register("toy-prov")(Prov)
    try:
        monkeypatch.setattr(runner, "git_commit", lambda: {"commit": "a" * 40, "dirty": True})
        code, out, err = run_cli(["repro", "toy-prov", "--scale", "smoke", "--out",
                                  str(tmp_path / "reproductions" / "toy-prov")], capsys)
    finally:
        registry.unregister("toy-prov")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "refusing to write a report" in lines[0]


def test_a_cell_is_reused_only_with_the_same_commands_and_definition(tmp_path, capsys):
    out = tmp_path / "run"
    first = FakeEval()
    go(Prov(), out, first)
    assert len(first.calls) == 6
    cell = json.loads((out / "cells" / "base" / "seed0" / "cell.json").read_text())
    assert cell["commands"] == [first.calls[0]] and cell["definition_hash"] == Prov().definition_hash(Prov.scales["smoke"])
    same = FakeEval()
    assert go(Prov(), out, same)["cells"]["reused"] == 6 and same.calls == []
    capsys.readouterr()
    changed = FakeEval()
    go(ProvNewCommands(), out, changed)
    err = capsys.readouterr().err
    assert len(changed.calls) == 6 and all(c[-2:] == ["--note", "v2"] for c in changed.calls)
    assert "re-running base seed 0: its recorded command lines differ from the plan's" in err
    redefined = FakeEval()
    res = go(ProvNewHeadline(), out, redefined)
    assert len(redefined.calls) == 6 and "definition hash" in capsys.readouterr().err
    assert Prov().definition_hash(Prov.scales["smoke"]) != ProvNewHeadline().definition_hash(Prov.scales["smoke"])
    assert set(res["verdict_by_part"]) == {"accuracy", "loss"}  # one verdict per part of the claim


def test_a_seed_independent_condition_runs_once_and_enters_as_one_run(tmp_path):
    fake = FakeEval()
    res = go(ProvOnce(), tmp_path / "once", fake)
    ran = sorted((c[c.index("--condition") + 1], c[c.index("--seed") + 1]) for c in fake.calls)
    assert ran == [("base", "0"), ("treated", "0"), ("treated", "1"), ("treated", "2")]
    head = res["comparisons"][0]
    base = toy_records("base", 0.3, 0, 120)
    treated = [toy_records("treated", 0.3, s, 120) for s in range(3)]
    again = stats.compare_runs([base], treated, "accuracy").to_dict()
    assert head["p"] == again["p"] and head["ci95"] == again["ci95"] and head["n_seeds"] == 3
    d = [np.mean([r["accuracy"] for r in t]) - np.mean([r["accuracy"] for r in base]) for t in treated]
    assert head["p_seeds"] == pytest.approx(sps.ttest_1samp(d, 0).pvalue)
    assert res["seed_independent"] == ["base"] and len(res["conditions"]["base"]["accuracy"]) == 1


def test_pilots_on_report_seeds_must_say_so():
    class Piloted(Prov):
        pilots = (Pilot("lr", "1e-3", seeds=(0,), numbers={"1e-3": 0.5}, measure="dev accuracy"),)
    with pytest.raises(ValueError, match="report seeds"):
        registry.register("toy-piloted")(Piloted)
    sgeat = registry.get_experiment("sgeat")
    assert [(p.setting, p.chosen, p.seeds) for p in sgeat.pilots] == [("lr", "1e-4", (100, 101))]
    assert sgeat.pilots[0].overlap_note == ""
    rule = dict(zip((3e-5, 1e-4, 3e-4), ((0.0063, -0.024), (0.0778, 0.0285), (0.7811, 0.5133))))
    assert sgeat_pilot.choose(rule) == float(sgeat.pilots[0].chosen)
