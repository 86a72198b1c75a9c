"""``mwb repro --log``: a reproduction's cells (every condition's metrics at each seed's step, the ``cells``
table) and its comparison table, read back from MLflow's store, equal what the runner computed."""
import json
import os

import pytest

from mwb.repro.analysis import Cells
from mwb.repro.api import CellResult
from mwb.repro.track import comparison_table, track_results
from tests.helpers.needs import needs

CELLS = Cells(conditions=("base", "ours"), seeds=(1, 2),
              results={("base", 1): CellResult({"acc": 0.5, "loss": 1.25}), ("base", 2): CellResult({"acc": 0.25}),
                       ("ours", 1): CellResult({"acc": 0.75, "loss": 1.0}), ("ours", 2): CellResult({"acc": 0.5})})
RESULTS = {"experiment": "toy", "scale": "smoke", "scale_params": {"steps": 2}, "seeds": [1, 2], "options": {},
           "claim": "ours beats base", "metrics": ["acc", "loss"], "verdict": "reproduced", "cells": {"ran": 4},
           "comparisons": [{"metric": "acc", "a": "base", "b": "ours", "diff": 0.25, "ci": [0.1, 0.4],
                            "verdict": "reproduced"}]}


def test_comparison_table_keeps_every_column():
    cols, rows = comparison_table([{"a": 1, "b": [1, 2]}, {"a": 2, "c": "x"}])
    assert cols == ["a", "b", "c"] and rows == [[1, "[1, 2]", None], [2, None, "x"]]


@needs("mlflow")
def test_repro_cells_and_comparison_reach_mlflow(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    track_results(["mlflow"], str(tmp_path), RESULTS, CELLS)
    client = MlflowClient(tracking_uri="file:" + str(tmp_path / "mlruns"))
    (run,) = client.search_runs([client.get_experiment_by_name("mwb").experiment_id])
    assert run.info.run_name == "toy-smoke"
    for (condition, seed), cell in CELLS.results.items():
        for metric, value in cell.metrics.items():
            history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, f"{condition}/{metric}")}
            assert history[CELLS.seeds.index(seed) + 1] == value
    assert run.data.params["verdict"] == "reproduced" and run.data.params["experiment"] == "toy"
    cells = json.load(open(client.download_artifacts(run.info.run_id, "cells.json")))
    assert cells == {"columns": ["condition", "seed", "acc", "loss"],
                     "rows": [["base", 1, 0.5, 1.25], ["ours", 1, 0.75, 1.0], ["base", 2, 0.25, None],
                              ["ours", 2, 0.5, None]]}
    table = json.load(open(client.download_artifacts(run.info.run_id, "comparison.json")))
    assert table["columns"] == ["metric", "a", "b", "diff", "ci", "verdict"]
    assert table["rows"] == [["acc", "base", "ours", 0.25, "[0.1, 0.4]", "reproduced"]]


def test_no_trackers_touches_nothing(tmp_path):
    track_results((), str(tmp_path), RESULTS, CELLS)
    assert os.listdir(tmp_path) == []
