"""Preprocessing: round trips per document, inputs of every kind, malformed input, atomic outputs."""
from __future__ import annotations

import json
import os

import pytest

from mwb.core.data.indexed import IndexedDataset
from mwb.core.data.preprocess import preprocess
from mwb.core.data.sentences import split_sentences
from mwb.core.errors import DataError


def _docs(prefix, tok, strip_eod=True):
    ds = IndexedDataset(prefix)
    out = []
    for d in range(ds.num_documents):
        ids = ds.document(d).tolist()
        if strip_eod:
            assert ids[-1] == tok.eod
            ids = ids[:-1]
        out.append(tok.decode(ids))
    return out


def test_round_trip_documents(doc_prefix, small_docs, tok):
    assert _docs(doc_prefix, tok) == small_docs


def test_round_trip_sentences(sent_prefix, small_docs, tok):
    ds = IndexedDataset(sent_prefix)
    assert ds.num_documents == len(small_docs) and len(ds) > 2 * len(small_docs)
    assert _docs(sent_prefix, tok) == small_docs  # documents are their sentences, back to back
    d = 3
    sents = [tok.decode(ds[s].tolist()) for s in range(ds.document_indices[d], ds.document_indices[d + 1])]
    sents[-1] = sents[-1].removesuffix("<|endoftext|>")
    assert sents == split_sentences(small_docs[d])


def test_workers_give_identical_output(tmp_path, small_jsonl, tok_path, doc_prefix):
    r = preprocess([small_jsonl], str(tmp_path / "w2"), tok_path, append_eod=True, workers=2, chunk_size=16,
                   progress=False)
    p = r.outputs["text"]
    for ext in (".bin", ".idx"):
        assert open(p + ext, "rb").read() == open(doc_prefix + ext, "rb").read()


def test_text_parquet_and_keys(tmp_path, tok, tok_path):
    (tmp_path / "a.txt").write_text("first doc line\n\nsecond doc\nstill second\n")
    r = preprocess([str(tmp_path / "a.txt")], str(tmp_path / "t"), tok_path, progress=False)
    assert _docs(r.outputs["text"], tok, strip_eod=False) == ["first doc line", "second doc", "still second"]
    r = preprocess([str(tmp_path / "a.txt")], str(tmp_path / "p"), tok_path, text_docs="paragraph", progress=False)
    assert _docs(r.outputs["text"], tok, strip_eod=False) == ["first doc line", "second doc\nstill second"]

    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"title": ["A", "B"], "body": ["alpha text", "beta text"]}), tmp_path / "x.parquet")
    r = preprocess([str(tmp_path / "x.parquet")], str(tmp_path / "q"), tok_path, json_keys=["title", "body"],
                   progress=False)
    assert r.outputs == {"title": str(tmp_path / "q_title_document"), "body": str(tmp_path / "q_body_document")}
    assert _docs(r.outputs["body"], tok, strip_eod=False) == ["alpha text", "beta text"]
    assert _docs(r.outputs["title"], tok, strip_eod=False) == ["A", "B"]


def test_malformed_line_names_file_and_line(tmp_path, tok_path, doc_prefix):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n\n{"text": "oops}\n{"other": "x"}\n[1, 2]\n{"text": "end"}\n')
    out = tmp_path / "out"
    with pytest.raises(DataError, match=r"bad\.jsonl:3: malformed JSON"):
        preprocess([str(bad)], str(out), tok_path, progress=False)
    assert os.listdir(tmp_path) == ["bad.jsonl"]  # nothing half-written, no temporary files
    r = preprocess([str(bad)], str(out), tok_path, skip_bad=True, progress=False)
    assert r.skipped == 3 and r.documents == 2
    assert "bad.jsonl:4: no key 'text'" in r.errors[1] and "bad.jsonl:5: expected a JSON object" in r.errors[2]
    with pytest.raises(DataError, match="input file not found"):
        preprocess([str(tmp_path / "missing.jsonl")], str(out), tok_path)
    with pytest.raises(DataError, match="tokenizer not found"):
        preprocess([str(bad)], str(out), str(tmp_path / "no-tokenizer.json"))


def test_failure_keeps_previous_outputs(tmp_path, tok_path):
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"text": "hello"}) + "\n")
    prefix = preprocess([str(good)], str(tmp_path / "o"), tok_path, progress=False).outputs["text"]
    before = open(prefix + ".bin", "rb").read()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "new content"}) + "\n{broken\n")
    with pytest.raises(DataError):
        preprocess([str(bad)], str(tmp_path / "o"), tok_path, progress=False)
    assert open(prefix + ".bin", "rb").read() == before
    assert sorted(os.listdir(tmp_path)) == ["bad.jsonl", "good.jsonl", "o_text_document.bin", "o_text_document.idx"]


def test_datasets_loadable_inputs(tmp_path, tok, tok_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    (tmp_path / "a.csv").write_text('text,id\n"Hello, csv world.",1\nsecond row,2\n')
    (tmp_path / "b.json").write_text(json.dumps([{"text": "array one"}, {"text": "array two"}]))
    r = preprocess([str(tmp_path / "a.csv"), str(tmp_path / "b.json")], str(tmp_path / "o"), tok_path, progress=False)
    expected = ["Hello, csv world.", "second row", "array one", "array two"]
    assert _docs(r.outputs["text"], tok, strip_eod=False) == expected
