"""The reader interface that open-domain QA training and evaluation share, and what every reader needs.

Why one interface: the joint retriever–reader losses of Sachan et al. (individual top-k, ACL 2021; EMDR2,
NeurIPS 2021) need only log p(answer | question, document) per retrieved document, and evaluation needs only
answers; an extractive BERT reader and a T5 Fusion-in-Decoder reader both give them, so the losses, the
training command and ``mwb eval qa --reader`` work with either.

A reader wraps a model (an ``nn.Module``, possibly tensor-parallel) and its tokenizer:

``loss(questions, docs, answers)``  the reader's own cross-entropy (a scalar, mean over questions / answer
                                    tokens): FiD decodes the answer attending over all K documents jointly;
                                    the extractive reader maximises the marginal likelihood of every span that
                                    matches an answer, over all K documents (start/end normalised over them)
``doc_logprobs(questions, docs, answers)``  ``(lp [B, K, T], mask [B, T])``: log p(a_t | q, z_k, a_<t) with
                                    document k alone (FiD: the decoder attends to doc k only). Extractive:
                                    T = 1 and lp = log p(answer span | q, z_k) = logsumexp over the matching
                                    spans of doc k (start and end normalised within doc k); a document with no
                                    matching span gets :data:`NO_MATCH`, and ``mask`` is 0 for a question no
                                    document answers. Differentiable (the individual top-k loss trains the
                                    reader through it; EMDR2 detaches it).
``predict(questions, docs)``        answer strings (FiD: greedy decoding over all K; extractive: the best-scoring
                                    span over the K documents)

``docs[i][k] = {"id", "title", "text"}``; ``answers[i]`` lists gold answers; the generative readers' target
is :func:`target_answer` (the first one the documents hold, else the first). Every question must have the
same number K of documents.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Protocol, Sequence, runtime_checkable

from torch import Tensor

from mwb.core.config import ConfigError

NO_MATCH = -1.0e4  # log-probability of an answer a document cannot produce (finite: keeps logsumexp grads finite)
KINDS = ("extractive", "fid", "causal")


@runtime_checkable
class Reader(Protocol):
    kind: str

    def loss(self, questions: Sequence[str], docs: Sequence[Sequence[dict]],
             answers: Sequence[Sequence[str]]) -> Tensor: ...

    def doc_logprobs(self, questions: Sequence[str], docs: Sequence[Sequence[dict]],
                     answers: Sequence[Sequence[str]]) -> tuple[Tensor, Tensor]: ...

    def predict(self, questions: Sequence[str], docs: Sequence[Sequence[dict]]) -> list[str]: ...


class BatchedReader:
    """The :class:`Reader` interface on top of what each kind defines: ``batch(questions, docs[, answers])``,
    ``loss_terms(batch) -> (total, count)``, ``doc_logprobs_batch(batch)`` and ``answers(batch, docs)``
    (prediction, run here in eval mode and the model's mode restored after)."""

    def loss(self, questions, docs, answers) -> Tensor:
        total, count = self.loss_terms(self.batch(questions, docs, answers))
        return total / count.clamp(min=1.0)

    def doc_logprobs(self, questions, docs, answers):
        return self.doc_logprobs_batch(self.batch(questions, docs, answers))

    def predict(self, questions, docs) -> list[str]:
        was = self.model.training
        self.model.eval()
        try:
            return self.answers(self.batch(questions, docs), docs)
        finally:
            self.model.train(was)


@dataclass(frozen=True)
class ReaderConfig:
    """Input sizes of a reader (both kinds): ``seq_length`` tokens per (question, document) input;
    extractive: spans of at most ``max_answer_tokens`` tokens, ``max_spans`` matching spans kept per document;
    FiD: answers of at most ``answer_length`` tokens (training targets and greedy decoding)."""
    seq_length: int = 192
    max_answer_tokens: int = 10
    max_spans: int = 8
    answer_length: int = 16

    def __post_init__(self) -> None:
        if self.seq_length < 8 or self.max_answer_tokens < 1 or self.max_spans < 1 or self.answer_length < 1:
            raise ConfigError(f"reader sizes must be positive (seq_length ≥ 8): {self}")


def check_batch(questions: Sequence[str], docs: Sequence[Sequence[dict]],
                answers: Optional[Sequence[Sequence[str]]] = None) -> int:
    """K, the documents per question; ValueError when the lists disagree or K varies or is 0."""
    if len(docs) != len(questions) or (answers is not None and len(answers) != len(questions)):
        raise ValueError(f"{len(questions)} questions, {len(docs)} document lists"
                         + (f", {len(answers)} answer lists" if answers is not None else ""))
    ks = {len(d) for d in docs}
    if len(ks) > 1 or 0 in ks:
        raise ValueError(f"every question needs the same number (≥ 1) of documents, got {sorted(ks)}")
    return ks.pop() if ks else 0


def doc_context(doc: dict) -> str:
    """What a reader reads of a document: its title, then its text."""
    title = (doc.get("title") or "").strip()
    text = (doc.get("text") or "").strip()
    return f"{title}. {text}" if title else text


def target_answer(answers: Sequence[str], docs: Sequence[dict]) -> str:
    """The answer a generative reader is trained to write: the first gold answer that one of the documents
    holds (what it can read there), else the first. DPR's TriviaQA lists put aliases such as "K (element)"
    before the name the passages use ("Potassium"); training on those would teach the alias, not reading."""
    for a in answers:
        if holds_answer(docs, [a]):
            return a
    return answers[0] if answers else ""


def holds_answer(docs: Sequence[dict], answers: Sequence[str]) -> bool:
    """Whether one of ``docs`` holds one of ``answers`` (:func:`answer_char_spans` on its title and text)."""
    return any(answer_char_spans(doc_context(d), answers) for d in docs)


def answer_char_spans(context: str, answers: Sequence[str]) -> list[tuple[int, int]]:
    """Every occurrence of every answer in ``context`` as ``(start, end)`` characters: case-insensitive and
    on word boundaries (so "US" does not match inside "Russia"); sorted, without duplicates."""
    spans = set()
    for a in answers:
        a = (a or "").strip()
        if not a:
            continue
        for m in re.finditer(rf"(?<!\w){re.escape(a)}(?!\w)", context, flags=re.IGNORECASE):
            spans.add(m.span())
    return sorted(spans)
