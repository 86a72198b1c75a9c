"""Megatron's ``MMIDIDX`` indexed dataset: a ``.bin`` of raw tokens and an ``.idx`` saying where they are.

Why byte-compatible: data preprocessed by Megatron-LM must train here and vice versa, so the layout is
Megatron-LM's ``megatron/core/datasets/indexed_dataset.py`` exactly (all little-endian):

=========================  ==========================================================================
``.idx`` field             content
=========================  ==========================================================================
magic                      ``b"MMIDIDX\\x00\\x00"`` (9 bytes)
version                    ``<Q`` 1
dtype code                 ``<B``: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16
sequence count  S          ``<Q``
document count  D+1        ``<Q`` — the length of the document-index array, i.e. documents + 1
sequence lengths           S × int32 (tokens per sequence)
sequence pointers          S × int64 (byte offset of each sequence in ``.bin``)
document indices           (D+1) × int64: 0, then the sequence count after each document
=========================  ==========================================================================

A *sequence* is a sentence (``--split-sentences``) or a whole document; document ``d`` is sequences
``document_indices[d] : document_indices[d+1]``, stored contiguously. Token dtype is uint16 when the
vocabulary has fewer than 65,500 entries, else int32 (Megatron's rule, :func:`best_dtype`).

:class:`IndexedDatasetWriter` streams tokens to a temporary ``.bin`` and renames both files into place only
when :meth:`~IndexedDatasetWriter.finalize` succeeds, so a crash never leaves a half-written dataset under
the final name. :class:`IndexedDataset` memory-maps both files.
"""
from __future__ import annotations

import array
import os
import struct
from typing import Optional, Sequence

import numpy as np

from mwb.core.atomic import commit_file
from mwb.core.errors import DataError

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
DTYPE_CODES = {
    1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32, 8: np.uint16,
}
CODE_OF = {np.dtype(v): k for k, v in DTYPE_CODES.items()}
HEADER_SIZE = 9 + 8 + 1 + 8 + 8


def best_dtype(vocab_size: Optional[int]) -> np.dtype:
    """uint16 if every id fits with Megatron's margin (vocab < 65,500), else int32."""
    return np.dtype(np.uint16 if vocab_size is not None and vocab_size < 65500 else np.int32)


def bin_path(prefix: str) -> str:
    return str(prefix) + ".bin"


def idx_path(prefix: str) -> str:
    return str(prefix) + ".idx"


def exists(prefix: str) -> bool:
    return os.path.isfile(bin_path(prefix)) and os.path.isfile(idx_path(prefix))


def write_index(path: str, dtype, sequence_lengths, document_indices) -> None:
    """Write an ``.idx`` file (pointers are derived from the lengths: sequences are back to back)."""
    dtype = np.dtype(dtype)
    lengths = np.asarray(sequence_lengths, dtype=np.int32)  # (an array.array converts without copying)
    pointers = np.zeros(len(lengths), dtype=np.int64)
    if len(lengths) > 1:
        np.cumsum(lengths[:-1].astype(np.int64) * dtype.itemsize, out=pointers[1:])
    docs = np.asarray(document_indices, dtype=np.int64)
    with open(path, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<Q", VERSION))
        f.write(struct.pack("<B", CODE_OF[dtype]))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(docs)))
        f.write(lengths.astype("<i4").tobytes())
        f.write(pointers.astype("<i8").tobytes())
        f.write(docs.astype("<i8").tobytes())


class IndexedDatasetWriter:
    """Append documents, then :meth:`finalize` (or use as a context manager: an exception aborts).

    ``add_document(tokens, lengths)`` writes one document made of ``len(lengths)`` sequences whose tokens
    are concatenated in ``tokens``; ``lengths=None`` means one sequence. An empty document (no sequences)
    is kept as a document boundary, as Megatron does.
    """

    def __init__(self, prefix: str, dtype=np.int32):
        self.prefix = str(prefix)
        self.dtype = np.dtype(dtype)
        if self.dtype not in CODE_OF:
            raise ValueError(f"dtype {self.dtype} has no MMIDIDX code")
        d = os.path.dirname(os.path.abspath(self.prefix))
        os.makedirs(d, exist_ok=True)
        tag = f".tmp-{os.getpid()}-{id(self):x}"
        self._tmp_bin = bin_path(self.prefix) + tag
        self._tmp_idx = idx_path(self.prefix) + tag
        self._bin = open(self._tmp_bin, "wb")
        # compact growable arrays: a billion sentences must not become a billion Python ints
        self._lengths = array.array("i")
        self._docs = array.array("q", [0])
        self.num_tokens = 0
        self._max_id = np.iinfo(self.dtype).max if self.dtype.kind in "iu" else None
        self._done = False

    def add_item(self, tokens) -> None:
        """Append one sequence to the current document (close it with :meth:`end_document`)."""
        arr = np.asarray(tokens)
        if self._max_id is not None and arr.size and (arr.max() > self._max_id or arr.min() < 0):
            raise DataError(f"token id {int(arr.max())} does not fit {self.dtype} in {self.prefix}")
        self._bin.write(arr.astype(self.dtype, copy=False).tobytes())
        self._lengths.append(int(arr.size))
        self.num_tokens += int(arr.size)

    def end_document(self) -> None:
        self._docs.append(len(self._lengths))

    def add_document(self, tokens, lengths: Optional[Sequence[int]] = None) -> None:
        arr = np.asarray(tokens)
        if lengths is None:
            lengths = [arr.size] if arr.size else []
        if sum(lengths) != arr.size:
            raise ValueError(f"sequence lengths sum to {sum(lengths)} but the document has {arr.size} tokens")
        if self._max_id is not None and arr.size and (arr.max() > self._max_id or arr.min() < 0):
            raise DataError(f"token id {int(arr.max())} does not fit {self.dtype} in {self.prefix}")
        self._bin.write(arr.astype(self.dtype, copy=False).tobytes())
        self._lengths.extend(int(n) for n in lengths)
        self._docs.append(len(self._lengths))
        self.num_tokens += int(arr.size)

    @property
    def num_documents(self) -> int:
        return len(self._docs) - 1

    def finalize(self) -> None:
        """Write the index and move both files to their final names (``.bin`` first, ``.idx`` last)."""
        if self._done:
            return
        try:
            self._bin.close()
            write_index(self._tmp_idx, self.dtype, self._lengths, self._docs)
            commit_file(self._tmp_bin, bin_path(self.prefix))
            commit_file(self._tmp_idx, idx_path(self.prefix))
        except BaseException:
            self.abort()
            raise
        self._done = True

    def abort(self) -> None:
        """Drop everything written so far; files under the final names are left untouched."""
        self._done = True
        if not self._bin.closed:
            self._bin.close()
        for p in (self._tmp_bin, self._tmp_idx):
            if os.path.exists(p):
                os.remove(p)

    def __enter__(self) -> "IndexedDatasetWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.finalize()
        else:
            self.abort()


