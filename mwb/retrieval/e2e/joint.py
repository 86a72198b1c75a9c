"""The trainer's view of a retriever + reader pair: one joint step from questions to a loss.

:class:`JointSpec` plugs the pair into the shared training loop (:class:`~mwb.core.training.trainer.Trainer`)
as one module, :class:`JointModel` (``retriever``: the BERT bi-encoder, built tensor-parallel like any mwb
model; ``reader``: any object with the reader interface of :mod:`mwb.retrieval.readers.base`, its module
``reader.model`` trained alongside). Per micro-batch of questions:

1. the query tower embeds the questions; the current :class:`~.refresh.VersionedIndex` returns the top-K
   passages (faiss search on the detached query, so retrieval itself has no gradient);
2. the context tower re-embeds those K passages with the live weights, and the retriever logits are the
   retriever's own similarity (:func:`~.losses.retriever_scores` with its score divisor, on embeddings
   L2-normalised when its towers normalise: :mod:`.scoring`): both towers learn;
3. ``individual``: the reader scores each passage alone and the loss is the top-k marginal likelihood
   (gradient into both); ``emdr2``: the reader's own cross-entropy (``reader.loss``, reading all K
   passages) plus EMDR2's retriever term with the reader's per-token log-probabilities held fixed;
   ``pipeline`` (the baseline joint training is compared against): the retriever is fixed (its parameters
   frozen, out of the optimizer, scoring in eval mode without a graph) and only the reader learns, from the
   same top-k marginal likelihood as ``individual`` with p(z|q) the fixed retriever's.

``forward`` returns ``(Σ per-question loss, #questions)``: the trainer's Σ / Σ over data-parallel ranks is
the mean question loss of the global batch, so every layout computes the same loss. Logged per step:
``reader_loss``, ``retriever_loss``, ``answer_in_topk`` (share of questions with an answer-bearing passage
among the K retrieved) and ``index_version`` / ``index_weights_step`` (which index the step retrieved from).
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import torch
from torch import nn

from mwb.core.config import ConfigError
from mwb.core.parallel.dims import LayoutError
from mwb.core.training.model_spec import ModelSpec

from ..biencoder import build_biencoder, score_divisor
from ..data import _Permuted
from ..matching import has_answer, normalize, simple_tokens
from ..inputs import context_ids, pad_batch, query_ids, specials
from .losses import emdr2_retriever_loss, individual_topk_loss, retriever_scores

METHODS = ("individual", "emdr2", "pipeline")


class JointModel(nn.Module):
    """``retriever`` (bi-encoder) and ``reader_model`` (the reader's module) as one trainable module;
    ``reader`` is the reader object whose interface the spec calls (itself, when it is a module)."""

    def __init__(self, retriever: nn.Module, reader) -> None:
        super().__init__()
        self.retriever = retriever
        self.reader_model = reader if isinstance(reader, nn.Module) else reader.model
        object.__setattr__(self, "reader", reader)  # not registered twice


class QuestionSet(_Permuted):
    """Training questions as fixed-shape samples ``{qid, q_tokens, q_mask}``; a new permutation each epoch."""

    def __init__(self, records: list[dict], tok, query_length: int, seed: int) -> None:
        super().__init__(len(records), seed, None)
        self.records = records
        pad = specials(tok)[2]
        self.tokens, self.mask = pad_batch(query_ids(tok, [r["question"] for r in records], query_length), pad,
                                           query_length)

    def __getitem__(self, i: int) -> dict:
        r = self.record(i)
        return {"qid": np.int64(r), "q_tokens": self.tokens[r], "q_mask": self.mask[r]}


class JointSpec(ModelSpec):
    arch = "bert"
    metric_names = ("reader_loss", "retriever_loss", "answer_in_topk", "index_version", "index_weights_step")

    def __init__(self, cfg, vocab_size: int, rcfg, method: str, top_k: int,
                 make_reader: Callable[..., nn.Module], questions: list[dict], evidence, tok) -> None:
        super().__init__(cfg, vocab_size)
        if method not in METHODS:
            raise ConfigError(f"--method must be one of {', '.join(METHODS)}, got '{method}'")
        if top_k < 1:
            raise ConfigError("--top-k must be at least 1")
        self.rcfg, self.method, self.top_k = rcfg, method, min(top_k, len(evidence))
        self.make_reader, self.questions, self.evidence = make_reader, questions, evidence
        self.pad = specials(tok)[2]
        self.ctx_ids = context_ids(tok, evidence.titles, evidence.texts, rcfg.context_length)
        self._ev_tokens: dict[int, list[str]] = {}
        self.index = None  # a VersionedIndex, set (and swapped) by the refresh

    def build_chunk(self, state, stage, device, dtype: Optional[torch.dtype]):
        if state.pp_size > 1:
            raise LayoutError("joint retriever-reader training does not support pipeline parallelism; use --pp 1")
        retriever = build_biencoder(self.cfg.model, self.rcfg, state, self.vocab_size, self.cfg.train.seed,
                                    device, dtype)
        if self.method == "pipeline":  # fixed: no gradient, no optimizer state, weights exactly the start's
            retriever.requires_grad_(False)
        return JointModel(retriever, self.make_reader(state, device, dtype))

    def _has_answer(self, answers, row: int) -> bool:
        if row not in self._ev_tokens:
            self._ev_tokens[row] = simple_tokens(normalize(self.evidence.texts[row]))
        return has_answer(answers, self.evidence.texts[row], text_tokens=self._ev_tokens[row])

    def retrieve(self, retriever, q_tokens, q_mask):
        """(query embeddings with grad ``[b, h]``, top-K evidence rows ``[b, K]``) from the current index."""
        q = retriever.embed_queries(q_tokens, q_mask)
        _, rows = self.index.search(q.detach().float().cpu().numpy(), self.top_k)
        return q, rows

    def scores(self, retriever, q_tokens, q_mask):
        """(retriever logits ``[b, K]``: the retriever's own similarity of each question and its top-K
        passages, re-embedded by the live context tower; the top-K evidence rows ``[b, K]``)."""
        q, rows = self.retrieve(retriever, q_tokens, q_mask)
        b, k = rows.shape
        tokens, mask = pad_batch([self.ctx_ids[r] for r in rows.reshape(-1)], self.pad)
        dev = q.device
        d = retriever.embed_contexts(torch.as_tensor(tokens, device=dev), torch.as_tensor(mask, device=dev))
        return retriever_scores(q, d.view(b, k, -1), score_divisor(self.rcfg, q.size(-1))), rows

    def fixed_scores(self, retriever, q_tokens, q_mask):
        """:meth:`scores` of a fixed retriever: eval mode (as its index was embedded), no graph."""
        was = retriever.training
        retriever.eval()
        try:
            with torch.no_grad():
                return self.scores(retriever, q_tokens, q_mask)
        finally:
            retriever.train(was)

    def forward(self, model, batch: dict, hidden=None):
        if self.index is None:
            raise RuntimeError("the joint spec has no index yet: the refresh builds version 0 before training")
        recs = [self.questions[int(i)] for i in batch["qid"]]
        score = self.fixed_scores if self.method == "pipeline" else self.scores
        logits, rows = score(model.retriever, batch["q_tokens"], batch["q_mask"])
        b = rows.shape[0]
        dev = logits.device
        questions = [r["question"] for r in recs]
        answers = [list(r["answers"]) for r in recs]
        docs = [[{"id": self.evidence.ids[r], "title": self.evidence.titles[r], "text": self.evidence.texts[r]}
                 for r in row] for row in rows]
        lp, lp_mask = model.reader.doc_logprobs(questions, docs, answers)
        if self.method in ("individual", "pipeline"):  # pipeline: logits without a graph, only the reader learns
            loss = individual_topk_loss(logits, lp, lp_mask, reduction="sum")
            reader_part = loss.detach()
            retriever_part = loss.detach()
        else:
            reader_part = model.reader.loss(questions, docs, answers).float() * b
            retriever_part = emdr2_retriever_loss(logits, lp, lp_mask, reduction="sum")
            loss = reader_part + retriever_part
        n = torch.tensor(float(b), device=dev)
        hits = sum(any(self._has_answer(a, int(r)) for r in row) for a, row in zip(answers, rows))
        self.record_metric("reader_loss", reader_part, n)
        self.record_metric("retriever_loss", retriever_part, n)
        self.record_metric("answer_in_topk", torch.tensor(float(hits)), n)
        self.record_metric("index_version", torch.tensor(float(self.index.version * b)), n)
        self.record_metric("index_weights_step", torch.tensor(float(self.index.weights_step * b)), n)
        return loss, n

    def tokens_in(self, batch: dict) -> int:
        return int(batch["q_mask"].sum())

    def nominal_count(self, micro_batch: int, seq_length: int) -> float:
        return float(micro_batch)
