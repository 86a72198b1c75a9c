"""BERT samples: sentence pairs with sentence-order labels and masked-LM targets (Megatron's recipe).

**Segments.** Sentences (the sequences of ``--split-sentences`` data) are the units; a sentence longer
than half a sample is cut into half-sample pieces, so document-level data works too (its documents
become runs of pieces).

**Sample map** (built once, cached, deterministic from the seed): each epoch walks the split's documents
and groups consecutive segments until they reach a target length — ``seq_length - 3`` (room for
[CLS] A [SEP] B [SEP]), or, with probability ``short_seq_prob`` (0.1), a random length in
``[2, seq_length - 3]`` — and records ``(first segment, end segment, target length)``. A group needs two
segments (documents with one are skipped). Epochs repeat until ``num_samples`` groups exist; the rows are
then shuffled.

**Sample** ``i`` (its own RNG seeded with ``seed + i``): a random split point makes segments A and B;
with probability 0.5 they are swapped (``is_random = 1``, sentence-order prediction as in Megatron's BERT;
set ``nsp=True`` for next-sentence prediction, where B comes from a random other document instead);
the pair is trimmed to the target (from the longer side, front or back at random); then 15% of the
non-special tokens (stochastically rounded, at least 1) are chosen for prediction — 80% become [MASK],
10% a random token, 10% stay — and everything is padded to ``seq_length``.

Keys of ``BertDataset[i]`` (all ``int64``): ``tokens`` [seq_length], ``types`` [seq_length] (0 for
[CLS] A [SEP], 1 for B [SEP]), ``labels`` [seq_length] (the original token where predicted, -1
elsewhere), ``loss_mask`` [seq_length] (1 where predicted), ``padding_mask`` [seq_length] (1 = real token,
0 = [PAD]), ``is_random`` [] (0-d: 1 when A/B are swapped / B is random).
"""
from __future__ import annotations

import os
from typing import Optional

import numpy as np

from mwb.core.errors import DataError

from .cache import cache_root, cached_dir, dataset_fingerprint, digest
from .indexed import IndexedDataset


