"""Atomic writes: a file is either its old whole self or its new whole self, never half of either.

Every writer in mwb (results, predictions, reports, logs' summaries, checkpoints' metadata, caches) goes through
these few functions so that a crash, a kill -9 or a full disk during a write cannot leave a truncated file
under the final name: the bytes go to a temporary name in the same directory, are flushed and fsynced, and
only then renamed over the final name (``os.replace`` is atomic on POSIX within one file system).
"""
from __future__ import annotations

import contextlib
import json
import os
from typing import IO, Iterable, Iterator

TMP_SUFFIX = ".partial"


def _fsync_dir(path: str) -> None:
    """Persist the rename itself (the directory entry); a no-op where directories cannot be opened."""
    try:
        fd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary sibling of ``path`` for writing; on a clean exit fsync it and rename it to ``path``.

    On an exception the temporary file is removed and ``path`` is left as it was.
    """
    if "r" in mode or "a" in mode or "+" in mode:
        raise ValueError(f"atomic_open writes a whole new file; mode {mode!r} is not allowed")
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    tmp = path + TMP_SUFFIX
    f = open(tmp, mode, encoding=None if "b" in mode else encoding)
    try:
        yield f
        f.flush()
        os.fsync(f.fileno())
        f.close()
        os.replace(tmp, path)
        _fsync_dir(path)
    except BaseException:
        f.close()
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


def atomic_write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically."""
    with atomic_open(path, "w") as f:
        f.write(text)


def atomic_write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_open(path, "wb") as f:
        f.write(data)


def atomic_write_json(path: str, obj, *, indent: int | None = 2, sort_keys: bool = False, **dumps_kwargs) -> None:
    """Write ``obj`` as JSON (one trailing newline) to ``path`` atomically."""
    atomic_write_text(path, json.dumps(obj, indent=indent, sort_keys=sort_keys, **dumps_kwargs) + "\n")


def atomic_write_jsonl(path: str, rows: Iterable, **dumps_kwargs) -> int:
    """Write one JSON line per row to ``path`` atomically; returns the number of rows written."""
    n = 0
    with atomic_open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row, **dumps_kwargs) + "\n")
            n += 1
    return n
