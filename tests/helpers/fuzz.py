"""Shared pieces of the readers' property-based tests: bounded settings, text strategies, the byte-level
mutations every format gets (an invalid UTF-8 byte, a truncated file) and the check that a malformed file ends
in exactly one DataError line — never another exception and never a success."""
from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from mwb.core.errors import DataError

FUZZ = settings(max_examples=15, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# words of letters and digits from several scripts (no tab, newline, quote or comma: safe in every layout)
word = st.text(alphabet=st.characters(categories=("Lu", "Ll", "Nd"), max_codepoint=0x2FFF), min_size=1, max_size=8)
sentence = st.lists(word, min_size=1, max_size=6).map(" ".join)


@contextmanager
def folder():
    """A fresh temporary directory (hypothesis runs many examples inside one test: no pytest tmp_path)."""
    with tempfile.TemporaryDirectory() as d:
        yield d


def write(path: str, data) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def bad_utf8(text: str, at: float) -> bytes:
    """``text`` as UTF-8 with an invalid byte inserted at the relative position ``at`` (0..1), between
    characters."""
    cut = int(len(text) * at)
    return text[:cut].encode("utf-8") + b"\xff" + text[cut:].encode("utf-8")


def truncated(text: str, at: float) -> str:
    """``text`` cut at the relative position ``at`` (0..1, at least one character removed)."""
    return text[: min(int(len(text) * at), len(text) - 1)]


def truncated_line(text: str, at: float) -> str:
    """JSON Lines ``text`` cut inside its last line (at the relative position ``at`` of that line, at least its
    last character removed): a file whose writer stopped mid-row."""
    body = text.rstrip("\n")
    start = body.rfind("\n") + 1
    return body[: start + max(1, min(int((len(body) - start) * at), len(body) - start - 1))]


def fails(read, *args) -> str:
    """``read(*args)`` must raise DataError whose message is one line naming something; returns the message."""
    try:
        result = read(*args)
    except DataError as e:
        msg = str(e)
        assert msg and "\n" not in msg, repr(msg)
        return msg
    raise AssertionError(f"a malformed file was read as {str(result)[:200]}")
