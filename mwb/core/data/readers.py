"""Input documents for ``mwb preprocess`` and ``mwb tokenizer train``, streamed from any supported file.

Why items and not parsed records: JSON parsing is a good share of preprocessing time, so the reader only
splits the file into lines (cheap, in the main process) and the pool workers parse them. Each item keeps
its ``file:line`` location so a malformed record can be reported where it is. JSONL and plain text are
read line by line (memory stays flat whatever the file size); parquet is read in record batches; CSV,
JSON arrays and Arrow files go through ``datasets.load_dataset(..., streaming=True)``. ``.gz`` works for
JSONL, text and MEDLINE XML (``.xml``: PubMed citations, title + abstract as ``text``, :mod:`.medline`).

Plain text documents: ``text_docs="line"`` makes every non-empty line one document; ``"paragraph"`` makes
every blank-line-separated block one document (its lines joined with newlines).
"""
from __future__ import annotations

import gzip
import json
import os
from typing import Iterator, NamedTuple, Optional, Sequence

from mwb.core.errors import DataError

from .medline import iter_medline

FORMATS = ("jsonl", "text", "parquet", "csv", "tsv", "json", "arrow", "medline")


class Item(NamedTuple):
    """One input document before parsing: ``kind`` is ``"json"`` (``payload`` a raw JSON line),
    ``"record"`` (a dict), or ``"text"`` (the document text itself)."""

    path: str
    line: int
    kind: str
    payload: object
    nbytes: int


def _open_binary(path: str):
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def detect_format(path: str) -> str:
    """The reader for ``path``, from its extension (``.json`` is looked at: ``[`` means a JSON array)."""
    base = path[:-3] if path.endswith(".gz") else path
    ext = os.path.splitext(base)[1].lower().lstrip(".")
    if ext in ("jsonl", "ndjson"):
        return "jsonl"
    if ext in ("txt", "text", "md", "raw", ""):
        return "text"
    if ext == "json":
        with _open_binary(path) as f:
            head = f.read(4096).lstrip()
        return "json" if head.startswith(b"[") else "jsonl"
    if ext in ("parquet", "csv", "tsv", "arrow"):
        return ext
    if ext == "xml":
        return "medline"
    raise DataError(
        f"{path}: unknown input format '.{ext}' (use .jsonl, .json, .txt, .parquet, .csv, .tsv, .arrow or "
        f"MEDLINE .xml, optionally .gz for .jsonl/.txt/.xml)"
    )


def _decode(raw: bytes, path: str, line: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}:{line}: not valid UTF-8 ({e.reason} at byte {e.start})") from None


def _jsonl(path: str) -> Iterator[Item]:
    with _open_binary(path) as f:
        for n, raw in enumerate(f, 1):
            if raw.strip():
                yield Item(path, n, "json", raw, len(raw))


def _text(path: str, text_docs: str) -> Iterator[Item]:
    with _open_binary(path) as f:
        if text_docs == "line":
            for n, raw in enumerate(f, 1):
                line = _decode(raw, path, n).rstrip("\r\n")
                if line.strip():
                    yield Item(path, n, "text", line, len(raw))
            return
        block, start, size = [], 0, 0
        for n, raw in enumerate(f, 1):
            line = _decode(raw, path, n).rstrip("\r\n")
            if line.strip():
                if not block:
                    start = n
                block.append(line)
                size += len(raw)
            elif block:
                yield Item(path, start, "text", "\n".join(block), size)
                block, size = [], 0
        if block:
            yield Item(path, start, "text", "\n".join(block), size)


def _parquet(path: str, keys: Optional[Sequence[str]]) -> Iterator[Item]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as e:
        raise DataError(f"{path}: not a readable parquet file ({e})") from e
    names = pf.schema_arrow.names
    cols = None
    if keys:
        missing = [k for k in keys if k not in names]
        if missing:
            raise DataError(f"{path}: no column {missing[0]!r} (columns: {', '.join(names)}); set --json-keys")
        cols = list(keys)
    row = 0
    for batch in pf.iter_batches(batch_size=1024, columns=cols):
        for rec in batch.to_pylist():
            row += 1
            yield Item(path, row, "record", rec, sum(len(v) for v in rec.values() if isinstance(v, str)))


def _datasets(path: str, fmt: str) -> Iterator[Item]:
    try:
        from datasets import load_dataset

        builder = {"tsv": "csv", "arrow": "arrow", "json": "json", "csv": "csv"}[fmt]
        kwargs = {"delimiter": "\t"} if fmt == "tsv" else {}
        ds = load_dataset(builder, data_files=path, split="train", streaming=True, **kwargs)
        for row, rec in enumerate(ds, 1):
            yield Item(path, row, "record", rec, sum(len(v) for v in rec.values() if isinstance(v, str)))
    except DataError:
        raise
    except Exception as e:
        raise DataError(f"{path}: datasets could not read it as {fmt} ({type(e).__name__}: {e})") from e


def iter_items(paths: Sequence[str], keys: Optional[Sequence[str]] = None, text_docs: str = "line") -> Iterator[Item]:
    """Every document of every file in ``paths``, in order."""
    if text_docs not in ("line", "paragraph"):
        raise DataError(f"text_docs must be 'line' or 'paragraph', not {text_docs!r}")
    for path in paths:
        path = str(path)
        if not os.path.isfile(path):
            raise DataError(f"input file not found: {path}")
        fmt = detect_format(path)
        if fmt == "jsonl":
            yield from _jsonl(path)
        elif fmt == "text":
            yield from _text(path, text_docs)
        elif fmt == "parquet":
            yield from _parquet(path, keys)
        elif fmt == "medline":
            for n, rec in enumerate(iter_medline(path), 1):
                yield Item(path, n, "record", rec, len(rec["text"]))
        else:
            yield from _datasets(path, fmt)


def parse_item(item: Item, keys: Sequence[str]) -> dict:
    """``{key: text}`` for one item, or a DataError that names ``file:line`` and what is wrong."""
    where = f"{item.path}:{item.line}"
    if item.kind == "text":
        return {keys[0]: item.payload}
    if item.kind == "json":
        raw = item.payload
        try:
            rec = json.loads(raw)
        except UnicodeDecodeError as e:
            raise DataError(f"{where}: not valid UTF-8 ({e.reason})") from None
        except json.JSONDecodeError as e:
            msg = e.msg[:-3] if e.msg.endswith(" at") else e.msg
            raise DataError(f"{where}: malformed JSON: {msg} (column {e.colno})") from None
    else:
        rec = item.payload
    if not isinstance(rec, dict):
        raise DataError(f"{where}: expected a JSON object per line, got {type(rec).__name__}")
    out = {}
    for k in keys:
        if k not in rec:
            have = ", ".join(sorted(map(str, rec))[:10]) or "none"
            raise DataError(f"{where}: no key {k!r} in the record (keys: {have}); set --json-keys")
        v = rec[k]
        if not isinstance(v, str):
            raise DataError(f"{where}: key {k!r} holds {type(v).__name__}, expected a string")
        out[k] = v
    return out


def iter_texts(paths: Sequence[str], keys: Sequence[str] = ("text",), text_docs: str = "line") -> Iterator[str]:
    """Just the texts (every key of every record), for tokenizer training."""
    for item in iter_items(paths, keys, text_docs):
        yield from parse_item(item, keys).values()


