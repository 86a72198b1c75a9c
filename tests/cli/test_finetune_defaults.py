"""The one starting-checkpoint rule (mwb.tasks.api.setup): a named model when installed, else the newest run of
the right kind, else a tiny one trained now; NER's fallback pretrains on PubMed, and the run lookups keep runs
of other data apart. `mwb finetune detox` has the shared training flags and their checks."""
import os
import time

import pytest

from mwb.core.config import ConfigError
from mwb.core.training.run_dir import latest_run
from mwb.tasks.api import setup
from mwb.tasks.api.registry import get_task
from mwb.tasks.api.finetuning_spec import Start
from tests.helpers.checkpoints import tiny_checkpoint
from tests.helpers.cli import run_cli


def _run(path, complete=True, age=0.0):
    os.makedirs(os.path.join(path, "checkpoints"), exist_ok=True)
    if complete:
        open(os.path.join(path, "checkpoints", "latest"), "w").write("step_1")
    t = time.time() - age
    os.utime(path, (t, t))


@pytest.fixture
def no_named_models(monkeypatch):
    monkeypatch.setattr(setup, "named_installed", lambda name: False)


def test_ner_pretrains_on_pubmed_and_lookups_keep_runs_apart(tmp_path, monkeypatch, no_named_models):
    monkeypatch.chdir(tmp_path)
    calls = []
    monkeypatch.setattr(setup.subprocess, "call", lambda cmd: calls.append(cmd) or 0)
    start = get_task("ner")().start()
    assert (start.named, start.data, start.steps) == ("minilm-l6", "pubmed", 600)
    said = []
    out = setup.starting_checkpoint(start, said.append)
    assert os.path.basename(out).startswith("pretrain-bert-pubmed-")
    assert calls[0][-2:] == ["--data", "pubmed"] and calls[0][calls[0].index("--steps") + 1] == "600"
    assert calls[0][calls[0].index("--out") + 1] == out
    assert "minilm-l6 is not installed" in said[0] and "pretraining a tiny BERT" in said[0]

    _run("runs/pretrain-bert-pubmed-20260101-000000")
    assert latest_run("pretrain-bert") is None  # a PubMed run is not the bundled-corpus BERT
    assert latest_run("pretrain-bert-pubmed") == "runs/pretrain-bert-pubmed-20260101-000000"
    _run("runs/pretrain-bert-20260101-000001", age=20)
    _run("runs/pretrain-bert-20260101-000003", age=10)
    _run("runs/pretrain-bert-20260101-000002", complete=False)  # the newest, but no complete checkpoint
    assert latest_run("pretrain-bert") == "runs/pretrain-bert-20260101-000003"
    assert setup.starting_checkpoint(Start("bert"), said.append) == "runs/pretrain-bert-20260101-000003"
    assert "the newest BERT pretraining run on the bundled corpus" in said[-1]
    assert len(calls) == 1


def test_named_model_first_when_installed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _run("runs/pretrain-gpt-20260101-000000")
    monkeypatch.setattr(setup, "named_installed", lambda name: name == "smollm2-135m")
    monkeypatch.setattr(setup.named_models, "local_checkpoint", lambda name: f"/cache/{name}")
    monkeypatch.setattr(setup.subprocess, "call", lambda cmd: pytest.fail("nothing should be trained"))
    said = []
    assert setup.starting_checkpoint(Start("gpt", named="smollm2-135m"), said.append) == "/cache/smollm2-135m"
    assert "starting from smollm2-135m" in said[0]
    monkeypatch.setattr(setup, "named_installed", lambda name: False)
    assert setup.starting_checkpoint(Start("gpt", named="smollm2-135m"), said.append) == \
        "runs/pretrain-gpt-20260101-000000"


def test_a_failed_tiny_run_is_one_runtime_error(tmp_path, monkeypatch, no_named_models):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(setup.subprocess, "call", lambda cmd: 1)
    with pytest.raises(setup.MwbError, match="pretraining run failed; pass --checkpoint"):
        setup.starting_checkpoint(Start("t5"), lambda m: None)


def test_eval_takes_the_newest_finetuning_run_of_a_trainable_task(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    race = get_task("race")
    with pytest.raises(ConfigError, match="run `mwb finetune race` first"):
        setup.eval_checkpoint(race, None, lambda m: None)
    _run("runs/finetune-race-20260101-000000")
    assert setup.eval_checkpoint(race, None, lambda m: None) == "runs/finetune-race-20260101-000000"
    assert setup.eval_checkpoint(race, "given", lambda m: None) == "given"
    said = []
    assert setup.eval_checkpoint(get_task("msdp"), None, said.append) == "smollm2-135m"  # the task's own model
    assert "smollm2-135m" in said[0]


def test_finetune_detox_has_the_shared_training_flags(capsys):
    code, out, _ = run_cli(["finetune", "detox", "--help"], capsys)
    assert code == 0
    for flag in ("--tp", "--pp", "--precision", "--set", "--nproc", "--lr", "--steps", "--seq-length",
                 "--distributed-optimizer", "--checkpoint", "--data"):
        assert f"{flag} " in out, flag


@pytest.mark.parametrize("sets,needle", [
    (["--set", "optim.lr=fast"], "optim.lr"),
    (["--set", "train.nosuchfield=1"], "nosuchfield"),
    (["--set", "optim.lr"], "optim.lr"),
    (["--set", "train.steps=2.5"], "train.steps"),
])
def test_finetune_detox_flag_errors_are_one_line_exit_2(tmp_path, capsys, sets, needle):
    gpt = tiny_checkpoint(str(tmp_path / "gpt"), "gpt-tiny", seq=32, num_layers=1, hidden_size=32,
                          num_attention_heads=2)
    code, _, err = run_cli(["finetune", "detox", "--checkpoint", gpt, "--out", str(tmp_path / "o"), *sets], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and needle in lines[0] and "Traceback" not in err, err
    assert not os.path.exists(tmp_path / "o" / "selfgen.jsonl")  # stopped before any self-generation


def test_finetune_detox_refuses_a_bert_start(tmp_path, capsys):
    bert = tiny_checkpoint(str(tmp_path / "bert"), "bert-tiny", seq=32, num_layers=1, hidden_size=32,
                           num_attention_heads=2)
    code, _, err = run_cli(["finetune", "detox", "--checkpoint", bert, "--data", "x"], capsys)
    assert code == 2 and "holds a 'bert' model; SGEAT domain-adaptive training fine-tunes GPT" in err
