"""The MMIDIDX writer/reader, checked against an independent struct-based parser of the documented layout."""
from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from mwb.core.data.indexed import IndexedDataset, IndexedDatasetWriter, best_dtype
from mwb.core.errors import DataError


def parse_idx(path: str) -> dict:
    """Megatron's .idx layout, read field by field with struct only (written from the format description)."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:9] == b"MMIDIDX\x00\x00"
    (version,) = struct.unpack_from("<Q", data, 9)
    (code,) = struct.unpack_from("<B", data, 17)
    (n_seq,) = struct.unpack_from("<Q", data, 18)
    (n_doc,) = struct.unpack_from("<Q", data, 26)
    off = 34
    lengths = list(struct.unpack_from(f"<{n_seq}i", data, off))
    off += 4 * n_seq
    pointers = list(struct.unpack_from(f"<{n_seq}q", data, off))
    off += 8 * n_seq
    docs = list(struct.unpack_from(f"<{n_doc}q", data, off))
    off += 8 * n_doc
    assert off == len(data), "trailing bytes after the document index"
    return {"version": version, "code": code, "lengths": lengths, "pointers": pointers, "docs": docs}


def test_layout_matches_megatron_format(tmp_path):
    prefix = str(tmp_path / "ds")
    with IndexedDatasetWriter(prefix, np.uint16) as w:
        w.add_document([5, 6, 7], [3])
        w.add_document([1, 2, 3, 4, 9], [2, 3])  # a document of two sentences
        w.add_document([], [])  # an empty document is still a boundary
        w.add_document([65000], [1])
    idx = parse_idx(prefix + ".idx")
    assert idx["version"] == 1 and idx["code"] == 8  # uint16
    assert idx["lengths"] == [3, 2, 3, 1]
    assert idx["pointers"] == [0, 6, 10, 16]  # bytes, 2 per token
    assert idx["docs"] == [0, 1, 3, 3, 4]  # documents + 1 entries, starting at 0
    raw = np.fromfile(prefix + ".bin", dtype="<u2")
    assert raw.tolist() == [5, 6, 7, 1, 2, 3, 4, 9, 65000]

    ds = IndexedDataset(prefix)
    assert len(ds) == 4 and ds.num_documents == 4 and ds.dtype == np.uint16
    assert ds[1].tolist() == [1, 2] and ds.get(2, 1, 2).tolist() == [4, 9]
    assert ds.document(1).tolist() == [1, 2, 3, 4, 9] and ds.document(2).tolist() == []
    starts, lengths = ds.document_token_spans()
    assert lengths.tolist() == [3, 5, 0, 1] and starts[[0, 1, 3]].tolist() == [0, 3, 8]


def test_int32_and_dtype_rule(tmp_path):
    assert best_dtype(65499) == np.uint16 and best_dtype(65500) == np.int32 and best_dtype(None) == np.int32
    prefix = str(tmp_path / "big")
    with IndexedDatasetWriter(prefix, best_dtype(100_000)) as w:
        w.add_document([99_999, 0])
    idx = parse_idx(prefix + ".idx")
    assert idx["code"] == 4 and idx["pointers"] == [0]
    assert IndexedDataset(prefix)[0].tolist() == [99_999, 0]


def test_failed_write_leaves_previous_output(tmp_path):
    prefix = str(tmp_path / "ds")
    with IndexedDatasetWriter(prefix, np.uint16) as w:
        w.add_document([1, 2, 3])
    before = open(prefix + ".bin", "rb").read(), open(prefix + ".idx", "rb").read()
    with pytest.raises(RuntimeError):
        with IndexedDatasetWriter(prefix, np.uint16) as w:
            w.add_document([7, 7, 7, 7])
            raise RuntimeError("crash mid-way")
    assert (open(prefix + ".bin", "rb").read(), open(prefix + ".idx", "rb").read()) == before
    assert sorted(os.listdir(tmp_path)) == ["ds.bin", "ds.idx"]  # no temporary files left
    with pytest.raises(DataError, match="does not fit"):
        with IndexedDatasetWriter(str(tmp_path / "o"), np.uint16) as w:
            w.add_document([70_000])


def test_reader_errors(tmp_path):
    with pytest.raises(DataError, match="missing"):
        IndexedDataset(str(tmp_path / "nope"))
    (tmp_path / "bad.bin").write_bytes(b"")
    (tmp_path / "bad.idx").write_bytes(b"NOTANIDX" + b"\0" * 40)
    with pytest.raises(DataError, match="bad magic"):
        IndexedDataset(str(tmp_path / "bad"))
