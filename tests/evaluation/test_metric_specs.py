"""Declared metrics (issue 43, records first): each kind aggregates records as its reference computation
does, and a declaration the aggregator cannot honour fails where it is written."""
import math

import pytest

from mwb.core.errors import DataError
from mwb.evaluation.metric_specs import KINDS, MetricSpec, aggregate_metrics

RECORDS = [{"id": "a", "acc": 1, "level": "m", "f1": {"tp": 2, "fp": 1, "fn": 0}, "ppl": {"nll": 3.0, "tokens": 2}},
           {"id": "b", "acc": 0, "level": "h", "f1": {"tp": 0, "fp": 1, "fn": 2}, "ppl": {"nll": 1.0, "tokens": 1}},
           {"id": "c", "acc": 1, "level": "h", "f1": {"tp": 1, "fp": 0, "fn": 1}, "ppl": {"nll": 2.0, "tokens": 3},
            "only": 0.5}]


def test_each_kind_against_its_hand_computation():
    specs = (MetricSpec("accuracy", "mean", field="acc"), MetricSpec("accuracy_h", "mean", field="acc", where=("level", "h")),
             MetricSpec("count_h", "count", where=("level", "h")), MetricSpec("f1", "f1"),
             MetricSpec("precision", "precision", field="f1"), MetricSpec("recall", "recall", field="f1"),
             MetricSpec("ppl", "ppl"), MetricSpec("loss", "nll", field="ppl"),
             MetricSpec("only", "mean", optional=True), MetricSpec("absent", "mean", optional=True),
             MetricSpec("ids", "corpus", fn=lambda rs: "".join(r["id"] for r in rs)), MetricSpec("extra", "summary"))
    got = aggregate_metrics(RECORDS, specs, {"extra": 7})
    assert list(got) == ["accuracy", "accuracy_h", "count_h", "f1", "precision", "recall", "ppl", "loss", "only",
                         "ids", "extra"]  # declaration order; the optional metric no record carries is left out
    assert got["accuracy"] == 2 / 3 and got["accuracy_h"] == 0.5 and got["count_h"] == 2
    assert got["f1"] == 2 * 3 / (2 * 3 + 2 + 3) and got["precision"] == 3 / 5 and got["recall"] == 3 / 6
    assert got["ppl"] == pytest.approx(math.exp(6 / 6)) and got["loss"] == 1.0
    assert got["only"] == 0.5 and got["ids"] == "abc" and got["extra"] == 7
    assert math.isnan(aggregate_metrics(RECORDS, (MetricSpec("x", "mean", field="acc", where=("level", "z")),))["x"])


def test_a_kind_the_aggregator_does_not_know_fails_where_it_is_declared():
    with pytest.raises(ValueError, match="unknown kind 'median'.*known: mean"):
        MetricSpec("accuracy", "median")
    from mwb.tasks.api.base import Task
    with pytest.raises(ValueError, match="unknown kind 'geomean'"):
        class Bad(Task):  # noqa: F841  (the class body fails: a task cannot declare it)
            metric_specs = (MetricSpec("accuracy", "geomean"),)
    assert "median" not in KINDS and {"mean", "f1", "corpus", "summary", "count"} <= set(KINDS)


def test_declarations_that_cannot_hold_are_errors():
    with pytest.raises(ValueError, match="function is declared for kind 'corpus' and only there"):
        MetricSpec("pearson", "corpus")
    with pytest.raises(ValueError, match="only there"):
        MetricSpec("accuracy", "mean", fn=len)
    with pytest.raises(DataError, match="'acc' is declared f1 but an item holds 1"):
        aggregate_metrics(RECORDS, (MetricSpec("acc", "f1"),))  # a number where the kind needs parts
    with pytest.raises(DataError, match="declared ppl but an item holds"):
        aggregate_metrics(RECORDS, (MetricSpec("f1", "ppl"),))  # the wrong parts
    with pytest.raises(ValueError, match=r"summary numbers \['baseline'\] are not declared"):
        aggregate_metrics(RECORDS, (MetricSpec("f1", "f1"),), {"baseline": 0.3})
    with pytest.raises(ValueError, match="declared twice"):
        aggregate_metrics(RECORDS, (MetricSpec("f1", "f1"), MetricSpec("f1", "f1")))
    with pytest.raises(DataError, match="no metric 'only'"):
        aggregate_metrics(RECORDS, (MetricSpec("only", "mean"),))  # not optional: every record must carry it
