"""Errors a user can act on. The CLI prints their message as one line, with no traceback.

``UsageError`` subclasses (bad config key, layout that does not fit) exit with status 2; every other
``MwbError`` (missing file, malformed data, corrupt checkpoint) exits with status 1.
"""
from __future__ import annotations

import os

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


class RankError(MwbError):
    """An error raised inside one rank of a ``--nproc N`` job, carried to the launching process.

    ``kind`` is ``"usage"`` (exit status 2), ``"runtime"`` (exit 1) or ``"internal"`` (an unexpected
    exception, i.e. a bug: its traceback is worth showing). ``traceback`` is the rank's own, not the
    launcher's, so ``--debug`` shows where the rank failed.
    """

    def __init__(self, rank: int, kind: str, message: str, traceback: str = "") -> None:
        super().__init__(f"rank {rank}: {message}")
        self.rank, self.kind, self.message, self.traceback = rank, kind, message, traceback


def error_kind(e: BaseException) -> str:
    """How the CLI reports ``e``: "usage" (exit 2), "runtime" (exit 1, one line) or "internal" (a bug)."""
    if isinstance(e, USAGE_ERRORS):
        return "usage"
    if isinstance(e, (MwbError, FileNotFoundError)):
        return "runtime"
    return "internal"


def debug_enabled() -> bool:
    """``MWB_DEBUG=1`` (set by ``mwb --debug`` too, so spawned ranks see it): show tracebacks."""
    return os.environ.get("MWB_DEBUG", "").strip() not in ("", "0", "false", "no")
