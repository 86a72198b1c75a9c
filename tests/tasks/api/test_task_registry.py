"""One registry behind `mwb finetune --list` and `mwb eval --list`, fed by the task families; task modules
stay short."""
import inspect

import pytest

from mwb.core.config import ConfigError
from mwb.tasks.api.base import OBJECTIVES, Task
from mwb.tasks.api.registry import get_task, list_tasks
from tests.helpers.cli import run_cli


def test_lists_come_from_the_registry(capsys):
    tasks = list_tasks()
    assert {"race", "lambada", "wikitext", "qa", "prompt-target"} <= set(tasks)
    code, out, _ = run_cli(["finetune", "--list"], capsys)
    assert code == 0
    listed = {line.split()[0] for line in out.splitlines() if line.strip()}
    from mwb.cli.finetune import finetune
    assert listed == set(list_tasks(trainable=True)) | set(finetune.commands)  # + dpr, e2e-qa, story, detox
    assert {"dpr", "e2e-qa", "story", "detox"} <= listed
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


def test_tasks_live_in_family_packages_and_the_framework_registers_none():
    shipped = [c.__module__ for c in list_tasks().values() if c.__module__.startswith("mwb.tasks.")]
    assert shipped and not [m for m in shipped if m.startswith("mwb.tasks.api")]
    # nested modules are found too: the story family's tasks are not in its __init__'s own namespace only
    assert {"mwb.tasks.race.task", "mwb.tasks.bio.ner", "mwb.tasks.story.keyword_predictor"} <= set(shipped)


def test_discovery_walks_a_family_recursively_and_reports_a_broken_module(tmp_path, monkeypatch):
    from mwb.tasks.api import registry
    fam = tmp_path / "fam_pkg"
    (fam / "sub").mkdir(parents=True)
    (fam / "__init__.py").write_text("")
    (fam / "sub" / "__init__.py").write_text("")
    (fam / "sub" / "deep.py").write_text(
        "from mwb.tasks.api.base import Task\nfrom mwb.tasks.api.registry import register\n\n"
        "@register('registry-walk-test')\nclass Deep(Task):\n    description = 'x'\n")
    (fam / "sub" / "broken.py").write_text("raise ImportError('no such extra')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry.TASKS, "items", dict(registry.TASKS.items))
    monkeypatch.setattr(registry.TASKS, "_sources", dict(registry.TASKS._sources))
    monkeypatch.setattr(registry.TASKS, "import_errors", {})
    registry._import_tree("fam_pkg")
    assert registry.TASKS.items["registry-walk-test"].__module__ == "fam_pkg.sub.deep"
    assert registry.TASKS.import_errors == {"fam_pkg.sub.broken": "ImportError: no such extra"}
    with pytest.raises(ConfigError, match=r"fam_pkg\.sub\.broken failed to import \(ImportError: no such extra\)"):
        registry.get_task("nope")
