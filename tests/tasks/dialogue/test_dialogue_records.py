"""Dialogue and MSDP per-response records: F1 / KF1 (and MSDP's knowledge F1) average to the task metrics."""
from mwb.tasks.dialogue.msdp import MSDP
from mwb.tasks.dialogue.task import Dialogue
from tests.helpers.records import assert_aggregates

GUESSES = ["the dog is happy today", "i like red cars", "", "maybe the sea"]


def test_dialogue_records():
    ex = [{"id": f"c{i}:3", "prompt": "p", "target": t, "actor": "ann", "knowledge_ref": k}
          for i, (t, k) in enumerate([("my dog is very happy", "dogs are pets"), ("red cars are fast", None),
                                      ("hello", "hi there"), ("the sea is blue", "seas are salty")])]
    task = Dialogue()
    recs = task.records(GUESSES, ex)
    assert [r["id"] for r in recs] == ["c0:3", "c1:3", "c2:3", "c3:3"]
    assert assert_aggregates(recs, task.metrics(GUESSES, ex), at_least=2) == ["f1", "kf1"]
    no_knowledge = [dict(e, knowledge_ref=None) for e in ex]
    recs = task.records(GUESSES, no_knowledge)
    assert "kf1" not in recs[0] and assert_aggregates(recs, task.metrics(GUESSES, no_knowledge)) == ["f1"]


def test_msdp_records():
    task = MSDP()
    task.responses = []
    ex = [{"topic": "dogs", "turns": ["hi"], "knowledge": "dogs are loyal pets", "response": "dogs are loyal"},
          {"topic": "sea", "turns": ["hey"], "knowledge": "the sea is salty", "response": "it is very salty"}]
    preds = [{"knowledge": "dogs are pets", "response": "my dogs are loyal"}, {"knowledge": "x", "response": "salty"}]
    recs = task.records(preds, ex)
    assert len({r["id"] for r in recs}) == 2
    assert assert_aggregates(recs, task.metrics(preds, ex), at_least=3) == ["f1", "kf1", "knowledge_f1"]
