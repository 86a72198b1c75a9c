"""GLUE per-example records: accuracy 0/1 everywhere, the positive class's F1 parts for QQP / MRPC (= the
corpus F1 of scikit-learn), no per-item part for the correlations; ids from the index column."""
import random

import pytest

from mwb.evaluation.predictions import aggregate
from mwb.tasks.glue.task import Glue
from tests.helpers.records import assert_aggregates


@pytest.mark.parametrize("name,carried", [("qqp", ["accuracy", "f1"]), ("mrpc", ["accuracy", "f1"]),
                                          ("cola", ["accuracy"]), ("mnli", ["accuracy"])])
def test_records_aggregate_to_glue_metrics(name, carried):
    rng = random.Random(len(name))
    task = Glue(task=name)
    examples = [{"index": str(100 + i), "text": ["a", "b"], "label": rng.randrange(task.num_labels)} for i in range(40)]
    preds = [rng.randrange(task.num_labels) for _ in examples]
    recs = task.records(preds, examples)
    assert [r["id"] for r in recs] == [str(100 + i) for i in range(40)]
    assert assert_aggregates(recs, task.metrics(preds, examples), at_least=len(carried)) == carried


def test_stsb_and_unlabelled_records_carry_predictions_only(tmp_path):
    task = Glue(task="stsb")
    recs = task.records([1.5, 3.25], [{"index": "0", "label": 2.0}, {"index": "1", "label": 3.0}])
    assert [(r["prediction"], r["gold"]) for r in recs] == [(1.5, 2.0), (3.25, 3.0)] and "pearson" not in recs[0]
    test = Glue(task="qnli", submission=str(tmp_path / "QNLI.tsv"))
    recs = test.records([1, 0], [{"index": "4", "label": None}, {"index": "9", "label": None}])
    assert recs == [{"id": "4", "prediction": 1, "gold": None}, {"id": "9", "prediction": 0, "gold": None}]
    assert aggregate(Glue(task="qqp").records([1], [{"index": "0", "label": 1}]), "f1") == 1.0
