"""What a resumed joint run takes from the run it continues, beyond the trainer's checkpoint.

The index: between two refreshes the run retrieves from the index embedded at the last multiple of
``--refresh-every``, with weights that are no longer the model's. Re-embedding from the checkpoint's weights on
resume would give a version the uninterrupted run never had (a kill at step 5 of a refresh every 4 would
retrieve from step-5 weights where the run used step-4 ones), so every checkpoint carries the index in use
(``step_N/index/index.npz``: embeddings, version and the step whose weights made them, as Megatron's REALM /
EMDR2 keep their evidence embeddings on disk) and a resumed run retrieves from exactly that.

The held-out "before" numbers: they describe the start, so a resumed run reads them back
(``OUT/heldout_before.json``) instead of evaluating its resumed weights.
"""
from __future__ import annotations

import json
import os
from typing import Optional

import numpy as np

from mwb.core.atomic import atomic_open, atomic_write_text

from .refresh import VersionedIndex, make_index

INDEX_DIR, INDEX_FILE = "index", "index.npz"
BEFORE_FILE = "heldout_before.json"


def write_index(index: VersionedIndex, directory: str) -> str:
    """``directory/index.npz`` (written under a temporary name, then renamed); returns its path."""
    path = os.path.join(directory, INDEX_FILE)
    with atomic_open(path, "wb") as f:
        np.savez(f, embeddings=np.asarray(index.embeddings, dtype=np.float32), version=index.version,
                 weights_step=index.weights_step)
    return path


def read_index(checkpoint_dir: str) -> Optional[VersionedIndex]:
    """The index a checkpoint carries, or None (a checkpoint written before indexes were carried)."""
    path = os.path.join(checkpoint_dir, INDEX_DIR, INDEX_FILE)
    if not os.path.isfile(path):
        return None
    with np.load(path) as z:
        return make_index(z["embeddings"], int(z["version"]), int(z["weights_step"]))


class IndexCarrier:
    """Keeps ``OUT/index/index.npz`` the index the trainer retrieves from (rank 0), so that the checkpoint the
    step actions save next copies it in (``extra_files["index"]``)."""

    def __init__(self, out: str, extra_files: dict, rank: int) -> None:
        self.dir, self.extra, self.rank = os.path.join(out, INDEX_DIR), extra_files, rank
        self.written: Optional[VersionedIndex] = None

    def __call__(self, index: VersionedIndex) -> None:
        if self.rank == 0 and index is not self.written:
            self.extra["index"] = write_index(index, self.dir)
            self.written = index


def before_metrics(out: str, resumed: bool, evaluate, rank: int) -> tuple[dict, list]:
    """(metrics, records) of the held-out evaluation before training: evaluated (and kept in ``OUT``) by a fresh
    run, read back by a resumed one that has them."""
    path = os.path.join(out, BEFORE_FILE)
    if resumed and os.path.isfile(path):
        with open(path) as f:
            kept = json.load(f)
        return kept["metrics"], kept["records"]
    metrics, records = evaluate()
    if rank == 0:
        os.makedirs(out, exist_ok=True)
        atomic_write_text(path, json.dumps({"metrics": metrics, "records": records}))
    return metrics, records
