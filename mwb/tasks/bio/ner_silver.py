"""A distantly supervised ("silver") chemical NER set from MEDLINE, in the BioBERT NER layout.

How it is made: for each citation with an abstract and a ``ChemicalList``, every listed chemical name
(``NameOfSubstance``) is looked up in the citation's own title + abstract; each occurrence (whole words,
case-insensitive, longest names first, no overlaps) is tagged ``B``/``I``, every other word ``O``. Words are
runs of letters/digits or single punctuation marks (:data:`mwb.core.data.spans.UNIT`), sentences come from
mwb's rule-based splitter. Only citations with at least one tagged mention are kept, and citations go whole
to ``train``/``devel``/``test`` (by position, after a seeded shuffle), so no abstract is split across
splits. The labels are silver: a chemical the indexers did not list, or wrote differently (``cisplatin``
vs ``cis-diamminedichloroplatinum``), stays ``O``. It is not BC5CDR.

``python -m mwb.tasks.bio.ner_silver --medline pubmed20n0014.xml.gz --out DIR [--sizes 120,25,25]``
"""
from __future__ import annotations

import argparse
import os
import random
from typing import Iterable, Optional, Sequence

from mwb.core.data.medline import iter_medline
from mwb.core.data.sentences import split_sentences
from mwb.core.data.spans import UNIT

SPLITS = ("train", "devel", "test")


def tag_citation(text: str, names: Iterable[str]) -> list[tuple[list[str], list[str]]]:
    """``(words, tags)`` per sentence of ``text`` with the occurrences of ``names`` tagged B/I."""
    patterns = sorted({tuple(u.lower() for u in UNIT.findall(n)) for n in names} - {()}, key=len, reverse=True)
    out = []
    for sentence in split_sentences(text):
        words = UNIT.findall(sentence)
        if not words:
            continue
        low, tags = [w.lower() for w in words], ["O"] * len(words)
        for pat in patterns:
            n = len(pat)
            for i in range(len(words) - n + 1):
                if tuple(low[i:i + n]) == pat and all(t == "O" for t in tags[i:i + n]):
                    tags[i:i + n] = ["B"] + ["I"] * (n - 1)
        out.append((words, tags))
    return out


def silver_citations(paths: Sequence[str]) -> Iterable[list[tuple[list[str], list[str]]]]:
    """Tagged sentences of every citation of ``paths`` that has at least one mention of its own chemicals."""
    for path in paths:
        for rec in iter_medline(path):
            if rec["chemicals"]:
                sents = tag_citation(rec["text"], rec["chemicals"])
                if any(t != "O" for _, tags in sents for t in tags):
                    yield sents


def write_silver_ner(paths: Sequence[str], out: str, sizes: Optional[Sequence[int]] = None, seed: int = 0) -> dict:
    """Write ``out/{train,devel,test}.tsv``; ``sizes``: citations per split (default: 80/10/10 % of all).
    Returns the counts per split (citations, sentences, mentions)."""
    docs = list(silver_citations(paths))
    random.Random(seed).shuffle(docs)
    if sizes is None:
        n = len(docs)
        sizes = (n - 2 * (n // 10), n // 10, n // 10)
    os.makedirs(out, exist_ok=True)
    counts, start = {}, 0
    for split, size in zip(SPLITS, sizes):
        part = docs[start:start + size]
        start += size
        lines = [line for doc in part for words, tags in doc for line in
                 [f"{w}\t{t}" for w, t in zip(words, tags)] + [""]]
        tmp = os.path.join(out, f".{split}.tsv.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
        os.replace(tmp, os.path.join(out, f"{split}.tsv"))
        counts[split] = {"citations": len(part), "sentences": sum(len(d) for d in part),
                         "mentions": sum(tags.count("B") for d in part for _, tags in d)}
    return counts


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(description="silver chemical NER set (BioBERT layout) from MEDLINE XML")
    ap.add_argument("--medline", nargs="+", required=True, help="MEDLINE .xml/.xml.gz files")
    ap.add_argument("--out", required=True)
    ap.add_argument("--sizes", default=None, help="citations per split: train,devel,test (default 80/10/10 %%)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")] if args.sizes else None
    print(write_silver_ner(args.medline, args.out, sizes, args.seed))


if __name__ == "__main__":
    main()
