"""Dialogue F1 / KF1 against values computed by hand on fixed strings (ParlAI normalisation)."""
from __future__ import annotations

import pytest

from mwb.tasks.dialogue.metrics import (dialogue_scores, knowledge_f1, normalize, precision_recall_f1,
                                             unigram_f1)
from mwb.evaluation.metrics import squad_f1


def test_normalize_punctuation_becomes_space_and_articles_go():
    assert normalize("The cat's hat, isn't it?") == "cat s hat isn t it"
    assert normalize("  A  an THE anthem  ") == "anthem"  # articles only as whole words


def test_f1_hand_computed():
    # "cat sat on mat" vs "cat is on mat": 3 shared of 4 and 4
    assert precision_recall_f1("The cat sat on a mat.", "A cat is on the mat!") == pytest.approx((0.75, 0.75, 0.75))
    # multiset overlap: yes min(3,1) + no min(1,2) = 2; p = 2/4, r = 2/3, F1 = 4/7
    assert unigram_f1("yes yes yes no", "yes no no") == pytest.approx(4 / 7)
    # the best reference wins: 0.5 against the first, 0.8 against the second
    assert unigram_f1("blue sky", ["red sky", "blue sky today"]) == pytest.approx(0.8)
    assert unigram_f1("", "anything") == 0.0 and unigram_f1("a the", "the") == 0.0


def test_punctuation_splits_unlike_squad():
    assert unigram_f1("don't", "don t") == 1.0
    assert squad_f1("don't", "don t") == 0.0  # SQuAD deletes punctuation: "dont" vs "don t"


def test_kf1_and_corpus_mean():
    guess = "The Eiffel Tower is in Paris."
    know = "The Eiffel Tower is a wrought-iron lattice tower in Paris, France."
    # guess: eiffel tower is in paris (5); knowledge: 10 tokens; overlap 5 -> p 1, r 1/2, F1 2/3
    assert knowledge_f1(guess, know) == pytest.approx(2 / 3)
    assert knowledge_f1(guess, None) == 0.0
    scores = dialogue_scores([guess, "yes yes yes no"], ["Paris has the Eiffel Tower", ["yes no no"]],
                             [know, None])
    # F1 of the first: guess 5 tokens, reference "paris has eiffel tower" 4, overlap 3 -> p 3/5, r 3/4
    f1_first = 2 * 0.6 * 0.75 / 1.35
    assert scores["f1"] == pytest.approx((f1_first + 4 / 7) / 2)
    assert scores["kf1"] == pytest.approx((2 / 3 + 0.0) / 2)
    assert scores["count"] == 2
    with pytest.raises(ValueError):
        dialogue_scores(["x"], [])
