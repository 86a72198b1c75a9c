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

from mwb.core.config import ConfigError

FAMILIES = "mwb.tasks"
FRAMEWORK = "api"  # mwb.tasks.api: the framework, which registers no task

_TASKS: dict[str, type] = {}
_ALIASES: dict[str, str] = {}
_import_errors: dict[str, str] = {}
_loaded = False


def register(name: str, *aliases: str) -> Callable[[Type], Type]:
    """Class decorator: make ``cls`` available as ``name`` (and each alias). Names are lowercase."""
    def deco(cls):
        key = name.lower()
        if key in _TASKS and _TASKS[key] is not cls:
            raise ValueError(f"task '{key}' is registered twice ({_TASKS[key].__module__}, {cls.__module__})")
        _TASKS[key] = cls
        cls.name = key
        for a in aliases:
            _ALIASES[a.lower()] = key
        return cls
    return deco


def _discover() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    pkg = importlib.import_module(FAMILIES)
    for m in pkgutil.iter_modules(pkg.__path__):
        if m.ispkg and m.name != FRAMEWORK:
            _import_tree(f"{FAMILIES}.{m.name}")


def _import_tree(name: str) -> None:
    """Import module ``name`` and, if it is a package, every module under it; record the ones that fail."""
    try:
        module = importlib.import_module(name)
    except Exception as e:  # keep the other tasks usable; get_task reports it if asked for
        _import_errors[name] = f"{type(e).__name__}: {e}"
        return
    for m in pkgutil.iter_modules(getattr(module, "__path__", [])):
        _import_tree(f"{name}.{m.name}")


def get_task(name: str) -> type:
    """The task class registered as ``name``; a ConfigError (exit 2) listing the known tasks otherwise."""
    _discover()
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in _TASKS:
        known = ", ".join(sorted(_TASKS)) or "none"
        broken = "".join(f"; {m} failed to import ({e})" for m, e in _import_errors.items())
        raise ConfigError(f"unknown task '{name}' (known: {known}){broken}")
    return _TASKS[key]


def list_tasks(trainable: bool = False) -> dict[str, type]:
    """All registered tasks sorted by name; ``trainable``: only those ``mwb finetune`` can train."""
    _discover()
    return {k: v for k, v in sorted(_TASKS.items()) if not trainable or v.trainable()}
