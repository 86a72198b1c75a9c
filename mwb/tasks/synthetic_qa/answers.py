"""Stage 1, answer candidates: spans of a passage that a question could ask for.

Puri et al. sample answers with an extractive BERT model trained on SQuAD answer spans. No SQuAD-trained
answer model exists offline here, so the candidates come from the salient-span detector of the end-to-end
QA work (:func:`mwb.retrieval.salient_spans.salient_spans`: dates and capitalised names), which is what
the issue asks for when no answer model is trained. Per passage, up to ``per_passage`` distinct spans are
drawn (seeded). Each candidate keeps the sentence it sits in, the context question generation conditions on.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from mwb.retrieval.salient_spans import salient_spans

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"“(])")


@dataclass(frozen=True)
class Candidate:
    passage: int      # row of the passage in the corpus
    start: int        # character offset of the answer in the passage
    text: str         # the answer
    kind: str         # date or entity
    sentence: str     # the passage sentence holding the answer


def sentence_of(text: str, start: int, end: int) -> str:
    """The sentence of ``text`` that holds characters ``start:end`` (sentences end at . ! ? before a capital)."""
    bounds = [0] + [m.end() for m in _SENTENCE_END.finditer(text)] + [len(text)]
    for a, b in zip(bounds, bounds[1:]):
        if a <= start < b:
            return text[a:max(b, end)].strip()
    return text.strip()


def answer_candidates(passages: list[str], per_passage: int, seed: int) -> list[Candidate]:
    """Up to ``per_passage`` distinct salient spans of each passage, chosen with one seeded generator."""
    rng = np.random.default_rng(seed)
    out = []
    for row, text in enumerate(passages):
        spans, seen = [], set()
        for s in salient_spans(text):
            if s.text.lower() not in seen:
                seen.add(s.text.lower())
                spans.append(s)
        if not spans:
            continue
        picked = sorted(rng.choice(len(spans), size=min(per_passage, len(spans)), replace=False))
        out += [Candidate(row, spans[i].start, spans[i].text, spans[i].kind,
                          sentence_of(text, spans[i].start, spans[i].end)) for i in picked]
    return out
