"""Per-item records of the bio tasks add up to their corpus metrics: NER entity counts per sentence (both
chunking modes, = seqeval over the corpus), ChemProt's micro P/R/F1 parts (= scikit-learn), BioASQ per
question (snippets pooled)."""
import random

import numpy as np
import pytest

from mwb.core.tokenizers import load_tokenizer
from mwb.evaluation.predictions import aggregate
from mwb.tasks.bio.bioasq import BioASQ
from mwb.tasks.bio.chemprot import LABELS, RELATIONS, ChemProt
from mwb.tasks.bio.ner import NER
from mwb.tasks.bio.ner_metrics import entity_counts, entity_scores
from tests.helpers.records import assert_aggregates
from tests.tasks.bio.test_ner_metrics import CASES, _seqeval
from tests.tasks.encoder_helpers import TOKENIZER


@pytest.mark.parametrize("mode", ["conlleval", "strict"])
def test_entity_counts_sum_to_the_corpus_scores_and_seqeval(mode):
    refs, preds = [r for r, _ in CASES], [p for _, p in CASES]
    recs = [{"id": str(i), "f1": entity_counts(p, r, mode), "precision": entity_counts(p, r, mode),
             "recall": entity_counts(p, r, mode)} for i, (r, p) in enumerate(CASES)]
    want = entity_scores(preds, refs, mode)
    assert sum(r["f1"]["tp"] for r in recs) == want["correct"] and want["correct"] > 5
    for m in ("precision", "recall", "f1"):
        assert aggregate(recs, m) == pytest.approx(want[m], abs=1e-12)
    assert (aggregate(recs, "precision"), aggregate(recs, "recall"), aggregate(recs, "f1")) == \
        pytest.approx(_seqeval(refs, preds, mode == "strict"), abs=1e-12)


def test_ner_records_carry_tags_and_both_modes():
    task = NER()
    task.prepare(task.default_data)
    dev = task.read(task.default_data, "dev")[:30]
    rng = random.Random(0)
    preds = [[rng.randrange(task.num_labels) for _ in e["words"][: rng.randint(1, len(e["words"]))]] for e in dev]
    recs = task.records(preds, dev)
    assert [r["id"] for r in recs] == [f"devel.tsv#{i}" for i in range(30)]
    assert all(len(r["prediction"]) == len(r["gold"]) for r in recs)  # words cut off are predicted O
    names = assert_aggregates(recs, task.metrics(preds, dev), at_least=4)
    assert names == ["precision", "recall", "f1", "f1_strict"]


def test_chemprot_parts_equal_scikit_learn():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = random.Random(1)
    task = ChemProt()
    for _ in range(10):
        n = rng.randint(1, 30)
        examples = [{"id": str(i), "sentence": "s", "label": rng.randrange(len(LABELS))} for i in range(n)]
        preds = [rng.randrange(len(LABELS)) for _ in range(n)]
        recs = task.records(preds, examples)
        assert_aggregates(recs, task.metrics(preds, examples), at_least=4)
        p, r, f, _ = metrics.precision_recall_fscore_support([LABELS[e["label"]] for e in examples],
                                                             [LABELS[x] for x in preds], labels=list(RELATIONS),
                                                             average="micro", zero_division=0)
        assert (aggregate(recs, "precision"), aggregate(recs, "recall"), aggregate(recs, "f1")) == \
            pytest.approx((p, r, f), abs=1e-12)
    wrong = task.records([LABELS.index("CPR:3")], [{"id": "7", "label": LABELS.index("CPR:4")}])[0]
    assert wrong["f1"] == {"tp": 0, "fp": 1, "fn": 1} and wrong["id"] == "7"


def test_bioasq_records_are_per_question():
    task = BioASQ()
    ex = task.read(task.default_data, "dev")
    tok = load_tokenizer(TOKENIZER)
    preds = []
    for i, e in enumerate(ex):  # right answers, except every third snippet puts a wrong one first
        f = task.inputs(e, tok, 64)
        s, t = f["label"].tolist()
        logits = np.zeros((64, 2))
        logits[s, 0] = logits[t, 1] = 5.0
        if i % 3 == 0:
            logits[1 + int(np.argmax(f["char_start"] >= 0)), :] = 8.0
        preds.append(task.decode(logits, f))
    recs = task.records(preds, ex)
    assert len(recs) == 16 and all(len(r["id"]) == 24 for r in recs)
    got = task.metrics(preds, ex)
    assert assert_aggregates(recs, got, at_least=3) == ["strict_accuracy", "lenient_accuracy", "mrr"]
    assert 0 < got["strict_accuracy"] < 1
