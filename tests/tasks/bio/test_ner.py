"""NER (BioBERT layout): reading, first-sub-token labels, word-level decoding, fine-tuning, TP2 = one process."""
import json
import os
import random

import numpy as np
import pytest

from mwb.core.errors import DataError
from mwb.core.tokenizers import load_tokenizer
from mwb.tasks.bio.ner import NER, read_conll
from tests.tasks.encoder_helpers import TOKENIZER, tiny_bert_checkpoint
from tests.tasks.race.test_race import _losses, _mwb_here

CHEMICALS = ["aspirin", "cisplatin", "lithium", "nicotine", "caffeine", "heparin"]
DISEASES = [["hepatitis"], ["renal", "failure"], ["seizures"], ["heart", "failure"], ["anemia"]]
FILLER = ["patients", "treated", "with", "developed", "after", "the", "dose", "of", "and", "were", "observed"]


def write_biobert_folder(root, sizes, seed=0):
    """A BioBERT-layout folder (train/devel/test.tsv, typed labels) of template sentences: not real data."""
    rng = random.Random(seed)
    os.makedirs(root, exist_ok=True)
    for split, n in sizes.items():
        lines = []
        for _ in range(n):
            words, tags = [], []
            for _ in range(rng.randint(2, 4)):
                words.append(rng.choice(FILLER))
                tags.append("O")
                kind = rng.random()
                if kind < 0.35:
                    words.append(rng.choice(CHEMICALS))
                    tags.append("B-Chemical")
                elif kind < 0.7:
                    d = rng.choice(DISEASES)
                    words += d
                    tags += ["B-Disease"] + ["I-Disease"] * (len(d) - 1)
            lines += [f"{w}\t{t}" for w, t in zip(words, tags)] + [""]
        with open(os.path.join(root, f"{split}.tsv"), "w") as f:
            f.write("\n".join(lines))
    return root


def test_biobert_folder_labels_and_first_subtoken_inputs(tmp_path):
    data = write_biobert_folder(str(tmp_path / "ner"), {"train": 6, "devel": 4, "test": 3})
    task = NER()
    task.prepare(data)
    assert task.labels == ["O", "B-Chemical", "B-Disease", "I-Disease"] and task.num_labels == 4
    dev = task.read(data, task.eval_split)  # "dev" is devel.tsv
    assert len(dev) == 4 and len(NER(train_with_dev=True).read(data, "train+devel")) == 10
    tok = load_tokenizer(TOKENIZER)
    ex = {"words": ["cisplatin", "induced", "renal", "failure"], "tags": ["B-Chemical", "O", "B-Disease", "I-Disease"]}
    f = task.inputs(ex, tok, 32)
    pieces = [tok.encode(w if i == 0 else " " + w) for i, w in enumerate(ex["words"])]
    assert len(pieces[0]) > 1  # the test needs a word split into several pieces
    starts = np.cumsum([1] + [len(p) for p in pieces[:-1]])
    want = np.full(32, -100)
    want[starts] = [1, 0, 2, 3]
    assert f["label"].tolist() == want.tolist() and f["tokens"][0] == tok.cls
    # decode maps first-sub-token argmaxes back to words; words cut off by the length are predicted O
    logits = np.zeros((32, 4))
    logits[starts, [1, 0, 2, 3]] = 1.0
    pred = task.decode(logits, f)
    assert pred == [1, 0, 2, 3] and task.metrics([pred], [ex])["f1"] == 1.0
    short = task.inputs(ex, tok, len(pieces[0]) + 3)
    assert task.metrics([task.decode(np.zeros((len(short["label"]), 4)), short)], [ex])["f1"] == 0.0


def test_bundled_silver_set_reads():
    task = NER()
    task.prepare(task.default_data)
    assert task.labels == ["O", "B", "I"]
    assert len(task.read(task.default_data, "train")) > 500 and len(task.read(task.default_data, "dev")) > 100


@pytest.mark.parametrize("content,needle", [("word B-X extra\n", "token<TAB>label"), ("word\tX-Foo\n", "X-Foo")])
def test_malformed_line_names_file_and_line(tmp_path, content, needle):
    p = tmp_path / "train.tsv"
    p.write_text("ok\tO\n" + content)
    with pytest.raises(DataError, match=needle) as e:
        read_conll(str(p))
    assert "train.tsv:2" in str(e.value)


@pytest.mark.multiprocess
def test_finetune_learns_tp2_matches_and_eval_reproduces(tmp_path, capsys):
    ckpt = tiny_bert_checkpoint(str(tmp_path / "bert"), seq=32)
    data = write_biobert_folder(str(tmp_path / "ner"), {"train": 32, "devel": 16, "test": 8}, seed=3)
    common = ["ner", "--checkpoint", ckpt, "--data", data, "--epochs", "3", "--lr", "2e-3",
              "--global-batch-size", "8", "--micro-batch-size", "4"]
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    _mwb_here(capsys, "finetune", *common, "--out", one)
    res = json.load(open(os.path.join(one, "results.json")))
    assert res["metrics"]["f1"] >= 0.5, res["metrics"]
    _mwb_here(capsys, "finetune", *common, "--out", two, "--nproc", "2", "--tp", "2")
    a, b = _losses(one), _losses(two)
    assert len(a) == len(b) == 12
    assert max(abs(x - y) / abs(x) for x, y in zip(a, b)) < 1e-5
    _mwb_here(capsys, "eval", "ner", "--checkpoint", one, "--data", data, "--out", str(tmp_path / "ev"))
    ev = json.load(open(os.path.join(tmp_path, "ev", "results.json")))
    assert ev["metrics"]["f1"] == res["metrics"]["f1"]
