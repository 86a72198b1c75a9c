"""The bundled default corpus: Shakespeare plays shipped in the package, tokenized on first use.

Why it exists: ``mwb pretrain gpt`` must run on a fresh install with no data. The corpus
(``mwb/data/corpus/shakespeare.jsonl.gz``, ~2.8 MB of text, public domain) and a byte-level BPE
tokenizer trained on it (``tokenizer.json``, 8,192 entries: ``<|endoftext|>``, ``[PAD]``, ``[MASK]``,
``[CLS]``, ``[SEP]``, ``<extra_id_0..99>``, bytes, merges) ship together, so one tokenizer serves GPT
(EOD), BERT ([CLS]/[SEP]/[MASK]/[PAD]) and T5 (sentinels). The first call preprocesses the corpus with
``--split-sentences --append-eod`` (a few seconds) into ``$MWB_CACHE/bundled/<hash>/``, keyed by the
corpus and tokenizer contents; later calls reuse it. Sentence-level data serves all three models: BERT
pairs sentences, GPT and T5 read whole documents.
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


def default_data(arch: str = "gpt", cache_dir: Optional[str] = None) -> tuple[list, str]:
    """``([prefix], tokenizer_path)`` of the tokenized bundled corpus for ``arch`` (gpt, bert or t5)."""
    if arch not in ARCHS:
        raise DataError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHS)}")
    corpus, tok = corpus_file(), tokenizer_file()
    for p in (corpus, tok):
        if not os.path.isfile(p):
            raise DataError(f"bundled data file missing: {p} (reinstall mwb)")
    key = digest({"v": _VERSION, "corpus": file_digest(corpus), "tokenizer": file_digest(tok)})
    root = os.path.join(cache_root(cache_dir), "bundled")
    name = f"shakespeare-{key[:16]}"

    def build(tmp: str) -> None:
        from .preprocess import preprocess

        preprocess([corpus], os.path.join(tmp, "shakespeare"), tok, json_keys=["text"], workers=1,
                   append_eod=True, split_sentences=True, progress=False)

    path, _ = cached_dir(root, name, build, "tokenized bundled corpus")
    return [os.path.join(path, "shakespeare_text_sentence")], tok
