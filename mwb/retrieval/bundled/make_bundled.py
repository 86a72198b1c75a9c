"""Rebuild ``wiki_passages.tsv.gz``, the bundled evidence corpus, from gensim's Wikipedia test extract.

Why this source: ``gensim`` (LGPL) ships a 206-page extract of the English Wikipedia
(``gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2``), real
encyclopedic text that a default ``mwb eval qa`` can retrieve from offline. Wikipedia text is CC BY-SA
(see README.md here). The passages follow DPR's Wikipedia format: each article's plain text is cut into
disjoint 100-word passages, written as ``id \\t text \\t title`` with a header line.

``dpr_train_sample.json.gz`` is a small training set in DPR's JSON format derived from the same passages,
so ``mwb finetune dpr`` runs with no arguments: each "question" is one sentence of a passage (a pseudo-query,
not a human question), its positive is that passage, its hard negative the best BM25 match for the sentence
from another article (topically close, without the sentence), and ``answers`` is the article title. The human-written test
questions (``wiki_questions.jsonl``) are not derived from it.

Run: ``pip install gensim bm25s && python -m mwb.retrieval.bundled.make_bundled`` (writes next to this file).
"""
from __future__ import annotations

import bz2
import csv
import gzip
import io
import os
import re

ARTICLES = [
    "Anarchism", "Autism", "Albedo", "Alabama", "Achilles", "Abraham Lincoln", "Aristotle",
    "An American in Paris", "International Atomic Time", "Altruism", "Ayn Rand", "Algeria", "Anthropology",
    "Alchemy", "ASCII", "Animation", "Apollo", "Andre Agassi", "Andorra", "Animal Farm", "Amphibian",
    "Alaska", "Aldous Huxley", "Algae", "Abacus", "Apollo 11", "Apollo 8", "A Modest Proposal",
    "Alkali metal", "Andrei Tarkovsky", "Aardvark", "Aardwolf", "Aruba", "Atlantic Ocean",
    "Arthur Schopenhauer", "Angola", "Alberta", "Albert Einstein", "Azerbaijan", "Aikido",
]
PASSAGES_PER_ARTICLE = 25
WORDS = 100


def clean(text: str) -> str:
    """Wiki markup that gensim's ``filter_wiki`` leaves: bold/italic quotes, headings, empty brackets."""
    from gensim.corpora.wikicorpus import filter_wiki

    text = filter_wiki(text)
    text = re.sub(r"^=+[^=\n]*=+\s*$", " ", text, flags=re.M)  # section headings
    text = text.replace("'''", "").replace("''", "")
    text = re.sub(r"\(\s*[;,]?\s*\)", "", text)  # "( ; " left by removed pronunciations
    text = re.sub(r"\(\s*;\s*", "(", text)
    return re.sub(r"\s+", " ", text).strip()


def main() -> None:
    import gensim
    from gensim.corpora.wikicorpus import extract_pages

    src = os.path.join(os.path.dirname(gensim.__file__), "test", "test_data",
                       "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
    pages = {title: text for title, text, _ in extract_pages(bz2.BZ2File(src))}
    rows = []
    for title in ARTICLES:
        words = clean(pages[title]).split()
        for k in range(0, min(len(words), WORDS * PASSAGES_PER_ARTICLE), WORDS):
            rows.append((str(len(rows) + 1), " ".join(words[k:k + WORDS]), title))
    out = os.path.join(os.path.dirname(__file__), "wiki_passages.tsv.gz")
    with io.TextIOWrapper(gzip.GzipFile(out, "wb", mtime=0), encoding="utf-8", newline="") as f:  # reproducible bytes
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(("id", "text", "title"))
        w.writerows(rows)
    print(f"{len(rows)} passages from {len(ARTICLES)} articles -> {out}")
    make_dpr_sample(rows)


def make_dpr_sample(rows, n: int = 300, seed: int = 0) -> None:
    import json
    import random

    import bm25s

    from mwb.core.data.sentences import split_sentences

    rng = random.Random(seed)
    docs = [f"{title} {text}" for _, text, title in rows]
    bm25 = bm25s.BM25()
    bm25.index(bm25s.tokenize(docs, stopwords="en", show_progress=False), show_progress=False)
    picks = sorted(rng.sample(range(len(rows)), len(rows)))
    out = []
    for r in picks:
        _, text, title = rows[r]
        sents = [x.strip() for x in split_sentences(text) if len(x.split()) >= 8]
        if len(sents) < 3:
            continue
        q = rng.choice(sents[:-1])  # the last "sentence" of a 100-word passage is usually cut mid-way
        ids, _ = bm25.retrieve(bm25s.tokenize([q], stopwords="en", show_progress=False, return_ids=False),
                               k=100, show_progress=False)
        neg = next((int(i) for i in ids[0] if rows[int(i)][2] != title), None)
        if neg is None:
            continue
        out.append({"question": q.rstrip("."), "answers": [title],
                    "positive_ctxs": [{"title": title, "text": text, "passage_id": rows[r][0]}],
                    "hard_negative_ctxs": [{"title": rows[neg][2], "text": rows[neg][1],
                                            "passage_id": rows[neg][0]}],
                    "negative_ctxs": []})
        if len(out) == n:
            break
    path = os.path.join(os.path.dirname(__file__), "dpr_train_sample.json.gz")
    with io.TextIOWrapper(gzip.GzipFile(path, "wb", mtime=0), encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)
    print(f"{len(out)} DPR-format training records -> {path}")


if __name__ == "__main__":
    main()
