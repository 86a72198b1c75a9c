"""Shared fixtures for the data tests: a small real corpus, the bundled tokenizer, preprocessed datasets.

Everything expensive is session-scoped and tiny (200 documents of the bundled Shakespeare corpus), so the
whole data suite stays within a few seconds on 2 shared cores.
"""
from __future__ import annotations

import gzip
import itertools
import json

import pytest

from mwb.core.data.bundled import corpus_file, tokenizer_file


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Every test gets its own $MWB_CACHE: no test sees another's (or the user's) cached indexes."""
    monkeypatch.setenv("MWB_CACHE", str(tmp_path / "mwb-cache"))


@pytest.fixture(scope="session")
def tok_path() -> str:
    return tokenizer_file()


@pytest.fixture(scope="session")
def tok(tok_path):
    from mwb.core.tokenizers import load_tokenizer

    return load_tokenizer(tok_path)


@pytest.fixture(scope="session")
def small_docs() -> list:
    with gzip.open(corpus_file(), "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in itertools.islice(f, 200)]


@pytest.fixture(scope="session")
def small_jsonl(tmp_path_factory, small_docs) -> str:
    p = tmp_path_factory.mktemp("corpus") / "small.jsonl"
    p.write_text("".join(json.dumps({"text": d, "id": i}) + "\n" for i, d in enumerate(small_docs)))
    return str(p)


@pytest.fixture(scope="session")
def doc_prefix(tmp_path_factory, small_jsonl, tok_path) -> str:
    """200 documents, one sequence each, with EOD."""
    from mwb.core.data.preprocess import preprocess

    out = tmp_path_factory.mktemp("pre") / "small"
    return preprocess([small_jsonl], str(out), tok_path, append_eod=True, progress=False).outputs["text"]


@pytest.fixture(scope="session")
def sent_prefix(tmp_path_factory, small_jsonl, tok_path) -> str:
    """The same documents split into sentences, with EOD."""
    from mwb.core.data.preprocess import preprocess

    out = tmp_path_factory.mktemp("pre") / "small"
    r = preprocess([small_jsonl], str(out), tok_path, append_eod=True, split_sentences=True, progress=False)
    return r.outputs["text"]
