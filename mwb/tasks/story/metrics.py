"""Story metrics: distinct-n, repeat-n and keyword inclusion, on lowercased word tokens.

Why its own tokenisation: the numbers must not depend on a model's tokenizer, so a text is split into
lowercased words and punctuation marks (``"He's home."`` → ``he 's home .``; a word keeps an inner apostrophe or
hyphen). distinct-n (Li et al., 2016) is :func:`mwb.evaluation.metrics.distinct_n` over those tokens (unique
n-grams / all n-grams over all generated stories); repeat-n is the share of stories in which some n-gram
occurs at least twice. A keyword is included in a sentence when each of its words, or one of that word's
WordNet base forms, equals a word of the sentence or one of its base forms ("brownies" matches "brownie").
"""
from __future__ import annotations

import re
from collections import Counter

from mwb.evaluation.metrics import distinct_n

from .knowledge import base_forms

TOKEN = re.compile(r"[a-z0-9]+(?:['-][a-z0-9]+)*|'[a-z]+|[^\sa-z0-9]")


def words(text: str) -> list[str]:
    return TOKEN.findall(text.lower())


def story_distinct(stories: list[str], n: int = 4) -> float:
    return distinct_n([words(s) for s in stories], n)


def has_repeat(tokens: list[str], n: int) -> bool:
    grams = Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))
    return any(c > 1 for c in grams.values())


def repeat_n(stories: list[str], n: int = 4) -> float:
    """Share of ``stories`` that contain a repeated n-gram."""
    return sum(has_repeat(words(s), n) for s in stories) / len(stories) if stories else 0.0


def included(keyword: str, sentence: str) -> bool:
    forms = set()
    for w in words(sentence):
        forms |= base_forms(w) if w[:1].isalpha() else {w}
    return all(base_forms(k) & forms for k in words(keyword) if k[:1].isalpha())


def keyword_inclusion(pairs: list[tuple[list[str], str]]) -> float:
    """Share of all keywords (over ``(keywords, sentence)`` pairs) included in their sentence."""
    hits = [included(k, s) for ks, s in pairs for k in ks]
    return sum(hits) / len(hits) if hits else 0.0
