"""The SQuAD JSON format (``{"data": [{"paragraphs": [{"context", "qas": [...]}]}]}``), read once for every
task that takes it: SQuAD 1.1/2.0, BioASQ in the BioBERT layout (a paragraph per snippet) and the synthetic-QA
output.

Why one reader: each task builds different examples from the same file (SQuAD word spans, BioASQ snippet
answers), but the file's structure, its checks and its error lines are the format's, not the task's.
"""
from __future__ import annotations

import os

from mwb.core.errors import DataError

from .checks import items, number, read_json, shown, text


def read_squad_json(path: str, layout: str = "SQuAD JSON") -> list[dict]:
    """The paragraphs of a SQuAD-format file, in file order: ``{"context": str, "qas": [{"id", "question",
    "answers": [{"text", "answer_start"}, ...], "is_impossible": bool}, ...]}``. ``answers`` is a list (empty
    when the file has none); ``layout`` names the expected layout in the not-found error. Every field is
    checked (strings, an integer ``answer_start`` inside the context, a boolean ``is_impossible``) and a file
    with no question is a DataError."""
    try:
        doc = read_json(path)
    except DataError:
        if not os.path.exists(path):
            raise DataError(f"{path} not found ({layout})") from None
        raise
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise DataError(f"{path}: not a SQuAD-format JSON file with a top-level 'data' list")
    out = []
    for a, article in enumerate(doc["data"]):
        at = f"{path}: data[{a}]"
        for p, para in enumerate(items(article, "paragraphs", at)):
            where = f"{at}.paragraphs[{p}]"
            context = text(para, "context", where)
            qas = []
            for q, qa in enumerate(items(para, "qas", where)):
                qw = f"{where}.qas[{q}]"
                qid, question = text(qa, "id", qw, empty=False), text(qa, "question", qw)
                impossible = qa.get("is_impossible", False)
                if not isinstance(impossible, bool):
                    raise DataError(f"{qw}: field 'is_impossible' must be true or false, got {shown(impossible)}")
                answers = []
                for n, ans in enumerate(items(qa, "answers", qw) if "answers" in qa else []):
                    aw = f"{qw}.answers[{n}]"
                    start = number(ans.get("answer_start") if isinstance(ans, dict) else None, aw, "answer_start",
                                   0, max(len(context) - 1, 0), integer=True)
                    answers.append({"text": text(ans, "text", aw), "answer_start": start})
                qas.append({"id": qid, "question": question, "answers": answers, "is_impossible": impossible})
            out.append({"context": context, "qas": qas})
    if not any(p["qas"] for p in out):
        raise DataError(f"{path}: no questions (an empty SQuAD-format file)")
    return out
