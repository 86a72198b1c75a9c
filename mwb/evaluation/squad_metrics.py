"""SQuAD 2.0 scoring (``evaluate-v2.0.py``'s definitions): unanswerable questions, HasAns/NoAns splits and
the best null-score threshold.

An unanswerable question has no gold answers and counts as the single gold answer ``""``; a prediction
scores EM = F1 = 1 on it exactly when it is empty. Answerable questions use the v1.1 normalisation and
token F1 (:mod:`mwb.evaluation.metrics`), except that an answer normalising to nothing scores 1 only
against an empty prediction.
"""
from __future__ import annotations

from typing import Sequence

from .metrics import normalize_answer, squad_exact_match, squad_f1


def em_f1(prediction: str, answers: Sequence[str]) -> tuple[float, float]:
    """One question's (EM, F1) in 0–1 under the v2.0 rules above (no gold answers: both 1 iff empty)."""
    golds = [a for a in answers if normalize_answer(a)] or [""]
    if golds == [""]:
        hit = float(not normalize_answer(prediction))
        return hit, hit
    if not normalize_answer(prediction):
        return 0.0, 0.0
    return squad_exact_match(prediction, golds), squad_f1(prediction, golds)


def squad_v2_scores(predictions: Sequence[str], answers: Sequence[Sequence[str]]) -> dict:
    """``exact``/``f1`` over all questions and over the ``HasAns`` and ``NoAns`` ones, in percent, with the
    counts (``HasAns_total``, ``NoAns_total``)."""
    if len(predictions) != len(answers):
        raise ValueError(f"squad: {len(predictions)} predictions for {len(answers)} questions")
    rows = [(bool(a), *em_f1(p, a)) for p, a in zip(predictions, answers)]
    out = {}
    for key, keep in (("", None), ("HasAns_", True), ("NoAns_", False)):
        part = [r for r in rows if keep is None or r[0] == keep]
        n = len(part)
        out[f"{key}exact"] = 100.0 * sum(r[1] for r in part) / n if n else float("nan")
        out[f"{key}f1"] = 100.0 * sum(r[2] for r in part) / n if n else float("nan")
        if key:
            out[f"{key}total"] = n
    return out


def best_null_threshold(span_texts: Sequence[str], null_margins: Sequence[float],
                        answers: Sequence[Sequence[str]]) -> dict:
    """The threshold ``t`` that maximises EM (and F1) when a question is answered with its best span if
    ``null score − best span score ≤ t`` and left empty otherwise (``find_best_thresh`` of the official
    script, with the margin as the no-answer probability): ``best_exact``, ``best_exact_threshold``,
    ``best_f1``, ``best_f1_threshold``. Starting from "all empty", questions are answered in increasing
    margin order and the running score is tracked."""
    n = len(span_texts)
    order = sorted(range(n), key=lambda k: null_margins[k])
    out = {}
    for i, key in ((0, "exact"), (1, "f1")):
        score = sum(em_f1("", a)[i] for a in answers)  # every question left empty
        best, best_t = score, min(null_margins, default=0.0) - 1.0
        for pos, k in enumerate(order):
            score += em_f1(span_texts[k], answers[k])[i] - em_f1("", answers[k])[i]
            tied = pos + 1 < n and null_margins[order[pos + 1]] == null_margins[k]
            if not tied and score > best:  # a threshold answers every question of an equal margin
                best, best_t = score, null_margins[k]
        out[f"best_{key}"] = 100.0 * best / n if n else float("nan")
        out[f"best_{key}_threshold"] = float(best_t)
    return out
