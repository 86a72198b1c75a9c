"""Chat rows: OpenAI ``messages`` or ShareGPT ``conversations``, checked field by field, in one form.

Accepted rows (``.jsonl``, one per line; ``.json``, a list; ``.parquet``), one of:

``{"messages": [{"role": "system" | "user" | "assistant", "content": "..."}, ...]}``   (OpenAI; ``developer`` is
read as ``system``, as serving reads it; ``content`` may also be OpenAI's list of ``{"type": "text", "text"}`` parts)
``{"conversations": [{"from": "system" | "human" | "gpt", "value": "..."}, ...]}``  (ShareGPT)

Other fields of a row (an ``id``, a ``source``) are ignored; a message has exactly its two fields. A conversation
is an optional system message, then user and assistant turns alternating, ending with an assistant turn (the
turns the loss is on); every text is a non-empty string. Why this strict: a row that breaks a rule would be
rendered into something the model was never meant to see (two user turns run together, a reply with no
question, a conversation that ends in a question and trains nothing) — each is one DataError naming the file,
the line and the field instead. The result is ``{"messages": [{"role", "content"}, ...], "where": "FILE:LINE",
"id"}``, ``id`` the row's own or a hash of its messages (the same conversation has the same id wherever it is read).
"""
from __future__ import annotations

from typing import Iterator

from mwb.core.errors import DataError
from mwb.evaluation.chat_format import message_text
from mwb.evaluation.predictions import item_id
from mwb.evaluation.task_data import load_records

from ..api.formats.checks import jsonl_rows, read_json
from ..api.formats.splits import split_file, with_extensions

OPENAI_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
SHAREGPT_ROLES = {"system": "system", "human": "user", "gpt": "assistant"}
# field → (role key, text key, role as written → OpenAI role)
FORMATS = {"messages": ("role", "content", OPENAI_ROLES), "conversations": ("from", "value", SHAREGPT_ROLES)}
EXTENSIONS = (".jsonl", ".json", ".parquet")


def read_split(path: str, split: str) -> list[dict]:
    """The conversations of ``split``: ``path`` itself if it is a file, else its ``split.jsonl``/``.json``/
    ``.parquet``."""
    f = split_file(path, split, with_extensions(split, EXTENSIONS), "chat")
    out = [conversation(row, where) for where, row in rows(f)]
    if not out:
        raise DataError(f"{f}: no conversations")
    return out


def rows(path: str) -> Iterator[tuple[str, object]]:
    """``(where, row)`` for each row of a chat file, ``where`` naming the file and its line (JSONL) or item."""
    if path.endswith(".jsonl"):
        for n, row in jsonl_rows(path, objects=False):
            yield f"{path}:{n}", row
        return
    if path.endswith(".json"):
        data = read_json(path)
        if not isinstance(data, list):
            raise DataError(f"{path}: a .json chat file holds a list of rows, not a {type(data).__name__}")
        for n, row in enumerate(data):
            yield f"{path} item {n}", row
        return
    for n, row in enumerate(load_records(path)):
        yield f"{path} row {n}", row


def conversation(row, where: str) -> dict:
    """One row as ``{"messages": [...], "where": where}`` with OpenAI roles, or a DataError naming the field."""
    if not isinstance(row, dict):
        raise DataError(f"{where}: a row is a JSON object with 'messages' or 'conversations', not "
                        f"{type(row).__name__}")
    present = [k for k in FORMATS if k in row and row[k] is not None]
    if len(present) != 1:
        found = "both" if present else f"neither (fields: {', '.join(sorted(map(str, row))) or 'none'})"
        raise DataError(f"{where}: a row has 'messages' (OpenAI) or 'conversations' (ShareGPT), {found}")
    field = present[0]
    turns = row[field]
    if not isinstance(turns, list):
        raise DataError(f"{where}: {field}: a list of messages, not {type(turns).__name__}")
    if not turns:
        raise DataError(f"{where}: {field}: the conversation is empty")
    messages = [_message(m, field, i, where) for i, m in enumerate(turns)]
    _check_order(messages, [m[FORMATS[field][0]] for m in turns], field, where)
    own = row.get("id")
    return {"messages": messages, "where": where,
            "id": str(own) if isinstance(own, (str, int)) and own != "" else item_id(messages)}


def _message(m, field: str, i: int, where: str) -> dict:
    role_key, text_key, roles = FORMATS[field]
    at = f"{where}: {field}[{i}]"
    if not isinstance(m, dict):
        raise DataError(f"{at}: a message is an object with '{role_key}' and '{text_key}', not {type(m).__name__}")
    extra = sorted(set(map(str, m)) - {role_key, text_key})
    if extra:
        raise DataError(f"{at}: unknown field '{extra[0]}' (a message has '{role_key}' and '{text_key}')")
    for key in (role_key, text_key):
        if key not in m:
            raise DataError(f"{at}: no '{key}' field")
    role = m[role_key]
    if not isinstance(role, str) or role not in roles:
        raise DataError(f"{at}.{role_key}: {role!r} is not one of {', '.join(roles)}")
    try:
        text = message_text(m[text_key], at) if field == "messages" else m[text_key]
    except ValueError as e:
        raise DataError(str(e)) from None
    if not isinstance(text, str):
        raise DataError(f"{at}.{text_key}: a string, not {type(text).__name__}")
    if not text.strip():
        raise DataError(f"{at}.{text_key}: empty")
    return {"role": roles[role], "content": text}


def _check_order(messages: list[dict], spelled: list[str], field: str, where: str) -> None:
    """An optional system message, then user/assistant alternating from a user turn, ending with an assistant;
    ``spelled``: the roles as the row writes them, for the error."""
    role_key = FORMATS[field][0]
    first = 1 if messages[0]["role"] == "system" else 0
    for i, m in enumerate(messages[first:], first):
        want = "user" if (i - first) % 2 == 0 else "assistant"
        if m["role"] != want:
            rule = "a system message only opens a conversation" if m["role"] == "system" else \
                "user and assistant turns alternate, from a user turn"
            raise DataError(f"{where}: {field}[{i}].{role_key}: expected {_name(want, field)}, got "
                            f"'{spelled[i]}' ({rule})")
    if messages[-1]["role"] != "assistant":
        raise DataError(f"{where}: {field}[{len(messages) - 1}]: the conversation ends with "
                        f"'{spelled[-1]}', not an assistant turn (there is no reply to train on)")


def _name(role: str, field: str) -> str:
    """An OpenAI role as a row of ``field`` writes it (ShareGPT: human/gpt)."""
    if field == "conversations":
        role = {v: k for k, v in SHAREGPT_ROLES.items()}[role]
    return f"'{role}'"
