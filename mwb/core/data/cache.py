"""The derived-artefact cache: sample indexes and the tokenized bundled corpus, keyed by their inputs.

Why keyed by content and written whole: many runs (and all ranks of one run) build the same indexes; a
key that hashes everything that determines an artefact lets them reuse it safely, and writing into a
private temporary directory that is renamed into place means a reader never sees a half-written entry,
even when two ranks race to build it (the loser's copy is discarded). The root is ``cache_dir`` if given,
else ``$MWB_CACHE``, else ``~/.cache/mwb``.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
from typing import Callable, Optional

logger = logging.getLogger("mwb.data")


def cache_root(cache_dir: Optional[str] = None) -> str:
    root = cache_dir or os.environ.get("MWB_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "mwb")
    return os.path.abspath(os.path.expanduser(str(root)))


def log(msg: str) -> None:
    """Log at INFO on ``mwb.data`` when the program has configured logging for it; otherwise print to
    stderr (rank 0 only, by ``$RANK``), so the "cache reused" line is visible from a plain script too."""
    if (logging.getLogger().hasHandlers() or logger.handlers) and logger.isEnabledFor(logging.INFO):
        logger.info(msg)
    elif os.environ.get("RANK", "0") in ("", "0"):
        print(f"mwb: {msg}", file=sys.stderr, flush=True)


def digest(obj) -> str:
    """A stable hash of a JSON-able description (sorted keys)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def file_digest(path: str, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                return h.hexdigest()
            h.update(b)


def dataset_fingerprint(indexed) -> dict:
    """What identifies an indexed dataset for caching: its path, the hash of its ``.idx`` (which holds every
    length the sample indexes depend on) and the size of its ``.bin``. Memoised on the dataset object."""
    from .indexed import bin_path, idx_path

    cached = getattr(indexed, "_fingerprint", None)
    if cached is not None:
        return cached
    prefix = indexed.prefix
    indexed._fingerprint = {
        "prefix": os.path.abspath(prefix),
        "idx_sha256": file_digest(idx_path(prefix)),
        "bin_bytes": os.path.getsize(bin_path(prefix)),
    }
    return indexed._fingerprint


def cached_dir(root: str, name: str, build: Callable[[str], None], what: str) -> tuple[str, bool]:
    """``root/name``, built by ``build(tmp_dir)`` if absent. Returns (path, reused).

    Concurrent callers (ranks of one job) wait on a lock file while one of them builds, then reuse its
    result; without ``flock`` the atomic rename alone keeps the entry whole (the loser's copy is dropped).
    """
    final = os.path.join(root, name)
    if os.path.isdir(final):
        log(f"reusing cached {what}: {final}")
        return final, True
    os.makedirs(root, exist_ok=True)
    with file_lock(os.path.join(root, f".{name}.lock")):
        if os.path.isdir(final):
            log(f"reusing cached {what}: {final}")
            return final, True
        tmp = tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=root)
        try:
            build(tmp)
            try:
                os.rename(tmp, final)
            except OSError:
                if not os.path.isdir(final):  # not a lost race: a real error
                    raise
                log(f"reusing cached {what} built by another process: {final}")
                return final, True
        finally:
            if os.path.isdir(tmp):
                shutil.rmtree(tmp, ignore_errors=True)
    log(f"built {what}: {final}")
    return final, False


@contextlib.contextmanager
def file_lock(path: str):
    """An advisory exclusive lock (so N ranks wait for one builder instead of all building)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a+") as f:
        try:
            import fcntl

            fcntl.flock(f, fcntl.LOCK_EX)
        except (ImportError, OSError):  # no flock (e.g. Windows): fall back to the atomic rename alone
            pass
        yield
