"""Span extraction inputs (SQuAD-style) shared by the span tasks and the open-domain QA readers: sentence-pair
inputs, question + context inputs with character offsets, and n-best answers from start/end logits.

Why here, below the task and retrieval layers: ``mwb finetune squad``/``bioasq`` (:mod:`mwb.tasks`) and the
extractive reader (:mod:`mwb.retrieval.readers`) featurise spans the same way.

Why character offsets: the answer must come back as an exact substring of the context whatever the tokenizer.
The context is cut into units (runs of letters/digits, or single punctuation marks, as BERT's basic
tokenizer splits) whose character spans are known; each unit is encoded on its own (with a space before it
when the context has one, so byte-level BPE sees word starts), so every context token knows the characters
of its unit. One window per example: a context longer than the input is cut (BioASQ snippets are short).
"""
from __future__ import annotations

import re
from typing import Optional

import numpy as np

UNIT = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def context_units(context: str) -> list[tuple[int, int]]:
    return [m.span() for m in UNIT.finditer(context)]


def span_inputs(question: str, context: str, answer_start, answer_text, tokenizer, seq_length: int) -> dict:
    """``[CLS] question [SEP] context [SEP]`` plus ``char_start``/``char_end`` per token (-1 outside the
    context) and ``label`` = [start, end] token of the answer (``[0, 0]``, the [CLS], when it is cut off or
    there is none)."""
    q = tokenizer.encode(question)
    ids, starts, ends = [], [], []
    for s, e in context_units(context):
        pieces = tokenizer.encode(context[s:e] if s == 0 or not context[s - 1].isspace() else " " + context[s:e])
        ids += pieces
        starts += [s] * len(pieces)
        ends += [e] * len(pieces)
    out = pair_inputs(q, ids, tokenizer, seq_length, truncate="b")
    offset = len(q[: seq_length - 3]) + 2
    kept = int(out["padding_mask"].sum()) - offset - 1
    char_start = np.full(seq_length, -1, dtype=np.int64)
    char_end = np.full(seq_length, -1, dtype=np.int64)
    char_start[offset:offset + kept] = starts[:kept]
    char_end[offset:offset + kept] = ends[:kept]
    label = [0, 0]
    if answer_text:
        a0, a1 = answer_start, answer_start + len(answer_text)
        inside = np.nonzero((char_end > a0) & (char_start < a1) & (char_start >= 0))[0]
        if len(inside) and char_start[inside[0]] <= a0 and char_end[inside[-1]] >= a1:
            label = [int(inside[0]), int(inside[-1])]
    return {**out, "char_start": char_start, "char_end": char_end, "label": np.array(label, dtype=np.int64)}


def nbest_spans(logits: np.ndarray, feature: dict, n_best: int = 20, max_tokens: int = 30) -> list[tuple]:
    """The ``n_best`` context spans ``(char_start, char_end, probability)`` by start + end logit, end not
    before start and at most ``max_tokens`` long; probabilities are a softmax over the kept spans."""
    valid = np.nonzero(feature["char_start"] >= 0)[0]
    if not len(valid):
        return []
    start, end = logits[:, 0], logits[:, 1]
    top_s = valid[np.argsort(-start[valid], kind="stable")[:n_best]]
    top_e = valid[np.argsort(-end[valid], kind="stable")[:n_best]]
    spans = sorted(((float(start[s] + end[e]), int(s), int(e)) for s in top_s for e in top_e
                    if s <= e < s + max_tokens), key=lambda x: -x[0])[:n_best]
    if not spans:
        return []
    scores = np.array([sc for sc, _, _ in spans])
    probs = np.exp(scores - scores.max())
    probs /= probs.sum()
    return [(int(feature["char_start"][s]), int(feature["char_end"][e]), float(p))
            for (_, s, e), p in zip(spans, probs)]


def pair_inputs(a: list[int], b: Optional[list[int]], tokenizer, seq_length: int, truncate: str = "a") -> dict:
    """``[CLS] a [SEP] b [SEP]`` with token types 0/1 and padding, BERT's sentence-pair layout
    (``b=None``: the single-sentence ``[CLS] a [SEP]``).

    ``truncate='a'`` shortens the first segment (the passage) so the second (question + option) stays whole,
    as Megatron's RACE builder does."""
    tokenizer.require("cls", "sep", "pad", purpose="sentence-pair inputs")
    if b is None:
        a = a[: seq_length - 2]
        ids, types = [tokenizer.cls] + a + [tokenizer.sep], [0] * (len(a) + 2)
        return _padded(ids, types, tokenizer.pad, seq_length)
    room = seq_length - 3
    if len(a) + len(b) > room:
        if truncate == "a":
            a = a[: max(room - len(b), 0)]
            b = b[:room]
        else:
            b = b[: max(room - len(a), 0)]
            a = a[:room]
    ids = [tokenizer.cls] + a + [tokenizer.sep] + b + [tokenizer.sep]
    types = [0] * (len(a) + 2) + [1] * (len(b) + 1)
    return _padded(ids, types, tokenizer.pad, seq_length)


def _padded(ids: list[int], types: list[int], pad_id: int, seq_length: int) -> dict:
    pad = seq_length - len(ids)
    return {"tokens": np.array(ids + [pad_id] * pad, dtype=np.int64),
            "types": np.array(types + [0] * pad, dtype=np.int64),
            "padding_mask": np.array([1] * len(ids) + [0] * pad, dtype=np.int64)}
