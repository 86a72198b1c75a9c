"""The ROCStories / Story Cloze reader, fuzzed: generated CSV/TSV files read back exactly; one mutation (a
sentence column dropped, an empty sentence, an AnswerRightEnding outside {1, 2}, an invalid UTF-8 byte, a
header with no rows) is one DataError line."""
from __future__ import annotations

import csv
import io
import os

from hypothesis import given
from hypothesis import strategies as st

from mwb.tasks.story.data import CLOZE_COLUMNS, ROC_COLUMNS, read_story_file
from tests.helpers.fuzz import FUZZ, bad_utf8, fails, folder, sentence, write

stories = st.lists(st.tuples(st.uuids().map(str), st.lists(sentence, min_size=6, max_size=6), st.sampled_from("12")),
                   min_size=1, max_size=4)


def table(items, cloze: bool, sep: str) -> tuple[list, list]:
    if cloze:
        return CLOZE_COLUMNS, [[i, *s[:4], s[4], s[5], r] for i, s, r in items]
    return ROC_COLUMNS + ["storytitle"], [[i, *s[:5], "t"] for i, s, _ in items]


def text(header, rows, sep) -> str:
    f = io.StringIO()
    csv.writer(f, delimiter=sep, lineterminator="\n").writerows([header, *rows])
    return f.getvalue()


@FUZZ
@given(stories, st.booleans(), st.sampled_from([",", "\t"]))
def test_valid_files_read_back_exactly(items, cloze, sep):
    header, rows = table(items, cloze, sep)
    with folder() as d:
        got = read_story_file(write(os.path.join(d, "s.tsv" if sep == "\t" else "s.csv"), text(header, rows, sep)))
    want = [(i, tuple(s[:4]) + (s[4 if r == "1" else 5],)) if cloze else (i, tuple(s[:5])) for i, s, r in items]
    assert [(s.id, s.sentences) for s in got] == want


@FUZZ
@given(stories, st.booleans(), st.sampled_from(["no_column", "empty_sentence", "ending", "encoding", "no_rows"]),
       st.floats(0, 1))
def test_one_mutation_is_one_data_error(items, cloze, mutation, at):
    header, rows = table(items, cloze, ",")
    i = int(at * (len(rows) - 1))
    if mutation == "no_column":
        header, rows = header[:2] + header[3:], [r[:2] + r[3:] for r in rows]
    elif mutation == "empty_sentence":
        rows[i][2] = " "
    elif mutation == "ending":
        if cloze:
            rows[i][-1] = "3"
        else:
            rows[i][1] = ""
    data = text(header, [] if mutation == "no_rows" else rows, ",")
    with folder() as d:
        path = write(os.path.join(d, "s.csv"), bad_utf8(data, at) if mutation == "encoding" else data)
        assert "s.csv" in fails(read_story_file, path)
