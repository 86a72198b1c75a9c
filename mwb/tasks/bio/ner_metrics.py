"""Entity-level NER scores from BIO tags: exact-match micro precision/recall/F1 as ``conlleval`` counts them.

Why our own chunker rather than ``seqeval`` at run time: the official BioBERT/BioMegatron NER score is the
CoNLL-2000 ``conlleval`` script's, seqeval is only a test dependency here, and the chunk rules fit in a few
lines. Two modes, both checked against seqeval in the tests:

``conlleval`` (seqeval's default mode)
    any ``I-X`` that does not continue an entity of type X (after ``O``, after another type, at the start)
    starts a new entity; a ``B-X`` always starts one.
``strict`` (seqeval ``mode="strict", scheme=IOB2``)
    an entity is a ``B-X`` followed by ``I-X`` tags; an ``I-`` that does not continue one is not an entity.

Labels are ``O``, ``B``/``I`` (untyped, as BioBERT's NER sets) or ``B-TYPE``/``I-TYPE``. An entity is
``(sentence, start, end, type)`` and must match exactly, type included.
"""
from __future__ import annotations

from typing import Sequence

MODES = ("conlleval", "strict")


def split_tag(tag: str) -> tuple[str, str]:
    """``'B-Disease'`` → ``('B', 'Disease')``, ``'I'`` → ``('I', '')``, ``'O'`` → ``('O', '')``."""
    if tag == "O" or not tag:
        return "O", ""
    prefix, _, kind = tag.partition("-")
    return prefix, kind


def entities(tags: Sequence[str], mode: str = "conlleval") -> list[tuple[int, int, str]]:
    """The entities of one tagged sentence as ``(start, end_inclusive, type)``."""
    if mode not in MODES:
        raise ValueError(f"unknown NER scoring mode '{mode}' ({', '.join(MODES)})")
    out: list[tuple[int, int, str]] = []
    start, kind = None, ""
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, t = split_tag(tag)
        continues = prefix == "I" and start is not None and t == kind
        if start is not None and not continues:
            out.append((start, i - 1, kind))
            start = None
        if prefix == "B" or (prefix == "I" and not continues and mode == "conlleval"):
            start, kind = i, t
    return out


def entity_counts(prediction: Sequence[str], reference: Sequence[str], mode: str = "conlleval") -> dict:
    """One sentence's ``{"tp", "fp", "fn"}``: entities found and gold, found and not gold, gold and missed —
    the parts :func:`entity_scores` sums, so a subset of sentences can be rescored."""
    if len(prediction) != len(reference):
        raise ValueError(f"entity_counts: {len(prediction)} predicted tags for {len(reference)} words")
    p, g = set(entities(prediction, mode)), set(entities(reference, mode))
    return {"tp": len(p & g), "fp": len(p - g), "fn": len(g - p)}


def entity_scores(predictions: Sequence[Sequence[str]], references: Sequence[Sequence[str]],
                  mode: str = "conlleval") -> dict:
    """Micro P/R/F1 over all sentences (0 where undefined, as conlleval prints) plus the counts."""
    if len(predictions) != len(references):
        raise ValueError(f"entity_scores: {len(predictions)} predicted sentences for {len(references)} references")
    found = correct = gold = 0
    for i, (pred, ref) in enumerate(zip(predictions, references)):
        if len(pred) != len(ref):
            raise ValueError(f"entity_scores: sentence {i} has {len(pred)} predicted tags for {len(ref)} words")
        p, g = set(entities(pred, mode)), set(entities(ref, mode))
        found, gold, correct = found + len(p), gold + len(g), correct + len(p & g)
    return {**micro_scores(correct, found, gold), "found": found, "gold": gold, "correct": correct}


def micro_scores(correct: int, found: int, gold: int) -> dict:
    """conlleval's precision, recall and F1 = 2PR / (P + R) of summed counts (0 where undefined)."""
    precision = correct / found if found else 0.0
    recall = correct / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def conlleval_f1(field: str):
    """The corpus F1 of the records' ``{tp, fp, fn}`` under ``field``, as conlleval computes it (2PR / (P + R),
    which differs in the last bit from the parts' 2tp / (2tp + fp + fn)): a function for a ``corpus`` metric."""
    def f1(records: Sequence[dict]) -> float:
        tp, fp, fn = (sum(r[field][k] for r in records) for k in ("tp", "fp", "fn"))
        return micro_scores(tp, tp + fp, tp + fn)["f1"]
    return f1
