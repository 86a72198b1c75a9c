"""GPT samples: fixed-length windows over documents concatenated in a shuffled order (Megatron's scheme).

Three index arrays define the samples (all built with numpy, vectorised, then cached):

* **document index** — the split's document ids, one random permutation per epoch, epochs back to back:
  the order in which documents are concatenated into one token stream. As many epochs as the requested
  number of samples needs.
* **sample index** — ``(num_samples + 1, 2)`` rows ``(position in document index, token offset)``: where
  sample ``j`` starts in that stream. Sample ``j`` starts at stream token ``j * seq_length`` and is read
  *inclusive* of the next row's token, so it holds ``seq_length + 1`` tokens (inputs and shifted labels);
  consecutive samples share exactly that one boundary token, and within an epoch no token is skipped.
* **shuffle index** — the order samples are served in: a permutation of the samples of all but the last
  epoch, then separately of the last epoch's, so the first samples served come from whole epochs.

``GPTDataset[i]`` is ``{"tokens": int64[seq_length + 1]}`` — sample ``shuffle_index[i]``. Documents are
read whole from the ``.bin`` (their sequences are contiguous), so sentence-split data works too.

Splits (``"949,50,1"``) are contiguous ranges of documents (Megatron's rule, :func:`split_ranges`).
"""
from __future__ import annotations

import math
import os
from typing import Optional

import numpy as np

from mwb.core.errors import DataError

from .cache import cache_root, cached_dir, dataset_fingerprint, digest
from .indexed import IndexedDataset

SPLIT_NAMES = ("train", "valid", "test")


def parse_split(split) -> list[float]:
    """``"949,50,1"`` (or ``"0.9,0.1"``, or a list) → three fractions summing to 1."""
    parts = split if isinstance(split, (list, tuple)) else str(split).replace("/", ",").split(",")
    try:
        w = [float(p) for p in parts if str(p).strip() != ""]
    except ValueError:
        raise DataError(f"bad split {split!r}: expected comma-separated numbers like 949,50,1") from None
    if not w or len(w) > 3 or any(x < 0 for x in w) or sum(w) <= 0:
        raise DataError(f"bad split {split!r}: expected up to three non-negative numbers like 949,50,1")
    w += [0.0] * (3 - len(w))
    return [x / sum(w) for x in w]


def split_ranges(split, num_documents: int) -> list[tuple[int, int]]:
    """Document ranges ``[start, end)`` for train/valid/test: cumulative rounded sizes, the rounding error
    taken off every boundary so the last range ends at ``num_documents``."""
    bounds = [0]
    for f in parse_split(split):
        bounds.append(bounds[-1] + int(round(f * num_documents)))
    diff = bounds[-1] - num_documents
    bounds = [0] + [min(max(b - diff, 0), num_documents) for b in bounds[1:]]
    return [(bounds[i], bounds[i + 1]) for i in range(3)]


