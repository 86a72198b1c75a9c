"""The open-domain QA question reader (``qa``, ``qa-reader``), fuzzed over NQ-open's layouts (TSV
``question<TAB>["answer", …]`` and JSONL): generated files read back exactly; one mutation (answers of the
wrong type or empty, the question dropped, a truncated line, an invalid UTF-8 byte, an empty file) is one
DataError line."""
from __future__ import annotations

import json
import os

from hypothesis import given
from hypothesis import strategies as st

from mwb.retrieval.inputs import read_questions
from tests.helpers.fuzz import FUZZ, bad_utf8, fails, folder, sentence, truncated_line, write

questions = st.lists(st.tuples(sentence, st.lists(sentence, min_size=1, max_size=3)), min_size=1, max_size=5)


@FUZZ
@given(questions, st.booleans())
def test_valid_files_read_back_exactly(items, as_tsv):
    text = "".join(f"{q}\t{json.dumps(a)}\n" for q, a in items) if as_tsv else \
        "".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in items)
    with folder() as d:
        got = read_questions(write(os.path.join(d, "nq.tsv" if as_tsv else "nq.jsonl"), text))
    assert got == [{"question": q, "answers": a} for q, a in items]


@FUZZ
@given(questions, st.sampled_from(["answers_int", "answers_empty", "no_question", "question_int", "truncated",
                                   "encoding", "empty"]), st.floats(0, 1))
def test_one_mutation_is_one_data_error(items, mutation, at):
    rows = [{"question": q, "answers": a} for q, a in items]
    row = rows[int(at * (len(rows) - 1))]
    if mutation == "answers_int":
        row["answers"] = [1, 2]
    elif mutation == "answers_empty":
        row["answers"] = []
    elif mutation == "no_question":
        del row["question"]
    elif mutation == "question_int":
        row["question"] = 7
    text = "".join(json.dumps(r) + "\n" for r in rows)
    data = {"truncated": truncated_line(text, at), "encoding": bad_utf8(text, at), "empty": ""}.get(mutation, text)
    with folder() as d:
        assert "nq.jsonl" in fails(read_questions, write(os.path.join(d, "nq.jsonl"), data))
