"""GPT sample indexes: invariants on synthetic documents whose tokens are their stream positions."""
from __future__ import annotations

import logging

import numpy as np
import pytest

from mwb.core.data import build_datasets, parse_data
from mwb.core.data.gpt import GPTDataset, build_gpt_indices, parse_split, split_ranges
from mwb.core.data.indexed import IndexedDataset, IndexedDatasetWriter
from mwb.core.errors import DataError


@pytest.fixture
def numbered(tmp_path):
    """60 documents of 0..40 tokens (some empty); token values are unique (their position in the .bin)."""
    rng = np.random.RandomState(0)
    lengths = rng.randint(0, 41, 60)
    lengths[[3, 17]] = 0
    prefix = str(tmp_path / "numbered")
    with IndexedDatasetWriter(prefix, np.int32) as w:
        pos = 0
        for n in lengths:
            w.add_document(np.arange(pos, pos + n))
            pos += n
    return IndexedDataset(prefix), lengths


def test_sample_invariants(numbered, tmp_path):
    ix, lengths = numbered
    S = 16
    docs = (5, 55)
    ds = GPTDataset(ix, docs, S, 300, seed=7, cache_dir=str(tmp_path / "c"))
    assert len(ds) == 300
    D = docs[1] - docs[0]
    epochs = len(ds.doc_index) // D
    assert epochs >= 2 and len(ds.doc_index) == epochs * D
    for e in range(epochs):  # every epoch visits every document of the split exactly once
        assert sorted(ds.doc_index[e * D:(e + 1) * D]) == list(range(*docs))
    stream = np.concatenate([ix.document(int(d)) for d in ds.doc_index])
    total = len(ds.shuffle_index)
    samples = [ds.sample_tokens(j) for j in range(total)]
    assert all(len(s) == S + 1 for s in samples)
    # inputs tile the shuffled-document stream with no gap or overlap; the +1 label token is the next start
    assert np.array_equal(np.concatenate([s[:-1] for s in samples]), stream[:total * S])
    assert all(samples[j][-1] == samples[j + 1][0] for j in range(total - 1))
    # within one epoch a token is never read twice (tokens are unique per epoch)
    per_epoch = int(lengths[docs[0]:docs[1]].sum())
    first_epoch = np.concatenate([s[:-1] for s in samples])[:per_epoch]
    assert len(np.unique(first_epoch)) == per_epoch
    # the shuffle is a permutation, the first epochs shuffled apart from the last
    assert sorted(ds.shuffle_index.tolist()) == list(range(total))
    assert np.array_equal(ds[5]["tokens"], samples[int(ds.shuffle_index[5])])
    assert ds[0]["tokens"].dtype == np.int64
    with pytest.raises(IndexError):
        ds[300]


def test_deterministic_and_cached(numbered, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="mwb.data")
    ix, _ = numbered
    a = GPTDataset(ix, (0, 60), 8, 100, seed=1, cache_dir=str(tmp_path / "c"))
    b = GPTDataset(ix, (0, 60), 8, 100, seed=1, cache_dir=str(tmp_path / "c"))
    c = GPTDataset(ix, (0, 60), 8, 100, seed=2, cache_dir=str(tmp_path / "c"))
    assert not a.cache_reused and b.cache_reused and not c.cache_reused and a.cache_path == b.cache_path
    assert "reusing cached train GPT sample index" in caplog.text
    assert all(np.array_equal(a[i]["tokens"], b[i]["tokens"]) for i in range(100))
    assert any(not np.array_equal(a[i]["tokens"], c[i]["tokens"]) for i in range(10))
    # the same arrays without any cache: pure function of (lengths, docs, seq, samples, seed)
    _, lengths = ix.document_token_spans()
    d, s, sh = build_gpt_indices(lengths, np.arange(60), 8, 100, 1)
    assert np.array_equal(d, a.doc_index) and np.array_equal(s, a.sample_index) and np.array_equal(sh, a.shuffle_index)


def test_splits():
    assert parse_split("949,50,1") == pytest.approx([0.949, 0.05, 0.001])
    assert split_ranges("949,50,1", 2228) == [(0, 2115), (2115, 2226), (2226, 2228)]  # rounding error shifts all
    assert split_ranges("1", 10) == [(0, 10), (10, 10), (10, 10)]
    assert split_ranges("80,20", 7) == [(0, 6), (6, 7), (7, 7)]
    with pytest.raises(DataError, match="bad split"):
        parse_split("a,b")


def test_build_datasets_gpt(doc_prefix, tok, tmp_path):
    assert parse_data(["0.3", "p1", "0.7", "p2"]) == (["p1", "p2"], [0.3, 0.7])
    assert parse_data("p1") == (["p1"], [1.0])
    train, valid, test = build_datasets("gpt", [doc_prefix], tok, 32, 1234, "949,50,1", (64, 16, 0))
    assert len(train) == 64 and len(valid) == 16 and test is None
    assert train[63]["tokens"].shape == (33,) and train.tokenizer is tok
    with pytest.raises(DataError, match="missing"):
        build_datasets("gpt", [str(tmp_path / "nothing")], tok, 32, 1, "949,50,1", (8, 0, 0))
    with pytest.raises(DataError, match="test split .* is empty"):
        build_datasets("gpt", [doc_prefix], tok, 32, 1, "100,0,0", (8, 0, 1))
