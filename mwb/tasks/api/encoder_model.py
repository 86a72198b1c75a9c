"""A pretrained encoder with a task head: the model every fine-tuning task trains.

The encoder is mwb's BERT (built through ``build_model``, so tensor/sequence parallelism applies to it as to
pretraining) with its pretraining heads removed; the task head is small and replicated over TP ranks. Heads:

``multiple_choice``       pooled [CLS] → dropout → linear(h, 1), scored per choice (Megatron's RACE head)
``classification``        pooled [CLS] → dropout → linear(h, num_labels)
``regression``            pooled [CLS] → dropout → linear(h, 1), squared error (STS-B-style scores)
``token_classification``  every token → dropout → linear(h, num_labels)
``span``                  every token → linear(h, 2): start and end logits (SQuAD-style extraction)

Losses are sums with a count (examples, or labelled tokens) so the trainer normalises over the global batch
exactly as in pretraining, which keeps every layout equal to one process.
"""
from __future__ import annotations

import dataclasses
import torch
import torch.nn.functional as F
from torch import nn

from mwb.core.config import ModelConfig
from mwb.core.models.init import full_init
from mwb.core.parallel.collectives import gather_from_sequence
from mwb.core.parallel.dims import LayoutError

HEADS = ("multiple_choice", "classification", "regression", "token_classification", "span")
POOLED = ("multiple_choice", "classification", "regression")
PRETRAINING_ONLY = ("lm_transform", "head", "loss_fn", "binary_classifier")


def head_outputs(head: str, num_labels: int) -> int:
    return {"multiple_choice": 1, "regression": 1, "span": 2}.get(head, num_labels)


class TaskModel(nn.Module):
    def __init__(self, encoder: nn.Module, head: str, num_labels: int, dropout: float, state=None) -> None:
        super().__init__()
        if head not in HEADS:
            raise ValueError(f"unknown task head '{head}' ({', '.join(HEADS)})")
        for name in PRETRAINING_ONLY:  # unused by tasks: no gradient, no optimizer state, no decay
            if hasattr(encoder, name):
                delattr(encoder, name)
        encoder.binary_classifier = None
        self.encoder, self.head_kind, self.state = encoder, head, state
        self.pre_process = self.post_process = True
        h = encoder.cfg.hidden_size
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(h, head_outputs(head, num_labels))
        for p in self.classifier.parameters():  # replicated over TP (see tensor_parallel._mark)
            p.tp_dim, p.tp_rank, p.full_shape, p.sequence_parallel = None, 0, tuple(p.shape), False

    @property
    def shares_embedding(self) -> bool:
        return False

    def features(self, tokens, types=None, padding_mask=None):
        hidden, _ = self.encoder(tokens=tokens, types=types, padding_mask=padding_mask, return_hidden=True)
        if self.head_kind in POOLED:
            return self.encoder.pooler(hidden)  # dense + tanh on [CLS] (gathers the sequence under SP)
        st = self.state
        if st is not None and st.sp:  # the encoder returns this rank's sequence slice under SP
            hidden = gather_from_sequence(hidden, st.tp_group, grad_reduce=False)
        return hidden

    def forward(self, tokens, types=None, padding_mask=None, labels=None):
        """``tokens [b, s]`` (multiple choice: ``[b, choices, s]``). Returns logits, or with ``labels``
        ``(loss_sum, count)``: summed cross-entropy over examples (token heads: over labelled tokens)."""
        choices = None
        if self.head_kind == "multiple_choice":
            b, choices, s = tokens.shape
            flat = lambda t: None if t is None else t.reshape(b * choices, s)  # noqa: E731
            tokens, types, padding_mask = flat(tokens), flat(types), flat(padding_mask)
        logits = self.classifier(self.dropout(self.features(tokens, types, padding_mask))).float()
        if choices is not None:
            logits = logits.view(-1, choices)
        if labels is None:
            return logits
        if self.head_kind == "span":  # labels [b, 2]: start, end
            start, end = logits[..., 0], logits[..., 1]
            loss = F.cross_entropy(start, labels[:, 0], reduction="sum") + \
                F.cross_entropy(end, labels[:, 1], reduction="sum")
            return loss / 2, torch.tensor(float(labels.size(0)))
        if self.head_kind == "regression":  # labels [b] floats: summed squared error
            return ((logits.squeeze(-1) - labels.float()) ** 2).sum(), torch.tensor(float(labels.size(0)))
        flat_logits = logits.reshape(-1, logits.size(-1))
        flat_labels = labels.reshape(-1).long()
        valid = flat_labels >= 0
        loss = F.cross_entropy(flat_logits, flat_labels.clamp(min=0), reduction="none")
        return (loss * valid).sum(), valid.sum().float()


