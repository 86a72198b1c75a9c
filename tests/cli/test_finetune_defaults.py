"""With no --checkpoint, `mwb finetune TASK` pretrains (or reuses) a tiny model on the data the task names:
NER asks for PubMed with the biomedical vocabulary; other BERT tasks keep the bundled corpus, and their run
lookup does not pick up a PubMed run."""
import os

import mwb.cli.starting_points as ft
from mwb.tasks.api.registry import get_task


def _run(path, complete=True):
    os.makedirs(os.path.join(path, "checkpoints"), exist_ok=True)
    if complete:
        open(os.path.join(path, "checkpoints", "latest"), "w").write("step_1")


def test_ner_pretrains_on_pubmed_and_lookups_keep_runs_apart(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    calls = []
    monkeypatch.setattr(ft.subprocess, "call", lambda cmd: calls.append(cmd) or 0)
    data, steps = get_task("ner").default_pretraining
    assert data == "pubmed"
    out = ft.default_checkpoint("bert", lambda m: None, data, steps)
    assert os.path.basename(out).startswith("pretrain-bert-pubmed-")
    assert calls[0][-2:] == ["--data", "pubmed"] and calls[0][calls[0].index("--steps") + 1] == str(steps)

    _run("runs/pretrain-bert-pubmed-20260101-000000")
    assert ft.latest_run("pretrain-bert") is None  # a PubMed run is not the bundled-corpus BERT
    assert ft.latest_run("pretrain-bert-pubmed") == "runs/pretrain-bert-pubmed-20260101-000000"
    _run("runs/pretrain-bert-20260101-000001")
    _run("runs/pretrain-bert-20260101-000002", complete=False)
    assert ft.latest_run("pretrain-bert") == "runs/pretrain-bert-20260101-000001"
    assert ft.default_checkpoint("bert", lambda m: None) == "runs/pretrain-bert-20260101-000001"
    assert len(calls) == 1
