"""The bundled corpus: built into the cache on first use, reused after, usable by all three models."""
from __future__ import annotations

import logging
import os

from mwb.core.data import build_datasets
from mwb.core.data.bundled import default_data
from mwb.core.data.indexed import IndexedDataset


def assert_round_trips(ix: IndexedDataset, tok_path: str) -> None:
    """Every document of the index is its corpus text: its sentences decode to the text (whitespace aside,
    which sentence splitting does not keep), and it ends with the one end-of-document token."""
    import gzip
    import json

    from mwb.core.data.bundled import corpus_file
    from mwb.core.tokenizers import load_tokenizer

    tok = load_tokenizer(tok_path)
    with gzip.open(corpus_file(), "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    assert len(texts) == ix.num_documents
    di = ix.document_indices
    for doc, text in enumerate(texts):
        sentences = [ix[s].tolist() for s in range(di[doc], di[doc + 1])]
        assert sentences[-1][-1] == tok.eod and all(tok.eod not in s for s in sentences[:-1]), doc
        sentences[-1] = sentences[-1][:-1]
        body = "".join(tok.decode(s) for s in sentences)
        assert "".join(body.split()) == "".join(text.split()), doc


def test_bundled_build_then_reuse(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="mwb.data")
    cache = str(tmp_path / "cache")
    prefixes, tok_path = default_data("gpt", cache_dir=cache)
    assert "built tokenized bundled corpus" in caplog.text
    assert prefixes[0].startswith(os.path.join(cache, "bundled")) and os.path.isfile(tok_path)
    ix = IndexedDataset(prefixes[0])
    assert ix.num_documents == 2228 and ix.num_tokens == 772_682 and ix.dtype.name == "uint16"
    assert_round_trips(ix, tok_path)
    caplog.clear()
    assert default_data("bert", cache_dir=cache) == (prefixes, tok_path)
    assert "reusing cached tokenized bundled corpus" in caplog.text
    assert [p for p in os.listdir(os.path.join(cache, "bundled")) if not p.startswith(".")] == \
        [os.path.basename(os.path.dirname(prefixes[0]))]  # no temporary leftovers
    for arch in ("gpt", "bert", "t5"):
        train, valid, test = build_datasets(arch, None, None, 64, 1234, "949,50,1", (8, 4, 2), cache_dir=cache)
        assert len(train) == 8 and len(valid) == 4 and len(test) == 2 and train[7] and test[1]
