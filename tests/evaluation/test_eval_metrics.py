"""Each metric against a reference: scikit-learn, seqeval-independent hand counts, the official SQuAD
script's definition worked by hand, and the formulas."""
import math

import pytest

from mwb.evaluation import metrics as M


def test_accuracy_matches_sklearn():
    sk = pytest.importorskip("sklearn.metrics")
    cases = [([1, 0, 2, 2, 1], [1, 1, 2, 0, 1]), (["a", "b"], ["a", "b"]), ([0] * 7, [1] * 7)]
    for pred, ref in cases:
        assert M.accuracy(pred, ref) == pytest.approx(sk.accuracy_score(ref, pred))
    assert M.accuracy([], []) == 0.0
    with pytest.raises(ValueError):
        M.accuracy([1], [1, 2])


def test_squad_normalisation_and_scores():
    # lowercase → drop punctuation → drop articles → squash whitespace
    assert M.normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert M.normalize_answer("an apple, a pear and THE plum.") == "apple pear and plum"
    assert M.normalize_answer("theatre") == "theatre"  # "the" only as a whole word
    assert M.squad_exact_match("the Eiffel Tower", ["Eiffel Tower!"]) == 1.0
    assert M.squad_exact_match("Eiffel", ["Eiffel Tower"]) == 0.0
    # pred {eiffel, tower, paris} vs gold {eiffel, tower}: P = 2/3, R = 1 → F1 = 0.8
    assert M.squad_f1("Eiffel Tower, Paris", "the Eiffel Tower") == pytest.approx(0.8)
    # bag of tokens: "x x y" vs "x y y" → common {x:1, y:1} = 2, P = R = 2/3
    assert M.squad_f1("x x y", "x y y") == pytest.approx(2 / 3)
    assert M.squad_f1("nothing", "else") == 0.0
    # max over ground truths
    assert M.squad_f1("Paris", ["London", "Paris France"]) == pytest.approx(2 * 1 * 0.5 / 1.5)
    s = M.squad_scores(["Paris", "Rome"], [["Paris"], ["Milan", "Turin"]])
    assert s == {"exact_match": 50.0, "f1": 50.0}


def test_perplexities():
    assert M.perplexity(2 * math.log(3.0), 2) == pytest.approx(3.0)
    # 12 tokens of total NLL 6.0 over 4 words → exp(1.5)
    assert M.word_perplexity(6.0, 4) == pytest.approx(math.exp(1.5))
    assert M.perplexity(1e6, 1) == float("inf")
    with pytest.raises(ValueError):
        M.perplexity(1.0, 0)


def test_distinct_n():
    texts = ["the cat sat", "the cat ran"]
    assert M.distinct_n(texts, 1) == pytest.approx(4 / 6)  # the, cat, sat, ran of 6 unigrams
    assert M.distinct_n(texts, 2) == pytest.approx(3 / 4)  # (the cat) twice
    assert M.distinct_n([["a"]], 2) == 0.0
