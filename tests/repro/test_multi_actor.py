"""``mwb repro multi-actor --scale smoke --seeds 2``: every file written; each per-seed reply perplexity is
exp(Σ NLL / Σ tokens) of the records and agrees with the fine-tuning run's own dev perplexity (the trainer's
masked loss over the same replies); F1 and consistency are the means of the records' scores, F1 recomputed by
hand; both conditions score the same gold tokens of the same replies and differ only in the prompt's reference
utterances (the responding actor's, from its other conversations); each comparison is the paired test of those
records with diff = mean_b − mean_a; the headline is the responder's references against another actor's (same
place, same count); the paper and gpu scales dry-run."""
from __future__ import annotations

import json
import math
import shlex
import statistics

import pytest

from mwb.evaluation import stats
from mwb.evaluation.predictions import read_predictions
from mwb.repro.experiments.multi_actor import NONE, OTHER, REFS
from mwb.repro.registry import get_experiment
from tests.helpers.cli import run_cli
from tests.helpers.needs import needs
from tests.helpers.repro_smoke import SMOKE_CPU_SECONDS, run_smoke
from tests.tasks.dialogue.hand_f1 import hand_f1

SEEDS = (0, 1)
CONDITIONS = (NONE, OTHER, REFS)
needs_data = needs(models=["minilm-l6"], data=["chitchat"])


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The smoke run in this process on one thread, and its CPU seconds (2 cores × 2 minutes at most)."""
    out = tmp_path_factory.mktemp("multi_actor") / "smoke"
    res, cpu = run_smoke("multi-actor", out, "--seeds", str(len(SEEDS)))
    return out, res, cpu


def _preds(out, condition, seed):
    return read_predictions(str(out / "predictions" / condition / f"seed{seed}.jsonl"))


def _prompts(out, condition, seed):
    lines = (out / "cells" / condition / f"seed{seed}" / "replies.jsonl").read_text().splitlines()
    return [json.loads(x)["prompt"] for x in lines]


def _cell_metrics(out, condition, seed):
    return json.loads((out / "cells" / condition / f"seed{seed}" / "results.json").read_text())["metrics"]


@needs_data
def test_smoke_writes_every_file_within_budget(smoke):
    out, res, cpu = smoke
    assert cpu < SMOKE_CPU_SECONDS, cpu
    for name in ("report.md", "results.json", "commands.sh", "env.json", "multi-actor.png"):
        assert (out / name).stat().st_size > 100, name
    for c in CONDITIONS:
        for s in SEEDS:
            assert len(_preds(out, c, s)) == 8
            assert not (out / "cells" / c / f"seed{s}" / "checkpoints").exists()
    assert res["seeds"] == list(SEEDS) and res["scale"] == "smoke" and res["paper"][0]["arxiv"] == "2005.06114"
    assert res["paper_values"] == []  # none comparable could be verified: none is declared
    md = (out / "report.md").read_text()
    assert f"**Verdict: {res['verdict']}**" in md and "consistency_gold" in md


@needs_data
def test_per_seed_values_are_those_recomputed_from_the_predictions(smoke):
    out, res = smoke[0], smoke[1]
    for c in CONDITIONS:
        for s in SEEDS:
            recs = _preds(out, c, s)
            nll, tokens = sum(r["reply_ppl"]["nll"] for r in recs), sum(r["reply_ppl"]["tokens"] for r in recs)
            assert res["conditions"][c]["reply_ppl"][s] == pytest.approx(math.exp(nll / tokens), rel=1e-12)
            cell = _cell_metrics(out, c, s)
            # one dev batch of 8 holds every reply: the trainer's dev loss is the same NLL, computed apart
            assert res["conditions"][c]["reply_ppl"][s] == pytest.approx(cell["dev_ppl"], rel=1e-4)
            assert res["conditions"][c]["dev_ppl"][s] == cell["dev_ppl"] and cell["count"] == 8
            f1 = [hand_f1(r["prediction"], r["gold"]) for r in recs]
            assert [r["f1"] for r in recs] == pytest.approx(f1)
            assert res["conditions"][c]["f1"][s] == pytest.approx(statistics.fmean(f1))
            ranked = [r for r in recs if "consistency" in r]
            assert len(ranked) == cell["consistency_count"] > 0
            assert all(r["consistency"] in (0, 1) and r["consistency_gold"] in (0, 1) for r in ranked)
            for m in ("consistency", "consistency_gold"):
                assert res["conditions"][c][m][s] == pytest.approx(statistics.fmean(r[m] for r in ranked))


@needs_data
def test_conditions_differ_only_in_the_prompts_references(smoke):
    out = smoke[0]
    ids = {}
    for s in SEEDS:
        base = _preds(out, REFS, s)
        ids[s] = [r["id"] for r in base]
        for other in (NONE, OTHER):
            plain = _preds(out, other, s)
            # the same replies, actors and scored gold tokens in every condition
            assert [(r["id"], r["gold"], r["actor"], r["reply_ppl"]["tokens"]) for r in base] == \
                [(r["id"], r["gold"], r["actor"], r["reply_ppl"]["tokens"]) for r in plain]
            assert [r["consistency_gold"] for r in base if "consistency_gold" in r] == \
                [r["consistency_gold"] for r in plain if "consistency_gold" in r]  # the ranker's ceiling: shared
        differ = 0
        for p_ref, p_other, p_none in zip(_prompts(out, REFS, s), _prompts(out, OTHER, s), _prompts(out, NONE, s)):
            head, _, rest = p_ref.partition("\nConversation:\n")
            head_o, _, rest_o = p_other.partition("\nConversation:\n")
            for h in (head, head_o):
                lines = h.splitlines()
                assert lines[0] == "Reference utterances of B:" and len(lines) == 4
                assert all(x.startswith("- ") and len(x) > 2 for x in lines[1:])
            assert p_none == "Conversation:\n" + rest and rest_o == rest
            differ += head != head_o
        assert differ == len(ids[s])  # another actor's utterances, never the responder's own set
    assert not set(ids[0]) & set(ids[1])  # each seed another sample of conversations


@needs_data
def test_the_comparisons_are_the_paired_tests_of_the_predictions(smoke):
    out, res = smoke[0], smoke[1]
    declared = [(c.a, c.b, c.metric, c.direction, c.headline) for c in get_experiment("multi-actor").comparisons]
    assert declared == [(OTHER, REFS, "reply_ppl", "less", True), (NONE, REFS, "reply_ppl", "less", False),
                        (OTHER, REFS, "consistency", "greater", False)]
    assert [(r["a"], r["b"], r["metric"], r["direction"], r["headline"]) for r in res["comparisons"]] == declared
    for row in res["comparisons"]:
        a, b = res["conditions"][row["a"]][row["metric"]], res["conditions"][row["b"]][row["metric"]]
        assert row["mean_a"] == pytest.approx(statistics.fmean(a))
        assert row["mean_b"] == pytest.approx(statistics.fmean(b))
        assert row["diff"] == pytest.approx(row["mean_b"] - row["mean_a"])
        runs = [[[r for r in _preds(out, c, s) if row["metric"] in r] for s in SEEDS] for c in (row["a"], row["b"])]
        again = stats.compare_runs(runs[0], runs[1], row["metric"])
        assert row["paired_over"] == "items" and (row["test"], row["n_items"]) == (again.test, again.n_items)
        assert row["p"] == pytest.approx(again.p) and row["diff"] == pytest.approx(again.diff)
        assert row["verdict"] == (stats.verdict(row["p"], row["diff"], row["direction"]) if row["headline"] else "exploratory")
    assert res["comparisons"][0]["n_items"] == 16 and res["comparisons"][0]["test"] == "two-level"
    assert res["verdict"] == res["comparisons"][0]["verdict"]


@needs_data
def test_commands_sh_holds_each_cells_commands(smoke):
    out = smoke[0]
    lines = [shlex.split(x) for x in (out / "commands.sh").read_text().splitlines() if x.startswith("mwb ")]
    assert len(lines) == len(SEEDS) * len(CONDITIONS) * 2  # a tiny GPT's pretraining, then the fine-tuning
    fts = [a for a in lines if a[1:3] == ["finetune", "dialogue"]]
    refs = {a[a.index("--out") + 1].split("/")[-2]: (a[a.index("--references") + 1], "--reference-actor" in a)
            for a in fts}
    assert refs == {NONE: ("0", False), OTHER: ("3", True), REFS: ("3", False)}
    assert all(a[a.index("--reference-actor") + 1] == "other" for a in fts if "--reference-actor" in a)
    for a in fts:
        seed = a[a.index("--seed") + 1]
        assert a[a.index("--sample-seed") + 1] == seed and "--actors" in a and "--reply-ppl" in a
        assert a[a.index("--ranker-candidates") + 1] == "5"


def test_paper_scale_dry_run_takes_the_users_data(capsys):
    sets = ["--set", "data=/d/reddit.json", "--set", "checkpoint=/d/gpt-8.3b"]
    code, stdout, err = run_cli(["repro", "multi-actor", "--scale", "paper", "--dry-run", *sets], capsys)
    assert code == 0, err
    fts = [shlex.split(x) for x in stdout.splitlines() if x.startswith("mwb finetune dialogue")]
    assert len(fts) == 3 * 3
    for a in fts:
        flag = {k: a[a.index(k) + 1] for k in ("--data", "--checkpoint", "--train-examples", "--seq-length")}
        assert flag == {"--data": "/d/reddit.json", "--checkpoint": "/d/gpt-8.3b", "--train-examples": "0",
                        "--seq-length": "512"}
    assert "mwb plan --preset gpt-8.3b" in stdout and "s/iteration" in stdout
    code, _, err = run_cli(["repro", "multi-actor", "--scale", "paper", "--dry-run", *sets[2:]], capsys)
    assert code == 2 and "needs --set data" in err


def test_cpu_and_gpu_scales_are_declared_and_dry_run(capsys):
    for scale, precision, train, seeds in (("cpu", "fp32", "8", 5), ("gpu", "bf16", "1600", 3)):
        code, stdout, err = run_cli(["repro", "multi-actor", "--scale", scale, "--dry-run"], capsys)
        assert code == 0, err
        fts = [shlex.split(x) for x in stdout.splitlines() if x.startswith("mwb finetune dialogue")]
        assert len(fts) == 3 * seeds
        for a in fts:
            assert a[a.index("--checkpoint") + 1] == "smollm2-135m" and a[a.index("--precision") + 1] == precision
            assert a[a.index("--train-examples") + 1] == train and a[a.index("--seq-length") + 1] == "320"


def test_cpu_scale_tests_at_least_100_distinct_replies():
    """Seeds sample other conversations (--sample-seed k), so distinct replies = eval × seeds."""
    cpu = get_experiment("multi-actor").scale("cpu")
    assert cpu.seeds == 5 and cpu.params["eval"] * cpu.seeds >= 100
