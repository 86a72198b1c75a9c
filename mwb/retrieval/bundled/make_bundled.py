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
import tempfile

MIN_CHARS = 500  # shorter pages are stubs; redirects are ~50 characters
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


def is_article(title: str, text: str) -> bool:
    """Every real article of the extract: not a redirect or stub, not a disambiguation page or a list
    (DPR's Wikipedia passages also leave those out)."""
    return (len(text) >= MIN_CHARS and not text.lstrip().upper().startswith("#REDIRECT")
            and "(disambiguation)" not in title and not title.startswith("List of"))


def main() -> None:
    import gensim
    from gensim.corpora.wikicorpus import extract_pages

    src = os.path.join(os.path.dirname(gensim.__file__), "test", "test_data",
                       "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
    rows = []
    articles = [(title, text) for title, text, _ in extract_pages(bz2.BZ2File(src)) if is_article(title, text)]
    for title, text in articles:
        words = clean(text).split()
        for k in range(0, min(len(words), WORDS * PASSAGES_PER_ARTICLE), WORDS):
            rows.append((str(len(rows) + 1), " ".join(words[k:k + WORDS]), title))
    out = os.path.join(os.path.dirname(__file__), "wiki_passages.tsv.gz")
    with io.TextIOWrapper(gzip.GzipFile(out, "wb", mtime=0), encoding="utf-8", newline="") as f:  # reproducible bytes
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(("id", "text", "title"))
        w.writerows(rows)
    print(f"{len(rows)} passages from {len(articles)} articles -> {out}")
    make_dpr_sample(rows)
    make_real_questions(rows)


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


DPR_TOPICS = [("nq", "dev"), ("nq", "test"), ("trivia", "dev"), ("trivia", "test"), ("wq", "test"),
              ("curated", "test"), ("squad", "test")]
MAX_NGRAM = 12
GENERIC_TITLES = {"Answer", "Adventure", "Alien", "Acid", "Asia", "Art"}  # would mark ordinary questions


def read_dpr_topics(jar: str, dataset: str, split: str) -> list[dict]:
    """One DPR question file of Anserini's jar: NQ/TriviaQA are ``question<TAB>['a', ...]`` (a Python list
    literal), WQ/CuratedTREC/SQuAD JSON lines ``{"question", "answer": [...]}``."""
    import json
    import zipfile

    from mwb.retrieval.inputs import read_questions

    with zipfile.ZipFile(jar) as z:
        body = z.read(f"topics-and-qrels/topics.dpr.{dataset}.{split}.txt").decode("utf-8")
    if body.lstrip().startswith("{"):
        return [{"question": r["question"].strip(), "answers": [str(x) for x in r["answer"]]}
                for r in map(json.loads, filter(str.strip, body.split("\n")))]
    with tempfile.NamedTemporaryFile("w", suffix=".tsv", encoding="utf-8") as f:  # csv-quoted TSV: mwb's reader
        f.write(body)
        f.flush()
        return [{"question": r["question"].strip(), "answers": r["answers"]} for r in read_questions(f.name)]


def make_real_questions(rows) -> None:
    """``real_questions.jsonl.gz``: every real DPR question (Anserini's copies of the DPR question files,
    PyPI pyserini==0.17.0) whose answer the bundled evidence contains by DPR's has-answer rule (string
    match on DPR's simple tokens; regular expressions for CuratedTREC). Each record keeps its dataset and
    split, the number of passages that contain an answer, and whether the question names an article title
    as written (the rest are often answerable only by chance: a common word or number occurs somewhere)."""
    import json
    import re

    from mwb.core.data.package_files import package_path
    from mwb.retrieval.matching import normalize, regex_match, simple_tokens

    jar = package_path("dpr-questions")
    toks = [simple_tokens(normalize(text)) for _, text, _ in rows]  # DPR matches the passage text, not the title
    grams: dict[tuple, set] = {}
    for i, t in enumerate(toks):
        for n in range(1, MAX_NGRAM + 1):
            for j in range(len(t) - n + 1):
                grams.setdefault(tuple(t[j:j + n]), set()).add(i)
    norm_texts = [normalize(text) for _, text, _ in rows]
    titles = sorted({title for _, _, title in rows}, key=len, reverse=True)
    # whole words, any case (NQ questions are lower case); not titles that are everyday words of questions
    title_res = [re.compile(r"\b" + re.escape(t) + r"\b", re.IGNORECASE) for t in titles
                 if len(t) >= 4 and t not in GENERIC_TITLES]
    out, counts = [], {}
    for dataset, split in DPR_TOPICS:
        qs = read_dpr_topics(jar, dataset, split)
        kept = 0
        for q in qs:
            if dataset == "curated":
                hits = {i for i, text in enumerate(norm_texts) if any(regex_match(text, normalize(a)) for a in q["answers"])}
            else:
                hits = set()
                for a in q["answers"]:
                    at = tuple(simple_tokens(normalize(a)))
                    if not at:
                        continue
                    if len(at) <= MAX_NGRAM:
                        hits |= grams.get(at, set())
                    else:
                        hits |= {i for i in grams.get(at[:MAX_NGRAM], set())
                                 if any(tuple(toks[i][j:j + len(at)]) == at for j in range(len(toks[i])))}
            if not hits:
                continue
            kept += 1
            named = [r.pattern for r in title_res if r.search(q["question"])]
            out.append({"question": q["question"], "answers": q["answers"], "dataset": dataset, "split": split,
                        "passages_with_answer": len(hits), "names_title": bool(named)})
        counts[f"{dataset}.{split}"] = (kept, len(qs))
    path = os.path.join(os.path.dirname(__file__), "real_questions.jsonl.gz")
    with io.TextIOWrapper(gzip.GzipFile(path, "wb", mtime=0), encoding="utf-8") as f:
        for r in out:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    for k, (kept, n) in counts.items():
        print(f"{k:14s} {kept:5d} answerable of {n:6d}")
    print(f"{len(out)} answerable real questions ({sum(r['names_title'] for r in out)} name an article title) -> {path}")


if __name__ == "__main__":
    main()