def build_gpt_indices(doc_lengths: np.ndarray, doc_ids: np.ndarray, seq_length: int,
                      num_samples: Optional[int], seed: int):
    """The document, sample and shuffle indexes (see the module docstring); pure numpy, no I/O.

    ``doc_lengths[d]`` is document ``d``'s token count; ``doc_ids`` the documents of this split.
    ``num_samples=None`` means one epoch. Returns ``(doc_index, sample_index, shuffle_index)``.
    """
    doc_lengths = np.asarray(doc_lengths, dtype=np.int64)
    doc_ids = np.asarray(doc_ids, dtype=np.int64)
    tokens_per_epoch = int(doc_lengths[doc_ids].sum()) if len(doc_ids) else 0
    if tokens_per_epoch < 1 or (num_samples is None and tokens_per_epoch <= seq_length):
        raise DataError(f"{len(doc_ids)} documents with {tokens_per_epoch} tokens cannot make samples of "
                        f"{seq_length + 1} tokens; use more data, a shorter --seq-length or another --split")
    if num_samples is None:
        epochs = 1
    else:
        epochs = max(1, math.ceil((num_samples * seq_length + 1) / tokens_per_epoch))
    rng = np.random.RandomState(seed % 2**32)
    doc_index = np.concatenate([rng.permutation(doc_ids) for _ in range(epochs)])
    lens = doc_lengths[doc_index]
    ends = np.cumsum(lens)
    total = (epochs * tokens_per_epoch - 1) // seq_length
    pos = np.arange(total + 1, dtype=np.int64) * seq_length
    where = np.searchsorted(ends, pos, side="right")
    sample_index = np.stack([where, pos - (ends[where] - lens[where])], axis=1).astype(np.int64)
    if epochs > 1:
        first = min(max(((epochs - 1) * tokens_per_epoch - 1) // seq_length, 0), total)
        shuffle = np.concatenate([rng.permutation(first), first + rng.permutation(total - first)])
    else:
        shuffle = rng.permutation(total)
    idx_dtype = np.int32 if len(doc_lengths) < 2**31 and total < 2**31 else np.int64
    return doc_index.astype(idx_dtype), sample_index, shuffle.astype(idx_dtype)


class GPTDataset:
    """Map-style GPT samples over documents ``doc_range`` of ``indexed`` (see the module docstring).

    ``len()`` is ``num_samples`` (one epoch's worth if ``None``). Indexes are cached under
    ``cache_root(cache_dir)/indexes`` and reused when every input that determines them is the same.
    """

    kind = "gpt"

    def __init__(self, indexed: IndexedDataset, doc_range: tuple[int, int], seq_length: int,
                 num_samples: Optional[int], seed: int, cache_dir: Optional[str] = None, name: str = "train"):
        self.indexed = indexed
        self.seq_length = int(seq_length)
        self.name = name
        self.doc_starts, self.doc_lengths = indexed.document_token_spans()
        doc_ids = np.arange(*doc_range, dtype=np.int64)
        key = digest({"v": 1, "kind": "gpt", "data": dataset_fingerprint(indexed), "docs": list(doc_range),
                      "seq_length": self.seq_length, "num_samples": num_samples, "seed": seed, "split": name})
        what = f"{name} GPT sample index ({os.path.basename(indexed.prefix)}, seq {seq_length})"

        def build(tmp):
            arrays = build_gpt_indices(self.doc_lengths, doc_ids, self.seq_length, num_samples, seed)
            for fname, arr in zip(("doc_index", "sample_index", "shuffle_index"), arrays):
                np.save(os.path.join(tmp, fname + ".npy"), arr)

        path, self.cache_reused = cached_dir(os.path.join(cache_root(cache_dir), "indexes"), f"gpt-{key[:24]}",
                                             build, what)
        load = lambda n: np.load(os.path.join(path, n + ".npy"), mmap_mode="r")  # noqa: E731
        self.doc_index, self.sample_index, self.shuffle_index = load("doc_index"), load("sample_index"), \
            load("shuffle_index")
        self.cache_path = path
        self._len = len(self.shuffle_index) if num_samples is None else int(num_samples)

    def __len__(self) -> int:
        return self._len

    def sample_tokens(self, j: int) -> np.ndarray:
        """The ``seq_length + 1`` tokens of sample ``j`` in *unshuffled* order."""
        (d0, o0), (d1, o1) = self.sample_index[j], self.sample_index[j + 1]
        toks = self.indexed.tokens
        parts = []
        for p in range(int(d0), int(d1) + 1):
            doc = int(self.doc_index[p])
            a = int(o0) if p == d0 else 0
            b = int(o1) + 1 if p == d1 else int(self.doc_lengths[doc])
            s = int(self.doc_starts[doc])
            parts.append(toks[s + a:s + b])
        out = np.concatenate(parts).astype(np.int64) if len(parts) > 1 else parts[0].astype(np.int64)
        assert len(out) == self.seq_length + 1, (j, len(out))
        return out

    def __getitem__(self, i: int) -> dict:
        if not 0 <= i < self._len:
            raise IndexError(f"sample {i} out of range for {self.name} dataset of {self._len}")
        return {"tokens": self.sample_tokens(int(self.shuffle_index[i]))}
