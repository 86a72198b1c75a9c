"""A generative Fusion-in-Decoder reader on mwb's T5 (Izacard & Grave 2021; the reader of EMDR2).

Each retrieved document is encoded on its own as ``question: q title: t context: p`` + end token (cut to
``seq_length``); the K encoder outputs are concatenated along the sequence, with their padding masks, and the
decoder cross-attends over all of them at once. T5's relative position bias lives in self-attention only, so
concatenating encoder outputs changes nothing inside each document's encoding. Decoder input ``[start] + a``,
target ``a + [end]`` — the start/end tokens of mwb's T5 data (:func:`mwb.core.data.t5.end_and_start_ids`),
so a T5 from ``mwb pretrain t5`` decodes from what it saw.

``loss``          mean token cross-entropy of the target answer, decoder over all K documents
``doc_logprobs``  log p(a_t | q, z_k, a_<t): the same decoder attending to document k's encoding alone
                  (rows B·K), ``mask`` marks the target tokens (answer + end token)
``predict``       greedy decoding over all K documents (KV cache), up to ``answer_length`` tokens
Token log-probabilities go through the model's own cross-entropy (vocab-parallel under TP).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from mwb.core.data.t5 import end_and_start_ids
from mwb.core.models.transformer import KVCache
from mwb.core.training.batches import collate
from mwb.evaluation.lm import full_vocab_logits

from .base import BatchedReader, ReaderConfig, check_batch, target_answer


def fid_source(question: str, doc: dict) -> str:
    return f"question: {question} title: {doc.get('title') or ''} context: {doc.get('text') or ''}"


class FiDReader(BatchedReader):
    kind = "fid"

    def __init__(self, model, tokenizer, cfg: ReaderConfig = ReaderConfig(), state=None) -> None:
        self.model, self.tokenizer, self.cfg, self.state = model, tokenizer, cfg, state
        self.end = self.start = self.pad = None  # no tokenizer: scores already featurised batches only
        if tokenizer is not None:
            tokenizer.require("pad", purpose="the FiD reader")
            self.end, self.start = end_and_start_ids(tokenizer)
            self.pad = tokenizer.pad

    @property
    def device(self):
        return next(self.model.parameters()).device

    # ------------------------------------------------------------------------------------------ inputs
    def featurize(self, question: str, docs: Sequence[dict], answers: Sequence[str] = ()) -> dict:
        """``enc_tokens``/``enc_mask [K, L]``, ``dec_tokens``/``labels``/``label_mask [T]`` (T =
        ``answer_length + 1``; the target is :func:`.base.target_answer`, empty without answers)."""
        L, T = self.cfg.seq_length, self.cfg.answer_length + 1
        enc = np.full((len(docs), L), self.pad, dtype=np.int64)
        enc_mask = np.zeros((len(docs), L), dtype=np.int64)
        for k, d in enumerate(docs):
            ids = list(self.tokenizer.encode(fid_source(question, d)))[: L - 1] + [self.end]
            enc[k, :len(ids)], enc_mask[k, :len(ids)] = ids, 1
        answer = target_answer(answers, docs)
        target = list(self.tokenizer.encode(answer))[: T - 1] + [self.end] if answers else [self.end]
        dec = np.full(T, self.pad, dtype=np.int64)
        labels = np.full(T, -100, dtype=np.int64)
        dec[: len(target)] = [self.start] + target[:-1]
        labels[: len(target)] = target
        return {"enc_tokens": enc, "enc_mask": enc_mask, "dec_tokens": dec, "labels": labels,
                "label_mask": (labels >= 0).astype(np.int64)}

    def batch(self, questions, docs, answers=None) -> dict:
        check_batch(questions, docs, answers)
        answers = answers if answers is not None else [()] * len(questions)
        return collate([self.featurize(q, d, a) for q, d, a in zip(questions, docs, answers)], self.device)

    # ------------------------------------------------------------------------------------------ scores
    def encode(self, batch: dict, fuse: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder outputs of every document: fused ``[B, K·L, h]`` (mask ``[B, K·L]``) or per document
        ``[B·K, L, h]``."""
        B, K, L = batch["enc_tokens"].shape
        mask = batch["enc_mask"].reshape(B * K, L)
        enc = self.model.encode(batch["enc_tokens"].reshape(B * K, L), mask)
        if fuse:
            return enc.reshape(B, K * L, -1), mask.reshape(B, K * L)
        return enc, mask

    def loss_terms(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """``(Σ target-token cross-entropy, target tokens)``: the trainer's token-style pair."""
        enc, mask = self.encode(batch, fuse=True)
        logits = self.model.decoder_logits(batch["dec_tokens"], enc, mask)
        return self.model.loss_fn(logits, batch["labels"], batch["label_mask"])

    def doc_logprobs_batch(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        B, K, _ = batch["enc_tokens"].shape
        enc, mask = self.encode(batch, fuse=False)
        dec = batch["dec_tokens"].repeat_interleave(K, 0)
        labels = batch["labels"].repeat_interleave(K, 0)
        logits = self.model.decoder_logits(dec, enc, mask)
        lp = -self.model.loss_fn.token_losses(logits, labels.clamp(min=0))
        tmask = batch["label_mask"].to(lp.dtype)
        return lp.view(B, K, -1) * tmask[:, None, :], tmask

    @torch.no_grad()
    def greedy(self, batch: dict) -> list[list[int]]:
        enc, mask = self.encode(batch, fuse=True)
        B = enc.size(0)
        cache = KVCache()
        tokens = torch.full((B, 1), self.start, dtype=torch.long, device=enc.device)
        out: list[list[int]] = [[] for _ in range(B)]
        done = [False] * B
        vocab = int(getattr(self.model, "vocab_size", None) or self.tokenizer.vocab_size)
        group = self.state.tp_group if self.state is not None else None
        for _ in range(self.cfg.answer_length):
            logits = full_vocab_logits(self.model.decoder_logits(tokens, enc, mask, cache=cache)[:, -1], group, vocab)
            nxt = logits.argmax(-1)
            for b, t in enumerate(nxt.tolist()):
                if not done[b]:
                    if t == self.end:
                        done[b] = True
                    else:
                        out[b].append(t)
            if all(done):
                break
            tokens = nxt[:, None]
        return out

    def answers(self, batch: dict, docs) -> list[str]:
        """Greedy answers decoded over all K documents."""
        return [self.tokenizer.decode(row).strip() for row in self.greedy(batch)]
