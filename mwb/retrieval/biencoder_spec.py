"""The trainer's view of a bi-encoder: build it for this rank, turn a batch into a token-style loss.

:class:`BiEncoderSpec` plugs the bi-encoder into the one training loop (:class:`~mwb.core.training.trainer.
Trainer`): ``forward`` returns ``(Σ cross-entropy over this rank's questions, number of questions)`` from
:func:`~.biencoder.in_batch_loss`, so the trainer's Σ loss / Σ count over all data-parallel ranks is the mean
question loss of the global batch, and in-batch negatives span the micro-batch of every DP rank (the
negatives pool of one forward is ``micro_batch_size × dp`` questions, each with ``1 + hard_negatives``
contexts). Tensor and sequence parallelism apply inside the towers; pipeline parallelism does not (two
towers and a loss that needs both are not a layer stack), so ``--pp`` must be 1.
"""
from __future__ import annotations

from typing import Optional

import torch

from mwb.core.parallel.dims import LayoutError
from mwb.core.training.model_spec import ModelSpec

from .biencoder import RetrievalConfig, build_biencoder, in_batch_loss, score_divisor


class BiEncoderSpec(ModelSpec):
    arch = "bert"

    def __init__(self, cfg, vocab_size: int, rcfg: RetrievalConfig) -> None:
        super().__init__(cfg, vocab_size)
        self.rcfg = rcfg
        self.group = None

    def build_chunk(self, state, stage, device, dtype: Optional[torch.dtype]):
        if state.pp_size > 1:
            raise LayoutError("bi-encoder training does not support pipeline parallelism; use --pp 1 "
                              "(tensor and data parallelism work)")
        self.group = state.dp_group if state.dp_size > 1 else None
        return build_biencoder(self.cfg.model, self.rcfg, state, self.vocab_size, self.cfg.train.seed, device,
                               dtype)

    def forward(self, model, batch: dict, hidden=None):
        q = model.embed_queries(batch["q_tokens"], batch["q_mask"])
        n = batch["c_tokens"].size(1)
        c = model.embed_contexts(batch["c_tokens"].flatten(0, 1), batch["c_mask"].flatten(0, 1))
        loss_sum, count, _ = in_batch_loss(q, c, n, score_divisor(self.rcfg, q.size(-1)), self.group)
        return loss_sum, count

    def tokens_in(self, batch: dict) -> int:
        return int(batch["q_mask"].sum() + batch["c_mask"].sum())

    def nominal_count(self, micro_batch: int, seq_length: int) -> float:
        return float(micro_batch)


@torch.no_grad()
def retrieval_metrics(model, dataset, rcfg: RetrievalConfig, device="cpu", batch_size: int = 32,
                      limit: int = 512) -> dict:
    """DPR's validation view: every question of (the first ``limit`` samples of) ``dataset`` ranks *all*
    their contexts (positives and hard negatives of every question); returns ``valid_top1`` (positive
    ranked first), ``valid_top5`` and ``valid_mean_rank`` (1 = best). Deterministic, identical on every
    rank (tensor-parallel ranks compute it together)."""
    from mwb.core.training.batches import collate

    was_training = model.training
    model.eval()
    n = min(getattr(dataset, "n", len(dataset)), limit)  # distinct records: the first epoch visits each once
    qs, cs = [], []
    for s in range(0, n, batch_size):
        b = collate([dataset[i] for i in range(s, min(n, s + batch_size))], device)
        qs.append(model.embed_queries(b["q_tokens"], b["q_mask"]).float())
        cs.append(model.embed_contexts(b["c_tokens"].flatten(0, 1), b["c_mask"].flatten(0, 1)).float())
    model.train(was_training)
    if not qs:
        return {}
    q, c = torch.cat(qs), torch.cat(cs)
    per = c.size(0) // q.size(0)
    scores = q @ c.t()
    target = torch.arange(q.size(0), device=q.device) * per
    pos = scores.gather(1, target[:, None])
    rank = (scores > pos).sum(1) + 1
    return {"valid_top1": float((rank <= 1).float().mean()), "valid_top5": float((rank <= 5).float().mean()),
            "valid_mean_rank": float(rank.float().mean()), "valid_questions": int(q.size(0))}
