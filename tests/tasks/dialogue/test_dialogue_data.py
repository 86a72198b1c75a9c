"""Dialogue readers (chitchat, Wizard of Wikipedia) on samples written here, splits and actor references."""
from __future__ import annotations

import json

import pytest

from mwb.core.errors import DataError
from mwb.tasks.dialogue import data as dd
from tests.helpers.needs import needs

CHITCHAT = {
    "c1": {"messages": [[{"text": "Hello", "sender": "A", "timestamp": "t"},
                         {"text": "how are you?", "sender": "A", "timestamp": "t"}],
                        [{"text": "fine", "sender": "B", "timestamp": "t"}],
                        [{"text": "good to hear", "sender": "A", "timestamp": "t"}]],
           "prompt": "p", "ratings": {}, "start": "s"},
    "c2": {"messages": [[{"text": "yo", "sender": "B", "timestamp": "t"}],
                        [{"text": "hey there", "sender": "C", "timestamp": "t"}]]},
}

WOW = [{
    "chosen_topic": "Blue",
    "persona": "i like blue.",
    "wizard_eval": 5,
    "chosen_topic_passage": ["Blue is a colour."],
    "dialog": [
        {"speaker": "1_Apprentice", "text": "I love the color blue.", "retrieved_passages": [], "retrieved_topics": []},
        {"speaker": "0_Wizard", "text": "Blue is one of the three primary colours!",
         "checked_sentence": {"chosen_Blue_1": "Blue is one of the three primary colours of pigments."},
         "checked_passage": {"chosen_Blue": "Blue"}, "retrieved_passages": [{"Blue": ["Blue is a colour."]}],
         "retrieved_topics": ["Blue"]},
        {"speaker": "1_Apprentice", "text": "What else?"},
        {"speaker": "0_Wizard", "text": "Not sure.", "checked_sentence": {"no_passages_used": "no_passages_used"},
         "checked_passage": {"no_passages_used": "no_passages_used"}},
        {"speaker": "1_Apprentice", "text": "And the sky?"},
        {"speaker": "0_Wizard", "text": "The sky looks blue by Rayleigh scattering.",
         "checked_sentence": {"partner_Sky_0": "Rayleigh scattering makes the sky blue."},
         "checked_passage": {"partner_Sky": "Sky"}},
    ]}]


def test_chitchat_reader_joins_consecutive_messages(tmp_path):
    p = tmp_path / "dataset.json"
    p.write_text(json.dumps(CHITCHAT))
    convs = dd.read_chitchat(str(p))
    assert [c["id"] for c in convs] == ["c1", "c2"]
    assert convs[0]["turns"] == [dd.Turn("A", "Hello how are you?"), dd.Turn("B", "fine"), dd.Turn("A", "good to hear")]
    idx = dd.utterances_by_actor(convs)
    assert dd.references(idx, "B", exclude="c1", k=5, seed="s") == ["yo"]  # never from its own conversation
    assert dd.references(idx, "A", exclude="c1", k=5, seed="s") == []
    assert dd.conversations_per_actor(convs) == {"A": 1, "B": 2, "C": 1}
    ctx = list(dd.responses(convs[0], context_turns=1))
    assert [(len(c), r.text) for c, r in ctx] == [(1, "fine"), (1, "good to hear")] and ctx[1][0][0].text == "fine"


def test_wow_reader_knowledge_and_topic(tmp_path):
    p = tmp_path / "test_random_split.json"
    p.write_text(json.dumps(WOW))
    assert dd.wow_file(str(tmp_path), "seen") == str(p)
    (conv,) = dd.read_wow(str(p))
    t = conv["turns"]
    assert [x.speaker for x in t] == ["Apprentice", "Wizard"] * 3
    assert t[1].knowledge == "Blue is one of the three primary colours of pigments." and t[1].topic == "Blue"
    assert t[3].knowledge is None and t[3].topic == "Blue"  # no passage used: chosen topic, no knowledge
    assert t[5].knowledge == "Rayleigh scattering makes the sky blue." and t[5].topic == "Sky"
    assert t[0].knowledge is None and t[0].topic is None


def test_bad_inputs_are_data_errors(tmp_path):
    with pytest.raises(DataError, match="not found"):
        dd.read_wow(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON"):
        dd.read_chitchat(str(bad))
    bad.write_text(json.dumps({"dialog": []}))
    with pytest.raises(DataError, match="list of dialogues"):
        dd.read_wow(str(bad))
    with pytest.raises(DataError, match="test_topic_split.json"):
        dd.wow_file(str(tmp_path), "unseen")


def test_splits_by_conversation_and_held_out_actors():
    convs = [{"id": f"c{i}", "turns": [dd.Turn(f"s{i % 7}", "x"), dd.Turn(f"s{(i + 1) % 7}", "y")]}
             for i in range(200)]
    held = dd.held_out_actors(convs, 0.3)
    assert held and held == dd.held_out_actors(list(reversed(convs)), 0.3)  # order does not matter
    parts = dd.split_conversations(convs, dev=0.1, test=0.1, held_out=frozenset(held))
    ids = [c["id"] for part in parts.values() for c in part]
    assert sorted(ids) == sorted(c["id"] for c in convs)  # a partition
    for name in ("train", "dev", "test"):
        assert all(t.speaker not in held for c in parts[name] for t in c["turns"])
    assert all(any(t.speaker in held for t in c["turns"]) for c in parts["unseen_actors"])
    assert parts["dev"] and parts["train"]


@needs(data=["chitchat"])
def test_real_chitchat_has_stable_actors():
    convs = dd.read_chitchat()
    assert len(convs) == 7168
    per = dd.conversations_per_actor(convs)
    assert len(per) == 1315 and max(per.values()) > 1000


def test_other_actor_is_outside_the_conversation_and_has_enough_utterances():
    index = {"A": [("c1", "a1"), ("c2", "a2")], "B": [("c1", "b1"), ("c3", "b2"), ("c4", "b3")],
             "C": [("c2", "x")], "D": [("c5", "d1"), ("c6", "d2")], "E": [("c1", "e1"), ("c7", "e2")]}
    # responder B in c1 with A: C has 1 utterance (< k), E has 1 outside c1; only D qualifies
    assert dd.other_actor(index, "B", {"A"}, "c1", 2, seed="c1:2") == "D"
    picks = {dd.other_actor(index, "B", {"A"}, "c1", 1, seed=f"c1:{t}") for t in range(40)}
    assert picks == {"C", "D", "E"}  # the hash spreads over every qualifying actor, never B or A
    assert dd.other_actor(index, "B", {"A", "D"}, "c1", 2, seed="s") is None
