"""The runners read a task's declarations (``Task.finetuning``, ``start``, ``arches``, ``files``), never probe it:
a task that declares its own training module and starting point gets them, with its default schedule, and the
user's flags still win over its declared config."""
import os

import numpy as np
import pytest
import yaml

from mwb.core.config import ConfigError, update
from mwb.tasks.api import encoder_objective, generative_objective, registry, setup
from mwb.tasks.api.base import Task, single_inputs
from mwb.tasks.api.finetuning_spec import ENCODER_START, GENERATIVE_START, Finetuning, Start, Training
from mwb.tasks.api.objectives import CLASSIFICATION, GENERATIVE
from tests.helpers.checkpoints import tiny_checkpoint

CALLS: list[str] = []


def _recording_training() -> Training:
    """A training of the task's own: the encoder objective's steps, each call recorded."""
    def wrap(name):
        def call(*args, **kwargs):
            CALLS.append(name)
            return getattr(encoder_objective, name)(*args, **kwargs)
        return call

    return Training(*(wrap(name) for name in ("featurize", "make_spec", "dev_predictions")))


class Declared(Task):
    name = "declared-test"
    description = "a two-class task that declares its training module, start, epochs and config"
    objective = CLASSIFICATION
    finetuning = Finetuning(training=_recording_training(), start=Start("bert", data="pubmed", steps=7), epochs=2,
                            config={"optim": {"lr": 3e-3}, "train": {"seq_length": 32, "global_batch_size": 8}})

    def read(self, path, split):
        words = ["good", "bad"]
        n = 16 if split == "train" else 8
        return [{"text": f"{words[i % 2]} day {i}", "label": i % 2} for i in range(n)]

    def inputs(self, example, tokenizer, seq_length):
        out = single_inputs(tokenizer.encode(example["text"]), tokenizer, seq_length)
        out["label"] = np.array(example["label"], dtype=np.int64)
        return out


def test_defaults_of_the_declared_methods():
    class Plain(Task):
        objective = CLASSIFICATION

    class Gen(Task):
        objective = GENERATIVE

    assert Plain().training() == Training(encoder_objective.featurize, encoder_objective.make_spec,
                                                 encoder_objective.dev_predictions)
    assert Plain().arches() == ("bert",)
    assert Plain().start() == ENCODER_START and ENCODER_START.named == "minilm-l6"
    assert Gen().arches() == ("gpt", "t5") and Gen().start() == GENERATIVE_START
    assert Gen().training() == Training(generative_objective.featurize, generative_objective.make_spec)
    assert Plain().files({}, [], []) == {} and Plain.default_checkpoint(say=print) is None and Plain.finetuning.epochs == 3
    assert Declared().start().run_prefix == "pretrain-bert-pubmed"
    with pytest.raises(ValueError, match="Start.arch"):
        Start("llama")


def test_runner_uses_the_declared_module_start_epochs_and_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(registry._TASKS, Declared.name, Declared)
    calls = []

    def pretrain_now(cmd):  # the "tiny one trained now", without training: a random tiny BERT at --out
        calls.append(cmd)
        tiny_checkpoint(cmd[cmd.index("--out") + 1], "bert-tiny", seq=32, num_layers=1, hidden_size=32,
                        num_attention_heads=2)
        return 0

    monkeypatch.setattr(setup.subprocess, "call", pretrain_now)
    CALLS.clear()
    quiet = {"logging": {"progress": False, "tensorboard": False}}
    said = []
    results, out = setup.finetune_task(Declared, {}, None, "unused", None, lambda base: update(base, quiet), None,
                                       str(tmp_path / "ft"), None, False, said.append)
    cmd = calls[0]
    assert cmd[3:5] == ["pretrain", "bert"] and cmd[cmd.index("--steps") + 1] == "7"
    assert cmd[-2:] == ["--data", "pubmed"] and os.path.basename(cmd[cmd.index("--out") + 1]).startswith(
        "pretrain-bert-pubmed-")
    assert any("pretraining a tiny BERT" in m for m in said)
    assert CALLS.count("make_spec") == 1 and CALLS.count("featurize") == 2 and CALLS.count("dev_predictions") == 2
    cfg = yaml.safe_load(open(os.path.join(out, "config.yaml")))
    assert cfg["optim"]["lr"] == 3e-3 and cfg["train"]["seq_length"] == 32
    assert cfg["train"]["steps"] == 2 * (16 // 8)  # two declared epochs of 16 examples in batches of 8
    assert [e["epoch"] for e in results["epochs"]] == [1, 2]

    # the user's flags win over the declared config; an explicit checkpoint is used as given
    first = cmd[cmd.index("--out") + 1]
    results, out = setup.finetune_task(Declared, {}, first, "unused", 1,
                                       lambda base: update(base, {**quiet, "optim": {"lr": 5e-4}}), None,
                                       str(tmp_path / "ft2"), None, False, said.append)
    assert yaml.safe_load(open(os.path.join(out, "config.yaml")))["optim"]["lr"] == 5e-4 and len(calls) == 1
    assert len(results["epochs"]) == 1


def test_declared_arches_are_checked_against_the_start(tmp_path):
    gpt = tiny_checkpoint(str(tmp_path / "gpt"), "gpt-tiny", seq=32, num_layers=1, hidden_size=32,
                          num_attention_heads=2)
    with pytest.raises(ConfigError, match="holds a 'gpt' model; task 'declared-test' .* fine-tunes BERT"):
        setup.finetune_task(Declared, {}, gpt, "unused", None, lambda b: b, None, str(tmp_path / "x"), None,
                            False, lambda m: None)
