"""An extractive BERT reader (Sachan et al., ACL 2021; DPR's reader): a span over each retrieved passage.

Each (question, document) pair is the input ``[CLS] question [SEP] title. passage [SEP]`` to a BERT encoder
with a start/end head (:class:`SpanModel`: parameters named as ``mwb finetune squad``'s encoder + ``span`` head,
so a SQuAD checkpoint is a reader; tensor and sequence parallelism apply to the encoder as in pretraining).
Inputs and character offsets are the SQuAD machinery of :mod:`mwb.core.data.spans`, so an answer comes back
as an exact substring of the passage.

A matching span is any occurrence of a gold answer in the document (case-insensitive, on word boundaries,
:func:`.base.answer_char_spans`) that lies inside the kept tokens and is at most ``max_answer_tokens`` long.
Probabilities (start and end independent, as in BERT's SQuAD head):

``loss``          −log Σ_k Σ_{(s,e) matching in z_k} P(start = s) P(end = e), start and end softmaxes taken
                  over the tokens of *all* K documents together (shared normalisation, Clark & Gardner 2018),
                  averaged over the questions that have at least one matching span (the others carry no signal)
``doc_logprobs``  log Σ_{(s,e) matching in z_k} P_k(s) P_k(e) with softmaxes over document k alone
``predict``       the span with the highest start + end logit over all documents (spans with start ≤ end,
                  at most ``max_answer_tokens`` long, inside the passage)
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from torch import nn

from mwb.core.compose import build_model
from mwb.core.data.spans import span_inputs
from mwb.core.models.init import full_init
from mwb.core.parallel.collectives import gather_from_sequence
from mwb.core.training.batches import collate

from .base import NO_MATCH, BatchedReader, ReaderConfig, answer_char_spans, check_batch, doc_context

MASKED = -1.0e9  # logit of a position that cannot start or end an answer
PRETRAINING_ONLY = ("lm_transform", "head", "loss_fn", "binary_classifier", "pooler")


class SpanModel(nn.Module):
    """A BERT encoder without its pretraining heads + ``classifier``, a linear start/end head (replicated over
    TP ranks). ``forward(tokens, types, padding_mask) → [N, L, 2]`` logits."""

    def __init__(self, encoder: nn.Module, state=None) -> None:
        super().__init__()
        for name in PRETRAINING_ONLY:
            if hasattr(encoder, name):
                delattr(encoder, name)
        encoder.binary_classifier = encoder.pooler = None
        self.encoder, self.state = encoder, state
        self.pre_process = self.post_process = True
        self.classifier = nn.Linear(encoder.cfg.hidden_size, 2)
        for p in self.classifier.parameters():  # replicated over TP (see tensor_parallel._mark)
            p.tp_dim, p.tp_rank, p.full_shape, p.sequence_parallel = None, 0, tuple(p.shape), False

    @property
    def shares_embedding(self) -> bool:
        return False

    def forward(self, tokens, types=None, padding_mask=None):
        hidden, _ = self.encoder(tokens=tokens, types=types, padding_mask=padding_mask, return_hidden=True)
        if self.state is not None and self.state.sp:  # the encoder returns this rank's sequence slice
            hidden = gather_from_sequence(hidden, self.state.tp_group, grad_reduce=False)
        return self.classifier(hidden)


def build_span_model(model_cfg, state, vocab_size: int, seed: int, device="cpu", dtype=None) -> SpanModel:
    """A randomly initialised reader for this rank (the encoder as :func:`build_model` makes it, the head by
    name, so every layout starts from the one-process weights)."""
    model = SpanModel(build_model(model_cfg, state, vocab_size, seed, device, dtype), state).to(device)
    with torch.no_grad():
        for name, p in model.classifier.named_parameters():
            p.copy_(full_init(f"classifier.{name}", tuple(p.shape), model_cfg.init_std, model_cfg.num_layers,
                              seed).to(p.dtype))
    return model


class ExtractiveReader(BatchedReader):
    kind = "extractive"

    def __init__(self, model, tokenizer, cfg: ReaderConfig = ReaderConfig()) -> None:
        self.model, self.tokenizer, self.cfg = model, tokenizer, cfg

    @property
    def device(self):
        return next(self.model.parameters()).device

    # ------------------------------------------------------------------------------------------ inputs
    def featurize(self, question: str, docs: Sequence[dict], answers: Sequence[str] = ()) -> dict:
        """Numpy inputs of one question: ``tokens``/``types``/``padding_mask``/``char_start``/``char_end``
        ``[K, L]`` and ``spans [K, max_spans, 2]`` (matching token spans, -1 padded)."""
        L, M = self.cfg.seq_length, self.cfg.max_spans
        rows = [span_inputs(question, doc_context(d), None, None, self.tokenizer, L) for d in docs]
        spans = np.full((len(docs), M, 2), -1, dtype=np.int64)
        for k, (doc, row) in enumerate(zip(docs, rows)):
            found = token_spans(row["char_start"], row["char_end"], answer_char_spans(doc_context(doc), answers),
                                self.cfg.max_answer_tokens)
            for j, (s, e) in enumerate(found[:M]):
                spans[k, j] = (s, e)
        out = {key: np.stack([r[key] for r in rows]) for key in
               ("tokens", "types", "padding_mask", "char_start", "char_end")}
        out["spans"] = spans
        return out

    def batch(self, questions, docs, answers=None) -> dict:
        check_batch(questions, docs, answers)
        answers = answers if answers is not None else [()] * len(questions)
        return collate([self.featurize(q, d, a) for q, d, a in zip(questions, docs, answers)], self.device)

    # ------------------------------------------------------------------------------------------ scores
    def logits(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """Start and end logits ``[B, K, L]`` (fp32), ``MASKED`` outside the passage."""
        B, K, L = batch["tokens"].shape
        flat = lambda t: t.reshape(B * K, L)  # noqa: E731
        out = self.model(flat(batch["tokens"]), flat(batch["types"]), flat(batch["padding_mask"])).float()
        out = out.view(B, K, L, 2)
        outside = batch["char_start"] < 0
        return out[..., 0].masked_fill(outside, MASKED), out[..., 1].masked_fill(outside, MASKED)

    @staticmethod
    def _span_logprobs(start_lp: torch.Tensor, end_lp: torch.Tensor, spans: torch.Tensor) -> torch.Tensor:
        """``[B, K, M]`` log P(s) + log P(e) of the listed spans (``NO_MATCH`` on padding). ``start_lp`` and
        ``end_lp`` are ``[B, K, L]``."""
        valid = spans[..., 0] >= 0
        s, e = spans[..., 0].clamp(min=0), spans[..., 1].clamp(min=0)
        lp = start_lp.gather(2, s) + end_lp.gather(2, e)
        return lp.masked_fill(~valid, NO_MATCH)

    def loss_terms(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """``(Σ −log marginal over the answered questions, their number)``: the trainer's token-style pair."""
        start, end = self.logits(batch)
        B, K, L = start.shape
        start_lp = F.log_softmax(start.reshape(B, K * L), -1).view(B, K, L)
        end_lp = F.log_softmax(end.reshape(B, K * L), -1).view(B, K, L)
        lp = self._span_logprobs(start_lp, end_lp, batch["spans"]).reshape(B, -1)
        has = (batch["spans"][..., 0] >= 0).reshape(B, -1).any(-1)
        nll = -torch.logsumexp(lp, -1)
        return (nll * has).sum(), has.sum().float()

    def doc_logprobs_batch(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        start, end = self.logits(batch)
        lp = self._span_logprobs(F.log_softmax(start, -1), F.log_softmax(end, -1), batch["spans"])
        matched = batch["spans"][..., 0] >= 0                          # [B, K, M]
        per_doc = torch.logsumexp(lp, -1).masked_fill(~matched.any(-1), NO_MATCH)  # [B, K]
        return per_doc.unsqueeze(-1), matched.any(-1).any(-1, keepdim=True).float()

    @torch.no_grad()
    def best_spans(self, batch: dict) -> list[tuple[int, int, int]]:
        """Per question ``(doc k, char_start, char_end)`` of the highest-scoring span."""
        start, end = self.logits(batch)
        B, K, L = start.shape
        scores = start[..., :, None] + end[..., None, :]                  # [B, K, L(start), L(end)]
        pos = torch.arange(L, device=start.device)
        width = pos[None, :] - pos[:, None]
        scores = scores.masked_fill((width < 0) | (width >= self.cfg.max_answer_tokens), 2 * MASKED)
        best = scores.reshape(B, -1).argmax(-1)
        out = []
        for b, flat in enumerate(best.tolist()):
            k, rest = divmod(flat, L * L)
            s, e = divmod(rest, L)
            out.append((k, int(batch["char_start"][b, k, s]), int(batch["char_end"][b, k, e])))
        return out

    def answers(self, batch: dict, docs) -> list[str]:
        """The best span's text (from the document's own characters) for each question."""
        return [doc_context(d[k])[s:e] if s >= 0 else "" for d, (k, s, e) in zip(docs, self.best_spans(batch))]


def token_spans(char_start: np.ndarray, char_end: np.ndarray, char_spans, max_tokens: int) -> list[tuple[int, int]]:
    """Token ``(start, end)`` of each character span that the kept tokens cover exactly at its edges (the
    first token starts at or before it and the last ends at or after it, as SQuAD labels are made)."""
    out = []
    for a0, a1 in char_spans:
        inside = np.nonzero((char_end > a0) & (char_start < a1) & (char_start >= 0))[0]
        if len(inside) and char_start[inside[0]] <= a0 and char_end[inside[-1]] >= a1 \
                and inside[-1] - inside[0] < max_tokens:
            out.append((int(inside[0]), int(inside[-1])))
    return sorted(set(out))
