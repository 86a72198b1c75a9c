"""Task registry: a name (``lambada``, ``wikitext``, ``race``, …) → the :class:`~mwb.evaluation.task.Task`
subclass that implements it.

Why a registry (as in lm-evaluation-harness): ``mwb eval TASK`` and ``mwb finetune TASK`` look tasks up by
name, and a task module only has to decorate its class with ``@register_task("name")`` to appear in
``mwb eval --list``. Built-in modules are imported lazily on the first lookup, so importing the registry
costs nothing and a broken optional task module cannot break the others.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Callable, Type

from mwb.core.config import ConfigError

_TASKS: dict[str, type] = {}
_ALIASES: dict[str, str] = {}
# Modules whose import registers tasks: the zero-shot LM tasks here, then every module of mwb.tasks
# (fine-tuning tasks written by other issues plug in there).
_BUILTIN_MODULES = ("mwb.evaluation.zeroshot",)
_TASK_PACKAGES = ("mwb.tasks",)
_loaded = False
_import_errors: dict[str, str] = {}


def register_task(name: str, *aliases: str) -> Callable[[Type], Type]:
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


def _load_builtin() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    names = list(_BUILTIN_MODULES)
    for pkg_name in _TASK_PACKAGES:
        try:
            pkg = importlib.import_module(pkg_name)
        except ImportError:
            continue
        names += [f"{pkg_name}.{m.name}" for m in pkgutil.iter_modules(getattr(pkg, "__path__", []))]
    for mod in names:
        try:
            importlib.import_module(mod)
        except Exception as e:  # keep the other tasks usable; get_task reports it if asked for
            _import_errors[mod] = f"{type(e).__name__}: {e}"


def get_task(name: str) -> type:
    """The task class registered as ``name``; a ConfigError (exit 2) listing known tasks otherwise."""
    _load_builtin()
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in _TASKS:
        known = ", ".join(sorted(_TASKS)) or "none"
        broken = "".join(f"; {m} failed to import ({e})" for m, e in _import_errors.items())
        raise ConfigError(f"unknown task '{name}' (known: {known}){broken}")
    return _TASKS[key]


def list_tasks() -> dict[str, type]:
    """All registered tasks, sorted by name."""
    _load_builtin()
    return dict(sorted(_TASKS.items()))
