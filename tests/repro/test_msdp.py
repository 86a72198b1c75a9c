"""``mwb repro msdp --scale smoke --seeds 2``: every file written; each per-seed KF1 and F1 is the mean of the
replies' scores recomputed by hand from the predictions files (the reply, the gold reply and the gold knowledge
each record carries), over both splits; the two conditions score the same turns against the same gold, and
differ in whether knowledge was generated; each comparison is the paired test of those records with
diff = mean_b − mean_a; the cpu, gpu and paper scales dry-run."""
from __future__ import annotations

import json
import shlex
import statistics

import pytest

from mwb.repro.experiments.msdp import KNOWLEDGE_FREE, TWO_STAGE
from mwb.repro.registry import get_experiment
from mwb.tasks.dialogue.msdp_prompts import tokenized
from tests.helpers.cli import run_cli
from tests.helpers.needs import needs
from tests.helpers.repro_smoke import (SMOKE_CPU_SECONDS, assert_comparisons_recomputed, assert_report_files,
                                      run_smoke, seed_predictions)
from tests.tasks.dialogue.hand_f1 import hand_f1

SEEDS = (0, 1)
CONDITIONS = (KNOWLEDGE_FREE, TWO_STAGE)
needs_minilm = needs(models=["minilm-l6"])  # stage 1 ranks its examples with MiniLM


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The smoke run in this process on one thread, and its CPU seconds (2 cores × 2 minutes at most)."""
    out = tmp_path_factory.mktemp("msdp") / "smoke"
    res, cpu = run_smoke("msdp", out, "--seeds", str(len(SEEDS)))
    return out, res, cpu


@needs_minilm
def test_smoke_writes_every_file_within_budget(smoke):
    out, res, cpu = smoke
    assert cpu < SMOKE_CPU_SECONDS, cpu
    assert_report_files(out, "msdp")
    for c in CONDITIONS:
        for s in SEEDS:
            recs = seed_predictions(out, c, s)
            assert [r["id"].split("/")[0] for r in recs] == ["seen"] * 4 + ["unseen"] * 4  # both splits
            assert not (out / "cells" / c / f"seed{s}" / "base").exists()  # the tiny GPT is deleted
    assert res["seeds"] == list(SEEDS) and res["scale"] == "smoke" and res["paper"][0]["arxiv"] == "2203.08745"
    assert res["paper_values"] == []  # none could be verified: none is declared
    md = (out / "report.md").read_text()
    assert f"**Verdict: {res['verdict']}**" in md and "knowledge-free" in md


@needs_minilm
def test_per_seed_values_are_those_recomputed_from_the_predictions(smoke):
    out, res = smoke[0], smoke[1]
    for c in CONDITIONS:
        for s in SEEDS:
            recs = seed_predictions(out, c, s)
            f1 = [hand_f1(r["prediction"]["response"], tokenized(r["gold"]["response"])) for r in recs]
            kf1 = [hand_f1(r["prediction"]["response"], r["gold"]["knowledge"]) if r["gold"]["knowledge"] else 0.0
                   for r in recs]
            assert [r["f1"] for r in recs] == pytest.approx(f1) and [r["kf1"] for r in recs] == pytest.approx(kf1)
            assert res["conditions"][c]["f1"][s] == pytest.approx(statistics.fmean(f1))
            assert res["conditions"][c]["kf1"][s] == pytest.approx(statistics.fmean(kf1))
            cell = json.loads((out / "cells" / c / f"seed{s}" / "cell.json").read_text())["details"]
            for split in ("seen", "unseen"):  # each split's results.json is the mean of its own records
                part = [r for r in recs if r["id"].startswith(split + "/")]
                assert cell[split]["count"] == 4
                assert cell[split]["kf1"] == pytest.approx(statistics.fmean(r["kf1"] for r in part))


@needs_minilm
def test_conditions_score_the_same_turns_and_differ_in_generated_knowledge(smoke):
    out = smoke[0]
    for s in SEEDS:
        free, staged = seed_predictions(out, KNOWLEDGE_FREE, s), seed_predictions(out, TWO_STAGE, s)
        assert [(r["id"], r["gold"]) for r in free] == [(r["id"], r["gold"]) for r in staged]
        assert all(set(r["prediction"]) == {"response"} and "knowledge_f1" not in r for r in free)
        for r in staged:  # stage 1 wrote knowledge, scored against the gold knowledge
            assert set(r["prediction"]) == {"knowledge", "response"}
            want = hand_f1(r["prediction"]["knowledge"], r["gold"]["knowledge"]) if r["gold"]["knowledge"] else 0.0
            assert r["knowledge_f1"] == pytest.approx(want)


@needs_minilm
def test_the_comparisons_are_the_paired_tests_of_the_predictions(smoke):
    out, res = smoke[0], smoke[1]
    declared = [(c.a, c.b, c.metric, c.headline) for c in get_experiment("msdp").comparisons]
    assert declared == [(KNOWLEDGE_FREE, TWO_STAGE, "kf1", True), (KNOWLEDGE_FREE, TWO_STAGE, "f1", False)]
    assert [(r["a"], r["b"], r["metric"], r["headline"]) for r in res["comparisons"]] == declared
    assert_comparisons_recomputed(out, res, SEEDS, 16)


@needs_minilm
def test_commands_sh_holds_each_cells_commands(smoke):
    out = smoke[0]
    lines = [shlex.split(x) for x in (out / "commands.sh").read_text().splitlines() if x.startswith("mwb ")]
    assert len(lines) == len(SEEDS) * len(CONDITIONS) * 3  # a tiny GPT's pretraining, then one eval per split
    evals = [a for a in lines if a[1:3] == ["eval", "msdp"]]
    seen = set()
    for a in evals:
        *_, condition, seed_dir, split = a[a.index("--out") + 1].split("/")
        seed = int(seed_dir.removeprefix("seed"))
        assert a[a.index("--split") + 1] == split and a[a.index("--seed") + 1] == str(1234 + seed)
        assert ("--knowledge-free" in a) == (condition == KNOWLEDGE_FREE)
        assert a[a.index("--checkpoint") + 1].endswith(f"{condition}/seed{seed}/base")
        seen.add((condition, seed, split))
    assert len(seen) == len(evals) == 8


def _evals(stdout):
    return [shlex.split(x) for x in stdout.splitlines() if x.startswith("mwb eval msdp")]


def test_paper_scale_dry_run_takes_the_users_data(capsys):
    sets = ["--set", "data=/d/wizard_of_wikipedia", "--set", "checkpoint=/d/gpt-530b"]
    code, stdout, err = run_cli(["repro", "msdp", "--scale", "paper", "--dry-run", *sets], capsys)
    assert code == 0, err
    evals = _evals(stdout)
    assert len(evals) == 2 * 3 * 2 and not any(x.startswith("mwb pretrain") for x in stdout.splitlines())
    for a in evals:
        flag = {k: a[a.index(k) + 1] for k in ("--data", "--checkpoint", "--knowledge-examples",
                                               "--response-examples")}
        assert flag == {"--data": "/d/wizard_of_wikipedia", "--checkpoint": "/d/gpt-530b",
                        "--knowledge-examples": "10", "--response-examples": "20"}
    assert "mwb plan" not in stdout  # prompting only: nothing for the training planner
    code, _, err = run_cli(["repro", "msdp", "--scale", "paper", "--dry-run", *sets[2:]], capsys)
    assert code == 2 and "needs --set data" in err


def test_cpu_and_gpu_scales_are_declared_and_dry_run(capsys):
    for scale, seeds, examples in (("cpu", 3, "8"), ("gpu", 10, "20")):
        code, stdout, err = run_cli(["repro", "msdp", "--scale", scale, "--dry-run"], capsys)
        assert code == 0, err
        evals = _evals(stdout)
        assert len(evals) == 2 * seeds * 2
        for a in evals:
            assert a[a.index("--checkpoint") + 1] == "smollm2-135m" and "--data" not in a
            assert a[a.index("--response-examples") + 1] == examples and a[a.index("--max-tokens") + 1] == "64"
        assert {a[a.index("--seed") + 1] for a in evals} == {str(1234 + k) for k in range(seeds)}
