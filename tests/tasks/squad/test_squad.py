"""SQuAD: the JSON reader, doc-stride windows and their labels, n-best decoding across windows, the v2.0
null-threshold rule, and a fine-tuning run that `mwb eval squad` reproduces."""
import json
import os
import string
from collections import Counter

import numpy as np
import pytest

from mwb.core.config import ConfigError
from mwb.core.errors import DataError
from mwb.core.tokenizers import load_tokenizer
from mwb.tasks.squad.task import Squad
from mwb.tasks.squad.data import Windowing, read_squad, split_words, windows
from tests.helpers.cli import run_cli
from tests.tasks.encoder_helpers import TOKENIZER, tiny_bert_checkpoint

CONTEXT = ("The river Avon flows through the old town of Stratford where the poet William Shakespeare was born "
           "in the spring of 1564 and where he later bought a large house called New Place near the church.")


def squad_json(path, qas, context=CONTEXT):
    with open(path, "w") as f:
        json.dump({"version": "x", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}, f)
    return str(path)


def qa(i, question, answer=None):
    if answer is None:
        return {"id": f"q{i}", "question": question, "answers": [], "is_impossible": True}
    return {"id": f"q{i}", "question": question, "answers": [{"text": answer, "answer_start": CONTEXT.index(answer)}]}


def test_words_and_reader(tmp_path):
    words, of = split_words("  a bc\td ")
    assert words == ["a", "bc", "d"] and of[2] == 0 and of[4] == 1 and of[7] == 2
    ex = read_squad(squad_json(tmp_path / "dev-v2.0.json", [qa(0, "Who?", "William Shakespeare"), qa(1, "Why?")]))
    assert ex[0]["span"] == (13, 14) and ex[0]["answers"] == ["William Shakespeare"]
    assert ex[1]["span"] is None and ex[1]["answers"] == []
    assert len(Squad(version="2.0").read(str(tmp_path), "dev")) == 2
    bad = qa(2, "Who?", "William Shakespeare")
    bad["answers"][0]["answer_start"] += 1
    with pytest.raises(DataError, match="q2: answer 'William Shakespeare' is not at answer_start"):
        read_squad(squad_json(tmp_path / "bad.json", [bad]))
    with pytest.raises(ConfigError, match="--version must be one of 1.1, 2.0"):
        Squad(version="3")


def test_windows_cover_the_context_and_label_the_answer_where_it_fits():
    tok = load_tokenizer(TOKENIZER)
    words, _ = split_words(CONTEXT)
    example = {"id": "q", "question": "Who was born?", "words": words, "span": (13, 14)}
    feats = windows(example, 3, tok, Windowing(seq_length=32, doc_stride=8))
    assert len(feats) > 2 and all(f["tokens"].shape == (32,) and int(f["example"]) == 3 for f in feats)
    seen = sorted({int(w) for f in feats for w in f["word"] if w >= 0})
    assert seen == list(range(len(words)))  # every word is in some window
    answer = tok.encode_batch(words[13:15])
    labelled = [f for f in feats if f["label"].tolist() != [0, 0]]
    assert labelled, "some window holds the answer"
    for f in labelled:
        s, e = f["label"].tolist()
        assert f["tokens"][s:e + 1].tolist() == answer[0] + answer[1] and f["types"][s] == 1
    whole = len(answer[0]) + len(answer[1])
    for f in feats:  # a window is labelled exactly when it holds every token of the answer
        inside = int(np.isin(f["word"], [13, 14]).sum())
        assert (f["label"].tolist() != [0, 0]) == (inside == whole)


def _logits(feat, best=None, null=0.0, seq=32):
    s, e = np.full(seq, -5.0, dtype=np.float32), np.full(seq, -5.0, dtype=np.float32)
    s[0] = e[0] = null / 2
    if best:
        (i, j), score = best
        s[i], e[j] = score / 2, score / 2
    return s, e


