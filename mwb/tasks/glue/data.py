"""GLUE's official TSV layouts (the files of ``download_glue_data.py``) and its submission format.

Why a reader of its own: GLUE TSVs are unquoted (a sentence may hold a lone ``"``), so they are read with
``csv.QUOTE_NONE`` and columns are found by their header name, never by position, so extra or reordered
columns (MNLI's parses and five annotator labels) do not matter. CoLA's train/dev files have no header and
are read positionally (``source, label, original label, sentence``). Test files carry no label: their
examples have ``label=None`` and predictions go to a submission TSV (``index<TAB>prediction``).
"""
from __future__ import annotations

import csv
import io
import sys
from dataclasses import dataclass
from typing import Optional, Sequence

from mwb.core.config import ConfigError
from mwb.core.errors import DataError

from ..api.formats.checks import read_text
from ..api.formats.splits import split_file as find_split


@dataclass(frozen=True)
class GlueLayout:
    """One GLUE task's files: its directory, text and label columns, label names (None: regression),
    metrics (the first picks the best fine-tuning checkpoint) and submission file name."""
    directory: str
    text: tuple[str, ...]
    label: str
    labels: Optional[tuple[str, ...]]
    metrics: tuple[str, ...]
    submission: str
    split_files: tuple[tuple[str, str], ...] = ()  # generic split → file stem (MNLI's matched sets)


LAYOUTS = {
    "mnli": GlueLayout("MNLI", ("sentence1", "sentence2"), "gold_label", ("entailment", "neutral", "contradiction"),
                       ("accuracy",), "MNLI-m", (("dev", "dev_matched"), ("test", "test_matched"))),
    "qqp": GlueLayout("QQP", ("question1", "question2"), "is_duplicate", ("0", "1"), ("accuracy", "f1"), "QQP"),
    "sst2": GlueLayout("SST-2", ("sentence",), "label", ("0", "1"), ("accuracy",), "SST-2"),
    "qnli": GlueLayout("QNLI", ("question", "sentence"), "label", ("entailment", "not_entailment"), ("accuracy",),
                       "QNLI"),
    "rte": GlueLayout("RTE", ("sentence1", "sentence2"), "label", ("entailment", "not_entailment"), ("accuracy",),
                      "RTE"),
    "mrpc": GlueLayout("MRPC", ("#1 String", "#2 String"), "Quality", ("0", "1"), ("accuracy", "f1"), "MRPC"),
    "cola": GlueLayout("CoLA", ("sentence",), "label", ("0", "1"), ("matthews", "accuracy"), "CoLA"),
    "stsb": GlueLayout("STS-B", ("sentence1", "sentence2"), "score", None, ("pearson", "spearman"), "STS-B"),
}
COLA_POSITIONS = {"label": 1, "sentence": 3}  # CoLA train/dev: no header
INDEX_COLUMNS = ("index", "id")


def layout(name: str) -> GlueLayout:
    if name not in LAYOUTS:
        raise ConfigError(f"unknown GLUE task '{name}' (use --task {'|'.join(LAYOUTS)})")
    return LAYOUTS[name]


def split_file(path: str, name: str, split: str) -> str:
    """``path`` is a .tsv file, the task's directory, or a GLUE root holding it (``MNLI/``, ``SST-2/``, …)."""
    lay = layout(name)
    stem = dict(lay.split_files).get(split, split)
    return find_split(path, split, (stem + ".tsv",), f"GLUE {name}", subdirs=("", lay.directory))


def _rows(path: str) -> list[list[str]]:
    csv.field_size_limit(sys.maxsize)
    text = read_text(path)
    if "\x00" in text:
        raise DataError(f"{path}: line {text[:text.index(chr(0))].count(chr(10)) + 1}: a NUL byte (not a GLUE TSV)")
    return [row for row in csv.reader(io.StringIO(text, newline=""), delimiter="\t", quoting=csv.QUOTE_NONE)
            if row]


def _label(lay: GlueLayout, value: str, where: str):
    value = value.strip()
    if lay.labels is None:
        try:
            return float(value)
        except ValueError:
            raise DataError(f"{where}: column '{lay.label}' must be a number, got {value!r}") from None
    if value not in lay.labels:
        raise DataError(f"{where}: column '{lay.label}' must be one of {', '.join(lay.labels)}, got {value!r}")
    return lay.labels.index(value)


def read_glue(path: str, name: str, labelled: bool = False) -> list[dict]:
    """Examples ``{"index", "text": [a] or [a, b], "label"}`` (label index, float for STS-B, None unlabelled).
    ``labelled``: the file must have its label column (a training split), else it is a DataError."""
    lay = layout(name)
    rows = _rows(path)
    if not rows:
        raise DataError(f"{path}: empty GLUE file")
    header = [c.strip() for c in rows[0]]
    if name == "cola" and "sentence" not in header:  # headerless train/dev
        cols, body, first = dict(COLA_POSITIONS), rows, 1
    else:
        missing = [c for c in lay.text if c not in header]
        if missing:
            raise DataError(f"{path}: no column {', '.join(repr(c) for c in missing)} in the header (GLUE {name} "
                            f"needs {', '.join(lay.text)}; the header has {', '.join(header)})")
        cols = {c: header.index(c) for c in (*lay.text, lay.label, *INDEX_COLUMNS) if c in header}
        body, first = rows[1:], 2
    if labelled and lay.label not in cols:
        raise DataError(f"{path}: no label column '{lay.label}' in the header (GLUE {name} needs it to train or "
                        f"score; the header has {', '.join(header)})")
    if not body:
        raise DataError(f"{path}: no examples (a header and no rows)")
    out = []
    for n, row in enumerate(body):
        where = f"{path}: line {n + first}"
        if len(row) <= max(cols.values()) or (first == 2 and len(row) != len(header)):  # a cell lost or added
            raise DataError(f"{where}: {len(row)} columns, the header names "
                            f"{len(header) if first == 2 else max(cols.values()) + 1}")
        label = _label(lay, row[cols[lay.label]], where) if lay.label in cols else None
        index = next((row[cols[c]] for c in INDEX_COLUMNS if c in cols), str(n))
        out.append({"index": index, "text": [row[cols[c]] for c in lay.text], "label": label})
    return out


def submission_text(name: str, examples: Sequence[dict], preds: Sequence) -> str:
    """GLUE's submission TSV (``index<TAB>prediction``; label names, or scores for STS-B)."""
    lay = layout(name)
    lines = ["index\tprediction"]
    for e, p in zip(examples, preds):
        lines.append(f"{e['index']}\t{lay.labels[p] if lay.labels else format(float(p), '.3f')}")
    return "\n".join(lines) + "\n"
