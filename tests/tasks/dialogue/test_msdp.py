"""MSDP: the stage-2 overlap filter keeps and drops what it should, both prompt formats are exact on fixed
inputs, stage-1 example selection follows similarity (same topic, else one per topic), and the task runs
end to end on the bundled sample with a tiny model (and MiniLM when installed)."""
import json

import numpy as np
import pytest

from mwb.tasks.dialogue import msdp_prompts as mp
from mwb.tasks.dialogue.data import Turn
from tests.helpers.checkpoints import tiny_checkpoint
from tests.helpers.needs import needs

from .hand_f1 import hand_f1

KNOW = "The aardvark is a medium-sized , burrowing , nocturnal mammal native to Africa ."  # 14 tokens


def sample(response, knowledge=KNOW, topic="Aardvark", turns=("What is an aardvark?",)):
    return mp.Sample(topic, tuple(turns), knowledge, response)


def test_copied_tokens_counts_runs_of_ten_or_more():
    k = "a b c d e f g h i j k".split()
    assert mp.copied_tokens("x a b c d e f g h i j y".split(), k) == 10  # one run of 10
    assert mp.copied_tokens("x a b c d e f g h i y".split(), k) == 0  # a run of 9 does not count
    assert mp.copied_tokens("a b c d e f g h i j k".split(), k) == 11  # a run that ends the response
    assert mp.copied_tokens("a b c d e f g h i j x a b c d e f g h i j".split(), k) == 20


@pytest.mark.parametrize("response,keep,why", [
    # 14 of 20 response tokens copied (70 %), all 14 knowledge tokens: kept
    ("Ha ! The aardvark is a medium-sized , burrowing , nocturnal mammal native to Africa . I saw one once", True,
     "60-90 % copied, covers the knowledge"),
    # the knowledge verbatim plus one word: 14 of 15 = 93 % copied -> dropped (too extractive)
    ("The aardvark is a medium-sized , burrowing , nocturnal mammal native to Africa . Wow", False, "> 90 %"),
    # 14 of 30 copied = 47 % -> dropped (too little of the reply is grounded)
    ("Well well , let me think about it for a moment . The aardvark is a medium-sized , burrowing , nocturnal "
     "mammal native to Africa . so there", False, "< 60 %"),
    # runs of 9 and 4 tokens: no run reaches 10 -> nothing counts as copied
    ("Yes ! The aardvark is a medium-sized , burrowing , nocturnal animal that is native to Africa .", False,
     "runs shorter than 10"),
])
def test_stage2_filter_on_made_sample(response, keep, why):
    assert mp.keeps_response_example(sample(response)) is keep, why


def test_stage2_filter_needs_knowledge_coverage_and_knowledge():
    long_k = KNOW + " It has a long pig-like snout , which is used to sniff out food ."  # 29 tokens
    reply = "Ha ! The aardvark is a medium-sized , burrowing , nocturnal mammal native to Africa . I saw one once"
    assert not mp.keeps_response_example(sample(reply, knowledge=long_k))  # 14 < 0.8 * 29
    assert not mp.keeps_response_example(sample(reply, knowledge=""))  # no knowledge used


def test_response_examples_are_the_kept_ones_shuffled_with_the_seed():
    kept = sample("Ha ! The aardvark is a medium-sized , burrowing , nocturnal mammal native to Africa . I saw one")
    train = [kept, sample("No idea .", knowledge=""), sample(kept.response, topic="Aardvark2")]
    out = mp.response_examples(train, seed=1234)
    assert len(out) == 2 and sorted(out) == sorted([mp.response_example(train[0]), mp.response_example(train[2])])
    order = [mp.response_example(train[0]), mp.response_example(train[2])]
    np.random.RandomState(1234).shuffle(order)
    assert out == order


def test_prompt_strings_are_exact():
    s = mp.Sample("Alaska", ("I want to go north.", "Where to?", "Somewhere cold, don't you think?"),
                  "Alaska is a U.S. state.", "Try Alaska, it's cold.")
    assert mp.knowledge_example(s) == "( Somewhere cold, don't you think? ) Alaska => Alaska is a U.S. state."
    assert mp.knowledge_prompt(["( a ) T => k1", "( b ) T => k2"], "Alaska", "Where?") == \
        "( a ) T => k1 \n( b ) T => k2 \n( Where? ) Alaska =>"
    assert mp.knowledge_query("Alaska", s.turns, unseen=True) == \
        "( Alaska ) I want to go north. Where to? Somewhere cold, don't you think?"
    assert mp.knowledge_query("Alaska", s.turns[-1:], unseen=False) == "Somewhere cold, don't you think?"
    assert mp.response_example(s) == ("Topic: Alaska. User says: Somewhere cold , do n't you think ? We know that: "
                                      "Alaska is a U.S. state . System replies: Try Alaska , it 's cold .")
    assert mp.response_prompt(["E1", "E2"], "Alaska", "Where to go?", "Alaska is big.") == \
        "E1 \nE2 \nTopic: Alaska. User says: Where to go ? We know that: Alaska is big . System replies:"


