"""One registry of tasks: a name (``race``, ``lambada``, ``qa``, …) → its :class:`~mwb.tasks.base.Task`.

``mwb finetune NAME``, ``mwb eval NAME`` and ``--list`` on both look tasks up here. A task module only
decorates its class with ``@register("name")``; every module of the ``mwb.tasks`` package is imported on the
first lookup (as lm-evaluation-harness's registry does), and a module that fails to import is reported when
its task is asked for instead of breaking the others.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Callable, Type

from mwb.core.config import ConfigError

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
    pkg = importlib.import_module("mwb.tasks")
    for m in pkgutil.iter_modules(pkg.__path__):
        try:
            importlib.import_module(f"mwb.tasks.{m.name}")
        except Exception as e:  # keep the other tasks usable; get_task reports it if asked for
            _import_errors[m.name] = f"{type(e).__name__}: {e}"


def get_task(name: str) -> type:
    """The task class registered as ``name``; a ConfigError (exit 2) listing the known tasks otherwise."""
    _discover()
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in _TASKS:
        known = ", ".join(sorted(_TASKS)) or "none"
        broken = "".join(f"; mwb.tasks.{m} failed to import ({e})" for m, e in _import_errors.items())
        raise ConfigError(f"unknown task '{name}' (known: {known}){broken}")
    return _TASKS[key]


def list_tasks(trainable: bool = False) -> dict[str, type]:
    """All registered tasks sorted by name; ``trainable``: only those ``mwb finetune`` can train."""
    _discover()
    return {k: v for k, v in sorted(_TASKS.items()) if not trainable or v.trainable()}
