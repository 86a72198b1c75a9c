"""RealToxicityPrompts' ``prompts.jsonl`` reader, fuzzed: generated rows read back exactly (toxicity a number
in [0, 1] or null); one mutation (a toxicity of the wrong type or out of range, the prompt text dropped,
a truncated line, an invalid UTF-8 byte, an empty file) is one DataError line."""
from __future__ import annotations

import json
import os

from hypothesis import given
from hypothesis import strategies as st

from mwb.tasks.detox.prompts import read_prompts
from tests.helpers.fuzz import FUZZ, bad_utf8, fails, folder, sentence, truncated_line, write

rows = st.lists(st.tuples(sentence, st.one_of(st.none(), st.floats(0, 1))), min_size=1, max_size=5)


def jsonl(items) -> str:
    return "".join(json.dumps({"filename": "f", "prompt": {"text": t, "toxicity": x}}) + "\n" for t, x in items)


@FUZZ
@given(rows)
def test_valid_prompts_read_back_exactly(items):
    with folder() as d:
        path = write(os.path.join(d, "prompts.jsonl"), jsonl(items))
        got = read_prompts(path)
    assert [(p["text"], p["toxicity"], p["id"]) for p in got] == \
        [(t, x, f"prompts.jsonl:{n}") for n, (t, x) in enumerate(items, 1)]


@FUZZ
@given(rows, st.sampled_from(["high", "above_one", "negative", "bool", "no_text", "truncated", "encoding",
                              "empty"]), st.floats(0, 1))
def test_one_mutation_is_one_data_error(items, mutation, at):
    i = int(at * (len(items) - 1))
    bad = {"high": "high", "above_one": 1.5, "negative": -0.1, "bool": True}
    if mutation in bad:
        items[i] = (items[i][0], bad[mutation])
    text = jsonl(items)
    if mutation == "no_text":
        text = text.replace('"text": ', '"txt": ', 1)
    data = {"truncated": truncated_line(text, at), "encoding": bad_utf8(text, at), "empty": ""}.get(mutation, text)
    with folder() as d:
        path = write(os.path.join(d, "prompts.jsonl"), data)
        msg = fails(read_prompts, path)
    assert "prompts.jsonl" in msg
    if mutation == "high":
        assert "toxicity" in msg and "'high'" in msg
