"""The bundled default corpus: Shakespeare plays shipped in the package, tokenized on first use.

Why it exists: ``mwb pretrain gpt`` must run on a fresh install with no data. The corpus
(``mwb/data/corpus/shakespeare.jsonl.gz``, ~2.8 MB of text, public domain) and a byte-level BPE
tokenizer trained on it (``tokenizer.json``, 8,192 entries: ``<|endoftext|>``, ``[PAD]``, ``[MASK]``,
``[CLS]``, ``[SEP]``, ``<extra_id_0..99>``, bytes, merges) ship together, so one tokenizer serves GPT
(EOD), BERT ([CLS]/[SEP]/[MASK]/[PAD]) and T5 (sentinels). The first call preprocesses the corpus with
``--split-sentences --append-eod`` (a few seconds) into ``$MWB_CACHE/bundled/<hash>/``, keyed by the
corpus and tokenizer contents; later calls reuse it. Sentence-level data serves all three models: BERT
pairs sentences, GPT and T5 read whole documents.

Another tokenizer (``--tokenizer T`` without ``--data``) gets the corpus tokenized with T, cached under a key
that holds T's identity (the hash of its files' contents): the data a model trains on always comes from
the tokenizer whose vocabulary it was built for, never from the bundled 8k BPE under another vocabulary.
"""
from __future__ import annotations

import os
from typing import Optional

from mwb.core.errors import DataError

from .cache import cache_root, cached_dir, digest, file_digest

ARCHS = ("gpt", "bert", "t5")
_VERSION = 1  # bump when the preprocessing of the bundled corpus changes


def corpus_file() -> str:
    from mwb.data import CORPUS_DIR

    return os.path.join(CORPUS_DIR, "shakespeare.jsonl.gz")


def tokenizer_file() -> str:
    from mwb.data import CORPUS_DIR

    return os.path.join(CORPUS_DIR, "tokenizer.json")


def default_data(arch: str = "gpt", cache_dir: Optional[str] = None, tokenizer=None) -> tuple[list, str]:
    """``([prefix], tokenizer_path)`` of the bundled corpus for ``arch`` (gpt, bert or t5), tokenized with
    ``tokenizer`` (a ``--tokenizer`` path or name such as ``gpt2``; default: the bundled tokenizer).
    ``tokenizer_path`` is the files the data was tokenized with (``gpt2`` resolved to its directory)."""
    from mwb.core.tokenizers.loader import tokenizer_identity, tokenizer_location

    if arch not in ARCHS:
        raise DataError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHS)}")
    corpus = corpus_file()
    if not os.path.isfile(corpus):
        raise DataError(f"bundled data file missing: {corpus} (reinstall mwb)")
    if tokenizer is None:
        tok = tokenizer_file()
        if not os.path.isfile(tok):
            raise DataError(f"bundled data file missing: {tok} (reinstall mwb)")
    else:
        tok = str(tokenizer_location(tokenizer))
    key = digest({"v": _VERSION, "corpus": file_digest(corpus), "tokenizer": tokenizer_identity(tok)})
    root = os.path.join(cache_root(cache_dir), "bundled")
    name = f"shakespeare-{key[:16]}"

    def build(tmp: str) -> None:
        from .preprocess import preprocess

        preprocess([corpus], os.path.join(tmp, "shakespeare"), tok, json_keys=["text"], workers=1,
                   append_eod=True, split_sentences=True, progress=False)

    path, _ = cached_dir(root, name, build, "tokenized bundled corpus")
    return [os.path.join(path, "shakespeare_text_sentence")], tok