def segment_table(indexed: IndexedDataset, max_len: int):
    """(token start, token length, document start segment array) of all segments, vectorised."""
    lengths = indexed.sequence_lengths.astype(np.int64)
    starts = (indexed.sequence_pointers // indexed.dtype.itemsize).astype(np.int64)
    pieces = np.where(lengths > 0, -(-lengths // max_len), 0)  # ceil, 0 for empty sequences
    seq_of = np.repeat(np.arange(len(lengths)), pieces)
    first_seg = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(pieces, out=first_seg[1:])
    k = np.arange(len(seq_of), dtype=np.int64) - first_seg[seq_of]
    seg_start = starts[seq_of] + k * max_len
    seg_len = np.minimum(max_len, lengths[seq_of] - k * max_len)
    doc_seg = first_seg[indexed.document_indices]  # document d = segments doc_seg[d]:doc_seg[d+1]
    return seg_start, seg_len, doc_seg


def build_sample_map(seg_len, doc_seg, doc_range, max_tokens: int, num_samples: int, seed: int,
                     short_seq_prob: float = 0.1, min_segments: int = 2) -> np.ndarray:
    """Rows ``(first segment, end segment, target length)`` (see the module docstring)."""
    rng = np.random.RandomState(seed % 2**32)
    rows: list = []
    usable = [d for d in range(*doc_range) if doc_seg[d + 1] - doc_seg[d] >= min_segments]
    if not usable:
        raise DataError(f"no document in range {doc_range} has {min_segments} sentences: BERT needs "
                        f"sentence-split data (`mwb preprocess --split-sentences`) or longer documents")
    seg_len = np.asarray(seg_len)
    while len(rows) < num_samples:
        before = len(rows)
        for d in usable:
            a, b = int(doc_seg[d]), int(doc_seg[d + 1])
            target = max_tokens if rng.random_sample() >= short_seq_prob else rng.randint(2, max_tokens + 1)
            start, size = a, 0
            for s in range(a, b):
                size += int(seg_len[s])
                if size >= target or s == b - 1:
                    if s + 1 - start >= min_segments:
                        rows.append((start, s + 1, target))
                        target = max_tokens if rng.random_sample() >= short_seq_prob else \
                            rng.randint(2, max_tokens + 1)
                    start, size = s + 1, 0
        if len(rows) == before:
            raise DataError(f"documents {doc_range} yield no BERT samples")
    out = np.asarray(rows, dtype=np.int64)
    return out[rng.permutation(len(out))]


def _stochastic_round(x: float, rng) -> int:
    n = int(x)
    return n + int(rng.random_sample() < x - n)


class BertDataset:
    """Map-style BERT samples over documents ``doc_range`` of ``indexed``; keys in the module docstring."""

    kind = "bert"

    def __init__(self, indexed: IndexedDataset, doc_range: tuple[int, int], seq_length: int, num_samples: int,
                 seed: int, tokenizer, cache_dir: Optional[str] = None, name: str = "train",
                 masked_lm_prob: float = 0.15, short_seq_prob: float = 0.1, binary_head: bool = True,
                 nsp: bool = False):
        tokenizer.require("cls", "sep", "mask", "pad", purpose="BERT")
        self.indexed, self.seq_length, self.seed, self.name = indexed, int(seq_length), int(seed), name
        self.cls, self.sep, self.mask, self.pad = tokenizer.cls, tokenizer.sep, tokenizer.mask, tokenizer.pad
        self.vocab_size = tokenizer.vocab_size
        self.masked_lm_prob, self.binary_head, self.nsp = masked_lm_prob, binary_head, nsp
        specials = 3 if binary_head else 2
        self.max_tokens = self.seq_length - specials
        if self.max_tokens < 2:
            raise DataError(f"--seq-length {seq_length} is too short for BERT samples")
        self.seg_start, self.seg_len, self.doc_seg = segment_table(indexed, max(self.max_tokens // 2, 1))
        self.doc_range = doc_range
        num_samples = int(num_samples) if num_samples else 1
        key = digest({"v": 1, "kind": "bert", "data": dataset_fingerprint(indexed), "docs": list(doc_range),
                      "seq_length": self.seq_length, "num_samples": num_samples, "seed": seed, "split": name,
                      "short_seq_prob": short_seq_prob, "binary_head": binary_head})

        def build(tmp):
            rows = build_sample_map(self.seg_len, self.doc_seg, doc_range, self.max_tokens, num_samples, seed,
                                    short_seq_prob, 2 if binary_head else 1)
            np.save(os.path.join(tmp, "samples.npy"), rows)

        what = f"{name} BERT sample map ({os.path.basename(indexed.prefix)}, seq {seq_length})"
        path, self.cache_reused = cached_dir(os.path.join(cache_root(cache_dir), "indexes"), f"bert-{key[:24]}",
                                             build, what)
        self.samples = np.load(os.path.join(path, "samples.npy"), mmap_mode="r")
        self._len = num_samples

    def __len__(self) -> int:
        return self._len

    def _segment(self, s: int) -> np.ndarray:
        a = int(self.seg_start[s])
        return self.indexed.tokens[a:a + int(self.seg_len[s])].astype(np.int64)

    def _random_b(self, rng, avoid_doc_seg: tuple[int, int], need: int) -> list:
        """NSP's random B: consecutive segments from a random other document of the split."""
        lo, hi = self.doc_range
        for _ in range(10):
            d = rng.randint(lo, hi)
            a, b = int(self.doc_seg[d]), int(self.doc_seg[d + 1])
            if b > a and (a, b) != avoid_doc_seg:
                break
        out, s = [], rng.randint(a, b) if b > a else a
        while s < b and sum(len(x) for x in out) < need:
            out.append(self._segment(s))
            s += 1
        return out

    def __getitem__(self, i: int) -> dict:
        if not 0 <= i < self._len:
            raise IndexError(f"sample {i} out of range for {self.name} dataset of {self._len}")
        rng = np.random.RandomState((self.seed + i) % 2**32)
        first, end, target = (int(x) for x in self.samples[i % len(self.samples)])
        segs = [self._segment(s) for s in range(first, end)]
        is_random = 0
        if self.binary_head:
            cut = rng.randint(1, len(segs))
            a, b = segs[:cut], segs[cut:]
            if rng.random_sample() < 0.5:
                is_random = 1
                if self.nsp:
                    b = self._random_b(rng, (first, end), target - sum(len(x) for x in a))
                else:
                    a, b = b, a
            a = np.concatenate(a) if a else np.zeros(0, np.int64)
            b = np.concatenate(b) if b else np.zeros(0, np.int64)
        else:
            a, b = np.concatenate(segs), np.zeros(0, np.int64)
        a, b = _truncate_pair(a, b, target, rng)
        return self._assemble(a, b, is_random, rng)

    def _assemble(self, a, b, is_random, rng) -> dict:
        parts = [[self.cls], a, [self.sep]] + ([b, [self.sep]] if self.binary_head else [])
        tokens = np.concatenate([np.asarray(p, dtype=np.int64) for p in parts])
        n = len(tokens)
        types = np.zeros(n, dtype=np.int64)
        types[len(a) + 2:] = 1
        special = np.zeros(n, dtype=bool)
        special[[0, len(a) + 1, n - 1]] = True
        candidates = np.flatnonzero(~special)
        labels = np.full(n, -1, dtype=np.int64)
        if len(candidates):
            k = min(len(candidates), max(1, _stochastic_round(len(candidates) * self.masked_lm_prob, rng)))
            pos = np.sort(rng.choice(candidates, k, replace=False))
            labels[pos] = tokens[pos]
            r = rng.random_sample(k)
            tokens[pos[r < 0.8]] = self.mask
            rnd = pos[r >= 0.9]
            tokens[rnd] = rng.randint(0, self.vocab_size, len(rnd))
        pad = self.seq_length - n
        padv = lambda x, v: np.concatenate([x, np.full(pad, v, dtype=np.int64)])  # noqa: E731
        return {
            "tokens": padv(tokens, self.pad),
            "types": padv(types, 0),
            "labels": padv(labels, -1),
            "loss_mask": padv((labels >= 0).astype(np.int64), 0),
            "padding_mask": padv(np.ones(n, dtype=np.int64), 0),
            "is_random": np.array(is_random, dtype=np.int64),
        }


def _truncate_pair(a: np.ndarray, b: np.ndarray, target: int, rng):
    """Trim the longer of A/B, from the front or the back at random, until both fit ``target``."""
    while len(a) + len(b) > target:
        longer_a = len(a) >= len(b) if len(b) else True
        x = a if longer_a else b
        excess = len(a) + len(b) - target
        cut = max(1, min(excess, len(x) - 1)) if len(x) > 1 else 1
        x = x[cut:] if rng.random_sample() < 0.5 else x[:-cut]
        if longer_a:
            a = x
        else:
            b = x
    return a, b
