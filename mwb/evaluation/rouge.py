"""ROUGE-1/2/L F-measure of generated summaries, through Google's ``rouge-score`` package.

Why the library: it is the reference implementation the summarization literature reports (with Porter
stemming, as here); mwb only averages its per-pair F-measures over the corpus, in percent.
"""
from __future__ import annotations

from typing import Sequence

from mwb.core.errors import MwbError

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")


def pair_scores(predictions: Sequence[str], references: Sequence[str], stem: bool = True) -> list[dict[str, float]]:
    """Each (prediction, reference) pair's F-measure × 100 per ROUGE type: the per-item values whose mean
    :func:`rouge_scores` reports."""
    try:
        from rouge_score import rouge_scorer
    except ImportError as e:  # an optional dependency: name the fix
        raise MwbError("ROUGE needs rouge-score: pip install rouge-score (or 'mwb[data]')") from e
    if len(predictions) != len(references):
        raise ValueError(f"rouge: {len(predictions)} predictions for {len(references)} references")
    scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=stem)
    return [{key: 100.0 * score.fmeasure for key, score in scorer.score(ref, pred).items()}
            for pred, ref in zip(predictions, references)]


def rouge_scores(predictions: Sequence[str], references: Sequence[str], stem: bool = True) -> dict[str, float]:
    """Mean F-measure × 100 of each ROUGE type over the (prediction, reference) pairs."""
    pairs = pair_scores(predictions, references, stem)
    n = max(len(pairs), 1)
    return {key: sum(p[key] for p in pairs) / n for key in ROUGE_TYPES}
