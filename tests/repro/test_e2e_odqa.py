"""``mwb repro e2e-odqa --scale smoke --seeds 2``: every file is written; each per-seed value is its
predictions file's mean; each comparison's diff is mean_b − mean_a and its p the exact McNemar test on the
questions paired across conditions; the three conditions of a seed start from the same files (one start per
seed, the same ``_before`` values question by question); the pipeline's retriever does not move."""
from __future__ import annotations

import json
import os
import shlex

import pytest
from scipy import stats as sps

from mwb.core.config import ConfigError
from mwb.core.errors import DataError
from mwb.evaluation import stats
from mwb.evaluation.predictions import aggregate, read_predictions
from mwb.repro.experiments import e2e_odqa
from mwb.repro.registry import get_experiment
from tests.helpers.repro_smoke import SMOKE_CPU_SECONDS, run_smoke

pytest.importorskip("faiss")

CONDITIONS = ("pipeline", "individual", "emdr2")
METRICS = ("top1", "top5", "top20", "em")
SEEDS = (0, 1)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("e2e-odqa") / "smoke"
    _, cpu = run_smoke("e2e-odqa", out, "--seeds", "2")
    return out, cpu


def _records(out, condition, seed):
    return read_predictions(str(out / "predictions" / condition / f"seed{seed}.jsonl"))


def test_smoke_writes_every_file_within_two_minutes_of_two_cores(smoke):
    out, cpu = smoke
    assert cpu < SMOKE_CPU_SECONDS, cpu  # 2 minutes of 2 cores (tests/helpers/repro_smoke.py)
    for name in ("report.md", "results.json", "commands.sh", "env.json", "e2e-odqa.png"):
        assert (out / name).stat().st_size > 100, name
    res = json.loads((out / "results.json").read_text())
    assert res["experiment"] == "e2e-odqa" and res["scale"] == "smoke" and res["seeds"] == list(SEEDS)
    assert [p["arxiv"] for p in res["paper"]] == ["2106.05346"] and res["deterministic"] is False
    assert set(res["conditions"]) == set(CONDITIONS)
    assert res["paper_values"] == [pv.to_dict() for pv in get_experiment("e2e-odqa").paper_values]
    md = (out / "report.md").read_text()
    assert f"**Verdict: {res['verdict']}**" in md and "What this scale can and cannot show" in md
    assert "52.5" in md or "0.525" in md


def test_per_seed_values_are_the_predictions_means(smoke):
    out = smoke[0]
    res = json.loads((out / "results.json").read_text())
    for c in CONDITIONS:
        for s in SEEDS:
            recs = _records(out, c, s)
            assert len(recs) == 16  # --eval-questions 16 of the held-out MSS questions
            cell = json.loads((out / "cells" / c / f"seed{s}" / "results.json").read_text())["metrics"]
            for m in METRICS:
                assert res["conditions"][c][m][s] == pytest.approx(aggregate(recs, m), abs=1e-12), (c, s, m)
                assert cell[m] == pytest.approx(aggregate(recs, m), abs=1e-12)
        # the same questions under every condition (paired by id) and both seeds
    ids = {(c, s): [r["id"] for r in _records(out, c, s)] for c in CONDITIONS for s in SEEDS}
    assert len(set(map(tuple, ids.values()))) == 1


def test_comparisons_are_paired_mcnemar_and_give_the_verdict(smoke):
    out = smoke[0]
    res = json.loads((out / "results.json").read_text())
    rows = res["comparisons"]
    assert len(rows) == len(get_experiment("e2e-odqa").comparisons)
    (head,) = [r for r in rows if r["headline"]]
    assert (head["a"], head["b"], head["metric"], head["direction"]) == ("pipeline", "emdr2", "em", "greater")
    for r in rows:
        va, vb = res["conditions"][r["a"]][r["metric"]], res["conditions"][r["b"]][r["metric"]]
        assert r["mean_a"] == pytest.approx(sum(va) / len(va), abs=1e-12)
        assert r["diff"] == pytest.approx(r["mean_b"] - r["mean_a"], abs=1e-12)
        assert r["paired_over"] == "items" and r["n_seeds"] == len(SEEDS)
        assert r["n_items"] == len({x["id"] for s in SEEDS for x in _records(out, r["a"], s)})  # distinct
        b01 = b10 = 0  # discordant questions, pooled over seeds
        for s in SEEDS:
            a = {x["id"]: x[r["metric"]] for x in _records(out, r["a"], s)}
            for x in _records(out, r["b"], s):
                b01 += a[x["id"]] == 0 and x[r["metric"]] == 1
                b10 += a[x["id"]] == 1 and x[r["metric"]] == 0
        legacy = 1.0 if b01 + b10 == 0 else sps.binomtest(b01, b01 + b10, 0.5).pvalue  # the pooled McNemar
        again = stats.compare_runs([_records(out, r["a"], s) for s in SEEDS], [_records(out, r["b"], s) for s in SEEDS],
                                   r["metric"])
        assert r["p"] == pytest.approx(again.p, abs=1e-12) and r["test"] == "two-level"
        if b01 + b10 == 0:  # no discordant question: both tests give 1
            assert r["p"] == legacy == 1.0
        assert r["verdict"] == (stats.verdict(r["p"], r["diff"], r["direction"]) if r["headline"] else "exploratory")
    assert res["verdict"] == head["verdict"]


