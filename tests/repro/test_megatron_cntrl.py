"""``megatron-cntrl``: the control keywords (another story's words, absent from this one, with knowledge), their
inclusion (new in the sentence written at its step), ``mwb eval story --control with|without``, and
``mwb repro megatron-cntrl --scale smoke --seeds 2``: every file written, per-seed values equal to those
recomputed from the predictions files, comparisons' diff = mean_b − mean_a, the control cell writing with the
knowledge cell's model (same PPL, same keywords)."""
from __future__ import annotations

import json
import math
import os
import shlex

import numpy as np
import pytest

from mwb.core.config import ConfigError
from mwb.core.errors import DataError
from mwb.evaluation.predictions import aggregate, read_predictions
from mwb.repro.experiments.megatron_cntrl import CONTROL, KNOWLEDGE, NONE
from mwb.tasks.story.control import control_keywords, inclusion_share, new_inclusion, word_forms
from mwb.tasks.story.data import Story
from mwb.tasks.story.metrics import repeat_n, story_distinct
from mwb.tasks.story.task import StoryEval
from tests.helpers.cli import run_cli
from tests.helpers.needs import needs
from tests.helpers.repro_smoke import SMOKE_CPU_SECONDS, run_smoke

STORIES = [
    Story("a", ("Ann baked a cake.", "The oven was hot.", "She added sugar.", "The cake rose.", "Ann ate it.")),
    Story("b", ("Bob walked his dog.", "The dog found a bone.", "Bob threw the bone.", "The dog ran home.",
                "Bob laughed at the oven.")),
    Story("c", ("Cal drove to town.", "His car broke down.", "A mechanic fixed the engine.",
                "Cal paid the bill.", "He drove home happy.")),
]

# control keywords must have WordNet knowledge; the smoke run fine-tunes the story parts: ROCStories, WordNet,
# RAKE keywords and the MiniLM knowledge ranker
needs_wordnet = needs(data=["wordnet"])
needs_story = needs("rake_nltk", models=["minilm-l6"], data=["rocstories", "wordnet"])


# ------------------------------------------------------------------------------------- control keywords


@needs_wordnet
def test_keywords_come_from_another_story_and_are_not_in_this_one():
    ks = control_keywords(STORIES)
    assert [len(k) for k in ks] == [4, 4, 4] and all(len(step) == 1 for k in ks for step in k)
    for story, keys in zip(STORIES, ks):
        own = word_forms(" ".join(story.sentences))
        flat = [k[0] for k in keys]
        assert not any(word_forms(k) & own for k in flat), (story.id, flat)  # absent from the whole story
        assert len(set(flat)) == 4  # distinct: an earlier control cannot have written a later keyword
        others = word_forms(" ".join(s for o in STORIES if o is not story for s in o.sentences))
        assert all(word_forms(k) & others for k in flat)  # another story's words
    assert ["oven"] not in ks[0]  # story b's "oven" (sentence 5) is story a's own word
    # by hand: RAKE phrases best first, head word first; a word whose base form is in the story is skipped
    x = Story("x", ("Tom had a dog.", "Tom fed it.", "It slept on a mat.", "It woke.", "It ate."))
    y = Story("y", ("Sue sang.", "Her loud dogs.", "Sue laughed.", "Sue danced.", "Sue slept."))
    assert control_keywords([x, y]) == [[["loud"], ["laughed"], ["danced"], ["sue"]],  # not dogs (x has dog)
                                        [["fed"], ["mat"], ["woke"], ["ate"]]]  # not slept (y has slept)


@needs_wordnet
def test_keywords_need_knowledge_and_another_story():
    ks = control_keywords(STORIES, has_knowledge=lambda w: w not in ("bone", "dog"))
    assert all(k[0] not in ("bone", "dog") for keys in ks for k in keys)
    with pytest.raises(DataError, match="at least 2 stories"):
        control_keywords(STORIES[:1])
    with pytest.raises(DataError, match="no other story offers a keyword"):
        control_keywords(STORIES, has_knowledge=lambda w: False)


@needs_wordnet
def test_new_inclusion_by_hand():
    assert new_inclusion("brownie", "She baked brownies.", "Ann was hungry.")  # base form "brownie"
    assert not new_inclusion("oven", "The oven was hot.", "Ann opened the oven.")  # already in the story so far
    assert not new_inclusion("oven", "The stove was hot.", "Ann was hungry.")
    assert not new_inclusion("dog", "The dogma was strict.", "")  # a word, not a substring
    story = ["Ann was hungry.", "She opened the oven.", "The oven was hot.", "Her dog barked.", "She ate cake."]
    # sentence 2 has oven (new); sentence 3 has oven but the story so far already had it; dog new; moon absent
    assert inclusion_share([["oven"], ["oven"], ["dog"], ["moon"]], story) == 0.5


