"""SQuAD 1.1 / 2.0: examples from the official JSON, doc-stride windows, and n-best span decoding across windows.

Why words: the context is split on whitespace (as BERT's ``run_squad.py`` does) and each word tokenized on
its own, so every token maps back to a word and a predicted token span to the words it covers, with any
tokenizer and without character offsets. A long context becomes overlapping windows ``[CLS] question [SEP]
context[i:i+room] [SEP]`` that start ``doc_stride`` tokens apart; a window that does not hold the whole
answer (and every window of an unanswerable question) is labelled ``(0, 0)``, the [CLS] "no answer" span.
Decoding pools every window of a question: the best span is the highest start + end logit over the
``n_best`` starts and ends of each window (end ≥ start, at most ``max_answer_tokens``); the null score is
the lowest [CLS] start + end logit over the windows.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from mwb.core.errors import DataError

from ..api.formats.splits import split_file
from ..api.formats.squad_json import read_squad_json

FILES = {"1.1": "{split}-v1.1.json", "2.0": "{split}-v2.0.json"}


@dataclass(frozen=True)
class Windowing:
    seq_length: int
    doc_stride: int = 128
    max_query_tokens: int = 64


def squad_file(path: str, version: str, split: str) -> str:
    """``path`` is the JSON file, or a directory holding ``{split}-v{version}.json`` or ``{split}.json``."""
    return split_file(path, split, (FILES[version].format(split=split), f"{split}.json"), f"SQuAD {version}")


def read_squad(path: str) -> list[dict]:
    """One example per question: ``{"id", "question", "context", "words", "answers": [text…],
    "span": (first word, last word) of the first answer or None (unanswerable)}``."""
    out = []
    for para in read_squad_json(path, "SQuAD: train-v1.1.json, dev-v1.1.json or the v2.0 files"):
        context = para["context"]
        words, word_of_char = split_words(context)
        for qa in para["qas"]:
            answers = [] if qa["is_impossible"] else qa["answers"]
            span = None
            if answers:
                start, text = answers[0]["answer_start"], answers[0]["text"]
                if context[start:start + len(text)] != text:
                    raise DataError(f"{path}: question {qa['id']}: answer {text!r} is not at answer_start "
                                    f"{start} of its context")
                span = (word_of_char[start], word_of_char[start + len(text) - 1])
            out.append({"id": qa["id"], "question": qa["question"], "context": context, "words": words,
                        "answers": [a["text"] for a in answers], "span": span})
    return out


def split_words(text: str) -> tuple[list[str], list[int]]:
    """Whitespace-separated words and, for every character, the index of the word it belongs to."""
    words, word_of_char, prev_space = [], [], True
    for ch in text:
        if ch.isspace():
            prev_space = True
        else:
            if prev_space:
                words.append("")
            words[-1] += ch
            prev_space = False
        word_of_char.append(max(len(words) - 1, 0))
    return words, word_of_char


def windows(example: dict, index: int, tokenizer, w: Windowing) -> list[dict]:
    """The model inputs of one question: a window per doc-stride step, with numpy metadata ``example``
    (its index) and ``word`` (each position's context word, -1 elsewhere)."""
    tokenizer.require("cls", "sep", "pad", purpose="SQuAD inputs")
    query = tokenizer.encode(example["question"])[: w.max_query_tokens]
    doc, word = [], []
    for i, ids in enumerate(tokenizer.encode_batch(example["words"])):
        doc.extend(ids)
        word.extend([i] * len(ids))
    room = w.seq_length - len(query) - 3
    if room < 1:
        raise DataError(f"seq_length {w.seq_length} leaves no room for the context of question {example['id']}")
    span = None
    if example["span"] is not None:
        first, last = example["span"]
        span = (word.index(first), len(word) - 1 - word[::-1].index(last))
    out, start = [], 0
    while True:
        end = min(start + room, len(doc))
        ids = [tokenizer.cls] + query + [tokenizer.sep] + doc[start:end] + [tokenizer.sep]
        offset = len(query) + 2 - start
        label = (span[0] + offset, span[1] + offset) if span and start <= span[0] and span[1] < end else (0, 0)
        pad = w.seq_length - len(ids)
        out.append({"tokens": np.array(ids + [tokenizer.pad] * pad, dtype=np.int64),
                    "types": np.array([0] * (len(query) + 2) + [1] * (end - start + 1) + [0] * pad, dtype=np.int64),
                    "padding_mask": np.array([1] * len(ids) + [0] * pad, dtype=np.int64),
                    "label": np.array(label, dtype=np.int64), "example": np.array(index, dtype=np.int64),
                    "word": np.array([-1] * (len(query) + 2) + word[start:end] + [-1] * (pad + 1), dtype=np.int64)})
        if end == len(doc):
            return out
        start += min(w.doc_stride, room)


def best_span(outputs: list, features: list[dict], example: dict, n_best: int = 20,
              max_answer_tokens: int = 30) -> tuple[str, float, Optional[float]]:
    """``(text, span score, null score)`` of one question from its windows' ``(start, end)`` logits."""
    best_text, best, null = "", None, None
    for (start_logits, end_logits), feat in zip(outputs, features):
        word = feat["word"]
        cls = float(start_logits[0] + end_logits[0])
        null = cls if null is None else min(null, cls)
        starts = [i for i in np.argsort(-start_logits)[:n_best] if word[i] >= 0]
        ends = [j for j in np.argsort(-end_logits)[:n_best] if word[j] >= 0]
        for i in starts:
            for j in ends:
                if j < i or j - i + 1 > max_answer_tokens:
                    continue
                score = float(start_logits[i] + end_logits[j])
                if best is None or score > best:
                    best, best_text = score, " ".join(example["words"][word[i]:word[j] + 1])
    return best_text, best, null
