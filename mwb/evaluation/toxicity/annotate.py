"""``mwb score``: a jsonl file's texts scored, the scores written beside the text (SGEAT's annotation step).

Each output row is the input row plus ``"toxicity"`` (``None`` for an empty text, which the paper leaves
unscored) and ``"scores"`` (every attribute the scorer gives). Files are written under a temporary name
and renamed, so an interrupted run never leaves half a file.
"""
from __future__ import annotations

import json
import os
from typing import Callable, Optional

from mwb.core.errors import DataError
from mwb.core.atomic import atomic_write_jsonl

from .scorers import Scorer


def jsonl_lines(path: str):
    """``(line number, parsed value)`` for every non-blank line of a JSONL file; a line that is not JSON is
    a one-line :class:`DataError` naming it (the prompt readers keep the numbers as ids)."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{path}: line {n}: not UTF-8 text (byte {raw[e.start:e.start + 1]!r}); save the "
                                f"file as UTF-8") from None
            if not line.strip():
                continue
            try:
                yield n, json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}: line {n} is not JSON ({e.msg})") from None


def read_jsonl(path: str) -> list[dict]:
    if not os.path.isfile(path):
        raise DataError(f"file not found: {path}")
    rows = []
    for n, row in jsonl_lines(path):
        if not isinstance(row, dict):
            raise DataError(f"{path}: line {n} is not a JSON object")
        rows.append(row)
    return rows


def write_jsonl(path: str, rows: list[dict]) -> str:
    atomic_write_jsonl(path, rows, ensure_ascii=False)
    return path


def score_rows(rows: list[dict], scorer: Scorer, field: str = "text", where: str = "input",
               progress: Optional[Callable] = None) -> list[dict]:
    """``rows`` with ``toxicity`` and ``scores`` added from ``row[field]``."""
    texts = []
    for n, r in enumerate(rows, 1):
        if not isinstance(r.get(field), str):
            raise DataError(f"{where}: row {n} has no string field '{field}' (choose it with --field)")
        texts.append(r[field])
    scores = scorer.score(texts, progress=progress)
    return [{**r, "toxicity": s.get("toxicity"), "scores": s} for r, s in zip(rows, scores)]