@needs_wordnet
def test_eval_control_modes_name_their_metrics():
    results = [{"free": ["First.", "the dog ran", "it sat", "it sat down again", "the end"],
                "controlled": ["First.", "the oven was hot", "the dog ran", "it slept", "the end"],
                "control": [["oven"], ["dog"], ["cat"], ["moon"]], "nll": (4.0, 2)},
               {"free": ["Second.", "a hat", "a bat", "a cat", "a mat"],
                "controlled": ["Second.", "the oven", "the oven", "a cat", "the moon"],
                "control": [["oven"], ["oven"], ["cat"], ["moon"]], "nll": (6.0, 3)}]
    for mode, kind in (("with", "controlled"), ("without", "free")):
        task = StoryEval(control=mode)
        task.examples = STORIES[:2]
        rows = [{k: r[k] for k in ("control", "nll", kind)} for r in results]  # what run() writes in this mode
        m = task.aggregate(rows)
        recs = task.records(rows, STORIES[:2])
        shares = [inclusion_share(r["control"], r[kind]) for r in results]
        assert m["inclusion"] == pytest.approx(np.mean(shares)) == pytest.approx(aggregate(recs, "inclusion"))
        texts = [" ".join(r[kind]) for r in results]
        assert m["distinct_4"] == story_distinct(texts, 4) and m["repeat_4"] == repeat_n(texts, 4)
        assert m["repeat_4"] == aggregate(recs, "repeat_4") and m["ppl"] == pytest.approx(math.exp(10 / 5))
        assert m["ppl"] == pytest.approx(aggregate(recs, "ppl"))
        assert "inclusion_control" not in m and set(recs[0]["prediction"]) == {kind, "control"}
    # with: oven new, dog new, cat/moon absent → 0.5; oven new, oven again (not new), cat, moon → 0.75
    assert [inclusion_share(r["control"], r["controlled"]) for r in results] == [0.5, 0.75]
    both = StoryEval()
    both.examples = STORIES[:2]
    m = both.aggregate(results)
    assert m["inclusion_control"] == 0.625 and m["inclusion_no_control"] == pytest.approx(0.25 / 2)
    with pytest.raises(ConfigError, match="--control must be one of"):
        StoryEval(control="sometimes")


# -------------------------------------------------------------------------------------- the experiment


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("megatron-cntrl") / "smoke"
    _, cpu = run_smoke("megatron-cntrl", out, "--seeds", "2")
    return out, cpu


@needs_story
def test_smoke_writes_every_file_within_two_minutes_of_two_cores(smoke):
    out, cpu = smoke
    assert cpu < SMOKE_CPU_SECONDS, cpu  # CPU seconds (tests/helpers/repro_smoke.py)
    for name in ("report.md", "results.json", "commands.sh", "env.json", "megatron-cntrl.png"):
        assert (out / name).stat().st_size > 100, name
    for c in (KNOWLEDGE, CONTROL, NONE):
        for s in (0, 1):
            assert (out / "predictions" / c / f"seed{s}.jsonl").stat().st_size > 100
    res = json.loads((out / "results.json").read_text())
    assert res["experiment"] == "megatron-cntrl" and res["seeds"] == [0, 1] and res["scale"] == "smoke"
    assert res["paper"][0]["arxiv"] == "2010.00840" and res["paper_values"][0]["value"] == 0.775
    md = (out / "report.md").read_text()
    assert f"**Verdict: {res['verdict']}**" in md and "What this scale can and cannot show" in md


@needs_story
def test_per_seed_values_equal_the_predictions(smoke):
    out = smoke[0]
    res = json.loads((out / "results.json").read_text())
    for c in (KNOWLEDGE, CONTROL, NONE):
        for s in (0, 1):
            recs = read_predictions(str(out / "predictions" / c / f"seed{s}.jsonl"))
            assert len(recs) == 3  # the smoke's 3 test stories
            for m in ("inclusion", "ppl", "repeat_4"):
                assert res["conditions"][c][m][s] == pytest.approx(aggregate(recs, m), rel=1e-9), (c, s, m)
            kind = "controlled" if c == CONTROL else "free"
            texts = [" ".join(r["prediction"][kind]) for r in recs]
            assert res["conditions"][c]["distinct_4"][s] == pytest.approx(story_distinct(texts, 4))
            shares = [inclusion_share(r["prediction"]["control"], r["prediction"][kind]) for r in recs]
            assert [r["inclusion"] for r in recs] == shares


