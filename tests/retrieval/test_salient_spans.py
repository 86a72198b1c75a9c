"""The salient-span detector on fixed sentences, the masked query built from it, and MSS questions."""
import numpy as np

from mwb.retrieval.salient_spans import mask_salient, mss_questions, salient_question, salient_spans


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


def test_salient_question_forms():
    rng = np.random.default_rng(0)
    asked = {salient_question("Isaac Newton was born in 1642 near Grantham.", np.random.default_rng(s))
             for s in range(30)}
    assert {(q, sp.text) for q, sp in asked} == {("what was born in 1642 near Grantham?", "Isaac Newton"),
                                                 ("Isaac Newton was born in what year near Grantham?", "1642"),
                                                 ("Isaac Newton was born in 1642 near what?", "Grantham")}
    q, sp = salient_question("The treaty was signed on 4 July 1776 in secret.", rng)
    assert (q, sp.text) == ("The treaty was signed on when in secret?", "4 July 1776")
    assert salient_question("What did Isaac Newton see in 1666?") is None  # would be ambiguous
    assert salient_question("the cat sat on the mat.") is None
    assert salient_question("It joined the Very Long Named Union Of Many Small Northern States.") is None


def test_mss_questions_come_from_their_passages_with_unique_answers():
    texts = ["Isaac Newton was born in 1642 near the town of Grantham in England.",
             "no names at all are in this rather long lower case sentence here.",
             "The Bank of England was founded in 1694 to lend money to the King.",
             "Marie Curie won the Nobel Prize in Physics in the year 1903.", "Too short: Paris."]
    qs = mss_questions(texts, 10, seed=3)
    assert qs == mss_questions(texts, 10, seed=3) and len(qs) == 3  # one per passage that has a span
    assert {q["passage"] for q in qs} == {0, 2, 3}
    for q in qs:
        assert q["question"].endswith("?") and q["answers"][0] in texts[q["passage"]]
        assert q["answers"][0] not in q["question"]
    assert len(mss_questions(texts, 2, seed=3)) == 2
    twice = mss_questions(texts * 2, 10, seed=3)  # each passage twice: an answer is still asked once
    assert len({q["answers"][0] for q in twice}) == len(twice) >= 3
