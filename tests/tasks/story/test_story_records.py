"""``mwb eval story``'s per-story records: PPL parts, repeat-4 flags and keyword-inclusion shares aggregate to
the story metrics; the corpus distinct-4 is not a sum over stories, so each story carries its own."""
import pytest

import mwb.tasks.story.control as story_control
import mwb.tasks.story.metrics as story_metrics
from mwb.evaluation.predictions import aggregate
from mwb.tasks.story.data import Story
from mwb.tasks.story.task import StoryEval
from tests.helpers.records import assert_aggregates


def test_story_records_aggregate_to_the_story_metrics(monkeypatch):
    for module in (story_metrics, story_control):  # exact word match: no WordNet needed
        monkeypatch.setattr(module, "base_forms", lambda w: {w}, raising=False)
    task = StoryEval()
    gold = [Story("a", ("Ann had a dog.", "It ran.", "It sat.", "It ate.", "It slept.")),
            Story("b", ("Bob had a cat.", "It hid.", "It ran.", "It sat.", "It purred.")),
            Story("c", ("Cy had a hat.", "It was red red red red.", "It was red red red red.", "It flew.", "Ok."))]
    task.examples = gold
    results = [
        {"free": ["x", "the dog ran away", "it came back", "they were happy", "the end"],
         "controlled": ["x", "the oven was hot", "the dog ran", "it slept", "the end"],
         "control": [["oven"], ["dog"], ["cat"], ["moon"]], "nll": (4.0, 2)},
        {"free": ["x", "we ran and we ran and we ran", "ok", "the cat sat", "bye"],
         "controlled": ["x", "a moon", "b", "c", "d"], "control": [["moon"], ["sun"], ["cat"], ["sky"]],
         "nll": (9.5, 5)},
        {"free": ["x", "a b c d", "a b c d", "e", "f"], "controlled": ["x", "hat", "hat", "hat", "hat"],
         "control": [["hat"], ["hat"], ["red"], ["hat"]], "nll": (1.25, 3)}]
    metrics = task.aggregate(results)
    recs = task.records(results, gold)
    assert [r["id"] for r in recs] == ["a", "b", "c"]
    names = assert_aggregates(recs, metrics, at_least=6)
    assert set(names) == {"ppl", "repeat_4", "inclusion_control", "inclusion_no_control", "repeat_4_controlled",
                          "gold_repeat_4"}
    assert [r["repeat_4"] for r in recs] == [0, 1, 1] and [r["repeat_4_controlled"] for r in recs] == [0, 0, 0]
    assert 0 < aggregate(recs, "inclusion_control") < 1
    assert aggregate(recs, "ppl") == pytest.approx(2.71828182845 ** (14.75 / 10))
    assert [r["story_distinct_4"] for r in recs][0] == 1.0 and "distinct_4" not in recs[0]
