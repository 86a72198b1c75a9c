"""SQuAD per-question records: v1.1 EM/F1 and v2.0 exact/F1 (0-100) average to the corpus numbers, and the
records of answerable / unanswerable questions to the HasAns / NoAns ones; ids are the question ids."""
from mwb.tasks.squad.task import Squad
from tests.helpers.records import assert_aggregates

EXAMPLES = [{"id": "q1", "answers": ["William Shakespeare"]}, {"id": "q2", "answers": ["1564", "in 1564"]},
            {"id": "q3", "answers": []}, {"id": "q4", "answers": []}, {"id": "q5", "answers": ["the Globe theatre"]}]
PREDS = [{"text": "Shakespeare", "span_text": "Shakespeare", "null_margin": -2.0},
         {"text": "", "span_text": "1564", "null_margin": 0.5},
         {"text": "", "span_text": "a house", "null_margin": 1.0},
         {"text": "the town", "span_text": "the town", "null_margin": -1.0},
         {"text": "Globe theatre", "span_text": "Globe theatre", "null_margin": -3.0}]


def test_v11_records():
    task = Squad(version="1.1")
    answerable = [0, 1, 4]
    ex, preds = [EXAMPLES[i] for i in answerable], [PREDS[i] for i in answerable]
    recs = task.records(preds, ex)
    assert [r["id"] for r in recs] == ["q1", "q2", "q5"] and [r["exact_match"] for r in recs] == [0.0, 0.0, 100.0]
    assert assert_aggregates(recs, task.metrics(preds, ex), at_least=2) == ["exact_match", "f1"]


def test_v20_records_and_hasans_noans_subsets():
    task = Squad(version="2.0")
    recs = task.records(PREDS, EXAMPLES)
    m = task.metrics(PREDS, EXAMPLES)
    assert assert_aggregates(recs, m, at_least=2) == ["exact", "f1"]
    for key, keep in (("HasAns_", True), ("NoAns_", False)):
        part = [r for r in recs if r["has_answer"] == keep]
        assert len(part) == m[f"{key}total"]
        assert_aggregates(part, {"exact": m[f"{key}exact"], "f1": m[f"{key}f1"]}, at_least=2)
    assert recs[1]["span_text"] == "1564" and recs[1]["null_margin"] == 0.5  # enough to redo the threshold search
