"""Reading task data: any local file ``datasets`` reads, a hub dataset name when online, or raw text.

Why one reader: every task's official release is jsonl/json/csv/tsv/parquet, and ``datasets`` reads all of
them (and hub names for free when a network is there); a missing or malformed file becomes one DataError
line that names the file.
"""
from __future__ import annotations

import os
from typing import Optional

from mwb.core.errors import DataError

_FORMATS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".tsv": "csv"}


def _cache_dir() -> str:
    root = os.environ.get("MWB_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "mwb")
    return os.path.join(root, "hf_datasets")


def load_records(path: str, split: str = "train", name: Optional[str] = None) -> list[dict]:
    """Records (one dict per row) from a local ``.json/.jsonl/.csv/.tsv/.parquet`` file (read with
    ``datasets``), or a hub dataset name (``owner/name`` or ``name``, optional ``name:config``) when online.

    Why ``datasets``: one reader for every format the official releases use, and hub names for free when
    a network is there. A missing local file is a DataError naming the formats accepted.
    """
    local = os.path.expanduser(path)
    if os.path.exists(local):
        ext = next((e for e in _FORMATS if local.lower().endswith(e)), None)
        if ext is None:
            raise DataError(f"{path}: unsupported data format (use {', '.join(sorted(_FORMATS))})")
        if ext in (".jsonl", ".json"):  # read as written: datasets would fill absent keys and cast types
            return _read_json_rows(local)
        try:
            import datasets
        except ImportError:
            raise DataError(f"reading {path} needs the `datasets` package: pip install datasets") from None
        datasets.disable_progress_bars()  # a bar per small local file is noise on the console
        kw = {"delimiter": "\t"} if ext == ".tsv" else {}
        try:
            ds = datasets.load_dataset(_FORMATS[ext], data_files=local, split="train", cache_dir=_cache_dir(), **kw)
        except Exception as e:  # malformed rows: name the file, in one line
            raise DataError(f"could not read {path} as {_FORMATS[ext]}: {' '.join(str(e).split())[:300]}") from e
        rows = [dict(r) for r in ds]
        if not rows:
            raise DataError(f"{path}: empty file (no rows)")
        return rows
    looks_local = path.startswith((".", "/", "~")) or any(path.lower().endswith(e) for e in _FORMATS)
    if looks_local:
        raise DataError(f"data file not found: {path}")
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1":
        raise DataError(f"data file not found: {path} (and hub datasets are unavailable offline: "
                        f"give a local .jsonl/.json/.csv/.parquet file)")
    hub, _, config = path.partition(":")
    try:
        import datasets

        ds = datasets.load_dataset(hub, config or name, split=split, cache_dir=_cache_dir())
    except Exception as e:
        raise DataError(f"{path} is neither a local file nor a loadable hub dataset ({e})") from e
    return [dict(r) for r in ds]


def _read_json_rows(path: str) -> list[dict]:
    """The rows of a JSON Lines file, or of a ``.json`` file holding a list of objects (or JSON Lines, which
    ``datasets`` also accepts there): every row a JSON object, at least one, each error one line."""
    import json

    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise DataError(f"{path}: line {line}: not UTF-8 text (byte {raw[e.start:e.start + 1]!r} at offset "
                        f"{e.start})") from None
    if path.lower().endswith(".json") and text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}: line {e.lineno}: not valid JSON ({e.msg}, column {e.colno})") from None
        rows = list(enumerate(data, 1))
        unit = "item"
    else:
        rows, unit = [], "line"
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append((n, json.loads(line)))
                except json.JSONDecodeError as e:
                    raise DataError(f"{path}: line {n}: not valid JSON ({e.msg}, column {e.colno})") from None
    for n, row in rows:
        if not isinstance(row, dict):
            raise DataError(f"{path}: {unit} {n}: expected a JSON object, got {type(row).__name__}")
    if not rows:
        raise DataError(f"{path}: empty file (no rows)")
    return [row for _, row in rows]


_read_jsonl = _read_json_rows  # the name tests of the no-`datasets` path use


def read_text(path: str) -> str:
    """A whole text file as it is (UTF-8), for tasks defined on raw text such as WikiText."""
    local = os.path.expanduser(path)
    if not os.path.isfile(local):
        raise DataError(f"data file not found: {path}")
    try:
        with open(local, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError as e:
        raise DataError(f"{path} is not UTF-8 text ({e})") from None
