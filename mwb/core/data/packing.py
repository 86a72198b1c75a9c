"""Packed GPT samples: several short documents share one row, each attending only to itself.

Why: fine-tuning examples are short and a row of ``seq_length + 1`` tokens holding one of them is mostly
padding, which the model computes on and throws away. Packing puts documents side by side in a row and records,
per token, which document it belongs to (``doc_ids``, -1 for the padding after the last one) and its position
inside that document (``position_ids``, restarting at 0). The model then attends within a document only and
numbers positions per document — Megatron-LM's ``--reset-attention-mask --reset-position-ids`` — so every
document's token losses are the ones it has alone in a padded row (:mod:`mwb.core.training.model_spec`).

A document is a GPT sample (``tokens``/``loss_mask`` of ``seq_length + 1``, the layout of
:func:`mwb.tasks.api.generative_objective.gpt_sample`) cut after its last target token: nothing after that token
carries a loss, and causal attention keeps it from changing anything before it. A document's first token is never
a target once packed (in its own row it is never a label either: labels start at token 1). Rows are filled
first-fit in document order (each document goes into the first row with room, a new row when none has).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

PAD_DOCUMENT = -1  # doc_ids of the padding after a row's last document


@dataclass(frozen=True)
class Packing:
    """What packing did: ``documents`` packed into ``rows`` rows of ``capacity`` tokens (``seq_length + 1``);
    ``empty`` samples had no target token and were left out (their loss is nothing, packed or not)."""
    documents: int
    rows: int
    capacity: int
    empty: int


def document_length(loss_mask: np.ndarray) -> int:
    """Tokens of a sample up to and including its last target token (0: no target at all)."""
    hits = np.flatnonzero(np.asarray(loss_mask))
    return int(hits[-1]) + 1 if hits.size else 0


def first_fit(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Indices of ``lengths`` per row: each length goes into the first row it fits in (rows in the order they
    were opened), else a new row. Every length must be in ``1 … capacity``."""
    room = np.zeros(0, dtype=np.int64)
    rows: list[list[int]] = []
    for i, n in enumerate(lengths):
        if not 0 < n <= capacity:
            raise ValueError(f"document {i} has {n} tokens; a row holds 1 to {capacity}")
        fits = np.flatnonzero(room >= n)
        if fits.size:
            r = int(fits[0])
        else:
            r = len(rows)
            rows.append([])
            room = np.append(room, capacity)
        rows[r].append(i)
        room[r] -= n
    return rows


def packed_row(docs: Sequence[tuple[np.ndarray, np.ndarray]], capacity: int, pad_id: int = 0) -> dict:
    """One row from ``(tokens, loss_mask)`` documents that fit together: ``tokens``, ``loss_mask`` (0 on each
    document's first token), ``doc_ids`` and ``position_ids`` (restarting per document), all ``[capacity]``.
    The padding after the last document is ``pad_id`` with no loss, one more block that sees only itself."""
    used = sum(len(t) for t, _ in docs)
    if used > capacity:
        raise ValueError(f"documents of {used} tokens do not fit a row of {capacity}")
    tokens = np.full(capacity, pad_id, dtype=np.int64)
    mask = np.zeros(capacity, dtype=np.int64)
    doc_ids = np.full(capacity, PAD_DOCUMENT, dtype=np.int64)
    positions = np.zeros(capacity, dtype=np.int64)
    at = 0
    for d, (t, m) in enumerate(docs):
        n = len(t)
        tokens[at:at + n], mask[at:at + n] = t, m
        mask[at] = 0  # its label would be predicted from the previous document
        doc_ids[at:at + n] = d
        positions[at:at + n] = np.arange(n)
        at += n
    positions[at:] = np.arange(capacity - at)
    return {"tokens": tokens, "loss_mask": mask, "doc_ids": doc_ids, "position_ids": positions}


def empty_row(capacity: int, pad_id: int = 0) -> dict:
    """A row of padding only (no loss): fills a packed evaluation set up to whole global batches."""
    return packed_row([], capacity, pad_id)


def pack_samples(samples: Sequence[dict], capacity: int, pad_id: int = 0) -> tuple[list[dict], Packing]:
    """Padded GPT samples (``tokens``/``loss_mask`` of ``capacity`` tokens) packed first-fit into rows."""
    docs, empty = [], 0
    for s in samples:
        n = document_length(s["loss_mask"])
        if n == 0:
            empty += 1
            continue
        if len(s["tokens"]) != capacity:
            raise ValueError(f"a sample has {len(s['tokens'])} tokens; packing into rows of {capacity} needs "
                             f"samples of that length")
        docs.append((np.asarray(s["tokens"][:n]), np.asarray(s["loss_mask"][:n])))
    rows = [packed_row([docs[i] for i in row], capacity, pad_id)
            for row in first_fit([len(t) for t, _ in docs], capacity)]
    return rows, Packing(documents=len(docs), rows=len(rows), capacity=capacity, empty=empty)
