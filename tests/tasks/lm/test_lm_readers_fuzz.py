"""The language-modelling readers, fuzzed: LAMBADA's ``{"text"}`` JSONL and WikiText's raw text. Generated
files read back exactly; one mutation (the text field of the wrong type or dropped, a truncated line, an
invalid UTF-8 byte, an empty file) is one DataError line."""
from __future__ import annotations

import json
import os

from hypothesis import given
from hypothesis import strategies as st

from mwb.tasks.lm.lambada import Lambada
from mwb.tasks.lm.wikitext import WikiText
from tests.helpers.fuzz import FUZZ, bad_utf8, fails, folder, sentence, truncated_line, write

passages = st.lists(sentence, min_size=1, max_size=5)


@FUZZ
@given(passages)
def test_valid_files_read_back_exactly(texts):
    with folder() as d:
        path = write(os.path.join(d, "lambada_test.jsonl"), "".join(json.dumps({"text": t}) + "\n" for t in texts))
        assert Lambada().load(path) == [{"text": t} for t in texts]
        raw = " \n = Title = \n" + "\n".join(texts) + "\n"
        path = write(os.path.join(d, "wiki.test.tokens"), raw)
        assert WikiText().load(path) == [{"text": raw, "path": path}]


@FUZZ
@given(passages, st.sampled_from(["number", "dropped", "blank", "truncated", "encoding", "empty"]), st.floats(0, 1))
def test_one_mutation_is_one_data_error(texts, mutation, at):
    rows = [{"text": t} for t in texts]
    row = rows[int(at * (len(rows) - 1))]
    if mutation == "number":
        row["text"] = 3
    elif mutation == "dropped":
        row["passage"] = row.pop("text")
    elif mutation == "blank":
        row["text"] = "  "
    text = "".join(json.dumps(r) + "\n" for r in rows)
    data = {"truncated": truncated_line(text, at), "encoding": bad_utf8(text, at), "empty": ""}.get(mutation, text)
    with folder() as d:
        assert "lambada_test.jsonl" in fails(Lambada().load, write(os.path.join(d, "lambada_test.jsonl"), data))
        if mutation == "encoding":
            raw = bad_utf8(" = Title = \n" + "\n".join(texts), at)
            assert "wiki.test.tokens" in fails(WikiText().load, write(os.path.join(d, "wiki.test.tokens"), raw))
