"""``--reply-ppl`` and per-reply consistency: what lets two dialogue runs on the same replies pair item by item.

The gold replies' perplexity at evaluation is computed per reply (its prompt, then its tokens and the closing
end-of-document); fine-tuning's dev loss is the same quantity computed by the trainer over padded batches, so
when the dev batches cover every reply the two agree. The actor ranker's 0/1 per reply averages to
``consistency``."""
from __future__ import annotations

import json
import math
import os

import pytest

from mwb.evaluation.predictions import aggregate
from mwb.tasks.api.registry import get_task
from mwb.tasks.dialogue import actor_ranker
from tests.helpers.checkpoints import tiny_checkpoint
from tests.helpers.cli import run_cli
from tests.helpers.records import assert_run_dir

from .test_dialogue_task import STYLE, FakeRanker, chitchat_sample


def test_reply_ppl_per_reply_equals_the_fine_tuning_dev_perplexity(tmp_path, capsys):
    ckpt = tiny_checkpoint(str(tmp_path / "gpt"), "gpt-tiny", seq=128, num_layers=1, hidden_size=32)
    data = chitchat_sample(tmp_path / "dataset.json", 40)
    out = str(tmp_path / "run")
    code, _, err = run_cli(["finetune", "dialogue", "--actors", "--references", "2", "--reply-ppl",
                            "--checkpoint", ckpt, "--data", data, "--global-batch-size", "2",
                            "--micro-batch-size", "2", "--epochs", "1", "--lr", "1e-3", "--train-examples", "4",
                            "--eval-examples", "6", "--held-out-actors", "0", "--min-conversations", "2",
                            "--ranker-candidates", "0", "--max-tokens", "4", "--set", "logging.progress=false",
                            "--out", out], capsys)
    assert code in (0, None), err
    metrics = json.load(open(os.path.join(out, "results.json")))["metrics"]
    recs = [json.loads(line) for line in open(os.path.join(out, "predictions.jsonl"))]
    assert len(recs) == 6 and all(r["reply_ppl"]["tokens"] > 1 and r["reply_ppl"]["nll"] > 0 for r in recs)
    # three dev batches of 2 = every reply: the trainer's masked target loss and the per-reply scores agree
    assert metrics["reply_ppl"] == pytest.approx(metrics["dev_ppl"], rel=1e-5)
    assert metrics["reply_tokens"] == sum(r["reply_ppl"]["tokens"] for r in recs)
    assert "reply_ppl" in assert_run_dir(out, at_least=2)
    total = sum(r["reply_ppl"]["nll"] for r in recs) / sum(r["reply_ppl"]["tokens"] for r in recs)
    assert aggregate(recs, "reply_ppl") == pytest.approx(math.exp(total), rel=1e-12)


def test_consistency_hits_are_per_reply_and_average_to_the_share():
    index = {a: [(f"other{i}", f"{STYLE[a]} {i}") for i in range(3)] for a in STYLE}
    examples = [{"actor": a, "conversation": f"c{i}"} for i, a in enumerate(sorted(STYLE))]
    replies = ["indeed yes", "yo", "sure", "sure"]  # ann, bob right; cat wrong (sounds like dan); dan right
    out, hits = actor_ranker.consistency_hits(FakeRanker(), replies, examples, index, n=4,
                                              golds=["indeed", "yo", "hmm", "sure"])
    assert hits == {"consistency": {0: 1, 1: 1, 2: 0, 3: 1}, "consistency_gold": {0: 1, 1: 1, 2: 1, 3: 1}}
    assert out == actor_ranker.consistency(FakeRanker(), replies, examples, index, n=4,
                                           golds=["indeed", "yo", "hmm", "sure"])


def test_dialogue_records_carry_the_rankers_verdict_per_reply(tmp_path, monkeypatch):
    import mwb.retrieval.qa_system as system
    monkeypatch.setattr(system, "minilm_dir", lambda: str(tmp_path))
    monkeypatch.setattr(actor_ranker, "ActorRanker", lambda encoder: FakeRanker())
    path = chitchat_sample(tmp_path / "dataset.json", 40)
    task = get_task("dialogue")(actors=True, references=1, held_out_actors=0.0, min_conversations=2,
                                eval_examples=8, ranker_candidates=3)
    examples = task.read(path, "dev")
    replies = [STYLE[e["actor"]] if n % 2 else "hmm" for n, e in enumerate(examples)]
    results = [{"reply": r, "nll": 2.0 + n, "tokens": 3} for n, r in enumerate(replies)]
    metrics = task.metrics(results, examples)
    recs = task.records(results, examples)
    assert [r["prediction"] for r in recs] == replies
    assert [r["reply_ppl"] for r in recs] == [{"nll": 2.0 + n, "tokens": 3} for n in range(len(examples))]
    assert metrics["reply_ppl"] == pytest.approx(math.exp(sum(2.0 + n for n in range(len(examples))) / (3 * len(examples))))
    for name in ("consistency", "consistency_gold", "reply_ppl", "f1"):
        assert aggregate(recs, name) == pytest.approx(metrics[name], abs=1e-12), name
    assert [r["consistency_gold"] for r in recs] == [1] * len(examples)  # each gold reply is its actor's phrase
    assert all(r["consistency"] == 1 for r in recs[1::2])  # the actor's own phrase
    _, hits = actor_ranker.consistency_hits(FakeRanker(), replies, examples, task.index, 3)
    assert [r["consistency"] for r in recs] == [hits["consistency"][n] for n in range(len(examples))]
    # records are a function of their inputs: a fresh task that never computed metrics() gives the same
    fresh = get_task("dialogue")(actors=True, references=1, held_out_actors=0.0, min_conversations=2,
                                 eval_examples=8, ranker_candidates=3)
    assert fresh.records(results, [dict(e) for e in fresh.read(path, "dev")]) == recs
