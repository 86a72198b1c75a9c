"""Where a no-argument ``mwb finetune TASK`` of a generative task starts (issue 49): SmolLM2-135M with LoRA at the
task's declared smaller scale when the model is installed, else the task's own start (the tiny GPT) at its
full default scale; the start taken is said and recorded in the job (``results.json``'s ``start``). A given
``--checkpoint`` is never replaced, and the user's own task options and ``--epochs`` win over the scale's."""
import pytest

from mwb.core.config import RunConfig
from mwb.tasks.api import setup
from mwb.tasks.api.registry import get_task

TASKS = {"bbc-headline": {"train_examples": 160, "eval_examples": 64}, "dialogue": {"train_examples": 160,
         "eval_examples": 48}, "prompt-target": {}}


def resolve(name, monkeypatch, tmp_path, installed, task_opts=None, checkpoint=None, epochs=None):
    monkeypatch.setattr(setup, "named_installed", lambda n: installed and n == setup.REAL_GPT)
    seen, said = {}, []

    def fake_setup(what, arches, start, ckpt, configure, tokenizer, say, defaults):
        seen.update(start=start, defaults=defaults)
        return setup.Setup("/ckpt", "/tok", RunConfig())

    monkeypatch.setattr(setup, "finetune_setup", fake_setup)
    monkeypatch.setattr(setup, "finetune", lambda task, cfg, job, nproc: seen.update(job=job) or {})
    setup.finetune_task(get_task(name), dict(task_opts or {}), checkpoint, str(tmp_path), epochs, lambda b: b,
                        None, str(tmp_path / "out"), None, False, said.append)
    return seen, said


@pytest.mark.parametrize("name", sorted(TASKS))
def test_installed_real_gpt_is_the_start_with_lora_and_the_smaller_scale(name, monkeypatch, tmp_path):
    seen, said = resolve(name, monkeypatch, tmp_path, installed=True)
    scale = get_task(name).finetuning.real
    assert (seen["start"].arch, seen["start"].named) == ("gpt", "smollm2-135m")
    assert seen["defaults"]["lora"] == setup.REAL_GPT_LORA["lora"]
    assert seen["defaults"]["train"]["seq_length"] == scale.config["train"]["seq_length"]
    assert seen["job"]["epochs"] == scale.epochs
    assert seen["job"]["task_opts"] == TASKS[name]
    assert seen["job"]["start"] == f"smollm2-135m with LoRA rank {setup.REAL_GPT_LORA['lora']['rank']}"
    assert [m for m in said if m.startswith(f"mwb: {name} start: smollm2-135m with LoRA")]


@pytest.mark.parametrize("name", sorted(TASKS))
def test_without_the_real_gpt_the_task_keeps_its_tiny_start_and_full_scale(name, monkeypatch, tmp_path):
    seen, said = resolve(name, monkeypatch, tmp_path, installed=False)
    cls = get_task(name)
    assert seen["start"] == cls().start() and seen["start"].named != "smollm2-135m"
    assert "lora" not in seen["defaults"]
    assert seen["job"]["epochs"] == cls.finetuning.epochs and seen["job"]["task_opts"] == {}
    assert seen["job"]["start"].startswith("an mwb GPT run")
    assert [m for m in said if "smollm2-135m not installed" in m]


def test_given_checkpoint_options_and_epochs_win(monkeypatch, tmp_path):
    seen, _ = resolve("bbc-headline", monkeypatch, tmp_path, installed=True, checkpoint="some/run")
    assert seen["start"] == get_task("bbc-headline")().start() and "lora" not in seen["defaults"]
    assert seen["job"]["start"] == "--checkpoint some/run"
    seen, _ = resolve("bbc-headline", monkeypatch, tmp_path, installed=True, task_opts={"train_examples": 7},
                      epochs=2)
    assert seen["job"]["task_opts"] == {"train_examples": 7, "eval_examples": 64} and seen["job"]["epochs"] == 2


def test_a_task_without_a_declared_scale_never_takes_the_real_start(monkeypatch, tmp_path):
    seen, _ = resolve("chat", monkeypatch, tmp_path, installed=True)
    assert seen["start"].named != "smollm2-135m" and "lora" not in seen["defaults"]
