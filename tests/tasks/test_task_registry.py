"""One registry behind `mwb finetune --list` and `mwb eval --list`; every task is one short file."""
import inspect

import pytest

from mwb.core.config import ConfigError
from mwb.tasks.base import OBJECTIVES, Task
from mwb.tasks.registry import get_task, list_tasks
from tests.helpers.cli import run_cli


def test_lists_come_from_the_registry(capsys):
    tasks = list_tasks()
    assert {"race", "lambada", "wikitext", "qa", "prompt-target"} <= set(tasks)
    code, out, _ = run_cli(["finetune", "--list"], capsys)
    assert code == 0
    listed = {line.split()[0] for line in out.splitlines() if line.strip()}
    assert listed == set(list_tasks(trainable=True)) | {"dpr", "detox"}  # the explicit commands
    assert "lambada" not in listed and "race" in listed and "prompt-target" in listed
    code, out, _ = run_cli(["eval", "--list"], capsys)
    assert code == 0
    names = {line.split()[0] for line in out.splitlines() if line and not line.startswith(" ")}
    assert names == set(tasks)


def test_every_task_declares_an_objective_and_stays_short():
    shipped = {n: c for n, c in list_tasks().items() if c.__module__.startswith("mwb.tasks.")}  # not test doubles
    assert len(shipped) >= 13
    for name, cls in shipped.items():
        assert issubclass(cls, Task) and cls.objective in OBJECTIVES, name
        assert cls.description, name
        lines = len(inspect.getsource(inspect.getmodule(cls)).splitlines())
        assert lines < 200, f"{name}: {inspect.getmodule(cls).__file__} has {lines} lines"


def test_unknown_task_is_a_usage_error(capsys):
    with pytest.raises(ConfigError, match="unknown task 'nope'"):
        get_task("nope")
    code, _, err = run_cli(["eval", "nope", "--checkpoint", "x"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(["finetune", "lambada"], capsys)
    assert code == 2  # not trainable: no such fine-tuning command
