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


def fsync_dir(path: str) -> None:
    """Persist a rename to ``path`` (its directory entry); a no-op where directories cannot be opened."""
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


def fsync_file(path: str) -> None:
    """Flush a finished file that a library wrote by name (safetensors, faiss, an index writer) to disk."""
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def commit_file(tmp: str, path: str) -> None:
    """Make the finished temporary file ``tmp`` visible as ``path``: fsync it, rename it, fsync the directory.
    For writers that can only write to a file name; everything else uses :func:`atomic_open`."""
    fsync_file(tmp)
    os.replace(tmp, path)
    fsync_dir(path)


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w", encoding: str | None = "utf-8",
                per_process: bool = False) -> Iterator[IO]:
    """Open a temporary sibling of ``path`` for writing; on a clean exit fsync it and rename it to ``path``.

    On an exception the temporary file is removed and ``path`` is left as it was. ``per_process``: the
    temporary name carries the process id, for files that several processes may rewrite at once (a shared
    cache's memo), so that no two of them write into the same temporary file.
    """
    if "r" in mode or "a" in mode or "+" in mode:
        raise ValueError(f"atomic_open writes a whole new file; mode {mode!r} is not allowed")
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    tmp = f"{path}.{os.getpid()}{TMP_SUFFIX}" if per_process else path + TMP_SUFFIX
    f = open(tmp, mode, encoding=None if "b" in mode else encoding)
    try:
        yield f
        f.flush()
        os.fsync(f.fileno())
        f.close()
        os.replace(tmp, path)
        fsync_dir(path)
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