def test_conditions_share_one_start_per_seed(smoke):
    out = smoke[0]
    res = json.loads((out / "results.json").read_text())
    for s in SEEDS:
        start = out / "start" / f"seed{s}"
        marker = json.loads((start / e2e_odqa.START_FILE).read_text())
        assert marker["seed"] == s and len(marker["commands"]) == 2
        assert (start / "ict" / "checkpoints").is_dir() and (start / "reader-bert" / "checkpoints").is_dir()
        befores = [res["details"][c][s]["before"] for c in CONDITIONS]
        assert befores[0] == befores[1] == befores[2] and set(befores[0]) >= set(METRICS)
        per_item = [{r["id"]: [r[f"{m}_before"] for m in METRICS] + [r["prediction_before"]]
                     for r in _records(out, c, s)} for c in CONDITIONS]
        assert per_item[0] == per_item[1] == per_item[2]
        for r in _records(out, "pipeline", s):  # the fixed retriever ranks exactly as its start
            assert [r[m] for m in ("top1", "top5", "top20", "hit_rank")] == \
                [r[f"{m}_before"] for m in ("top1", "top5", "top20", "hit_rank")]
        cfg = json.loads((out / "cells" / "emdr2" / f"seed{s}" / "results.json").read_text())
        assert cfg["e2e"]["retriever"].startswith(str(start / "ict"))


def test_commands_sh_trains_each_start_once_before_its_joint_runs(smoke):
    out = smoke[0]
    lines = [shlex.split(x) for x in (out / "commands.sh").read_text().splitlines() if x.startswith("mwb ")]
    assert len(lines) == 2 * len(SEEDS) + len(CONDITIONS) * len(SEEDS)
    for s in SEEDS:
        start = str(out / "start" / f"seed{s}")
        made = [i for i, a in enumerate(lines) if a[1] == "pretrain" and a[-1].startswith(start)]
        used = [i for i, a in enumerate(lines) if a[2] == "e2e-qa" and a[a.index("--retriever") + 1].startswith(start)]
        assert len(made) == 2 and len(used) == len(CONDITIONS) and max(made) < min(used)
        methods = [lines[i][lines[i].index("--method") + 1] for i in used]
        assert methods == list(CONDITIONS)
        for i in used:  # only --method and --out differ between a seed's joint runs
            a = lines[i]
            drop = {a.index("--method") + 1, len(a) - 1}
            assert [x for j, x in enumerate(a) if j not in drop] == \
                [x for j, x in enumerate(lines[used[0]]) if j not in drop]


def test_rerun_reuses_cells_and_start(smoke):
    out = smoke[0]
    from mwb.cli.main import main
    marker = out / "start" / "seed0" / e2e_odqa.START_FILE
    before = marker.stat().st_mtime_ns
    main(["repro", "e2e-odqa", "--scale", "smoke", "--seeds", "2", "--out", str(out)])
    res = json.loads((out / "results.json").read_text())
    assert res["cells"] == {**res["cells"], "ran": 0, "reused": 6}
    assert marker.stat().st_mtime_ns == before


def _recording_invoke():
    """(calls, invoke): an invoke that records each command and leaves a checkpoint at its --out (last arg)."""
    calls = []

    def invoke(argv):
        calls.append(argv)
        os.makedirs(os.path.join(argv[-1], "checkpoints"), exist_ok=True)
    return calls, invoke


def test_ensure_start_reruns_only_a_missing_or_different_start(tmp_path):
    calls, invoke = _recording_invoke()
    p = e2e_odqa.SCALES["smoke"].params
    start = str(tmp_path / "start" / "seed3")
    e2e_odqa.ensure_start(p, 3, start, invoke)
    assert [a[:3] for a in calls] == [["mwb", "pretrain", "ict"], ["mwb", "pretrain", "bert"]]
    assert all(a[a.index("--seed") + 1] == "3" for a in calls)
    e2e_odqa.ensure_start(p, 3, start, invoke)
    assert len(calls) == 2  # finished with these commands: reused
    longer = {**p, "ict": {**p["ict"], "steps": 5}}
    e2e_odqa.ensure_start(longer, 3, start, invoke)
    assert len(calls) == 4 and calls[2][calls[2].index("--steps") + 1] == "5"
    os.remove(os.path.join(start, e2e_odqa.START_FILE))  # stopped half way: made again from scratch
    open(os.path.join(start, "stale"), "w").close()
    e2e_odqa.ensure_start(longer, 3, start, invoke)
    assert len(calls) == 6 and not os.path.exists(os.path.join(start, "stale"))
    assert e2e_odqa.start_dir(str(tmp_path / "o" / "cells" / "emdr2" / "seed3"), 3) == \
        str(tmp_path / "o" / "start" / "seed3")


