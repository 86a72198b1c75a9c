import os
import sys

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MWB_OFFLINE", "1")
os.environ.setdefault("MWB_CACHE", os.path.join(os.path.dirname(__file__), "..", ".pytest_mwb_cache"))
sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))

from tests.helpers.needs import MARKER, missing  # noqa: E402  (after the environment above)


def pytest_collection_modifyitems(items):
    """A test marked `needs(...)` (tests/helpers/needs.py) skips with a reason when what it needs is absent."""
    for item in items:
        reasons = [r for r in map(missing, item.iter_markers(MARKER)) if r]
        if reasons:
            item.add_marker(pytest.mark.skip(reason=reasons[0]))
