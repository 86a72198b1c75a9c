"""Training samples for the bi-encoder: ICT pseudo-queries from an evidence corpus, and DPR's JSON.

Both datasets return the same fixed-shape sample, so one spec trains either:
``q_tokens``/``q_mask`` ``[query_length]`` and ``c_tokens``/``c_mask`` ``[n, context_length]`` where row 0 is
the positive context and rows 1… are hard negatives (``n = 1`` for ICT). Sample ``i`` is a pure function of
``(seed, i)``: the trainer's sample-to-rank assignment (:mod:`mwb.core.training.batches`) then gives every
parallel layout the same global batches. Records are visited in a fresh permutation each epoch, so
consecutive samples (the in-batch negatives of each other) come from unrelated passages.

ICT (Lee et al. 2019; Megatron's ``ICTDataset``): a block is an evidence passage with its title; a random
sentence is the pseudo-query and the block is its positive; the sentence is removed from the block with
probability ``1 - query_in_block_prob`` (0.9 by default), so the model cannot rely on exact overlap alone.

MSS (masked salient spans; REALM, Sachan et al. 2021): the query is a sentence of a block with one salient
span (a name or a date, :mod:`.salient_spans`) replaced by the tokenizer's mask token (``_`` without one);
blocks, the positive and the sentence's removal from it are ICT's, so the two differ only in the query maker.
The span is what the query asks for: the block that holds the sentence should be found without it.

DPR (Karpukhin et al. 2020): the first positive context is the positive (DPR's default); hard negatives are a
per-sample random choice of ``hard_negatives`` from ``hard_negative_ctxs``, topped up from ``negative_ctxs``
and then from other questions' positives when a record has too few, so every sample has the same shape.
Records without positives are dropped, as DPR does.
"""
from __future__ import annotations

import gzip
import json
import os
from typing import Optional

import numpy as np

from mwb.core.data.sentences import split_sentences
from mwb.core.errors import DataError

from .salient_spans import salient_spans
from .inputs import context_ids, context_sequence, pad_batch, query_ids, query_sequence, specials

EPOCH_SAMPLES = 10**9


class _Permuted:
    """Sample ``i`` → record index: a new permutation of ``n`` records every epoch, seeded by (seed, epoch)."""

    def __init__(self, n: int, seed: int, num_samples: Optional[int]) -> None:
        if n == 0:
            raise DataError("no usable training records")
        self.n, self.seed = n, seed
        self.num_samples = num_samples or EPOCH_SAMPLES
        self._perm: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return self.num_samples

    def record(self, i: int) -> int:
        epoch, j = divmod(int(i), self.n)
        if epoch not in self._perm:
            if len(self._perm) > 4:
                self._perm.clear()
            self._perm[epoch] = np.random.default_rng([self.seed, 7, epoch]).permutation(self.n)
        return int(self._perm[epoch][j])


def _sample(q: list, ctxs: list, rcfg, pad: int) -> dict:
    qt, qm = pad_batch([q], pad, rcfg.query_length)
    ct, cm = pad_batch(ctxs, pad, rcfg.context_length)
    return {"q_tokens": qt[0], "q_mask": qm[0], "c_tokens": ct, "c_mask": cm}


class ICTDataset(_Permuted):
    """Inverse cloze task samples from evidence passages (those with at least two sentences)."""

    def __init__(self, evidence, tok, rcfg, seed: int, rows=None, num_samples: Optional[int] = None) -> None:
        self.cls, self.sep, self.pad = specials(tok)
        self.rcfg = rcfg
        rows = range(len(evidence)) if rows is None else rows
        self.blocks = []
        for r in rows:
            sents = [s.strip() for s in split_sentences(evidence.texts[r]) if s.strip()]
            if len(sents) >= 2:
                self.blocks.append((evidence.titles[r], sents))
        if not self.blocks:
            raise DataError(f"{evidence.path}: no passage has two or more sentences; ICT needs multi-sentence blocks")
        flat = [" " + s for _, sents in self.blocks for s in sents]  # as inside a text (byte-level BPE)
        ids = tok.encode_batch(flat)
        titles = tok.encode_batch([t or "" for t, _ in self.blocks])
        self.tokens, k = [], 0
        for (title, sents), tid in zip(self.blocks, titles):
            self.tokens.append((tid if title else None, ids[k:k + len(sents)]))
            k += len(sents)
        super().__init__(len(self.blocks), seed, num_samples)

    def __getitem__(self, i: int) -> dict:
        title, sents = self.tokens[self.record(i)]
        rng = np.random.default_rng([self.seed, 11, int(i)])
        s = int(rng.integers(len(sents)))
        query = query_sequence(self.cls, self.sep, sents[s], self.rcfg.query_length)
        keep = rng.random() < self.rcfg.query_in_block_prob
        body = [t for j, sent in enumerate(sents) if keep or j != s for t in sent]
        context = context_sequence(self.cls, self.sep, title, body, self.rcfg.context_length)
        return _sample(query, [context], self.rcfg, self.pad)


