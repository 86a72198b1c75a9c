"""Stages of a multi-stage pipeline (``mwb finetune story``, ``mwb detox``) that a rerun with the same ``--out`` skips.

A stage is finished when, and only when, its marker ``OUT/stages/NAME.json`` exists: written last, under a
temporary name then renamed, once every output of the stage is complete, and holding what the pipeline needs from
the stage afterwards (its report). Outputs that exist without a marker — a stage killed half-way, a file cut
short — are never taken as finished: the stage runs again (a fine-tuning stage resumes from its own newest
complete checkpoint). Outputs are themselves written under temporary names and renamed.
"""
from __future__ import annotations

import json
import os
from typing import Optional

from mwb.core.atomic import atomic_write_text


class Stages:
    """The markers of one pipeline run directory."""

    def __init__(self, out: str) -> None:
        self.dir = os.path.join(out, "stages")

    def _path(self, name: str) -> str:
        return os.path.join(self.dir, f"{name}.json")

    def finished(self, name: str) -> Optional[dict]:
        """The report stage ``name`` recorded when it finished, or None when it has not (or its marker is not a
        whole JSON object: a marker is renamed into place, so that is a file someone else cut short)."""
        try:
            with open(self._path(name)) as f:
                report = json.load(f)
        except (OSError, json.JSONDecodeError):
            return None
        return report if isinstance(report, dict) else None

    def finish(self, name: str, report: dict) -> dict:
        """Mark stage ``name`` finished with ``report`` (after all its outputs are written); returns the report."""
        os.makedirs(self.dir, exist_ok=True)
        atomic_write_text(self._path(name), json.dumps(report) + "\n")
        return report
