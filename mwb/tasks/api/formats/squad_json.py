"""The SQuAD JSON format (``{"data": [{"paragraphs": [{"context", "qas": [...]}]}]}``), read once for every
task that takes it: SQuAD 1.1/2.0, BioASQ in the BioBERT layout (a paragraph per snippet) and the synthetic-QA
output.

Why one reader: each task builds different examples from the same file (SQuAD word spans, BioASQ snippet
answers), but the file's structure, its checks and its error lines are the format's, not the task's.
"""
from __future__ import annotations

import json

from mwb.core.errors import DataError


def read_squad_json(path: str, layout: str = "SQuAD JSON") -> list[dict]:
    """The paragraphs of a SQuAD-format file, in file order: ``{"context": str, "qas": [{"id", "question",
    "answers": [{"text", "answer_start"}, ...], "is_impossible": bool}, ...]}``. ``answers`` is a list (empty
    when the file has none); ``layout`` names the expected layout in the not-found error."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)["data"]
    except FileNotFoundError:
        raise DataError(f"{path} not found ({layout})") from None
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise DataError(f"{path}: not a SQuAD-format JSON file with a top-level 'data' list ({e})") from None
    if not isinstance(data, list):
        raise DataError(f"{path}: not a SQuAD-format JSON file with a top-level 'data' list")
    out = []
    for article in data:
        if not isinstance(article, dict):
            raise DataError(f"{path}: an entry of 'data' is not an object with 'paragraphs'")
        for para in article.get("paragraphs", []):
            if not isinstance(para, dict) or not isinstance(para.get("context"), str):
                raise DataError(f"{path}: a paragraph lacks its 'context' text")
            qas = []
            for qa in para.get("qas", []):
                if not isinstance(qa, dict) or "id" not in qa or "question" not in qa:
                    raise DataError(f"{path}: a question lacks 'id' or 'question'")
                qas.append({"id": qa["id"], "question": qa["question"], "answers": list(qa.get("answers") or []),
                            "is_impossible": bool(qa.get("is_impossible", False))})
            out.append({"context": para["context"], "qas": qas})
    return out