class MSSDataset(ICTDataset):
    """Masked-salient-span queries over ICT's blocks (those with a sentence that has a salient span)."""

    def __init__(self, evidence, tok, rcfg, seed: int, rows=None, num_samples: Optional[int] = None) -> None:
        super().__init__(evidence, tok, rcfg, seed, rows, num_samples)
        self.tok = tok
        self.mask = [tok.mask] if getattr(tok, "mask", None) is not None else tok.encode(" _")
        self.salient = []  # (block, [(sentence, [spans])]) for blocks with a salient span
        for b, (_, sents) in enumerate(self.blocks):
            found = [(j, spans) for j, sent in enumerate(sents) if (spans := salient_spans(sent))]
            if found:
                self.salient.append((b, found))
        if not self.salient:
            raise DataError(f"{evidence.path}: no sentence has a salient span (a capitalised name or a date)")
        _Permuted.__init__(self, len(self.salient), seed, num_samples)

    def query(self, sentence: str, span) -> list[int]:
        """The sentence's tokens with the span's replaced by the mask token."""
        left, right = sentence[:span.start].rstrip(), sentence[span.end:]
        return (self.tok.encode(" " + left) if left else []) + self.mask + (self.tok.encode(right) if right else [])

    def __getitem__(self, i: int) -> dict:
        b, found = self.salient[self.record(i)]
        title, sents = self.tokens[b]
        rng = np.random.default_rng([self.seed, 17, int(i)])
        s, spans = found[int(rng.integers(len(found)))]
        q = self.query(self.blocks[b][1][s], spans[int(rng.integers(len(spans)))])
        query = query_sequence(self.cls, self.sep, q, self.rcfg.query_length)
        keep = rng.random() < self.rcfg.query_in_block_prob
        body = [t for j, sent in enumerate(sents) if keep or j != s for t in sent]
        context = context_sequence(self.cls, self.sep, title, body, self.rcfg.context_length)
        return _sample(query, [context], self.rcfg, self.pad)


def read_dpr_json(path: str) -> list[dict]:
    """DPR's training/dev JSON (a list of records; ``.gz`` and jsonl also read); records need a question
    and at least one positive context (others are dropped, as in DPR)."""
    path = os.path.expanduser(str(path))
    if not os.path.isfile(path):
        raise DataError(f"DPR data file not found: {path}")
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        text = f.read()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        try:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as e:
            raise DataError(f"{path}: not DPR JSON (a list of records) nor jsonl ({e})") from None
    if not isinstance(data, list):
        raise DataError(f"{path}: DPR JSON must be a list of records")
    out = []
    for n, r in enumerate(data):
        if not isinstance(r, dict) or "question" not in r:
            raise DataError(f"{path}: record {n + 1} has no 'question'")
        if r.get("positive_ctxs"):
            out.append(r)
    if not out:
        raise DataError(f"{path}: no record has positive_ctxs")
    return out


class DPRDataset(_Permuted):
    """Question, positive and hard negatives from DPR-format records."""

    def __init__(self, records: list, tok, rcfg, seed: int, num_samples: Optional[int] = None) -> None:
        self.pad = specials(tok)[2]  # also checks the tokenizer has [CLS]/[SEP]
        self.records, self.tok, self.rcfg = records, tok, rcfg
        super().__init__(len(records), seed, num_samples)

    def contexts_for(self, r: int, rng) -> list:
        rec, n = self.records[r], self.rcfg.hard_negatives
        hard = list(rec.get("hard_negative_ctxs") or [])
        chosen = [hard[j] for j in rng.permutation(len(hard))[:n]]
        other = list(rec.get("negative_ctxs") or [])
        chosen += [other[j] for j in rng.permutation(len(other))[: n - len(chosen)]]
        while len(chosen) < n and len(self.records) > 1:  # top up with another question's positive
            j = int(rng.integers(len(self.records)))
            if j != r:
                chosen.append(self.records[j]["positive_ctxs"][0])
        if len(chosen) < n:
            raise DataError(f"DPR record {r} has fewer than {n} negatives and there is no other record to borrow "
                            f"from; lower --hard-negatives")
        return [rec["positive_ctxs"][0]] + chosen[:n]

    def __getitem__(self, i: int) -> dict:
        r = self.record(i)
        rng = np.random.default_rng([self.seed, 13, int(i)])
        q = query_ids(self.tok, [str(self.records[r]["question"])], self.rcfg.query_length)[0]
        ctxs = self.contexts_for(r, rng)
        return _sample(q, context_ids(self.tok, [c.get("title") for c in ctxs], [c.get("text") or "" for c in ctxs],
                                      self.rcfg.context_length), self.rcfg, self.pad)
