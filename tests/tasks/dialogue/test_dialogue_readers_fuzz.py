"""The dialogue readers, fuzzed: Wizard of Wikipedia's JSON list and chitchat's ``dataset.json``. Generated
files read back exactly; one mutation (a turn's text of the wrong type, a field dropped, a turn that is not an
object, truncated JSON, an invalid UTF-8 byte, no dialogues) is one DataError line."""
from __future__ import annotations

import json
import os

from hypothesis import given
from hypothesis import strategies as st

from mwb.tasks.dialogue.data import read_chitchat, read_wow
from tests.helpers.fuzz import FUZZ, bad_utf8, fails, folder, sentence, truncated, write

dialogues = st.lists(st.tuples(sentence, st.lists(sentence, min_size=1, max_size=4)), min_size=1, max_size=3)


def wow(items) -> list:
    return [{"chosen_topic": topic, "dialog": [{"speaker": f"{i % 2}_{'Wizard' if i % 2 else 'Apprentice'}",
                                                "text": t} for i, t in enumerate(texts)]} for topic, texts in items]


def chitchat(items) -> dict:
    return {f"c{n}": {"messages": [[{"sender": f"s{i % 2}", "text": t}] for i, t in enumerate(texts)]}
            for n, (_, texts) in enumerate(items)}


@FUZZ
@given(dialogues)
def test_valid_files_read_back_exactly(items):
    with folder() as d:
        got = read_wow(write(os.path.join(d, "w.json"), json.dumps(wow(items))))
        assert [(c["topic"], [(t.speaker, t.text) for t in c["turns"]]) for c in got] == \
            [(topic, [("Wizard" if i % 2 else "Apprentice", t.strip()) for i, t in enumerate(texts)])
             for topic, texts in items]
        got = read_chitchat(write(os.path.join(d, "c.json"), json.dumps(chitchat(items))))
        assert [[(t.speaker, t.text) for t in c["turns"]] for c in got] == \
            [[(f"s{i % 2}", t.strip()) for i, t in enumerate(texts)] for _, texts in items]


@FUZZ
@given(dialogues, st.booleans(), st.sampled_from(["text_int", "no_speaker", "turn_str", "truncated", "encoding",
                                                  "none"]), st.floats(0, 1))
def test_one_mutation_is_one_data_error(items, chit, mutation, at):
    doc = chitchat(items) if chit else wow(items)
    turns = (list(doc.values())[0]["messages"][-1] if chit else doc[0]["dialog"])
    i = int(at * (len(turns) - 1))
    key = "sender" if chit else "speaker"
    if mutation == "text_int":
        turns[i]["text"] = 5
    elif mutation == "no_speaker":
        del turns[i][key]
    elif mutation == "turn_str":
        turns[i] = "hello"
    elif mutation == "none":
        doc = {} if chit else []
    text = json.dumps(doc)
    data = truncated(text, at) if mutation == "truncated" else bad_utf8(text, at) if mutation == "encoding" else text
    with folder() as d:
        assert "d.json" in fails(read_chitchat if chit else read_wow, write(os.path.join(d, "d.json"), data))
