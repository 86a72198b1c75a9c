"""Training a reader alone on the shared trainer: the objective module ``mwb finetune qa-reader`` plugs into
the fine-tuning runner (:mod:`mwb.tasks.api.finetune`), like the encoder and generative objectives.

The runner calls ``featurize`` (examples → fixed-shape numpy samples, one per question with its K passages),
``make_spec`` (a :class:`ReaderSpec`: the reader model for this rank with the pretrained weights copied in,
and the reader's own loss as the trainer's ``(Σ loss, count)`` pair — questions for the extractive reader,
answer tokens for FiD and causal — so every data-parallel layout reduces to the one-process loss) and
``dev_predictions`` (answers of the model being trained, scored by the task's EM/F1 after every epoch).
A task using it exposes ``reader`` (extractive | fid | causal) and ``reader_config``
(:class:`.base.ReaderConfig`).
"""
from __future__ import annotations

from typing import Optional

import torch

from mwb.core.config import ConfigError
from mwb.core.training.batches import collate
from mwb.core.training.model_spec import ModelSpec

from .base import doc_context
from .loading import build_reader_model, fill_reader, wrap

ARCH_OF_KIND = {"extractive": "bert", "t5": "t5", "fid": "t5", "causal": "gpt"}


def arches(task) -> tuple[str, ...]:
    return (ARCH_OF_KIND[task.reader],)


def featurize(task, examples: list[dict], tokenizer, seq_length: int) -> list[dict]:
    task.tokenizer = tokenizer  # dev predictions decode FiD answers with it
    reader = wrap(task.reader, None, tokenizer, task.reader_config)
    return [reader.featurize(e["question"], e["docs"], e["answers"]) for e in examples]


class ReaderSpec(ModelSpec):
    def __init__(self, cfg, vocab_size: int, kind: str, reader_cfg, tensors: Optional[dict], source: str) -> None:
        super().__init__(cfg, vocab_size)
        self.arch = ARCH_OF_KIND[kind]
        self.kind, self.reader_cfg, self.tensors, self.source = kind, reader_cfg, tensors, source
        self.missing: list[str] = []
        self.state = None

    def build_chunk(self, state, stage, device, dtype):
        if state.sp:
            raise ConfigError("reader training does not split sequences: drop --sequence-parallel")
        self.state = state
        model = build_reader_model(self.kind, self.cfg.model, state, self.vocab_size, self.cfg.train.seed, device,
                                   dtype)
        if self.tensors is not None:
            self.missing = fill_reader(model, self.kind, self.tensors, self.vocab_size,
                                       self.cfg.model.tie_embeddings, self.source)
        return model

    def reader(self, model, tokenizer=None):
        return wrap(self.kind, model, tokenizer, self.reader_cfg, self.state)

    def forward(self, model, batch, hidden=None):
        return self.reader(model).loss_terms(batch)

    def tokens_in(self, batch):
        key = "enc_tokens" if self.kind == "fid" else "tokens"
        return batch[key].numel()

    def nominal_count(self, micro_batch: int, seq_length: int) -> float:
        return float(micro_batch if self.kind == "extractive" else micro_batch * self.reader_cfg.answer_length)


def make_spec(task, cfg, vocab: int, tensors: dict, source: str) -> ReaderSpec:
    return ReaderSpec(cfg, vocab, task.reader, task.reader_config, tensors, source)


@torch.no_grad()
def predict_features(reader, features: list[dict], examples: list[dict], batch_size: int) -> list[str]:
    """Answers for already featurised questions (``examples`` give the passages' text back)."""
    was = reader.model.training
    reader.model.eval()
    out: list[str] = []
    try:
        for i in range(0, len(features), batch_size):
            batch = collate(features[i:i + batch_size], reader.device)
            if reader.kind == "extractive":
                for (k, s, e), ex in zip(reader.best_spans(batch), examples[i:i + batch_size]):
                    out.append(doc_context(ex["docs"][k])[s:e] if s >= 0 else "")
            else:
                out += [reader.tokenizer.decode(row).strip() for row in reader.greedy(batch)]
    finally:
        reader.model.train(was)
    return out


def dev_predictions(task, trainer, features: list[dict], examples: list[dict]) -> list[str]:
    reader = trainer.spec.reader(trainer.chunks[0], getattr(task, "tokenizer", None))
    return predict_features(reader, features, examples, trainer.cfg.train.micro_batch_size)
