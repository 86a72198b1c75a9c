"""``mwb repro synthetic-qa --scale smoke --seeds 2``: every file written; each per-seed EM and F1 is the mean of
the questions' scores recomputed from the predictions with the official SQuAD rule written out here; the three
conditions answer the same real titled questions within a seed and other ones across seeds; one synthesis per
seed, shared by the two trained readers, which train on equally many pairs (the kept ones, and as many drawn from
every generated pair); each comparison is the paired test of those records; a seed whose filter keeps nothing
gives its trained conditions the untrained reader; the gpu and paper scales dry-run."""
from __future__ import annotations

import json
import re
import shlex
import statistics
import string
from collections import Counter

import pytest

from mwb.evaluation.predictions import read_predictions
from mwb.repro.experiments.synthetic_qa import FILTERED, UNFILTERED, UNTRAINED
from mwb.repro.registry import get_experiment
from mwb.retrieval.inputs import BUNDLED_REAL_QUESTIONS, read_questions
from mwb.tasks.squad.data import read_squad
from tests.helpers.cli import run_cli
from tests.helpers.needs import needs
from tests.helpers.repro_smoke import (SMOKE_CPU_SECONDS, assert_comparisons_recomputed, assert_report_files,
                                      run_smoke, seed_predictions)

SEEDS = (0, 1)
CONDITIONS = (UNTRAINED, UNFILTERED, FILTERED)
needs_models = needs(models=["smollm2-135m", "minilm-l6"])


def _norm(text: str) -> list[str]:
    """The official SQuAD v1.1 script's normalisation: lower case, punctuation deleted, a/an/the removed."""
    text = "".join(c for c in text.lower() if c not in set(string.punctuation))
    return re.sub(r"\b(a|an|the)\b", " ", text).split()


def hand_em(pred: str, golds: list[str]) -> float:
    return 100.0 * max(float(_norm(pred) == _norm(g)) for g in golds)


