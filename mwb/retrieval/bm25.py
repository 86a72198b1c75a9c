"""BM25 over the same evidence corpus: the sparse baseline DPR is compared against.

Backed by ``bm25s`` (a maintained, numpy-only BM25 with Lucene's scoring by default), so the baseline is a
standard implementation rather than a home-made one. Each passage is indexed as ``title + " " + text`` (as
in Pyserini's DPR-Wikipedia BM25 baseline), lower-cased, English stop words removed, no stemming (a stemmer
would add a dependency). The index is cached under ``$MWB_CACHE/retrieval/bm25-<key>/`` keyed by the evidence
file's hash and the parameters, and reused by later runs.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from mwb.core.data.cache import cached_dir, digest

from .index import evidence_digest, retrieval_cache


def _bm25s():
    try:
        import bm25s
    except ImportError:
        from mwb.core.errors import MwbError
        raise MwbError("the BM25 retriever needs bm25s: pip install bm25s") from None
    return bm25s


class BM25Retriever:
    def __init__(self, evidence, cache_dir: Optional[str] = None, k1: float = 1.5, b: float = 0.75) -> None:
        bm25s = _bm25s()
        self.n = len(evidence)
        key = digest({"evidence": evidence_digest(evidence.path, cache_dir), "k1": k1, "b": b,
                      "bm25s": getattr(bm25s, "__version__", "?"), "fields": "title+text", "stopwords": "en"})

        def build(tmp: str) -> None:
            docs = [f"{t} {x}" if t else x for t, x in zip(evidence.titles, evidence.texts)]
            model = bm25s.BM25(k1=k1, b=b)
            model.index(bm25s.tokenize(docs, stopwords="en", show_progress=False), show_progress=False)
            model.save(tmp, show_progress=False)

        # ranks of one job wait for a single builder (cached_dir's lock) and log on rank 0 only
        self.path, self.reused = cached_dir(retrieval_cache(cache_dir), f"bm25-{key[:24]}", build,
                                            f"BM25 index over {self.n} passages")
        self.model = bm25s.BM25.load(self.path, show_progress=False)

    def search(self, questions: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, passage rows) ``[n, min(k, N)]``, best first."""
        bm25s = _bm25s()
        k = min(int(k), self.n)
        if not questions:
            return np.zeros((0, k), np.float32), np.zeros((0, k), np.int64)
        tokens = bm25s.tokenize(list(questions), stopwords="en", show_progress=False, return_ids=False)
        ids, scores = self.model.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        return np.asarray(scores, dtype=np.float32), np.asarray(ids, dtype=np.int64)
