"""Which file of a task's ``--data`` holds a split: one search for every task.

``--data`` is one file (used for every split, where the task takes that) or a directory with a file per split.
The names a split's file may have are the task's own — GLUE's ``dev_matched.tsv``, SQuAD's ``dev-v1.1.json``,
NER's ``devel.tsv``, ``dev.jsonl``/``.csv``/… for record files — and the search and its error are here, so a
missing split reads the same for every task: what was looked for, and where.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

from mwb.core.errors import DataError


def with_extensions(stem: str, extensions: Sequence[str]) -> tuple[str, ...]:
    """``stem + ext`` for each extension, in order (``dev`` → ``dev.jsonl``, ``dev.json``, …)."""
    return tuple(stem + ext for ext in extensions)


def find_file(path: str, names: Sequence[str], subdirs: Sequence[str] = ("",)) -> Optional[str]:
    """The first ``path/subdir/name`` that is a file (each subdirectory in turn, ``""`` for ``path`` itself,
    each name in order), None when there is none."""
    for d in subdirs:
        for name in names:
            f = os.path.join(path, d, name) if d else os.path.join(path, name)
            if os.path.isfile(f):
                return f
    return None


def _expected(names: Sequence[str]) -> str:
    """``dev.jsonl/.json/.csv`` for names that differ only in extension, else ``a or b``."""
    stems = {os.path.splitext(n)[0] for n in names}
    if len(names) > 1 and len(stems) == 1:
        return next(iter(stems)) + "/".join(os.path.splitext(n)[1] for n in names)
    return " or ".join(names)


def split_file(path: str, split: str, names: Sequence[str], what: str, subdirs: Sequence[str] = ("",),
               whole_file: bool = True) -> str:
    """The file of ``split``: ``path`` itself when it is a file and the task reads one file for every split
    (``whole_file``), else the first of ``names`` found in ``path`` or one of its ``subdirs``; a DataError
    naming ``what`` (the task), the split, the expected names and the directories searched otherwise."""
    if whole_file and os.path.isfile(path):
        return path
    found = find_file(path, names, subdirs)
    if found is not None:
        return found
    dirs = [os.path.join(path, d) if d else path for d in subdirs]
    raise DataError(f"{what} split '{split}' not found: expected {_expected(names)} in {' or '.join(dirs)}")
