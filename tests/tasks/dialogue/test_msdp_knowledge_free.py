"""MSDP's knowledge-free control (``--knowledge-free``): the prompt's exact text on a tiny case, the same
training samples in the same order as stage 2's examples with only their knowledge left out, and an end-to-end
run with a tiny GPT (no dense encoder needed) whose per-reply f1 and kf1 are the hand-counted F1s."""
import json

import pytest

from mwb.core.config import ConfigError
from mwb.tasks.api.base import parse_task_args
from mwb.tasks.dialogue import msdp_prompts as mp
from mwb.tasks.dialogue.msdp import MSDP, SAMPLE
from tests.helpers.checkpoints import tiny_checkpoint

from .hand_f1 import hand_f1


def test_knowledge_free_prompt_text_is_exact():
    s = mp.Sample("Alaska", ("I want to go north.", "Somewhere cold, don't you think?"),
                  "Alaska is a U.S. state.", "Try Alaska, it's cold.")
    assert mp.knowledge_free_example(s) == ("Topic: Alaska. User says: Somewhere cold , do n't you think ? "
                                            "System replies: Try Alaska , it 's cold .")
    assert mp.knowledge_free_prompt([mp.knowledge_free_example(s), "E2 "], "Bears", "Are bears big?") == (
        "Topic: Alaska. User says: Somewhere cold , do n't you think ? System replies: Try Alaska , it 's cold . \n"
        "E2 \n"
        "Topic: Bears. User says: Are bears big ? System replies:")
    # the stage-2 example of the same sample differs by the knowledge part alone
    assert mp.response_example(s) == mp.knowledge_free_example(s).replace(
        " System replies:", " We know that: Alaska is a U.S. state . System replies:")


def test_knowledge_free_prompts_use_stage2s_samples_without_their_knowledge():
    """On the bundled sample: the knowledge-free prompt of each turn is the stage-2 examples (the same
    samples, seed and order) with every ``We know that: k`` removed, then the turn, without knowledge."""
    task = MSDP(knowledge_free=True, response_examples=5, seed=7)
    examples = task.read(SAMPLE, "seen")
    items = task.build(examples, runner=None)  # knowledge-free builds no stage-1 prompt: no encoder, no model
    samples = mp.response_samples(task.train, 7, 5)
    assert len(samples) == 5 and task.responses == mp.response_examples(task.train, 7, 5)
    stripped = [r.replace(f" We know that: {mp.tokenized(s.knowledge)}", "") for r, s in zip(task.responses, samples)]
    assert all("We know that" not in x for x in stripped)
    assert len(items) == len(examples) == 4
    for it, e in zip(items, examples):
        assert it["prompt"] == "".join(x + " \n" for x in stripped) + \
            f"Topic: {e['topic']}. User says: {mp.tokenized(e['turns'][-1])} System replies:"
        assert e["knowledge"] not in it["prompt"].rsplit("\n", 1)[1]
    other = MSDP(knowledge_free=True, response_examples=5, seed=8)
    other.read(SAMPLE, "seen")
    assert other.build(examples, None)[0]["prompt"] != items[0]["prompt"]  # the seed changes the examples


def test_knowledge_free_is_a_flag():
    assert parse_task_args(MSDP, ["--knowledge-free"]) == {"knowledge_free": True}
    assert MSDP().opts["knowledge_free"] is False
    with pytest.raises(ConfigError, match="knowledge"):
        parse_task_args(MSDP, ["--knowledge-fre"])


def test_knowledge_free_end_to_end_tiny_model(tmp_path):
    from mwb.tasks.api.evaluate import run_eval
    ckpt = tiny_checkpoint(str(tmp_path / "gpt"), "gpt-tiny", num_layers=1, hidden_size=32, num_attention_heads=2,
                           ffn_hidden_size=64, seq=512, max_position_embeddings=2048)
    report = run_eval("msdp", {"max_tokens": 6, "response_examples": 3, "knowledge_free": True, "split": "unseen"},
                      ckpt, None, str(tmp_path / "out"), None, 3)  # 3 of the 4 unseen turns
    m = report["metrics"]
    assert (m["count"], m["response_examples"]) == (3, 3) and "knowledge_f1" not in m
    recs = [json.loads(line) for line in open(tmp_path / "out" / "predictions.jsonl")]
    assert len(recs) == 3 and len({r["id"] for r in recs}) == 3
    for r in recs:  # one stage: a reply, no generated knowledge; kf1 still against the gold knowledge
        assert set(r["prediction"]) == {"response"} and "knowledge_f1" not in r
        assert r["f1"] == pytest.approx(hand_f1(r["prediction"]["response"], mp.tokenized(r["gold"]["response"])))
        assert r["kf1"] == pytest.approx(hand_f1(r["prediction"]["response"], r["gold"]["knowledge"]))
    for k in ("f1", "kf1"):
        assert m[k] == pytest.approx(sum(r[k] for r in recs) / len(recs), abs=1e-12)
