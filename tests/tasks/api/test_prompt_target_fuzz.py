"""Prompt/target records (``prompt-target``, ``summarize``), fuzzed over a split's ``.jsonl``: generated rows
read back exactly in every accepted field layout; one mutation (a field of the wrong type, a field dropped,
a truncated line, an invalid UTF-8 byte, an empty split) is one DataError line."""
from __future__ import annotations

import json
import os

from hypothesis import given
from hypothesis import strategies as st

from mwb.tasks.text.prompt_target import PromptTarget
from mwb.tasks.text.summarize import Summarize
from tests.helpers.fuzz import FUZZ, bad_utf8, fails, folder, sentence, truncated_line, write

LAYOUTS = [(PromptTarget, ("prompt", "target")), (PromptTarget, ("input", "output")),
           (Summarize, ("article", "highlights")), (Summarize, ("document", "summary"))]
pairs = st.lists(st.tuples(sentence, sentence), min_size=1, max_size=5)


def jsonl(keys, items) -> str:
    return "".join(json.dumps(dict(zip(keys, pair))) + "\n" for pair in items)


@FUZZ
@given(st.sampled_from(LAYOUTS), pairs)
def test_valid_rows_read_back_exactly(layout, items):
    cls, keys = layout
    with folder() as d:
        write(os.path.join(d, "train.jsonl"), jsonl(keys, items))
        got = cls().read(d, "train")
    out = ("prompt", "target") if cls is PromptTarget else ("source", "summary")
    assert got == [dict(zip(out, pair)) for pair in items]


@FUZZ
@given(st.sampled_from(LAYOUTS), pairs, st.sampled_from(["number", "null", "list", "dropped", "truncated",
                                                         "encoding", "empty"]), st.floats(0, 1))
def test_one_mutation_is_one_data_error(layout, items, mutation, at):
    cls, keys = layout
    rows = [dict(zip(keys, pair)) for pair in items]
    row = rows[int(at * (len(rows) - 1))]
    if mutation in ("number", "null", "list"):
        row[keys[1]] = {"number": 3, "null": None, "list": [row[keys[1]]]}[mutation]
    elif mutation == "dropped":
        del row[keys[1]]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    data = {"truncated": truncated_line(text, at), "encoding": bad_utf8(text, at), "empty": ""}.get(mutation, text)
    with folder() as d:
        write(os.path.join(d, "train.jsonl"), data)
        msg = fails(cls().read, d, "train")
    assert "train.jsonl" in msg
