"""Neural retrieval: BERT bi-encoders, ICT/DPR training, faiss indexes, BM25, open-domain QA evaluation.

Modules (see docs/retrieval.md):

``biencoder``  :class:`RetrievalConfig`, :class:`BiEncoder` (query/context BERT towers), :func:`build_biencoder`
               (TP/SP like any mwb model), :func:`in_batch_loss` (negatives gathered across DP ranks)
``loading``    :func:`open_source` / :func:`load_biencoder` from Hugging Face BERT dirs, mwb BERT or bi-encoder
               checkpoints; :func:`fill_biencoder` into any TP layout
``data``       :class:`ICTDataset`, :class:`DPRDataset`, :func:`read_dpr_json`
``biencoder_spec`` :class:`BiEncoderSpec` for the shared trainer; :func:`retrieval_metrics` (DPR's validation ranks)
``train``      the ``mwb pretrain ict`` / ``mwb finetune dpr`` flow
``index``      sharded, cached passage embeddings; :class:`DenseIndex` (faiss Flat/IVF/HNSW)
``bm25``       :class:`BM25Retriever` (bm25s)
``matching``   DPR's answer matching (:func:`has_answer`) and top-k accuracy
``qa_system``  the QA retrieval system (evidence + DPR index + BM25) that ``mwb eval qa`` (mwb/tasks/qa/) scores
``inputs``     evidence / question readers and DPR-style tokenisation
``e2e``        joint retriever + reader training (EMDR2, individual top-k), the refreshed evidence index

Names are imported lazily, so ``import mwb.retrieval`` costs nothing.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "RetrievalConfig": "biencoder", "BiEncoder": "biencoder", "build_biencoder": "biencoder",
    "in_batch_loss": "biencoder", "open_source": "loading", "load_biencoder": "loading",
    "fill_biencoder": "loading", "ICTDataset": "data", "DPRDataset": "data", "read_dpr_json": "data",
    "BiEncoderSpec": "specs", "retrieval_metrics": "specs", "DenseIndex": "index", "embed_evidence": "index",
    "BM25Retriever": "bm25", "has_answer": "matching", "top_k_accuracy": "matching",
    "read_evidence": "text", "read_questions": "text",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
