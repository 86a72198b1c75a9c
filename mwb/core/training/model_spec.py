"""What the trainer needs to know about a model family: how to build a stage and run a batch through it.

The trainer is one loop for GPT, BERT and T5; each family supplies a :class:`ModelSpec`. ``forward``
returns the stage's output: hidden states for a stage that is not last, ``(loss_sum, token_count)`` for the
last stage with labels. Losses are token sums so that the trainer can normalise by the token count of the
whole global batch, which keeps every layout's loss and gradients identical to one process.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ..config import ConfigError, RunConfig
from ..compose import build_model
from ..parallel.stages import StageSpec


class ModelSpec:
    arch = "gpt"

    def __init__(self, cfg: RunConfig, vocab_size: int) -> None:
        self.cfg, self.vocab_size = cfg, vocab_size
        self.reset_metrics()

    def build_chunk(self, state, stage: StageSpec, device, dtype: Optional[torch.dtype]) -> nn.Module:
        return build_model(self.cfg.model, state, self.vocab_size, self.cfg.train.seed, device, dtype,
                           stage.layer_ids, stage.pre_process, stage.post_process)

    def forward(self, model: nn.Module, batch: dict, hidden: Optional[torch.Tensor] = None):
        raise NotImplementedError

    def tokens_in(self, batch: dict) -> int:
        """Tokens processed by one micro-batch (throughput accounting)."""
        raise NotImplementedError

    # Loss components reported next to the training loss (e.g. BERT's "lm loss" and "sop loss"). A spec
    # names them up front (every rank must agree on the list for the reduction) and records (sum, count)
    # pairs from forward on the last stage; the trainer reduces them over the global batch.
    metric_names: tuple[str, ...] = ()

    def reset_metrics(self) -> None:
        self._metric_sums: dict = {}

    def record_metric(self, name: str, total: torch.Tensor, count: torch.Tensor) -> None:
        # kept as tensors, not floats: no device sync per micro-batch
        pair = torch.stack([total.detach().double(), count.detach().double()])
        self._metric_sums[name] = self._metric_sums[name] + pair if name in self._metric_sums else pair

    def metric_sums(self, device) -> torch.Tensor:
        """``[len(metric_names), 2]`` float64 (Σ value, Σ count) recorded since :meth:`reset_metrics`."""
        zero = torch.zeros(2, dtype=torch.float64, device=device)
        return torch.stack([self._metric_sums[n].to(device) if n in self._metric_sums else zero
                            for n in self.metric_names])

    def nominal_count(self, micro_batch: int, seq_length: int) -> float:
        """A fixed stand-in for the loss-token count of one micro-batch, used to keep the backward pass
        well scaled (fp16); the exact global count replaces it after the data-parallel reduction."""
        return float(micro_batch * seq_length)

    def hidden_shape(self, micro_batch: int, seq_length: int, state,
                     batch: Optional[dict] = None) -> tuple[int, ...]:
        """Shape of the activation sent between pipeline stages for micro-batch ``batch``."""
        seq = seq_length // (state.tp_size if state.sp else 1) // state.cp_size
        return (micro_batch, seq, self.cfg.model.hidden_size)


class GPTSpec(ModelSpec):
    arch = "gpt"

    def forward(self, model, batch, hidden=None):
        tokens = batch["tokens"]
        inputs, labels = tokens[:, :-1], tokens[:, 1:]
        loss_mask = batch.get("loss_mask")
        if loss_mask is not None and loss_mask.size(1) == tokens.size(1):
            loss_mask = loss_mask[:, 1:]
        position_ids = document_ids = None
        if "doc_ids" in batch:  # packed rows (mwb.core.data.packing): attention within a document, positions per
            # document (Megatron's --reset-attention-mask --reset-position-ids)
            document_ids, position_ids = batch["doc_ids"][:, :-1], batch["position_ids"][:, :-1]
        elif self.cfg.train.pack:
            raise ConfigError("train.pack is set but this job's samples are not packed (--pack packs the samples "
                              "of generative fine-tuning: mwb finetune TASK --pack)")
        cp = getattr(model, "cp", None)
        if cp is not None and document_ids is not None:
            raise ConfigError("packed rows (--pack) do not run under context parallelism; use --cp 1")
        if cp is not None:  # context parallel: this rank's two sequence chunks and their positions
            from ..parallel.context import zigzag_positions, zigzag_slice
            inputs, labels = zigzag_slice(inputs, cp.rank, cp.size), zigzag_slice(labels, cp.rank, cp.size)
            loss_mask = None if loss_mask is None else zigzag_slice(loss_mask, cp.rank, cp.size)
            position_ids = zigzag_positions(inputs.size(1), cp.rank, cp.size, inputs.device)[None]
        packed = {} if document_ids is None else {"document_ids": document_ids}
        return model(tokens=inputs if model.pre_process else None, hidden=hidden,
                     labels=labels if model.post_process else None, loss_mask=loss_mask,
                     position_ids=position_ids, **packed)

    def tokens_in(self, batch):
        t = batch["tokens"]
        return t.size(0) * (t.size(1) - 1)


def document_tokens(batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(input positions that hold a document's token, all input positions) of a GPT micro-batch of fine-tuning
    samples, as tensors (no device sync). Packed rows: the positions whose ``doc_ids`` are not padding's.
    One document per row: the positions up to its last target token (what follows carries no loss)."""
    tokens = batch["tokens"]
    if "doc_ids" in batch:
        return (batch["doc_ids"][:, :-1] >= 0).sum(), torch.full((), tokens[:, :-1].numel(), device=tokens.device)
    if "loss_mask" not in batch:  # a pretraining-style stream (SGEAT's domain-adaptive training): no padding
        total = torch.tensor(tokens[:, :-1].numel(), device=tokens.device)
        return total, total
    mask = batch["loss_mask"]
    seq = tokens.size(1) - 1
    idx = torch.arange(1, mask.size(1) + 1, device=mask.device)
    length = (mask.bool() * idx).amax(dim=1)  # up to and including the last target token; 0 without one
    return length.clamp(max=seq).sum(), torch.full((), tokens.size(0) * seq, device=tokens.device)


class PaddingMetric:
    """Mixin for a GPT spec of fine-tuning samples: reports ``padding``, the share of the step's input positions
    that hold no document's token (padding after a document, or after a packed row's last one), so that a run
    shows its non-padding throughput (``nonpad_tokens_per_s`` in metrics.jsonl) packed or not."""

    metric_names = ("padding",)

    def forward(self, model, batch, hidden=None):
        out = super().forward(model, batch, hidden)
        if model.post_process:
            real, total = document_tokens(batch)
            self.record_metric("padding", total - real, total)
        return out
