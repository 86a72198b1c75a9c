"""GLUE's TSV reader, fuzzed over the official layouts: generated files read back exactly; one mutation (the
label column dropped from a training split, a label outside the set, a row with a cell missing, an invalid
UTF-8 byte, a header with no rows, an empty file) is one DataError line."""
from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st

from mwb.tasks.glue.data import LAYOUTS
from mwb.tasks.glue.task import Glue
from tests.helpers.fuzz import FUZZ, bad_utf8, fails, folder, sentence, write

NAMES = sorted(n for n in LAYOUTS if n != "cola")  # CoLA's headerless files are covered by test_glue.py


@st.composite
def glue_files(draw):
    """(task name, header, rows, expected examples) for a train.tsv with an index column and extra columns."""
    name = draw(st.sampled_from(NAMES))
    lay = LAYOUTS[name]
    n = draw(st.integers(1, 5))
    texts = [[draw(sentence) for _ in lay.text] for _ in range(n)]
    if lay.labels is None:
        labels = [draw(st.integers(0, 50)) / 10 for _ in range(n)]
        cells = [f"{v:.1f}" for v in labels]
    else:
        labels = [draw(st.integers(0, len(lay.labels) - 1)) for _ in range(n)]
        cells = [lay.labels[i] for i in labels]
    header = ["index", "extra", *lay.text, lay.label]
    order = draw(st.permutations(range(len(header))))  # columns are found by name, in any order
    rows = [[str(i), "x", *t, c] for i, (t, c) in enumerate(zip(texts, cells))]
    header, rows = [header[j] for j in order], [[r[j] for j in order] for r in rows]
    expected = [{"index": str(i), "text": t, "label": y} for i, (t, y) in enumerate(zip(texts, labels))]
    return name, header, rows, expected


def tsv(header, rows) -> str:
    return "\n".join("\t".join(r) for r in [header, *rows]) + "\n"


@FUZZ
@given(glue_files())
def test_valid_files_read_back_exactly(case):
    name, header, rows, expected = case
    with folder() as d:
        write(os.path.join(d, "train.tsv"), tsv(header, rows))
        assert Glue(task=name).read(d, "train") == expected


@FUZZ
@given(glue_files(), st.sampled_from(["no_label", "bad_label", "short_row", "encoding", "no_rows", "empty"]),
       st.floats(0, 1))
def test_one_mutation_is_one_data_error(case, mutation, at):
    name, header, rows, _ = case
    lay = LAYOUTS[name]
    j = header.index(lay.label)
    if mutation == "no_label":
        data = tsv([c for c in header if c != lay.label], [r[:j] + r[j + 1:] for r in rows])
    elif mutation == "bad_label":
        rows[int(at * (len(rows) - 1))][j] = "high"
        data = tsv(header, rows)
    elif mutation == "short_row":
        rows[-1] = rows[-1][:-1]
        data = tsv(header, rows)
    elif mutation == "encoding":
        data = bad_utf8(tsv(header, rows), at)
    elif mutation == "no_rows":
        data = tsv(header, [])
    else:
        data = ""
    with folder() as d:
        write(os.path.join(d, "train.tsv"), data)
        msg = fails(Glue(task=name).read, d, "train")
        assert "train.tsv" in msg