def hand_f1(pred: str, golds: list[str]) -> float:
    def f1(p, g):
        same = sum((Counter(p) & Counter(g)).values())
        return 0.0 if same == 0 else 2 * same / (len(p) + len(g))
    return 100.0 * max(f1(_norm(pred), _norm(g)) for g in golds)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The smoke run in this process on one thread, and its CPU seconds (2 cores × 2 minutes at most)."""
    out = tmp_path_factory.mktemp("synthetic_qa") / "smoke"
    res, cpu = run_smoke("synthetic-qa", out, "--seeds", str(len(SEEDS)))
    return out, res, cpu


@needs_models
def test_smoke_writes_every_file_within_budget(smoke):
    out, res, cpu = smoke
    assert cpu < SMOKE_CPU_SECONDS, cpu
    assert_report_files(out, "synthetic-qa")
    for c in CONDITIONS:
        for s in SEEDS:
            assert len(seed_predictions(out, c, s)) == 16
            assert not (out / "cells" / c / f"seed{s}" / "reader" / "checkpoints").exists()
    for s in SEEDS:  # the filter readers' weights are gone, their results stay
        for fold in (0, 1):
            reader = out / "synthesis" / f"seed{s}" / "filter" / f"reader-fold{fold}"
            assert (reader / "results.json").is_file() and not (reader / "checkpoints").exists()
    assert res["seeds"] == list(SEEDS) and res["scale"] == "smoke" and res["paper"][0]["arxiv"] == "2002.09599"
    assert res["paper_values"] == []  # the paper scores SQuAD dev, not these questions: none is declared
    md = (out / "report.md").read_text()
    assert f"**Verdict: {res['verdict']}**" in md and "size" in md


@needs_models
def test_per_seed_values_are_those_recomputed_from_the_predictions(smoke):
    out, res = smoke[0], smoke[1]
    for c in CONDITIONS:
        for s in SEEDS:
            recs = seed_predictions(out, c, s)
            em = [hand_em(r["prediction"], r["answers"]) for r in recs]
            f1 = [hand_f1(r["prediction"], r["answers"]) for r in recs]
            assert [r["exact_match"] for r in recs] == em and [r["f1"] for r in recs] == pytest.approx(f1)
            assert res["conditions"][c]["exact_match"][s] == pytest.approx(statistics.fmean(em))
            assert res["conditions"][c]["f1"][s] == pytest.approx(statistics.fmean(f1))
            cell = json.loads((out / "cells" / c / f"seed{s}" / "results.json").read_text())["metrics"]
            assert cell["num_questions"] == 16 and cell["f1"] == pytest.approx(statistics.fmean(f1))


@needs_models
def test_conditions_answer_the_same_real_titled_questions(smoke):
    out = smoke[0]
    real = read_questions(BUNDLED_REAL_QUESTIONS)
    ids = {}
    for s in SEEDS:
        base = seed_predictions(out, UNTRAINED, s)
        ids[s] = [r["id"] for r in base]
        for r in base:  # the id is the question's line in the bundled file, and it names an article
            q = real[int(r["id"][1:])]
            assert (q["question"], q["answers"], q["names_title"]) == (r["question"], r["answers"], True)
        for c in CONDITIONS:
            assert [(r["id"], r["answers"]) for r in seed_predictions(out, c, s)] == [(r["id"], r["answers"]) for r in base]
    assert ids[0] != ids[1]  # each seed another sample of questions


@needs_models
def test_one_synthesis_per_seed_and_equally_many_training_pairs(smoke):
    out, res = smoke[0], smoke[1]
    for s in SEEDS:
        syn = out / "synthesis" / f"seed{s}"
        report = json.loads((syn / "stages.json").read_text())  # the marker, through its link
        kept = report["counts"]["roundtrip_kept"]
        filtered, matched = read_squad(str(syn / "synthetic.json")), read_squad(str(syn / "unfiltered_matched.json"))
        every = {e["id"] for e in read_squad(str(syn / "unfiltered.json"))}
        assert len(filtered) == len(matched) == kept and {e["id"] for e in matched} <= every
        # the filtered cell reused the synthesis the unfiltered cell ran: its marker predates both readers
        marker = (syn / "stages" / "filter.json").stat().st_mtime
        steps = set()
        for c, pairs in ((UNFILTERED, matched), (FILTERED, filtered)):
            assert marker < (out / "cells" / c / f"seed{s}" / "cell.json").stat().st_mtime
            assert res["details"][c][s]["train_pairs"] == kept
            if kept:  # the reader's dev pass is over its training file: the pairs it was given
                reader = out / "cells" / c / f"seed{s}" / "reader"
                dev = [r["id"] for r in read_predictions(str(reader / "predictions.jsonl"))]
                assert dev == [e["id"] for e in pairs]
                steps.add(json.loads((reader / "results.json").read_text())["config"]["train"]["steps"])
        assert len(steps) <= 1  # the same number of optimizer steps


@needs_models
def test_the_comparisons_are_the_paired_tests_of_the_predictions(smoke):
    out, res = smoke[0], smoke[1]
    declared = [(c.a, c.b, c.metric, c.headline) for c in get_experiment("synthetic-qa").comparisons]
    assert declared == [(UNFILTERED, FILTERED, "f1", True), (UNTRAINED, UNFILTERED, "f1", False),
                        (UNTRAINED, FILTERED, "exact_match", False)]
    assert [(r["a"], r["b"], r["metric"], r["headline"]) for r in res["comparisons"]] == declared
    assert_comparisons_recomputed(out, res, SEEDS, 32)


@needs_models
def test_commands_sh_lists_each_cells_commands(smoke):
    out = smoke[0]
    lines = [shlex.split(x) for x in (out / "commands.sh").read_text().splitlines() if x.startswith("mwb ")]
    syn = [a for a in lines if a[1:3] == ["qa", "synthesize"]]
    assert len(syn) == 2 * len(SEEDS) and len({tuple(a) for a in syn}) == len(SEEDS)  # listed twice, one per seed
    evals = [a for a in lines if a[1:3] == ["qa", "evaluate-reader"]]
    assert len(evals) == len(SEEDS) * len(CONDITIONS)
    for a in evals:
        seed = a[a.index("--seed") + 1]
        assert "--titled" in a and a[a.index("--sample") + 1] == "16" and a[a.index("--init-seed") + 1] == seed


def test_a_seed_whose_filter_kept_nothing_gives_the_trained_conditions_the_untrained_reader(tmp_path):
    exp = get_experiment("synthetic-qa")
    scale = exp.scale("cpu")
    cell = str(tmp_path / "cells" / FILTERED / "seed2")
    planned = exp.cell_commands(FILTERED, 2, scale, cell, {})
    assert [a[1:3] for a in planned] == [["qa", "synthesize"], ["finetune", "squad"], ["qa", "evaluate-reader"]]
    assert planned[0][planned[0].index("--out") + 1] == str(tmp_path / "synthesis" / "seed2")
    marker = tmp_path / "synthesis" / "seed2" / "stages" / "filter.json"
    marker.parent.mkdir(parents=True)
    marker.write_text(json.dumps({"counts": {"roundtrip_kept": 0}}))
    after = exp.cell_commands(FILTERED, 2, scale, cell, {})
    assert after[0] == planned[0] and len(after) == 2
    assert after[1] == exp.cell_commands(UNTRAINED, 2, scale, cell, {})[0]  # the untrained reader, init seed 2
    marker.write_text(json.dumps({"counts": {"roundtrip_kept": 3}}))
    assert exp.cell_commands(FILTERED, 2, scale, cell, {}) == planned


def test_paper_scale_dry_run_takes_the_users_data(capsys):
    sets = ["--set", "corpus=/d/wiki.tsv", "--set", "squad=/d/train-v1.1.json", "--set", "generator=/d/gpt-8.3b"]
    code, stdout, err = run_cli(["repro", "synthetic-qa", "--scale", "paper", "--dry-run", *sets], capsys)
    assert code == 0, err
    lines = [shlex.split(x) for x in stdout.splitlines() if x.startswith("mwb ")]
    gens = [a for a in lines if a[1:3] == ["finetune", "question-generation"]]
    assert len(gens) == 2 * 3 and {a[a.index("--checkpoint") + 1] for a in gens} == {"/d/gpt-8.3b"}
    assert len({a[a.index("--out") + 1] for a in gens}) == 1  # one generator, shared by every cell
    for a in (a for a in lines if a[1:3] == ["qa", "synthesize"]):
        flag = {k: a[a.index(k) + 1] for k in ("--corpus", "--passages", "--qg-shots", "--context",
                                               "--filter-metric", "--filter-threshold")}
        assert flag == {"--corpus": "/d/wiki.tsv", "--passages": "0", "--qg-shots": "0", "--context": "passage",
                        "--filter-metric": "em", "--filter-threshold": "1"}
        assert a[a.index("--generator") + 1] == gens[0][gens[0].index("--out") + 1] and "--filter-model" in a
    code, _, err = run_cli(["repro", "synthetic-qa", "--scale", "paper", "--dry-run", *sets[2:]], capsys)
    assert code == 2 and "needs --set corpus" in err


def test_cpu_and_gpu_scales_are_declared_and_dry_run(capsys):
    """Both answer every titled real question in every seed (no --sample: the same 216 items in each seed);
    the cpu scale synthesises from 120 passages with 5 seeds, the gpu scale from 600 with 3."""
    for scale, passages, seeds in (("cpu", "120", 5), ("gpu", "600", 3)):
        code, stdout, err = run_cli(["repro", "synthetic-qa", "--scale", scale, "--dry-run"], capsys)
        assert code == 0, err
        lines = [shlex.split(x) for x in stdout.splitlines() if x.startswith("mwb ")]
        assert all(a[a.index("--passages") + 1] == passages for a in lines if a[1:3] == ["qa", "synthesize"])
        fts = [a for a in lines if a[1:3] == ["finetune", "squad"]]
        assert len(fts) == 2 * seeds and len({tuple(a[a.index("--epochs"):a.index("--seed")]) for a in fts}) == 1
        evals = [a for a in lines if a[1:3] == ["qa", "evaluate-reader"]]
        assert len(evals) == 3 * seeds and not any("--sample" in a for a in evals)
