"""Bias prompt records: plain and calibrated accuracy 0/1 average to the metrics, per category too; a sweep's
records are told apart by their (shots, seed) prompt."""
import numpy as np
from sklearn.metrics import f1_score

from mwb.evaluation.predictions import aggregate
from mwb.tasks.bias.sweep import BiasSweep
from mwb.tasks.bias.task import BiasTask, bias_metrics
from tests.helpers.records import assert_aggregates


def _results(configs, n, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for c in configs:
        for i in range(n):
            p = rng.dirichlet([1, 1])
            out.append({"config": c, "p": p.tolist(), "p_cf": rng.dirichlet([1, 1]).tolist(), "label": int(i % 3 == 0),
                        "category": "race" if i % 2 else "gender"})
    return out


def test_records_aggregate_to_accuracy_plain_and_calibrated():
    task = BiasTask(shots=2, seed=1)
    ex = [{"text": f"post {i}", "label": int(i % 3 == 0), "category": "race" if i % 2 else "gender"} for i in range(30)]
    results = _results(task.configs(), len(ex))
    recs = task.records(results, ex)
    m = bias_metrics(results)
    names = assert_aggregates(recs, m, at_least=6)
    assert names == ["accuracy", "macro_f1", "positive_rate", "calibrated_accuracy", "calibrated_macro_f1",
                     "calibrated_positive_rate"]
    for prefix in ("", "calibrated_"):  # macro-F1 from the summed confusion cells is scikit-learn's
        cells = [r[f"{prefix}macro_f1"] for r in recs]
        assert all(sorted(c.values()) == [0, 0, 0, 1] for c in cells)
        gold = [r["gold"] for r in recs]
        pred = [r["prediction"] if not prefix else int(r["calibrated_positive_rate"]) for r in recs]
        assert aggregate(recs, f"{prefix}macro_f1") == f1_score(gold, pred, average="macro", labels=[0, 1],
                                                                 zero_division=0)
    for cat in ("race", "gender"):
        part = [r for r in recs if r["category"] == cat]
        assert aggregate(part, "accuracy") == m[f"accuracy_{cat}"]
        assert aggregate(part, "calibrated_accuracy") == m[f"calibrated_accuracy_{cat}"]


def test_sweep_records_name_their_prompt():
    task = BiasSweep(shots_grid="0,2", seeds="1,2")
    ex = [{"text": f"post {i}"} for i in range(4)]
    recs = task.records(_results(task.configs(), len(ex)), ex)
    assert len(recs) == 12 and len({r["id"] for r in recs}) == 12
    assert [r["id"].split(":")[0] for r in recs[::4]] == ["k0_s1", "k2_s1", "k2_s2"]
