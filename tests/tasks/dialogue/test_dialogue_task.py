"""The ``dialogue`` task on samples written here: prompts with actor references from other conversations,
retrieved knowledge, WoW's gold knowledge, the actor-ID consistency measure, and TP2 = one process for
fine-tuning and greedy generation."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from mwb.tasks.dialogue import actor_ranker
from mwb.tasks.api.registry import get_task
from tests.helpers.checkpoints import TOKENIZER, tiny_checkpoint
from tests.helpers.cli import run_cli
from tests.helpers.distributed import run_ranks
from tests.helpers.needs import needs

from .hand_f1 import hand_f1
from .test_dialogue_data import WOW

STYLE = {"ann": "indeed quite lovely", "bob": "yo dude lol", "cat": "hmm perhaps maybe", "dan": "sure thing pal"}


def chitchat_sample(path, n: int = 80) -> str:
    actors = sorted(STYLE)
    data = {}
    for i in range(n):
        a, b = actors[i % 4], actors[(i + 1 + i // 4) % 4]
        if a == b:
            b = actors[(actors.index(a) + 1) % 4]
        turns = [[{"text": f"{STYLE[s]} number {i} turn {j}", "sender": s}] for j, s in enumerate([a, b, a, b])]
        data[f"conv{i:03d}"] = {"messages": turns}
    path.write_text(json.dumps(data))
    return str(path)


def test_actor_references_come_from_other_conversations(tmp_path):
    path = chitchat_sample(tmp_path / "dataset.json")
    opts = dict(held_out_actors=0.0, min_conversations=2, train_examples=0, eval_examples=0)
    with_refs = get_task("dialogue")(actors=True, references=2, **opts)
    train = with_refs.read(path, "train")
    from mwb.tasks.dialogue.data import read_chitchat, split_conversations
    parts = split_conversations(read_chitchat(path))  # the same hash split, computed here
    # every conversation has 4 turns: its 3 replies after the first turn are the examples
    assert len(train) == 3 * len(parts["train"]) == 216
    assert sorted(e["conversation"] for e in train) == sorted(c["id"] for c in parts["train"] for _ in range(3))
    for e in train[:40]:
        lines = e["prompt"].splitlines()
        assert lines[0] == "Reference utterances of B:" and lines[3] == "Conversation:" and lines[-1] == "B:"
        refs = [x[2:] for x in lines[1:3]]
        actor_texts = {t: cid for cid, t in with_refs.index[e["actor"]]}
        assert all(actor_texts[r] != e["conversation"] for r in refs)  # the actor's, from another conversation
        assert all(r.startswith(STYLE[e["actor"]]) for r in refs)
    plain = get_task("dialogue")(actors=True, references=0, **opts).read(path, "train")
    assert [e["target"] for e in plain] == [e["target"] for e in train]  # the same examples, no references
    assert plain[0]["prompt"].startswith("Conversation:\n")
    dev = get_task("dialogue")(**opts).read(path, "dev")  # the dev split's conversations, none of train's
    assert sorted(e["conversation"] for e in dev) == sorted(c["id"] for c in parts["dev"] for _ in range(3))
    assert len(dev) == 6


def test_knowledge_is_retrieved_and_is_the_kf1_reference(tmp_path):
    path = chitchat_sample(tmp_path / "dataset.json", 24)
    ev = tmp_path / "kb.tsv"
    ev.write_text("id\ttext\ttitle\n1\tlovely weather makes people say indeed\tWeather\n"
                  "2\tdude is slang used by surfers\tSlang\n3\tperhaps is an adverb of doubt\tDoubt\n")
    opts = dict(held_out_actors=0.0, min_conversations=1, train_examples=6, evidence=str(ev))
    rows = get_task("dialogue")(knowledge=True, **opts).read(path, "train")
    for e in rows:
        known = e["prompt"].split("\n")[1]
        assert e["prompt"].startswith("Knowledge:\n") and known == e["knowledge_ref"]
        query = " ".join(e["prompt"].splitlines()[-3:-1])  # the last two turns are the query
        keys = {"lovely": ("lovely", "indeed"), "dude": ("dude",), "perhaps": ("perhaps",)}
        if any(w in query for ws in keys.values() for w in ws):  # BM25 found a passage sharing a word
            assert any(w in query for w in keys[next(k for k in keys if k in known)]), (query, known)
    base = get_task("dialogue")(knowledge=True, top_k=0, **opts).read(path, "train")
    assert [e["knowledge_ref"] for e in base] == [e["knowledge_ref"] for e in rows]
    assert all("Knowledge:" not in e["prompt"] for e in base)


def test_training_knowledge_can_be_chosen_with_the_gold_response(tmp_path):
    """--train-knowledge response: training prompts show the passage retrieved for the reply itself (what
    the reply draws on); evaluation prompts still retrieve with the context alone."""
    data = {f"c{i}": {"messages": [[{"text": "what do you like to eat", "sender": "a"}],
                                   [{"text": ["i love pizza with cheese", "volcanoes erupt lava"][i % 2], "sender": "b"}]]}
            for i in range(40)}
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps(data))
    ev = tmp_path / "kb.tsv"
    ev.write_text("id\ttext\ttitle\n1\tPizza is a dish of bread with cheese\tPizza\n"
                  "2\tA volcano erupts lava and ash\tVolcano\n3\tPeople like to eat what they know\tFood\n")
    opts = dict(knowledge=True, evidence=str(ev), held_out_actors=0.0, min_conversations=1, eval_examples=0)
    task = get_task("dialogue")(train_knowledge="response", **opts)
    train = task.read(str(path), "train")
    for e in train:
        assert e["knowledge_ref"].startswith("Pizza" if "pizza" in e["target"] else "A volcano"), e
    by_context = get_task("dialogue")(**opts).read(str(path), "train")
    assert {e["knowledge_ref"] for e in by_context} == {"People like to eat what they know"}
    dev = task.read(str(path), "dev")
    assert dev and {e["knowledge_ref"] for e in dev} == {"People like to eat what they know"}
    from mwb.core.config import ConfigError
    with pytest.raises(ConfigError, match="--train-knowledge must be one of context, response"):
        get_task("dialogue")(train_knowledge="gold")


def test_wow_wizard_turns_and_gold_knowledge(tmp_path):
    (tmp_path / "train.json").write_text(json.dumps(WOW))
    (tmp_path / "test_random_split.json").write_text(json.dumps(WOW))
    task = get_task("dialogue")(knowledge=True, gold_knowledge=True)
    rows = task.read(str(tmp_path), "dev")  # no valid split: the seen test split
    assert [e["target"] for e in rows if e["conversation"]] and len(rows) == 3
    by_target = {e["target"]: e for e in rows}
    e = by_target["The sky looks blue by Rayleigh scattering."]
    assert "Knowledge:\nRayleigh scattering makes the sky blue.\nConversation:" in e["prompt"]
    assert e["knowledge_ref"] == "Rayleigh scattering makes the sky blue." and e["topic"] == "Sky"
    assert e["prompt"].endswith("A: And the sky?\nB:")  # the Apprentice is A, the Wizard B
    assert by_target["Not sure."]["knowledge_ref"] is None
    scored = [by_target[t] for t in ["The sky looks blue by Rayleigh scattering.", "Not sure.",
                                     "Blue is one of the three primary colours!"]]
    m, records = task.evaluation(["Rayleigh scattering", "", "x"], scored)
    # "rayleigh scattering" vs "sky looks blue by rayleigh scattering": p 1, r 2/6 -> F1 1/2; vs the knowledge
    # "rayleigh scattering makes sky blue": p 1, r 2/5 -> KF1 4/7; the other two score 0
    assert m["f1"] == pytest.approx(0.5 / 3) and m["kf1"] == pytest.approx(4 / 7 / 3)
    replies = [json.loads(line) for line in task.files(m, records, scored)["replies.jsonl"].splitlines()]
    assert [r["reply"] for r in replies] == ["Rayleigh scattering", "", "x"]
    assert replies[1]["gold"] == "Not sure." and replies[0]["prompt"].endswith("B:")


class FakeRanker:
    """Embeds by keyword: one axis per actor's style word (a test double for MiniLM)."""
    words = ["indeed", "yo", "hmm", "sure"]

    def embed(self, texts):
        v = np.array([[float(w in t.split()) for w in self.words] + [1e-3] for t in texts])
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    profiles = actor_ranker.ActorRanker.profiles


