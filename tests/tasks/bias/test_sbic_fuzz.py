"""SBIC's CSV reader, fuzzed: generated files read back as one example per post (label: mean ≥ 0.5); one
mutation (a value that is not a number or outside [0, 1], the attribute column dropped, a malformed
targetCategory list, an invalid UTF-8 byte, a header with no rows) is one DataError line."""
from __future__ import annotations

import csv
import io
import os

from hypothesis import given
from hypothesis import strategies as st

from mwb.tasks.bias.data import read_sbic
from tests.helpers.fuzz import FUZZ, bad_utf8, fails, folder, sentence, write

posts = st.lists(st.tuples(sentence, st.sampled_from(["0.0", "0.5", "1.0"]), st.sampled_from(["race", "gender"])),
                 min_size=1, max_size=6, unique_by=lambda r: r[0])
HEADER = ["post", "offensiveYN", "targetCategory"]


def csv_text(rows, header=HEADER) -> str:
    f = io.StringIO()
    w = csv.writer(f, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return f.getvalue()


@FUZZ
@given(posts)
def test_valid_files_read_back_exactly(rows):
    with folder() as d:
        write(os.path.join(d, "SBIC.v2.dev.csv"), csv_text(rows))
        got = read_sbic(d, "dev")
    assert got == [{"text": p, "label": int(float(v) >= 0.5), "category": c, "score": float(v)} for p, v, c in rows]


@FUZZ
@given(posts, st.sampled_from(["word", "above_one", "no_column", "category", "encoding", "no_rows"]), st.floats(0, 1))
def test_one_mutation_is_one_data_error(rows, mutation, at):
    i = int(at * (len(rows) - 1))
    header = HEADER
    if mutation in ("word", "above_one"):
        rows[i] = (rows[i][0], "yes" if mutation == "word" else "2", rows[i][2])
    elif mutation == "category":
        rows[i] = (rows[i][0], rows[i][1], "['race'")
    elif mutation == "no_column":
        header, rows = ["post", "targetCategory"], [(p, c) for p, _, c in rows]
    text = csv_text([] if mutation == "no_rows" else rows, header)
    with folder() as d:
        write(os.path.join(d, "SBIC.v2.dev.csv"), bad_utf8(text, at) if mutation == "encoding" else text)
        assert "SBIC.v2.dev.csv" in fails(read_sbic, d, "dev")
