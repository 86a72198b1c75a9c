"""Micro precision/recall/F1 over a chosen subset of classes (the BLUE ChemProt / DDI score).

Why a subset: in relation extraction most pairs carry a "no relation" class (ChemProt's ``false``) that is
not a relation, so it is left out of the counts: a pair predicted as one of ``labels`` is a true positive when
its gold class is the same, a false positive otherwise (a ``false`` pair predicted as ``CPR:3`` included),
and every gold pair of one of ``labels`` that is missed is a false negative: scikit-learn's
``precision_recall_fscore_support(y_true, y_pred, labels=labels, average="micro")``, with the counts beside it.
"""
from __future__ import annotations

from typing import Hashable, Sequence



def micro_prf(predictions: Sequence[Hashable], references: Sequence[Hashable], labels: Sequence[Hashable]) -> dict:
    """``{"precision", "recall", "f1", "tp", "predicted", "gold"}``; 0 where a ratio is undefined."""
    if len(predictions) != len(references):
        raise ValueError(f"micro_prf: {len(predictions)} predictions for {len(references)} references")
    keep = set(labels)
    from sklearn.metrics import precision_recall_fscore_support  # on use: a second of every start-up

    precision, recall, f1, _ = precision_recall_fscore_support(
        list(references), list(predictions), labels=list(labels), average="micro", zero_division=0)
    tp = sum(1 for p, r in zip(predictions, references) if p == r and p in keep)
    return {"precision": float(precision), "recall": float(recall), "f1": float(f1), "tp": tp,
            "predicted": sum(1 for p in predictions if p in keep), "gold": sum(1 for r in references if r in keep)}


def prf_counts(prediction: Hashable, reference: Hashable, labels: Sequence[Hashable]) -> dict:
    """One item's ``{"tp", "fp", "fn"}`` for :func:`micro_prf`: a prediction in ``labels`` is a true positive
    when it is the gold class, else a false positive; a gold class in ``labels`` not predicted is a false
    negative (a wrong relation counts once as each). Summed over items, they give micro_prf's scores."""
    keep = set(labels)
    hit = prediction == reference
    return {"tp": int(hit and prediction in keep), "fp": int(not hit and prediction in keep),
            "fn": int(not hit and reference in keep)}
