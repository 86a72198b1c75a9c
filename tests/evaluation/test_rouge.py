"""ROUGE equals rouge-score called directly on the same pairs (stemming on)."""
import pytest

from mwb.evaluation.rouge import rouge_scores

rouge_scorer = pytest.importorskip("rouge_score.rouge_scorer")

PAIRS = [("the cats are running home", "a cat runs home"), ("markets rally on strong earnings", "Markets rallied"),
         ("", "nothing predicted"), ("same words here", "same words here")]


def test_equals_rouge_score_directly():
    preds, refs = [p for p, _ in PAIRS], [r for _, r in PAIRS]
    got = rouge_scores(preds, refs)
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    direct = [scorer.score(r, p) for p, r in PAIRS]
    for key in ("rouge1", "rouge2", "rougeL"):
        assert got[key] == pytest.approx(100 * sum(d[key].fmeasure for d in direct) / len(PAIRS), abs=1e-12)
    assert rouge_scores(preds, refs, stem=False)["rouge1"] < got["rouge1"]  # stemming matters: cats/cat, runs
