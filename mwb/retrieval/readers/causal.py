"""A generative reader on a decoder-only LM (GPT or Llama shape: ``smollm2-135m``, ``mwb pretrain gpt``).

Why: the extractive and FiD readers need a reader trained from scratch or a pretrained T5, and no pretrained
T5 is offline here; a pretrained causal LM already reads and answers, so it is the one reader that works
before (and without) thousands of training steps. It gives the same interface: log p(answer | q, z_k).

Input: the K documents, then the question, then the answer (the decoder-only counterpart of FiD's fusion:
the answer attends to every document)::

    Title: <title>\\n<text>\\n\\n   (× K, each cut so that it and the question fit ``seq_length`` tokens)
    Question: <question>\\nAnswer: <answer>\\n

The target is `` <answer>`` (:func:`.base.target_answer`) and the newline that ends it. Rows are
left-padded (key-padding mask and per-row positions, so a padded row computes what it computes alone) and
the answer sits at the end of the row, so only the last ``answer_length + 2`` positions go through the
output layer: the vocabulary head is the costliest matmul of a small LM, and every other position's logits
would be thrown away.

``loss``          mean cross-entropy of the target answer's tokens, reading all K documents
``doc_logprobs``  log p(a_t | q, z_k, a_<t) with document k alone in the prompt (rows B·K)
``predict``       greedy decoding from all K documents (:func:`mwb.evaluation.generation.generate`: KV cache,
                  tensor-parallel logits gathered), up to ``answer_length`` tokens, ending at the newline
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from mwb.core.config import ConfigError
from mwb.core.training.batches import collate
from mwb.evaluation.generation import SamplingParams, generate
from mwb.evaluation.lm import LanguageModel

from .base import BatchedReader, ReaderConfig, check_batch, target_answer

ANSWER_END = "\n"


def doc_block(doc: dict) -> str:
    return f"Title: {(doc.get('title') or '').strip()}\n{(doc.get('text') or '').strip()}\n\n"


def question_block(question: str) -> str:
    return f"Question: {question.strip()}\nAnswer:"


class CausalReader(BatchedReader):
    kind = "causal"

    def __init__(self, model, tokenizer, cfg: ReaderConfig = ReaderConfig(), state=None) -> None:
        self.model, self.tokenizer, self.cfg, self.state = model, tokenizer, cfg, state
        self.pad = self.end = None
        if tokenizer is not None:
            self.pad = next((t for t in (tokenizer.pad, tokenizer.eod) if t is not None), 0)
            self.end = list(tokenizer.encode(ANSWER_END))

    @property
    def device(self):
        return next(self.model.parameters()).device

    @property
    def keep(self) -> int:
        """Positions whose logits are computed: the last prompt token + the ``answer_length + 1`` targets."""
        return self.cfg.answer_length + 2

    # ------------------------------------------------------------------------------------------ inputs
    def pieces(self, question: str, docs: Sequence[dict]) -> tuple[list[int], list[list[int]]]:
        """Token ids of the question block and of each document block, each document cut so that it and the
        question fit ``seq_length`` (tokenised once; the full and per-document prompts are built from them)."""
        q = list(self.tokenizer.encode(question_block(question)))[-(self.cfg.seq_length // 2):]
        room = self.cfg.seq_length - len(q)
        return q, [list(self.tokenizer.encode(doc_block(d)))[:room] for d in docs]

    def prompt_ids(self, question: str, docs: Sequence[dict]) -> list[int]:
        """Token ids of the prompt: the documents' blocks, then the question's."""
        q, blocks = self.pieces(question, docs)
        return [t for b in blocks for t in b] + q

    def target_ids(self, answers: Sequence[str], docs: Sequence[dict] = ()) -> list[int]:
        if not answers:
            return []
        answer = target_answer(answers, docs).strip()
        room = max(1, self.cfg.answer_length + 1 - len(self.end))  # answer + end fit the T target positions
        return list(self.tokenizer.encode(" " + answer))[:room] + self.end

    def row(self, prompt: list[int], target: list[int], length: int) -> tuple[np.ndarray, np.ndarray]:
        """``(tokens, real)`` of one left-padded row of ``length`` tokens: prompt + target."""
        ids = prompt + target
        tokens = np.full(length, self.pad, dtype=np.int64)
        real = np.zeros(length, dtype=np.int64)
        tokens[length - len(ids):], real[length - len(ids):] = ids, 1
        return tokens, real

    def featurize(self, question: str, docs: Sequence[dict], answers: Sequence[str] = ()) -> dict:
        """``tokens``/``real [K·seq_length + T]`` (all K documents), ``doc_tokens``/``doc_real [K, seq_length
        + T]`` (one document each), ``labels [keep]`` (the targets right-aligned with the kept logits; T =
        ``answer_length + 1``), ``prompt_length`` (for decoding)."""
        S, T = self.cfg.seq_length, self.cfg.answer_length + 1
        target = self.target_ids(answers, docs)
        q, blocks = self.pieces(question, docs)
        full = [t for b in blocks for t in b] + q
        tokens, real = self.row(full, target, len(docs) * S + T)
        doc_rows = [self.row(b + q, target, S + T) for b in blocks]
        labels = np.full(self.keep, -100, dtype=np.int64)
        if target:  # logits at kept position j predict the token after it; the last position predicts nothing
            labels[self.keep - 1 - len(target): self.keep - 1] = target
        return {"tokens": tokens, "real": real, "doc_tokens": np.stack([r[0] for r in doc_rows]),
                "doc_real": np.stack([r[1] for r in doc_rows]), "labels": labels,
                "prompt_length": np.int64(len(full))}

    def batch(self, questions, docs, answers=None) -> dict:
        check_batch(questions, docs, answers)
        answers = answers if answers is not None else [()] * len(questions)
        return collate([self.featurize(q, d, a) for q, d, a in zip(questions, docs, answers)], self.device)

    # ------------------------------------------------------------------------------------------ scores
    def last_logits(self, tokens: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """Logits of the last ``keep`` positions (vocab-parallel under TP), rows left-padded."""
        positions = (real.cumsum(-1) - 1).clamp(min=0)
        cfg = getattr(self.model, "cfg", None)
        learned = cfg is not None and cfg.position_embedding == "learned"
        if learned and int(positions.max()) >= cfg.max_position_embeddings:
            raise ConfigError(f"a reader input has {int(positions.max()) + 1} tokens but the model has "
                              f"{cfg.max_position_embeddings} positions: lower --reader-length or the documents per "
                              f"question")
        mask = real if bool((real == 0).any()) else None
        return self.model(tokens, position_ids=positions, attention_mask=mask, logits_to_keep=self.keep)

    def loss_terms(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """``(Σ target-token cross-entropy, target tokens)``: the trainer's token-style pair."""
        return self.model.loss_fn(self.last_logits(batch["tokens"], batch["real"]), batch["labels"])

    def doc_logprobs_batch(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        B, K, L = batch["doc_tokens"].shape
        logits = self.last_logits(batch["doc_tokens"].reshape(B * K, L), batch["doc_real"].reshape(B * K, L))
        labels = batch["labels"].repeat_interleave(K, 0)
        lp = -self.model.loss_fn.token_losses(logits, labels.clamp(min=0))
        tmask = (batch["labels"] >= 0).to(lp.dtype)
        return lp.view(B, K, -1) * tmask[:, None, :], tmask

    @torch.no_grad()
    def greedy(self, batch: dict) -> list[list[int]]:
        """Greedy answer tokens from the prompts of ``batch`` (the targets in it, if any, are ignored)."""
        prompts = []
        for tokens, real, n in zip(batch["tokens"].tolist(), batch["real"].tolist(), batch["prompt_length"].tolist()):
            ids = [t for t, r in zip(tokens, real) if r]
            prompts.append(ids[:n])
        lm = LanguageModel(self.model, self.tokenizer, self.state)
        params = SamplingParams(max_tokens=self.cfg.answer_length, temperature=0.0, stop=[ANSWER_END])
        return [g.tokens for g in generate(lm, prompts, params, batch_size=len(prompts))]

    def answers(self, batch: dict, docs) -> list[str]:
        return [self.tokenizer.decode(row).strip() for row in self.greedy(batch)]
