"""RAKE keywords of a sentence: the keyword predictor's training targets and what the retriever looks up.

RAKE (Rose et al., 2010) splits a text into candidate phrases at stopwords and punctuation, scores each word
by degree / frequency (degree: the summed length of the phrases it occurs in) and a phrase by the sum of its
words' scores. The algorithm is ``rake-nltk`` (PyPI, the RAKE package the NLP community uses; it needs no
nltk data when given a stopword list and a sentence splitter). Its default stopwords are nltk's, which are a
download; mwb passes scikit-learn's English stopword list instead (318 words, the Glasgow Information Retrieval
Group's list, shipped with scikit-learn) plus the tails of English contractions that tokenisation leaves on
their own ("s" of "friend's", "t" of "didn't"), so "her friend's party" gives "friend" and "party", not "s party".
The story sentence is one RAKE "sentence" (no splitting), and phrases are lowercased.
"""
from __future__ import annotations

from functools import lru_cache

from mwb.core.errors import DataError

CONTRACTION_TAILS = frozenset({"s", "t", "d", "ll", "re", "ve", "m", "nt"})
MAX_WORDS = 3  # longer candidate phrases are not keywords (RAKE's max_length)


@lru_cache(maxsize=1)
def stopwords() -> frozenset:
    """scikit-learn's English stopwords and the contraction tails. Imported on first use, as every metric's
    scikit-learn: every process that lists the tasks imports this module, and scikit-learn (with the SciPy and
    pandas it pulls in) is about a second of its start-up."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS
    return frozenset(ENGLISH_STOP_WORDS) | CONTRACTION_TAILS


@lru_cache(maxsize=1)
def _rake():
    try:
        from rake_nltk import Rake
    except ImportError:
        raise DataError("story keywords need rake-nltk: pip install rake-nltk==1.0.6 (or pip install -e '.[data]')") \
            from None
    return Rake(stopwords=set(stopwords()), sentence_tokenizer=lambda text: [text], max_length=MAX_WORDS,
                include_repeated_phrases=False)


def rake_scores(sentence: str) -> list[tuple[str, float]]:
    """``[(phrase, score)]`` of ``sentence``, best first (ties: the phrase that comes first in the sentence)."""
    rake = _rake()
    rake.extract_keywords_from_text(sentence)
    order = {p: i for i, p in enumerate(rake.get_ranked_phrases())}
    scored = {p: s for s, p in rake.get_ranked_phrases_with_scores()}
    first = {p: sentence.lower().find(p) for p in scored}
    return sorted(((p, float(s)) for p, s in scored.items()), key=lambda x: (-x[1], first[x[0]], order[x[0]]))


def sentence_keywords(sentence: str, k: int = 2) -> list[str]:
    """The ``k`` best RAKE phrases of ``sentence`` (letters only: numbers and stray punctuation are no keywords)."""
    return [p for p, _ in rake_scores(sentence) if any(c.isalpha() for c in p)][:k]


def format_keywords(keywords: list[str]) -> str:
    """Keywords as the predictor writes them: ``"a, b"``."""
    return ", ".join(keywords)


def parse_keywords(text: str) -> list[str]:
    """``"a, b"`` → ``["a", "b"]`` (empty pieces dropped)."""
    return [k.strip().lower() for k in text.split(",") if k.strip()]


def parse_control(spec: str, sentences: int = 4) -> list[list[str]]:
    """``--keywords "a,b;c"``: keywords of sentence 2, 3, … separated by ``;`` (missing ones: predicted, ``[]``)."""
    parts = [parse_keywords(p) for p in spec.split(";")] if spec else []
    if len(parts) > sentences:
        raise DataError(f"--keywords gives {len(parts)} sentences' keywords; a story has {sentences} to write")
    return parts + [[] for _ in range(sentences - len(parts))]
