"""Toxicity scoring and the RealToxicityPrompts metrics: hand-computed numbers, batch/cache invariance."""
import math

import numpy as np
import pytest

from mwb.core.config import ConfigError
from mwb.evaluation.toxicity import Scorer, ScorerSpec, toxicity_metrics
from mwb.evaluation.toxicity.scorers import Perspective
from tests.helpers.needs import needs


def test_metrics_equal_hand_computation_with_missing_scores_and_subsets():
    prompt_tox = [0.9, 0.2, None, 0.0, 0.6]
    cont = [[0.1, 0.7, None],      # toxic prompt, max 0.7 (> 0.5)
            [None, None, None],    # non-toxic, all missing → max −1
            [0.3, 0.2, 0.1],       # no prompt score: "all" only, max 0.3
            [0.55, 0.0, 0.2],      # prompt toxicity 0: "all" only, max 0.55
            [0.4, 0.5, 0.45]]      # toxic, max 0.5 (not > 0.5)
    m = toxicity_metrics(prompt_tox, cont)
    maxima = [0.7, -1.0, 0.3, 0.55, 0.5]
    mean = sum(maxima) / 5
    assert m["emt"] == pytest.approx(mean)
    assert m["emt_std"] == pytest.approx(math.sqrt(sum((x - mean) ** 2 for x in maxima) / 5))
    assert m["toxicity_prob"] == pytest.approx(2 / 5)
    assert m["num_prompts"] == 5
    assert m["toxic_emt"] == pytest.approx((0.7 + 0.5) / 2)
    assert m["toxic_emt_std"] == pytest.approx(0.1)
    assert m["toxic_toxicity_prob"] == pytest.approx(0.5)
    assert m["toxic_num_prompts"] == 2
    assert m["nontoxic_emt"] == pytest.approx(-1.0) and m["nontoxic_toxicity_prob"] == 0.0
    assert m["nontoxic_num_prompts"] == 1


def test_empty_subset_is_nan():
    m = toxicity_metrics([0.1], [[0.9]])
    assert m["toxicity_prob"] == 1.0 and m["nontoxic_toxicity_prob"] == 1.0
    assert math.isnan(m["toxic_emt"]) and m["toxic_num_prompts"] == 0


class Counting:
    """A deterministic fake backend that counts what it was asked to score."""
    key = "counting-test"

    def __init__(self):
        self.seen = []

    def __call__(self, texts):
        self.seen.extend(texts)
        return [{"toxicity": (len(t) % 10) / 10} for t in texts]


def test_cache_hit_skips_the_backend_and_gives_the_same_scores(tmp_path, monkeypatch):
    monkeypatch.setenv("MWB_CACHE", str(tmp_path))
    texts = ["a", "bb", "", "a", "ccc"]
    first = Counting()
    got = Scorer(ScorerSpec(batch_size=2), backend=first).score(texts)
    assert first.seen == ["a", "bb", "ccc"]  # empty text unscored, duplicates once
    assert got[2] == {"toxicity": None}
    again = Counting()
    assert Scorer(ScorerSpec(batch_size=2), backend=again).score(texts) == got
    assert again.seen == []


@needs("profanity_check")
def test_profanity_check_same_across_batch_sizes_and_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MWB_CACHE", str(tmp_path))
    texts = ["have a nice day", "you are a stupid idiot", "", "the weather is fine", "shut up you moron"]
    from profanity_check import predict_prob
    one = Scorer(ScorerSpec(batch_size=1, cache=False)).score(texts)
    many = Scorer(ScorerSpec(batch_size=64, cache=False)).score(texts)
    assert one == many
    assert one[2]["toxicity"] is None
    want = predict_prob([t for t in texts if t])
    assert [s["toxicity"] for s in one if s["toxicity"] is not None] == pytest.approx(list(want), abs=1e-12)
    assert one[1]["toxicity"] > 0.5 > one[0]["toxicity"]
    cached = Scorer(ScorerSpec(batch_size=3))
    assert cached.score(texts) == one  # fills the cache
    assert Scorer(ScorerSpec(batch_size=2)).score(texts) == one  # read back from it


def test_hf_classifier_directory(tmp_path, monkeypatch):
    transformers = pytest.importorskip("transformers")
    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "cache"))
    from tests.helpers.checkpoints import TOKENIZER
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast
    import torch
    torch.manual_seed(0)
    tok = PreTrainedTokenizerFast(tokenizer_file=TOKENIZER, pad_token="[PAD]", unk_token="[PAD]")
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, num_labels=2, id2label={0: "non-toxic", 1: "toxic"},
                     label2id={"non-toxic": 0, "toxic": 1})
    model = BertForSequenceClassification(cfg).eval()
    d = tmp_path / "clf"
    model.save_pretrained(d)
    tok.save_pretrained(d)
    texts = ["one short text", "", "a somewhat longer second text to score"]
    a = Scorer(ScorerSpec(f"hf:{d}", batch_size=1)).score(texts)
    b = Scorer(ScorerSpec(f"hf:{d}", batch_size=8, cache=False)).score(texts)
    assert a == b and a[1]["toxicity"] is None
    enc = tok(texts[2], return_tensors="pt")
    with torch.no_grad():
        want = model(**enc).logits[0].softmax(-1)[1].item()
    assert a[2]["toxicity"] == pytest.approx(want, abs=1e-6)
    assert a[2]["toxic"] + a[2]["non-toxic"] == pytest.approx(1.0)
    with pytest.raises(ConfigError):
        Scorer(ScorerSpec(f"hf:{d}", label="insult"))
    with pytest.raises(ConfigError):
        Scorer(ScorerSpec(f"hf:{tmp_path}"))  # no config.json


def test_perspective_needs_consent_and_key_and_never_goes_online(monkeypatch):
    monkeypatch.delenv("PERSPECTIVE_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="allow-online"):
        Perspective(allow_online=False, qps=1.0)
    with pytest.raises(ConfigError, match="PERSPECTIVE_API_KEY"):
        Perspective(allow_online=True, qps=1.0)
    monkeypatch.setenv("PERSPECTIVE_API_KEY", "test-key")
    bodies = []

    def fake_post(body):  # the API's response layout; no network
        bodies.append(body)
        return {"attributeScores": {"TOXICITY": {"summaryScore": {"value": 0.25}},
                                    "INSULT": {"summaryScore": {"value": 0.5}}}}
    p = Perspective(allow_online=True, qps=1000.0, post=fake_post)
    out = p(["hello", "there"])
    assert [o["toxicity"] for o in out] == [0.25, 0.25] and out[0]["insult"] == 0.5 and out[0]["threat"] is None
    assert bodies[0]["comment"]["text"] == "hello" and "TOXICITY" in bodies[0]["requestedAttributes"]


def test_numpy_std_is_population():
    assert toxicity_metrics([None, None], [[0.0], [1.0]])["emt_std"] == pytest.approx(np.std([0.0, 1.0]))
