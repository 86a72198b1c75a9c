"""``mwb repro race --scale smoke --seeds 2``: every file written; each per-seed accuracy is the one its
predictions give, over the test split's questions paired by id; the comparison is the paired McNemar test of
those predictions with diff = mean_b − mean_a; the random init is MiniLM-L6's architecture with other weights;
commands.sh reruns as it stands; the paper and gpu scales dry-run with the paper's recipe."""
from __future__ import annotations

import json
import shlex

import pytest
import torch

from mwb.core.compose import full_state
from mwb.evaluation import stats
from mwb.evaluation.predictions import aggregate, read_predictions
from mwb.repro.experiments.race import PRETRAINED, RANDOM
from mwb.tasks.race.task import read_official
from tests.helpers.cli import run_cli
from tests.helpers.needs import needs
from tests.helpers.repro_smoke import SMOKE_CPU_SECONDS, assert_report_files, run_smoke

SEEDS = (0, 1)
CONDITIONS = (RANDOM, PRETRAINED)
needs_minilm = needs(models=["minilm-l6"])


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The smoke run on one thread, and its CPU seconds (tests/helpers/repro_smoke.py)."""
    out = tmp_path_factory.mktemp("race") / "smoke"
    res, cpu = run_smoke("race", out, "--seeds", str(len(SEEDS)))
    return out, res, cpu


def _preds(out, condition, seed):
    return read_predictions(str(out / "predictions" / condition / f"seed{seed}.jsonl"))


@needs_minilm
def test_smoke_writes_every_file_within_two_minutes_of_two_cores(smoke):
    out, res, cpu = smoke
    assert cpu < SMOKE_CPU_SECONDS, cpu  # 2 minutes of 2 cores
    assert_report_files(out, "race")  # each file's content checked against results.json and the definition
    assert res["seeds"] == list(SEEDS) and res["scale"] == "smoke" and res["paper"][0]["arxiv"] == "1909.08053"
    assert {(p["condition"], p["metric"]): p["value"] for p in res["paper_values"]}[(PRETRAINED, "accuracy")] == 0.895
    md = (out / "report.md").read_text()
    assert f"**Verdict: {res['verdict']}**" in md and "template-made" in md and "16 questions" in md


@needs_minilm
def test_per_seed_values_are_those_of_the_predictions(smoke):
    out, res = smoke[0], smoke[1]
    for c in CONDITIONS:
        for s in SEEDS:
            recs = _preds(out, c, s)
            test = read_official(str(out / "cells" / c / f"seed{s}" / "data" / "test"))
            assert [r["id"] for r in recs] == [e["id"] for e in test] and len(recs) == 8  # 4 articles × 2
            assert [r["gold"] for r in recs] == [e["label"] for e in test]
            assert all(r["accuracy"] == int(r["prediction"] == r["gold"]) for r in recs)
            assert res["conditions"][c]["accuracy"][s] == pytest.approx(aggregate(recs, "accuracy"))
            for level in ("middle", "high"):
                mine = [r["accuracy"] for r in recs if r["level"] == level]
                assert res["conditions"][c][f"accuracy_{level}"][s] == pytest.approx(sum(mine) / len(mine))
            dev = json.loads((out / "cells" / c / f"seed{s}" / "finetune" / "results.json").read_text())
            assert res["details"][c][s]["dev_accuracy_best_epoch"] == dev["metrics"]["accuracy"]


@needs_minilm
def test_the_comparison_is_the_paired_test_of_the_predictions(smoke):
    out, res = smoke[0], smoke[1]
    (row,) = res["comparisons"]
    a, b = res["conditions"][RANDOM]["accuracy"], res["conditions"][PRETRAINED]["accuracy"]
    assert (row["a"], row["b"], row["headline"]) == (RANDOM, PRETRAINED, True)
    assert row["mean_a"] == pytest.approx(sum(a) / 2) and row["mean_b"] == pytest.approx(sum(b) / 2)
    assert row["diff"] == pytest.approx(row["mean_b"] - row["mean_a"])
    again = stats.compare_runs([_preds(out, RANDOM, s) for s in SEEDS], [_preds(out, PRETRAINED, s) for s in SEEDS],
                               "accuracy")
    assert (row["p"], row["test"], row["n_items"]) == (pytest.approx(again.p), "two-level", again.n_items)
    assert row["p"] == pytest.approx(max(row["p_items"], row["p_seeds"]))
    assert res["verdict"] == row["verdict"] == stats.verdict(row["p"], row["diff"], "greater")


@needs_minilm
def test_random_init_is_minilms_architecture_with_other_weights(smoke):
    out = smoke[0]
    _, _, mine, _ = full_state(str(out / "cells" / RANDOM / "seed0" / "init"))
    _, _, other, _ = full_state(str(out / "cells" / RANDOM / "seed1" / "init"))
    _, _, minilm, _ = full_state("minilm-l6")
    assert set(minilm) <= set(mine)  # plus the masked-LM head the init run carries and fine-tuning drops
    for name, t in minilm.items():
        assert mine[name].shape == t.shape, name
    q = "layers.0.attn.q_proj.weight"
    assert not torch.equal(mine[q], minilm[q]) and not torch.equal(mine[q], other[q])  # seeded, not MiniLM's
    assert abs(float(mine[q].std()) - 0.02) < 0.002  # init_std 0.02, untouched by the lr-0 step


@needs_minilm
def test_commands_sh_reruns_as_it_stands(smoke, capsys, tmp_path):
    out, res = smoke[0], smoke[1]
    lines = [shlex.split(x) for x in (out / "commands.sh").read_text().splitlines() if x.startswith("mwb ")]
    assert len(lines) == len(SEEDS) * (4 + 2)  # random init: preprocess, init, fine-tune, eval; pretrained: 2
    fts = [a for a in lines if a[1:3] == ["finetune", "race"]]
    assert {a[a.index("--checkpoint") + 1] for a in fts} >= {"minilm-l6"}
    assert len({a[a.index("--tokenizer") + 1] for a in fts}) == 1  # both conditions read with one tokenizer
    cell = str(out / "cells" / PRETRAINED / "seed1")
    argv = next(a for a in lines if a[1:3] == ["eval", "race"] and a[a.index("--out") + 1] == cell)
    argv[argv.index("--out") + 1] = str(tmp_path / "again")
    code, _, err = run_cli(argv[1:], capsys)
    assert code == 0, err
    again = json.loads((tmp_path / "again" / "results.json").read_text())["metrics"]["accuracy"]
    assert again == pytest.approx(res["conditions"][PRETRAINED]["accuracy"][1])


def test_paper_scale_dry_run_runs_the_papers_recipe_on_the_users_data(capsys):
    sets = ["--set", "race_data=/d/RACE", "--set", "checkpoint=/d/megatron-bert-3.9b", "--set", "tokenizer=/d/vocab"]
    code, stdout, err = run_cli(["repro", "race", "--scale", "paper", "--dry-run", *sets], capsys)
    assert code == 0, err
    lines = [shlex.split(x) for x in stdout.splitlines() if x.startswith("mwb ")]
    fts = [a for a in lines if a[1:3] == ["finetune", "race"]]
    assert len(fts) == 2 * 3
    for a in fts:
        flag = {k: a[a.index(k) + 1] for k in ("--data", "--lr", "--epochs", "--global-batch-size", "--seq-length")}
        assert flag == {"--data": "/d/RACE", "--lr": "2e-05", "--epochs": "3", "--global-batch-size": "32",
                        "--seq-length": "512"}
        assert "optim.warmup_steps=494" in a and "optim.weight_decay=0.1" in a and "model.dropout=0.1" in a
    inits = [a for a in lines if a[1:3] == ["pretrain", "bert"]]
    assert len(inits) == 3 and all("model.num_layers=48" in a and "model.hidden_size=2560" in a for a in inits)
    assert {a[a.index("--checkpoint") + 1] for a in fts if "init" not in a[a.index("--checkpoint") + 1]} == \
        {"/d/megatron-bert-3.9b"}
    assert "mwb plan --preset bert-large" in stdout and "s/iteration" in stdout
    code, _, err = run_cli(["repro", "race", "--scale", "paper", "--dry-run", *sets[2:]], capsys)
    assert code == 2 and "needs --set race_data" in err
    code, _, err = run_cli(["repro", "race", "--scale", "paper", "--dry-run", *sets, "--set", "shape=7b"], capsys)
    assert code == 2 and "shape=7b" in err


@needs_minilm  # the gpu scale's random-init shape is read from MiniLM's config
def test_gpu_scale_is_declared_and_dry_runs(capsys):
    code, stdout, err = run_cli(["repro", "race", "--scale", "gpu", "--dry-run"], capsys)
    assert code == 0, err
    fts = [shlex.split(x) for x in stdout.splitlines() if x.startswith("mwb finetune race")]
    assert len(fts) == 2 * 5 and all(a[a.index("--epochs") + 1] == "3" for a in fts)


def test_cpu_scale_tests_120_distinct_questions_the_bundled_48_first(tmp_path):
    """The cpu scale's set, as run_cell writes it: the bundled set's train and dev questions, and 120 test
    questions (at least 100 distinct items for the paired test) of which the first 48 are the bundled test set."""
    from pathlib import Path

    from mwb.repro.experiments.race import SCALES
    from mwb.tasks.race.sample import write_race_sample
    cpu = SCALES["cpu"]
    assert cpu.seeds == 5 and cpu.params["data"] == "cell"
    write_race_sample(str(tmp_path), cpu.params["counts"], seed=2024)
    bundled = Path(__file__).resolve().parents[2] / "mwb" / "tasks" / "race" / "bundled" / "race_sample"
    for split in ("train", "dev"):
        assert read_official(str(tmp_path / split)) == read_official(str(bundled / split)), split
    test, bundled_test = read_official(str(tmp_path / "test")), read_official(str(bundled / "test"))
    assert len(test) == 120 and len({(e["id"], e["question"]) for e in test}) == 120
    key = lambda e: (e["article"], e["question"], tuple(e["options"]), e["label"])  # noqa: E731
    assert {key(e) for e in bundled_test} <= {key(e) for e in test} and len(bundled_test) == 48