def test_paper_scale_dry_run_needs_the_data_and_prints_the_plan(capsys):
    from mwb.repro.runner import dry_run, plan_run
    exp = get_experiment("e2e-odqa")
    with pytest.raises(ConfigError, match="--set evidence="):
        plan_run(exp, "paper")
    opts = {"evidence": "/d/psgs_w100.tsv", "questions": "/d/nq.jsonl", "retriever": "/c/ret", "reader": "/c/t5"}
    text = dry_run(plan_run(exp, "paper", options=opts, out="/tmp/x"))
    joint = [shlex.split(x) for x in text.splitlines() if x.startswith("mwb finetune e2e-qa")]
    assert len(joint) == 3 and not any(x.startswith("mwb pretrain") for x in text.splitlines())
    for a in joint:
        assert a[a.index("--top-k") + 1] == "50" and a[a.index("--global-batch-size") + 1] == "64"
        assert a[a.index("--retriever") + 1] == "/c/ret" and a[a.index("--evidence") + 1] == "/d/psgs_w100.tsv"
        assert a[a.index("--indexer-ranks") + 1] == "8"
    assert "mwb plan --preset t5-base" in text and "mwb plan --preset bert-base" in text and "s/iteration" in text


def test_cpu_scale_starts_every_cell_from_pretrained_weights_on_mss_questions():
    """The design fixed before the cpu report: no from-scratch start; the same pretrained retriever (e2e-qa's
    default, all-MiniLM-L6-v2) in every cell and, per seed, one reader trained alone from minilm-l6 on the MSS
    training questions (``qa-reader --questions mss``) that the seed's three conditions all start from; the MSS
    questions the bundled passages answer, and every held-out one of them (the count the scope states)
    evaluated in every seed."""
    from mwb.repro.runner import dry_run, plan_run
    from mwb.retrieval.e2e.train import split_questions
    from mwb.retrieval.inputs import BUNDLED_EVIDENCE
    from mwb.retrieval.mss_question_file import evidence_questions
    exp = get_experiment("e2e-odqa")
    scale = exp.scales["cpu"]
    text = dry_run(plan_run(exp, "cpu", out="/tmp/x"))
    lines = [shlex.split(x) for x in text.splitlines() if x.startswith("mwb ")]
    joint = [a for a in lines if a[1:3] == ["finetune", "e2e-qa"]]
    starts = [a for a in lines if a[1:3] == ["finetune", "qa-reader"]]
    assert len(joint) == len(CONDITIONS) * scale.seeds and len(starts) == scale.seeds
    assert len(lines) == len(joint) + len(starts)
    for a in starts:
        seed = a[a.index("--seed") + 1]
        assert a[a.index("--questions") + 1] == "mss" and a[a.index("--checkpoint") + 1] == "minilm-l6"
        assert a[a.index("--max-questions") + 1] == "0" and a[-1] == f"/tmp/x/start/seed{seed}/reader"
    assert sorted(a[a.index("--seed") + 1] for a in starts) == [str(s) for s in range(scale.seeds)]
    for a in joint:
        seed = a[a.index("--seed") + 1]
        assert "--retriever" not in a and a[a.index("--reader") + 1] == f"/tmp/x/start/seed{seed}/reader"
        assert a[a.index("--questions") + 1] == "mss" and a[a.index("--eval-questions") + 1] == "0"
    held = len(split_questions(evidence_questions(BUNDLED_EVIDENCE))[1])
    assert held >= 100 and f"every held-out MSS question ({held})" in exp.scope(scale)
    assert [c for c in exp.comparisons if c.headline][0].metric == "em"


def test_cpu_reader_start_is_made_once_per_seed_and_checked(tmp_path):
    calls, invoke = _recording_invoke()
    p = e2e_odqa.SCALES["cpu"].params
    start = str(tmp_path / "start" / "seed1")
    e2e_odqa.ensure_start(p, 1, start, invoke)
    e2e_odqa.ensure_start(p, 1, start, invoke)
    assert [a[:3] for a in calls] == [["mwb", "finetune", "qa-reader"]] and calls[0][-1] == os.path.join(start, "reader")
    with pytest.raises(DataError, match="has no checkpoint"):
        e2e_odqa.ensure_start(p, 2, str(tmp_path / "start" / "seed2"), lambda argv: None)