def test_consistency_counts_replies_assigned_to_their_actor():
    index = {a: [(f"other{i}", f"{STYLE[a]} {i}") for i in range(3)] for a in STYLE}
    examples = [{"actor": a, "conversation": f"c{i}"} for i, a in enumerate(sorted(STYLE))]
    replies = ["indeed yes", "yo", "sure", "sure"]  # ann, bob right; cat wrong (sounds like dan); dan right
    out = actor_ranker.consistency(FakeRanker(), replies, examples, index, n=4, golds=["indeed", "yo", "hmm", "sure"])
    assert out["consistency"] == 0.75 and out["consistency_gold"] == 1.0 and out["consistency_chance"] == 0.25
    assert actor_ranker.candidate_actors("ann", sorted(STYLE), 3, "k")[0] == "ann"


def _gen_worker(rank, world, ckpt, prompts):
    from mwb.core.compose import build_model, full_state
    from mwb.core.parallel import ParallelDims, build_state
    from mwb.core.tokenizers import load_tokenizer
    from mwb.evaluation.generation import SamplingParams, generate
    from mwb.evaluation.lm import LanguageModel
    from mwb.tasks.api.encoder_model import copy_available

    tok = load_tokenizer(TOKENIZER)
    state = build_state(ParallelDims(world_size=world, tp=world))
    cfg, vocab, tensors, _ = full_state(ckpt)
    model = build_model(cfg.model, state, vocab, seed=0)
    missing = []
    copy_available([model], tensors, vocab, cfg.model.tie_embeddings, ckpt, missing)
    assert not missing, missing
    model.eval()
    lm = LanguageModel(model, tok, state=state)
    ids = [tok.encode(p) for p in prompts]
    return [g.tokens for g in generate(lm, ids, SamplingParams(max_tokens=8, temperature=0.0), batch_size=2)]


