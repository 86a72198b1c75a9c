"""The grounding control of the knowledge-grounded agent: ``--random-knowledge`` shows passages drawn at random
(seeded, per example) from the same evidence where the retrieved ones would be, never a retrieved one, while
KF1 stays against the retrieved passage; ``--sample-seed`` takes another hashed sample of examples; the
records carry the KF1 passage so each reply can be rescored alone; ``wordnet+bundled`` is one pool of both."""
from __future__ import annotations

import json

import pytest

from mwb.core.config import ConfigError
from mwb.core.errors import DataError
from mwb.retrieval.inputs import BUNDLED_EVIDENCE, read_evidence
from mwb.tasks.api.registry import get_task
from mwb.tasks.dialogue.knowledge_sources import knowledge_path
from tests.helpers.needs import needs

from .hand_f1 import hand_f1
from .test_dialogue_data import WOW
from .test_dialogue_task import chitchat_sample

PASSAGES = ["lovely weather makes people say indeed", "dude is slang used by surfers", "perhaps is an adverb of doubt",
            "sure thing is an answer of assent", "yo is a greeting among friends", "hmm marks a pause to think",
            "tides follow the moon", "granite is an igneous rock"]


def _setup(tmp_path, passages=PASSAGES):
    data = chitchat_sample(tmp_path / "dataset.json", 24)
    ev = tmp_path / "kb.tsv"
    ev.write_text("id\ttext\ttitle\n" + "".join(f"{i}\t{t}\tT{i}\n" for i, t in enumerate(passages)))
    return data, dict(knowledge=True, evidence=str(ev), held_out_actors=0.0, min_conversations=1,
                      train_examples=12)


def _shown(example) -> list[str]:
    lines = example["prompt"].splitlines()
    return lines[1:lines.index("Conversation:")] if lines[0] == "Knowledge:" else []


def test_random_passages_replace_the_retrieved_ones_in_the_prompt_only(tmp_path):
    data, opts = _setup(tmp_path)
    retrieved = get_task("dialogue")(top_k=2, **opts).read(data, "train")
    drawn = get_task("dialogue")(top_k=2, random_knowledge=True, **opts).read(data, "train")
    assert [e["id"] for e in drawn] == [e["id"] for e in retrieved]
    assert [e["target"] for e in drawn] == [e["target"] for e in retrieved]
    assert [e["knowledge_ref"] for e in drawn] == [e["knowledge_ref"] for e in retrieved]  # KF1's reference
    for r, d in zip(retrieved, drawn):
        shown = _shown(d)
        assert len(shown) == 2 and len(set(shown)) == 2  # as many as retrieved, distinct
        assert set(shown) <= set(PASSAGES) and not set(shown) & set(_shown(r))  # same pool, never retrieved
        assert d["prompt"].split("Conversation:")[1] == r["prompt"].split("Conversation:")[1]
    assert len({tuple(_shown(d)) for d in drawn}) > 1  # a draw per example, not one for all


def test_the_draw_is_seeded_per_example(tmp_path):
    data, opts = _setup(tmp_path)
    first = get_task("dialogue")(random_knowledge=True, **opts).read(data, "train")
    again = get_task("dialogue")(random_knowledge=True, **opts).read(data, "train")
    assert [e["prompt"] for e in again] == [e["prompt"] for e in first]
    other = get_task("dialogue")(random_knowledge=True, knowledge_seed=1, **opts).read(data, "train")
    assert [e["prompt"] for e in other] != [e["prompt"] for e in first]
    fewer = get_task("dialogue")(random_knowledge=True, **{**opts, "train_examples": 5}).read(data, "train")
    assert [e["prompt"] for e in fewer] == [e["prompt"] for e in first[:5]]  # independent of how many are taken


def test_a_pool_too_small_for_the_draw_and_gold_knowledge_are_refused(tmp_path):
    data, opts = _setup(tmp_path, PASSAGES[:2])
    with pytest.raises(DataError, match="2 distinct passages leave fewer than 2 to draw"):  # both retrieved
        get_task("dialogue")(top_k=2, random_knowledge=True, **opts).read(data, "train")
    wow = tmp_path / "wow"
    wow.mkdir()
    for name in ("train.json", "test_random_split.json"):
        (wow / name).write_text(json.dumps(WOW))
    with pytest.raises(ConfigError, match="--gold-knowledge"):
        get_task("dialogue")(knowledge=True, gold_knowledge=True, random_knowledge=True).read(str(wow), "train")
    with pytest.raises(ConfigError, match="knowledge-seed"):
        get_task("dialogue")(knowledge_seed=-1)


def test_sample_seed_takes_another_sample_of_the_same_examples(tmp_path):
    data, opts = _setup(tmp_path)
    opts = {**opts, "knowledge": False, "train_examples": 0}
    default = get_task("dialogue")(**opts).read(data, "train")
    assert [e["id"] for e in get_task("dialogue")(sample_seed=0, **opts).read(data, "train")] == \
        [e["id"] for e in default]
    other = get_task("dialogue")(sample_seed=1, **opts).read(data, "train")
    assert sorted(e["id"] for e in other) == sorted(e["id"] for e in default)  # the same examples ...
    assert [e["id"] for e in other][:8] != [e["id"] for e in default][:8]  # ... in another order


def test_records_carry_the_kf1_passage_and_rescore_by_hand(tmp_path):
    data, opts = _setup(tmp_path)
    task = get_task("dialogue")(random_knowledge=True, **opts)
    examples = task.read(data, "train")[:3]
    preds = [examples[0]["knowledge_ref"], "indeed dude, perhaps surfers say so", "nothing in common"]
    recs = task.records(preds, examples)
    assert [r["knowledge"] for r in recs] == [e["knowledge_ref"] for e in examples]  # retrieved, not shown
    assert recs[0]["kf1"] == 1.0
    for r in recs:
        assert r["kf1"] == pytest.approx(hand_f1(r["prediction"], r["knowledge"]))
        assert r["f1"] == pytest.approx(hand_f1(r["prediction"], r["gold"]))
    m = task.metrics(preds, examples)
    assert m["kf1"] == pytest.approx(sum(r["kf1"] for r in recs) / 3) and 0 < m["kf1"] < 1


@needs(data=["wordnet"])
def test_wordnet_and_bundled_is_one_pool_of_both():
    ev = read_evidence(knowledge_path("wordnet+bundled"))
    wn, wiki = read_evidence(knowledge_path("wordnet")), read_evidence(BUNDLED_EVIDENCE)
    assert len(ev) == len(wn) + len(wiki) == 117659 + len(wiki) and len(set(ev.ids)) == len(ev)
    assert ev.ids[: len(wn)] == wn.ids and ev.ids[len(wn):] == [f"wiki{i}" for i in wiki.ids]
    assert ev.texts[len(wn)] == " ".join(wiki.texts[0].split()) and ev.titles[-1] == wiki.titles[-1]