def test_nbest_pools_windows_and_null_threshold_rule():
    tok = load_tokenizer(TOKENIZER)
    words, _ = split_words(CONTEXT)
    example = {"id": "q", "question": "Who was born?", "words": words, "span": (13, 14), "answers": ["x"]}
    feats = windows(example, 0, tok, Windowing(seq_length=32, doc_stride=8))
    target = next(f for f in feats if f["label"].tolist() != [0, 0])
    other = next(f for f in feats if f is not target)
    pos = lambda f, w: int(np.where(f["word"] == w)[0][0])  # noqa: E731
    outs = [_logits(f, ((pos(f, 13), pos(f, 14)), 4.0) if f is target else
                    ((pos(other, int(other["word"][other["word"] >= 0][0])),) * 2, 3.0) if f is other else None,
                    null=1.0) for f in feats]
    pred = Squad().predictions(outs, feats, [example])[0]
    assert pred["text"] == "William Shakespeare" and pred["null_margin"] == pytest.approx(1.0 - 4.0)
    rng = np.random.default_rng(0)
    for _ in range(20):  # v2.0: empty exactly when null − best span > threshold
        t, null = rng.normal(), rng.normal(0, 3)
        outs = [_logits(f, ((pos(f, 13), pos(f, 14)), 1.0) if f is target else None, null=null) for f in feats]
        p = Squad(version="2.0", null_threshold=t).predictions(outs, feats, [example])[0]
        assert (p["text"] == "") == (null - 1.0 > t) and p["span_text"] == "William Shakespeare"


def test_v2_metrics_split_hasans_noans():
    task = Squad(version="2.0")
    examples = [{"answers": ["William Shakespeare"]}, {"answers": ["1564"]}, {"answers": []}, {"answers": []}]
    preds = [{"text": "Shakespeare", "span_text": "Shakespeare", "null_margin": -2.0},
             {"text": "", "span_text": "1564", "null_margin": 0.5},
             {"text": "", "span_text": "a house", "null_margin": 1.0},
             {"text": "", "span_text": "the town", "null_margin": 2.0}]
    m = task.metrics(preds, examples)
    assert m["HasAns_total"] == 2 and m["NoAns_total"] == 2
    assert m["HasAns_exact"] == 0.0 and m["HasAns_f1"] == pytest.approx(100 * (2 / 3) / 2)
    assert m["NoAns_exact"] == m["NoAns_f1"] == 100.0 and m["exact"] == 50.0
    assert m["best_exact"] == 75.0 and m["best_exact_threshold"] == 0.5  # answers q2, leaves q3/q4 empty


def test_best_threshold_equals_brute_force():
    from mwb.evaluation.squad_metrics import best_null_threshold, squad_v2_scores
    rng = np.random.default_rng(1)
    answers = [["red cat"] if rng.random() < 0.6 else [] for _ in range(40)]
    spans = [a[0] if a and rng.random() < 0.7 else "blue dog" for a in answers]
    margins = [float(np.round(rng.normal(), 1)) for _ in answers]  # ties included
    got = best_null_threshold(spans, margins, answers)
    for key in ("exact", "f1"):
        brute = max(squad_v2_scores([s if m <= t else "" for s, m in zip(spans, margins)], answers)[key]
                    for t in [min(margins) - 1] + margins)
        t = got[f"best_{key}_threshold"]
        assert got[f"best_{key}"] == pytest.approx(brute)
        assert squad_v2_scores([s if m <= t else "" for s, m in zip(spans, margins)], answers)[key] == \
            pytest.approx(brute)


def _norm(text):
    """SQuAD's normalisation, written out: lower case, punctuation deleted, no a/an/the, single spaces."""
    text = "".join(c for c in text.lower() if c not in string.punctuation)
    return [w for w in text.split() if w not in ("a", "an", "the")]


def _hand_f1(pred, gold):
    p, g = _norm(pred), _norm(gold)
    same = sum((Counter(p) & Counter(g)).values())
    return 0.0 if same == 0 else 2 * same / (len(p) + len(g))