def build_task_model(model_cfg: ModelConfig, state, vocab_size: int, head: str, num_labels: int, seed: int,
                     device="cpu", dtype=None) -> TaskModel:
    """Encoder (randomly initialised; :func:`load_encoder` fills it) plus an initialised task head."""
    from mwb.core.compose import build_model

    if model_cfg.arch != "bert":
        raise LayoutError(f"fine-tuning tasks use a BERT encoder; the checkpoint holds a '{model_cfg.arch}' model")
    if state.pp_size > 1:
        raise LayoutError("fine-tuning runs the encoder on one pipeline stage: use --pp 1")
    if head in POOLED and not model_cfg.bert_binary_head:
        model_cfg = dataclasses.replace(model_cfg, bert_binary_head=True)  # the pooler feeds the head
    encoder = build_model(model_cfg, state, vocab_size, seed, device, dtype)
    model = TaskModel(encoder, head, num_labels, model_cfg.dropout, state).to(device)
    with torch.no_grad():
        for name, p in model.classifier.named_parameters():
            p.copy_(full_init(f"classifier.{name}", tuple(p.shape), model_cfg.init_std, model_cfg.num_layers,
                              seed).to(p.dtype))
    return model


def load_weights(model: TaskModel, tensors: dict, vocab: int, source: str, encoder_only: bool) -> list[str]:
    """Copy global tensors into the (possibly sharded) model and return the names that were not found.
    ``encoder_only``: ``tensors`` come from a pretrained BERT (named ``layers.0...``) and the head keeps its
    initial value; otherwise they come from a fine-tuned task checkpoint (``encoder.…``, ``classifier.…``)."""
    missing: list[str] = []
    chunks = [model.encoder] if encoder_only else [model]
    copy_available(chunks, tensors, vocab, model.encoder.cfg.tie_embeddings, source, missing)
    return missing


def copy_available(chunks, tensors: dict, vocab: int, tied: bool, source: str, missing: list) -> None:
    from mwb.core.checkpoint.shards import canonical, local_slice, unpadded_shape
    from mwb.core.errors import CheckpointError
    with torch.no_grad():
        for chunk in chunks:
            for name, p in chunk.named_parameters():
                canon = canonical(name, tied)
                if canon not in tensors:
                    missing.append(canon)
                    continue
                full = tensors[canon]
                want = unpadded_shape(canon, p, vocab)
                if tuple(full.shape) != want:
                    raise CheckpointError(f"{source}: {canon} has shape {list(full.shape)}, the task model needs "
                                          f"{list(want)}")
                p.data.copy_(local_slice(full, p))


def predict(model: TaskModel, features: list[dict], batch_size: int, device, decode) -> list:
    """Predictions for ``features``, in order: ``decode(logits, feature)`` per feature with numpy logits (the
    task's :meth:`~mwb.tasks.api.base.Task.decode`); call on every TP rank."""
    from mwb.core.training.batches import collate
    model.eval()
    preds = []
    with torch.no_grad():
        for i in range(0, len(features), batch_size):
            chunk = features[i:i + batch_size]
            batch = collate(chunk, device)
            logits = model(batch["tokens"], batch.get("types"), batch.get("padding_mask")).cpu().numpy()
            preds.extend(decode(row, f) for row, f in zip(logits, chunk))
    model.train()
    return preds