def _mwb(*args):
    proc = subprocess.run([sys.executable, "-m", "mwb", *args], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]


def _losses(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [r["loss"] for r in map(json.loads, f) if "split" not in r]


@pytest.mark.multiprocess
def test_finetune_and_generation_tp2_equal_one_process(tmp_path):
    ckpt = tiny_checkpoint(str(tmp_path / "gpt"), "gpt-tiny", seq=128, num_layers=2, hidden_size=64)
    data = chitchat_sample(tmp_path / "dataset.json", 40)
    common = ["dialogue", "--actors", "--checkpoint", ckpt, "--data", data, "--global-batch-size", "8",
              "--micro-batch-size", "4", "--epochs", "1", "--lr", "1e-3", "--train-examples", "24",
              "--eval-examples", "8", "--held-out-actors", "0", "--min-conversations", "2",
              "--ranker-candidates", "0", "--max-tokens", "6", "--set", "logging.progress=false"]
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    _mwb("finetune", *common, "--out", one)
    _mwb("finetune", *common, "--out", two, "--nproc", "2", "--tp", "2")
    a, b = _losses(one), _losses(two)
    assert len(a) == len(b) == 3
    assert max(abs(x - y) / abs(x) for x, y in zip(a, b)) < 1e-5, (a, b)
    res = json.load(open(os.path.join(one, "results.json")))
    assert res["metrics"]["dev_ppl"] == pytest.approx(math.exp(res["metrics"]["dev_loss"]), rel=1e-12)
    assert res["metrics"]["dev_loss"] == pytest.approx(json.load(open(os.path.join(two, "results.json")))
                                                       ["metrics"]["dev_loss"], rel=1e-5)  # TP2 = one process
    best = res["best_checkpoint"]
    prompts = [e["prompt"] for e in get_task("dialogue")(actors=True, held_out_actors=0.0, min_conversations=2,
                                                          eval_examples=3).read(data, "dev")]
    ranks = run_ranks(_gen_worker, 2, best, prompts, timeout_s=300)
    want = _gen_worker(0, 1, best, prompts)
    assert ranks[0] == ranks[1] == want


def test_finetune_learns_the_planted_actor_styles(tmp_path, capsys):
    """Every reply is its actor's fixed phrase plus counters: a tiny GPT's dev perplexity (exp of the mean
    dev target-token loss) falls every epoch, and ``f1`` is the mean of the records' unigram F1, recomputed
    by hand from each greedy reply and its gold reply."""
    ckpt = tiny_checkpoint(str(tmp_path / "gpt"), "gpt-tiny", seq=128, num_layers=2, hidden_size=64)
    data = chitchat_sample(tmp_path / "dataset.json", 40)
    out = str(tmp_path / "run")
    code, _, err = run_cli(["finetune", "dialogue", "--actors", "--checkpoint", ckpt, "--data", data,
                            "--global-batch-size", "8", "--micro-batch-size", "8", "--epochs", "4", "--lr", "1e-3",
                            "--train-examples", "24", "--eval-examples", "8", "--held-out-actors", "0",
                            "--min-conversations", "2", "--ranker-candidates", "0", "--max-tokens", "6",
                            "--set", "logging.progress=false", "--out", out], capsys)
    assert code in (0, None), err
    res = json.load(open(os.path.join(out, "results.json")))
    ppl = [e["dev_ppl"] for e in res["epochs"]]
    assert all(e["dev_ppl"] == pytest.approx(math.exp(e["dev_loss"]), rel=1e-12) for e in res["epochs"])
    assert len(ppl) == 4 and all(b < a for a, b in zip(ppl, ppl[1:])) and ppl[-1] < 0.7 * ppl[0], ppl
    recs = [json.loads(line) for line in open(os.path.join(out, "predictions.jsonl"))]
    assert len(recs) == res["metrics"]["count"] > 0
    hand = [hand_f1(r["prediction"], r["gold"]) for r in recs]
    assert [r["f1"] for r in recs] == pytest.approx(hand, abs=1e-12)
    assert res["metrics"]["f1"] == pytest.approx(sum(hand) / len(hand), abs=1e-12)


def test_bad_data_and_options_are_one_line_errors(tmp_path, capsys):
    from tests.helpers.cli import run_cli

    ckpt = tiny_checkpoint(str(tmp_path / "gpt"), "gpt-tiny", seq=64, num_layers=1, hidden_size=32)
    code, _, err = run_cli(["eval", "dialogue", "--checkpoint", ckpt, "--data", str(tmp_path / "missing.json")], capsys)
    assert code == 1 and "not found" in err and len(err.strip().splitlines()) == 1, err
    bad = tmp_path / "dataset.json"
    bad.write_text('{"c1": {"turns": []}}')
    code, _, err = run_cli(["eval", "dialogue", "--checkpoint", ckpt, "--data", str(bad)], capsys)
    assert code == 1 and "no 'messages' list" in err, err
    code, _, err = run_cli(["eval", "dialogue", "--checkpoint", ckpt, "--retriever", "tfidf"], capsys)
    assert code == 2 and "--retriever must be one of bm25, dpr" in err, err


@needs(models=["minilm-l6"])
def test_dense_retriever_finds_the_related_passage(tmp_path):
    from tests.helpers.minilm import minilm_dir
    minilm_dir()  # skips without all-MiniLM-L6-v2
    conv = {"c1": {"messages": [[{"text": "I just adopted a puppy, she barks all night", "sender": "x"}],
                                [{"text": "aww what breed?", "sender": "y"}]]}}
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps(conv))
    ev = tmp_path / "kb.tsv"
    ev.write_text("id\ttext\ttitle\n1\tThe stock market fell sharply on Monday.\tMarkets\n"
                  "2\tDogs are domesticated animals; young dogs are called puppies.\tDog\n"
                  "3\tThe volcano erupted in 1883.\tKrakatoa\n")
    task = get_task("dialogue")(knowledge=True, retriever="dpr", evidence=str(ev), held_out_actors=0.0,
                                min_conversations=1)
    (e,) = task.read(str(path), "train")
    assert e["knowledge_ref"].startswith("Dogs are domesticated animals")
