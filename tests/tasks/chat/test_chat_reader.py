"""Chat rows: OpenAI messages and ShareGPT conversations read into one form; every malformed field is one DataError
line naming the file, the line (or item) and the field."""
import json

import pytest

from mwb.core.errors import DataError
from mwb.tasks.chat.reader import read_split
from mwb.tasks.chat.task import Chat, cut_at_stops

GOOD = {"messages": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                     {"role": "assistant",
                      "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "!"}]}]}
SHAREGPT = {"id": 7, "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"},
                                       {"from": "human", "value": "Bye"}, {"from": "gpt", "value": "Bye!"}]}


def _write(tmp_path, rows, name="train.jsonl"):
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def test_both_formats_read_into_openai_roles(tmp_path):
    path = _write(tmp_path, [GOOD, "", SHAREGPT])
    a, b = read_split(str(tmp_path), "train")
    assert a["messages"][0] == {"role": "system", "content": "Be brief."}  # OpenAI's developer is a system message
    assert a["messages"][2] == {"role": "assistant", "content": "Hello!"} and a["where"] == f"{path}:1"
    assert [m["role"] for m in b["messages"]] == ["user", "assistant", "user", "assistant"]
    assert b["where"] == f"{path}:3"
    (tmp_path / "dev.json").write_text(json.dumps([SHAREGPT]))
    assert read_split(str(tmp_path), "dev")[0]["where"].endswith("dev.json item 0")
    assert read_split(path, "dev")[0] == a  # one file serves every split
    assert b["id"] == "7" and len(a["id"]) == 16  # the row's own id, else a hash of the messages
    (tmp_path / "elsewhere").mkdir()
    assert read_split(_write(tmp_path / "elsewhere", [GOOD]), "train")[0]["id"] == a["id"]


def _msgs(*pairs):
    return {"messages": [{"role": r, "content": c} for r, c in pairs]}


BAD = [
    (["not", "a", "row"], "a row is a JSON object with 'messages' or 'conversations', not list"),
    ({"messages": GOOD["messages"], "conversations": SHAREGPT["conversations"]}, "both"),
    ({"prompt": "x"}, "neither (fields: prompt)"),
    ({"messages": "Hi"}, "messages: a list of messages, not str"),
    ({"messages": []}, "messages: the conversation is empty"),
    ({"messages": ["Hi"]}, "messages[0]: a message is an object with 'role' and 'content', not str"),
    ({"messages": [{"role": "user", "content": "Hi", "name": "bob"}]}, "messages[0]: unknown field 'name'"),
    ({"messages": [{"content": "Hi"}]}, "messages[0]: no 'role' field"),
    (_msgs(("user", "Hi"), ("robot", "beep")),
     "messages[1].role: 'robot' is not one of system, developer, user, assistant"),
    ({"messages": [{"role": 1, "content": "Hi"}]}, "messages[0].role: 1 is not one of"),
    (_msgs(("user", 5)), "messages[0]: 'content' must be a string or a list of text parts"),
    (_msgs(("user", "Hi"), ("assistant", "  ")), "messages[1].content: empty"),
    ({"conversations": [{"from": "human", "value": "Hi"}, {"from": "bot", "value": "x"}]},
     "conversations[1].from: 'bot' is not one of system, human, gpt"),
    ({"conversations": [{"from": "human", "value": ["Hi"]}]}, "conversations[0].value: a string, not list"),
    (_msgs(("user", "Hi"), ("system", "Be brief."), ("assistant", "Hello")),
     "messages[1].role: expected 'assistant', got 'system' (a system message only opens a conversation)"),
    (_msgs(("assistant", "Hello"),), "messages[0].role: expected 'user', got 'assistant' (user and assistant turns"),
    (_msgs(("user", "Hi"), ("user", "Hello?"), ("assistant", "Hi")),
     "messages[1].role: expected 'assistant', got 'user'"),
    ({"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"},
                        {"from": "human", "value": "And?"}]},
     "conversations[2]: the conversation ends with 'human', not an assistant turn"),
]


@pytest.mark.parametrize("row,message", BAD, ids=[str(i) for i in range(len(BAD))])
def test_each_malformed_field_is_one_line_naming_file_line_and_field(tmp_path, row, message):
    path = _write(tmp_path, [GOOD, row])
    with pytest.raises(DataError) as e:
        read_split(path, "train")
    text = str(e.value)
    assert text.startswith(f"{path}:2: ") and message in text and "\n" not in text


def test_bad_json_and_missing_split(tmp_path):
    path = _write(tmp_path, [GOOD, "{oops"])
    with pytest.raises(DataError, match=f"{path}: line 2: not valid JSON"):
        read_split(path, "train")
    (tmp_path / "d").mkdir()
    with pytest.raises(DataError, match="chat split 'dev' not found: expected dev.jsonl/.json/.parquet"):
        read_split(str(tmp_path / "d"), "dev")
    (tmp_path / "d" / "dev.jsonl").write_text("\n")
    with pytest.raises(DataError, match="dev.jsonl: empty file"):
        read_split(str(tmp_path / "d"), "dev")
    (tmp_path / "x.json").write_text(json.dumps({"messages": []}))
    with pytest.raises(DataError, match="holds a list of rows, not a dict"):
        read_split(str(tmp_path / "x.json"), "train")


def test_bundled_sample_and_evaluation_inputs():
    task = Chat()
    train, dev = task.read(Chat.default_data, "train"), task.read(Chat.default_data, "dev")
    assert len(train) == 24 and len(dev) == 8
    assert sum(len(c["messages"]) > 3 for c in train) >= 6  # multi-turn conversations
    x = task.inputs(train[4], None, 0)  # the plain format without a tokenizer: history, then "Assistant:"
    assert x["prompt"].startswith("User: Can I renew a book online?\nAssistant: Yes,") and x["prompt"].endswith(
        "\nUser: What if someone has reserved it?\nAssistant:")
    assert x["target"] == train[4]["messages"][-1]["content"]
    assert cut_at_stops(" Closed.\nUser: ok", ("\nUser:", "\nSystem:")) == "Closed."
    assert cut_at_stops("Closed.", ()) == "Closed."
