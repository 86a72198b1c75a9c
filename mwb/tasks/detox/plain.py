"""Real text for SGEAT's DAPT baseline: passages cut from the bundled corpus's training documents.

The paper's baseline (DAPT) continues training on a nontoxic subset of real pretraining text. ``mwb detox
plain`` writes the candidate passages as the self-generation step writes its samples (``{text, prompt: "",
id}`` jsonl); ``mwb score`` and ``mwb detox filter --keep 0.5`` then keep the least toxic share exactly as they
do for self-generated samples, so the two training sets differ only in where their text comes from. The
held-out documents (the valid and test ranges of the 949,50,1 split, which ``mwb eval heldout-ppl`` and
``mwb finetune detox`` score) never enter a passage.
"""
from __future__ import annotations

import random
from typing import Optional

from mwb.core.data.bundled import corpus_file
from mwb.core.errors import DataError

from .heldout import read_documents


def training_documents(corpus: Optional[str] = None) -> list[str]:
    """The documents of ``corpus`` (a ``{"text"}`` jsonl, ``.gz`` or not; default: the bundled corpus) in the
    ``train`` range of the held-out split (read and checked as ``mwb eval heldout-ppl`` reads its documents)."""
    return [d["text"] for d in read_documents(corpus or corpus_file(), "train")]


def plain_passages(tokenizer, num: int, max_tokens: int, seed: int = 1234, corpus: Optional[str] = None) -> list[dict]:
    """``num`` passages of ``max_tokens`` tokens each (the tokenizer's), read in order from ``corpus``'s training
    documents shuffled with ``seed`` (each followed by a newline), as ``{"text", "prompt": "", "id"}`` rows."""
    if num < 1 or max_tokens < 1:
        raise DataError("plain passages need --num-samples >= 1 and --max-tokens >= 1")
    docs = training_documents(corpus)
    random.Random(seed).shuffle(docs)
    stream = (t for d in docs for t in tokenizer.encode(d + "\n"))
    out = []
    for i in range(num):
        ids = [t for _, t in zip(range(max_tokens), stream)]
        if len(ids) < max_tokens:
            raise DataError(f"{corpus or 'the bundled corpus'}: its training documents hold fewer than {num} x "
                            f"{max_tokens} tokens")
        out.append({"text": tokenizer.decode(ids), "prompt": "", "id": i})
    return out
