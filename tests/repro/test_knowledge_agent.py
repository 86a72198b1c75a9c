"""``mwb repro knowledge-agent --scale smoke --seeds 2``: every file written; each per-seed KF1 and F1 is the mean
of the replies' scores recomputed from the predictions files (by hand, from the reply, the gold reply and the
KF1 passage each record carries); the three conditions see the same replies and the same KF1 passage and differ
only in the prompt's knowledge (none, the retrieved passage, a random one); each comparison is the paired test
of those records with diff = mean_b − mean_a; the paper and gpu scales dry-run."""
from __future__ import annotations

import json
import os
import shlex
import statistics

import pytest

from mwb.evaluation import stats
from mwb.evaluation.predictions import read_predictions
from mwb.repro.experiments.knowledge_agent import NONE, RANDOM, RETRIEVED
from mwb.repro.registry import get_experiment
from mwb.retrieval.inputs import BUNDLED_EVIDENCE, read_evidence
from mwb.tasks.dialogue.examples import clip
from tests.helpers.cli import run_cli
from tests.helpers.needs import needs
from tests.helpers.repro_smoke import SMOKE_CPU_SECONDS, run_smoke
from tests.tasks.dialogue.hand_f1 import hand_f1

SEEDS = (0, 1)
CONDITIONS = (NONE, RETRIEVED, RANDOM)
needs_chitchat = needs(data=["chitchat"])


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The smoke run in this process on one thread, and its CPU seconds (2 cores × 2 minutes at most)."""
    out = tmp_path_factory.mktemp("knowledge_agent") / "smoke"
    res, cpu = run_smoke("knowledge-agent", out, "--seeds", str(len(SEEDS)))
    return out, res, cpu


def _preds(out, condition, seed):
    return read_predictions(str(out / "predictions" / condition / f"seed{seed}.jsonl"))


def _prompts(out, condition, seed):
    lines = (out / "cells" / condition / f"seed{seed}" / "replies.jsonl").read_text().splitlines()
    return [json.loads(x)["prompt"] for x in lines]


@needs_chitchat
def test_smoke_writes_every_file_within_budget(smoke):
    out, res, cpu = smoke
    assert cpu < SMOKE_CPU_SECONDS, cpu
    for name in ("report.md", "results.json", "commands.sh", "env.json", "knowledge-agent.png"):
        assert (out / name).stat().st_size > 100, name
    for c in CONDITIONS:
        for s in SEEDS:
            assert len(_preds(out, c, s)) == 6
            assert not (out / "cells" / c / f"seed{s}" / "checkpoints").exists()  # 2 GB a cell at cpu scale
    assert res["seeds"] == list(SEEDS) and res["scale"] == "smoke" and res["paper"][0]["arxiv"] == "2010.10150"
    assert res["paper_values"] == []  # none could be verified: none is declared
    md = (out / "report.md").read_text()
    assert f"**Verdict: {res['verdict']}**" in md and "random-passage control" in md


@needs_chitchat
def test_per_seed_values_are_those_recomputed_from_the_predictions(smoke):
    out, res = smoke[0], smoke[1]
    for c in CONDITIONS:
        for s in SEEDS:
            recs = _preds(out, c, s)
            f1 = [hand_f1(r["prediction"], r["gold"]) for r in recs]
            kf1 = [hand_f1(r["prediction"], r["knowledge"]) for r in recs]
            assert [r["f1"] for r in recs] == pytest.approx(f1) and [r["kf1"] for r in recs] == pytest.approx(kf1)
            assert res["conditions"][c]["f1"][s] == pytest.approx(statistics.fmean(f1))
            assert res["conditions"][c]["kf1"][s] == pytest.approx(statistics.fmean(kf1))
            cell = json.loads((out / "cells" / c / f"seed{s}" / "results.json").read_text())["metrics"]
            assert res["conditions"][c]["dev_ppl"][s] == cell["dev_ppl"] and cell["count"] == 6


@needs_chitchat
def test_conditions_differ_only_in_the_prompts_knowledge(smoke):
    out = smoke[0]
    pool = {clip(t) for t in read_evidence(BUNDLED_EVIDENCE).texts}
    ids = {}
    for s in SEEDS:
        base = _preds(out, RETRIEVED, s)
        ids[s] = [r["id"] for r in base]
        for c in CONDITIONS:  # the same replies, gold and KF1 passage (the retrieved one) in every condition
            recs = _preds(out, c, s)
            assert [(r["id"], r["gold"], r["knowledge"]) for r in recs] == \
                [(r["id"], r["gold"], r["knowledge"]) for r in base]
        retrieved, drawn, none = (_prompts(out, c, s) for c in (RETRIEVED, RANDOM, NONE))
        for rec, p_ret, p_rnd, p_none in zip(base, retrieved, drawn, none):
            assert p_ret.startswith(f"Knowledge:\n{rec['knowledge']}\nConversation:\n")
            shown = p_rnd.split("\n")[1]
            assert p_rnd.startswith("Knowledge:\n") and shown != rec["knowledge"] and shown in pool
            assert "Knowledge:" not in p_none and p_none == "Conversation:" + p_ret.split("\nConversation:")[1]
    assert not set(ids[0]) & set(ids[1])  # each seed another sample of conversations


@needs_chitchat
def test_the_comparisons_are_the_paired_tests_of_the_predictions(smoke):
    out, res = smoke[0], smoke[1]
    declared = [(c.a, c.b, c.metric, c.headline) for c in get_experiment("knowledge-agent").comparisons]
    assert declared == [(RANDOM, RETRIEVED, "kf1", True), (NONE, RETRIEVED, "kf1", False),
                        (NONE, RETRIEVED, "f1", False)]
    assert [(r["a"], r["b"], r["metric"], r["headline"]) for r in res["comparisons"]] == declared
    for row in res["comparisons"]:
        a, b = res["conditions"][row["a"]][row["metric"]], res["conditions"][row["b"]][row["metric"]]
        assert row["mean_a"] == pytest.approx(statistics.fmean(a))
        assert row["mean_b"] == pytest.approx(statistics.fmean(b))
        assert row["diff"] == pytest.approx(row["mean_b"] - row["mean_a"])
        again = stats.compare_runs([_preds(out, row["a"], s) for s in SEEDS],
                                   [_preds(out, row["b"], s) for s in SEEDS], row["metric"])
        assert (row["test"], row["n_items"]) == (again.test, again.n_items) and again.test == "two-level"
        assert row["p"] == pytest.approx(again.p) and row["diff"] == pytest.approx(again.diff)
        assert row["verdict"] == (stats.verdict(row["p"], row["diff"], "greater") if row["headline"] else "exploratory")
    assert res["verdict"] == res["comparisons"][0]["verdict"]


@needs_chitchat
def test_commands_sh_holds_each_cells_commands(smoke):
    out = smoke[0]
    lines = [shlex.split(x) for x in (out / "commands.sh").read_text().splitlines() if x.startswith("mwb ")]
    assert len(lines) == len(SEEDS) * len(CONDITIONS) * 2  # a tiny GPT's pretraining, then the fine-tuning
    fts = [a for a in lines if a[1:3] == ["finetune", "dialogue"]]
    knowledge = {a[a.index("--out") + 1].split(os.sep)[-2]: (a[a.index("--top-k") + 1], "--random-knowledge" in a)
                 for a in fts}
    assert knowledge == {NONE: ("0", False), RETRIEVED: ("1", False), RANDOM: ("1", True)}
    for a in fts:
        seed = a[a.index("--seed") + 1]
        assert a[a.index("--sample-seed") + 1] == seed and a[a.index("--evidence") + 1] == "bundled"
        assert "--random-knowledge" not in a or a[a.index("--knowledge-seed") + 1] == seed


def test_paper_scale_dry_run_takes_the_users_data(capsys):
    sets = ["--set", "data=/d/reddit.json", "--set", "evidence=/d/linked.tsv", "--set", "checkpoint=/d/gpt-8.3b"]
    code, stdout, err = run_cli(["repro", "knowledge-agent", "--scale", "paper", "--dry-run", *sets], capsys)
    assert code == 0, err
    fts = [shlex.split(x) for x in stdout.splitlines() if x.startswith("mwb finetune dialogue")]
    assert len(fts) == 3 * 3
    for a in fts:
        flag = {k: a[a.index(k) + 1] for k in ("--data", "--evidence", "--checkpoint", "--train-examples")}
        assert flag == {"--data": "/d/reddit.json", "--evidence": "/d/linked.tsv", "--checkpoint": "/d/gpt-8.3b",
                        "--train-examples": "0"}
    assert "mwb plan --preset gpt-8.3b" in stdout and "s/iteration" in stdout
    code, _, err = run_cli(["repro", "knowledge-agent", "--scale", "paper", "--dry-run", *sets[2:]], capsys)
    assert code == 2 and "needs --set data" in err


def test_cpu_and_gpu_scales_are_declared_and_dry_run(capsys):
    for scale, precision, train, seeds in (("cpu", "fp32", "8", 5), ("gpu", "bf16", "1600", 3)):
        code, stdout, err = run_cli(["repro", "knowledge-agent", "--scale", scale, "--dry-run"], capsys)
        assert code == 0, err
        fts = [shlex.split(x) for x in stdout.splitlines() if x.startswith("mwb finetune dialogue")]
        assert len(fts) == 3 * seeds
        for a in fts:
            assert a[a.index("--checkpoint") + 1] == "smollm2-135m" and a[a.index("--precision") + 1] == precision
            assert a[a.index("--train-examples") + 1] == train and a[a.index("--evidence") + 1] == "wordnet+bundled"


def test_the_headline_control_is_random_passages_over_at_least_100_replies():
    exp = get_experiment("knowledge-agent")
    head = [c for c in exp.comparisons if c.headline]
    assert [(c.a, c.b, c.metric, c.direction) for c in head] == [(RANDOM, RETRIEVED, "kf1", "greater")]
    cpu = exp.scale("cpu")
    assert cpu.seeds == 5 and cpu.params["eval"] * cpu.seeds >= 100  # seeds sample other conversations
