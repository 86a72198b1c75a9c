"""BBC topic per-article records: accuracy and the majority baseline, 0/1 each, average to the metrics."""
from mwb.tasks.bbc.topic import TOPICS, BbcTopic
from tests.helpers.records import assert_aggregates


def test_topic_records():
    ex = [{"id": f"{TOPICS[y]}/{i:03d}.txt", "label": y} for i, y in enumerate((1, 1, 1, 3, 0))]
    preds = [0, 1, 1, 3, 2]
    task = BbcTopic()
    recs = task.records(preds, ex)
    assert recs[0]["id"] == "entertainment/000.txt" and recs[0]["prediction"] == "business"
    assert assert_aggregates(recs, task.metrics(preds, ex), at_least=2) == ["accuracy", "majority_baseline"]
