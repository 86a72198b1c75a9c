"""The SQuAD JSON reader (SQuAD, BioASQ, synthetic QA), fuzzed: generated files read back exactly; one
mutation (an answer_start of the wrong type or outside the context, an is_impossible that is not a boolean,
a question's id dropped, truncated JSON, an invalid UTF-8 byte, no questions) is one DataError line."""
from __future__ import annotations

import json
import os

from hypothesis import given
from hypothesis import strategies as st

from mwb.tasks.api.formats.squad_json import read_squad_json
from tests.helpers.fuzz import FUZZ, bad_utf8, fails, folder, sentence, truncated, write


@st.composite
def squad(draw):
    paragraphs = []
    for p in range(draw(st.integers(1, 3))):
        context = draw(sentence)
        qas = []
        for q in range(draw(st.integers(1, 3))):
            start = draw(st.integers(0, len(context) - 1))
            end = draw(st.integers(start + 1, len(context)))
            qas.append({"id": f"q{p}.{q}", "question": draw(sentence), "is_impossible": False,
                        "answers": [{"text": context[start:end], "answer_start": start}]})
        paragraphs.append({"context": context, "qas": qas})
    return {"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]}


@FUZZ
@given(squad())
def test_valid_files_read_back_exactly(doc):
    with folder() as d:
        got = read_squad_json(write(os.path.join(d, "dev.json"), json.dumps(doc)))
    assert got == doc["data"][0]["paragraphs"]


@FUZZ
@given(squad(), st.sampled_from(["start_str", "start_out", "impossible_str", "no_id", "context_int", "truncated",
                                 "encoding", "no_questions"]), st.floats(0, 1))
def test_one_mutation_is_one_data_error(doc, mutation, at):
    para = doc["data"][0]["paragraphs"][0]
    qa = para["qas"][0]
    if mutation == "start_str":
        qa["answers"][0]["answer_start"] = str(qa["answers"][0]["answer_start"])
    elif mutation == "start_out":
        qa["answers"][0]["answer_start"] = len(para["context"]) + 5
    elif mutation == "impossible_str":
        qa["is_impossible"] = "false"
    elif mutation == "no_id":
        del qa["id"]
    elif mutation == "context_int":
        para["context"] = 7
    elif mutation == "no_questions":
        for p in doc["data"][0]["paragraphs"]:
            p["qas"] = []
    text = json.dumps(doc)
    data = truncated(text, at) if mutation == "truncated" else bad_utf8(text, at) if mutation == "encoding" else text
    with folder() as d:
        msg = fails(read_squad_json, write(os.path.join(d, "dev.json"), data))
    assert "dev.json" in msg
