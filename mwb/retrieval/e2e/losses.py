"""The joint retriever–reader objectives as pure functions of scores and reader log-probabilities.

Shapes: ``retriever_logits [B, K]`` are the scores of the K retrieved documents of each question (a softmax
over them is p(z_k | q)); ``reader_lp [B, K, T]`` is log p_reader(a_t | q, z_k, a_<t) per answer token (an
extractive reader gives one "token", T = 1: the log-probability of the answer span); ``mask [B, T]`` is 1 for
answer tokens and 0 for padding.

* EMDR2 (Sachan et al., NeurIPS 2021), the retriever term:
  ``−Σ_t log Σ_k p(z_k|q) · exp(stopgrad(reader_lp[k, t]))`` — the reader is a fixed target here, only the
  retriever learns from it; the total EMDR2 loss adds the reader's own cross-entropy.
* Individual top-k (Sachan et al., ACL 2021): the marginal likelihood of the answer over the top-k documents
  read one at a time, ``−log Σ_k p(z_k|q) · p(a|q, z_k)`` with ``log p(a|q, z_k) = Σ_t reader_lp[k, t]``;
  gradient reaches both retriever and reader.

The scores ``retriever_logits`` are the retriever's own similarity (:func:`retriever_scores`): EMDR2's
q·d/√h for a retriever trained with it, cosine / temperature for one trained with that. Scoring a
retriever by a similarity it was not trained for makes the joint run start from another retriever.

Both are computed in log space (log-softmax + logsumexp), so a document the reader finds hopeless
(log-probability −1e4) cannot underflow the sum. Masked tokens are selected away with ``where``, not
multiplied by zero, so a padded −inf never turns into NaN.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

REDUCTIONS = ("mean", "sum", "none")


def retriever_scores(q: torch.Tensor, docs: torch.Tensor, divisor: float) -> torch.Tensor:
    """The retriever's score q·d / ``divisor``: ``q [B, h]``, ``docs [B, K, h]`` → ``[B, K]`` (fp32).

    The divisor is the retriever's own (:func:`~mwb.retrieval.biencoder.score_divisor`): √h for EMDR2's
    q·d/√h on raw embeddings, the temperature of a cosine retriever (its towers then L2-normalise), 1 for
    DPR's raw inner product, so the joint objectives train the similarity the retriever was trained with."""
    if not divisor > 0:
        raise ValueError(f"the score divisor must be positive, got {divisor}")
    return torch.einsum("bh,bkh->bk", _wide(q), _wide(docs)) / divisor


def _wide(x: torch.Tensor) -> torch.Tensor:
    """fp32 at least (fp64 stays fp64)."""
    return x if x.dtype == torch.float64 else x.float()


def _reduce(per_question: torch.Tensor, reduction: str) -> torch.Tensor:
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {', '.join(REDUCTIONS)}, got '{reduction}'")
    if reduction == "none":
        return per_question
    return per_question.sum() if reduction == "sum" else per_question.mean()


def _check(retriever_logits, reader_lp, mask) -> None:
    b, k = retriever_logits.shape
    if reader_lp.dim() != 3 or reader_lp.shape[:2] != (b, k):
        raise ValueError(f"reader_lp must be [B={b}, K={k}, T], got {tuple(reader_lp.shape)}")
    if mask.shape != (b, reader_lp.size(2)):
        raise ValueError(f"mask must be [B={b}, T={reader_lp.size(2)}], got {tuple(mask.shape)}")


def emdr2_retriever_loss(retriever_logits: torch.Tensor, reader_lp: torch.Tensor, mask: torch.Tensor,
                         reduction: str = "mean") -> torch.Tensor:
    """EMDR2's retriever term, ``−Σ_t log Σ_k softmax(logits)_k · exp(stopgrad(reader_lp)_{k,t})`` per
    question (masked tokens excluded), averaged (or summed) over the batch. No gradient reaches the reader."""
    _check(retriever_logits, reader_lp, mask)
    log_prior = F.log_softmax(_wide(retriever_logits), dim=-1)                  # [B, K]
    per_token = torch.logsumexp(log_prior[:, :, None] + _wide(reader_lp.detach()), dim=1)  # [B, T]
    keep = mask.bool()
    per_question = -torch.where(keep, per_token, torch.zeros_like(per_token)).sum(-1)
    return _reduce(per_question, reduction)


def individual_topk_loss(retriever_logits: torch.Tensor, reader_lp: torch.Tensor, mask: torch.Tensor,
                         reduction: str = "mean") -> torch.Tensor:
    """``−log Σ_k p(z_k|q) · p(a|q, z_k)`` per question, ``log p(a|q, z_k) = Σ_t reader_lp`` over unmasked
    tokens; gradient into both the retriever logits and the reader."""
    _check(retriever_logits, reader_lp, mask)
    keep = mask.bool()[:, None, :]
    lp = _wide(reader_lp)
    doc_lp = torch.where(keep, lp, torch.zeros_like(lp)).sum(-1)                 # [B, K]
    per_question = -torch.logsumexp(F.log_softmax(_wide(retriever_logits), dim=-1) + doc_lp, dim=-1)
    return _reduce(per_question, reduction)


