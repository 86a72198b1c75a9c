"""Entity-level NER scores equal seqeval's, conlleval-like default mode and strict IOB2, incl. I- after O."""
import random

import pytest

from mwb.tasks.bio.ner_metrics import entities, entity_scores

HAND_MADE = [  # (reference, prediction)
    (["B-Disease", "I-Disease", "O", "B-Chemical"], ["B-Disease", "I-Disease", "O", "B-Disease"]),
    (["O", "I-Disease", "I-Disease", "O"], ["O", "B-Disease", "I-Disease", "O"]),  # I- after O
    (["B", "I", "O", "B", "I", "I"], ["B", "I", "O", "I", "I", "I"]),
    (["I", "O", "I", "I"], ["I", "O", "B", "I"]),
    (["B-Chemical", "I-Disease", "I-Disease"], ["B-Chemical", "B-Disease", "I-Disease"]),  # type switch
    (["O", "O", "O"], ["B", "O", "I"]),
]


def _random_sequences(n, typed, seed):
    rng = random.Random(seed)
    tags = ["O", "B-Chemical", "I-Chemical", "B-Disease", "I-Disease"] if typed else ["O", "B", "I"]
    out = []
    for _ in range(n):
        length = rng.randint(1, 12)
        out.append(([rng.choice(tags) for _ in range(length)], [rng.choice(tags) for _ in range(length)]))
    return out


def _seqeval(refs, preds, strict):
    seqeval = pytest.importorskip("seqeval.metrics")
    kw = {}
    if strict:
        from seqeval.scheme import IOB2
        kw = {"mode": "strict", "scheme": IOB2}
    return (seqeval.precision_score(refs, preds, zero_division=0, **kw),
            seqeval.recall_score(refs, preds, zero_division=0, **kw),
            seqeval.f1_score(refs, preds, zero_division=0, **kw))


CASES = HAND_MADE + _random_sequences(22, typed=True, seed=1) + _random_sequences(22, typed=False, seed=2)


@pytest.mark.parametrize("mode", ["conlleval", "strict"])
def test_equals_seqeval_per_sentence_and_over_the_corpus(mode):
    assert len(CASES) == 50
    strict = mode == "strict"
    for ref, pred in CASES:
        got = entity_scores([pred], [ref], mode)
        assert (got["precision"], got["recall"], got["f1"]) == pytest.approx(_seqeval([ref], [pred], strict)), \
            (ref, pred)
    refs, preds = [r for r, _ in CASES], [p for _, p in CASES]
    got = entity_scores(preds, refs, mode)
    assert got["found"] > 20 and got["correct"] > 5
    assert (got["precision"], got["recall"], got["f1"]) == pytest.approx(_seqeval(refs, preds, strict))


def test_chunk_rules():
    assert entities(["O", "I-Disease", "I-Disease", "O"]) == [(1, 2, "Disease")]
    assert entities(["O", "I-Disease", "I-Disease", "O"], "strict") == []
    assert entities(["B", "I", "B", "O", "I"]) == [(0, 1, ""), (2, 2, ""), (4, 4, "")]
    assert entities(["B-Chemical", "I-Disease"]) == [(0, 0, "Chemical"), (1, 1, "Disease")]
    assert entities(["B-Chemical", "I-Disease"], "strict") == [(0, 0, "Chemical")]
    # nothing predicted, something gold: everything 0 rather than a division error
    assert entity_scores([["O", "O"]], [["B", "I"]])["f1"] == 0.0
