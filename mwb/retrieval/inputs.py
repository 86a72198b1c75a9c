"""Reading retrieval data in the official formats and turning text into bi-encoder inputs.

Formats (those of the DPR release, so its files work unchanged):

* evidence: ``id \\t text \\t title`` per line with a header (DPR's ``psgs_w100.tsv``), optionally gzipped;
  read with the ``csv`` module as DPR does, so quoted fields with tabs or doubled quotes survive;
* questions: NQ-open style ``question \\t ["answer", ...]`` lines (DPR's ``*.qa.csv`` are tab-separated
  despite the name; comma-separated files work too), or jsonl/json records with ``question`` and
  ``answers`` (or ``answer``);
* DPR training JSON: a list of ``{question, answers, positive_ctxs, hard_negative_ctxs, negative_ctxs}``
  with ``{title, text}`` contexts (read in :mod:`.data`).

Inputs follow DPR's tensorizer: a question is ``[CLS] q [SEP]``, a passage ``[CLS] title [SEP] text [SEP]``
(``[CLS] text [SEP]`` without a title), cut to the maximum length with the last token kept ``[SEP]``;
token types are all zero (DPR passes zero segments), padding is masked out of attention and pooling.
"""
from __future__ import annotations

import ast
import csv
import gzip
import io
import json
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from mwb.core.errors import DataError

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bundled")
BUNDLED_EVIDENCE = os.path.join(DATA_DIR, "wiki_passages.tsv.gz")
BUNDLED_QUESTIONS = os.path.join(DATA_DIR, "wiki_questions.jsonl")
# real DPR questions (NQ, TriviaQA, WebQ, CuratedTREC, SQuAD) whose answer the bundled evidence contains
BUNDLED_REAL_QUESTIONS = os.path.join(DATA_DIR, "real_questions.jsonl.gz")
BUNDLED_DPR_TRAIN = os.path.join(DATA_DIR, "dpr_train_sample.json.gz")


def open_text(path: str):
    """A text handle for ``path``, transparently gunzipping ``*.gz``; a DataError if it is missing."""
    path = os.path.expanduser(str(path))
    if not os.path.isfile(path):
        raise DataError(f"file not found: {path}")
    if path.endswith(".gz"):
        raw = io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="surrogateescape", newline="")
    else:
        raw = open(path, encoding="utf-8", errors="surrogateescape", newline="")
    return _Utf8Lines(raw, path)


_BAD_BYTE = re.compile("[\udc80-\udcff]")


class _Utf8Lines:
    """A text handle whose lines (or whole text) must be UTF-8: an invalid byte is a DataError naming its line,
    not a UnicodeDecodeError from somewhere in a read-ahead block."""

    def __init__(self, f, path: str) -> None:
        self.f, self.path, self.line = f, path, 0

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.f.close()

    def _check(self, text: str, first_line: int) -> str:
        bad = _BAD_BYTE.search(text)
        if bad:
            line = first_line + text.count("\n", 0, bad.start())
            raise DataError(f"{self.path}: line {line}: not UTF-8 text (an invalid byte); save the file as UTF-8")
        return text

    def __iter__(self):
        for line in self.f:
            self.line += 1
            yield self._check(line, self.line)

    def read(self) -> str:
        return self._check(self.f.read(), self.line + 1)


def _raise_field_limit() -> None:
    limit = sys.maxsize
    while True:  # csv's limit is a C long; halve until it fits
        try:
            csv.field_size_limit(limit)
            return
        except OverflowError:
            limit //= 2


@dataclass
class Evidence:
    """An evidence corpus in memory: parallel lists of passage ids, texts and titles."""
    path: str
    ids: list = field(default_factory=list)
    texts: list = field(default_factory=list)
    titles: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)


def read_evidence(path: str) -> Evidence:
    """DPR's ``id \\t text \\t title`` TSV (header line optional, ``.gz`` allowed)."""
    _raise_field_limit()
    ev = Evidence(os.path.abspath(os.path.expanduser(str(path))))
    with open_text(path) as f:
        for n, row in enumerate(csv.reader(f, delimiter="\t")):
            if not row or (n == 0 and row[0].strip().lower() == "id"):
                continue
            if len(row) < 2:
                raise DataError(f"{path}:{n + 1}: expected 'id<TAB>text<TAB>title', got {len(row)} column(s)")
            ev.ids.append(row[0])
            ev.texts.append(row[1])
            ev.titles.append(row[2] if len(row) > 2 else "")
    if not ev.ids:
        raise DataError(f"{path}: no passages (expected DPR's 'id<TAB>text<TAB>title' TSV)")
    return ev


def _answers(value, where: str) -> list[str]:
    if isinstance(value, str):
        for parse in (json.loads, ast.literal_eval):
            try:
                parsed = parse(value)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
            if isinstance(parsed, (list, tuple)):
                return [str(a) for a in parsed]
            if isinstance(parsed, str):
                return [parsed]
        return [value]
    if isinstance(value, (list, tuple)):
        return [str(a) for a in value]
    raise DataError(f"{where}: answers must be a list of strings, got {type(value).__name__}")