def test_finetune_v1_learns_the_planted_answer_and_scores_by_hand(tmp_path, capsys):
    """The answer is always the name after "the guard ... is": a tiny BERT's dev exact match rises from its
    first epoch to its fourth and ends high, and every record's EM / F1 equals the SQuAD rule written out."""
    ckpt = tiny_bert_checkpoint(str(tmp_path / "bert"), seq=48)
    names = ["Anna", "Boris", "Clara", "David", "Elena", "Felix", "Greta", "Hugo"]
    for split, n in (("train", 16), ("dev", 8)):
        data = []
        for i in range(n):
            context = f"The guard at the gate today is {names[i % 8]} and the weather is mild as it was yesterday ."
            q = {"id": f"{split}{i}", "question": "Who is the guard?",
                 "answers": [{"text": names[i % 8], "answer_start": context.index(names[i % 8])}]}
            data.append({"title": "t", "paragraphs": [{"context": context, "qas": [q]}]})
        (tmp_path / f"{split}-v1.1.json").write_text(json.dumps({"data": data}))
    out = str(tmp_path / "ft")
    code, _, err = run_cli(["finetune", "squad", "--version", "1.1", "--doc-stride", "8", "--checkpoint", ckpt,
                            "--data", str(tmp_path), "--epochs", "4", "--lr", "1e-3", "--global-batch-size", "8",
                            "--micro-batch-size", "8", "--seq-length", "24", "--set", "logging.progress=false",
                            "--out", out], capsys)
    assert code in (0, None), err
    run = json.load(open(os.path.join(out, "results.json")))
    em = [e["exact_match"] for e in run["epochs"]]
    assert len(em) == 4 and em[-1] > em[0] and em[-1] >= 75.0, em
    recs = [json.loads(line) for line in open(os.path.join(out, "predictions.jsonl"))]
    assert len(recs) == 8
    for r in recs:
        assert r["exact_match"] == 100.0 * max(_norm(r["prediction"]) == _norm(g) for g in r["gold"])
        assert r["f1"] == pytest.approx(100.0 * max(_hand_f1(r["prediction"], g) for g in r["gold"]))
    assert run["metrics"]["f1"] == pytest.approx(sum(r["f1"] for r in recs) / 8)
    assert run["metrics"]["exact_match"] == pytest.approx(sum(r["exact_match"] for r in recs) / 8)


def test_finetune_v2_and_eval_reproduces(tmp_path, capsys):
    ckpt = tiny_bert_checkpoint(str(tmp_path / "bert"), seq=48)
    names = ["Anna", "Boris", "Clara", "David", "Elena", "Felix", "Greta", "Hugo"]
    for split, n in (("train", 16), ("dev", 8)):
        data = []
        for i in range(n):
            name = names[i % len(names)]
            context = f"The guard at the gate today is {name} and the weather is mild as it was yesterday ."
            q = {"id": f"{split}{i}", "question": "Who is the guard?" if i % 4 else "What colour is the sea?"}
            if i % 4:
                q["answers"] = [{"text": name, "answer_start": context.index(name)}]
            else:
                q.update(answers=[], is_impossible=True)
            data.append({"title": "t", "paragraphs": [{"context": context, "qas": [q]}]})
        (tmp_path / f"{split}-v2.0.json").write_text(json.dumps({"data": data}))
    out = str(tmp_path / "ft")
    code, _, err = run_cli(["finetune", "squad", "--version", "2.0", "--doc-stride", "8", "--checkpoint", ckpt,
                            "--data", str(tmp_path), "--epochs", "2", "--lr", "1e-3", "--global-batch-size", "8",
                            "--micro-batch-size", "8", "--seq-length", "24", "--out", out], capsys)
    assert code in (0, None), err
    run = json.load(open(os.path.join(out, "results.json")))
    res = run["metrics"]
    # an epoch is a pass over the 16 training questions (2 steps of 8), not over their doc-stride windows
    task = Squad(version="2.0", doc_stride=8)
    train = task.read(str(tmp_path), "train")
    tok = load_tokenizer(TOKENIZER)  # the tiny BERT checkpoint's tokenizer
    assert len(task.features(train, tok, 24)) >= 2 * len(train)  # counting windows would give ≥ 4 steps/epoch
    assert [(e["epoch"], e["step"]) for e in run["epochs"]] == [(1, 2), (2, 4)]
    assert res["HasAns_total"] == 6 and res["NoAns_total"] == 2 and 0 <= res["f1"] <= 100
    code, _, err = run_cli(["eval", "squad", "--version", "2.0", "--doc-stride", "8", "--checkpoint", out,
                            "--data", str(tmp_path), "--out", str(tmp_path / "ev")], capsys)
    assert code in (0, None), err
    ev = json.load(open(tmp_path / "ev" / "results.json"))["metrics"]
    assert {k: ev[k] for k in res if k in ev} == pytest.approx({k: res[k] for k in res if k in ev})
