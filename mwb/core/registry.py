"""A name → object registry that fills itself on first use: the one type behind tasks and experiments.

``mwb finetune/eval NAME`` look tasks up (:mod:`mwb.tasks.api.registry`) and ``mwb repro NAME`` experiments
(:mod:`mwb.repro.registry`) by the same rules, so they are written once here: names are lowercase, may have
aliases, and are registered once (a second, different registration of a name is a programming error naming
both modules); the first lookup runs the registry's ``discover`` (which imports the modules that register),
and a module that fails to import is recorded instead of breaking the others, then named in the one-line
usage error (:class:`~mwb.core.config.ConfigError`, exit 2) that an unknown name gets, with the known names.
"""
from __future__ import annotations

from typing import Callable, Optional

from .config import ConfigError


class Registry:
    """Objects by name. ``kind`` names what is registered in messages ("task", "experiment");
    ``discover()`` runs once, before the first lookup; ``module_prefix`` is put before a failed module's
    recorded name in the unknown-name error (a registry that records short module names)."""

    def __init__(self, kind: str, discover: Optional[Callable[[], None]] = None, module_prefix: str = "") -> None:
        self.kind, self._discover, self.module_prefix = kind, discover, module_prefix
        self.items: dict[str, object] = {}
        self.aliases: dict[str, str] = {}
        self.import_errors: dict[str, str] = {}
        self._sources: dict[str, type] = {}
        self._loaded = discover is None

    def add(self, name: str, obj, aliases: tuple = (), source: Optional[type] = None) -> str:
        """Register ``obj`` as ``name`` (lowercased, returned) and each alias. ``source``: the class that
        identifies the registration (``obj`` itself unless given); registering another under a taken name
        raises ValueError naming both modules."""
        source = obj if source is None else source
        key = self.claim(name, source)
        self.items[key], self._sources[key] = obj, source
        for a in aliases:
            self.aliases[a.lower()] = key
        return key

    def claim(self, name: str, source: type) -> str:
        """``name`` lowercased, after checking no other class holds it (a ValueError naming both modules)."""
        key = name.lower()
        old = self._sources.get(key)
        if old is not None and old is not source:
            raise ValueError(f"{self.kind} '{key}' is registered twice ({old.__module__}, {source.__module__})")
        return key

    def remove(self, name: str) -> None:
        """Forget ``name`` (tests register throwaway entries and remove them afterwards)."""
        key = name.lower()
        self.items.pop(key, None)
        self._sources.pop(key, None)

    def record_failure(self, module: str, error: BaseException) -> None:
        """Note that ``module`` failed to import; the unknown-name error names it."""
        self.import_errors[module] = f"{type(error).__name__}: {error}"

    def load(self) -> None:
        """Run ``discover`` once."""
        if not self._loaded:
            self._loaded = True
            self._discover()

    def get(self, name: str):
        """The object registered as ``name`` (or an alias of it); a ConfigError listing the known names and the
        modules that failed to import otherwise."""
        self.load()
        key = self.aliases.get(name.lower(), name.lower())
        if key not in self.items:
            known = ", ".join(sorted(self.items)) or "none"
            broken = "".join(f"; {self.module_prefix}{m} failed to import ({e})"
                             for m, e in self.import_errors.items())
            raise ConfigError(f"unknown {self.kind} '{name}' (known: {known}){broken}")
        return self.items[key]

    def all(self) -> dict:
        """Every registered name → object, sorted by name."""
        self.load()
        return dict(sorted(self.items.items()))
