"""BioASQ factoid scoring as BioBERT does it: pool the snippets' n-best answers per question, then strict
accuracy, lenient accuracy and MRR against the golden synonym lists.

Why pooling: a BioASQ question comes with several snippets and the SQuAD-style model answers each snippet
on its own; the question's answer list is built from all of them. Empty answers and answers over 100
characters are dropped, answers equal up to case are merged by summing their probabilities, and the 5 most
probable are kept (the official factoid submission holds at most 5). An answer matches a gold answer when
it equals one of its synonyms up to case and surrounding whitespace.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from mwb.core.errors import DataError

from ..api.formats.checks import read_json, shown

TOP = 5
MAX_CHARS = 100


def pool_answers(candidates: Iterable[tuple[str, float]], top: int = TOP, max_chars: int = MAX_CHARS) -> list[str]:
    """``(text, probability)`` pairs of all snippets of one question → at most ``top`` answers, best first
    (ties keep the first-seen spelling and order)."""
    merged: dict[str, list] = {}
    for text, prob in candidates:
        text = text.strip()
        if not text or len(text) > max_chars:
            continue
        key = text.lower()
        if key in merged:
            merged[key][1] += prob
        else:
            merged[key] = [text, prob]
    ranked = sorted(merged.values(), key=lambda tp: -tp[1])
    return [t for t, _ in ranked[:top]]


def synonyms(exact_answer) -> list:
    """BioASQ's ``exact_answer`` (a string, a list of synonyms, or a list of synonym lists) as one flat list
    (anything else in it is kept as it is, for :func:`read_golden` to refuse)."""
    if isinstance(exact_answer, str):
        return [exact_answer]
    if not isinstance(exact_answer, list):
        return [exact_answer]
    out: list = []
    for a in exact_answer:
        out.extend(synonyms(a))
    return out


def read_golden(path: str) -> dict[str, list[str]]:
    """Question id → gold synonyms from a BioASQ golden file (``{"questions": [...]}`` or a bare list)."""
    data = read_json(path)
    questions = data.get("questions") if isinstance(data, dict) else data
    if not isinstance(questions, list):
        raise DataError(f"{path}: expected {{\"questions\": [...]}} or a list of questions")
    out = {}
    for n, q in enumerate(questions):
        if not isinstance(q, dict) or "id" not in q or "exact_answer" not in q:
            raise DataError(f"{path}: question {n} lacks 'id' or 'exact_answer'")
        gold = synonyms(q["exact_answer"]) if isinstance(q["exact_answer"], (str, list)) else None
        if not isinstance(q["id"], str) or not gold or not all(isinstance(g, str) for g in gold):
            raise DataError(f"{path}: question {n}: 'id' must be a string and 'exact_answer' a string or "
                            f"(nested) list of strings, got {shown(q['id'])} / {shown(q['exact_answer'])}")
        out[q["id"]] = gold
    return out


def question_scores(predicted: Sequence[str], gold: Sequence[str]) -> dict:
    """One question's ``strict_accuracy`` and ``lenient_accuracy`` (0/1) and reciprocal rank ``mrr`` of its
    first matching answer among the top 5 (0 without one)."""
    want = {g.strip().lower() for g in gold}
    ranks = [i for i, a in enumerate(list(predicted)[:TOP]) if a.strip().lower() in want]
    if not ranks:
        return {"strict_accuracy": 0.0, "lenient_accuracy": 0.0, "mrr": 0.0}
    return {"strict_accuracy": float(ranks[0] == 0), "lenient_accuracy": 1.0, "mrr": 1 / (ranks[0] + 1)}


def factoid_scores(predictions: dict[str, Sequence[str]], golden: dict[str, Sequence[str]]) -> dict:
    """Strict accuracy (the first answer matches), lenient accuracy (any of the top 5 does) and MRR (1/rank of
    the first match, 0 without one), averaged over the golden questions; a question with no prediction scores 0."""
    strict = lenient = rr = 0.0
    for qid, gold in golden.items():
        one = question_scores(predictions.get(qid, []), gold)
        strict += one["strict_accuracy"]
        lenient += one["lenient_accuracy"]
        rr += one["mrr"]
    n = len(golden)
    return {"strict_accuracy": strict / n if n else 0.0, "lenient_accuracy": lenient / n if n else 0.0,
            "mrr": rr / n if n else 0.0, "questions": n}
