"""Question generation's records are the generative default (SQuAD EM / F1 of the question), keyed by the
SQuAD question id."""
import json

from mwb.tasks.synthetic_qa.question_generation import QuestionGeneration
from tests.helpers.records import assert_aggregates


def test_records_keep_the_squad_question_id(tmp_path):
    data = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": "Ann was born in Paris in 1990.",
            "qas": [{"id": "qa1", "question": "Where was Ann born?", "answers": [{"text": "Paris", "answer_start": 16}]},
                    {"id": "qa2", "question": "When was Ann born?", "answers": [{"text": "1990", "answer_start": 25}]}]}]}]}
    (tmp_path / "dev-v1.1.json").write_text(json.dumps(data))
    task = QuestionGeneration()
    ex = task.read(str(tmp_path), "dev")
    preds = ["Where was Ann born?", "Who is Ann?"]
    recs = task.records(preds, ex)
    assert [r["id"] for r in recs] == ["qa1", "qa2"] and recs[0]["exact_match"] == 1.0
    assert assert_aggregates(recs, task.metrics(preds, ex), at_least=2) == ["exact_match", "f1"]
