"""The ``mwb repro`` framework on a toy experiment registered here: its cells run a trivial "evaluation" (the
test's invoker) writing per-item 0/1 predictions with a planted effect. The verdict comes out of the paired
statistics (shown / contradicted / not shown), a rerun skips finished cells, a half-written or failed cell is
redone, and every output file holds what the cells produced."""
from __future__ import annotations

import json
import os
import shlex

import numpy as np
import pytest
import torch
from scipy import stats as sps

from mwb.core.config import ConfigError
from mwb.evaluation.predictions import read_predictions
from mwb.repro import analysis, registry
from mwb.repro.api import SCALES, CellResult, Comparison, Experiment, Paper, PaperValue, Pilot, Scale
from mwb.repro.runner import dry_run, plan_run, run_experiment

ITEMS = 120


class Toy(Experiment):
    """Accuracy of "treated" is the base's plus ``effect`` on the same items (paired by id); "loss" exists only
    per run (results.json), so its comparison pairs per-seed values."""
    papers = (Paper("Toy et al. 2024", "2401.00001", "A planted effect"),)
    claim = "Treatment raises accuracy over the base on the same items."
    conditions = ("base", "treated")
    metrics = ("accuracy", "loss")
    comparisons = (Comparison("base", "treated", "accuracy", "greater", headline=True),
                   Comparison("base", "treated", "loss", "less"))
    paper_values = (PaperValue("treated", "accuracy", 0.8, "Table 9, toy setting"),)
    scales = {s: Scale(s, f"the {s} toy", params={"items": ITEMS}, budget="instant", seeds=2) for s in SCALES}
    effect = 0.0

    def cell_commands(self, condition, seed, scale, cell_dir, options):
        return [["mwb", "eval", "toy", "--condition", condition, "--effect", str(self.effect), "--seed", str(seed),
                 "--items", str(scale.params["items"]), "--out", cell_dir]]

    def scope(self, scale):
        return f"A toy at {scale.name} scale: it shows the pipeline, nothing about any paper."


def toy_records(condition: str, effect: float, seed: int, items: int) -> list[dict]:
    """Item i is right for the base when u_i < 0.5 and for "treated" when u_i < 0.5 + effect (same u_i)."""
    u = np.random.default_rng(seed).random(items)
    threshold = 0.5 + (effect if condition == "treated" else 0.0)
    return [{"id": f"item{i}", "prediction": int(u[i] < threshold), "gold": 1, "accuracy": int(u[i] < threshold)}
            for i in range(items)]


