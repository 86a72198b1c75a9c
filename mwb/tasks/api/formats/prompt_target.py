"""Prompt/target records: a text in, a text out, one row per example, for the generative tasks.

Data: a directory with one file per split (``train``, ``dev``, ``test``; ``.jsonl``/``.json``/``.csv``/``.tsv``/
``.parquet``, read with ``datasets``), or a single file used for every split. A task names the field pairs it
accepts, first match wins (:func:`field_pair`); :func:`to_pair` is the general rule of ``prompt-target``:
``prompt``/``target``, ``source``/``target``, ``input``/``output``, or the Alpaca layout ``instruction`` +
optional ``input`` → ``output`` (joined as ``instruction\\n\\ninput``).
"""
from __future__ import annotations

from typing import Callable

from mwb.core.errors import DataError
from mwb.evaluation.task_data import load_records

from .checks import nonempty, text
from .splits import split_file, with_extensions

FIELDS = (("prompt", "target"), ("source", "target"), ("input", "output"))
EXTENSIONS = (".jsonl", ".json", ".csv", ".tsv", ".parquet")


def field_pair(row: dict, fields, where: str):
    """``(row[a], row[b])`` for the first ``(a, b)`` of ``fields`` that ``row`` has (both strings), else None."""
    for a, b in fields:
        if a in row and b in row:
            return text(row, a, where), text(row, b, where)
    return None


def to_pair(row: dict, where: str) -> dict:
    """``{"prompt", "target"}`` of one row by the ``prompt-target`` rule (module docstring)."""
    if "instruction" in row and "output" in row:
        extra = text(row, "input", where, default="")
        return {"prompt": text(row, "instruction", where) + (f"\n\n{extra}" if extra else ""),
                "target": text(row, "output", where)}
    pair = field_pair(row, FIELDS, where)
    if pair:
        return {"prompt": pair[0], "target": pair[1]}
    raise DataError(f"{where}: a row needs prompt/target, source/target, input/output or instruction/output "
                    f"fields (has: {', '.join(sorted(row))})")


def read_pairs(path: str, split: str, convert: Callable[[dict, str], dict], what: str) -> list[dict]:
    """The examples of ``split``: every row of its file through ``convert(row, where)``, where ``where`` names
    the file and row for an error line; ``what`` names the task when the split's file is missing."""
    f = split_file(path, split, with_extensions(split, EXTENSIONS), what)
    return nonempty([convert(r, f"{f}: row {n + 1}") for n, r in enumerate(load_records(f))], f)
