"""Dialogue unigram F1 written out by hand (ParlAI's rule: lower case, punctuation → space, no a/an/the,
multiset overlap), so tests compare the task's numbers with a second implementation, not with itself."""
from __future__ import annotations

import string
from collections import Counter


def tokens(text: str) -> list[str]:
    text = "".join(" " if c in string.punctuation else c for c in text.lower())
    return [w for w in text.split() if w not in ("a", "an", "the")]


def hand_f1(guess: str, reference: str) -> float:
    g, r = tokens(guess), tokens(reference)
    same = sum((Counter(g) & Counter(r)).values())
    return 0.0 if same == 0 else 2 * same / (len(g) + len(r))  # = 2PR / (P + R)
