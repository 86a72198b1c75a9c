"""BERT pretraining: masked-LM plus (optionally) sentence-order prediction, from Megatron-style samples.

A sample is ``{"tokens", "types", "labels", "loss_mask", "padding_mask", "is_random"}`` (see
:mod:`mwb.core.data`): ``labels`` hold the original ids where ``loss_mask`` is 1, ``padding_mask`` is 1 on
real tokens, ``is_random`` is the sentence-order / NSP label.

Loss semantics, exactly Megatron's ``pretrain_bert``: every micro-batch's loss is its mean LM token loss
plus its mean sentence-order loss, and the step loss (and gradient) is the average of those over all
micro-batches of the global batch. So :meth:`BertSpec.forward` returns ``(micro-batch loss, 1)`` and
:meth:`nominal_count` is 1: the trainer's Σ loss / Σ count is then that average. The micro-batches of a
step are the same for every parallel layout (:mod:`mwb.core.training.batches`), so the number is
layout-independent. The two parts are also reported on their own, token-weighted over the global batch,
as ``lm_loss`` and ``sop_loss`` (what Megatron logs as "lm loss" and "sop loss").
"""
from __future__ import annotations

import torch

from mwb.core.training.model_spec import ModelSpec


class BertSpec(ModelSpec):
    arch = "bert"

    def __init__(self, cfg, vocab_size: int) -> None:
        super().__init__(cfg, vocab_size)
        self.metric_names = ("lm_loss", "sop_loss") if cfg.model.bert_binary_head else ("lm_loss",)

    def forward(self, model, batch, hidden=None):
        binary = self.cfg.model.bert_binary_head and "is_random" in batch
        out = model(tokens=batch["tokens"] if model.pre_process else None, types=batch.get("types"),
                    padding_mask=batch.get("padding_mask"),
                    labels=batch["labels"] if model.post_process else None, loss_mask=batch.get("loss_mask"),
                    nsp_labels=batch["is_random"] if binary else None, hidden=hidden, parts=True)
        if not model.post_process:
            return out
        lm_sum, count = out["lm"]
        self.record_metric("lm_loss", lm_sum, count)
        loss = lm_sum / count.clamp(min=1)  # Megatron: mean LM loss + mean sentence-order loss
        if "binary" in out:
            sop_sum, n = out["binary"]
            self.record_metric("sop_loss", sop_sum, n)
            loss = loss + sop_sum / n.clamp(min=1)
        return loss, torch.ones_like(count)

    def tokens_in(self, batch):
        return batch["tokens"].numel()

    def nominal_count(self, micro_batch, seq_length):
        return 1.0
