"""One registry of reproductions: a name (``megatron-scaling``, …) → its :class:`~mwb.repro.api.Experiment`.

An experiment module in ``mwb/repro/experiments/`` decorates its class with ``@register("name")``; every
module there is imported on the first lookup (as the task registry does), and a module that fails to import
is reported when its experiment is asked for instead of hiding the others.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Callable, Type

from mwb.core.registry import Registry

from .api import Experiment


def _discover() -> None:
    pkg = importlib.import_module("mwb.repro.experiments")
    for m in pkgutil.iter_modules(pkg.__path__):
        try:
            importlib.import_module(f"mwb.repro.experiments.{m.name}")
        except Exception as e:  # keep the other experiments usable; get_experiment reports it if asked for
            EXPERIMENTS.record_failure(m.name, e)


EXPERIMENTS = Registry("experiment", _discover, module_prefix="mwb.repro.experiments.")


def register(name: str) -> Callable[[Type[Experiment]], Type[Experiment]]:
    """Class decorator: make an instance of ``cls`` available as ``name`` (lowercase), after checking its
    declarations (:meth:`~mwb.repro.api.Experiment.validate`)."""
    def deco(cls):
        if name.lower() == "report":
            raise ValueError("'report' is `mwb repro report`, not an experiment name")
        cls.name = EXPERIMENTS.claim(name, cls)
        exp = cls()
        exp.validate()
        EXPERIMENTS.add(name, exp, source=cls)
        return cls
    return deco


def unregister(name: str) -> None:
    """Remove ``name`` (tests register throwaway experiments and remove them afterwards)."""
    EXPERIMENTS.remove(name)


def get_experiment(name: str) -> Experiment:
    """The experiment registered as ``name``; a ConfigError (exit 2) listing the known ones otherwise."""
    return EXPERIMENTS.get(name)


def list_experiments() -> dict[str, Experiment]:
    """Every registered experiment, sorted by name."""
    return EXPERIMENTS.all()


def import_errors() -> dict[str, str]:
    """Experiment modules that failed to import: module → error (``--list`` shows them)."""
    EXPERIMENTS.load()
    return dict(EXPERIMENTS.import_errors)
