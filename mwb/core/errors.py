"""Errors a user can act on. The CLI prints their message as one line, with no traceback.

``UsageError`` subclasses (bad config key, layout that does not fit) exit with status 2; every other
``MwbError`` (missing file, malformed data, corrupt checkpoint) exits with status 1.
"""
from __future__ import annotations

from .config import ConfigError


class LayoutError(ValueError):
    """A parallel layout that does not fit the world size or the model (exit status 2). Defined here, below
    every layer that raises it (parallel dims, pipeline orders, model stages, the planner)."""


class MwbError(RuntimeError):
    """A runtime failure with a message that names what is wrong and how to fix it (exit status 1)."""


class DataError(MwbError):
    """Input data that is missing or malformed."""


class CheckpointError(MwbError):
    """A checkpoint that is missing, incomplete or inconsistent."""


USAGE_ERRORS = (ConfigError, LayoutError)
