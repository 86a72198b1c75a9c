"""The chat reader, fuzzed over OpenAI ``messages`` and ShareGPT ``conversations`` JSONL: generated
conversations read back exactly; one mutation (a role outside the set, a content of the wrong type, a field
dropped, a truncated line, an invalid UTF-8 byte, an empty split) is one DataError line."""
from __future__ import annotations

import json
import os

from hypothesis import given
from hypothesis import strategies as st

from mwb.tasks.chat.reader import read_split
from tests.helpers.fuzz import FUZZ, bad_utf8, fails, folder, sentence, truncated_line, write

convs = st.lists(st.tuples(st.booleans(), st.lists(st.tuples(sentence, sentence), min_size=1, max_size=3)),
                 min_size=1, max_size=4)
SHAREGPT = {"system": "system", "user": "human", "assistant": "gpt"}


def messages(system, turns) -> list[dict]:
    out = [{"role": "system", "content": "Be brief."}] if system else []
    for q, a in turns:
        out += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    return out


def jsonl(items, sharegpt: bool) -> str:
    rows = []
    for system, turns in items:
        msgs = messages(system, turns)
        rows.append({"conversations": [{"from": SHAREGPT[m["role"]], "value": m["content"]} for m in msgs]}
                    if sharegpt else {"messages": msgs})
    return "".join(json.dumps(r) + "\n" for r in rows)


@FUZZ
@given(convs, st.booleans())
def test_valid_conversations_read_back_exactly(items, sharegpt):
    with folder() as d:
        write(os.path.join(d, "train.jsonl"), jsonl(items, sharegpt))
        got = read_split(d, "train")
    assert [c["messages"] for c in got] == [messages(s, t) for s, t in items]


@FUZZ
@given(convs, st.booleans(), st.sampled_from(["role", "content_int", "no_content", "no_messages", "truncated",
                                              "encoding", "empty"]), st.floats(0, 1))
def test_one_mutation_is_one_data_error(items, sharegpt, mutation, at):
    text = jsonl(items, sharegpt)
    rows = [json.loads(line) for line in text.splitlines()]
    row = rows[int(at * (len(rows) - 1))]
    key = "conversations" if sharegpt else "messages"
    role, content = ("from", "value") if sharegpt else ("role", "content")
    msg = row[key][-1]
    if mutation == "role":
        msg[role] = "narrator"
    elif mutation == "content_int":
        msg[content] = 42
    elif mutation == "no_content":
        del msg[content]
    elif mutation == "no_messages":
        del row[key]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    data = {"truncated": truncated_line(text, at), "encoding": bad_utf8(text, at), "empty": ""}.get(mutation, text)
    with folder() as d:
        write(os.path.join(d, "train.jsonl"), data)
        assert "train.jsonl" in fails(read_split, d, "train")