def read_questions(path: str) -> list[dict]:
    """``[{"question": str, "answers": [str, ...]}]`` from NQ-open TSV/CSV or jsonl/json (a JSON record's other
    fields are kept)."""
    p = os.path.expanduser(str(path))
    name = p[:-3] if p.endswith(".gz") else p
    out = []
    if name.endswith((".jsonl", ".json")):
        with open_text(p) as f:
            text = f.read()
        try:
            records = json.loads(text) if name.endswith(".json") else \
                [json.loads(line) for line in text.split("\n") if line.strip()]  # not splitlines(): U+2028 in text
        except json.JSONDecodeError as e:
            raise DataError(f"{path}: line {e.lineno}: not valid JSON ({e.msg}, column {e.colno})") from None
        if isinstance(records, dict):
            records = records.get("data") or [records]
        if not isinstance(records, list):
            raise DataError(f"{path}: expected question records, got a JSON {type(records).__name__}")
        for i, r in enumerate(records):
            where = f"{path}: record {i + 1}"
            if not isinstance(r, dict):
                raise DataError(f"{where}: expected a JSON object, got {type(r).__name__}")
            if not isinstance(r.get("question"), str) or not r["question"].strip():
                raise DataError(f"{where}: field 'question' must be a non-empty string, got {r.get('question')!r}")
            ans = r.get("answers", r.get("answer"))
            if ans is None:
                raise DataError(f"{where} has no 'answers' (or 'answer') field")
            if not isinstance(ans, str) and not (isinstance(ans, list) and all(isinstance(a, str) for a in ans)):
                raise DataError(f"{where}: field 'answers' must be a list of strings, got {ans!r}"[:200])
            extra = {k: v for k, v in r.items() if k not in ("question", "answers", "answer")}  # e.g. names_title
            out.append({**extra, "question": r["question"], "answers": _answers(ans, where)})
    else:
        with open_text(p) as f:
            body = f.read()
        first = body.split("\n", 1)[0]
        delim = "\t" if "\t" in first else ","
        for n, row in enumerate(csv.reader(io.StringIO(body), delimiter=delim)):
            if not row or not row[0].strip():
                continue
            if len(row) < 2:
                raise DataError(f"{path}:{n + 1}: expected 'question<TAB>[\"answer\", ...]'")
            if n == 0 and row[0].strip().lower() == "question" and row[1].strip().lower() in ("answers", "answer"):
                continue
            out.append({"question": row[0], "answers": _answers(row[1], f"{path}:{n + 1}")})
    if not out:
        raise DataError(f"{path}: no questions found")
    for n, q in enumerate(out, 1):
        if not q["answers"] or not all(a.strip() for a in q["answers"]):
            raise DataError(f"{path}: question {n} ({q['question'][:40]!r}): an empty answer list or answer")
    return out


# ----------------------------------------------------------------------------------------- tokenising


def specials(tok) -> tuple[int, int, int]:
    """(cls, sep, pad) ids; a DataError naming the missing token for a tokenizer without them."""
    tok.require("cls", "sep", purpose="a BERT bi-encoder")
    return tok.cls, tok.sep, (tok.pad if tok.pad is not None else 0)


def query_sequence(cls: int, sep: int, ids: list[int], max_len: int) -> list[int]:
    """``[CLS] question [SEP]`` cut to ``max_len``."""
    return [cls] + ids[: max_len - 2] + [sep]


def context_sequence(cls: int, sep: int, title: Optional[list[int]], body: list[int], max_len: int) -> list[int]:
    """``[CLS] title [SEP] text [SEP]`` (``[CLS] text [SEP]`` when ``title`` is None: DPR tests the title
    string, not its tokens), cut to ``max_len`` with the last token kept ``[SEP]``."""
    seq = [cls] + (title + [sep] if title is not None else []) + body
    return seq[: max_len - 1] + [sep]


def query_ids(tok, texts: Sequence[str], max_len: int) -> list[list[int]]:
    cls, sep, _ = specials(tok)
    return [query_sequence(cls, sep, ids, max_len) for ids in tok.encode_batch(list(texts))]


def context_ids(tok, titles: Sequence[Optional[str]], texts: Sequence[str], max_len: int) -> list[list[int]]:
    cls, sep, _ = specials(tok)
    bodies = tok.encode_batch(list(texts))
    heads = tok.encode_batch([t or "" for t in titles])
    return [context_sequence(cls, sep, head if title else None, body, max_len)
            for title, head, body in zip(titles, heads, bodies)]


def pad_batch(seqs: Sequence[Sequence[int]], pad_id: int, length: Optional[int] = None) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, mask) int64 arrays ``[n, length]`` (default: the longest sequence)."""
    length = length or max((len(s) for s in seqs), default=1)
    tokens = np.full((len(seqs), length), pad_id, dtype=np.int64)
    mask = np.zeros((len(seqs), length), dtype=np.int64)
    for i, s in enumerate(seqs):
        s = list(s)[:length]
        tokens[i, : len(s)] = s
        mask[i, : len(s)] = 1
    return tokens, mask
