"""One registry of tasks: a name (``race``, ``lambada``, ``qa``, …) → its :class:`~mwb.tasks.api.base.Task`.

``mwb finetune NAME``, ``mwb eval NAME`` and ``--list`` on both look tasks up here. A task module only
decorates its class with ``@register("name")``; on the first lookup every module of every task family (each
subpackage of ``mwb.tasks`` but this framework, :data:`FRAMEWORK`, walked recursively) is imported, as
lm-evaluation-harness's registry walks ``lm_eval/tasks/``, and a module that fails to import is reported when
a task is asked for instead of breaking the others.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Callable, Type

from mwb.core.registry import Registry

FAMILIES = "mwb.tasks"
FRAMEWORK = "api"  # mwb.tasks.api: the framework, which registers no task


def register(name: str, *aliases: str) -> Callable[[Type], Type]:
    """Class decorator: make ``cls`` available as ``name`` (and each alias). Names are lowercase."""
    def deco(cls):
        cls.name = TASKS.add(name, cls, aliases)
        return cls
    return deco


def _discover() -> None:
    pkg = importlib.import_module(FAMILIES)
    for m in pkgutil.iter_modules(pkg.__path__):
        if m.ispkg and m.name != FRAMEWORK:
            _import_tree(f"{FAMILIES}.{m.name}")


TASKS = Registry("task", _discover)
_TASKS = TASKS.items  # the registered classes by name (tests add test doubles here)


def _import_tree(name: str) -> None:
    """Import module ``name`` and, if it is a package, every module under it; record the ones that fail."""
    try:
        module = importlib.import_module(name)
    except Exception as e:  # keep the other tasks usable; get_task reports it if asked for
        TASKS.record_failure(name, e)
        return
    for m in pkgutil.iter_modules(getattr(module, "__path__", [])):
        _import_tree(f"{name}.{m.name}")


def get_task(name: str) -> type:
    """The task class registered as ``name``; a ConfigError (exit 2) listing the known tasks otherwise."""
    return TASKS.get(name)


def list_tasks(trainable: bool = False) -> dict[str, type]:
    """All registered tasks sorted by name; ``trainable``: only those ``mwb finetune`` can train."""
    return {k: v for k, v in TASKS.all().items() if not trainable or v.trainable()}
