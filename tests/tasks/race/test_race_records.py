"""RACE per-question records: accuracy 0/1 with the level, so each level's records give its accuracy."""
from mwb.evaluation.predictions import aggregate
from mwb.tasks.race.task import Race
from tests.helpers.records import assert_aggregates


def test_records_per_level():
    task = Race()
    ex = task.read(task.default_data, "dev")
    preds = [i % 4 for i in range(len(ex))]
    recs = task.records(preds, ex)
    m = task.metrics(preds, ex)
    assert [r["id"] for r in recs] == [e["id"] for e in ex] and len(set(r["id"] for r in recs)) == len(ex)
    assert assert_aggregates(recs, m) == ["accuracy"]
    for level in ("middle", "high"):
        part = [r for r in recs if r["level"] == level]
        assert len(part) == m[f"count_{level}"] and aggregate(part, "accuracy") == m[f"accuracy_{level}"]
