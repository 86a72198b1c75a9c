"""GLUE metrics equal scikit-learn and scipy on fixed predictions (ties and degenerate cases included)."""
import numpy as np
import pytest

from mwb.tasks.glue.metrics import average_ranks, binary_f1, matthews_corrcoef, pearson, spearman

sk = pytest.importorskip("sklearn.metrics")
stats = pytest.importorskip("scipy.stats")

RNG = np.random.default_rng(3)
LABELS = RNG.integers(0, 2, 200).tolist()
PREDS = [y if RNG.random() < 0.7 else 1 - y for y in LABELS]


def test_f1_and_matthews_match_sklearn():
    assert binary_f1(PREDS, LABELS) == pytest.approx(sk.f1_score(LABELS, PREDS), abs=1e-12)
    assert matthews_corrcoef(PREDS, LABELS) == pytest.approx(sk.matthews_corrcoef(LABELS, PREDS), abs=1e-12)
    flipped = [1 - p for p in PREDS]  # a bad classifier: negative correlation
    assert matthews_corrcoef(flipped, LABELS) == pytest.approx(sk.matthews_corrcoef(LABELS, flipped), abs=1e-12)
    assert matthews_corrcoef(flipped, LABELS) < 0


def test_degenerate_predictions_give_zero_like_sklearn():
    zeros = [0] * len(LABELS)
    assert binary_f1(zeros, LABELS) == sk.f1_score(LABELS, zeros, zero_division=0) == 0.0
    assert matthews_corrcoef(zeros, LABELS) == sk.matthews_corrcoef(LABELS, zeros) == 0.0


def test_pearson_and_spearman_match_scipy_with_ties():
    gold = np.round(RNG.uniform(0, 5, 150), 1)  # STS-B-like scores, many ties
    pred = np.round(gold + RNG.normal(0, 1.2, 150), 0)
    assert pearson(pred, gold) == pytest.approx(stats.pearsonr(pred, gold)[0], abs=1e-12)
    assert spearman(pred, gold) == pytest.approx(stats.spearmanr(pred, gold)[0], abs=1e-12)
    np.testing.assert_array_equal(average_ranks(pred), stats.rankdata(pred))
    assert pearson([1.0] * 5, [1, 2, 3, 4, 5]) == 0.0
