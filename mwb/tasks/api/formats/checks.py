"""The checks every task reader makes on what it reads: bytes, JSON, one field at a time, an empty input.

Why one module: a malformed file must end the same way whatever task reads it, in one :class:`DataError` line
that names the file, the line or row, the field and the value, and nothing may be coerced on the way (a
string label is not read as a number, a missing answer is not read as option A). Readers call these instead
of ``open``/``json.load``/``float`` so that an invalid UTF-8 byte, a truncated JSON file or a ``"high"``
where a number belongs is that line and never a traceback.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any, Iterable, Optional, Sequence

from mwb.core.errors import DataError

MISSING = object()


def shown(value: Any, limit: int = 60) -> str:
    """``value`` as one short line for an error message (repr, cut to ``limit`` characters)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def decode(raw: bytes, path: str) -> str:
    """``raw`` as UTF-8 (a leading BOM dropped), or a DataError naming the line of the first invalid byte."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise DataError(f"{path}: line {line}: not UTF-8 text (byte {raw[e.start:e.start + 1]!r} at offset "
                        f"{e.start}); save the file as UTF-8") from None


_BAD_BYTE = re.compile("[\udc80-\udcff]")


def utf8_line(line: str, path: str, n: int) -> str:
    """``line`` (line ``n`` of a file opened with ``errors="surrogateescape"``, as large or gzipped files are
    streamed) when it held only valid UTF-8, else a DataError naming that line."""
    if _BAD_BYTE.search(line):
        raise DataError(f"{path}: line {n}: not UTF-8 text (an invalid byte); save the file as UTF-8")
    return line


def read_text(path: str) -> str:
    """A whole file as UTF-8 text; a missing file or an invalid byte is one DataError line."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise DataError(f"file not found: {path}") from None
    except IsADirectoryError:
        raise DataError(f"{path} is a directory, not a file") from None
    return decode(raw, path)


def parse_json(text: str, where: str) -> Any:
    """``text`` parsed as JSON; truncated or malformed JSON is a DataError naming its line and column."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{where}: line {e.lineno}: not valid JSON ({e.msg}, column {e.colno})") from None
    except RecursionError:
        raise DataError(f"{where}: JSON nested too deeply") from None


def read_json(path: str) -> Any:
    """A whole JSON file (UTF-8)."""
    return parse_json(read_text(path), path)


def jsonl_rows(path: str, objects: bool = True) -> list[tuple[int, Any]]:
    """``(line number, value)`` of every non-blank line of a JSONL file; each must be a JSON object unless
    ``objects`` is False. An empty file is a DataError."""
    out = []
    for n, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}: line {n}: not valid JSON ({e.msg}, column {e.colno})") from None
        if objects and not isinstance(value, dict):
            raise DataError(f"{path}: line {n}: expected a JSON object, got {type(value).__name__}")
        out.append((n, value))
    if not out:
        raise DataError(f"{path}: empty file (no JSON lines)")
    return out


def text(row: dict, name: str, where: str, empty: bool = True, default: Any = MISSING) -> str:
    """``row[name]`` as a string (``empty=False``: with non-space characters); ``default`` when the field is
    absent or null, if one is given."""
    value = row.get(name) if isinstance(row, dict) else None
    if value is None and default is not MISSING:
        return default
    if not isinstance(value, str):
        raise DataError(f"{where}: field '{name}' must be a string, got {_kind(row, name)}")
    if not empty and not value.strip():
        raise DataError(f"{where}: field '{name}' is empty")
    return value


def number(value: Any, where: str, name: str, low: Optional[float] = None, high: Optional[float] = None,
           integer: bool = False) -> float:
    """``value`` as a finite number in ``[low, high]`` (an int when ``integer``). Strings holding numbers are
    taken only from text formats (TSV/CSV cells are always text); a JSON string is not a number."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if integer:
        ok = ok and float(value).is_integer()
    if not ok or not math.isfinite(value):
        raise DataError(f"{where}: field '{name}' must be {'an integer' if integer else 'a number'}, got "
                        f"{shown(value)}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise DataError(f"{where}: field '{name}' must be in [{low}, {high}], got {shown(value)}")
    return int(value) if integer else float(value)


def cell_number(cell: str, where: str, name: str, low: Optional[float] = None,
                high: Optional[float] = None) -> float:
    """A TSV/CSV cell holding a number (``float`` of its text), checked as :func:`number` checks."""
    try:
        value = float(cell.strip())
    except ValueError:
        raise DataError(f"{where}: field '{name}' must be a number, got {shown(cell)}") from None
    return number(value, where, name, low, high)


def choice(value: Any, allowed: Sequence, where: str, name: str) -> Any:
    """``value`` itself when it is one of ``allowed`` (compared with its type: ``1`` is not ``"1"``)."""
    if not any(type(value) is type(a) and value == a for a in allowed):
        raise DataError(f"{where}: field '{name}' must be one of {', '.join(map(str, allowed))}, got {shown(value)}")
    return value


def items(row: dict, name: str, where: str, kind: type = list, nonempty: bool = False) -> Any:
    """``row[name]`` when it is a ``kind`` (list or dict)."""
    value = row.get(name) if isinstance(row, dict) else None
    if not isinstance(value, kind):
        raise DataError(f"{where}: field '{name}' must be a {'list' if kind is list else 'JSON object'}, got "
                        f"{_kind(row, name)}")
    if nonempty and not value:
        raise DataError(f"{where}: field '{name}' is empty")
    return value


def strings(values: Any, where: str, name: str, count: Optional[int] = None) -> list[str]:
    """``values`` when it is a list of strings (of ``count`` of them, if given)."""
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise DataError(f"{where}: field '{name}' must be a list of strings, got {shown(values)}")
    if count is not None and len(values) != count:
        raise DataError(f"{where}: field '{name}' must hold {count} strings, got {len(values)}")
    return values


def nonempty(examples: Iterable, path: str, what: str = "examples") -> list:
    """``examples`` as a list; none at all is a DataError (an empty split is not a score of zero)."""
    examples = list(examples)
    if not examples:
        raise DataError(f"{path}: no {what} (an empty file or split)")
    return examples


def _kind(row: Any, name: str) -> str:
    if not isinstance(row, dict):
        return f"a row that is a {type(row).__name__}, not an object"
    if name not in row:
        return "nothing (no such field)"
    return f"{type(row[name]).__name__} {shown(row[name])}"
