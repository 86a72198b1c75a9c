"""SQuAD v1.1 JSON for synthetic pairs, written atomically, in the layout ``mwb finetune squad`` and
``datasets.load_dataset("json", data_files=…, field="data")`` read: one article per passage title, one
paragraph per passage, ``answer_start`` the character offset of the answer in the context."""
from __future__ import annotations

import json
import os
from collections import OrderedDict
from typing import Sequence

from mwb.core.atomic import atomic_write_text


def to_squad(examples: Sequence[dict]) -> dict:
    """``examples``: ``{"id", "title", "context", "question", "answer", "answer_start"}`` each."""
    articles: "OrderedDict[str, OrderedDict[str, list]]" = OrderedDict()
    for e in examples:
        if e["context"][e["answer_start"]:e["answer_start"] + len(e["answer"])] != e["answer"]:
            raise ValueError(f"{e['id']}: answer {e['answer']!r} is not at {e['answer_start']} of its context")
        paras = articles.setdefault(e["title"], OrderedDict())
        paras.setdefault(e["context"], []).append(
            {"id": e["id"], "question": e["question"],
             "answers": [{"text": e["answer"], "answer_start": e["answer_start"]}]})
    return {"version": "1.1", "data": [
        {"title": t, "paragraphs": [{"context": c, "qas": qas} for c, qas in paras.items()]}
        for t, paras in articles.items()]}


def write_squad(path: str, examples: Sequence[dict]) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write_text(path, json.dumps(to_squad(examples), ensure_ascii=False, indent=1))
    return path