class IndexedDataset:
    """Read-only, memory-mapped view of ``prefix.bin`` / ``prefix.idx``.

    ``ds[i]`` is sequence ``i`` (a numpy view), ``ds.get(i, offset, length)`` a slice of it,
    ``ds.document(d)`` the tokens of document ``d``; ``sequence_lengths``, ``sequence_pointers`` and
    ``document_indices`` are the index arrays, ``tokens`` the whole ``.bin`` as one array.
    """

    def __init__(self, prefix: str):
        self.prefix = str(prefix)
        if not exists(self.prefix):
            missing = [p for p in (bin_path(self.prefix), idx_path(self.prefix)) if not os.path.isfile(p)]
            raise DataError(
                f"indexed dataset {self.prefix}: missing {', '.join(missing)} "
                f"(give the prefix without .bin/.idx; build it with `mwb preprocess`)"
            )
        self._idx = np.memmap(idx_path(self.prefix), dtype=np.uint8, mode="r")
        buf = self._idx
        if len(buf) < HEADER_SIZE or bytes(buf[:9]) != MAGIC:
            raise DataError(f"{idx_path(self.prefix)}: not an MMIDIDX index file (bad magic)")
        version, code, n_seq, n_docs = struct.unpack("<QBQQ", bytes(buf[9:HEADER_SIZE]))
        if version != VERSION or code not in DTYPE_CODES:
            raise DataError(f"{idx_path(self.prefix)}: unsupported version {version} or dtype code {code}")
        self.dtype = np.dtype(DTYPE_CODES[code])
        need = HEADER_SIZE + n_seq * 12 + n_docs * 8
        if len(buf) < need:
            raise DataError(f"{idx_path(self.prefix)}: truncated ({len(buf)} bytes, expected {need})")
        off = HEADER_SIZE
        self.sequence_lengths = np.frombuffer(buf, dtype="<i4", count=n_seq, offset=off)
        off += n_seq * 4
        self.sequence_pointers = np.frombuffer(buf, dtype="<i8", count=n_seq, offset=off)
        off += n_seq * 8
        self.document_indices = np.frombuffer(buf, dtype="<i8", count=n_docs, offset=off)
        size = os.path.getsize(bin_path(self.prefix))
        self.tokens = (np.memmap(bin_path(self.prefix), dtype=self.dtype, mode="r")
                       if size else np.zeros(0, dtype=self.dtype))
        if n_seq and int(self.sequence_pointers[-1]) + int(self.sequence_lengths[-1]) * self.dtype.itemsize > size:
            raise DataError(f"{bin_path(self.prefix)}: shorter than its index says (truncated file?)")

    def __reduce__(self):
        # reopen by path when sent to a DataLoader worker, instead of pickling the mapped arrays
        return (IndexedDataset, (self.prefix,))

    def __len__(self) -> int:
        return len(self.sequence_lengths)

    @property
    def num_documents(self) -> int:
        return max(len(self.document_indices) - 1, 0)

    @property
    def num_tokens(self) -> int:
        return int(self.sequence_lengths.sum(dtype=np.int64))

    def __getitem__(self, i: int) -> np.ndarray:
        return self.get(i)

    def get(self, i: int, offset: int = 0, length: Optional[int] = None) -> np.ndarray:
        start = int(self.sequence_pointers[i]) // self.dtype.itemsize + offset
        n = int(self.sequence_lengths[i]) - offset if length is None else length
        return self.tokens[start:start + n]

    def document_token_spans(self) -> tuple[np.ndarray, np.ndarray]:
        """(start token offset in ``.bin``, token count) of every document, vectorised."""
        di = self.document_indices
        cum = np.zeros(len(self) + 1, dtype=np.int64)
        np.cumsum(self.sequence_lengths, out=cum[1:])
        lengths = cum[di[1:]] - cum[di[:-1]]
        first = np.minimum(di[:-1], max(len(self) - 1, 0))
        starts = (self.sequence_pointers[first] // self.dtype.itemsize).astype(np.int64) if len(self) else \
            np.zeros(self.num_documents, dtype=np.int64)
        return starts, lengths

    def document(self, d: int) -> np.ndarray:
        a, b = int(self.document_indices[d]), int(self.document_indices[d + 1])
        if a == b:
            return self.tokens[:0]
        start = int(self.sequence_pointers[a]) // self.dtype.itemsize
        return self.tokens[start:start + int(self.sequence_lengths[a:b].sum())]
