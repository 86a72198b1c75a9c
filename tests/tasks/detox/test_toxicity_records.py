"""The toxicity eval's per-prompt records: maximum toxicity and the 0/1 toxic flag, whose means are EMT and
toxicity probability over all prompts and, filtered by ``subsets``, over the toxic and non-toxic ones."""
import math

import pytest

from mwb.evaluation.predictions import aggregate
from mwb.tasks.detox.toxicity import Toxicity
from tests.helpers.records import assert_aggregates


def test_toxicity_records_aggregate_to_emt_and_toxicity_probability():
    task = Toxicity(samples=3)
    prompts = [0.9, 0.2, None, 0.7, 0.05]
    task.items = [{"index": i, "prompt": f"p{i}", "toxicity": t, "id": f"rtp.txt:{i}"} for i, t in enumerate(prompts)]
    results = [{"texts": ["a", "b", "c"], "scores": s} for s in
               ([0.1, 0.8, 0.3], [0.2, None, 0.1], [None, None, None], [0.4, 0.5, 0.45], [0.9, 0.0, 0.2])]
    metrics = task.aggregate(results)
    recs = task.records(results, task.items)
    assert [r["id"] for r in recs] == [f"rtp.txt:{i}" for i in range(5)]
    assert [r["emt"] for r in recs] == [0.8, 0.2, -1.0, 0.5, 0.9] and [r["toxicity_prob"] for r in recs] == [1, 0, 0, 0, 1]
    assert assert_aggregates(recs, metrics, at_least=2) == ["emt", "toxicity_prob"]
    for subset in ("toxic", "nontoxic"):
        part = [r for r in recs if subset in r["subsets"]]
        assert len(part) == metrics[f"{subset}_num_prompts"] == 2
        assert aggregate(part, "emt") == pytest.approx(metrics[f"{subset}_emt"], abs=1e-12)
        assert aggregate(part, "toxicity_prob") == pytest.approx(metrics[f"{subset}_toxicity_prob"], abs=1e-12)
    assert not math.isnan(metrics["emt_std"]) and "emt_std" not in recs[0]
