"""The salient-span detector on fixed sentences, and the masked query built from it."""
import numpy as np

from mwb.retrieval.salient_spans import mask_salient, salient_spans


def spans(text):
    return [(s.text, s.kind) for s in salient_spans(text)]


def test_dates():
    assert spans("It opened on 12 March 1990 and closed in 2001.") == [("12 March 1990", "date"), ("2001", "date")]
    assert spans("He was born on December 25, 1642.") == [("December 25, 1642", "date")]
    assert spans("Sales fell in May. Prices rose in the 1990s.") == [("May", "date"), ("1990s", "date")]
    assert spans("It has 12345 parts and 300 rooms.") == []  # not years


def test_capitalised_names():
    assert spans("The Bank of England raised rates.") == [("Bank of England", "entity")]
    assert spans("Paris is the capital of France.") == [("France", "entity")]  # sentence-initial single word
    assert spans("However, Isaac Newton disagreed.") == [("Isaac Newton", "entity")]
    assert spans("The cat sat. It saw New York City from Brooklyn.") == [("New York City", "entity"),
                                                                          ("Brooklyn", "entity")]
    assert spans("the cat sat on the mat.") == []


def test_dates_win_over_overlapping_names():
    assert spans("On 4 July 1776 the United States declared independence.") == [
        ("4 July 1776", "date"), ("United States", "entity")]


def test_mask_salient():
    query, span = mask_salient("Isaac Newton was born in 1642.")
    assert (query, span.text) == ("[MASK] was born in 1642.", "Isaac Newton")
    seen = {mask_salient("Isaac Newton was born in 1642.", rng=np.random.default_rng(s), mask="_")[0]
            for s in range(20)}
    assert seen == {"_ was born in 1642.", "Isaac Newton was born in _."}
    assert mask_salient("nothing to see here.") is None
