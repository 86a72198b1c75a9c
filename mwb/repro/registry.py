"""One registry of reproductions: a name (``megatron-scaling``, …) → its :class:`~mwb.repro.api.Experiment`.

An experiment module in ``mwb/repro/experiments/`` decorates its class with ``@register("name")``; every
module there is imported on the first lookup (as the task registry does), and a module that fails to import
is reported when its experiment is asked for instead of hiding the others.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Callable, Type

from mwb.core.config import ConfigError

from .api import Experiment

_EXPERIMENTS: dict[str, Experiment] = {}
_import_errors: dict[str, str] = {}
_loaded = False


def register(name: str) -> Callable[[Type[Experiment]], Type[Experiment]]:
    """Class decorator: make an instance of ``cls`` available as ``name`` (lowercase), after checking its
    declarations (:meth:`~mwb.repro.api.Experiment.validate`)."""
    def deco(cls):
        key = name.lower()
        if key == "report":
            raise ValueError("'report' is `mwb repro report`, not an experiment name")
        if key in _EXPERIMENTS and type(_EXPERIMENTS[key]) is not cls:
            raise ValueError(f"experiment '{key}' is registered twice "
                             f"({type(_EXPERIMENTS[key]).__module__}, {cls.__module__})")
        cls.name = key
        exp = cls()
        exp.validate()
        _EXPERIMENTS[key] = exp
        return cls
    return deco


def unregister(name: str) -> None:
    """Remove ``name`` (tests register throwaway experiments and remove them afterwards)."""
    _EXPERIMENTS.pop(name.lower(), None)


def _discover() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    pkg = importlib.import_module("mwb.repro.experiments")
    for m in pkgutil.iter_modules(pkg.__path__):
        try:
            importlib.import_module(f"mwb.repro.experiments.{m.name}")
        except Exception as e:  # keep the other experiments usable; get_experiment reports it if asked for
            _import_errors[m.name] = f"{type(e).__name__}: {e}"


def get_experiment(name: str) -> Experiment:
    """The experiment registered as ``name``; a ConfigError (exit 2) listing the known ones otherwise."""
    _discover()
    key = name.lower()
    if key not in _EXPERIMENTS:
        known = ", ".join(sorted(_EXPERIMENTS)) or "none"
        broken = "".join(f"; mwb.repro.experiments.{m} failed to import ({e})" for m, e in _import_errors.items())
        raise ConfigError(f"unknown experiment '{name}' (known: {known}){broken}")
    return _EXPERIMENTS[key]


def list_experiments() -> dict[str, Experiment]:
    """Every registered experiment, sorted by name."""
    _discover()
    return dict(sorted(_EXPERIMENTS.items()))


def import_errors() -> dict[str, str]:
    """Experiment modules that failed to import: module → error (``--list`` shows them)."""
    _discover()
    return dict(_import_errors)