def test_wizard_samples_follow_the_wow_processing_rule():
    conv = {"id": "d", "topic": "Chosen", "turns": [
        Turn("Apprentice", "hi there"), Turn("Wizard", "Hello", knowledge="K1", topic="T1"),
        Turn("Apprentice", "ok?"), Turn("Wizard", "Fine!", knowledge=None, topic="Chosen")]}
    got = mp.wizard_samples([conv])
    assert got == [mp.Sample("T1", ("hi there.",), "K1", "Hello."),
                   mp.Sample("Chosen", ("hi there.", "Hello.", "ok?"), "", "Fine!")]


def test_stage1_selection_same_topic_by_similarity_else_one_per_topic():
    mk = lambda topic, k: mp.Sample(topic, ("u",), k, "r")  # noqa: E731
    train = [mk("A", "A one"), mk("A", "A two"), mk("B", "B one"), mk("B", "B two"), mk("C", "C one"),
             mk("D", "It is long"), mk("E", " ".join(["w"] * 21))]
    pool = mp.knowledge_pool(train, {"A", "Z"}, unseen=False)
    assert [s.knowledge for s in pool.samples] == ["A one", "A two", "B one", "B two", "C one"]  # D, E filtered
    emb = np.array([[1.0, 0], [0.9, 0.1], [0.2, 0.8], [0.1, 0.9], [0.5, 0.5]])
    assert mp.select_knowledge_examples(pool, emb, "A", np.array([1.0, 0.0]), 10) == \
        ["( u ) A => A two", "( u ) A => A one"]  # same topic, most similar last
    assert mp.select_knowledge_examples(pool, emb, "Z", np.array([0.0, 1.0]), 2) == \
        ["( u ) C => C one", "( u ) B => B two"]  # best of each topic, two topics
    unseen = mp.knowledge_pool([mk("A", "about A"), mk("A", "about A (x)"), mk("B", "nothing here")], {"Z"}, True)
    assert [s.knowledge for s in unseen.samples] == ["about A"]  # topic named, no brackets


ALASKA_K = "Alaska is a U.S. state situated in the northwest extremity of the Americas."
ALASKA_R = ("Where did she go? Many cruises go to Alaska, and Alaska is a U.S. state situated in the northwest "
            "extremity of the Americas.")


def test_metrics_on_fixed_predictions_equal_hand_counts():
    """F1 (reply vs gold reply), KF1 (reply vs gold knowledge) and knowledge F1 (stage-1 knowledge vs gold
    knowledge) on fixed predictions, counted by hand: after normalisation the gold knowledge has 11 tokens
    (alaska is u s state situated in northwest extremity of americas), the gold reply 21, the generated
    knowledge "Alaska is a U.S. state." 5 (all in the gold knowledge) and the reply "Many cruises go to
    Alaska." 5 (all in the gold reply, one in the gold knowledge)."""
    from mwb.tasks.dialogue.msdp import MSDP
    task = MSDP()
    task.responses = ["E1", "E2"]  # the stage-2 examples build() would fix; metrics only count them
    examples = [{"knowledge": ALASKA_K, "response": ALASKA_R},
                {"knowledge": KNOW, "response": "Maybe an aardvark ? " + KNOW}]
    preds = [{"knowledge": "Alaska is a U.S. state.", "response": "Many cruises go to Alaska."},
             {"knowledge": "", "response": "I have no idea ."}]
    m = task.metrics(preds, examples)
    assert m["knowledge_f1"] == pytest.approx((2 * 5 / (5 + 11) + 0.0) / 2)
    assert m["f1"] == pytest.approx((2 * 5 / (5 + 21) + 0.0) / 2)
    assert m["kf1"] == pytest.approx((2 * 1 / (5 + 11) + 0.0) / 2)
    assert (m["count"], m["response_examples"]) == (2, 2)
    recs = task.records(preds, examples)
    assert [r["f1"] for r in recs] == pytest.approx([hand_f1(p["response"], e["response"])
                                                     for p, e in zip(preds, examples)])
    assert [r["knowledge_f1"] for r in recs] == pytest.approx([10 / 16, 0.0])


@needs(models=["minilm-l6"])
def test_msdp_task_end_to_end_tiny_model(tmp_path):
    from tests.helpers.minilm import minilm_dir
    encoder = minilm_dir()
    from mwb.tasks.api.evaluate import run_eval
    ckpt = tiny_checkpoint(str(tmp_path / "gpt"), "gpt-tiny", num_layers=1, hidden_size=32, num_attention_heads=2,
                           ffn_hidden_size=64, seq=512, max_position_embeddings=2048)
    report = run_eval("msdp", {"max_tokens": 6, "encoder": encoder, "response_examples": 3}, ckpt, None,
                      str(tmp_path / "out"), None, 2)
    m = report["metrics"]
    assert m["count"] == 2 and m["response_examples"] == 3 and 0 <= m["f1"] <= 1 and 0 <= m["kf1"] <= 1
    recs = [json.loads(line) for line in open(tmp_path / "out" / "predictions.jsonl")]
    for r in recs:  # each turn's numbers are the hand-counted F1s of what the two stages generated
        assert r["knowledge_f1"] == pytest.approx(hand_f1(r["prediction"]["knowledge"], r["gold"]["knowledge"]))
        assert r["kf1"] == pytest.approx(hand_f1(r["prediction"]["response"], r["gold"]["knowledge"]))
    for k in ("f1", "kf1", "knowledge_f1"):
        assert m[k] == pytest.approx(sum(r[k] for r in recs) / len(recs), abs=1e-12)
