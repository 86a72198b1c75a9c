"""RACE's readers, fuzzed over the official layout (``{split}/{middle,high}/N.txt``, one JSON each) and the
Hugging Face rows (``{split}.jsonl``): generated files read back exactly; one mutation (an answer that is not
one letter A-D, three options, a field dropped or of the wrong type, truncated JSON, an invalid UTF-8 byte,
an empty split) is one DataError line."""
from __future__ import annotations

import json
import os

from hypothesis import given
from hypothesis import strategies as st

from mwb.tasks.race.task import LETTERS, Race
from tests.helpers.fuzz import FUZZ, bad_utf8, fails, folder, sentence, truncated, write

questions = st.lists(st.tuples(sentence, st.lists(sentence, min_size=4, max_size=4), st.sampled_from(LETTERS)),
                     min_size=1, max_size=3)
BAD = ["answer_empty", "answer_two", "answer_letter", "answer_int", "three_options", "no_article",
       "article_list", "truncated", "encoding", "empty_split"]


def official(article, qs) -> dict:
    return {"id": "1.txt", "article": article, "questions": [q for q, _, _ in qs],
            "options": [o for _, o, _ in qs], "answers": [a for _, _, a in qs]}


@FUZZ
@given(sentence, questions, st.sampled_from(["middle", "high"]))
def test_official_files_read_back_exactly(article, qs, level):
    with folder() as d:
        write(os.path.join(d, "dev", level, "1.txt"), json.dumps(official(article, qs)))
        got = Race().read(d, "dev")
    assert got == [{"id": f"{level}/1.txt#{i}", "level": level, "article": article, "question": q,
                    "options": o, "label": LETTERS.index(a)} for i, (q, o, a) in enumerate(qs)]


@FUZZ
@given(sentence, questions)
def test_hf_rows_read_back_exactly(article, qs):
    rows = [{"example_id": f"high{i}.txt", "article": article, "question": q, "options": o, "answer": a}
            for i, (q, o, a) in enumerate(qs)]
    with folder() as d:
        write(os.path.join(d, "dev.jsonl"), "".join(json.dumps(r) + "\n" for r in rows))
        got = Race().read(d, "dev")
    assert [(e["id"], e["level"], e["question"], e["options"], e["label"]) for e in got] == \
        [(f"high{i}.txt", "high", q, o, LETTERS.index(a)) for i, (q, o, a) in enumerate(qs)]


@FUZZ
@given(sentence, questions, st.sampled_from(BAD), st.floats(0, 1))
def test_one_mutation_is_one_data_error(article, qs, mutation, at):
    ex = official(article, qs)
    i = int(at * (len(qs) - 1))
    edits = {"answer_empty": ("answers", ""), "answer_two": ("answers", "AB"), "answer_letter": ("answers", "E"),
             "answer_int": ("answers", 0), "three_options": ("options", ["a", "b", "c"])}
    if mutation in edits:
        key, value = edits[mutation]
        ex[key][i] = value
    elif mutation == "no_article":
        del ex["article"]
    elif mutation == "article_list":
        ex["article"] = [article]
    text = json.dumps(ex)
    data = truncated(text, at) if mutation == "truncated" else bad_utf8(text, at) if mutation == "encoding" else text
    with folder() as d:
        if mutation == "empty_split":
            os.makedirs(os.path.join(d, "dev", "middle"))
        else:
            write(os.path.join(d, "dev", "middle", "1.txt"), data)
        msg = fails(Race().read, d, "dev")
    assert "1.txt" in msg or mutation == "empty_split"
