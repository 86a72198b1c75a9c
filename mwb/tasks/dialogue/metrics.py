"""Dialogue metrics: unigram F1 against the gold response and knowledge F1 (KF1) against the gold knowledge.

Why separate from the SQuAD F1 in :mod:`.metrics`: dialogue papers (Wizard of Wikipedia, Megatron's MSDP,
ParlAI) normalise differently. ParlAI's ``normalize_answer`` turns punctuation into *spaces* ("don't" →
"don t", two tokens) where SQuAD deletes it ("dont", one token); then lowercase, drop the articles
a/an/the, split on whitespace. F1 is the harmonic mean of unigram precision and recall over the multiset
overlap, the maximum over the references when there are several; a corpus score is the mean over
examples. KF1 is the same F1 with the gold knowledge sentence as the reference: how much of the knowledge
the response uses.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Optional, Sequence

_PUNCT = re.compile(r"[!\"#$%&()*+,\-./:;<=>?@\[\]\\^`{|}~_']")
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize(text: str) -> str:
    """ParlAI's normalisation: lowercase, punctuation → space, drop a/an/the, squash whitespace."""
    text = _PUNCT.sub(" ", text.lower())
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def precision_recall_f1(guess: str, reference: str) -> tuple[float, float, float]:
    """Unigram (precision, recall, F1) of ``guess`` against one ``reference``, after :func:`normalize`;
    zeros when either side is empty or nothing overlaps."""
    g, r = normalize(guess).split(), normalize(reference).split()
    same = sum((Counter(g) & Counter(r)).values())
    if not g or not r or same == 0:
        return 0.0, 0.0, 0.0
    p, rec = same / len(g), same / len(r)
    return p, rec, 2 * p * rec / (p + rec)


def unigram_f1(guess: str, references: Sequence[str] | str) -> float:
    """F1 of ``guess`` against the best of ``references`` (a string is one reference)."""
    refs = [references] if isinstance(references, str) else list(references)
    return max((precision_recall_f1(guess, r)[2] for r in refs), default=0.0)


def knowledge_f1(guess: str, knowledge: Optional[str]) -> float:
    """KF1: unigram F1 of ``guess`` against the gold knowledge sentence (0 when there is none)."""
    return unigram_f1(guess, knowledge) if knowledge else 0.0


def dialogue_scores(guesses: Sequence[str], responses: Sequence[Sequence[str] | str],
                    knowledge: Optional[Sequence[Optional[str]]] = None) -> dict[str, float]:
    """``{"f1", "count"}`` (plus ``"kf1"`` when ``knowledge`` is given): means over examples, in [0, 1]."""
    if len(guesses) != len(responses):
        raise ValueError(f"dialogue_scores: {len(guesses)} guesses for {len(responses)} responses")
    n = len(guesses)
    out = {"f1": sum(unigram_f1(g, r) for g, r in zip(guesses, responses)) / n if n else 0.0, "count": n}
    if knowledge is not None:
        if len(knowledge) != n:
            raise ValueError(f"dialogue_scores: {n} guesses for {len(knowledge)} knowledge sentences")
        out["kf1"] = sum(knowledge_f1(g, k) for g, k in zip(guesses, knowledge)) / n if n else 0.0
    return out