@needs_story
def test_control_cell_writes_with_the_knowledge_cells_model(smoke):
    out = smoke[0]
    res = json.loads((out / "results.json").read_text())
    # the same model scores the same gold sentences: PPL equal; the same stories get the same keywords
    assert res["conditions"][CONTROL]["ppl"] == pytest.approx(res["conditions"][KNOWLEDGE]["ppl"], rel=1e-9)
    for s in (0, 1):
        k = {r["id"]: r for r in read_predictions(str(out / "predictions" / KNOWLEDGE / f"seed{s}.jsonl"))}
        c = {r["id"]: r for r in read_predictions(str(out / "predictions" / CONTROL / f"seed{s}.jsonl"))}
        assert k.keys() == c.keys()
        if s == 1:  # each seed writes other stories: seed 1 the split's stories 3-5, seed 0 its first 3
            first = {r["id"] for r in read_predictions(str(out / "predictions" / KNOWLEDGE / "seed0.jsonl"))}
            assert len(first) == 3 and not first & k.keys()
        for rid, rec in c.items():
            assert rec["prediction"]["control"] == k[rid]["prediction"]["control"]
            own = word_forms(" ".join(rec["gold"]))
            assert not any(word_forms(w[0]) & own for w in rec["prediction"]["control"])
    sh = [shlex.split(x) for x in (out / "commands.sh").read_text().splitlines() if x.startswith("mwb ")]
    control_evals = [a for a in sh if a[:3] == ["mwb", "eval", "story"] and "with" in a]
    assert len(control_evals) == 2
    assert all(a[a.index("--checkpoint") + 1] == str(out / "cells" / KNOWLEDGE / f"seed{s}" / "run")
               for s, a in enumerate(control_evals))
    assert sum(a[:3] == ["mwb", "finetune", "story"] for a in sh) == 4  # knowledge and no-knowledge, 2 seeds


@needs_story
def test_comparisons_are_the_declared_ones_with_diff_b_minus_a(smoke):
    res = json.loads((smoke[0] / "results.json").read_text())
    rows = res["comparisons"]
    assert [(r["a"], r["b"], r["metric"], r["direction"], r["headline"]) for r in rows] == [
        (KNOWLEDGE, CONTROL, "inclusion", "greater", True), (NONE, KNOWLEDGE, "ppl", "less", True),
        (NONE, KNOWLEDGE, "distinct_4", "greater", True), (NONE, KNOWLEDGE, "repeat_4", "less", True)]
    assert [r["part"] for r in rows] == ["keyword-copying", "knowledge-ppl", "knowledge-distinct-4", "knowledge-repeat-4"]
    for r in rows:
        a, b = res["conditions"][r["a"]][r["metric"]], res["conditions"][r["b"]][r["metric"]]
        assert r["mean_a"] == pytest.approx(np.mean(a)) and r["mean_b"] == pytest.approx(np.mean(b))
        assert r["diff"] == pytest.approx(r["mean_b"] - r["mean_a"])
    by = {r["metric"]: r for r in rows}
    # 3 stories per seed, another 3 for seed 1 (--first-story 3): 6 distinct items over 2 seeds
    assert by["inclusion"]["paired_over"] == "items" and by["inclusion"]["n_items"] == 6
    assert by["distinct_4"]["paired_over"] == "seeds"  # a corpus statistic: one value per seed
    head = by["inclusion"]
    p, d = head["p"], head["diff"]
    want = "not shown" if p is None or p >= 0.05 or d == 0 else ("shown" if d > 0 else "contradicted")
    assert head["verdict"] == want and res["verdict_by_part"]["keyword-copying"] == want
    words = set(res["verdict_by_part"].values())  # every part's verdict; the run's: all shown, any contradicted
    assert res["verdict"] == ("shown" if words == {"shown"} else "contradicted" if "contradicted" in words
                              else "not shown")


def test_dry_runs_of_the_other_scales(capsys, tmp_path):
    code, text, err = run_cli(["repro", "megatron-cntrl", "--scale", "cpu", "--dry-run", "--out", str(tmp_path)],
                              capsys)
    assert code == 0, err
    argvs = [shlex.split(x) for x in text.splitlines() if x.startswith("mwb ")]
    assert len(argvs) == 5 * 5 and not (tmp_path / "cells").exists()  # 2 + 1 + 2 commands per seed, 5 seeds
    evals = [a for a in argvs if a[:3] == ["mwb", "eval", "story"]]
    windows = [(int(a[a.index("--first-story") + 1]), int(a[a.index("--stories") + 1])) for a in evals]
    assert sorted(set(windows)) == [(20 * k, 20) for k in range(5)] and len(windows) == 3 * 5  # 100 stories
    assert all(a[a.index("--checkpoint") + 1] == "smollm2-135m" for a in argvs if a[1] == "finetune")
    code, text, err = run_cli(["repro", "megatron-cntrl", "--scale", "paper", "--dry-run", "--set", "checkpoint=G",
                               "--set", "data=roc.csv", "--set", "conceptnet=cn.csv"], capsys)
    assert code == 0, err
    train = [shlex.split(x) for x in text.splitlines() if x.startswith("mwb finetune story")]
    assert train and all(a[a.index("--checkpoint") + 1] == "G" and a[a.index("--conceptnet") + 1] == "cn.csv"
                         and a[a.index("--data") + 1] == "roc.csv" for a in train)
    assert "gpt-8.3b" in text and "mwb plan" in text
    code, _, err = run_cli(["repro", "megatron-cntrl", "--scale", "paper", "--dry-run"], capsys)
    assert code == 2 and "--set checkpoint=VALUE" in err
    assert os.path.basename(str(tmp_path))  # nothing else written
