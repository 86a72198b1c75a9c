"""Objectives as declared objects: generation options declared once, empty generations counted, and no code in
mwb/ that branches on an objective's name or probes a runner."""
from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

from mwb.tasks.api.base import Task
from mwb.tasks.api.objectives import (CLASSIFICATION, CUSTOM, GENERATIVE, OBJECTIVES, REGRESSION, SPAN,
                                      GenerationOptions)
from mwb.tasks.api.registry import get_task

ROOT = pathlib.Path(__file__).resolve().parents[3] / "mwb"


class Gen(Task):
    objective = GENERATIVE

    def inputs(self, example, tokenizer, seq_length):
        return {"prompt": example["q"], "target": example["a"]}


def test_generation_options_defaults_and_task_overrides():
    assert GenerationOptions() == GenerationOptions(max_tokens=32, num_beams=1, first_line=False, length_penalty=1.0,
                                                    no_repeat_ngram=0, batch_size=16)
    assert Gen().generation() == GenerationOptions(batch_size=8)  # the base task's batch_size option is 8
    summarize = get_task("summarize")
    assert summarize().generation() == GenerationOptions(max_tokens=64, first_line=True, batch_size=8)
    assert summarize(num_beams=4, length_penalty=0.6, no_repeat_ngram=3, max_tokens=20).generation() == \
        GenerationOptions(max_tokens=20, num_beams=4, first_line=True, length_penalty=0.6, no_repeat_ngram=3,
                          batch_size=8)


def test_declared_defaults_per_objective():
    assert [o.name for o in OBJECTIVES] == ["classification", "regression", "multiple_choice",
                                            "token_classification", "span", "generative", "custom"]
    assert [o.trainable for o in OBJECTIVES] == [True] * 6 + [False]
    assert GENERATIVE.arches() == ("gpt", "t5") and CLASSIFICATION.arches() == ("bert",)
    assert GENERATIVE.dev_metric(Gen()) == "dev_loss" and CLASSIFICATION.dev_metric(Task()) == "accuracy"
    assert GENERATIVE.packs and not CLASSIFICATION.packs and GENERATIVE.scored_after_training
    logits = np.array([[0.1, 2.0], [3.0, -1.0], [0.0, 0.5]])
    assert SPAN.decode(logits, {}) == (1, 0) and CLASSIFICATION.decode(logits, {}) == [1, 0, 1]
    assert REGRESSION.decode(np.array([[1.5]]), {}) == 1.5
    assert f"{GENERATIVE:12s}|" == "generative  |" and str(CUSTOM) == "custom"
    assert Gen().describe()["objective"] == "generative"


def test_generative_records_carry_empty_and_are_counted():
    task = Gen()
    task.examples = [{"q": "a", "a": "x"}, {"q": "b", "a": "y"}, {"q": "c", "a": "z"}]
    recs = task.item_records(["x", "  \n", ""])
    assert [r["empty"] for r in recs] == [False, True, True] and GENERATIVE.empty_outputs(recs) == 2
    assert [r["exact_match"] for r in recs] == [1.0, 0.0, 0.0]
    class Clf(Task):
        objective = CLASSIFICATION

    clf = Clf()
    clf.examples = [{"label": 1}, {"label": 0}]
    clf.items = clf.examples
    recs = clf.item_records([1, 1])
    assert "empty" not in recs[0] and CLASSIFICATION.empty_outputs(recs) is None
    assert [r["accuracy"] for r in recs] == [1, 0]


def test_no_objective_name_compared_and_no_runner_probed():
    pattern = re.compile(r"objective\s*(==|!=)|objective in \(|is generative_objective|hasattr\((runner|lm),|"
                         r"isinstance\((runner|lm),|\.opts\[[^]]+\]\s*=\s*[^=]")
    hits = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
            for line in p.read_text().splitlines() if pattern.search(line)]
    assert hits == [], hits  # options are read-only (Task.decide records what a checkpoint decides)


def test_options_are_read_only_and_what_a_checkpoint_decides_is_recorded_beside_them():
    class Clf(Task):
        objective = CLASSIFICATION

    task = Clf(batch_size=4)
    with pytest.raises(TypeError):
        task.opts["seq_length"] = 128
    task.decide(seq_length=128, reader_kind="fid")
    assert task.opts["seq_length"] is None and task.option("seq_length") == 128 and task.option("batch_size") == 4
    # results.json's task_options: the user's options in declared order, then what only the checkpoint knew
    assert list(task.recorded_options().items()) == [("split", None), ("batch_size", 4), ("seq_length", 128),
                                                     ("reader_kind", "fid")]
    assert task.describe()["options"] == task.recorded_options()
