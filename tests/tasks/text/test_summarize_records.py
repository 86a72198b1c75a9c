"""Summarization per-document records: ROUGE-1/2/L of the generation and of the lead sentence, each the
per-pair F × 100 whose mean the corpus number is."""
import pytest

from mwb.tasks.text.summarize import Summarize
from tests.helpers.records import assert_aggregates

pytest.importorskip("rouge_score")


def test_records_average_to_rouge():
    ex = [{"source": "Stocks fell sharply today. More later.", "summary": "Stocks fall"},
          {"source": "The team won the cup at home. Fans cheered.", "summary": "Team wins cup"},
          {"id": "x7", "source": "Rain is expected. Take an umbrella.", "summary": "More rain on the way"}]
    preds = ["Stocks fall", "team won", " rain expected tomorrow "]
    task = Summarize()
    recs = task.records(preds, ex)
    assert recs[2]["id"] == "x7" and recs[0]["rougeL"] == 100.0 and recs[2]["prediction"] == "rain expected tomorrow"
    names = assert_aggregates(recs, task.metrics(preds, ex), at_least=6)
    assert names == ["rouge1", "rouge2", "rougeL", "lead_rouge1", "lead_rouge2", "lead_rougeL"]