class FakeEval:
    """The toy's `mwb eval toy`: writes results.json and predictions.jsonl into --out, counts its calls."""

    def __init__(self, fail_on=None):
        self.calls, self.fail_on = [], fail_on

    def __call__(self, argv):
        self.calls.append(list(argv))
        args = dict(zip(argv[3::2], argv[4::2]))
        if self.fail_on and (args["--condition"], int(args["--seed"])) == self.fail_on:
            raise RuntimeError("the evaluation crashed")
        recs = toy_records(args["--condition"], float(args["--effect"]), int(args["--seed"]), int(args["--items"]))
        acc = float(np.mean([r["accuracy"] for r in recs]))
        loss = 1.0 - acc + 0.01 * int(args["--seed"])
        with open(os.path.join(args["--out"], "predictions.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in recs)
        with open(os.path.join(args["--out"], "results.json"), "w") as f:
            json.dump({"task": "toy", "metrics": {"accuracy": acc, "loss": loss}}, f)


@pytest.fixture(scope="module")
def toys():
    made = {}
    for name, effect in (("toy-shown", 0.3), ("toy-contra", -0.3), ("toy-none", 0.0)):
        cls = type(name.replace("-", "_"), (Toy,), {"effect": effect})
        registry.register(name)(cls)
        made[name] = registry.get_experiment(name)
    yield made
    for name in made:
        registry.unregister(name)


def run(name, out, invoke, seeds=2):
    return run_experiment(plan_run(registry.get_experiment(name), "smoke", seeds, str(out)), invoke=invoke,
                          progress=False)


@pytest.mark.parametrize("name,expected", [("toy-shown", "shown"), ("toy-contra", "contradicted"),
                                           ("toy-none", "not shown")])
def test_verdict_comes_from_the_paired_comparison(toys, tmp_path, name, expected):
    res = run(name, tmp_path / name, FakeEval(), seeds=3)
    assert res["verdict"] == expected and res["statistics"] == "two-level"
    head = res["comparisons"][0]
    effect = toys[name].effect
    base = [toy_records("base", effect, s, ITEMS) for s in (0, 1, 2)]
    treated = [toy_records("treated", effect, s, ITEMS) for s in (0, 1, 2)]
    mean = lambda runs: np.mean([np.mean([r["accuracy"] for r in run]) for run in runs])  # noqa: E731
    assert head["mean_a"] == pytest.approx(mean(base)) and head["mean_b"] == pytest.approx(mean(treated))
    assert head["diff"] == pytest.approx(mean(treated) - mean(base))
    assert head["test"] == "two-level" and head["paired_over"] == "items"
    assert head["n_items"] == ITEMS and head["n_seeds"] == 3  # the 120 ids re-run under 3 seeds: 120 items
    per_seed = lambda runs: [np.mean([r["accuracy"] for r in run]) for run in runs]  # noqa: E731
    d = np.array(per_seed(treated)) - np.array(per_seed(base))
    assert head["seed_diffs"] == pytest.approx(list(d))
    if effect:
        assert head["p_seeds"] == pytest.approx(sps.ttest_1samp(d, 0).pvalue)
    assert head["p"] == pytest.approx(max(head["p_items"], head["p_seeds"]))
    assert head["p_holm"] is None and res["verdict_by_part"] == {"": expected}
    if expected != "not shown":
        assert head["ci95"][0] <= head["diff"] <= head["ci95"][1] and head["p"] < 0.05
    # a metric with no per-item values is compared over seeds: scipy's paired t-test on the per-seed values
    loss = res["comparisons"][1]
    a, b = res["conditions"]["base"]["loss"], res["conditions"]["treated"]["loss"]
    assert loss["paired_over"] == "seeds" and loss["test"] == "paired-t" and len(a) == len(b) == 3
    assert loss["verdict"] == "exploratory"  # a secondary comparison: Holm p, no verdict word
    if effect:
        assert loss["p"] == pytest.approx(sps.ttest_rel(b, a).pvalue)
        assert loss["p_holm"] == pytest.approx(min(1.0, loss["p"]))  # a family of one secondary


def test_rerun_skips_finished_cells_and_redoes_a_half_written_one(toys, tmp_path):
    out = tmp_path / "run"
    first = FakeEval()
    res1 = run("toy-shown", out, first)
    assert len(first.calls) == 4  # 2 conditions × 2 seeds
    again = FakeEval()
    res2 = run("toy-shown", out, again)
    assert again.calls == [] and res2["cells"] == {"ran": 0, "reused": 4, "cell_wall_s": res1["cells"]["cell_wall_s"]}
    assert res2["comparisons"] == res1["comparisons"] and res2["conditions"] == res1["conditions"]
    # a cell stopped half way: its run directory exists, cell.json does not → deleted and run again
    cell = out / "cells" / "treated" / "seed1"
    os.remove(cell / "cell.json")
    (cell / "half_written.bin").write_bytes(b"\0" * 10)
    third = FakeEval()
    res3 = run("toy-shown", out, third)
    assert len(third.calls) == 1 and third.calls[0][third.calls[0].index("--condition") + 1] == "treated"
    assert third.calls[0][third.calls[0].index("--seed") + 1] == "1"
    assert not (cell / "half_written.bin").exists() and (cell / "cell.json").exists()
    assert res3["comparisons"] == res1["comparisons"]


def test_a_failed_cell_is_not_finished(toys, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="crashed"):
        run("toy-shown", out, FakeEval(fail_on=("treated", 0)))
    assert (out / "cells" / "base" / "seed1" / "cell.json").exists()
    assert not (out / "cells" / "treated" / "seed0" / "cell.json").exists()
    retry = FakeEval()
    res = run("toy-shown", out, retry)
    assert [c[c.index("--condition") + 1] + c[c.index("--seed") + 1] for c in retry.calls] == ["treated0", "treated1"]
    assert res["verdict"] == "shown"


def test_every_output_file(toys, tmp_path):
    out = tmp_path / "run"
    fake = FakeEval()
    res = run("toy-shown", out, fake)
    effect = toys["toy-shown"].effect
    # results.json: the record returned, with per-seed values equal to what the cells wrote
    rec = json.loads((out / "results.json").read_text())
    assert rec["experiment"] == "toy-shown" and rec["scale"] == "smoke" and rec["seeds"] == [0, 1]
    assert rec["paper"] == [{"citation": "Toy et al. 2024", "arxiv": "2401.00001", "title": "A planted effect"}]
    assert rec["claim"] == Toy.claim and rec["deterministic"] is False and rec["verdict"] == res["verdict"] == "shown"
    for c in ("base", "treated"):
        accs = [np.mean([r["accuracy"] for r in toy_records(c, effect, s, ITEMS)]) for s in (0, 1)]
        assert rec["conditions"][c]["accuracy"] == pytest.approx(accs)
    assert [(r["a"], r["b"], r["metric"]) for r in rec["comparisons"]] == [("base", "treated", "accuracy"),
                                                                           ("base", "treated", "loss")]
    assert {"diff", "ci95", "p", "test"} <= set(rec["comparisons"][0])
    assert rec["paper_values"] == [PaperValue("treated", "accuracy", 0.8, "Table 9, toy setting").to_dict()]
    # predictions/<condition>/seed<k>.jsonl: the cells' records
    for c in ("base", "treated"):
        for s in (0, 1):
            assert read_predictions(str(out / "predictions" / c / f"seed{s}.jsonl")) == toy_records(c, effect, s, ITEMS)
    # report.md: verdict, mean ± std, the paper's column, the comparison, the scope
    md = (out / "report.md").read_text()
    accs = rec["conditions"]["treated"]["accuracy"]
    assert "**Verdict: shown**" in md and "accuracy: paper" in md
    assert f"| treated | {np.mean(accs):.4g} ± {np.std(accs, ddof=1):.4g} | 0.8 |" in md
    head = rec["comparisons"][0]
    assert (f"| treated vs base (headline) | accuracy | {head['mean_a']:.4g} | {head['mean_b']:.4g} | "
            f"{head['diff']:.4g} |") in md
    assert "A toy at smoke scale: it shows the pipeline" in md and "![toy-shown](toy-shown.png)" in md
    # commands.sh: runnable as it stands, each command line one cell's argv
    sh = (out / "commands.sh").read_text().splitlines()
    assert sh[0] == "#!/usr/bin/env bash" and "set -euo pipefail" in sh and os.access(out / "commands.sh", os.X_OK)
    lines = [shlex.split(line) for line in sh if line and not line.startswith(("#", "set "))]
    assert lines == fake.calls and all(a[:3] == ["mwb", "eval", "toy"] for a in lines)
    assert any(line.startswith(f"#   mwb repro toy-shown --scale smoke --seeds 2 --out {out}") for line in sh)
    # env.json
    env = json.loads((out / "env.json").read_text())
    assert env["torch"] == torch.__version__ and env["threads"] == torch.get_num_threads() and env["wall_s"] > 0
    assert len(env["load_average_start"]) == 3 and len(env["load_average_end"]) == 3
    assert env["energy"]["energy_j"] >= 0 and env["energy"]["source"]
    assert env["mwb"]["commit"] is None or len(env["mwb"]["commit"]) == 40
    # the plot
    png = (out / "toy-shown.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_dry_run_and_options(toys, tmp_path):
    exp = registry.get_experiment("toy-none")
    plan = plan_run(exp, "smoke", 2, str(tmp_path / "dry"))
    text = dry_run(plan)
    argvs = [shlex.split(x) for x in text.splitlines() if x.startswith("mwb ")]
    assert len(argvs) == 4 and argvs[0][-1] == os.path.join(str(tmp_path / "dry"), "cells", "base", "seed0")
    assert not (tmp_path / "dry").exists()  # nothing ran, nothing written
    with pytest.raises(ConfigError, match="applies to --scale paper"):
        plan_run(exp, "smoke", 2, None, {"data": "x"})
    with pytest.raises(ConfigError, match="unknown --set key 'data'"):
        plan_run(exp, "paper", 2, None, {"data": "x"})
    with pytest.raises(ConfigError, match="unknown scale"):
        plan_run(exp, "huge")


def test_first_seed_runs_new_seeds_and_refuses_pilot_seeds_for_a_report(toys, tmp_path):
    """--first-seed K runs seeds K..K+N-1 (a reviewer's re-run on new seeds), says so in the re-run command,
    and a report under reproductions/ may not run on seeds a pilot tuned on (elsewhere: a note)."""
    exp = registry.get_experiment("toy-shown")
    res = run_experiment(plan_run(exp, "smoke", 2, str(tmp_path / "new"), first_seed=5), invoke=FakeEval(),
                         progress=False)
    assert res["seeds"] == [5, 6] and sorted(os.listdir(tmp_path / "new" / "cells" / "base")) == ["seed5", "seed6"]
    treated = [np.mean([r["accuracy"] for r in toy_records("treated", 0.3, s, ITEMS)]) for s in (5, 6)]
    assert res["conditions"]["treated"]["accuracy"] == pytest.approx(treated)
    assert "--seeds 2 --first-seed 5 " in (tmp_path / "new" / "commands.sh").read_text()
    piloted = type("toy_piloted", (type(exp),), {"pilots": (Pilot("lr", "1e-3", (6,), {"1e-3": 0.5}, "dev"),)})()
    with pytest.raises(ConfigError, match="seed\\(s\\) 6 of this run are .* pilot seeds"):
        plan_run(piloted, "smoke", 2, str(tmp_path / "reproductions" / "toy"), first_seed=5)
    plan = plan_run(piloted, "smoke", 2, str(tmp_path / "elsewhere"), first_seed=5)
    assert plan.seeds == (5, 6) and "not an independent test" in plan.note
    assert plan_run(piloted, "smoke", 2, str(tmp_path / "reproductions" / "toy"), first_seed=7).seeds == (7, 8)
    with pytest.raises(ConfigError, match="--first-seed must be at least 0"):
        plan_run(exp, "smoke", 2, None, first_seed=-1)


def test_deterministic_verdict_counts_headline_values_only():
    pvs = (PaperValue("a", "m", 10.0, "T1", tolerance=0.1, relative=True),
           PaperValue("b", "m", 4.0, "T2", tolerance=0.05),
           PaperValue("c", "m", 1.0, "T3", tolerance=0.1, relative=True, headline=False))

    class Det(Experiment):
        deterministic = True

    def cells(a, b, c):
        results = {(k, 0): CellResult({"m": v}) for k, v in (("a", a), ("b", b), ("c", c))}
        return analysis.Cells(("a", "b", "c"), (0,), results)

    rows = analysis.deterministic_comparisons(pvs, cells(10.9, 4.04, 3.0))
    assert [r["within"] for r in rows] == [True, True, False] and rows[0]["diff"] == pytest.approx(0.9)
    assert analysis.verdict(Det(), rows) == "shown"  # the non-headline miss does not count
    rows = analysis.deterministic_comparisons(pvs, cells(11.1, 4.04, 1.0))
    assert analysis.verdict(Det(), rows) == "not shown"
    assert analysis.verdict_by_metric(Det(), rows) == {"m": "not shown"}
