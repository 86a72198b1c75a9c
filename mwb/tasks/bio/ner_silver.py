"""A distantly supervised ("silver") chemical NER set from MEDLINE, in the BioBERT NER layout.

How it is made: for each citation with an abstract and a ``ChemicalList``, every listed chemical name
(``NameOfSubstance``) is looked up in the citation's own title + abstract; each occurrence (whole words,
case-insensitive, longest names first, no overlaps) is tagged ``B``/``I``, every other word ``O``. Words are
runs of letters/digits or single punctuation marks (:data:`mwb.core.data.spans.UNIT`), sentences come from
mwb's rule-based splitter. Only citations with at least one tagged mention are kept, and citations go whole
to ``train``/``devel``/``test`` (by position, after a seeded shuffle), so no abstract is split across
splits. The labels are silver: a chemical the indexers did not list, or wrote differently (``cisplatin``
vs ``cis-diamminedichloroplatinum``), stays ``O``. It is not BC5CDR.

Beside each split, ``{split}_mentions.txt`` lists its tagged mentions, one per occurrence, as written in the
text (the terms ``mwb tokenizer report --terms`` measures: BioMegatron's Table 3 counts the entities of the
NER training sets).

``mwb data silver-ner --out DIR [--sizes 120,25,25]`` (built once per input and sizes in ``$MWB_CACHE``, then
copied), or ``python -m mwb.tasks.bio.ner_silver --medline pubmed20n0014.xml.gz --out DIR [--sizes ...]``
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
from typing import Iterable, Optional, Sequence

from mwb.core.atomic import atomic_write_text
from mwb.core.data.cache import cache_root, cached_dir, digest, file_digest
from mwb.core.data.medline import iter_medline
from mwb.core.data.sentences import split_sentences
from mwb.core.data.spans import UNIT

SPLITS = ("train", "devel", "test")
_VERSION = 1  # bump when the output of write_silver_ner changes (the cache key of cached_silver_ner)


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
    """Write ``out/{train,devel,test}.tsv`` and their ``{split}_mentions.txt``; ``sizes``: citations per split
    (default: 80/10/10 % of all). Returns the counts per split (citations, sentences, mentions)."""
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
        mentions = [" ".join(words[i:j]) for doc in part for words, tags in doc for i, j in _spans(tags)]
        for name, text in ((f"{split}.tsv", "\n".join(lines)), (f"{split}_mentions.txt", "".join(
                m + "\n" for m in mentions))):
            atomic_write_text(os.path.join(out, name), text)
        counts[split] = {"citations": len(part), "sentences": sum(len(d) for d in part),
                         "mentions": sum(tags.count("B") for d in part for _, tags in d)}
    return counts


def _spans(tags: list[str]) -> list[tuple[int, int]]:
    """``(start, end)`` word spans of the B/I mentions in ``tags`` (as :func:`tag_citation` writes them)."""
    out, start = [], None
    for i, t in enumerate(tags + ["O"]):
        if t != "I" and start is not None:
            out.append((start, i))
            start = None
        if t == "B":
            start = i
    return out


def cached_silver_ner(paths: Sequence[str], out: str, sizes: Optional[Sequence[int]] = None, seed: int = 0) -> dict:
    """:func:`write_silver_ner` built once per (inputs' content, sizes, seed) under ``$MWB_CACHE/ner-silver``
    and copied into ``out``; returns the counts. Why: reading and tagging a MEDLINE file takes seconds, and
    every run of an experiment wants the same set in its own folder."""
    key = digest({"v": _VERSION, "inputs": [file_digest(p) for p in paths], "sizes": list(sizes or []),
                  "seed": seed})

    def build(tmp: str) -> None:
        counts = write_silver_ner(paths, tmp, sizes, seed)
        with open(os.path.join(tmp, "counts.json"), "w", encoding="utf-8") as f:
            json.dump(counts, f)

    src, _ = cached_dir(os.path.join(cache_root(), "ner-silver"), key[:16], build, "silver chemical NER set")
    os.makedirs(out, exist_ok=True)
    for name in sorted(os.listdir(src)):
        shutil.copyfile(os.path.join(src, name), os.path.join(out, name))
    with open(os.path.join(src, "counts.json"), encoding="utf-8") as f:
        return json.load(f)


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
